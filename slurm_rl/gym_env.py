"""A Gymnasium view of the shared loop: an agent's scores decide through the deployed scheduler.

The environment is no scheduler of its own. Each step is one cycle of the shared loop
(:func:`slurm_rl.loop.run_cycle`) in the simulator (:mod:`slurm_rl.simulator.world`): the
deployed :class:`~slurm_rl.scheduler.Scheduler` decides with the action as its ordering
policy's scores and the given placement policy, so the ranking step (fairness guard,
``--nice``), the ranking cap, reservations, exclusions and migrations act as in a replay or the
daemon, and the scenario's action mode (``direct`` or ``slurm``) carries the decision out.

Contract (checked by ``gymnasium.utils.env_checker.check_env`` in the tests):

* **Observation**: a float32 vector, the dual agent's own features
  (:mod:`slurm_rl.agents.dual.features`): per queue slot ``[present, *JOB_FEATURES]`` for
  the first ``queue_slots`` pending jobs in submit order (zeros for an empty slot), then
  ``CLUSTER_FEATURES``; clipped to the space's bounds ``[OBS_LOW, OBS_HIGH]``. The features'
  runtime history learns from every snapshot of the episode, as the agent's does.
* **Action**: one score in ``[-1, 1]`` per queue slot, higher released first. Pending jobs
  beyond the slots rank after every slot, in submit order. The scheduler then places down the
  ranking as deployed (the greedy walk: every released job that fits starts); scores of empty
  slots are ignored. An action of another shape, or with a value outside ``[-1, 1]`` or not a
  number, is refused (``ValueError``).
* **Reward** of a step: :func:`slurm_rl.objective.reward` of the cost
  (:func:`slurm_rl.objective.cost`, ``JCT hours + λ · fees``) incurred from this decision to
  the next, so an episode's return is ``−(Σ JCT h + λ · fees)``.
* **Episode**: the scenario's whole trace; it terminates when the simulation has no decision
  point left (every job finished). There is no truncation.
* **Seeding** as the training rollouts seed their episodes: ``reset(seed=s)`` builds the
  simulation with ``SimConfig.seed = s``; ``reset()`` without a seed draws one from the
  environment's generator (so the first unseeded reset after ``reset(seed=s)`` is reproducible).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np
from numpy.typing import NDArray

from slurm_rl import objective
from slurm_rl.agents.dual.features import CLUSTER_FEATURES, JOB_FEATURES, FeatureBuilder
from slurm_rl.agents.placement_baselines import FirstFit
from slurm_rl.core import ClusterSnapshot
from slurm_rl.loop import Observed, run_cycle
from slurm_rl.policy import PlacementPolicy, Scores
from slurm_rl.scenario import Scenario, build_simulation
from slurm_rl.scheduler import Scheduler
from slurm_rl.simulator.engine import Simulation
from slurm_rl.simulator.world import SimActuator, TraceSource

SLOT_FEATURES = 1 + len(JOB_FEATURES)  # present, then the agent's job features
OBS_LOW, OBS_HIGH = -16.0, 32.0
BEYOND_THE_SLOTS = -2.0  # below every action score: jobs past the slots rank last
_SEED_RANGE = 2**31

Observation = NDArray[np.float32]


class ActionScores:
    """The ordering role filled by the environment's action (module docstring, "Action")."""

    name = "gym"

    def __init__(self, queue_slots: int) -> None:
        self.queue_slots = queue_slots
        self.action: NDArray[np.float64] = np.zeros(queue_slots)

    def observe(self, snapshot: ClusterSnapshot) -> None:
        return None

    def score(self, snapshot: ClusterSnapshot) -> Scores:
        scores = np.full(len(snapshot.pending), BEYOND_THE_SLOTS)
        shown = min(self.queue_slots, len(scores))
        scores[:shown] = self.action[:shown]
        return scores


