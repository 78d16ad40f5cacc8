"""Whether a request shape could fit in a free-GPU vector at all: a test every placement can
skip to, and the walk down a loaded queue mostly asks of jobs that cannot start.

At load the scheduler's walk (:meth:`slurm_rl.scheduler.Scheduler._place`) offers each of up
to ``max_ranked`` pending jobs to the placement every decision, and nearly all of them are
refused: on Philly September at load 1.0, FIFO with fastest-GPU placement made 10.4 million
calls for ~90,000 decisions, which were three quarters of the replay, each sorting every node.
:class:`Room` answers "is there any node set of the job's GPU type that
:func:`~slurm_rl.core.placement_fits_shape` would accept?" from per-type sorted free counts,
built once per change of the free vector. When the answer is no, no placement (heuristic,
RWGP or learned: each returns only node sets that fit) can return one, so skipping the call
changes no schedule; when it is yes the placement is asked as before.

The test is a necessary condition only, exact for the shapes it knows (``p`` = GPUs per node,
``n`` = nodes, ``g`` = GPUs; free counts of the job's type sorted in descending order):

* ``p`` given: at least :math:`\\lceil g/p \\rceil` nodes (or ``n``) with ``p`` free;
* only ``n`` given: ``n`` nodes with a free GPU whose ``n`` largest free counts reach ``g``;
* neither: ``g`` free GPUs in all.

A placement that names nodes it will never use for a job
(:class:`~slurm_rl.policy.BarringPlacement`: the RWGP's slow nodes for a gang or a long job)
can be tested against the free GPUs less those nodes: :meth:`Room.could_fit` with ``barred``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from itertools import accumulate

from slurm_rl.core import Cluster, Job

_ANY_TYPE = ""


class _TypeRoom:
    """The free GPU counts of one GPU type's nodes (those with a free GPU), in ascending and
    descending-prefix-sum form."""

    __slots__ = ("ascending", "top_sums")

    def __init__(self, counts: list[int]) -> None:
        self.ascending = sorted(counts)
        self.top_sums = list(accumulate(reversed(self.ascending)))  # [k-1]: the k largest

    def nodes_with(self, gpus: int) -> int:
        return len(self.ascending) - bisect_left(self.ascending, gpus)

    def fits(self, job: Job) -> bool:
        need = job.num_gpus
        if job.gpus_per_node is not None:
            per_node = max(job.gpus_per_node, 1)
            nodes = job.num_nodes or -(-need // per_node)
            return self.nodes_with(per_node) >= nodes
        if job.num_nodes is not None:
            nodes = max(job.num_nodes, 1)
            return len(self.top_sums) >= nodes and self.top_sums[nodes - 1] >= need
        return bool(self.top_sums) and self.top_sums[-1] >= need


class Room:
    """Per-type summaries of one free-GPU vector, built on first use; call :meth:`changed`
    whenever the vector changes (the scheduler does after each placement it takes)."""

    def __init__(self, cluster: Cluster, free_gpus: Sequence[int]) -> None:
        self.cluster = cluster
        self.free_gpus = free_gpus
        self._by_type: dict[tuple[str, tuple[str, ...]], _TypeRoom] = {}
        self._barred_indices: dict[tuple[str, ...], frozenset[int]] = {}

    def changed(self) -> None:
        self._by_type.clear()

    def could_fit(self, job: Job, barred: tuple[str, ...] = ()) -> bool:
        """False only when no node set of ``job``'s type in the free GPUs, holding none of the
        ``barred`` nodes, fits its shape."""
        if job.num_gpus <= 0:
            return True  # no shape to test: let the placement say
        key = (job.gpu_type.lower() if job.gpu_type else _ANY_TYPE, barred)
        room = self._by_type.get(key)
        if room is None:
            room = self._by_type[key] = _TypeRoom(self._free_counts(*key))
        return room.fits(job)

    def _free_counts(self, gpu_type: str, barred: tuple[str, ...]) -> list[int]:
        free = self.free_gpus
        nodes: Iterable[int] = (
            range(len(free)) if gpu_type == _ANY_TYPE else self.cluster.nodes_of_type(gpu_type))
        if barred:
            off = self._indices(barred)
            nodes = [i for i in nodes if i not in off]
        return [free[i] for i in nodes if free[i] > 0]

    def _indices(self, barred: tuple[str, ...]) -> frozenset[int]:
        """The barred nodes' indices (one set per barred tuple: a placement names the same
        few sets over and over)."""
        found = self._barred_indices.get(barred)
        if found is None:
            found = self._barred_indices[barred] = frozenset(
                self.cluster.index(name) for name in barred)
        return found
