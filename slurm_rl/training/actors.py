r"""The dual agent's two actors in training, in the deployed :class:`~slurm_rl.scheduler.Scheduler`
roles, ordering and placement: the rollout (:mod:`.rollout`) runs that scheduler in the shared loop,
so what is trained is what is deployed: the ranking step (fairness guard, ``--nice``), the
starvation guard, the ranking cap, reservations, exclusions and migrations all act on the
training decisions as on the daemon's.

* :class:`SamplingOrdering` is an :class:`~slurm_rl.policy.OrderingPolicy`. At a decision it
  sees a *candidate set*: the ``max_jobs`` pending jobs it scores highest (all of them when the
  queue is shorter), in submit order. That set is the actor's and the critic's observation; the
  ranking of its startable jobs is sampled from the Plackett–Luce policy (:mod:`.objectives`)
  and its first ``rank_k`` positions are the action. Its scores put the chosen rows first, in
  their order, the rest after by the acting scores (jobs that cannot start last), and then the
  deployed starvation guard (:func:`~slurm_rl.agents.starvation.promote_starved`).
* :class:`TrainingPlacement` is the deployed learned placement, sampling its candidate (or
  following the teacher) and recording each choice.

Modes: ``sample`` (training), ``greedy`` (argmax everywhere) and ``teacher`` (the ranking by
predicted GPU-hours as QSSF, or with ``ordering_teacher = "limit"`` by time limit as
``sjf-limit``, the ordering prior's rule; the placement the fastest candidate as
fastest-GPU-first, or with ``placement_teacher = "prior"`` the best under the head's prior,
the cheapest per unit of work under the cost prior: the behaviour-cloning targets).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from numpy.typing import NDArray

from slurm_rl.agents.dual.agent import Observation, OrderingAgent, make_chooser, masked_scores
from slurm_rl.agents.dual.bundle import LONG_LIMIT_H
from slurm_rl.agents.dual.candidates import CANDIDATE_FEATURES, CandidateGenerator, CandidateSet
from slurm_rl.agents.dual.features import JOB_FEATURES, FeatureBuilder, FloatArray
from slurm_rl.agents.dual.network import DualNetwork, PlacementHead, ordering_prior
from slurm_rl.agents.dual.placement import LearnedPlacement
from slurm_rl.agents.starvation import STARVATION_S, promote_starved
from slurm_rl.core import ClusterSnapshot, Job
from slurm_rl.fairness import RankingRules
from slurm_rl.policy import Scores
from slurm_rl.scheduler import Scheduler, top_k_order
from slurm_rl.training.objectives import gumbel_order, plackett_luce_logp
from slurm_rl.training.rewards import RewardKind

Mode = Literal["sample", "greedy", "teacher"]
PLACEMENT_TEACHERS = ("fastest", "prior")
ORDERING_TEACHERS = ("qssf", "limit")
_PRED_GPU_H = JOB_FEATURES.index("log_pred_gpu_h")
_PACE = CANDIDATE_FEATURES.index("pace")


@dataclass(frozen=True)
class RolloutConfig:
    fee_weight: float = 0.1
    chooser: str = "rwgp-excluding"
    mode: Mode = "sample"
    max_jobs: int = 128
    rank_k: int = 16
    max_ranked: int = 500
    communicate: bool = True
    reward: RewardKind = "job"
    placement_teacher: str = "fastest"  # what the warm start clones (PLACEMENT_TEACHERS)
    ordering_teacher: str = "qssf"  # the ranking the warm start clones (ORDERING_TEACHERS)
    starvation_s: float | None = STARVATION_S  # the deployed guard's (a bundle's starvation_h)
    # the ranking step's rules, as the daemon's (its fairness guard, --nice weight and
    # dispatch: with dispatch only the decisions start jobs)
    rules: RankingRules = field(default_factory=RankingRules)
    # where the chooser keeps long jobs off slow nodes: from this limit (a bundle's long_limit_h)
    long_limit_s: float = LONG_LIMIT_H * 3600
    # the chooser's GP hyperparameters (a retrain's refit: the candidate ships with them)
    placement_gp: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class PlacementStep:
    """One placement choice: the head's inputs, the choice and its log-probability."""

    job: FloatArray
    candidates: FloatArray
    cluster: FloatArray
    choice: int
    logp: float
    log_cost: FloatArray  # the chooser's, per candidate (the head's cost prior reads it)


