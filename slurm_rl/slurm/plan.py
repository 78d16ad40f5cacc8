"""What the actuator sends, worked out without side effects (slurm_rl/slurm/actuator.py
applies it): the types of a planned call and its outcome, the plan of one decision against
what Slurm shows, and the reading of Slurm's answers."""

from __future__ import annotations

import dataclasses
import enum
import math
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ClusterShell.NodeSet import NodeSet

from slurm_rl.core import Decision, Placement
from slurm_rl.slurm.client import update_argv
from slurm_rl.slurm.deferral import begin_is_ours
from slurm_rl.slurm.eligibility import node_conflict
from slurm_rl.slurm.exclusion import plan_exclusion, stale_exclusions
from slurm_rl.slurm.onetype import FEATURES, OneType
from slurm_rl.slurm.ownership import EXC, PIN, fold
from slurm_rl.slurm.priority import (
    PRIORITY_CEILING,
    PriorityLimits,
    above_the_held,
    plan_priorities,
)
from slurm_rl.slurm.proc import CommandResult, is_unreachable
from slurm_rl.slurm.records import SlurmJob, SlurmNode, numeric_id
from slurm_rl.slurm.source import SlurmState
from slurm_rl.slurm.waiting import BAD_CONSTRAINTS

_WHOLE_LIST = re.compile(r"invalid job id \d+(?:_\d+)?,")
_FOR_JOB = re.compile(r"^(?P<message>.*?)\s+for job (?P<job>\d+(?:_\d+)?)\s*$")

class Mode(enum.StrEnum):
    """The operating mode, the one type for it: the site config's ``mode`` (its values are the
    config's strings) and the actuator's (module docstring of :mod:`.actuator`)."""

    SHADOW = "shadow"
    ADVISE = "advise"
    ENFORCE = "enforce"


@dataclass(frozen=True, slots=True)
class ActuatorConfig:
    mode: Mode = Mode.SHADOW
    defer_extension_s: float = 30.0
    defer_cap_s: float = 600.0
    # A held job's deferral is extended once less than this is left of it.
    renew_margin_s: float = 10.0
    priority_floor: int = 1000
    migrate: bool = False  # requeue and re-pin the running jobs a decision moves (opt-in jobs)
    max_migrations: int = 2  # per cycle
    restart_wait_s: float = 3.0  # how long a move waits for its requeued job to be pending
    # Priority changes held back (slurm_rl/slurm/priority.py); the default holds none back.
    priority_limits: PriorityLimits = PriorityLimits()
    # A released untyped job left to Slurm's choice of nodes stays on one GPU type
    # (slurm_rl/slurm/onetype.py); the daemon turns it on unless allow_mixed_gpu_types.
    one_gpu_type: bool = False


@dataclass(frozen=True, slots=True)
class Update:
    """One planned change: jobs that all get the same fields."""

    kind: str
    job_ids: tuple[str, ...]
    fields: tuple[tuple[str, str], ...]

    @property
    def argv(self) -> tuple[str, ...]:
        return update_argv(self.job_ids, dict(self.fields))


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What happened to one job: the action, the argv sent (if any) and Slurm's answer.

    ``kind``: place, exclude, release, prioritize, defer, unexclude, unpin (a call was planned;
    ``exclude``: an unplaced job gets an ``ExcNodeList``, ``unexclude``: only the
    actuator's own ``ExcNodeList`` is cleared); migrate (a running job requeued and pinned
    elsewhere); unchanged (Slurm already had it); left_to_slurm (deferral cap reached);
    not_pending (ranked but no longer pending); not_running, not_movable, target_busy,
    over_cap (a move refused).
    ``error_kind``: vanished, started, permission, rejected, timeout, unreachable.
    ``note``: why part of the decision was not applied (e.g. a user's own ``--exclude`` left
    alone). ``then``:
    the further calls Slurm accepted for the job in the same action (a move's pin and
    release), for the audit trail.
    """

    job_id: str
    kind: str
    argv: tuple[str, ...] = ()
    sent: bool = False
    returncode: int | None = None
    error: str = ""
    error_kind: str = ""
    # What Slurm showed for each field the call changes, before it (for ``slurm-rl revert``).
    before: tuple[tuple[str, str], ...] = ()
    note: str = ""
    then: tuple[tuple[str, ...], ...] = ()

    @property
    def ok(self) -> bool:
        return not self.error


# -- planning (pure) ----------------------------------------------------------------------


def slurm_time(epoch: float) -> str:
    """An absolute StartTime in the local-time form scontrol parses."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(math.ceil(epoch)))


