"""The scheduler: an ordering policy and a placement policy composed into one decision.

The ordering policy scores every pending job; jobs are released highest score first. Walking
that ranking, the placement policy proposes a node set for each job that fits in the GPUs still
free in this decision. ``walk="strict"`` stops at the first job that does not fit (a job never
starts before a higher-ranked one); ``walk="greedy"`` carries on down the ranking.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from slurm_rl.agents.base import OrderingPolicy, PlacementPolicy
from slurm_rl.core import ClusterSnapshot, Decision, JobId, Placement

Walk = Literal["strict", "greedy"]


class Scheduler:
    def __init__(
        self, ordering: OrderingPolicy, placement: PlacementPolicy, *, walk: Walk = "greedy"
    ) -> None:
        self.ordering = ordering
        self.placement = placement
        self.walk = walk

    @property
    def policy_id(self) -> str:
        return f"{self.ordering.name}+{self.placement.name}"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        self.ordering.observe(snapshot)
        self.placement.observe(snapshot)
        if not snapshot.pending:
            return Decision(self.policy_id, ranking=())
        scores = np.asarray(self.ordering.score(snapshot), dtype=float)
        order = np.argsort(-scores, kind="stable")
        ranking = tuple(snapshot.pending[i].job_id for i in order)
        placements = self._place(snapshot, order)
        return Decision(self.policy_id, ranking, placements, tuple(scores[order].tolist()))

    def _place(self, snapshot: ClusterSnapshot, order: np.ndarray) -> dict[JobId, Placement]:
        free = list(snapshot.free_gpus)
        available = sum(free)
        placements: dict[JobId, Placement] = {}
        cluster = snapshot.cluster
        for i in order:
            job = snapshot.pending[i]
            if available == 0:
                break
            placement = None
            if job.num_gpus <= available:
                placement = self.placement.place(job, free, snapshot)
            if placement is None:
                if self.walk == "strict":
                    break
                continue
            placements[job.job_id] = placement
            for name, gpus in zip(placement.nodes, placement.gpus, strict=True):
                free[cluster.index(name)] -= gpus
            available -= placement.num_gpus
        return placements