class HeldSnapshot:
    """The loop's source for one step: the snapshot the agent observed, once."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self._snapshot: ClusterSnapshot | None = snapshot

    def observe(self) -> Observed[None] | None:
        snapshot, self._snapshot = self._snapshot, None
        return Observed(snapshot, None) if snapshot is not None else None


class SchedulingEnv(gym.Env[Observation, NDArray[np.float32]]):
    metadata = {"render_modes": []}

    def __init__(
        self,
        scenario: Scenario,
        *,
        queue_slots: int = 16,
        fee_weight: float = 0.0,
        placement: Callable[[], PlacementPolicy] = FirstFit,
        gpu_speed: Mapping[str, float] | None = None,
    ) -> None:
        if queue_slots < 1:
            raise ValueError(f"queue_slots must be at least 1, not {queue_slots}")
        self.scenario = scenario
        self.queue_slots = queue_slots
        self.fee_weight = fee_weight
        self._make_placement = placement
        self._gpu_speed = gpu_speed
        self._size = size = queue_slots * SLOT_FEATURES + len(CLUSTER_FEATURES)
        self.observation_space = gym.spaces.Box(OBS_LOW, OBS_HIGH, shape=(size,),
                                                dtype=np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(queue_slots,), dtype=np.float32)
        self._sim: Simulation | None = None
        self._source: TraceSource | None = None
        self._snapshot: ClusterSnapshot | None = None
        self._ordering = ActionScores(queue_slots)
        self._scheduler = Scheduler(self._ordering, placement())
        self._features = FeatureBuilder(gpu_speed)

    @property
    def simulation(self) -> Simulation | None:
        """The episode's simulation (None before the first reset): its outcomes, its costs."""
        return self._sim

    @property
    def snapshot(self) -> ClusterSnapshot | None:
        """The decision point the last observation shows; None once the episode ended."""
        return self._snapshot

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        episode_seed = seed if seed is not None else int(self.np_random.integers(_SEED_RANGE))
        scenario = replace(self.scenario, sim=replace(self.scenario.sim, seed=episode_seed))
        self._sim = build_simulation(scenario)
        self._source = TraceSource(self._sim)
        self._ordering = ActionScores(self.queue_slots)
        self._scheduler = Scheduler(self._ordering, self._make_placement())
        self._features = FeatureBuilder(self._gpu_speed)
        self._snapshot = self._next_snapshot(self._source)
        return self._observe(), {}

    def step(
        self, action: NDArray[np.float32]
    ) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        sim, source, snapshot = self._sim, self._source, self._snapshot
        if sim is None or source is None:
            raise RuntimeError("call reset() before step()")
        if snapshot is None:
            raise RuntimeError("the episode has ended: call reset()")
        self._ordering.action = self._checked(action)
        cost_before = self._cost(sim)
        run_cycle(HeldSnapshot(snapshot), self._scheduler, SimActuator(sim))
        self._snapshot = self._next_snapshot(source)
        reward = objective.reward(self._cost(sim) - cost_before)
        return self._observe(), float(reward), self._snapshot is None, False, {}

    @staticmethod
    def _next_snapshot(source: TraceSource) -> ClusterSnapshot | None:
        observed = source.observe()
        return observed.snapshot if observed is not None else None

    def _checked(self, action: NDArray[np.float32]) -> NDArray[np.float64]:
        scores = np.asarray(action, dtype=np.float64)
        if scores.shape != (self.queue_slots,):
            raise ValueError(f"the action must be {self.queue_slots} scores (one per queue "
                             f"slot), not an array of shape {scores.shape}")
        if not np.all((scores >= -1.0) & (scores <= 1.0)):
            raise ValueError(f"every score of the action must be in [-1, 1]: {scores.tolist()}")
        return scores

    def _cost(self, sim: Simulation) -> float:
        return objective.cost(objective.hours(sim.job_seconds), sim.fees_accrued, self.fee_weight)

    def _observe(self) -> Observation:
        observation = np.zeros(self._size, dtype=np.float32)
        snapshot = self._snapshot
        if snapshot is None:
            return observation
        self._features.observe(snapshot)
        encoded = self._features.encode(snapshot)
        shown = min(self.queue_slots, len(snapshot.pending))
        slots = observation[: self.queue_slots * SLOT_FEATURES].reshape(self.queue_slots, -1)
        slots[:shown, 0] = 1.0
        slots[:shown, 1:] = encoded.jobs[:shown]
        observation[self.queue_slots * SLOT_FEATURES :] = encoded.cluster
        return np.clip(observation, OBS_LOW, OBS_HIGH)
