"""Building gang placements from free GPUs: the mechanics every placement policy shares.

A policy supplies an order of preference over nodes; these functions turn it into a
placement that honours the job's shape (``num_nodes``, ``gpus_per_node``) and GPU-type
constraint. A job with a free shape goes on one node when one node can hold it, and is
otherwise spread over as few nodes of one GPU type as possible: a gang runs at the pace of its
slowest member, so GPU types are mixed only when no single type has room.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from slurm_rl.core import Cluster, Job, Placement


def usable_nodes(job: Job, cluster: Cluster, free_gpus: Sequence[int]) -> list[int]:
    """Indices of nodes with at least one free GPU of a type the job accepts."""
    if not job.gpu_type:
        return [i for i, free in enumerate(free_gpus) if free > 0]
    of_type = cluster.nodes_of_type(job.gpu_type)
    return [i for i, free in enumerate(free_gpus) if free > 0 and i in of_type]


def place_in_order(
    job: Job, cluster: Cluster, free_gpus: Sequence[int], order: Iterable[int]
) -> Placement | None:
    """The first placement found walking nodes in ``order`` (most preferred first), using only
    nodes of the job's GPU type when it names one."""
    if job.gpu_type:
        of_type = cluster.nodes_of_type(job.gpu_type)
        order = [i for i in order if i in of_type]
    if job.gpus_per_node is not None or job.num_nodes is not None:
        return _fixed_shape(job, cluster, free_gpus, order)
    candidates = [i for i in order if free_gpus[i] > 0]
    single = _first_single_node(job, free_gpus, candidates)
    if single is not None:
        return _make(cluster, [(single, job.num_gpus)])
    return _spread_one_type(job, cluster, free_gpus, candidates)


def total_free(job: Job, cluster: Cluster, free_gpus: Sequence[int]) -> int:
    return sum(free_gpus[i] for i in usable_nodes(job, cluster, free_gpus))


def _first_single_node(job: Job, free_gpus: Sequence[int], candidates: list[int]) -> int | None:
    for i in candidates:
        if free_gpus[i] >= job.num_gpus:
            return i
    return None


def _spread_one_type(
    job: Job, cluster: Cluster, free_gpus: Sequence[int], candidates: list[int]
) -> Placement | None:
    """Fill nodes of one GPU type, largest free count first, trying types in preference order."""
    by_type: dict[str, list[int]] = {}
    for i in candidates:
        by_type.setdefault(cluster.nodes[i].gpu_type, []).append(i)
    for nodes in by_type.values():
        chosen = _fill(job.num_gpus, sorted(nodes, key=lambda i: -free_gpus[i]), free_gpus)
        if chosen is not None:
            return _make(cluster, chosen)
    # No single type has room: mix types, as Slurm would for a job with no type constraint.
    chosen = _fill(job.num_gpus, sorted(candidates, key=lambda i: -free_gpus[i]), free_gpus)
    return _make(cluster, chosen) if chosen is not None and len(by_type) > 1 else None


def _fill(need: int, nodes: list[int], free_gpus: Sequence[int]) -> list[tuple[int, int]] | None:
    chosen: list[tuple[int, int]] = []
    for i in nodes:
        take = min(need, free_gpus[i])
        chosen.append((i, take))
        need -= take
        if need == 0:
            return chosen
    return None


def _fixed_shape(
    job: Job, cluster: Cluster, free_gpus: Sequence[int], order: Iterable[int]
) -> Placement | None:
    """Nodes in ``order`` with a free GPU, taken greedily for the shares, largest first.
    (This runs millions of times in a replay, hence the one-node shortcut.)"""
    shares = fixed_shape(job)
    if len(shares) == 1:
        need = max(shares[0], 1)
        for i in order:
            if free_gpus[i] >= need:
                return _make(cluster, [(i, shares[0])])
        return None
    chosen: list[tuple[int, int]] = []
    for i in order:
        free = free_gpus[i]
        if free > 0 and free >= shares[len(chosen)]:
            chosen.append((i, shares[len(chosen)]))
            if len(chosen) == len(shares):
                return _make(cluster, chosen)
    return None


def fixed_shape(job: Job) -> tuple[int, ...]:
    """GPUs on each node, largest share first, for a job that fixes its shape."""
    if job.gpus_per_node is not None:
        count = job.num_nodes or -(-job.num_gpus // job.gpus_per_node)
        return (job.gpus_per_node,) * count
    count = job.num_nodes or 1
    base, extra = divmod(job.num_gpus, count)
    return (base + 1,) * extra + (base,) * (count - extra)


def _make(cluster: Cluster, chosen: list[tuple[int, int]]) -> Placement:
    return Placement(
        nodes=tuple(cluster.nodes[i].name for i, _ in chosen),
        gpus=tuple(g for _, g in chosen),
    )