def is_ours_to_release(job: SlurmJob, deferred_by_us: set[str], cap_s: float) -> bool:
    """True when the job's begin time is the plugin's or ours (never a user's --begin, nor
    a later begin its user set on a deferred job: :func:`begin_is_ours`)."""
    return begin_is_ours(job, cap_s, job.job_id in deferred_by_us)


def _users_pin(
    job: SlurmJob, placement: Placement | None, mine: frozenset[str] | None
) -> tuple[Placement | None, str]:
    """The placement, or None with a note when it would overwrite a ``ReqNodeList`` slurm-rl
    did not set (a user's ``--nodelist``). The snapshot sets such jobs aside, so only a
    decision made on other data gets here."""
    current = frozenset(job.required_nodes)
    if placement is None or not current or current in (mine, frozenset(placement.nodes)):
        return placement, ""
    return None, (f"placement on {fold(placement.nodes)} dropped: its "
                  f"--nodelist={fold(current)} is the user's")


def _eligible(
    job: SlurmJob, placement: Placement | None, known: Mapping[str, SlurmNode], note: str
) -> tuple[Placement | None, str]:
    """The placement, or None with a note when Slurm would never run the job on its nodes
    (outside its partitions, or against its constraint: :mod:`slurm_rl.slurm.eligibility`);
    the job is then released without nodes, and Slurm picks them."""
    if placement is None:
        return placement, note
    conflict = node_conflict(job, placement.nodes, known)
    if conflict is None:
        return placement, note
    return None, f"placement on {fold(placement.nodes)} dropped: {conflict}, and Slurm " \
        "would never start it there"


def _placement_fields(job: SlurmJob, placement: Placement | None) -> dict[str, str]:
    fields: dict[str, str] = {}
    if placement is not None and set(job.required_nodes) != set(placement.nodes):
        # one node (most placements) needs no folding; ClusterShell's costs ~0.2 ms a job
        nodes = placement.nodes
        fields[PIN] = nodes[0] if len(nodes) == 1 else str(NodeSet.fromlist(nodes))
        count = placement.num_nodes
        fields["NumNodes"] = f"{count}-{count}"
    return fields


def _release_fields(
    job: SlurmJob, priority: int | None, now: float, ours: bool
) -> dict[str, str]:
    fields: dict[str, str] = {}
    if priority is not None and job.priority != priority:
        fields["Priority"] = str(priority)
    if ours and job.eligible_time is not None and job.eligible_time > now:
        fields["StartTime"] = "now"
    return fields


def _release_kind(fields: Mapping[str, str]) -> str:
    if PIN in fields:
        return "place"
    if fields.get(EXC):
        return "exclude"
    if "StartTime" in fields:
        return "release"
    if "Priority" in fields:
        return "prioritize"
    return "constrain" if FEATURES in fields else "unexclude"


def _hold_target(job: SlurmJob, now: float, config: ActuatorConfig) -> float | None:
    """Until when a held job should stay deferred; None once its cap is reached."""
    cap_end = (job.submit_time or now) + config.defer_cap_s
    if now >= cap_end:
        return None
    return min(now + config.defer_extension_s, cap_end)


@dataclass
class _Plan:
    updates: list[Update]
    outcomes: dict[str, JobOutcome]
    notes: dict[str, str] = dataclasses.field(default_factory=dict)
    withheld: dict[str, str] = dataclasses.field(default_factory=dict)  # priority, by job


@dataclass(frozen=True, slots=True)
class _Memory:
    """What this actuator itself set, by job id (so it never touches a user's values)."""

    deferred: set[str]
    excluded: Mapping[str, frozenset[str]]
    pinned: Mapping[str, frozenset[str]]
    may_reprioritize: Callable[[str], bool] = lambda _job: True  # under the hourly rate


# The fields ``scontrol update JobId=a,b,...`` applies to every job of the list. Measured
# on Slurm 22.05.8 (tests/slurm/test_live.py): StartTime, ExcNodeList and Priority are; with
# ReqNodeList or NumNodes in the call it answers "Invalid job ID a,b" and changes none of
# the jobs, so a pin goes one job a call.
BATCHABLE_FIELDS = frozenset({"StartTime", "ExcNodeList", "Priority"})


