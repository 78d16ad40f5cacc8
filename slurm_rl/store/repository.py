"""Writing and reading the audit trail.

SQLite (WAL mode, so readers never block the daemon's writes) is the embedded default;
any SQLAlchemy URL works, PostgreSQL included. Every write is one short transaction: a cycle
and its decisions land together or not at all, and nothing already recorded is touched.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import create_engine, event, make_url, select, update
from sqlalchemy.engine import URL, Engine
from sqlalchemy.exc import ArgumentError, IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from slurm_rl.core import ClusterSnapshot, Decision, FinishedJob, Job
from slurm_rl.errors import InputError
from slurm_rl.store import migrate
from slurm_rl.store.models import CycleRow, DecisionRow, IntentRow, JobRow, OutcomeRow


@dataclass(frozen=True)
class ActionRecord:
    """What the actuator did for one job, and what Slurm answered."""

    job_id: str
    action: str  # e.g. "release", "pin", "hold", "priority", "noop", "shadow"
    argv: tuple[str, ...] | None = None
    rc: int | None = None
    answer: str | None = None
    # JSON-able extras: the values before the change (revert), the policy's reasons (explain).
    details: dict[str, Any] | None = None


def job_key(cluster: str, job_id: str) -> str:
    return f"{cluster}:{job_id}"


_EXAMPLE_URLS = ("sqlite:////var/lib/slurm-rl/slurm-rl.sqlite or "
                 "postgresql+psycopg://user@host/db")


def require_store(url: str) -> None:
    """For commands that read a store the daemon made: a SQLite file that is not there is an
    error (SQLite would quietly create an empty one, and the command report "nothing")."""
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        raise InputError(f"no store at {_shown(_parsed(url))} (has the daemon run with this "
                         "config?)")


def sqlite_file(url: str) -> Path | None:
    """The file of a file-backed SQLite store URL (None for other databases, ``:memory:``
    and ``file:`` URIs)."""
    parsed = _parsed(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") \
            or database.startswith("file:"):
        return None
    return Path(database)


def make_engine(url: str) -> Engine:
    parsed = _parsed(url)
    try:
        engine = create_engine(parsed)
    except (ArgumentError, ValueError) as exc:  # an unknown dialect, a port that is no number
        raise InputError(f"store URL '{_shown(parsed)}': {str(exc).splitlines()[0]}; give a "
                         f"SQLAlchemy URL, e.g. {_EXAMPLE_URLS}") from None
    except ImportError as exc:  # mysql://, postgresql+psycopg2://: a driver not installed
        raise InputError(f"store URL '{_shown(parsed)}': the driver for {parsed.drivername} "
                         f"is not installed ({exc.name or exc}); use one of "
                         f"{_EXAMPLE_URLS}") from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _parsed(url: str) -> URL:
    try:
        return make_url(url)
    except (ArgumentError, ValueError) as exc:
        # The text may hold a password: show it only up to the scheme.
        raise InputError(f"store URL '{url.split(':', 1)[0]}...': {str(exc).splitlines()[0]}; "
                         f"give a SQLAlchemy URL, e.g. {_EXAMPLE_URLS}") from None


def _shown(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def shown_url(url: str) -> str:
    """A store URL as it may be printed or logged: its password as ``***``, and a URL
    that does not parse only up to its scheme (the rest may be a password)."""
    try:
        return _shown(make_url(url))
    except (ArgumentError, ValueError):
        scheme, colon, _ = url.partition(":")
        return f"{scheme}:..." if colon and scheme.isidentifier() else "(a URL that does not parse)"


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA busy_timeout=10000")  # first: switching to WAL may wait too
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


log = logging.getLogger("slurm_rl.store")
_T = TypeVar("_T")
# The job rows this process knows are stored (so that a cycle need not look up every pending
# job); past this many it starts again, at the cost of one lookup a job.
KNOWN_JOBS_LIMIT = 200_000


class Store:
    def __init__(self, url: str, *, upgrade: bool = True) -> None:
        self.engine = make_engine(url)
        if upgrade:
            migrate.upgrade(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._known_jobs: set[str] = set()

    def _remember(self, added: set[str]) -> None:
        """Job rows a committed transaction stored (a rolled-back job row is not known)."""
        self._known_jobs |= added
        if len(self._known_jobs) > KNOWN_JOBS_LIMIT:
            self._known_jobs.clear()

    def _healing(self, write: Callable[[], _T]) -> _T:
        """Run the transaction ``write``; when it breaks a foreign key because a job row this
        process believed stored is gone (retention deleted the row of a job that has run or
        waited longer than ``retention_days``, or an admin cleaned the store), forget what it
        believed and run it once more, writing the row again. Without this every later
        cycle would fail on that job, and the daemon's heartbeat would stop."""
        try:
            return write()
        except IntegrityError:
            if not self._known_jobs:
                raise
            log.warning("store: a job row this daemon had stored is gone (retention?): "
                        "storing it again")
            self._known_jobs.clear()
            return write()

    def record_cycle(
        self,
        snapshot: ClusterSnapshot,
        decision: Decision,
        actions: Sequence[ActionRecord],
        *,
        mode: str,
        duration_s: float = 0.0,
        intents: Sequence[int] = (),
    ) -> int:
        """Store one cycle: new jobs, and a decision row for every job an action touched; the
        journal's ``intents`` of the cycle's calls are marked recorded by it."""
        cluster = snapshot.cluster.name

        def write() -> int:
            added: set[str] = set()
            with self._sessions.begin() as session:
                self._add_new_jobs(session, cluster, snapshot.pending, snapshot.time, added)
                # A moved job may have started before the daemon first saw it pending.
                moved = [r.job for r in snapshot.running if r.job.job_id in decision.migrations]
                self._add_new_jobs(session, cluster, moved, snapshot.time, added)
                cycle = _cycle_row(snapshot, decision, mode, duration_s)
                session.add(cycle)
                session.flush()
                session.add_all(_decision_rows(cluster, cycle.id, decision, actions))
                if intents:
                    session.execute(update(IntentRow).where(IntentRow.id.in_(intents))
                                    .values(cycle_id=cycle.id))
            self._remember(added)
            return cycle.id

        return self._healing(write)

    def record_actions(self, cluster: str, time: float, policy_id: str, mode: str,
                       jobs: Sequence[Job], actions: Sequence[ActionRecord]) -> int:
        """Store changes made outside a decision cycle (``slurm-rl revert``) as one cycle of
        their own, so the audit trail holds every change made in Slurm."""
        def write() -> int:
            added: set[str] = set()
            with self._sessions.begin() as session:
                self._add_new_jobs(session, cluster, jobs, time, added)
                cycle = CycleRow(cluster=cluster, snapshot_time=time,
                                 recorded_at=datetime.now(UTC), policy_id=policy_id,
                                 actuator_mode=mode, pending_jobs=len(jobs), running_jobs=0,
                                 free_gpus=0)
                session.add(cycle)
                session.flush()
                session.add_all(_decision_rows(cluster, cycle.id, Decision(policy_id, ()),
                                               actions))
            self._remember(added)
            return cycle.id

        return self._healing(write)

    def record_outcomes(self, cluster: str, finished: Iterable[FinishedJob], source: str) -> int:
        """Store outcomes not stored yet (the same job seen again is ignored)."""
        finished = list(finished)

        def write() -> int:
            added = 0
            with self._sessions.begin() as session:
                for done in finished:
                    key = job_key(cluster, done.job.job_id)
                    if session.get(OutcomeRow, key) is not None:
                        continue
                    self._add_new_jobs(session, cluster, [done.job], done.start_time, set())
                    session.add(_outcome_row(key, done, source))
                    added += 1
            # a finished job gets no more decisions: no need to remember its row
            self._known_jobs -= {job_key(cluster, done.job.job_id) for done in finished}
            return added

        return self._healing(write)

    def _add_new_jobs(
        self, session: Session, cluster: str, jobs: Iterable[Job], seen: float, added: set[str]
    ) -> None:
        """Job rows for jobs not stored yet; their keys go to ``added``, which the caller
        makes known once the transaction commits (a job row lost to a failed commit, e.g.
        a locked store, must be written again, or its outcome would break the foreign key
        forever)."""
        for job in jobs:
            key = job_key(cluster, job.job_id)
            if key in self._known_jobs or key in added:
                continue
            if session.get(JobRow, key) is None:
                session.add(_job_row(cluster, key, job, seen))
            added.add(key)

    @contextlib.contextmanager
    def writing(self) -> Iterator[Session]:
        """One write transaction (slurm_rl/store/journal.py); the jobs :meth:`add_jobs` adds
        in it count as stored once it commits."""
        added: set[str] = set()
        try:
            with self._sessions.begin() as session:
                session.info["added_jobs"] = added
                yield session
        except IntegrityError:
            self._known_jobs.clear()  # a job row it believed stored may be gone: look again
            raise
        self._remember(added)

    def add_jobs(self, session: Session, cluster: str, jobs: Iterable[Job], seen: float) -> None:
        """Job rows for the jobs not stored yet, inside a :meth:`writing` transaction."""
        self._add_new_jobs(session, cluster, jobs, seen, session.info["added_jobs"])

    def decisions_for(self, cluster: str, job_id: str) -> list[DecisionRow]:
        with self._sessions() as session:
            query = select(DecisionRow).where(DecisionRow.job_key == job_key(cluster, job_id))
            return list(session.scalars(query.order_by(DecisionRow.id)))

    def outcome_for(self, cluster: str, job_id: str) -> OutcomeRow | None:
        with self._sessions() as session:
            return session.get(OutcomeRow, job_key(cluster, job_id))

    def session(self) -> Session:
        """A read session (for ``explain`` and ``revert``); close it, or use ``with``."""
        return self._sessions()

    def count(self, model: type[Any]) -> int:
        with self._sessions() as session:
            return len(session.scalars(select(model)).all())


