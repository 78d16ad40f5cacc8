"""How fast a running job progresses, composed from the measured performance model.

A job's remaining work is counted in *reference seconds*: seconds it would still run on the
trace's reference GPU type, consolidated, alone, on a healthy machine. On placement ``P`` its
rate (reference seconds per wall second) is

    rate(P) = min_i [ s(f, type_i) · m_i(t) ] · spread(f, P) · coloc(f, neighbours(P))

where ``s`` is the measured per-GPU speed of family ``f`` relative to the reference type,
``m_i(t) ≤ 1`` the current health factor of machine ``i`` (fluctuation, stragglers), and the
two last factors the measured penalties for spreading over nodes and for sharing nodes with
other jobs. A gang runs at the pace of its slowest member, hence the ``min``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slurm_rl.core import Cluster, Job

if TYPE_CHECKING:
    from slurm_rl.simulator.fluctuation import MachineFluctuation
    from slurm_rl.simulator.perfmodel import PerformanceModel


@dataclass(frozen=True)
class RateBreakdown:
    """The parts of a rate, kept so the simulator can emit honest speed observations."""

    rate: float
    nominal: float  # the rate on healthy machines (no fluctuation)
    health: float  # min over members of the machine factor


class SpeedModel:
    """Rates of jobs on node sets for one cluster, one trace reference GPU and one machine state."""

    def __init__(
        self,
        cluster: Cluster,
        perf: PerformanceModel,
        reference_gpu: str,
        fluctuation: MachineFluctuation | None,
    ) -> None:
        self._perf = perf
        self._reference = perf.canonical_gpu_type(reference_gpu)
        self._node_types = tuple(perf.canonical_gpu_type(n.gpu_type) for n in cluster.nodes)
        self._node_groups = tuple(n.host_group for n in cluster.nodes)
        # Trace durations were measured on the trace's own servers: a job bigger than a node
        # was spread there too, so spreading is measured against the fewest whole nodes.
        self._largest_node = max((n.gpus for n in cluster.nodes), default=1)
        self._fluctuation = fluctuation
        self._type_speed: dict[tuple[str, str], float] = {}
        self._best_rate: dict[tuple[str, int, str | None], float] = {}

    def type_speed(self, family: str, node: int) -> float:
        key = (family, self._node_types[node])
        speed = self._type_speed.get(key)
        if speed is None:
            speed = self._perf.relative_speed(family, key[1], self._reference)
            self._type_speed[key] = speed
        return speed

    def health(self, node: int) -> float:
        """Current machine factor, capped at 1: measured speeds are those of healthy machines."""
        if self._fluctuation is None:
            return 1.0
        return min(1.0, float(self._fluctuation.factors[node]))

    def rate(
        self,
        job: Job,
        nodes: Sequence[int],
        gpus: tuple[int, ...],
        neighbours_by_node: tuple[tuple[str, ...], ...] = (),
    ) -> RateBreakdown:
        family = job.model_family
        member_speed = [self.type_speed(family, i) for i in nodes]
        healthy = min(member_speed)
        actual = min(s * self.health(i) for s, i in zip(member_speed, nodes, strict=True))
        shape = self._shape_factor(family, nodes, gpus)
        coloc = self.colocation(family, neighbours_by_node)
        nominal = healthy * shape * coloc
        return RateBreakdown(rate=actual * shape * coloc, nominal=nominal, health=actual / healthy)

    def member_speeds(self, family: str, nodes: Sequence[int]) -> tuple[float, ...]:
        return tuple(self.type_speed(family, i) for i in nodes)

    def health_factor(self, speeds: Sequence[float], nodes: Sequence[int]) -> float:
        """min_i s_i·m_i / min_i s_i: how far machine health slows the gang down."""
        actual = min(s * self.health(i) for s, i in zip(speeds, nodes, strict=True))
        return actual / min(speeds)

    def colocation(self, family: str, neighbours_by_node: tuple[tuple[str, ...], ...]) -> float:
        """The gang's pace under co-location: its most crowded node decides."""
        if not any(neighbours_by_node):
            return 1.0
        return self._perf.gang_colocation_factor(family, neighbours_by_node)

    def shape_factor(self, family: str, nodes: Sequence[int], gpus: tuple[int, ...]) -> float:
        return self._shape_factor(family, nodes, gpus)

    def _shape_factor(self, family: str, nodes: Sequence[int], gpus: tuple[int, ...]) -> float:
        if len(nodes) == 1:
            return 1.0
        same_group = len({self._node_groups[i] for i in nodes}) == 1
        return self._perf.spread_factor(
            family, gpus, same_host_group=same_group, node_capacity=self._largest_node
        )

    def best_rate(self, job: Job, cluster: Cluster) -> float:
        key = (job.model_family, job.num_gpus, job.gpu_type)
        cached = self._best_rate.get(key)
        if cached is None:
            cached = self._compute_best_rate(job, cluster)
            self._best_rate[key] = cached
        return cached

    def _compute_best_rate(self, job: Job, cluster: Cluster) -> float:
        """The fastest rate this job could ever run at on this cluster (for the JCT lower bound):
        the fastest usable GPU type, consolidated if it fits on one node of that type, healthy,
        alone."""
        best = 0.0
        for gpu_type, largest_node in self._largest_node_by_type(cluster).items():
            if job.gpu_type is not None and self._perf.canonical_gpu_type(job.gpu_type) != gpu_type:
                continue
            speed = self._perf.relative_speed(job.model_family, gpu_type, self._reference)
            best = max(best, speed * self._min_spread(job, largest_node))
        return best

    def _min_spread(self, job: Job, largest_node: int) -> float:
        if job.num_gpus <= largest_node:
            return 1.0
        full, rest = divmod(job.num_gpus, largest_node)
        shape = (largest_node,) * full + ((rest,) if rest else ())
        return self._perf.spread_factor(
            job.model_family, shape, same_host_group=True, node_capacity=self._largest_node
        )

    def _largest_node_by_type(self, cluster: Cluster) -> dict[str, int]:
        largest: dict[str, int] = {}
        for node, gpu_type in zip(cluster.nodes, self._node_types, strict=True):
            largest[gpu_type] = max(largest.get(gpu_type, 0), node.gpus)
        return largest


class FixedSpeedModel(SpeedModel):
    """``--performance fixed``: every job runs exactly its trace duration, wherever it runs.

    No GPU-type speed, no spread or co-location penalty, no machine fluctuation: the textbook
    setting of other GPU-cluster simulators, and the live replay's, where ``sleep`` jobs take
    the same time on every node."""

    def type_speed(self, family: str, node: int) -> float:
        return 1.0

    def health(self, node: int) -> float:
        return 1.0

    def rate(
        self,
        job: Job,
        nodes: Sequence[int],
        gpus: tuple[int, ...],
        neighbours_by_node: tuple[tuple[str, ...], ...] = (),
    ) -> RateBreakdown:
        return RateBreakdown(rate=1.0, nominal=1.0, health=1.0)

    def health_factor(self, speeds: Sequence[float], nodes: Sequence[int]) -> float:
        return 1.0

    def colocation(self, family: str, neighbours_by_node: tuple[tuple[str, ...], ...]) -> float:
        return 1.0

    def shape_factor(self, family: str, nodes: Sequence[int], gpus: tuple[int, ...]) -> float:
        return 1.0

    def best_rate(self, job: Job, cluster: Cluster) -> float:
        return 1.0