def _merge(updates: Sequence[Update]) -> list[Update]:
    """Jobs with identical fields share one call, at the first job's place in the order,
    when Slurm takes a job list for every one of those fields (:data:`BATCHABLE_FIELDS`)."""
    merged: dict[tuple[str, tuple[tuple[str, str], ...]], list[str]] = {}
    single: list[tuple[int, Update]] = []
    order: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    for index, update in enumerate(updates):
        if {key for key, _ in update.fields} <= BATCHABLE_FIELDS:
            key = (update.kind, update.fields)
            order.setdefault(key, index)
            merged.setdefault(key, []).extend(update.job_ids)
        else:
            single.extend((index, Update(update.kind, (job_id,), update.fields))
                          for job_id in update.job_ids)
    batched = [(order[key], Update(key[0], tuple(ids), key[1])) for key, ids in merged.items()]
    return [update for _, update in sorted(batched + single, key=lambda pair: pair[0])]


def plan(
    decision: Decision,
    state: SlurmState,
    config: ActuatorConfig,
    deferred_by_us: set[str],
    excluded_by_us: Mapping[str, frozenset[str]] | None = None,
    pinned_by_us: Mapping[str, frozenset[str]] | None = None,
    may_reprioritize: Callable[[str], bool] | None = None,
) -> _Plan:
    """What to send for ``decision`` given what Slurm shows now (no side effects). The
    ``ExcNodeList`` and ``ReqNodeList`` values slurm-rl set are ``excluded_by_us`` and
    ``pinned_by_us``; any other non-empty value is someone else's and never changed."""
    placing = config.mode in (Mode.ENFORCE, Mode.SHADOW)
    memory = _Memory(deferred_by_us, excluded_by_us or {}, pinned_by_us or {},
                     may_reprioritize or (lambda _job: True))
    pending = {j.job_id: j for j in state.managed.values() if j.is_pending}
    planned = _Plan([], {
        job_id: JobOutcome(job_id, "not_pending")
        for job_id in decision.ranking
        if job_id not in pending
    })
    ranked = [pending[job_id] for job_id in decision.ranking if job_id in pending]
    extra = _placing_fields(decision, ranked, state, memory, planned.notes,
                            config.one_gpu_type) if placing else {}
    promoted = set(decision.forward)
    if placing:  # the jobs holding (or about to hold) a pin of ours, first
        pinned = {job.job_id for job in ranked
                  if PIN in extra.get(job.job_id, {}) or job.job_id in memory.pinned}
        ranked, promoted = placed_first(ranked, pinned), promoted | pinned
    else:  # advise: the placed jobs too (Slurm picks their nodes)
        promoted = set(decision.promoted)
    _release_updates(ranked, extra, state, config, memory, planned, promoted,
                     decision.promoted)
    if placing:
        # Jobs no longer released keep no exclusion of ours (cleared with a deferral, if any).
        released = set(decision.ranking)
        unranked = [job for job_id, job in pending.items() if job_id not in released]
        stale = stale_exclusions(unranked, memory.excluded)
        held = [pending[job_id] for job_id in decision.holds if job_id in pending]
        _hold_updates(held, state.time, config, memory.deferred, planned, stale)
        for job_id in stale:
            planned.updates.append(Update("unexclude", (job_id,), ((EXC, ""),)))
        for job_id in stranded_pins(unranked, memory.pinned):
            planned.updates.append(Update("unpin", (job_id,), ((PIN, ""),)))
    planned.updates = _merge(planned.updates)
    return planned


def stranded_pins(jobs: Iterable[SlurmJob], mine: Mapping[str, frozenset[str]]) -> list[str]:
    """Jobs that Slurm keeps pending for good (``BadConstraints``, priority 0) under a pin of
    ours: the nodes left the job's partitions or lost a feature it asks for after the pin
    was sent (the actuator never sends such a pin, slurm_rl/slurm/eligibility.py). The pin is
    cleared without a Priority, and slurmctld then drops the reason and computes the
    priority again (job_mgr.c, the ``FAIL_BAD_CONSTRAINTS`` branch of a job update)."""
    return [job.job_id for job in jobs
            if job.reason == BAD_CONSTRAINTS and job.required_nodes
            and frozenset(job.required_nodes) == mine.get(job.job_id)]


