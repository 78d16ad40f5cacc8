r"""Rollouts: the dual agent acting in the simulator, recording what PPO and cloning need.

Every phase runs the deployed loop (:func:`slurm_rl.loop.run_loop`: snapshot, decide, apply,
record) over the simulator's source and actuator; the agent phase's decision maker is the
deployed :class:`~slurm_rl.scheduler.Scheduler` with the training actors in its two roles
(:mod:`.actors`), so the decisions it trains on carry the ranking step, the starvation guard,
the ranking cap, reservations, exclusions and migrations as the daemon's do. An episode is a
window of a training trace, replayed in ``slurm`` action mode:

1. **warm-up** (``warmup_start`` to ``start``): a realisable heuristic (QSSF + fastest-GPU)
   schedules, so the cluster is as busy as it really was when the agent takes over; the
   agent's scheduler only observes (its runtime history, the RWGP's machine beliefs and the
   started jobs' waits fill up);
2. **agent phase** (``start`` to ``end``): the agent's scheduler decides; a recorder takes one
   :class:`~.actors.Step` per decision with pending jobs (the ordering actor's candidate set
   and sampled prefix, the placement actor's choices) and the cost until the next one;
3. **truncation** at ``end``: the critic's value of the last state bootstraps the rest;
4. **drain** (``job`` rewards only): the heuristic finishes the jobs, so that each job started
   in the agent phase has its outcome, and the rewards are handed out (:mod:`.rewards`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

from slurm_rl import objective
from slurm_rl.agents.dual.agent import Observation
from slurm_rl.agents.dual.network import DualNetwork
from slurm_rl.agents.ordering_baselines import Qssf
from slurm_rl.agents.placement_baselines import FastestGpuFirst
from slurm_rl.core import ClusterSnapshot, Decision
from slurm_rl.loop import DecisionMaker, Observed, Recorder, run_loop
from slurm_rl.scheduler import Scheduler
from slurm_rl.simulator.engine import Simulation
from slurm_rl.simulator.world import SimActuator
from slurm_rl.training.actors import Actors, RolloutConfig, Step, training_actors
from slurm_rl.training.rewards import job_rewards


@dataclass(frozen=True)
class EpisodeSpec:
    warmup_start: float
    start: float
    end: float
    seed: int
    # the offered load the episode's cluster is scaled to (WorldSpec.loads); None: as specified
    load: float | None = None


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


def cost_parts(simulation: Simulation) -> tuple[float, float]:
    return objective.hours(simulation.job_seconds), simulation.fees_accrued




class PhaseSource:
    """The simulation's decision points before ``until`` (the shared loop's source); the
    first at or after it ends the phase and is kept in :attr:`left` for the next phase."""

    def __init__(self, simulation: Simulation, until: float,
                 first: ClusterSnapshot | None = None) -> None:
        self.simulation = simulation
        self.until = until
        self._first = first
        self.left: ClusterSnapshot | None = None

    def observe(self) -> Observed[None] | None:
        snapshot, self._first = self._first, None
        if snapshot is None:
            snapshot = self.simulation.next_snapshot()
        if snapshot is None:
            return None
        if snapshot.time >= self.until:
            self.left = snapshot
            return None
        return Observed(snapshot, None)


class Watcher:
    """The warm-up's recorder: the agent's scheduler observes what the
    heuristic sees (snapshots are immutable, so after the heuristic's decision is the same)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def record(self, snapshot: ClusterSnapshot, decision: Decision, result: object) -> None:
        self.scheduler.observe(snapshot)


class StepRecorder:
    """The agent phase's recorder: one :class:`Step` per decision the ordering actor scored
    (a decision with nothing pending has no action), with the placement actor's choices and
    the cost from it to the next recorded step (to the phase's end for the last)."""

    def __init__(self, simulation: Simulation, actors: Actors, fee_weight: float) -> None:
        self.simulation = simulation
        self.actors = actors
        self.fee_weight = fee_weight
        self.steps: list[Step] = []
        self.times: list[float] = []
        self._mark = cost_parts(simulation)

    def record(self, snapshot: ClusterSnapshot, decision: Decision, result: object) -> None:
        step, self.actors.ordering.step = self.actors.ordering.step, None
        choices = self.actors.placement.taken()
        if step is None:
            return
        self._close()
        step.placements = choices
        self.steps.append(step)
        self.times.append(snapshot.time)

    def finish(self) -> None:
        self._close()

    def _close(self) -> None:
        """The cost since the last mark, as the last step's reward."""
        now = cost_parts(self.simulation)
        if self.steps:
            spent = objective.cost(now[0] - self._mark[0], now[1] - self._mark[1],
                                   self.fee_weight)
            self.steps[-1].reward = objective.reward(spent)
        self._mark = now


def run_episode(network: DualNetwork, simulation: Simulation, gpu_speed: Mapping[str, float],
                config: RolloutConfig, spec: EpisodeSpec) -> Episode:
    """One episode in a fresh ``simulation`` of the episode's jobs (module docstring); rewards
    as ``config.reward`` says (:mod:`.rewards`)."""
    started = time.perf_counter()
    actors = training_actors(network, gpu_speed, config, spec.seed)
    teacher = Scheduler(Qssf(), FastestGpuFirst(gpu_speed),
                        rules=config.rules)
    snapshot = _phase(simulation, teacher, spec.start, Watcher(actors.scheduler))
    hours0, fees0 = cost_parts(simulation)
    recorder = StepRecorder(simulation, actors, config.fee_weight)
    source = PhaseSource(simulation, spec.end, snapshot)
    run_loop(source, actors.scheduler, SimActuator(simulation), recorder)
    recorder.finish()
    snapshot, phase_end = source.left, simulation.now
    hours1, fees1 = cost_parts(simulation)
    final = None
    if snapshot is not None:
        actors.scheduler.observe(snapshot)
        final = actors.ordering.final_observation(snapshot)
    if config.reward == "job":
        _phase(simulation, teacher, math.inf, None, snapshot)  # drain: outcomes known
        rewards = job_rewards(simulation.outcomes, simulation.timeline, recorder.times,
                              phase_end, config.fee_weight, simulation.cluster)
        for step, reward in zip(recorder.steps, rewards.tolist(), strict=True):
            step.reward = reward
    times = recorder.times
    span = (times[0] if times else phase_end, phase_end)
    return Episode(spec, recorder.steps, final, span, hours1 - hours0, fees1 - fees0,
                   time.perf_counter() - started)


def _phase(simulation: Simulation, scheduler: DecisionMaker, until: float,
           recorder: Recorder | None,
           first: ClusterSnapshot | None = None) -> ClusterSnapshot | None:
    """``scheduler`` decides in the shared loop until ``until``; returns the first snapshot at
    or after it."""
    source = PhaseSource(simulation, until, first)
    run_loop(source, scheduler, SimActuator(simulation), recorder)
    return source.left