@dataclass
class Step:
    """One decision: the candidate set (rows in submit order), the ranked prefix, both
    actors' log-probabilities and the reward that followed. (Values are computed by the
    trainer, in batches.)"""

    jobs: NDArray[np.float32]
    messages: NDArray[np.float32]
    cluster: NDArray[np.float32]
    valid: NDArray[np.bool_]
    order: NDArray[np.int64]
    logp: float
    placements: list[PlacementStep] = field(default_factory=list)
    reward: float = 0.0


class TrainingPlacement(LearnedPlacement):
    """The learned placement that samples (or follows the teacher) and records its choices."""

    def __init__(self, network: DualNetwork, builder: FeatureBuilder,
                 generator: CandidateGenerator, mode: Mode, seed: int,
                 teacher: str = "fastest") -> None:
        super().__init__(network.placement, builder, generator)
        self.mode = mode
        self.teacher = teacher
        self.rng = torch.Generator().manual_seed(seed)
        self.steps: list[PlacementStep] = []

    def choose(self, job: Job, found: CandidateSet, snapshot: ClusterSnapshot) -> int:
        row = self.builder.job_row(job, snapshot)
        cluster = self.builder.encode(snapshot).cluster
        logp = torch.log_softmax(self.logits(row, found, cluster), dim=0)
        if self.mode == "greedy":
            return int(logp.argmax())
        if self.mode == "teacher":
            choice = teacher_choice(self.head, found, self.teacher)
        else:
            choice = int(torch.multinomial(logp.exp(), 1, generator=self.rng))
        self.steps.append(PlacementStep(row.astype(np.float32), found.features.astype(np.float32),
                                        cluster.astype(np.float32), choice, float(logp[choice]),
                                        found.log_cost.astype(np.float32)))
        return choice

    def taken(self) -> list[PlacementStep]:
        """The choices recorded since the last call."""
        steps, self.steps = self.steps, []
        return steps


def teacher_choice(head: PlacementHead, found: CandidateSet, teacher: str = "fastest") -> int:
    """The placement the warm start clones: the fastest candidate, or (``teacher = "prior"``)
    the best under the head's prior when it has one — the cost prior's cheapest per unit of
    work, so cloning sharpens the prior rather than pulling a fee-aware head back to the
    fastest GPUs."""
    if teacher not in PLACEMENT_TEACHERS:
        raise ValueError(f"unknown placement teacher {teacher!r}; known: {PLACEMENT_TEACHERS}")
    if teacher == "prior" and head.pace_sharpness > 0 and head.prior_kind == "cost":
        return int(np.argmin(found.log_cost))
    return int(np.argmax(found.features[:, _PACE]))


def teacher_keys(jobs: FloatArray, teacher: str) -> FloatArray:
    """The ranking the warm start clones, higher first: QSSF's −log predicted GPU-hours, or
    (``"limit"``) the ordering prior, shortest time limit first."""
    if teacher not in ORDERING_TEACHERS:
        raise ValueError(f"unknown ordering teacher {teacher!r}; known: {ORDERING_TEACHERS}")
    if teacher == "limit":
        keys: FloatArray = ordering_prior(torch.from_numpy(jobs).double()).numpy()
        return keys
    return -jobs[:, _PRED_GPU_H].astype(float)


def restrict(observation: Observation, rows: NDArray[np.int64]) -> Observation:
    return Observation(observation.jobs[rows], observation.messages[rows], observation.cluster,
                       observation.valid[rows])