def _cycle_row(
    snapshot: ClusterSnapshot, decision: Decision, mode: str, duration: float
) -> CycleRow:
    return CycleRow(
        cluster=snapshot.cluster.name,
        snapshot_time=snapshot.time,
        recorded_at=datetime.now(UTC),
        policy_id=decision.policy_id,
        actuator_mode=mode,
        pending_jobs=len(snapshot.pending),
        running_jobs=len(snapshot.running),
        free_gpus=sum(snapshot.free_gpus),
        duration_s=duration,
    )


def _decision_rows(
    cluster: str, cycle_id: int, decision: Decision, actions: Sequence[ActionRecord]
) -> list[DecisionRow]:
    ranks = {job_id: rank for rank, job_id in enumerate(decision.ranking)}
    rows = []
    for action in actions:
        rank = ranks.get(action.job_id)
        placement = decision.nodes_for(action.job_id)
        rows.append(DecisionRow(
            cycle_id=cycle_id,
            job_key=job_key(cluster, action.job_id),
            policy_id=decision.policy_id,
            rank=rank,
            score=decision.scores[rank] if rank is not None and decision.scores else None,
            nodes=",".join(placement.nodes) if placement else None,
            action=action.action,
            argv=list(action.argv) if action.argv else None,
            slurm_rc=action.rc,
            slurm_answer=action.answer,
            details=action.details or None,
        ))
    return rows


def _job_row(cluster: str, key: str, job: Job, seen: float) -> JobRow:
    return JobRow(
        job_key=key, cluster=cluster, job_id=job.job_id, user=job.user, partition=job.partition,
        num_gpus=job.num_gpus, num_nodes=job.num_nodes, gpu_type=job.gpu_type,
        time_limit_s=job.time_limit, submit_time=job.submit_time, first_seen=seen,
    )


def _outcome_row(key: str, done: FinishedJob, source: str) -> OutcomeRow:
    return OutcomeRow(
        job_key=key, start_time=done.start_time, end_time=done.end_time,
        nodes=",".join(done.placement.nodes), state=done.state, exit_code=done.exit_code,
        source=source, recorded_at=datetime.now(UTC),
    )
