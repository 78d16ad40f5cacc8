"""Plackett–Luce log-probabilities, Gumbel sampling, GAE, return scaling and reward maths."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from slurm_rl.core import Job
from slurm_rl.simulator.outcomes import JobOutcome, Timeline
from slurm_rl.training.objectives import (
    ReturnScaler,
    first_choice_entropy,
    gae,
    gumbel_order,
    plackett_luce_logp,
)
from slurm_rl.training.rewards import job_rewards, pending_integrals, run_charges
from tests.sim_doubles import small_cluster


def brute_force_prefix(scores: list[float], prefix: list[int], valid: list[int]) -> float:
    """Sum over all completions of the prefix of the full-permutation probabilities."""
    total = 0.0
    rest = [j for j in valid if j not in prefix]
    for tail in itertools.permutations(rest):
        order = [*prefix, *tail]
        p = 1.0
        for i, j in enumerate(order):
            p *= math.exp(scores[j]) / sum(math.exp(scores[k]) for k in order[i:])
        total += p
    return math.log(total)


def test_prefix_log_probability_matches_enumeration() -> None:
    scores = [0.3, -1.2, 2.0, 0.0, 0.7]
    valid = [0, 1, 2, 4]  # job 3 cannot start: not in the distribution
    for prefix in ([2], [2, 0], [4, 1, 0], [0, 1, 2, 4]):
        got = plackett_luce_logp(
            torch.tensor([scores], dtype=torch.float64), torch.tensor([prefix]),
            torch.ones(1, len(prefix), dtype=torch.bool),
            torch.tensor([[i in valid for i in range(5)]]))
        assert float(got[0]) == pytest.approx(brute_force_prefix(scores, prefix, valid))


def test_padded_rows_give_the_same_log_probabilities() -> None:
    scores = torch.tensor([[0.5, 1.0, -0.3, 0.0], [2.0, 0.1, 0.0, 0.0]], dtype=torch.float64)
    order = torch.tensor([[1, 2, 0], [0, 0, 0]])
    prefix = torch.tensor([[True, True, False], [True, False, False]])
    valid = torch.tensor([[True, True, True, True], [True, True, False, False]])
    got = plackett_luce_logp(scores, order, prefix, valid)
    expected = brute_force_prefix(scores[0].tolist(), [1, 2], [0, 1, 2, 3])
    assert float(got[0]) == pytest.approx(expected)
    assert float(got[1]) == pytest.approx(2.0 - math.log(math.exp(2.0) + math.exp(0.1)))
    empty = plackett_luce_logp(scores, order, torch.zeros_like(prefix), valid)
    assert empty.tolist() == [0.0, 0.0]


def test_gumbel_order_samples_first_choices_by_softmax() -> None:
    scores = np.array([1.0, 0.0, -1.0, 5.0])
    valid = np.array([True, True, True, False])
    rng = np.random.default_rng(0)
    firsts = np.array([gumbel_order(scores, valid, rng)[0] for _ in range(20_000)])
    expected = np.exp(scores[:3]) / np.exp(scores[:3]).sum()
    frequencies = np.bincount(firsts, minlength=4) / len(firsts)
    np.testing.assert_allclose(frequencies[:3], expected, atol=0.015)
    assert frequencies[3] == 0.0


def test_first_choice_entropy() -> None:
    scores = torch.tensor([[0.0, 0.0, 7.0], [1.0, 2.0, 3.0]])
    valid = torch.tensor([[True, True, False], [False, False, False]])
    entropy = first_choice_entropy(scores, valid)
    assert float(entropy[0]) == pytest.approx(math.log(2))
    assert float(entropy[1]) == 0.0


def test_gae_with_lambda_one_is_the_discounted_return_minus_the_value() -> None:
    rewards = np.array([1.0, -2.0, 0.5])
    values = np.array([0.3, 0.1, -0.4])
    adv, ret = gae(rewards, values, bootstrap=2.0, gamma=0.9, lam=1.0)
    expected = [1.0 - 1.8 + 0.405 + 0.729 * 2.0, -2.0 + 0.45 + 0.81 * 2.0, 0.5 + 0.9 * 2.0]
    np.testing.assert_allclose(ret, expected)
    np.testing.assert_allclose(adv, np.array(expected) - values)


def test_return_scaler_tracks_the_std_of_discounted_returns() -> None:
    scaler = ReturnScaler(gamma=0.0)
    rng = np.random.default_rng(1)
    scaler.update([rng.normal(0.0, 50.0, 5000)])
    assert scaler.scale == pytest.approx(50.0, rel=0.05)


def test_pending_integrals_follow_the_queue_step_function() -> None:
    timeline = Timeline()
    for t, q in ((0.0, 2), (10.0, 5), (30.0, 0)):
        timeline.record(t, q, 0)
    got = pending_integrals(timeline, np.array([5.0, 20.0, 40.0]))
    np.testing.assert_allclose(got, [2 * 5 + 5 * 10, 5 * 10 + 0])


def outcome(job_id: str, start: float, runtime: float, best: float, fee: float,
            gpus: int = 1) -> JobOutcome:
    job = Job(job_id, 0.0, gpus)
    return JobOutcome(job, start, start + runtime, ("v100-0",), (gpus,), {}, fee, best)


def test_runs_are_charged_to_the_decision_after_which_they_started() -> None:
    outcomes = [outcome("a", 5.0, 7200.0, 3600.0, 10.0), outcome("b", 15.0, 3600.0, 3600.0, 2.0),
                outcome("early", -1.0, 99.0, 1.0, 1.0)]
    charges = run_charges(outcomes, np.array([0.0, 10.0, 20.0]), fee_weight=0.5,
                          reference_price=4.0)
    np.testing.assert_allclose(charges, [1.0 + 0.5 * (10.0 - 4.0), 0.0 + 0.5 * (2.0 - 4.0)])


def test_job_rewards_sum_to_minus_waiting_and_excess_run_costs() -> None:
    timeline = Timeline()
    timeline.record(0.0, 3, 0)
    timeline.record(3600.0, 1, 0)
    outcomes = [outcome("a", 100.0, 7200.0, 3600.0, 0.0), outcome("b", 4000.0, 3600.0, 1800.0, 0.0)]
    rewards = job_rewards(outcomes, timeline, [0.0, 3000.0], 7200.0, 0.0, small_cluster())
    assert rewards.sum() == pytest.approx(-((3 * 3600 + 1 * 3600) / 3600 + 1.0 + 0.5))
    assert rewards[0] == pytest.approx(-(3 * 3000 / 3600 + 1.0))
