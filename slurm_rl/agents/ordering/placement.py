"""The learned placement agent: a chooser proposes one node set per GPU type, a head picks.

:class:`LearnedPlacement` is a plain :class:`~slurm_rl.agents.base.PlacementPolicy`, so it runs
under the project's :class:`~slurm_rl.scheduler.Scheduler` like any heuristic. Deterministic by
default (the head's argmax); the training rollouts switch on ``explore`` to sample from the
head's softmax and record each choice for PPO.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from slurm_rl.agents.ordering.candidates import CandidateGenerator, CandidateSet
from slurm_rl.agents.ordering.features import FeatureBuilder, FloatArray
from slurm_rl.agents.ordering.messages import Messenger
from slurm_rl.agents.ordering.network import PlacementHead
from slurm_rl.core import ClusterSnapshot, Job, Placement


@dataclass(frozen=True)
class PlacementStep:
    """One sampled placement choice: the head's inputs, the choice and its log-probability."""

    job: FloatArray
    candidates: FloatArray
    cluster: FloatArray
    choice: int
    logp: float


class LearnedPlacement:
    """Placement by a learned head over per-type candidates (:mod:`.candidates`)."""

    def __init__(
        self, head: PlacementHead, builder: FeatureBuilder, generator: CandidateGenerator
    ) -> None:
        self.head = head
        self.builder = builder
        self.generator = generator
        self.name = f"rl-{generator.chooser.name}"
        self.messenger = Messenger(generator, head)
        self.explore: torch.Generator | None = None
        self.steps: list[PlacementStep] = []

    def observe(self, snapshot: ClusterSnapshot) -> None:
        self.builder.observe(snapshot)
        self.generator.chooser.observe(snapshot)

    def place(
        self, job: Job, free_gpus: Sequence[int], snapshot: ClusterSnapshot
    ) -> Placement | None:
        found = self.generator.candidates(job, free_gpus, snapshot)
        if len(found) == 0:
            return None
        if len(found) == 1:
            return found.placements[0]  # no choice to make, nothing to learn
        return found.placements[self._choose(job, found, snapshot)]

    def _choose(self, job: Job, found: CandidateSet, snapshot: ClusterSnapshot) -> int:
        row = self.builder.job_row(job, snapshot)
        cluster = self.builder.encode(snapshot).cluster
        with torch.no_grad():
            logits = self.head(
                torch.from_numpy(row).float().unsqueeze(0),
                torch.from_numpy(found.features).float().unsqueeze(0),
                torch.from_numpy(cluster).float().unsqueeze(0),
                torch.ones(1, len(found), dtype=torch.bool),
            )[0]
        if self.explore is None:
            return int(logits.argmax())
        logp = torch.log_softmax(logits, dim=0)
        choice = int(torch.multinomial(logp.exp(), 1, generator=self.explore))
        self.steps.append(
            PlacementStep(row.copy(), np.array(found.features), cluster, choice,
                          float(logp[choice]))
        )
        return choice
