"""The audit trail of a live cycle: what the actuator did per job, and how jobs ended.

The store gets one cycle row per healthy cycle, and one decision row per job whose action
differs from the last one this daemon stored for it. A queue that does not change therefore
costs one row per cycle, not one per pending job (the previous decision still stands: the
actuator found Slurm already holding it, or would send the same command again). Finished
jobs are stored from the snapshot once each (and, when configured, from the jobcomp/filetxt
log for jobs squeue has forgotten); when the store cannot be written they are kept and
written with the next cycle, so an outcome is never lost to a store hiccup.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_rl.core import ClusterSnapshot, Decision, FinishedJob, RunningJob
from slurm_rl.daemon import accounting, jobcomp
from slurm_rl.daemon.accounting import AccountingReader
from slurm_rl.daemon.jobcomp import JobcompLog
from slurm_rl.ops.reasons import merge
from slurm_rl.slurm.actuator import ActuationReport, JobOutcome
from slurm_rl.store.nodes import NodeRecorder
from slurm_rl.store.repository import ActionRecord, Store

# One JSON object per stored decision, on its own line (docs/operations.md): job names,
# comments and users are data, and json.dumps keeps any newline or quote inside one line.
decisions_log = logging.getLogger("slurm_rl.decisions")
_cycle_log = logging.getLogger("slurm_rl.daemon")  # the daemon's own lines

OUTCOME_SOURCE = "squeue"
# Finished jobs kept for a store that is down: about a day of a busy cluster's completions.
MAX_BUFFERED_OUTCOMES = 100_000

Signature = tuple[object, ...]
MOVE_REFUSALS = frozenset({"not_running", "not_movable", "target_busy", "over_cap"})
Queued = tuple[str, str, FinishedJob]  # cluster, source, job
# A pinned job Slurm has not started after this long gets a decision row saying so (and one
# more each time Slurm's reason changes); one that starts within a few cycles costs none.
NOTABLE_PIN_WAIT_S = 30.0


def action_record(outcome: JobOutcome, why: Mapping[str, Any] | None = None) -> ActionRecord:
    """One actuator outcome as a store row: the action, the argv, Slurm's answer, and in
    ``details`` the values before the change (for revert), why part of the decision was not
    applied (``note``), the further calls Slurm accepted (``then``: a move's pin, which a
    restarted daemon reads back, slurm_rl/store/exclusions.py) and the policy's reasons."""
    answer = f"{outcome.error_kind}: {outcome.error}" if outcome.error else None
    details: dict[str, Any] = {"before": dict(outcome.before)} if outcome.before else {}
    if outcome.note:
        details["note"] = outcome.note
    if outcome.then:
        details["then"] = [list(argv) for argv in outcome.then]
    return ActionRecord(
        job_id=outcome.job_id,
        action=outcome.kind,
        argv=outcome.argv or None,
        rc=outcome.returncode,
        answer=answer,
        details=merge(details or None, dict(why) if why else None),
    )


def _with_run(record: ActionRecord, run: RunningJob) -> ActionRecord:
    """A move's row keeps the run it ended: Slurm resets a requeued job's start time, and
    retraining counts the job's run time from its first start (slurm_rl/retrain/window.py)."""
    moved_from = {"nodes": list(run.placement.nodes), "start_time": run.start_time}
    return dataclasses.replace(record, details={**(record.details or {}), "moved_from": moved_from})


def _signature(record: ActionRecord, decision: Decision) -> Signature:
    """What makes a decision new: a pinned job's Slurm reason for not starting counts (a row
    when it changes, for explain), the time it has waited does not."""
    placement = decision.nodes_for(record.job_id)
    nodes = placement.nodes if placement is not None else None
    waiting = (record.details or {}).get("waiting")
    reason = waiting.get("reason") if isinstance(waiting, dict) else None
    return (decision.policy_id, record.action, record.argv, record.rc, record.answer, reason,
            nodes)


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
    actions: Mapping[str, int] = field(default_factory=dict)  # stored rows by action
    job_errors: Mapping[str, int] = field(default_factory=dict)  # scontrol errors by kind
    oldest_wait_s: float = 0.0  # how long the longest-waiting pending job has waited
    # Pending jobs holding an earlier cycle's pin of ours (placed, not started), the oldest's
    # age, and the priority changes the limits held back (slurm_rl/slurm/priority.py).
    pinned_waiting: int = 0
    pinned_oldest_s: float = 0.0
    priority_withheld: Mapping[str, int] = field(default_factory=dict)


