"""The audit trail of a live cycle: what the actuator did per job, and how jobs ended.

The store gets one cycle row per healthy cycle, and one decision row per job whose action
differs from the last one this daemon stored for it. A queue that does not change therefore
costs one row per cycle, not one per pending job (the previous decision still stands: the
actuator found Slurm already holding it, or would send the same command again). Finished
jobs are stored from the snapshot once each; when the store cannot be written they are kept
and written with the next cycle, so an outcome is never lost to a store hiccup.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurm_rl.core import ClusterSnapshot, Decision, FinishedJob
from slurm_rl.slurm.actuator import ActuationReport, JobOutcome
from slurm_rl.store.repository import ActionRecord, Store

OUTCOME_SOURCE = "squeue"
# Finished jobs kept for a store that is down: about a day of a busy cluster's completions.
MAX_BUFFERED_OUTCOMES = 100_000

Signature = tuple[object, ...]


def action_record(outcome: JobOutcome) -> ActionRecord:
    """One actuator outcome as a store row: the action, the argv, Slurm's answer."""
    answer = f"{outcome.error_kind}: {outcome.error}" if outcome.error else None
    return ActionRecord(
        job_id=outcome.job_id,
        action=outcome.kind,
        argv=outcome.argv or None,
        rc=outcome.returncode,
        answer=answer,
    )


def _signature(record: ActionRecord, decision: Decision) -> Signature:
    placement = decision.placements.get(record.job_id)
    nodes = placement.nodes if placement is not None else None
    return (decision.policy_id, record.action, record.argv, record.rc, record.answer, nodes)


@dataclass(frozen=True, slots=True)
class CycleSummary:
    """What one recorded cycle saw and did (for the daemon's log line)."""

    cycle_id: int
    pending: int
    running: int
    finished: int
    ranked: int
    placed: int
    sent: int
    errors: int
    recorded_actions: int


class StoreRecorder:
    """The loop's recorder (``recorder.record(snapshot, decision, report)``) for the daemon."""

    def __init__(self, store: Store, mode: str) -> None:
        self.store = store
        self.mode = mode
        self.cycle_started = time.monotonic()
        self.last: CycleSummary | None = None
        self.cycle_stored = False  # whether this cycle's row made it (outcomes may still fail)
        self._stored: dict[str, Signature] = {}
        self._unrecorded: deque[tuple[str, FinishedJob]] = deque(maxlen=MAX_BUFFERED_OUTCOMES)

    def start_cycle(self) -> None:
        self.cycle_started = time.monotonic()
        self.cycle_stored = False
        self.last = None

    def record(self, snapshot: ClusterSnapshot, decision: Decision, result: object) -> None:
        if not isinstance(result, ActuationReport):
            raise TypeError(f"the daemon's actuator returned {type(result).__name__}")
        cluster = snapshot.cluster.name
        # Outcomes are queued first: if the cycle row cannot be written, they still are later.
        self._unrecorded.extend((cluster, done) for done in snapshot.finished)
        fresh = self._fresh_actions(snapshot, decision, result.outcomes)
        duration = time.monotonic() - self.cycle_started
        cycle_id = self.store.record_cycle(
            snapshot, decision, [record for record, _ in fresh], mode=self.mode,
            duration_s=duration,
        )
        self.cycle_stored = True
        self._stored.update((record.job_id, signature) for record, signature in fresh)
        self.flush()
        self.last = _summary(cycle_id, snapshot, decision, result, len(fresh))

    def flush(self) -> int:
        """Write the finished jobs not stored yet; returns how many were new to the store."""
        added = 0
        while self._unrecorded:
            cluster = self._unrecorded[0][0]
            batch = _take_cluster(self._unrecorded, cluster)
            try:
                added += self.store.record_outcomes(cluster, batch, OUTCOME_SOURCE)
            except BaseException:
                self._unrecorded.extendleft((cluster, done) for done in reversed(batch))
                raise
        return added

    @property
    def unrecorded_outcomes(self) -> int:
        return len(self._unrecorded)

    def _fresh_actions(
        self, snapshot: ClusterSnapshot, decision: Decision, outcomes: Iterable[JobOutcome]
    ) -> list[tuple[ActionRecord, Signature]]:
        pending = {job.job_id for job in snapshot.pending}
        # Forget jobs that left the queue: a requeued job gets its first decision stored again.
        self._stored = {k: v for k, v in self._stored.items() if k in pending}
        fresh = []
        for outcome in outcomes:
            record = action_record(outcome)
            signature = _signature(record, decision)
            if self._stored.get(record.job_id) != signature:
                fresh.append((record, signature))
        return fresh


def _take_cluster(
    queue: deque[tuple[str, FinishedJob]], cluster: str
) -> list[FinishedJob]:
    batch: list[FinishedJob] = []
    while queue and queue[0][0] == cluster:
        batch.append(queue.popleft()[1])
    return batch


def _summary(
    cycle_id: int,
    snapshot: ClusterSnapshot,
    decision: Decision,
    report: ActuationReport,
    recorded: int,
) -> CycleSummary:
    outcomes: Sequence[JobOutcome] = report.outcomes
    return CycleSummary(
        cycle_id=cycle_id,
        pending=len(snapshot.pending),
        running=len(snapshot.running),
        finished=len(snapshot.finished),
        ranked=len(decision.ranking),
        placed=len(decision.placements),
        sent=len(report.commands),
        errors=sum(1 for o in outcomes if o.error),
        recorded_actions=recorded,
    )
