r"""Rollouts: the dual agent acting in the simulator, recording what PPO and cloning need.

An episode is a window of a training trace, replayed in ``slurm`` action mode:

1. **warm-up** (``warmup_start`` to ``start``): a realisable heuristic (QSSF + fastest-GPU)
   schedules, so the cluster is as busy as it really was when the agent takes over; the agent
   only observes (its runtime history and the RWGP's machine beliefs fill up);
2. **agent phase** (``start`` to ``end``): at each decision the agent acts and one
   :class:`Step` is recorded;
3. **truncation** at ``end``: the critic's value of the last state bootstraps the rest;
4. **drain** (``job`` rewards only): the heuristic finishes the jobs, so that each job started
   in the agent phase has its outcome, and the rewards are handed out (:mod:`.rewards`).

At a decision the ordering actor sees a *candidate set*: the ``max_jobs`` pending jobs it
scores highest (all of them when the queue is shorter), in submit order. That set is the
actor's and the critic's observation; the ranking of its startable jobs is sampled from the
Plackett–Luce policy (:mod:`.objectives`) and its first ``rank_k`` positions are the action.
The placement head then samples one candidate per job that gets GPUs, walking the ranking as
the project's :class:`~slurm_rl.scheduler.Scheduler` does (greedy walk).

Modes: ``sample`` (training), ``greedy`` (argmax everywhere) and ``teacher`` (the ranking by
predicted GPU-hours as QSSF; the placement the fastest candidate as fastest-GPU-first, or with
``placement_teacher = "prior"`` the best under the head's prior, the cheapest per unit of work
under the cost prior: the behaviour-cloning targets).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from numpy.typing import NDArray

from slurm_rl import objective
from slurm_rl.agents.ordering.agent import Observation, OrderingAgent, make_chooser, masked_scores
from slurm_rl.agents.ordering.candidates import CANDIDATE_FEATURES, CandidateGenerator, CandidateSet
from slurm_rl.agents.ordering.features import JOB_FEATURES, FeatureBuilder, FloatArray
from slurm_rl.agents.ordering.network import DualNetwork, PlacementHead
from slurm_rl.agents.ordering.placement import LearnedPlacement
from slurm_rl.agents.ordering_baselines import Qssf
from slurm_rl.agents.placement_baselines import FastestGpuFirst
from slurm_rl.core import ClusterSnapshot, Decision, Job, JobId, Placement
from slurm_rl.scheduler import Scheduler, top_k_order
from slurm_rl.simulator.engine import Simulation
from slurm_rl.training.objectives import gumbel_order, plackett_luce_logp
from slurm_rl.training.rewards import RewardKind, job_rewards

Mode = Literal["sample", "greedy", "teacher"]
PLACEMENT_TEACHERS = ("fastest", "prior")
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


@dataclass(frozen=True)
class EpisodeSpec:
    warmup_start: float
    start: float
    end: float
    seed: int


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


@dataclass(frozen=True)
class Episode:
    spec: EpisodeSpec
    steps: list[Step]
    final: Observation | None  # the state at truncation; None when the replay ended
    span: tuple[float, float]  # the first decision and the end of the agent phase
    job_hours: float  # ∫ jobs in the system dt over the agent phase, hours
    fees: float
    wall_s: float

    def cost(self, fee_weight: float) -> float:
        return objective.cost(self.job_hours, self.fees, fee_weight)


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


def restrict(observation: Observation, rows: NDArray[np.int64]) -> Observation:
    return Observation(observation.jobs[rows], observation.messages[rows], observation.cluster,
                       observation.valid[rows])


class Actor:
    """The dual agent in training (module docstring)."""

    def __init__(self, network: DualNetwork, gpu_speed: Mapping[str, float],
                 config: RolloutConfig, seed: int) -> None:
        self.network = network
        self.config = config
        self.rng = np.random.default_rng(seed)
        builder = FeatureBuilder(gpu_speed)
        chooser = make_chooser(config.chooser, gpu_speed, config.fee_weight)
        generator = CandidateGenerator(chooser, builder)
        self.placement = TrainingPlacement(network, builder, generator, config.mode, seed + 1,
                                           config.placement_teacher)
        network.ordering.communicate = config.communicate
        self.ordering = OrderingAgent(network.ordering, builder, self.placement.messenger)

    def observe(self, snapshot: ClusterSnapshot) -> None:
        self.ordering.observe(snapshot)
        self.placement.observe(snapshot)

    def candidate_set(self, snapshot: ClusterSnapshot) -> tuple[
        Observation, FloatArray, NDArray[np.int64]
    ]:
        """The full observation, the acting scores and the candidate set's rows."""
        self.observe(snapshot)
        full = self.ordering.observation(snapshot)
        if self.config.mode == "teacher":
            acting = -full.jobs[:, _PRED_GPU_H].astype(float)
        else:
            acting = self.ordering.raw_scores(full)
        rows = np.sort(np.array(top_k_order(masked_scores(acting, full.valid),
                                            self.config.max_jobs), dtype=np.int64))
        return full, acting, rows

    def final_observation(self, snapshot: ClusterSnapshot) -> Observation:
        """What the critic sees of the state at truncation (its value bootstraps)."""
        full, _, rows = self.candidate_set(snapshot)
        return restrict(full, rows)

    def act(self, snapshot: ClusterSnapshot) -> tuple[Decision, Step]:
        full, acting, rows = self.candidate_set(snapshot)
        seen = restrict(full, rows)
        scores = self._set_scores(seen, full, acting, rows)
        order = self._order(seen, scores.double().numpy(), acting[rows])
        prefix = order[: self.config.rank_k]
        logp = _prefix_logp(scores, prefix, seen.valid) if self.config.mode == "sample" else 0.0
        ranked = self._ranking(snapshot, full, acting, rows[order])
        self.placement.steps = []
        placements = walk(self.placement, snapshot, ranked)
        step = Step(seen.jobs.astype(np.float32), seen.messages.astype(np.float32),
                    seen.cluster.astype(np.float32), seen.valid, prefix, logp,
                    self.placement.steps)
        ranking = tuple(job.job_id for job in ranked)
        return Decision("rl-train", ranking, placements), step

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

    def _ranking(self, snapshot: ClusterSnapshot, full: Observation, acting: FloatArray,
                 first: NDArray[np.int64]) -> list[Job]:
        """The chosen rows first, in their order; then the rest by the acting scores (masked
        jobs last), at most ``max_ranked`` jobs."""
        final = masked_scores(acting, full.valid)
        if len(first):
            top = float(final.max()) + len(first) + 1.0
            final = final.copy()
            final[first] = top - np.arange(len(first))
        ranked = top_k_order(final, self.config.max_ranked)
        return [snapshot.pending[i] for i in ranked]


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