class StoreRecorder:
    """The loop's recorder (``recorder.record(snapshot, decision, report)``) for the daemon."""

    def __init__(self, store: Store, mode: str, jobcomp_log: JobcompLog | None = None) -> None:
        self.store = store
        self.mode = mode
        self.jobcomp = jobcomp_log
        self.accounting: AccountingReader | None = None  # sacct, when turned on
        # Anything with ``explanations`` ({job_id: why}) for the decision being recorded.
        self.explainer: object | None = None
        self.cycle_started = time.monotonic()
        self.last: CycleSummary | None = None
        self.cycle_stored = False  # whether this cycle's row made it (outcomes may still fail)
        self._stored: dict[str, Signature] = {}
        self._unrecorded: deque[Queued] = deque(maxlen=MAX_BUFFERED_OUTCOMES)
        self._nodes = NodeRecorder()  # retraining calibrates its scenario on them

    def start_cycle(self) -> None:
        self.cycle_started = time.monotonic()
        self.cycle_stored = False
        self.last = None

    def record(self, snapshot: ClusterSnapshot, decision: Decision, result: object) -> None:
        if not isinstance(result, ActuationReport):
            raise TypeError(f"the daemon's actuator returned {type(result).__name__}")
        cluster = snapshot.cluster.name
        # Outcomes are queued first: if the cycle row cannot be written, they still are later.
        # squeue's go first: when both sources report a job, its outcome keeps squeue's.
        self._unrecorded.extend((cluster, OUTCOME_SOURCE, done) for done in snapshot.finished)
        fresh = self._fresh_actions(snapshot, decision, result.outcomes, result.pinned_waiting)
        duration = time.monotonic() - self.cycle_started
        cycle_id = self.store.record_cycle(
            snapshot, decision, [record for record, _ in fresh], mode=self.mode,
            duration_s=duration, intents=result.intent_ids,
        )
        self.cycle_stored = True
        self._nodes(self.store.engine, snapshot.cluster, snapshot.time)
        self._stored.update((record.job_id, signature) for record, signature in fresh)
        _log_decisions(cycle_id, decision, [record for record, _ in fresh])
        self._queue_jobcomp(snapshot)
        self._queue_accounting(cluster, snapshot.time)
        self.flush()
        if self.jobcomp is not None:
            self.jobcomp.commit()
        self.last = _summary(cycle_id, snapshot, decision, result, [r for r, _ in fresh])

    def flush(self) -> int:
        """Write the finished jobs not stored yet; returns how many were new to the store."""
        added = 0
        while self._unrecorded:
            cluster, source, _ = self._unrecorded[0]
            batch = _take_batch(self._unrecorded, cluster, source)
            try:
                added += self.store.record_outcomes(cluster, batch, source)
            except BaseException:
                self._unrecorded.extendleft((cluster, source, d) for d in reversed(batch))
                raise
        return added

    def _queue_jobcomp(self, snapshot: ClusterSnapshot) -> None:
        """Outcomes from the jobcomp log for jobs the store knows and squeue no longer shows
        (see daemon/jobcomp.py)."""
        if self.jobcomp is None:
            return
        completed = self.jobcomp.read_new()
        if not completed:
            return
        cluster = snapshot.cluster.name
        known = jobcomp.known_jobs(self.store, cluster, (c.job_id for c in completed))
        active = {job.job_id for job in snapshot.pending}
        active |= {run.job.job_id for run in snapshot.running}
        found = jobcomp.outcomes(completed, known, active)
        self._unrecorded.extend((cluster, jobcomp.SOURCE, done) for done in found)

    def _queue_accounting(self, cluster: str, now: float) -> None:
        """Outcomes from sacct for decided jobs that have none (see daemon/accounting.py)."""
        if self.accounting is not None:
            found = self.accounting.read(self.store, cluster, now)
            self._unrecorded.extend((cluster, accounting.SOURCE, done) for done in found)

    @property
    def unrecorded_outcomes(self) -> int:
        return len(self._unrecorded)

    def _fresh_actions(
        self, snapshot: ClusterSnapshot, decision: Decision, outcomes: Iterable[JobOutcome],
        pinned_waiting: Sequence[tuple[str, float, str]] = (),
    ) -> list[tuple[ActionRecord, Signature]]:
        pending = {job.job_id for job in snapshot.pending}
        runs = {run.job.job_id: run for run in snapshot.running}
        # Forget jobs that left the queue: a requeued job gets its first decision stored again.
        # A running job's refused move is kept, or a policy asking again every cycle would
        # store one row a cycle.
        self._stored = {k: v for k, v in self._stored.items()
                        if k in pending or (k in runs and v[1] in MOVE_REFUSALS)}
        fresh = []
        reasons: Mapping[str, Any] = getattr(self.explainer, "explanations", None) or {}
        waiting = {job_id: {"pinned_s": round(age, 1), "reason": reason}
                   for job_id, age, reason in pinned_waiting if age >= NOTABLE_PIN_WAIT_S}
        for outcome in outcomes:
            record = action_record(outcome, reasons.get(outcome.job_id))
            if outcome.job_id in waiting:
                record = dataclasses.replace(record, details={**(record.details or {}),
                                                              "waiting": waiting[outcome.job_id]})
            if outcome.kind == "migrate" and outcome.returncode == 0 and outcome.job_id in runs:
                record = _with_run(record, runs[outcome.job_id])
            signature = _signature(record, decision)
            if not _same_decision(self._stored.get(record.job_id), signature):
                fresh.append((record, signature))
        return fresh


