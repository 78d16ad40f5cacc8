"""The two policy roles the :class:`~slurm_rl.scheduler.Scheduler` composes: ordering (which
job next) and placement (where). Below the scheduler and every policy that fills a role
(:mod:`slurm_rl.agents`), so that the agents may build schedulers.

Both are plain objects with a ``name`` (used in reports and as part of the policy id), an
``observe`` hook that sees every snapshot before a decision (learned state such as duration
history or machine-speed posteriors is updated there, never from anything but the snapshot),
and one decision method. Neither may know which world it runs in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from slurm_rl.core import ClusterSnapshot, Job, JobId, Placement

#: One score per pending job: a list, or an array for policies that score with array maths.
Scores = Sequence[float] | npt.NDArray[np.float64]


@runtime_checkable
class OrderingPolicy(Protocol):
    """Scores pending jobs; the scheduler releases them highest score first."""

    name: str

    def observe(self, snapshot: ClusterSnapshot) -> None: ...

    def score(self, snapshot: ClusterSnapshot) -> Scores:
        """One score per job in ``snapshot.pending`` (same order); higher goes first."""
        ...


@runtime_checkable
class PlacementPolicy(Protocol):
    """Chooses a node set for one job given the GPUs still free in this decision."""

    name: str

    def observe(self, snapshot: ClusterSnapshot) -> None: ...

    def place(
        self, job: Job, free_gpus: Sequence[int], snapshot: ClusterSnapshot
    ) -> Placement | None:
        """A placement using only ``free_gpus`` (indexed like ``snapshot.cluster.nodes``),
        satisfying the job's shape and GPU-type constraint, or ``None`` if none fits now."""
        ...


@runtime_checkable
class ExcludingPlacement(PlacementPolicy, Protocol):
    """A placement that also names nodes the resource manager must keep a job off when the
    job is released without a node set (Slurm's ``ExcNodeList``): what it would rather wait
    than run on, should GPUs free between two decisions."""

    def exclusions(self, job: Job, snapshot: ClusterSnapshot) -> tuple[str, ...]:
        """Names of nodes ``job`` must not start on (empty: no constraint)."""
        ...


@runtime_checkable
class BarringPlacement(PlacementPolicy, Protocol):
    """A placement that names in advance nodes it will never place a job on: the scheduler
    then skips asking it for a job whose shape fits the free GPUs only with them (most such
    jobs in a loaded walk are gangs and long jobs kept off slow nodes)."""

    def barred_nodes(self, job: Job, snapshot: ClusterSnapshot) -> tuple[str, ...]:
        """Names of nodes no node set that :meth:`place` returns for ``job`` in ``snapshot``
        holds (a promise: the scheduler's room test relies on it)."""
        ...


@runtime_checkable
class MigratingPlacement(PlacementPolicy, Protocol):
    """A placement that also moves running jobs: a checkpointable job on nodes far slower than
    ones left free after this decision's placements is requeued and restarted there."""

    def migrations(
        self, snapshot: ClusterSnapshot, free_gpus: Sequence[int]
    ) -> dict[JobId, Placement]:
        """Running jobs to move and the node sets (within ``free_gpus``) to move them to."""
        ...
