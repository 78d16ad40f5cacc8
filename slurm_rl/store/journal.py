"""The actuator's write-ahead journal in the store (the ``intents`` table).

The actuator (slurm_rl/journal.py) writes each job's part of each call here before it
sends it, settles it after Slurm's answer, and the cycle's record marks it recorded. What an
earlier cycle left (the daemon killed mid-cycle, a call without an answer, a cycle whose
record failed) comes back from :meth:`StoreJournal.leftovers`; once checked against Slurm,
:meth:`StoreJournal.recover` stores it as a decision row of a cycle of its own, so
``explain``, ``revert`` and a restarted daemon's ledgers (slurm_rl/store/exclusions.py) see
every call that was ever sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from ClusterShell.NodeSet import NodeSet
from sqlalchemy import or_, select

from slurm_rl.core import Job
from slurm_rl.journal import APPLIED, INTENDED, UNANSWERED, Entry, Intent, Settlement
from slurm_rl.store.models import CycleRow, DecisionRow, IntentRow
from slurm_rl.store.repository import Store, job_key

# The decision rows of recovered calls say which check found them so (explain shows it).
RECOVERED = "recovered"


class StoreJournal:
    """:class:`~slurm_rl.journal.Journal` on a :class:`Store`. ``store`` is asked at each
    call: the daemon's reload may open another store."""

    def __init__(self, store: Callable[[], Store]) -> None:
        self._store = store

    @property
    def store(self) -> Store:
        return self._store()

    def intend(self, cluster: str, policy_id: str, at: float, intents: Sequence[Intent],
               jobs: Sequence[Job]) -> list[int]:
        rows = [_intent_row(cluster, policy_id, at, intent) for intent in intents]
        with self.store.writing() as session:
            self.store.add_jobs(session, cluster, jobs, at)
            session.add_all(rows)
            session.flush()
            return [row.id for row in rows]

    def settle(self, settlements: Sequence[Settlement]) -> None:
        if not settlements:
            return
        with self.store.writing() as session:
            for done in settlements:
                row = session.get(IntentRow, done.entry_id)
                if row is not None:
                    row.state, row.slurm_rc = done.state, done.rc
                    row.slurm_answer = done.answer or None

    def leftovers(self, cluster: str) -> list[Entry]:
        query = (select(IntentRow)
                 .where(IntentRow.cluster == cluster,
                        or_(IntentRow.cycle_id.is_(None),
                            IntentRow.state.in_((INTENDED, UNANSWERED))))
                 .order_by(IntentRow.id))
        with self.store.session() as session:
            return [_entry(row) for row in session.scalars(query)]

    def recover(self, cluster: str, at: float, mode: str,
                checked: Sequence[tuple[Entry, Settlement]]) -> None:
        """One cycle row per policy, a decision row per entry; the entries are settled and
        marked recorded by it, all in one transaction."""
        if not checked:
            return
        by_policy: dict[str, list[tuple[Entry, Settlement]]] = {}
        for pair in checked:
            by_policy.setdefault(pair[0].policy_id, []).append(pair)
        with self.store.writing() as session:
            for policy_id, pairs in by_policy.items():
                cycle = CycleRow(cluster=cluster, snapshot_time=at, recorded_at=datetime.now(UTC),
                                 policy_id=policy_id, actuator_mode=mode, pending_jobs=0,
                                 running_jobs=0, free_gpus=0)
                session.add(cycle)
                session.flush()
                for entry, done in pairs:
                    session.add(_decision_row(cluster, cycle.id, entry, done))
                    row = session.get(IntentRow, entry.entry_id)
                    if row is not None:
                        row.state, row.slurm_rc = done.state, done.rc
                        row.slurm_answer = done.answer or None
                        row.cycle_id = cycle.id


def _intent_row(cluster: str, policy_id: str, at: float, intent: Intent) -> IntentRow:
    return IntentRow(cluster=cluster, job_id=intent.job_id, policy_id=policy_id, created=at,
                     kind=intent.kind, argv=list(intent.argv), fields=dict(intent.fields),
                     before=dict(intent.before) or None, state=INTENDED)


def _entry(row: IntentRow) -> Entry:
    intent = Intent(row.job_id, row.kind, tuple(row.argv), tuple(row.fields.items()),
                    tuple((row.before or {}).items()))
    return Entry(row.id, row.job_id, row.policy_id, row.created, intent, row.state,
                 row.slurm_rc, row.slurm_answer or "")


def _decision_row(cluster: str, cycle_id: int, entry: Entry, done: Settlement) -> DecisionRow:
    fields = dict(entry.intent.fields)
    pin = fields.get("ReqNodeList")
    details: dict[str, Any] = {RECOVERED: {"entry": entry.entry_id, "state": done.state,
                                           "sent_at": entry.time}}
    if entry.intent.before:
        details["before"] = dict(entry.intent.before)
    answer = None if done.state == APPLIED else f"{done.state}: {done.answer}".rstrip(": ")
    return DecisionRow(
        cycle_id=cycle_id, job_key=job_key(cluster, entry.job_id), policy_id=entry.policy_id,
        rank=None, score=None, nodes=",".join(NodeSet(pin)) if pin else None,
        action=entry.intent.kind, argv=list(entry.intent.argv), slurm_rc=done.rc,
        slurm_answer=answer, details=details,
    )