def placed_first(ranked: Sequence[SlurmJob], pinned: Collection[str]) -> list[SlurmJob]:
    """The released jobs in the order their priorities should hold: the jobs the decision
    pins (a new pin, or one of ours they hold) first, then the others, each in ranking
    order. A pinned job is to start now on GPUs that are free; below an unplaced
    higher-ranked job, Slurm's backfill keeps it waiting for that job's reservation
    (measured live: pinned jobs idle up to 121 s with Reason Priority), and the daemon's
    decision to start it now would not hold."""
    if not pinned:
        return list(ranked)
    return ([job for job in ranked if job.job_id in pinned]
            + [job for job in ranked if job.job_id not in pinned])


def _placing_fields(
    decision: Decision,
    ranked: Sequence[SlurmJob],
    state: SlurmState,
    memory: _Memory,
    notes: dict[str, str],
    one_gpu_type: bool = False,
) -> dict[str, dict[str, str]]:
    """Per released job, the placement, ExcNodeList and (for an untyped job left to Slurm's
    choice) Features fields (enforce and shadow only)."""
    out: dict[str, dict[str, str]] = {}
    one_type = OneType(state.nodes.nodes) if one_gpu_type else None
    known = {node.name: node for node in state.nodes.nodes}
    for job in ranked:
        placement, pin_note = _users_pin(
            job, decision.placements.get(job.job_id), memory.pinned.get(job.job_id)
        )
        placement, pin_note = _eligible(job, placement, known, pin_note)
        step = plan_exclusion(
            job,
            placement,
            decision.exclusions.get(job.job_id, ()),
            memory.excluded.get(job.job_id),
            state.nodes.nodes,
        )
        fields = _placement_fields(job, step.placement)
        fields.update(step.fields)
        if one_type is not None and step.placement is None:
            constraint = one_type.constraint(job)
            if constraint is not None and constraint != job.features:
                fields[FEATURES] = constraint
        out[job.job_id] = fields
        note = "; ".join(n for n in (pin_note, step.note) if n)
        if note:
            notes[job.job_id] = note
    return out


def _release_updates(
    ranked: Sequence[SlurmJob],
    placing: Mapping[str, Mapping[str, str]],
    state: SlurmState,
    config: ActuatorConfig,
    memory: _Memory,
    planned: _Plan,
    promoted: Collection[str],
    urgent: Collection[str] = frozenset(),
) -> None:
    """Placement, exclusion and release for the released jobs, and a priority for the
    ``promoted`` ones (:func:`promoted_order`), highest first; the tolerance holds none of
    the ``urgent`` ones back (placed now or brought forward)."""
    order = promoted_order(ranked, promoted, state, config.priority_floor)
    current = {job.job_id: job.priority for job in state.managed.values()}
    # only the promoted jobs' values are sent: the others keep theirs, planned around
    priorities = plan_priorities(order, current, config.priority_floor,
                                 config.priority_limits, memory.may_reprioritize,
                                 fixed=frozenset(order) - frozenset(promoted),
                                 exempt=urgent)
    planned.withheld.update({job: why for job, why in priorities.withheld.items()
                             if job in promoted})
    for job in ranked:
        ours = is_ours_to_release(job, memory.deferred, config.defer_cap_s)
        fields = dict(placing.get(job.job_id, {}))
        wanted = priorities.wanted.get(job.job_id) if job.job_id in promoted else None
        fields.update(_release_fields(job, wanted, state.time, ours))
        if fields:
            update = Update(_release_kind(fields), (job.job_id,), tuple(fields.items()))
            planned.updates.append(update)
        else:
            note = planned.notes.get(job.job_id, "")
            planned.outcomes[job.job_id] = JobOutcome(job.job_id, "unchanged", note=note)


def promoted_order(ranked: Sequence[SlurmJob], promoted: Collection[str], state: SlurmState,
                   floor: int) -> list[str]:
    """The job ids whose priorities the walk plans: the ``promoted`` released jobs (the ones
    the decision starts now, the pinned ones waiting for their nodes, the ones the fairness
    guard brings forward) in ``ranked``'s order, above every other pending job that still
    holds a priority of ours (:func:`~slurm_rl.slurm.priority.above_the_held`). Every other
    job keeps the priority Slurm gives it (the site's multifactor, ties by submit time):
    under load a job may change its priority only about twice an hour, and a full order sent
    at release is then frozen in whatever place each job got, whereas Slurm's own order
    never goes stale (docs/fairness.md)."""
    held = {job.job_id: job.priority
            for job in sorted(state.managed.values(), key=lambda job: numeric_id(job.job_id))
            if job.is_pending and job.priority is not None
            and floor <= job.priority < PRIORITY_CEILING}
    return above_the_held([job.job_id for job in ranked if job.job_id in promoted], held)


