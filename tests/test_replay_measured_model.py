"""Replays with the measured performance model, fluctuation and stragglers on: conservation
holds in both action modes, and no policy beats the JCT lower bound."""

from __future__ import annotations

import pytest

from slurm_rl.agents.registry import make_scheduler
from slurm_rl.core import SpeedObservation
from slurm_rl.scenario import Scenario, build_simulation, replay
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.simulator.perfmodel import datasheet_gpu_speeds as gpu_speed_table
from slurm_rl.simulator.sim_config import SimConfig
from slurm_rl.traces import synthetic_philly


@pytest.fixture(scope="module")
def trace():
    return synthetic_philly(days=1.5, seed=11)


@pytest.mark.parametrize("mode", ["direct", "slurm"])
@pytest.mark.parametrize("policy", ["fifo+first-fit", "qssf+best-fit", "multifactor+fastest-gpu"])
def test_conservation_and_lower_bound(trace, mode, policy):
    scenario = Scenario(load_cluster_spec("tiny"), trace, SimConfig(mode=mode))
    result = replay(scenario, make_scheduler(policy, gpu_speed_table()), policy_id=policy)
    runnable, unschedulable = scenario.runnable_jobs()
    assert result.unfinished_jobs == 0
    assert sorted(o.job.job_id for o in result.outcomes) == sorted(j.job_id for j in runnable)
    assert result.metrics.jobs + unschedulable == len(trace.jobs)
    prices = {n.name: n.price_per_gpu_hour for n in scenario.cluster.nodes}
    for o in result.outcomes:
        assert sum(o.gpu_seconds.values()) == pytest.approx(sum(o.gpus) * o.runtime)
        members = zip(o.nodes, o.gpus, strict=True)
        expected_fee = sum(g * o.runtime * prices[n] / 3600 for n, g in members)
        assert o.fee == pytest.approx(expected_fee)
        assert o.runtime >= o.best_runtime * (1 - 1e-9)  # no job beats its best case
    assert result.metrics.avg_jct_s >= result.metrics.jct_lower_bound_s


def _observations(scenario: Scenario) -> list[SpeedObservation]:
    simulation = build_simulation(scenario)
    scheduler = make_scheduler("fifo+first-fit", gpu_speed_table())
    observations: list[SpeedObservation] = []
    while (snapshot := simulation.next_snapshot()) is not None:
        observations.extend(snapshot.observations)
        simulation.apply(scheduler.decide(snapshot))
    return observations


def test_fluctuation_emits_speed_observations_only_when_asked(trace):
    """Live Slurm measures no pace: a replay gives none unless asked (session 45)."""
    assert _observations(Scenario(load_cluster_spec("tiny"), trace, SimConfig(mode="direct"))) \
        == []
    scenario = Scenario(load_cluster_spec("tiny"), trace,
                        SimConfig(mode="direct", observations=True))
    observations = _observations(scenario)
    assert observations
    assert all(0 < o.relative_speed < 1.2 for o in observations)
    assert {n for o in observations for n in o.nodes} <= {n.name for n in scenario.cluster.nodes}
