"""The Gymnasium environment honours the API contract, is the shared loop with the deployed
scheduler (its FIFO scores replay exactly as FIFO does), and its return is −Σ JCT hours."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from slurm_rl.agents.dual.features import FeatureBuilder
from slurm_rl.agents.ordering_baselines import Fifo
from slurm_rl.agents.placement_baselines import FirstFit
from slurm_rl.gym_env import SLOT_FEATURES, SchedulingEnv
from slurm_rl.scenario import Scenario, replay
from slurm_rl.scheduler import Scheduler
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.simulator.outcomes import JobOutcome
from slurm_rl.simulator.sim_config import ActionMode, SimConfig
from slurm_rl.traces import synthetic_philly, window


def _scenario(hours: float = 6.0, mode: ActionMode = "direct") -> Scenario:
    trace = synthetic_philly(days=1, seed=3)
    start = trace.jobs[0].submit_time
    short = window(trace, start, start + hours * 3600)
    return Scenario(load_cluster_spec("tiny"), short, SimConfig(mode=mode))


def _schedule(outcomes: list[JobOutcome]) -> list[tuple[str, float, float, tuple[str, ...]]]:
    return sorted((o.job.job_id, o.start, o.end, o.nodes) for o in outcomes)


def test_passes_gymnasiums_env_checker() -> None:
    check_env(SchedulingEnv(_scenario()), skip_render_check=True)


@pytest.mark.parametrize("mode", ["direct", "slurm"])
def test_fifo_scores_replay_exactly_as_the_fifo_scheduler(mode: ActionMode) -> None:
    scenario = _scenario(hours=3.0, mode=mode)
    env = SchedulingEnv(scenario, queue_slots=4)
    env.reset(seed=scenario.sim.seed)
    fifo = np.linspace(1.0, -1.0, env.queue_slots, dtype=np.float32)  # submit order first
    done, steps = False, 0
    while not done:
        _, _, done, _, _ = env.step(fifo)
        steps += 1
    expected = replay(scenario, Scheduler(Fifo(), FirstFit()), policy_id="fifo+first-fit")
    assert env.simulation is not None
    assert steps == expected.cycles
    assert _schedule(list(env.simulation.outcomes)) == _schedule(list(expected.outcomes))


def test_return_is_minus_total_job_hours_and_episode_ends() -> None:
    env = SchedulingEnv(_scenario(hours=3.0), queue_slots=8)
    env.action_space.seed(5)
    observation, _ = env.reset(seed=0)
    assert env.observation_space.contains(observation)
    total, done = 0.0, False
    while not done:
        observation, reward, done, truncated, _ = env.step(env.action_space.sample())
        assert env.observation_space.contains(observation) and not truncated
        total += reward
    sim = env.simulation
    assert sim is not None and sim.unfinished_jobs == 0 and sim.outcomes
    assert total == pytest.approx(-sum(o.jct for o in sim.outcomes) / 3600, rel=1e-9)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(env.action_space.sample())


def test_observation_is_the_agents_features() -> None:
    env = SchedulingEnv(_scenario(), queue_slots=4)
    observation, _ = env.reset(seed=2)
    snapshot = env.snapshot
    assert snapshot is not None and snapshot.pending
    builder = FeatureBuilder()
    builder.observe(snapshot)
    encoded = builder.encode(snapshot)
    assert observation[0] == 1.0
    np.testing.assert_allclose(observation[1:SLOT_FEATURES], encoded.jobs[0], rtol=1e-6)
    np.testing.assert_allclose(observation[-len(encoded.cluster):], encoded.cluster, rtol=1e-6)


def test_refuses_an_action_off_its_space() -> None:
    env = SchedulingEnv(_scenario(), queue_slots=4)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="4 scores"):
        env.step(np.zeros(3, dtype=np.float32))
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        env.step(np.array([0.0, 2.0, 0.0, np.nan], dtype=np.float32))


def test_reset_is_reproducible_and_seeds_the_simulation() -> None:
    env = SchedulingEnv(_scenario())
    first, _ = env.reset(seed=1)
    assert env.simulation is not None and env.simulation.config.seed == 1
    second, _ = env.reset(seed=1)
    assert np.array_equal(first, second)
    env.reset()
    unseeded = env.simulation.config.seed
    env.reset(seed=1)
    env.reset()
    assert env.simulation.config.seed == unseeded


def test_refuses_no_queue_slots() -> None:
    with pytest.raises(ValueError, match="queue_slots"):
        SchedulingEnv(_scenario(), queue_slots=0)
