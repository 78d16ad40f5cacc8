"""Moving running jobs live: ``scontrol requeue``, then a pin to the chosen nodes.

A decision's :attr:`~slurm_rl.core.Decision.migrations` reach Slurm only when the admin turned
them on (``[actuator] migrate = true``) and the actuator enforces (shadow mode logs them), and
only for jobs that opted in: requeueable (``--requeue``, or ``JobRequeue=1``) and tagged
``slurm-rl:checkpoint`` in ``--comment`` — a job that does not save checkpoints would lose all
its work — and whose ``ReqNodeList``, if any, slurm-rl set itself: the move's pin would
replace a user's ``--nodelist`` (slurm_rl/slurm/ownership.py). Measured on Slurm 22.05.8:
``scontrol requeue`` returns at once; the job shows ``COMPLETING`` for a moment, then pending
(reason ``BeginTime``, eligible two minutes later, ``Restarts`` counted). A ``ReqNodeList``
set at once survives that, but a ``StartTime=now`` sent before the job is pending is
overwritten by the two minutes. So the actuator pins the job at once, waits a few seconds
(``restart_wait_s``) for it to be pending and then releases it (it starts on its nodes about
a second later); one still completing then is released on a later cycle. At most
``max_migrations`` jobs move per cycle. A requeue cannot be undone, so ``slurm-rl revert``
leaves it alone; the audit trail records it as ``migrate``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from ClusterShell.NodeSet import NodeSet

from slurm_rl.core import Decision, Placement
from slurm_rl.slurm.client import SlurmClient
from slurm_rl.slurm.eligibility import node_conflict
from slurm_rl.slurm.ownership import PIN, fold
from slurm_rl.slurm.proc import CommandResult
from slurm_rl.slurm.records import CHECKPOINT_TAG, PENDING_STATES, SlurmJob, SlurmNode

RELEASE = {"StartTime": "now"}


@dataclass(frozen=True, slots=True)
class Move:
    """One job to requeue and the fields that pin it to its new nodes."""

    job_id: str
    placement: Placement

    @property
    def pin(self) -> dict[str, str]:
        count = self.placement.num_nodes
        return {PIN: str(NodeSet.fromlist(self.placement.nodes)),
                "NumNodes": f"{count}-{count}"}


@dataclass(frozen=True, slots=True)
class Refusal:
    """A move the actuator will not make, and why (for the audit trail)."""

    job_id: str
    kind: str  # not_running, not_movable, over_cap
    note: str


def plan_moves(
    decision: Decision, job: Callable[[str], SlurmJob | None], cap: int,
    nodes: Mapping[str, SlurmNode],
    pinned_by_us: Mapping[str, frozenset[str]] | None = None,
    free: Mapping[str, int] | None = None,
) -> Iterator[Move | Refusal]:
    """The decision's migrations that may be sent (up to ``cap``), and why others may not.
    ``nodes``: the nodes as Slurm shows them, by name. ``pinned_by_us``: the ``ReqNodeList``
    slurm-rl set, by job (any other is a user's).
    ``free``: the GPUs free on each node just before the moves (None: not checked); a move
    whose nodes no longer have its GPUs free is refused, and each move sent takes its GPUs."""
    sent = 0
    pins = pinned_by_us or {}
    left = dict(free) if free is not None else None
    for job_id, placement in decision.migrations.items():
        current = job(job_id)
        if current is None or current.state != "RUNNING":
            yield Refusal(job_id, "not_running", "asked to move a job that is not running")
        elif not current.checkpointable:
            opt_in = f"--requeue and --comment={CHECKPOINT_TAG}"
            yield Refusal(job_id, "not_movable", f"not moved: it did not opt in ({opt_in})")
        elif (conflict := target_conflict(current, placement, nodes,
                                          pins.get(job_id))) is not None:
            yield Refusal(job_id, "not_movable", f"not moved: {conflict}")
        elif left is not None and (busy := busy_target(placement, left)) is not None:
            yield Refusal(job_id, "target_busy", f"not moved: {busy}")
        elif sent >= cap:
            yield Refusal(job_id, "over_cap", f"not moved: {cap} moves per cycle at most")
        else:
            sent += 1
            if left is not None:
                for node, gpus in zip(placement.nodes, placement.gpus, strict=True):
                    left[node] -= gpus
            yield Move(job_id, placement)


def busy_target(placement: Placement, free: Mapping[str, int]) -> str | None:
    """Why ``placement`` does not fit in the GPUs ``free`` now (None: it does). The decision
    chose it from the snapshot's free GPUs, but Slurm may have started jobs there since (its
    own scheduling, or the jobs this cycle released): a job requeued onto busy nodes would
    lose the work since its checkpoint and then wait. The job's own GPUs are not counted as
    free, as the decision did not count them."""
    for node, gpus in zip(placement.nodes, placement.gpus, strict=True):
        have = free.get(node, 0)
        if have < gpus:
            return f"{node} has {have} GPU{'s' * (have != 1)} free now, the move needs {gpus}"
    return None


def target_conflict(job: SlurmJob, placement: Placement, nodes: Mapping[str, SlurmNode],
                    pinned_by_us: frozenset[str] | None = None) -> str | None:
    """Why the job may not be requeued onto ``placement`` (None: it may). Its ``ReqNodeList``,
    unless slurm-rl set it (``pinned_by_us``), is the user's, and the move's pin would replace
    it. Measured on Slurm 22.05.8: a requeued job pinned to a node its ``ExcNodeList`` names,
    or to one without a feature its ``--constraint`` asks for, stays pending with
    ``BadConstraints`` for good (so does one outside its partitions:
    :mod:`slurm_rl.slurm.eligibility`)."""
    required = frozenset(job.required_nodes)
    if required and required != pinned_by_us:
        return f"its --nodelist={fold(required)} is the user's"
    excluded = set(job.excluded_nodes) & set(placement.nodes)
    if excluded:
        return f"its ExcNodeList names {','.join(sorted(excluded))}"
    return node_conflict(job, placement.nodes, nodes)


def release_when_pending(
    client: SlurmClient, job_id: str, wait_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> CommandResult | None:
    """``StartTime=now`` for a requeued job once Slurm shows it pending (polled for up to
    ``wait_s``); None when it is still completing then (release it on a later cycle)."""
    deadline = time.monotonic() + wait_s
    while True:
        job = client.show_job(job_id)
        if job is not None and job.state in PENDING_STATES:
            return client.update_jobs([job_id], RELEASE)
        if job is None or time.monotonic() >= deadline:
            return None
        sleep(0.2)
