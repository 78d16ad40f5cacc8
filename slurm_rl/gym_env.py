"""A Gymnasium environment over the simulator, for training ordering policies.

Contract (checked by ``gymnasium.utils.env_checker.check_env`` in the tests):

* At each decision point the agent sees the first ``queue_slots`` pending jobs (submit order)
  and the cluster, and picks one of them to start now — its nodes are chosen by the configured
  placement policy — or ``queue_slots`` (the last action) to wait for the next decision point.
  Picking a job that does not fit, or an empty slot, changes nothing and costs a small penalty.
* Reward between two steps = −(Δ Σ job-seconds in the system) / 3600 − λ · Δ fees: the sum of
  JCTs in job-hours plus λ times the money spent, so the return over an episode is
  −(Σ JCT + λ · fees), the objective of the paper (:mod:`slurm_rl.objective`).
* The episode ends when every job of the scenario has finished.

Observation: a float32 vector — per slot [present, log GPUs, log wait, log predicted
duration, fits now]; then per GPU type in the cluster [free share]; then [log queue length].
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from slurm_rl import objective
from slurm_rl.agents.placement_baselines import FirstFit
from slurm_rl.core import ClusterSnapshot, Decision, Job
from slurm_rl.policy import PlacementPolicy
from slurm_rl.scenario import Scenario, build_simulation
from slurm_rl.simulator.engine import Simulation

SLOT_FEATURES = 5
INVALID_ACTION_PENALTY = 0.01


class SchedulingEnv(gym.Env[np.ndarray, int]):
    metadata = {"render_modes": []}

    def __init__(
        self,
        scenario: Scenario,
        *,
        queue_slots: int = 16,
        fee_weight: float = 0.0,
        placement: Callable[[], PlacementPolicy] = FirstFit,
    ) -> None:
        if scenario.sim.mode != "direct":
            raise ValueError("SchedulingEnv starts jobs itself: use a direct-mode scenario")
        self.scenario = scenario
        self.queue_slots = queue_slots
        self.fee_weight = fee_weight
        self._make_placement = placement
        self._gpu_types = scenario.cluster.gpu_types
        size = queue_slots * SLOT_FEATURES + len(self._gpu_types) + 1
        self.observation_space = gym.spaces.Box(0.0, 32.0, shape=(size,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(queue_slots + 1)  # type: ignore[assignment]
        self._size = size
        self._sim: Simulation | None = None
        self._snapshot: ClusterSnapshot | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._sim = build_simulation(self.scenario)
        self._placement = self._make_placement()
        self._snapshot = self._sim.next_snapshot()
        return self._observe(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        sim = self._require_sim()
        cost_before = self._cost(sim)
        penalty = 0.0
        if int(action) == self.queue_slots:
            self._snapshot = sim.next_snapshot()
        elif not self._start_slot(int(action)):
            penalty = INVALID_ACTION_PENALTY
        reward = objective.reward(self._cost(sim) - cost_before) - penalty
        terminated = self._snapshot is None
        return self._observe(), float(reward), terminated, False, {}

    def _require_sim(self) -> Simulation:
        if self._sim is None:
            raise RuntimeError("call reset() before step()")
        return self._sim

    def _cost(self, sim: Simulation) -> float:
        return objective.cost(objective.hours(sim.job_seconds), sim.fees_accrued, self.fee_weight)

    def _start_slot(self, slot: int) -> bool:
        snapshot, sim = self._snapshot, self._require_sim()
        if snapshot is None or slot >= len(snapshot.pending):
            return False
        job = snapshot.pending[slot]
        placement = self._placement.place(job, snapshot.free_gpus, snapshot)
        if placement is None:
            return False
        sim.apply(Decision("gym", (job.job_id,), {job.job_id: placement}))
        self._snapshot = sim.peek()
        return True

    def _observe(self) -> np.ndarray:
        observation = np.zeros(self._size, dtype=np.float32)
        snapshot = self._snapshot
        if snapshot is None:
            return observation
        for slot, job in enumerate(snapshot.pending[: self.queue_slots]):
            start = slot * SLOT_FEATURES
            observation[start : start + SLOT_FEATURES] = self._job_features(job, snapshot)
        observation[self.queue_slots * SLOT_FEATURES :] = self._cluster_features(snapshot)
        return observation

    def _job_features(self, job: Job, snapshot: ClusterSnapshot) -> list[float]:
        limit = job.time_limit or 3600.0
        fits = job.num_gpus <= max(snapshot.free_gpus, default=0)
        wait = max(0.0, snapshot.time - job.submit_time)
        return [1.0, math.log1p(job.num_gpus), math.log1p(wait),
                math.log1p(limit), float(fits)]

    def _cluster_features(self, snapshot: ClusterSnapshot) -> list[float]:
        free: dict[str, int] = dict.fromkeys(self._gpu_types, 0)
        total: dict[str, int] = dict.fromkeys(self._gpu_types, 0)
        for node, gpus in zip(snapshot.cluster.nodes, snapshot.free_gpus, strict=True):
            free[node.gpu_type] += gpus
            total[node.gpu_type] += node.gpus
        shares = [free[t] / total[t] if total[t] else 0.0 for t in self._gpu_types]
        return [*shares, math.log1p(len(snapshot.pending))]
