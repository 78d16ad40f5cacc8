"""The logged window a retrain learns from: finished jobs (request joined with outcome) and
the GPU nodes they ran on, read from the store.

Bad or thin logs raise :class:`RetrainSkipped` with one line saying why; the retrain is then
skipped and the active policy stays.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass

from sqlalchemy import Text, cast, exists, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from slurm_rl.core import Node
from slurm_rl.errors import SlurmRLError
from slurm_rl.store import migrate
from slurm_rl.store.models import DecisionRow, JobRow, OutcomeRow
from slurm_rl.store.nodes import stored_nodes

DAY = 86400.0
MIN_JOBS = 2  # one job orders nothing: there is no queue to learn from


class RetrainSkipped(SlurmRLError):
    """Retraining cannot or need not run now (one line why); nothing changes."""


class StoreRowDamaged(SlurmRLError):
    """A store row the window needs cannot be read (one line: table, row, column); the retrain
    fails and the active policy stays."""


@dataclass(frozen=True)
class LoggedJob:
    job_id: str
    user: str
    partition: str
    submit_time: float
    start_time: float
    end_time: float
    num_gpus: int
    num_nodes: int
    gpu_type: str | None
    time_limit_s: float | None
    nodes: tuple[str, ...]
    state: str

    @property
    def runtime(self) -> float:
        return self.end_time - self.start_time


@dataclass(frozen=True)
class LoggedWindow:
    cluster: str
    start: float
    end: float
    jobs: tuple[LoggedJob, ...]
    nodes: tuple[Node, ...]

    @property
    def median_runtime(self) -> float:
        return statistics.median(job.runtime for job in self.jobs)


def check_schema(engine: Engine) -> None:
    """Skip (never upgrade) a store at an older schema: a daemon of the older release may be
    writing to it."""
    try:
        current, head = migrate.revisions(engine)
    except SQLAlchemyError as exc:
        raise RetrainSkipped(f"store not readable: {str(exc).splitlines()[0]}") from exc
    if current != head:
        raise RetrainSkipped(
            f"store schema is at revision {current or 'none'}, retraining needs {head}: "
            "upgrade it by starting the daemon of this release")


def load_window(engine: Engine, cluster: str | None, days: float, now: float) -> LoggedWindow:
    """Jobs that ended in the last ``days`` days before ``now`` (of ``cluster``, default:
    the cluster with the most of them) and that the daemon saw pending (it stored a decision
    for them): a job already running or finished when the daemon first saw it was not
    scheduled by any policy, and its queueing says nothing about one."""
    check_schema(engine)
    start = now - days * DAY
    with Session(engine) as session:
        query = (select(JobRow, OutcomeRow).join(OutcomeRow, OutcomeRow.job_key == JobRow.job_key)
                 .where(OutcomeRow.end_time >= start, OutcomeRow.end_time <= now,
                        exists().where(DecisionRow.job_key == JobRow.job_key))
                 .order_by(JobRow.submit_time, JobRow.job_id))
        rows = [(row[0], row[1]) for row in session.execute(query)]
        first_starts = _first_starts(session)
    if not rows:
        raise RetrainSkipped(f"no finished jobs the daemon scheduled in the last {days:g} days")
    chosen = cluster or Counter(job.cluster for job, _ in rows).most_common(1)[0][0]
    nodes = stored_nodes(engine, chosen)
    if not nodes:
        raise RetrainSkipped(
            f"no GPU nodes stored for cluster {chosen!r} (rows from before schema 0002?): "
            "the daemon stores them with its next cycle")
    names = {node.name for node in nodes}
    jobs, unusable = [], 0
    for job, outcome in rows:
        logged = (_logged(job, outcome, first_starts.get(job.job_key))
                  if job.cluster == chosen else None)
        if logged is None or not set(logged.nodes) <= names:
            unusable += int(job.cluster == chosen)
            continue
        jobs.append(logged)
    if len(jobs) < MIN_JOBS:
        raise RetrainSkipped(
            f"{len(jobs)} usable finished job(s) of cluster {chosen!r} in the last {days:g} days "
            f"({unusable} unusable): at least {MIN_JOBS} are needed")
    return LoggedWindow(chosen, min(j.submit_time for j in jobs), now, tuple(jobs),
                        tuple(nodes))


def _first_starts(session: Session) -> dict[str, float]:
    """Per job key, when the first of its runs began, for jobs the daemon moved (a move's row
    keeps the run it ended, ``details.moved_from``): Slurm resets a requeued job's start
    time, so its outcome holds the last run only."""
    # The column is read as text and decoded here, not by the JSON type: a damaged row
    # (SQLite keeps any text) then gets a message naming it, not a bare JSONDecodeError.
    query = select(DecisionRow.id, DecisionRow.job_key, cast(DecisionRow.details, Text)).where(
        DecisionRow.action == "migrate", DecisionRow.slurm_rc == 0)
    found: dict[str, float] = {}
    for row_id, key, stored in session.execute(query):
        started = _moved_from_start(_details(row_id, key, stored))
        if started is not None:
            found[key] = min(started, found.get(key, started))
    return found


def _details(row_id: int, job_key: str, stored: str | None) -> object:
    """A decision row's ``details`` decoded from its stored text (None: SQL NULL)."""
    if stored is None:
        return None
    try:
        return json.loads(stored)
    except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
        raise StoreRowDamaged(
            f"store table decisions, row {row_id} (job {job_key}): column 'details' is not "
            f"JSON ({exc}); repair or delete that row") from exc


def _moved_from_start(details: object) -> float | None:
    moved = details.get("moved_from") if isinstance(details, dict) else None
    started = moved.get("start_time") if isinstance(moved, dict) else None
    return float(started) if isinstance(started, int | float) else None


def _logged(job: JobRow, outcome: OutcomeRow, first_start: float | None = None
            ) -> LoggedJob | None:
    """A finished job that really ran (start before end, on named nodes), else None; a moved
    job's run time counts from its first start (its runs and the short restarts between)."""
    nodes = tuple(n for n in outcome.nodes.split(",") if n)
    if outcome.end_time <= outcome.start_time or not nodes or job.num_gpus <= 0:
        return None
    start = outcome.start_time if first_start is None else min(first_start, outcome.start_time)
    if start < job.submit_time - 1.0:
        return None
    return LoggedJob(
        job_id=job.job_id, user=job.user, partition=job.partition,
        submit_time=job.submit_time, start_time=start,
        end_time=outcome.end_time, num_gpus=job.num_gpus,
        num_nodes=job.num_nodes or len(nodes), gpu_type=job.gpu_type,
        time_limit_s=job.time_limit_s, nodes=nodes, state=outcome.state,
    )
