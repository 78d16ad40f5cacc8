"""Candidate node sets for a gang job: consolidated first, then spread.

The placement agent scores each candidate (:mod:`.placement`); this module only proposes them,
from a per-node cost (lower is better: what running on that node alone would cost the job) and
the GPUs still free. Candidates honour the job's shape and GPU-type constraint exactly as the
shared mechanics do (:mod:`slurm_rl.agents.nodesets`): a free-shape job may go on one node or be
spread; a fixed shape (``num_nodes``/``gpus_per_node``) gets exactly its shares; a gang mixes
GPU types only when no single type has room, because it runs at its slowest member's pace.

Proposed, in this order:

1. *consolidated*: the ``consolidated`` cheapest single nodes that hold the whole job;
2. *spread within a host group*: for each of the ``types`` GPU types with room and the
   cheapest nodes, the ``groups`` host groups with the cheapest nodes, each filled cheapest
   node first and fewest nodes first;
3. *spread over a type*: each of those types filled the same two ways;
4. *mixed types*: only when no single type has room.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from slurm_rl.agents.nodesets import fixed_shape
from slurm_rl.core import Cluster, Job

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class NodeSet:
    """Node indices and GPUs taken on each; ``consolidated`` when it is one node."""

    nodes: tuple[int, ...]
    gpus: tuple[int, ...]

    @property
    def consolidated(self) -> bool:
        return len(self.nodes) == 1


@dataclass(frozen=True)
class NodeTable:
    """Static per-node facts of a cluster, as arrays."""

    type_id: IntArray
    group_id: IntArray  # a node without a host group is a group of its own
    capacity: IntArray
    type_names: tuple[str, ...]

    @classmethod
    def from_cluster(cls, cluster: Cluster) -> NodeTable:
        type_names = tuple(sorted({n.gpu_type.lower() for n in cluster.nodes}))
        groups: dict[str, int] = {}
        group_id = [
            groups.setdefault(n.host_group or f"\0{i}", len(groups))
            for i, n in enumerate(cluster.nodes)
        ]
        return cls(
            type_id=np.array([type_names.index(n.gpu_type.lower()) for n in cluster.nodes]),
            group_id=np.array(group_id),
            capacity=np.array([n.gpus for n in cluster.nodes]),
            type_names=type_names,
        )


@dataclass(frozen=True)
class Limits:
    """How many candidates: single nodes, host groups per type, GPU types to spread over."""

    consolidated: int = 4
    groups: int = 2
    types: int = 3


def candidate_sets(
    job: Job, table: NodeTable, free: IntArray, cost: FloatArray, limits: Limits
) -> list[NodeSet]:
    """Candidates in the module docstring's order, without repeats. ``cost`` is ``inf`` on
    nodes the job may not use."""
    usable = np.flatnonzero((free > 0) & np.isfinite(cost))
    order = usable[np.argsort(cost[usable], kind="stable")]
    if job.num_nodes is not None or job.gpus_per_node is not None:
        found = _fixed(fixed_shape(job), table, free, order, limits)
    else:
        found = _consolidated(job.num_gpus, free, order, limits)
        if job.num_gpus > 1:
            found += _spread(job.num_gpus, table, free, order, limits)
    return _unique(found)


def _consolidated(need: int, free: IntArray, order: IntArray, limits: Limits) -> list[NodeSet]:
    fits = order[free[order] >= need][: limits.consolidated]
    return [NodeSet((int(i),), (need,)) for i in fits]


def _spread(
    need: int, table: NodeTable, free: IntArray, order: IntArray, limits: Limits
) -> list[NodeSet]:
    found: list[NodeSet] = []
    for members in _with_room(need, _by_type(table, order), free, limits.types):
        for group in _best_groups(need, table, free, members, limits.groups):
            found += _fills(need, free, group)
        found += _fills(need, free, members)
    if not found and len(_by_type(table, order)) > 1:
        found += _fills(need, free, order)  # no single type has room: mix them
    return found


def _by_type(table: NodeTable, order: IntArray) -> list[IntArray]:
    """``order`` split by GPU type, types in order of their cheapest node."""
    types = table.type_id[order]
    _, first = np.unique(types, return_index=True)
    return [order[types == types[i]] for i in sorted(first)]


def _with_room(need: int, types: list[IntArray], free: IntArray, count: int) -> list[IntArray]:
    """The first ``count`` types whose free GPUs add up to ``need``."""
    return [members for members in types if free[members].sum() >= need][:count]


def _best_groups(
    need: int, table: NodeTable, free: IntArray, members: IntArray, count: int
) -> list[IntArray]:
    """Host groups (within ``members``, keeping their order) with room for ``need`` GPUs,
    the ones holding the cheapest nodes first."""
    groups = table.group_id[members]
    _, first = np.unique(groups, return_index=True)
    found: list[IntArray] = []
    for i in sorted(first):
        group = members[groups == groups[i]]
        if len(group) > 1 and free[group].sum() >= need:
            found.append(group)
            if len(found) == count:
                break
    return found


def _fills(need: int, free: IntArray, members: IntArray) -> list[NodeSet]:
    """``members`` filled cheapest first, and fewest nodes first (most free GPUs first)."""
    fewest = members[np.argsort(-free[members], kind="stable")]
    return [s for s in (_fill(need, free, members), _fill(need, free, fewest)) if s is not None]


def _fill(need: int, free: IntArray, members: IntArray) -> NodeSet | None:
    taken = np.minimum(free[members], need)
    total = np.cumsum(taken)
    count = int(np.searchsorted(total, need)) + 1
    if count > len(members):
        return None
    gpus = taken[:count].copy()
    gpus[-1] -= int(total[count - 1]) - need
    return NodeSet(tuple(int(i) for i in members[:count]), tuple(int(g) for g in gpus))


def _fixed(
    shares: tuple[int, ...], table: NodeTable, free: IntArray, order: IntArray, limits: Limits
) -> list[NodeSet]:
    """Exactly ``shares`` (largest first) on distinct nodes, per host group, per type, and over
    all types only when no type has room."""
    found: list[NodeSet] = []
    for members in _with_room(sum(shares), _by_type(table, order), free, limits.types):
        for group in _best_groups(sum(shares), table, free, members, limits.groups):
            found += _optional(_shares(shares, free, group))
        found += _optional(_shares(shares, free, members))
    if not found:
        found += _optional(_shares(shares, free, order))
    return found


def _shares(shares: tuple[int, ...], free: IntArray, members: IntArray) -> NodeSet | None:
    chosen: list[int] = []
    for i in members:
        if free[i] >= shares[len(chosen)]:
            chosen.append(int(i))
            if len(chosen) == len(shares):
                return NodeSet(tuple(chosen), shares)
    return None


def _optional(found: NodeSet | None) -> list[NodeSet]:
    return [] if found is None else [found]


def _unique(sets: list[NodeSet]) -> list[NodeSet]:
    seen: set[tuple[tuple[int, int], ...]] = set()
    out: list[NodeSet] = []
    for s in sets:
        key = tuple(sorted(zip(s.nodes, s.gpus, strict=True)))
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out