def _same_decision(stored: Signature | None, new: Signature) -> bool:
    """True when ``new`` repeats the stored decision: the same signature, or Slurm now holding
    what the stored action sent (``unchanged``, same policy and nodes) — the case of a placed
    job that Slurm has not started by the next cycle."""
    if stored is None:
        return False
    if stored == new:
        return True
    policy, action, *_, reason, nodes = new
    return action == "unchanged" and (stored[0], stored[-2], stored[-1]) == (policy, reason, nodes)


def _take_batch(queue: deque[Queued], cluster: str, source: str) -> list[FinishedJob]:
    batch: list[FinishedJob] = []
    while queue and queue[0][:2] == (cluster, source):
        batch.append(queue.popleft()[2])
    return batch


def _summary(
    cycle_id: int,
    snapshot: ClusterSnapshot,
    decision: Decision,
    report: ActuationReport,
    recorded: Sequence[ActionRecord],
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
        recorded_actions=len(recorded),
        actions=dict(Counter(r.action for r in recorded)),
        job_errors=dict(Counter(o.error_kind for o in outcomes if o.error)),
        oldest_wait_s=max((snapshot.time - j.submit_time for j in snapshot.pending), default=0.0),
        pinned_waiting=len(report.pinned_waiting),
        pinned_oldest_s=max((age for _, age, _ in report.pinned_waiting), default=0.0),
        priority_withheld=dict(report.priority_withheld),
    )


def _log_decisions(cycle_id: int, decision: Decision, records: Sequence[ActionRecord]) -> None:
    if not decisions_log.isEnabledFor(logging.INFO):
        return
    ranks = {job_id: rank for rank, job_id in enumerate(decision.ranking)}
    for record in records:
        rank = ranks.get(record.job_id)
        placement = decision.nodes_for(record.job_id)
        line = {
            "event": "decision", "cycle": cycle_id, "job": record.job_id,
            # 1-based, as explain shows it (the store keeps 0-based)
            "policy": decision.policy_id, "action": record.action,
            "rank": None if rank is None else rank + 1,
            "score": decision.scores[rank] if rank is not None and decision.scores else None,
            "nodes": list(placement.nodes) if placement else None,
            "argv": list(record.argv) if record.argv else None,
            "rc": record.rc, "answer": record.answer,
        }
        decisions_log.info("%s", json.dumps(line, separators=(",", ":")))


def log_cycle(summary: CycleSummary, policy: str, mode: str, took: float) -> None:
    """The daemon's one line for a cycle."""
    # The cycle number is the store's cycle id: the one explain and the JSON lines show.
    # Quiet cycles (nothing sent, stored or finished) only show at debug level.
    busy = summary.sent or summary.errors or summary.recorded_actions or summary.finished
    _cycle_log.log(
        logging.INFO if busy else logging.DEBUG,
        "cycle %d (%s, %s): %d pending, %d running, %d finished; ranked %d, placed %d%s; "
        "%d scontrol calls, %d errors%s; %d decisions stored; %.3f s",
        summary.cycle_id, policy, mode, summary.pending, summary.running, summary.finished,
        summary.ranked, summary.placed, _pinned_waiting(summary), summary.sent, summary.errors,
        _priority_withheld(summary), summary.recorded_actions, took,
    )


def _pinned_waiting(summary: CycleSummary) -> str:
    if not summary.pinned_waiting:
        return ""
    return (f" ({summary.pinned_waiting} pinned earlier, not started; oldest "
            f"{summary.pinned_oldest_s:.0f} s)")


def _priority_withheld(summary: CycleSummary) -> str:
    if not summary.priority_withheld:
        return ""
    counts = ", ".join(f"{n} {why}" for why, n in sorted(summary.priority_withheld.items()))
    return f"; priority changes held back: {counts}"
