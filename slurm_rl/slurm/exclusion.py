"""``ExcNodeList`` for released jobs without a placement: what the actuator may set or clear.

A decision's ``exclusions`` name nodes Slurm must not give a released, unplaced job. The
actuator applies them (``enforce``; planned only in ``shadow``; never in ``advise``) under
these rules, each checked against what Slurm shows now:

* **Only its own.** It sets, changes or clears ``ExcNodeList`` only on a job whose list is
  empty or exactly what this actuator last set (its ledger, slurm_rl/slurm/ownership.py; a
  restarted daemon recalls it from its audit trail, slurm_rl/store/exclusions.py). A user's
  own ``--exclude`` is never overwritten or cleared; the outcome carries a note saying so.
* **Cleared when no longer wanted**: the decision no longer excludes nodes for the job, the
  job got a placement (Slurm 22.05.8 accepts ``ReqNodeList`` intersecting ``ExcNodeList``
  but then keeps the job pending with ``BadConstraints`` for good, so the clear goes in the
  same update as the pin), or the job is no longer released.
* **Never a pin onto a user's exclusion**: a placement that intersects an ``ExcNodeList``
  the actuator did not set is dropped (the job is released unplaced), for the same reason.
* **Never stranding**: an exclusion is dropped (one log line) when, without the excluded
  nodes, the usable nodes of the job's partition hold fewer GPUs of the job's type than it
  asks for, or fewer nodes with at least its per-node GPU count (1 when it has none) than
  its node count. Configured GPUs count, not free ones: the question is whether the job could
  ever run, not whether it can run now. Node names Slurm does not know are dropped too
  (scontrol would refuse the whole update).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from slurm_rl.core import Placement
from slurm_rl.slurm.gres import gpu_counts
from slurm_rl.slurm.ownership import EXC, fold
from slurm_rl.slurm.records import SlurmJob, SlurmNode
from slurm_rl.slurm.source import in_partitions, to_core_job

log = logging.getLogger(__name__)


def strands(job: SlurmJob, excluded: frozenset[str], nodes: Sequence[SlurmNode]) -> bool:
    """True when, without ``excluded``, the job's partition lacks the GPUs the job asks for."""
    core = to_core_job(job)
    if core is None:
        return False
    partitions = tuple(p for p in job.partition.split(",") if p)
    capacity: list[int] = []
    for node in nodes:
        if node.name in excluded or not node.usable:
            continue
        if not in_partitions(node.partitions, partitions):
            continue
        counts = gpu_counts(node.gres)
        gpus = sum(c.count for c in counts if core.gpu_type in (None, c.gpu_type))
        if gpus > 0:
            capacity.append(gpus)
    per_node = core.gpus_per_node or 1
    enough_nodes = sum(1 for gpus in capacity if gpus >= per_node) >= (core.num_nodes or 1)
    return not enough_nodes or sum(capacity) < core.num_gpus


@dataclass(frozen=True, slots=True)
class ExclusionPlan:
    """For one released job: the placement to send (maybe dropped), the ExcNodeList field
    to add (if any) and a note for the audit trail."""

    placement: Placement | None
    fields: tuple[tuple[str, str], ...] = ()
    note: str = ""


def plan_exclusion(
    job: SlurmJob,
    placement: Placement | None,
    wanted: Sequence[str],
    mine: frozenset[str] | None,
    nodes: Sequence[SlurmNode],
) -> ExclusionPlan:
    """What to do about ``job``'s ExcNodeList, given the decision's placement and exclusion
    and what this actuator last set (``mine``)."""
    current = frozenset(job.excluded_nodes)
    owned = not current or current == mine
    if placement is not None:
        if not owned and current & set(placement.nodes):
            note = (f"placement on {fold(placement.nodes)} dropped: it intersects the job's "
                    f"own ExcNodeList={fold(current)}, and Slurm would never start it")
            return ExclusionPlan(None, (), note)
        return ExclusionPlan(placement, _clear(current) if owned else ())
    target, note = _checked(job, wanted, nodes)
    if target == current:
        return ExclusionPlan(None, (), note)
    if not owned:
        if target:
            note = f"ExcNodeList={fold(current)} was not set by slurm-rl: left alone"
        return ExclusionPlan(None, (), note)
    return ExclusionPlan(None, ((EXC, fold(target)),), note)


def _clear(current: frozenset[str]) -> tuple[tuple[str, str], ...]:
    return ((EXC, ""),) if current else ()


def _checked(
    job: SlurmJob, wanted: Sequence[str], nodes: Sequence[SlurmNode]
) -> tuple[frozenset[str], str]:
    """The exclusion to apply: known node names only, and none that would strand the job."""
    known = {node.name for node in nodes}
    target = frozenset(name for name in wanted if name in known)
    unknown = sorted(set(wanted) - known)
    note = f"unknown nodes not excluded: {fold(unknown)}" if unknown else ""
    if target and strands(job, target, nodes):
        log.info("job %s: exclusion of %s dropped: it would leave fewer GPUs than the job needs",
                 job.job_id, fold(target))
        return frozenset(), f"exclusion of {fold(target)} dropped: it would strand the job"
    return target, note


def stale_exclusions(
    jobs: Iterable[SlurmJob], mine: Mapping[str, frozenset[str]]
) -> list[str]:
    """Jobs still showing exactly the exclusion this actuator set (to clear when the job is
    no longer released)."""
    return [j.job_id for j in jobs if j.excluded_nodes and frozenset(j.excluded_nodes) ==
            mine.get(j.job_id)]
