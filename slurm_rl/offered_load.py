"""The offered load of a scenario, and its cluster scaled to a given load.

The load is set by **scaling the cluster's node groups**, the GPU-type mix kept: every node
group's node count is multiplied by one factor and rounded (:func:`scaled_counts`). The trace,
its arrival times and its jobs stay as recorded, so each load replays the same work on a
smaller or larger copy of the same cluster. (Scaling arrival times instead would keep the
cluster but squeeze the trace's daily and weekly rhythm.) ``slurm-rl simulate --load`` replays
one such load, the load sweep (:mod:`slurm_rl.training.sweep`, ``slurm-rl evaluate --loads``)
several. The offered load's definition is :func:`offered_load`'s docstring.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from slurm_rl.core import Cluster, Job, Node
from slurm_rl.errors import InputError
from slurm_rl.scenario import Scenario
from slurm_rl.simulator.cluster_spec import ClusterSpec

# ----- the offered load ---------------------------------------------------------------------


@dataclass(frozen=True)
class OfferedLoad:
    """:func:`offered_load`'s terms: demand in reference-GPU seconds, capacity in
    reference-GPU equivalents, the span in seconds, and their quotient."""

    demand_gpu_s: float
    capacity_gpus: float
    span_s: float
    jobs: int
    gpu_worth: Mapping[str, float]  # e(t): reference GPUs one GPU of each type is worth

    @property
    def load(self) -> float:
        return self.demand_gpu_s / (self.capacity_gpus * self.span_s)


def offered_load(jobs: Sequence[Job], spec: ClusterSpec, reference_gpu: str) -> OfferedLoad:
    """The offered load of ``jobs`` on ``spec``'s cluster: GPU-time demand over capacity, both
    in reference-GPU units (the trace's ``reference_gpu``, on which its run times ``d_j`` were
    measured), over the span of the submissions::

        D_f  = Σ_{j in family f} g_j · d_j          demand of job family f (reference-GPU s)
        D    = Σ_f D_f
        e(t) = D / Σ_f D_f / s(f, t)                reference GPUs one GPU of type t is worth
        C    = Σ_{nodes n} G_n · e(type_n)          capacity in reference-GPU equivalents
        T    = max_j submit_j − min_j submit_j      the trace's span
        ρ    = D / (C · T)

    ``g_j`` is the job's GPU count, ``s(f, t)`` the performance model's per-GPU speed of family
    ``f`` on type ``t`` relative to the reference type and ``G_n`` a node's GPUs. ``e(t)`` is
    the harmonic mean of the type's speeds weighted by the trace's own family mix: the
    reference-GPU work one GPU of type ``t`` would do per second if it ran this trace's mix
    (the way ``sim/clusters/philly-hetero.toml`` was sized). ρ = 1 means the cluster, kept
    busy on every GPU with every job at full speed, would just keep up; it counts no
    queueing, spread over nodes, co-location or fluctuation, so a cluster runs out of room
    below ρ = 1 (philly-hetero at ρ ≈ 0.66 ran some 80 % busy over Sep–Nov). Jobs without a
    recorded run time add no demand (a trace's jobs all have one)."""
    timed = [job for job in jobs if job.oracle_duration is not None]
    if len(timed) < 2:
        raise InputError("the offered load needs at least two jobs with run times")
    perf = spec.performance_model()
    by_family: dict[str, float] = {}
    for job in timed:
        work = job.num_gpus * float(job.oracle_duration or 0.0)
        by_family[job.model_family] = by_family.get(job.model_family, 0.0) + work
    demand = sum(by_family.values())
    worth: dict[str, float] = {}
    for node in spec.cluster.nodes:
        if node.gpu_type not in worth:
            seconds = sum(work / perf.relative_speed(family, node.gpu_type, reference_gpu)
                          for family, work in by_family.items())
            worth[node.gpu_type] = demand / seconds if seconds > 0 else 0.0
    capacity = sum(node.gpus * worth[node.gpu_type] for node in spec.cluster.nodes)
    submits = [job.submit_time for job in timed]
    span = max(submits) - min(submits)
    if demand <= 0 or capacity <= 0 or span <= 0:
        raise InputError("the offered load needs GPU time, GPUs and a span longer than 0")
    return OfferedLoad(demand, capacity, span, len(timed), worth)


# ----- scaling the cluster ------------------------------------------------------------------


def node_groups(cluster: Cluster) -> dict[str, list[Node]]:
    """The cluster's nodes by node group, in order. A group is the nodes sharing a name prefix
    (cluster specs name nodes ``<prefix>-001``, ``<prefix>-002``, ...; prefixes are unique)."""
    groups: dict[str, list[Node]] = {}
    for node in cluster.nodes:
        groups.setdefault(node.name.rsplit("-", 1)[0], []).append(node)
    return groups


def scaled_counts(groups: Mapping[str, Sequence[Node]], factor: float,
                  worth: Mapping[str, float]) -> dict[str, int]:
    """Each node group's count times ``factor``, rounded so that the total capacity comes
    closest to ``factor`` times the original's while no group is ever 0 (a GPU type the
    cluster had stays in it: the mix is kept, and the jobs that need that type still have
    somewhere to run). Each group gets the floor of its exact share ``n · factor`` (at least
    1); then, largest remainder first, a group gets one node more whenever that brings the
    capacity (GPUs × :func:`offered_load`'s ``e(type)``) nearer the target. Rounding every
    group half up instead overshot by up to 8 % of the capacity on philly-hetero, whose
    small groups (2-5 nodes at full load on December) all round the same way."""
    capacity = {p: sum(n.gpus * worth[n.gpu_type] for n in nodes) / len(nodes)
                for p, nodes in groups.items()}
    exact = {p: len(nodes) * factor for p, nodes in groups.items()}
    counts = {p: max(1, math.floor(x)) for p, x in exact.items()}
    target = sum(capacity[p] * x for p, x in exact.items())
    total = sum(capacity[p] * n for p, n in counts.items())
    order = list(groups)
    for prefix in sorted(order, key=lambda p: (math.floor(exact[p]) - exact[p], order.index(p))):
        if counts[prefix] < math.ceil(exact[prefix]):
            grown = total + capacity[prefix]
            if abs(grown - target) < abs(total - target):
                counts[prefix] += 1
                total = grown
    return counts


def scale_cluster(spec: ClusterSpec, counts: Mapping[str, int]) -> ClusterSpec:
    """``spec`` with each node group (:func:`node_groups`) resized to ``counts[prefix]``:
    nodes keep their type, GPUs and price and are renamed ``<prefix>-NNN`` as a spec would
    name them. A shrunk group keeps its first nodes with their host groups; a grown one adds
    host groups as large as its first, named ``<prefix>-rackNN``."""
    racks_in_use = {node.host_group for node in spec.cluster.nodes}
    nodes: list[Node] = []
    for prefix, group in node_groups(spec.cluster).items():
        count = counts[prefix]
        width = max(3, len(str(count)))
        racks = _scaled_racks(prefix, group, count, racks_in_use)
        nodes.extend(replace(group[min(i, len(group) - 1)], name=f"{prefix}-{i + 1:0{width}d}",
                             host_group=rack) for i, rack in enumerate(racks))
    return replace(spec, cluster=Cluster(spec.cluster.name, tuple(nodes)))


def _scaled_racks(prefix: str, group: Sequence[Node], count: int, taken: set[str]) -> list[str]:
    """The host group of each of a scaled group's ``count`` nodes, in node order."""
    racks = [node.host_group for node in group[:count]]
    size = sum(node.host_group == group[0].host_group for node in group)
    extra = 0
    while len(racks) < count:
        extra += 1
        name = f"{prefix}-rack{extra:02d}"
        if name not in taken:
            racks.extend([name] * min(size, count - len(racks)))
    return racks


@dataclass(frozen=True)
class LoadPoint:
    """One load of a sweep: the asked-for load, the scenario replayed for it (its cluster
    scaled by ``factor``), the load that scenario has, and how many jobs no longer fit."""

    target: float
    factor: float
    achieved: float
    scenario: Scenario
    unschedulable_jobs: int

    @property
    def node_counts(self) -> dict[str, int]:
        return {prefix: len(nodes) for prefix, nodes in node_groups(self.scenario.cluster).items()}


def load_points(scenario: Scenario, loads: Sequence[float]) -> list[LoadPoint]:
    """The scenario scaled to each load: factor = (the original cluster's load) / target. The
    demand is always the jobs that fit the original cluster, so a job that no longer fits a
    shrunk one still counts as offered (and is reported as unschedulable there)."""
    jobs, _ = scenario.runnable_jobs()
    reference = scenario.trace.reference_gpu
    original = offered_load(jobs, scenario.spec, reference)
    groups = node_groups(scenario.cluster)
    points = []
    for target in loads:
        factor = original.load / target
        spec = scale_cluster(scenario.spec, scaled_counts(groups, factor, original.gpu_worth))
        scaled = replace(scenario, spec=spec)
        achieved = offered_load(jobs, spec, reference).load
        points.append(LoadPoint(target, factor, achieved, scaled, scaled.runnable_jobs()[1]))
    return points