class SamplingOrdering:
    """The ordering actor (module docstring). ``score`` leaves its :class:`Step` (the
    placements not yet attached) in :attr:`step`, which the rollout's recorder takes."""

    def __init__(self, network: DualNetwork, agent: OrderingAgent, config: RolloutConfig,
                 seed: int) -> None:
        self.network = network
        self.agent = agent
        self.config = config
        self.rng = np.random.default_rng(seed)
        self.name = agent.name
        self.step: Step | None = None

    def observe(self, snapshot: ClusterSnapshot) -> None:
        self.agent.observe(snapshot)

    def candidate_set(self, snapshot: ClusterSnapshot) -> tuple[
        Observation, FloatArray, NDArray[np.int64]
    ]:
        """The full observation, the acting scores and the candidate set's rows."""
        full = self.agent.observation(snapshot)
        if self.config.mode == "teacher":
            acting = teacher_keys(full.jobs, self.config.ordering_teacher)
        else:
            acting = self.agent.raw_scores(full)
        rows = np.sort(np.array(top_k_order(masked_scores(acting, full.valid),
                                            self.config.max_jobs), dtype=np.int64))
        return full, acting, rows

    def final_observation(self, snapshot: ClusterSnapshot) -> Observation:
        """What the critic sees of the state at truncation (its value bootstraps)."""
        full, _, rows = self.candidate_set(snapshot)
        return restrict(full, rows)

    def score(self, snapshot: ClusterSnapshot) -> Scores:
        full, acting, rows = self.candidate_set(snapshot)
        seen = restrict(full, rows)
        scores = self._set_scores(seen, full, acting, rows)
        order = self._order(seen, scores.double().numpy(), acting[rows])
        prefix = order[: self.config.rank_k]
        logp = _prefix_logp(scores, prefix, seen.valid) if self.config.mode == "sample" else 0.0
        self.step = Step(seen.jobs.astype(np.float32), seen.messages.astype(np.float32),
                         seen.cluster.astype(np.float32), seen.valid, prefix, logp)
        final = chosen_first(masked_scores(acting, full.valid), rows[order])
        waits = np.array([snapshot.time - job.submit_time for job in snapshot.pending])
        return promote_starved(final, waits, self.config.starvation_s)

    def _set_scores(self, seen: Observation, full: Observation, acting: FloatArray,
                    rows: NDArray[np.int64]) -> torch.Tensor:
        """The network's scores over the candidate set, pooled over the set alone (the
        observation PPO re-evaluates). Skipped where they cannot matter: nothing can start,
        or the set is the whole queue, whose scores ``acting`` already holds."""
        whole = len(rows) == len(full.jobs) and self.config.mode != "teacher"
        if whole or not seen.valid.any():
            return torch.from_numpy(acting[rows]).float()
        with torch.no_grad():
            scores: torch.Tensor = self.network.ordering(*observation_tensors(seen))[0]
        return scores

    def _order(self, seen: Observation, scores: FloatArray, acting: FloatArray) -> (
        NDArray[np.int64]
    ):
        """The set's startable rows, most preferred first, as the mode says."""
        if self.config.mode == "sample":
            return gumbel_order(scores, seen.valid, self.rng)
        keys = scores if self.config.mode == "greedy" else acting
        valid = np.flatnonzero(seen.valid)
        return valid[np.argsort(-keys[valid], kind="stable")]


def chosen_first(scores: FloatArray, first: NDArray[np.int64]) -> FloatArray:
    """``scores`` with the rows ``first`` above every other, in their order."""
    if not len(first):
        return scores
    top = float(scores.max()) + len(first) + 1.0
    final = scores.copy()
    final[first] = top - np.arange(len(first))
    return final


@dataclass(frozen=True)
class Actors:
    """The training scheduler and its two actors."""

    scheduler: Scheduler
    ordering: SamplingOrdering
    placement: TrainingPlacement


def training_actors(network: DualNetwork, gpu_speed: Mapping[str, float],
                    config: RolloutConfig, seed: int) -> Actors:
    """The deployed scheduler's shape (:func:`~slurm_rl.agents.dual.agent.build_scheduler`,
    the dual variant) with the training actors in its two roles."""
    builder = FeatureBuilder(gpu_speed)
    chooser = make_chooser(config.chooser, gpu_speed, config.fee_weight, config.placement_gp,
                           long_limit_s=config.long_limit_s)
    generator = CandidateGenerator(chooser, builder)
    placement = TrainingPlacement(network, builder, generator, config.mode, seed + 1,
                                  config.placement_teacher)
    network.ordering.communicate = config.communicate
    agent = OrderingAgent(network.ordering, builder, placement.messenger)
    ordering = SamplingOrdering(network, agent, config, seed)
    scheduler = Scheduler(ordering, placement, max_ranked=config.max_ranked,
                          rules=config.rules)
    return Actors(scheduler, ordering, placement)


def observation_tensors(seen: Observation) -> tuple[torch.Tensor, ...]:
    # copies: arrays that came back from a Ray actor are read-only
    return (
        torch.tensor(seen.jobs, dtype=torch.float32).unsqueeze(0),
        torch.tensor(seen.messages, dtype=torch.float32).unsqueeze(0),
        torch.tensor(seen.cluster, dtype=torch.float32).unsqueeze(0),
        torch.ones(1, len(seen.jobs), dtype=torch.bool),
    )


def _prefix_logp(scores: torch.Tensor, prefix: NDArray[np.int64],
                 valid: NDArray[np.bool_]) -> float:
    if not len(prefix):
        return 0.0
    order = torch.from_numpy(prefix).unsqueeze(0)
    logp = plackett_luce_logp(scores.unsqueeze(0), order, torch.ones_like(order, dtype=torch.bool),
                              torch.from_numpy(valid).unsqueeze(0))
    return float(logp[0])