def walk(placement: LearnedPlacement, snapshot: ClusterSnapshot,
         ranked: Sequence[Job]) -> dict[JobId, Placement]:
    """Placements down the ranking in the GPUs still free (the scheduler's greedy walk)."""
    free = list(snapshot.free_gpus)
    available = sum(free)
    cluster = snapshot.cluster
    placements: dict[JobId, Placement] = {}
    for job in ranked:
        if available == 0:
            break
        chosen = placement.place(job, free, snapshot) if job.num_gpus <= available else None
        if chosen is None:
            continue
        placements[job.job_id] = chosen
        for name, gpus in zip(chosen.nodes, chosen.gpus, strict=True):
            free[cluster.index(name)] -= gpus
        available -= chosen.num_gpus
    return placements


def cost_parts(simulation: Simulation) -> tuple[float, float]:
    return objective.hours(simulation.job_seconds), simulation.fees_accrued


def run_episode(network: DualNetwork, simulation: Simulation, gpu_speed: Mapping[str, float],
                config: RolloutConfig, spec: EpisodeSpec) -> Episode:
    """One episode in a fresh ``simulation`` of the episode's jobs (module docstring); rewards
    as ``config.reward`` says (:mod:`.rewards`)."""
    started = time.perf_counter()
    actor = Actor(network, gpu_speed, config, spec.seed)
    teacher = Scheduler(Qssf(), FastestGpuFirst(gpu_speed))
    snapshot = _run_teacher(simulation, teacher, spec.start, actor)
    hours0, fees0 = previous = cost_parts(simulation)
    steps: list[Step] = []
    times: list[float] = []
    while snapshot is not None and snapshot.time < spec.end:
        decision, step = actor.act(snapshot)
        times.append(snapshot.time)
        simulation.apply(decision)
        snapshot = simulation.next_snapshot()
        now = cost_parts(simulation)
        spent = objective.cost(now[0] - previous[0], now[1] - previous[1], config.fee_weight)
        step.reward = objective.reward(spent)
        previous = now
        steps.append(step)
    final = None if snapshot is None else actor.final_observation(snapshot)
    phase_end = simulation.now
    if config.reward == "job":
        _run_teacher(simulation, teacher, math.inf, None, snapshot)  # drain: outcomes known
        rewards = job_rewards(simulation.outcomes, simulation.timeline, times, phase_end,
                              config.fee_weight, simulation.cluster)
        for step, reward in zip(steps, rewards.tolist(), strict=True):
            step.reward = reward
    span = (times[0] if times else phase_end, phase_end)
    return Episode(spec, steps, final, span, previous[0] - hours0, previous[1] - fees0,
                   time.perf_counter() - started)


def _run_teacher(simulation: Simulation, teacher: Scheduler, until: float, actor: Actor | None,
                 snapshot: ClusterSnapshot | None = None) -> ClusterSnapshot | None:
    """The heuristic decides until ``until`` (the actor, if any, observes); returns the first
    snapshot at or after it."""
    snapshot = snapshot if snapshot is not None else simulation.next_snapshot()
    while snapshot is not None and snapshot.time < until:
        if actor is not None:
            actor.observe(snapshot)
        simulation.apply(teacher.decide(snapshot))
        snapshot = simulation.next_snapshot()
    return snapshot
