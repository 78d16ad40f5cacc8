"""Machine fluctuation: reproducible, stationary with the configured spread, stragglers slow."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from slurm_rl.simulator.fluctuation import FluctuationConfig, MachineFluctuation

HOUR = 3600.0


def test_same_seed_same_path_and_other_seed_other_path() -> None:
    config = FluctuationConfig(seed=3)
    a, b = MachineFluctuation(50, config), MachineFluctuation(50, config)
    other = MachineFluctuation(50, FluctuationConfig(seed=4))
    for t in (0.0, 5 * HOUR, 50 * HOUR):
        a.advance_to(t), b.advance_to(t), other.advance_to(t)
        assert np.array_equal(a.factors, b.factors)
        assert not np.array_equal(a.factors, other.factors)
    assert a.stragglers == b.stragglers


def test_path_does_not_depend_on_how_often_it_is_advanced() -> None:
    config = FluctuationConfig(seed=11, step_s=600.0)
    stepwise, jump = MachineFluctuation(20, config), MachineFluctuation(20, config)
    for t in np.arange(0.0, 10 * HOUR, 137.0):
        stepwise.advance_to(float(t))
    stepwise.advance_to(10 * HOUR)
    assert jump.advance_to(10 * HOUR)
    assert np.array_equal(stepwise.factors, jump.factors)


def test_steps_happen_exactly_at_step_boundaries() -> None:
    fluct = MachineFluctuation(4, FluctuationConfig(step_s=100.0))
    start = fluct.factors
    assert fluct.next_step_time == 100.0
    assert not fluct.advance_to(99.9)
    assert fluct.factors is start
    assert fluct.advance_to(250.0)
    assert fluct.next_step_time == 300.0
    assert not np.array_equal(fluct.factors, start)


def test_stationary_std_and_one_step_correlation_match_the_config() -> None:
    config = FluctuationConfig(sigma=0.08, tau_s=4 * HOUR, step_s=HOUR, straggler_share=0.0)
    fluct = MachineFluctuation(4000, config)
    before = np.log(fluct.factors)
    fluct.advance_to(HOUR)
    after = np.log(fluct.factors)
    assert after.std() == pytest.approx(0.08, rel=0.05)
    assert abs(after.mean()) < 0.01
    correlation = float(np.corrcoef(before, after)[0, 1])
    assert correlation == pytest.approx(math.exp(-1 / 4), abs=0.03)


def test_long_run_time_average_matches_mean_factor() -> None:
    config = FluctuationConfig(sigma=0.1, tau_s=HOUR, step_s=HOUR, straggler_share=0.25, seed=5)
    fluct = MachineFluctuation(8, config)
    total = np.zeros(8)
    steps = 3000
    for k in range(1, steps + 1):
        fluct.advance_to(k * HOUR)
        total += fluct.factors
    np.testing.assert_allclose(total / steps, fluct.mean_factors(), rtol=0.02)


def test_stragglers_are_the_slowest_machines_on_average() -> None:
    config = FluctuationConfig(straggler_share=0.1, straggler_factor=0.6, seed=9)
    fluct = MachineFluctuation(100, config)
    assert len(fluct.stragglers) == 10
    means = fluct.mean_factors()
    slow = sorted(range(100), key=lambda i: means[i])[:10]
    assert set(slow) == fluct.stragglers
    total = np.zeros(100)
    for k in range(1, 200):
        fluct.advance_to(k * HOUR)
        total += fluct.factors
    observed_slowest = set(np.argsort(total)[:10].tolist())
    assert observed_slowest == fluct.stragglers
    assert fluct.mean_factor(min(fluct.stragglers)) == pytest.approx(
        0.6 * math.exp(0.05**2 / 2)
    )


def test_disabled_fluctuation_keeps_every_machine_at_full_speed() -> None:
    fluct = MachineFluctuation(5, FluctuationConfig.disabled())
    assert np.array_equal(fluct.factors, np.ones(5))
    assert fluct.next_step_time == math.inf
    assert not fluct.advance_to(1e9)
    assert fluct.stragglers == frozenset()
    assert fluct.mean_factor(0) == 1.0


def test_factors_are_read_only() -> None:
    fluct = MachineFluctuation(3, FluctuationConfig())
    with pytest.raises(ValueError):
        fluct.factors[0] = 2.0


@pytest.mark.parametrize(
    ("field", "value"),
    [("sigma", -0.1), ("tau_s", 0.0), ("step_s", math.inf), ("straggler_share", 1.5),
     ("straggler_factor", 0.0)],
)
def test_bad_configs_are_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        kwargs: dict[str, Any] = {field: value}
        replace(FluctuationConfig(), **kwargs)


def test_cannot_advance_to_infinity() -> None:
    with pytest.raises(ValueError):
        MachineFluctuation(2, FluctuationConfig()).advance_to(math.inf)


def test_straggler_count_rounds_half_up() -> None:
    assert FluctuationConfig(straggler_share=0.03).straggler_count(104) == 3
    assert FluctuationConfig(straggler_share=0.17).straggler_count(6) == 1
    assert FluctuationConfig(straggler_share=0.05).straggler_count(10) == 1
