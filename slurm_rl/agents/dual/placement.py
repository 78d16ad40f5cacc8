"""The learned placement agent: a chooser proposes one node set per GPU type, a head picks.

:class:`LearnedPlacement` is a plain :class:`~slurm_rl.policy.PlacementPolicy`, so it runs
under the project's :class:`~slurm_rl.scheduler.Scheduler` like any heuristic. It picks the
head's argmax; the training rollouts override :meth:`LearnedPlacement.choose` to sample from the
head's softmax (or follow a teacher) and record each choice for PPO. Moving running jobs
(:meth:`LearnedPlacement.migrations`) and the nodes a released job must be kept off
(:meth:`LearnedPlacement.exclusions`) are the chooser's rules; the head never learned them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import Tensor

from slurm_rl.agents.dual.candidates import CandidateGenerator, CandidateSet
from slurm_rl.agents.dual.features import FeatureBuilder, FloatArray
from slurm_rl.agents.dual.messages import Messenger
from slurm_rl.agents.dual.network import PlacementHead
from slurm_rl.core import ClusterSnapshot, Job, JobId, Placement
from slurm_rl.policy import BarringPlacement, ExcludingPlacement, MigratingPlacement


def _unnamed(job: Job) -> Job:
    """``job`` without its model family: how the chooser judges every job (:mod:`.candidates`)."""
    return job if not job.model_family else dataclasses.replace(job, model_family="")


def _any_movable(snapshot: ClusterSnapshot) -> bool:
    return any(run.job.checkpointable for run in snapshot.running)


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
        # asked for every released job without nodes each cycle: a runtime-protocol check
        # costs tens of µs, so it is made once (the chooser never changes)
        chooser = generator.chooser
        self._excluding = chooser if isinstance(chooser, ExcludingPlacement) else None
        self._barring = chooser if isinstance(chooser, BarringPlacement) else None

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
        return found.placements[self.choose(job, found, snapshot)]

    def exclusions(self, job: Job, snapshot: ClusterSnapshot) -> tuple[str, ...]:
        """The chooser's, judged like its candidates: without the job's model family."""
        if self._excluding is None:
            return ()
        return self._excluding.exclusions(_unnamed(job), snapshot)

    def barred_nodes(self, job: Job, snapshot: ClusterSnapshot) -> tuple[str, ...]:
        """The chooser's: every candidate is one of its node sets, judged without the job's
        model family."""
        if self._barring is None:
            return ()
        return self._barring.barred_nodes(_unnamed(job), snapshot)

    def migrations(
        self, snapshot: ClusterSnapshot, free_gpus: Sequence[int]
    ) -> dict[JobId, Placement]:
        """The chooser's moves of running jobs, judged as it judges every job: without the
        job's model family (:mod:`.candidates`)."""
        chooser = self.generator.chooser
        if not isinstance(chooser, MigratingPlacement) or not _any_movable(snapshot):
            return {}
        running = tuple(
            dataclasses.replace(r, job=dataclasses.replace(r.job, model_family=""))
            for r in snapshot.running
        )
        return chooser.migrations(dataclasses.replace(snapshot, running=running), free_gpus)

    def choose(self, job: Job, found: CandidateSet, snapshot: ClusterSnapshot) -> int:
        """The index of the candidate to take (of at least two)."""
        row = self.builder.job_row(job, snapshot)
        cluster = self.builder.encode(snapshot).cluster
        return int(self.logits(row, found, cluster).argmax())

    def logits(self, row: FloatArray, found: CandidateSet, cluster: FloatArray) -> Tensor:
        """The head's logits for one job's candidates."""
        with torch.no_grad():
            return self.head(  # type: ignore[no-any-return]
                torch.from_numpy(row).float().unsqueeze(0),
                torch.from_numpy(found.features).float().unsqueeze(0),
                torch.from_numpy(cluster).float().unsqueeze(0),
                torch.ones(1, len(found), dtype=torch.bool),
                torch.from_numpy(found.log_cost).float().unsqueeze(0),
            )[0]