def _hold_updates(
    held: Sequence[SlurmJob],
    now: float,
    config: ActuatorConfig,
    deferred_by_us: set[str],
    planned: _Plan,
    stale: list[str],
) -> None:
    """Extend the deferrals of held jobs; a deferred job in ``stale`` also has the
    actuator's exclusion cleared in the same call (and leaves ``stale``)."""
    outcomes, updates = planned.outcomes, planned.updates
    for job in sorted(held, key=lambda j: numeric_id(j.job_id)):
        if not is_ours_to_release(job, deferred_by_us, config.defer_cap_s):
            continue  # a user's own --begin, or submitted while the daemon was down
        target = _hold_target(job, now, config)
        if target is None:
            outcomes[job.job_id] = JobOutcome(job.job_id, "left_to_slurm")
            continue
        eligible = job.eligible_time or 0.0
        if eligible >= min(now + config.renew_margin_s, target):
            outcomes[job.job_id] = JobOutcome(job.job_id, "unchanged")
            continue
        fields: tuple[tuple[str, str], ...] = (("StartTime", slurm_time(target)),)
        if job.job_id in stale:
            stale.remove(job.job_id)
            fields += ((EXC, ""),)
        updates.append(Update("defer", (job.job_id,), fields))


# -- Slurm's answers ----------------------------------------------------------------------


def classify_error(message: str) -> str:
    """The cause of a refused call, from Slurm's message (measured on 22.05.8: ``Invalid job
    id specified`` and ``Job has already finished`` for a job that is gone, ``Invalid node
    name specified`` for a node list Slurm refuses). A whole job list refused at once
    (``Invalid job ID 1,2``: a field Slurm takes for one job only) is a refusal of the call,
    not a vanished job. ``Job is no longer pending execution``: the job started between the
    snapshot and the call (``started``; it is still there, and a pin sent to it may have
    resized it unless slurm.conf has ``disable_job_shrink``: docs/slurm.md)."""
    text = message.lower()
    if _WHOLE_LIST.search(text):
        return "rejected"
    if "no longer pending" in text:
        return "started"
    if "invalid job id" in text or "already finished" in text:
        return "vanished"
    if "permission denied" in text or "invalid user id" in text or "access" in text:
        return "permission"
    if "did not answer within" in text:
        return "timeout"
    if is_unreachable(message):
        return "unreachable"
    return "rejected"


def per_job_errors(result: CommandResult) -> dict[str, str]:
    """``<message> for job <id>`` lines of scontrol's stderr, by job id."""
    errors: dict[str, str] = {}
    for line in result.stderr.splitlines():
        match = _FOR_JOB.match(line.strip())
        if match:
            errors[match.group("job")] = match.group("message")
    return errors


def outcomes_for(update: Update, result: CommandResult | None) -> list[JobOutcome]:
    """One outcome per job of a call; a failure without job ids counts for all of them."""
    argv = update.argv
    if result is None:
        return [JobOutcome(j, update.kind, argv) for j in update.job_ids]
    errors = per_job_errors(result) if not result.ok else {}
    general = "" if result.ok or errors else (result.stderr.strip() or f"exit {result.returncode}")
    outcomes = []
    for job_id in update.job_ids:
        error = errors.get(job_id, general)
        rc = result.returncode if error else 0
        kind = classify_error(error) if error else ""
        outcomes.append(JobOutcome(job_id, update.kind, argv, True, rc, error, kind))
    return outcomes


def before_values(job: SlurmJob, fields: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The job's current value of each field an update changes, as scontrol would take it
    back (an empty string: the field was not set), and its ``Nice`` beside a ``Priority``:
    slurmctld resets a job's nice when its priority is set. StartTime is a Unix time."""
    current = {
        PIN: ",".join(job.required_nodes),
        "NumNodes": str(job.node_count) if job.node_count else "",
        "Priority": str(job.priority) if job.priority is not None else "",
        "StartTime": f"{job.eligible_time:.0f}" if job.eligible_time else "",
        EXC: ",".join(job.excluded_nodes),
        FEATURES: job.features,
    }
    values = tuple((name, current.get(name, "")) for name in fields)
    if "Priority" in fields:  # setting a Priority zeroes the job's --nice (Slurm 22.05-25.11)
        values += (("Nice", str(job.nice)),)
    return values
