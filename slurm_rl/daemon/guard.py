"""A last check between a policy and a live Slurm: never pin a job where Slurm cannot run it.

Slurm keeps a job whose ``ReqNodeList`` cannot satisfy its request pending for good
(``Reason=BadConstraints``, priority 0), and the next cycle would pin it the same way again.
So before the actuator sees a decision, each placement is checked against the job's own
request: the nodes exist, they have the GPU type the job asked for and enough GPUs, the
shape (GPUs, node count, GPUs per node) is the job's, and a request that names no GPU type
stays on one type unless the admin allows mixing (``allow_mixed_gpu_types``). A placement
that fails is dropped with one warning line per cycle; the store records the decision as
applied, without those nodes. What becomes of its job depends on the mode:

* without dispatch the job is still released, and Slurm chooses its nodes (as it would for
  any released job the policy did not place);
* with dispatch (``hold_refused``) the job is held for the next cycle instead, like every
  job the policy does not start: released without nodes, Slurm would start it by itself on
  whatever frees up first, racing the pins of the jobs the policy did start there (the
  sim-to-real runs measured that race: docs/slurm-emulation.md). A job the fairness guard
  brought forward stays released: that guard's promise is that Slurm starts it.

A move of a running job that fails is dropped too (the job keeps running where it is).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from slurm_rl.core import Cluster, ClusterSnapshot, Decision, Job, Placement, placement_fits_shape
from slurm_rl.loop import DecisionMaker
from slurm_rl.ops.reasons import explain_decision
from slurm_rl.scheduler import held_back

log = logging.getLogger("slurm_rl.daemon")
SHOWN_REFUSALS = 5  # a log line names this many jobs, then counts the rest


def placement_problem(job: Job, placement: Placement, cluster: Cluster,
                      allow_mixed_gpu_types: bool = False) -> str | None:
    """Why ``job`` must not run on ``placement``, or None if it may: Slurm would refuse it,
    or (unless ``allow_mixed_gpu_types``) a request that names no GPU type would run as a
    gang of several types, at the pace of the slowest (Slurm itself allows that)."""
    missing = [n for n in placement.nodes if not cluster.has_node(n)]
    if missing:
        return f"unknown node {missing[0]}"
    nodes = [cluster.nodes[cluster.index(n)] for n in placement.nodes]
    wanted = job.gpu_type.lower() if job.gpu_type else None
    for node, gpus in zip(nodes, placement.gpus, strict=True):
        if wanted is not None and node.gpu_type.lower() != wanted:
            return f"asks for {job.gpu_type}, {node.name} has {node.gpu_type}"
        if gpus > node.gpus:
            return f"{gpus} GPUs on {node.name}, which has {node.gpus}"
    if not placement_fits_shape(job, placement):
        return f"shape {placement.gpus} is not the job's ({job.num_gpus} GPUs)"
    types = sorted({node.gpu_type.lower() for node in nodes})
    if len(types) > 1 and not allow_mixed_gpu_types:
        return (f"an untyped request on {len(types)} GPU types ({', '.join(types)}); "
                "allow_mixed_gpu_types is off")
    return None


def checked(decision: Decision, snapshot: ClusterSnapshot,
            allow_mixed_gpu_types: bool = False,
            hold_refused: bool = False) -> tuple[Decision, dict[str, str]]:
    """``decision`` without the placements and moves :func:`placement_problem` refuses, and
    why each was refused (a running job requeued onto such nodes would be stuck pending for
    good). With ``hold_refused`` (dispatch mode) a job whose placement is refused is held,
    first among the holds, unless the fairness guard brought it forward."""
    pending = {job.job_id: job for job in snapshot.pending}
    running = {run.job.job_id: run.job for run in snapshot.running}
    refused = _problems(decision.placements, pending, snapshot.cluster, allow_mixed_gpu_types)
    moves_refused = _problems(decision.migrations, running, snapshot.cluster,
                              allow_mixed_gpu_types)
    if not refused and not moves_refused:
        return decision, refused
    kept = {j: p for j, p in decision.placements.items() if j not in refused}
    moves = {j: p for j, p in decision.migrations.items() if j not in moves_refused}
    held = [j for j in decision.ranking if j in refused and j not in decision.forward] \
        if hold_refused else []
    refused.update({j: f"move: {why}" for j, why in moves_refused.items()})
    decision = dataclasses.replace(decision, placements=kept, migrations=moves)
    if not held:
        return decision, refused
    return held_back(decision, set(held), tuple(j for j in decision.holds if j not in held)), \
        refused


def _problems(
    requests: Mapping[str, Placement], jobs: Mapping[str, Job], cluster: Cluster,
    allow_mixed_gpu_types: bool,
) -> dict[str, str]:
    """Why each requested node set cannot hold its job (a job not in ``jobs`` is let be)."""
    found: dict[str, str] = {}
    for job_id, placement in requests.items():
        job = jobs.get(job_id)
        problem = None if job is None else \
            placement_problem(job, placement, cluster, allow_mixed_gpu_types)
        if problem is not None:
            found[job_id] = problem
    return found


class GuardedScheduler:
    """A :class:`~slurm_rl.loop.DecisionMaker` whose decisions pass :func:`checked`."""

    def __init__(self, inner: DecisionMaker, *, explain: bool = True,
                 allow_mixed_gpu_types: bool = False, hold_refused: bool = False) -> None:
        self.inner = inner
        self.explain = explain
        self.allow_mixed_gpu_types = allow_mixed_gpu_types
        self.hold_refused = hold_refused
        # Why each job of the last decision got its rank and nodes (slurm_rl.ops.reasons).
        self.explanations: dict[str, dict[str, Any]] = {}

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        decision, refused = checked(self.inner.decide(snapshot), snapshot,
                                    self.allow_mixed_gpu_types, self.hold_refused)
        if refused:
            log.warning("policy %s placed %d jobs where Slurm cannot run them, %s: %s",
                        decision.policy_id, len(refused),
                        "held" if self.hold_refused else "released without nodes",
                        _listing(refused))
        self.explanations = {}
        if self.explain:
            self.explanations = explain_decision(self.inner, snapshot, decision)
            for job_id, why in refused.items():
                self.explanations.setdefault(job_id, {})["guard"] = why
        return decision


def _listing(refused: dict[str, str]) -> str:
    items = list(refused.items())
    shown = "; ".join(f"job {job_id}: {why}" for job_id, why in items[:SHOWN_REFUSALS])
    more = len(items) - SHOWN_REFUSALS
    return f"{shown}; and {more} more" if more > 0 else shown
