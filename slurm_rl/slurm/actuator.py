"""``SlurmActuator``: the only code that changes a live Slurm, in one of three modes.

* ``shadow`` plans exactly what ``enforce`` would send, logs it and sends nothing.
* ``advise`` orders only: released jobs get ``Priority`` descending along the ranking, and a
  deferral the job_submit plugin set is released with ``StartTime=now``.
* ``enforce`` orders and places: a released job with a placement also gets
  ``ReqNodeList=<exactly its nodes> NumNodes=N-N`` (never over a ``ReqNodeList`` slurm-rl
  did not set: a user's ``--nodelist``, :mod:`slurm_rl.slurm.ownership`), one without a
  placement gets the decision's exclusion as ``ExcNodeList`` (under the safety rules of
  :mod:`slurm_rl.slurm.exclusion`: never a user's own, never one that strands the job); a
  held job's deferral is extended to ``now + extension`` but never past ``submit + cap``,
  after which Slurm decides. With ``migrate`` on, the decision's migrations of running jobs
  that opted in are requeued and pinned to their new nodes (:mod:`slurm_rl.slurm.migration`).

Updates are skipped when Slurm already shows the wanted value, and jobs that get the same
change share one ``scontrol update JobId=a,b,c`` call where Slurm takes a job list for all
its fields (:data:`BATCHABLE_FIELDS`; a pin goes one job a call). Priority changes are
held back within the limits of :mod:`slurm_rl.slurm.priority` (tolerance, hourly rate, cap
per cycle). Errors (job vanished, permission denied, timeout) are recorded per job in the
report, never raised.

With a journal (the daemon's store), every call is written down before it is sent and
settled after Slurm's answer; what an earlier cycle left unsettled is checked against Slurm
at the start of the next (:mod:`slurm_rl.journal`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from slurm_rl.core import Decision
from slurm_rl.journal import INTENDED, UNANSWERED, Entry, Intent, Journal, Settlement
from slurm_rl.slurm.client import SlurmClient, update_argv
from slurm_rl.slurm.errors import SlurmError, SlurmOutputError
from slurm_rl.slurm.journal import state_for, verdict
from slurm_rl.slurm.migration import RELEASE, Move, Refusal, plan_moves, release_when_pending
from slurm_rl.slurm.ownership import EXC, PIN, Ledger, Recall, exclusion_ledger, pin_ledger
from slurm_rl.slurm.plan import (
    BATCHABLE_FIELDS,
    ActuatorConfig,
    JobOutcome,
    Mode,
    Update,
    before_values,
    classify_error,
    outcomes_for,
    per_job_errors,
    plan,
    slurm_time,
)
from slurm_rl.slurm.priority import HOUR_S, PriorityBudget
from slurm_rl.slurm.proc import CommandResult
from slurm_rl.slurm.records import SlurmJob
from slurm_rl.slurm.reservations import reserved_nodes
from slurm_rl.slurm.source import SlurmSource, SlurmState, free_gpus, to_core_job

log = logging.getLogger(__name__)

# When the daemon's accepted Priority changes of these jobs were sent since a time (from its
# store, after a restart); None when it cannot say now (asked again next cycle).
PriorityRecall = Callable[[Sequence[str], float], dict[str, list[float]] | None]
# Names the rest of the package and the tests take from here (defined in plan.py).
__all__ = ["BATCHABLE_FIELDS", "ActuationReport", "ActuatorConfig", "JobOutcome", "Mode",
           "PriorityRecall",
           "SlurmActuator", "Update", "before_values", "classify_error", "outcomes_for",
           "per_job_errors", "plan", "slurm_time"]

@dataclass(frozen=True, slots=True)
class ActuationReport:
    mode: Mode
    time: float
    policy_id: str
    outcomes: tuple[JobOutcome, ...]
    commands: tuple[CommandResult, ...]
    # Priority changes the limits held back this cycle, by limit (tolerance, rate, cap).
    priority_withheld: Mapping[str, int] = dataclasses.field(default_factory=dict)
    # The journal entries of this cycle's calls (the record marks them recorded).
    intent_ids: tuple[int, ...] = ()
    # Pending jobs this daemon pinned in an earlier cycle: (job id, seconds since, reason).
    pinned_waiting: tuple[tuple[str, float, str], ...] = ()

    def outcome(self, job_id: str) -> JobOutcome | None:
        return next((o for o in self.outcomes if o.job_id == job_id), None)


# -- the actuator -------------------------------------------------------------------------


class SlurmActuator:
    """Applies decisions to Slurm through a :class:`SlurmClient`.

    :meth:`apply` reads job details from the state it is given: the shared loop hands it
    the :class:`SlurmState` the source built the decision's snapshot from (the loop's
    context); given none, it asks the client itself. It changes or clears only the
    ``ExcNodeList`` and ``ReqNodeList`` values it set itself, kept in two ledgers
    (:mod:`slurm_rl.slurm.ownership`): :attr:`exclusions`, whose ``recall`` (the daemon's
    audit trail) tells it which exclusions it set before a restart, and :attr:`pins`, the
    ledger given as ``pins`` (the daemon gives the source the same one, so that the
    snapshot sets aside the pending jobs someone else pinned).
    """

    def __init__(
        self,
        client: SlurmClient,
        config: ActuatorConfig | None = None,
        clock: Callable[[], float] = time.time,
        recall: Recall | None = None,
        pins: Ledger | None = None,
        journal: Journal | None = None,
        priority_recall: PriorityRecall | None = None,
    ) -> None:
        self.client = client
        self.config = config or ActuatorConfig()
        self.clock = clock
        self.journal = journal  # written ahead of every call (slurm_rl/journal.py)
        self._deferred_by_us: set[str] = set()
        # When each job's accepted Priority changes were sent (the hourly rate), and when
        # each pending job got the pin it holds (how long pinned jobs wait to start).
        self._priority_budget = PriorityBudget(self.config.priority_limits.updates_per_job_hour)
        # Asked once (until it answers) for the changes an earlier run of the daemon sent.
        self._priority_recall = priority_recall
        self._pinned_at: dict[str, float] = {}
        self._intents: list[int] = []
        self._settlements: list[Settlement] = []
        self.exclusions = exclusion_ledger(recall)
        self.pins = pins if pins is not None else pin_ledger()
        # Jobs requeued to move that were still completing when last looked at.
        self._restarting: set[str] = set()

    @property
    def mode(self) -> Mode:
        return self.config.mode

    @property
    def recall(self) -> Recall | None:
        """Where the exclusions this daemon set before a restart are looked up."""
        return self.exclusions.recall

    @recall.setter
    def recall(self, recall: Recall | None) -> None:
        self.exclusions.recall = recall

    def apply(self, decision: Decision, state: SlurmState | None = None, /) -> ActuationReport:
        """Carry ``decision`` out against ``state``, the Slurm state it was made on."""
        state = state or self._current_state()
        self._deferred_by_us &= set(state.managed)
        self._intents, self._settlements = [], []
        self._recover(state)  # before the ledgers ask the store what the daemon set
        # advise never sets an exclusion, so it need not know which ones are its own
        self.exclusions.sync(state.managed, ask=self.mode is not Mode.ADVISE)
        self.pins.sync(state.managed)
        waiting = self._pinned_waiting(state)
        planned = plan(decision, state, self.config, self._deferred_by_us,
                       self.exclusions.values, self.pins.values,
                       self._may_reprioritize(state, decision.promoted))
        outcomes = dict(planned.outcomes)
        commands: list[CommandResult] = []
        entries = self._write_ahead(planned.updates, decision.policy_id, state)
        for update, ids in zip(planned.updates, entries, strict=True):
            result = self._send(update)
            if result is not None:
                commands.append(result)
            for outcome in outcomes_for(update, result):
                outcome = _with_before(outcome, update, state.job(outcome.job_id))
                outcome = dataclasses.replace(outcome, note=planned.notes.get(outcome.job_id, ""))
                outcomes[outcome.job_id] = outcome
                self._remember(outcome, update, state.time)
                self._settle_later(ids.get(outcome.job_id), outcome)
        self._release_restarted(decision, state, outcomes, commands)
        self._move(decision, state, outcomes, commands)
        if self.journal is not None and self._settlements:
            self.journal.settle(self._settlements)
        ordered = tuple(outcomes[j] for j in sorted(outcomes, key=_order_key(decision)))
        withheld = dict(Counter(planned.withheld.values()))
        return ActuationReport(self.mode, state.time, decision.policy_id, ordered,
                               tuple(commands), withheld, tuple(self._intents), waiting)

    # -- the journal (write-ahead) -----------------------------------------------------

    def _journaling(self) -> bool:
        return self.journal is not None and self.mode is not Mode.SHADOW

    def _write_ahead(self, updates: Sequence[Update], policy_id: str, state: SlurmState
                     ) -> list[dict[str, int]]:
        """Store every job's part of every call before the first is sent; per update, the
        entry id of each of its jobs."""
        if not self._journaling() or not updates:
            return [{} for _ in updates]
        intents = [self._intent(update, job_id, update.argv, state)
                   for update in updates for job_id in update.job_ids]
        ids = self._intend(intents, policy_id, state)
        taken = iter(ids)
        return [{job_id: next(taken) for job_id in update.job_ids} for update in updates]

    def _intent(self, update: Update, job_id: str, argv: tuple[str, ...],
                state: SlurmState) -> Intent:
        job = state.job(job_id)
        names = [name for name, _ in update.fields]
        before = before_values(job, names) if job is not None else ()
        return Intent(job_id, update.kind, argv, update.fields, before)

    def _intend(self, intents: Sequence[Intent], policy_id: str, state: SlurmState) -> list[int]:
        assert self.journal is not None
        jobs = []
        for job_id in dict.fromkeys(intent.job_id for intent in intents):
            slurm_job = state.job(job_id)
            core = to_core_job(slurm_job) if slurm_job is not None else None
            if core is not None:
                jobs.append(core)
        ids = self.journal.intend(state.cluster, policy_id, state.time, intents, jobs)
        self._intents.extend(ids)
        return ids

    def _settle_later(self, entry_id: int | None, outcome: JobOutcome) -> None:
        if entry_id is not None and outcome.sent:
            self._settlements.append(Settlement(
                entry_id, state_for(outcome.ok, outcome.error_kind), outcome.returncode,
                outcome.error))

    def _recover(self, state: SlurmState) -> None:
        """Check what earlier cycles left in the journal against Slurm, and store it."""
        if not self._journaling():
            return
        assert self.journal is not None
        cluster = state.cluster
        left = self.journal.leftovers(cluster)
        if not left:
            return
        shown = {job.job_id: job for job in state.jobs.jobs}
        checked = [(entry, _checked(entry, shown)) for entry in left]
        self.journal.recover(cluster, state.time, self.mode.value, checked)
        counts = Counter(done.state for _, done in checked)
        log.warning("journal: %d calls an earlier cycle left unsettled or unrecorded, now "
                    "stored: %s", len(checked),
                    ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))

    def _move(self, decision: Decision, state: SlurmState, outcomes: dict[str, JobOutcome],
              commands: list[CommandResult]) -> None:
        """Requeue and re-pin the running jobs the decision moves (only when enabled)."""
        if not (self.config.migrate and decision.migrations) or self.mode is Mode.ADVISE:
            return
        for step in self._planned_moves(decision, state):
            if isinstance(step, Refusal):
                outcomes[step.job_id] = JobOutcome(step.job_id, step.kind, note=step.note)
            else:
                outcomes[step.job_id] = self._send_move(step, state, decision.policy_id,
                                                        commands)

    def _planned_moves(self, decision: Decision, state: SlurmState) -> list[Move | Refusal]:
        """The moves to send and the refusals: first on the job's own terms, then, when any
        move is left, against the GPUs free on its nodes now."""
        nodes = {node.name: node for node in state.nodes.nodes}

        def planned(free: Mapping[str, int] | None) -> list[Move | Refusal]:
            return list(plan_moves(decision, state.job, self.config.max_migrations, nodes,
                                   self.pins.values, free))

        steps = planned(None)
        if not any(isinstance(step, Move) for step in steps):
            return steps  # nothing to send: no need to read the nodes
        free = self._free_now(state)
        if isinstance(free, str):
            return [Refusal(step.job_id, "target_busy", free) if isinstance(step, Move)
                    else step for step in steps]
        return planned(free)

    def _free_now(self, state: SlurmState) -> dict[str, int] | str:
        """The GPUs free on each node now, read again just before the moves (the decision's
        snapshot may be seconds old, and this cycle's releases may have started jobs); a
        note for the audit trail when they cannot be read (then nothing moves: a requeue
        cannot be undone)."""
        try:
            nodes = self.client.nodes().nodes
        except (SlurmError, SlurmOutputError) as exc:
            log.warning("moves skipped this cycle: the nodes could not be read: %s", exc)
            return f"not moved: the nodes could not be read again ({exc})"
        reserved = reserved_nodes(state.reservations, self.clock())
        return {node.name: free_gpus(node, reserved) for node in nodes}

    def _send_move(self, move: Move, state: SlurmState, policy_id: str,
                   commands: list[CommandResult]) -> JobOutcome:
        outcome = self._send_move_calls(move, state, policy_id, commands)
        if self._journaling():
            self._settle_later(self._intents[-1], outcome)
        return outcome

    def _send_move_calls(self, move: Move, state: SlurmState, policy_id: str,
                         commands: list[CommandResult]) -> JobOutcome:
        argv = ("scontrol", "requeue", move.job_id)
        note = f"restarts on {','.join(move.placement.nodes)}"
        if self.mode is Mode.SHADOW:
            pin = " ".join(update_argv([move.job_id], move.pin))
            log.info("shadow: would run %s, then %s", " ".join(argv), pin)
            return JobOutcome(move.job_id, "migrate", argv, note=note)
        if self._journaling():  # the requeue and the pin it leads to, as one entry
            update = Update("migrate", (move.job_id,), tuple(move.pin.items()))
            self._intend([self._intent(update, move.job_id, argv, state)], policy_id, state)
        requeued = self.client.requeue_job(move.job_id)
        commands.append(requeued)
        if not requeued.ok:
            error = requeued.stderr.strip() or f"exit {requeued.returncode}"
            return JobOutcome(move.job_id, "migrate", argv, True, requeued.returncode, error,
                              classify_error(error), note=note)
        pinned = self.client.update_jobs([move.job_id], move.pin)
        commands.append(pinned)
        then: list[tuple[str, ...]] = []
        if pinned.ok:
            self.pins.remember(move.job_id, move.pin[PIN])
            then.append(update_argv([move.job_id], move.pin))
        else:  # pending soon, and ours: the next cycle places it
            note += f"; the pin failed ({pinned.stderr.strip() or pinned.returncode})"
        released = release_when_pending(self.client, move.job_id, self.config.restart_wait_s)
        if released is None or not released.ok:
            self._restarting.add(move.job_id)
            note += "; released on a later cycle"
        else:
            commands.append(released)
            then.append(update_argv([move.job_id], RELEASE))
        log.info("moved job %s: %s", move.job_id, note)
        return JobOutcome(move.job_id, "migrate", argv, True, 0, note=note, then=tuple(then))

    def _release_restarted(self, decision: Decision, state: SlurmState,
                           outcomes: dict[str, JobOutcome],
                           commands: list[CommandResult]) -> None:
        """Release moved jobs that were still completing when they were requeued (a job the
        decision ranks is released by the plan already)."""
        for job_id in sorted(self._restarting):
            job = state.job(job_id)
            if job is None or not job.is_pending or job_id in decision.ranking:
                self._restarting.discard(job_id)
            elif job.eligible_time is not None and job.eligible_time > state.time:
                update = Update("release", (job_id,), tuple(RELEASE.items()))
                (ids,) = self._write_ahead([update], decision.policy_id, state)
                result = self._send(update)
                if result is not None:
                    commands.append(result)
                    self._restarting.discard(job_id)
                (outcomes[job_id],) = outcomes_for(update, result)
                self._settle_later(ids.get(job_id), outcomes[job_id])

    def _current_state(self) -> SlurmState:
        """Slurm's state now, for a caller that hands none (the loop always does)."""
        return SlurmSource(self.client, clock=self.clock).state()

    def _send(self, update: Update) -> CommandResult | None:
        if self.mode is Mode.SHADOW:
            log.info("shadow: would run %s", " ".join(update.argv))
            return None
        result = self.client.update_jobs(update.job_ids, dict(update.fields))
        level = logging.INFO if result.ok else logging.WARNING
        log.log(
            level,
            "%s -> exit %d %s",
            " ".join(update.argv),
            result.returncode,
            result.stderr.strip(),
        )
        return result

    def _remember(self, outcome: JobOutcome, update: Update, now: float) -> None:
        if not (outcome.sent and outcome.ok):
            return
        if outcome.kind == "defer":
            self._deferred_by_us.add(outcome.job_id)
        fields = dict(update.fields)
        if EXC in fields:
            self.exclusions.remember(outcome.job_id, fields[EXC])
        if PIN in fields:
            self.pins.remember(outcome.job_id, fields[PIN])
            self._pinned_at[outcome.job_id] = now
        if "Priority" in fields:
            self._priority_budget.note(outcome.job_id, now)

    def _may_reprioritize(self, state: SlurmState, urgent: frozenset[str] = frozenset()
                          ) -> Callable[[str], bool]:
        """Whether a job is still under its hourly number of priority changes, the last kept
        for an ``urgent`` job (:class:`~slurm_rl.slurm.priority.PriorityBudget`); the changes
        an earlier run sent are asked for once, after a restart."""
        if self._priority_recall is not None and self._priority_budget.limit is not None:
            earlier = self._priority_recall(list(state.managed), state.time - HOUR_S)
            if earlier is not None:
                self._priority_recall = None
                self._priority_budget.add_earlier(earlier)
        return self._priority_budget.may_change(state.time, state.managed, urgent)

    def _pinned_waiting(self, state: SlurmState) -> tuple[tuple[str, float, str], ...]:
        """Pending jobs holding a pin of this daemon's, with how long they have held it
        (from when this process sent it, or first saw it after a restart) and Slurm's
        reason for not starting them."""
        mine = self.pins.values
        waiting = []
        for job_id, job in state.managed.items():
            pin = mine.get(job_id)
            if not (job.is_pending and pin and frozenset(job.required_nodes) == pin):
                continue
            since = self._pinned_at.setdefault(job_id, state.time)
            waiting.append((job_id, state.time - since, job.reason))
        self._pinned_at = {job: t for job, t in self._pinned_at.items()
                           if job in state.managed and state.managed[job].is_pending}
        return tuple(sorted(waiting, key=lambda item: -item[1]))

    def inherit(self, previous: SlurmActuator) -> None:
        """Take over what ``previous`` set (a config reload builds a new actuator)."""
        self._deferred_by_us |= previous._deferred_by_us
        self.exclusions.inherit(previous.exclusions)
        self.pins.inherit(previous.pins)
        self._priority_budget.sent = {**previous._priority_budget.sent,
                                      **self._priority_budget.sent}
        self._priority_recall = previous._priority_recall
        self._pinned_at = {**previous._pinned_at, **self._pinned_at}


def _with_before(outcome: JobOutcome, update: Update, job: SlurmJob | None) -> JobOutcome:
    if job is None:
        return outcome
    before = before_values(job, [name for name, _ in update.fields])
    return dataclasses.replace(outcome, before=before)


def _checked(entry: Entry, shown: Mapping[str, SlurmJob]) -> Settlement:
    """An unsettled entry checked against Slurm; a settled one (its record failed) as is."""
    if entry.state in (INTENDED, UNANSWERED):
        return verdict(entry, shown)
    return Settlement(entry.entry_id, entry.state, entry.rc, entry.answer)


def _order_key(decision: Decision) -> Callable[[str], tuple[int, str]]:
    rank = {job_id: i for i, job_id in enumerate(decision.ranking)}
    return lambda job_id: (rank.get(job_id, len(rank)), job_id)
