"""The Gymnasium environment honours the API contract and its reward sums to −Σ JCT."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from slurm_rl.gym_env import INVALID_ACTION_PENALTY, SLOT_FEATURES, SchedulingEnv
from slurm_rl.scenario import Scenario
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.simulator.engine import SimConfig
from slurm_rl.traces import synthetic_philly, window


def _scenario(hours: float = 6.0) -> Scenario:
    trace = synthetic_philly(days=1, seed=3)
    start = trace.jobs[0].submit_time
    short = window(trace, start, start + hours * 3600)
    return Scenario(load_cluster_spec("tiny"), short, SimConfig(mode="direct"))


def test_passes_gymnasiums_env_checker():
    check_env(SchedulingEnv(_scenario()), skip_render_check=True)


def test_return_is_minus_total_job_hours_and_episode_ends():
    env = SchedulingEnv(_scenario(hours=3.0), queue_slots=8)
    observation, _ = env.reset(seed=0)
    assert env.observation_space.contains(observation)
    total, done, steps, penalties = 0.0, False, 0, 0
    tried: set[int] = set()
    while not done:
        # start the first queued job not yet tried at this decision point, else wait
        slots = [k for k in range(env.queue_slots)
                 if observation[k * SLOT_FEATURES] > 0 and k not in tried]
        action = slots[0] if slots else env.queue_slots
        queue_before = env._snapshot.pending if env._snapshot else ()
        observation, reward, done, truncated, _ = env.step(action)
        if action == env.queue_slots:
            tried.clear()
        elif env._snapshot is not None and env._snapshot.pending == queue_before:
            tried.add(action)  # it did not fit: the step only cost the penalty
            penalties += 1
        else:
            tried.clear()
        total += reward
        steps += 1
        assert not truncated
    total += penalties * INVALID_ACTION_PENALTY
    sim = env._sim
    assert sim is not None and sim.unfinished_jobs == 0
    assert total == pytest.approx(-sum(o.jct for o in sim.outcomes) / 3600, rel=1e-6, abs=0.05)
    assert steps > len(sim.outcomes)


def test_refuses_a_slurm_mode_scenario():
    scenario = _scenario()
    with pytest.raises(ValueError, match="direct"):
        SchedulingEnv(replace(scenario, sim=replace(scenario.sim, mode="slurm")))


def test_reset_is_reproducible():
    env = SchedulingEnv(_scenario())
    first, _ = env.reset(seed=1)
    second, _ = env.reset(seed=1)
    assert np.array_equal(first, second)
