"""Heuristic placement policies: first-fit, best-fit (consolidated), random, fastest-GPU first,
cheapest-GPU first. Each is only an order of preference over nodes; the shared node-set
mechanics (:mod:`slurm_rl.agents.nodesets`) turn it into a gang placement.

:data:`HEURISTICS` names them; the policy-name table (:mod:`slurm_rl.agents.names`) reads it,
so a new heuristic is its class and one line in it (CONTRIBUTING.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from slurm_rl.agents.base import PlacementContext
from slurm_rl.agents.nodesets import place_in_order
from slurm_rl.core import Cluster, ClusterSnapshot, Job, Placement
from slurm_rl.policy import PlacementPolicy


class _OrderedPlacement:
    """Base: subclasses say which nodes they prefer; placement follows that order."""

    name = "ordered"

    def observe(self, snapshot: ClusterSnapshot) -> None:
        return None

    def place(
        self, job: Job, free_gpus: Sequence[int], snapshot: ClusterSnapshot
    ) -> Placement | None:
        return place_in_order(job, snapshot.cluster, free_gpus, self.order(free_gpus, snapshot))

    def order(self, free_gpus: Sequence[int], snapshot: ClusterSnapshot) -> Sequence[int]:
        return range(len(free_gpus))


class FirstFit(_OrderedPlacement):
    """Nodes in their configured order: what Slurm itself does among equal-weight nodes."""

    name = "first-fit"


class BestFit(_OrderedPlacement):
    """Consolidate: the fullest node that still fits, so large holes stay open for large jobs."""

    name = "best-fit"

    def order(self, free_gpus: Sequence[int], snapshot: ClusterSnapshot) -> Sequence[int]:
        return sorted(range(len(free_gpus)), key=free_gpus.__getitem__)


class RandomFit(_OrderedPlacement):
    """Nodes in a random order (seeded): the no-information reference."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def order(self, free_gpus: Sequence[int], snapshot: ClusterSnapshot) -> Sequence[int]:
        return self._rng.permutation(len(free_gpus)).tolist()  # type: ignore[no-any-return]


class _ByNodeValue(_OrderedPlacement):
    """Nodes ranked by a static per-node value (lower first), fullest first among equals."""

    def __init__(self) -> None:
        self._cluster: Cluster | None = None
        self._base: list[int] = []

    def node_value(self, cluster: Cluster, index: int) -> float:
        raise NotImplementedError

    def order(self, free_gpus: Sequence[int], snapshot: ClusterSnapshot) -> Sequence[int]:
        if self._cluster is not snapshot.cluster:
            self._cluster = snapshot.cluster
            self._base = self._value_keys(snapshot.cluster)
        # (value, free GPUs) as one integer: the rank of the node's value times a step above
        # any node's GPU count, plus its free GPUs (a tuple key per node was most of a cycle)
        keys = [base + free for base, free in zip(self._base, free_gpus, strict=True)]
        return sorted(range(len(keys)), key=keys.__getitem__)

    def _value_keys(self, cluster: Cluster) -> list[int]:
        values = [self.node_value(cluster, i) for i in range(len(cluster.nodes))]
        rank = {value: r for r, value in enumerate(sorted(set(values)))}
        step = max((node.gpus for node in cluster.nodes), default=0) + 1
        return [rank[value] * step for value in values]


class FastestGpuFirst(_ByNodeValue):
    """The fastest GPU type first, by a datasheet-like speed per type (no per-machine learning)."""

    name = "fastest-gpu"

    def __init__(self, gpu_speed: Mapping[str, float]) -> None:
        super().__init__()
        self._speed = {k.lower(): v for k, v in gpu_speed.items()}

    def node_value(self, cluster: Cluster, index: int) -> float:
        return -self._speed.get(cluster.nodes[index].gpu_type.lower(), 0.0)


class CheapestGpuFirst(_ByNodeValue):
    """The cheapest GPU-hour first."""

    name = "cheapest-gpu"

    def node_value(self, cluster: Cluster, index: int) -> float:
        return cluster.nodes[index].price_per_gpu_hour


#: The heuristic placements by name, in the order reports list them, each built from a
#: :class:`~slurm_rl.agents.base.PlacementContext`. Every comparison replays them as baselines
#: (``slurm-rl simulate``'s default, ``slurm-rl evaluate``) and the daemon accepts them.
HEURISTICS: dict[str, Callable[[PlacementContext], PlacementPolicy]] = {
    FirstFit.name: lambda _: FirstFit(),
    BestFit.name: lambda _: BestFit(),
    RandomFit.name: lambda context: RandomFit(context.seed),
    FastestGpuFirst.name: lambda context: FastestGpuFirst(context.gpu_speed),
    CheapestGpuFirst.name: lambda _: CheapestGpuFirst(),
}
