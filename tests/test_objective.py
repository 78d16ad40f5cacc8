"""The objective −(JCT h + λ·fees), pinned to the bit.

Every figure below but the Gymnasium environment's was computed before the cost and the
reward moved into one module (:mod:`slurm_rl.objective`): the training rewards (``job`` and
``time``), an episode's cost, the validation objective and the environment's rewards must stay
exactly these floats (compared by ``float.hex``), or a retrained bundle would learn from other
numbers. (The environment's were pinned anew when it became a view of the shared loop.)"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from slurm_rl.agents.dual.agent import network_config
from slurm_rl.agents.dual.network import DualNetwork
from slurm_rl.core import Job
from slurm_rl.gym_env import SchedulingEnv
from slurm_rl.scenario import Scenario
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.simulator.outcomes import JobOutcome, Timeline
from slurm_rl.simulator.sim_config import SimConfig
from slurm_rl.traces import synthetic_philly, window
from slurm_rl.training.actors import RolloutConfig
from slurm_rl.training.rewards import job_rewards, run_charges
from slurm_rl.training.rollout import EpisodeSpec, run_episode
from slurm_rl.training.validation import objective
from tests.sim_doubles import job, simulation, small_cluster

SPEED = {"A100": 2.0, "V100": 1.0}
SPEC = EpisodeSpec(warmup_start=0.0, start=2000.0, end=5000.0, seed=7)


def digest(values: Sequence[float]) -> str:
    """The exact bits of a sequence of floats, short."""
    return hashlib.sha256(struct.pack(f"<{len(values)}d", *values)).hexdigest()[:16]


def outcome(job_id: str, start: float, runtime: float, best: float, fee: float,
            gpus: int = 1) -> JobOutcome:
    return JobOutcome(Job(job_id, 0.0, gpus), start, start + runtime, ("v100-0",), (gpus,), {},
                      fee, best)


def test_job_rewards_of_fixed_outcomes() -> None:
    timeline = Timeline()
    for t, queue in ((0.0, 3), (1234.5, 7), (3600.0, 1), (5000.3, 0)):
        timeline.record(t, queue, 0)
    outcomes = [outcome("a", 100.0, 7200.7, 3600.1, 3.3, 2), outcome("b", 4000.0, 3601.9, 1800.2,
                1.7), outcome("c", 4100.5, 999.9, 333.3, 0.77, 4)]
    rewards = job_rewards(outcomes, timeline, [0.0, 1000.0, 3000.0, 4050.0], 7200.0, 0.37,
                          small_cluster())
    charges = run_charges(outcomes, np.array([0.0, 4000.0, 9000.0]), 0.37, 2.5)
    assert [r.hex() for r in rewards.tolist()] == [
        "-0x1.2cef8282bcfdfp-1", "-0x1.d06d3a06d3a07p+1", "-0x1.cded66b0304d6p+0",
        "-0x1.1bf313290168ep-2"]
    assert [c.hex() for c in charges.tolist()] == ["0x1.7c05a4b467f2ap-2", "0x1.96bf6b73a4cbap-1"]


def _episode(reward: str) -> Any:
    torch.manual_seed(0)
    rng = np.random.default_rng(2)
    jobs = [job(f"j{i}", float(rng.uniform(0, 10_000)), int(rng.choice([1, 2, 4, 8])),
                float(rng.lognormal(7, 1)), partition=f"vc{i % 3}") for i in range(40)]
    network = DualNetwork(network_config(16))
    config = RolloutConfig(fee_weight=0.1, chooser="best-fit", mode="sample", max_jobs=8,
                           rank_k=4, reward=reward)  # type: ignore[arg-type]
    return run_episode(network, simulation(jobs, mode="slurm", cycle_s=10.0), SPEED, config, SPEC)


def test_the_training_rewards_and_an_episodes_cost() -> None:
    by_job, by_time = _episode("job"), _episode("time")
    assert (len(by_job.steps), len(by_time.steps)) == (EPISODE_STEPS, EPISODE_STEPS)
    assert digest([s.reward for s in by_job.steps]) == JOB_REWARDS
    assert digest([s.reward for s in by_time.steps]) == TIME_REWARDS
    assert by_job.cost(0.1).hex() == EPISODE_COST


def test_the_validation_objective() -> None:
    metrics = SimpleNamespace(jobs=417, avg_jct_s=12345.678, total_fees=9876.54321)
    result: Any = SimpleNamespace(metrics=metrics)
    assert objective(result, 0.1).hex() == "0x1.2e36405b39e28p+11"
    assert objective(result, 0.0).hex() == "0x1.6582a05143bf7p+10"


def test_the_gym_environments_rewards() -> None:
    trace = synthetic_philly(days=1, seed=3)
    start = trace.jobs[0].submit_time
    scenario = Scenario(load_cluster_spec("tiny"), window(trace, start, start + 3 * 3600),
                        SimConfig(mode="direct"))
    env = SchedulingEnv(scenario, queue_slots=8, fee_weight=0.25)
    env.reset(seed=0)
    scores = np.random.default_rng(0)
    rewards, done = [], False
    while not done:
        action = scores.uniform(-1.0, 1.0, env.queue_slots).astype(np.float32)
        _, reward, done, _, _ = env.step(action)
        rewards.append(reward)
    assert (len(rewards), digest(rewards)) == GYM_REWARDS


# Computed at 9909b58, before slurm_rl.objective existed.
EPISODE_STEPS = 21
JOB_REWARDS = "a6aea89b6d9d1818"
TIME_REWARDS = "6330291914b731d0"
EPISODE_COST = "0x1.3bfe530ce2942p+3"
# The environment became a view of the shared loop (one cycle of the deployed scheduler a step,
# the action its ordering scores): computed then, from slurm_rl.objective, at issue 20's part 1.
GYM_REWARDS = (117, "4452f745bf5f6db4")
