"""The squeeze-and-communicate network, the placement head and the critic."""

from __future__ import annotations

import pytest
import torch

from slurm_rl.agents.dual.agent import network_config
from slurm_rl.agents.dual.candidates import CANDIDATE_FEATURES
from slurm_rl.agents.dual.features import JOB_FEATURES
from slurm_rl.agents.dual.network import (
    HAS_LIMIT_COLUMN,
    LOG_LIMIT_COLUMN,
    PACE_COLUMN,
    DualNetwork,
    ordering_prior,
)


def inputs(n: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    config = network_config(16)
    g = torch.Generator().manual_seed(seed)
    jobs = torch.randn(1, n, config.job_features, generator=g)
    messages = torch.randn(1, n, config.message_features, generator=g)
    cluster = torch.randn(1, config.cluster_features, generator=g)
    return jobs, messages, cluster, torch.ones(1, n, dtype=torch.bool)


def net() -> DualNetwork:
    torch.manual_seed(0)
    return DualNetwork(network_config(16)).eval()


def test_scores_are_permutation_equivariant() -> None:
    model = net()
    jobs, messages, cluster, present = inputs(7)
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = model.ordering(jobs, messages, cluster, present)[0]
        shuffled = model.ordering(jobs[:, perm], messages[:, perm], cluster, present)[0]
    torch.testing.assert_close(shuffled, plain[perm])


def test_any_queue_length_and_padding_changes_nothing() -> None:
    model = net()
    with torch.no_grad():
        for n in (1, 3, 2000):
            jobs, messages, cluster, present = inputs(n)
            alone = model.ordering(jobs, messages, cluster, present)[0]
            pad = torch.zeros(1, 5, jobs.shape[2])
            padded_jobs = torch.cat([jobs, pad + 9.0], dim=1)
            padded_messages = torch.cat([messages, torch.zeros(1, 5, messages.shape[2])], dim=1)
            mask = torch.cat([present, torch.zeros(1, 5, dtype=torch.bool)], dim=1)
            padded = model.ordering(padded_jobs, padded_messages, cluster, mask)[0, :n]
            torch.testing.assert_close(padded, alone)
            assert alone.shape == (n,)


def test_the_context_carries_the_rest_of_the_queue() -> None:
    model = net()
    jobs, messages, cluster, present = inputs(4)
    with torch.no_grad():
        full = model.ordering(jobs, messages, cluster, present)[0, 0]
        fewer = model.ordering(jobs[:, :1], messages[:, :1], cluster, present[:, :1])[0, 0]
    assert not torch.isclose(full, fewer)


def test_without_communication_the_message_is_ignored() -> None:
    model = net()
    jobs, messages, cluster, present = inputs(5)
    with torch.no_grad():
        with_message = model.ordering(jobs, messages, cluster, present)
        model.ordering.communicate = False
        cut = model.ordering(jobs, messages, cluster, present)
        other = model.ordering(jobs, messages * 0 + 3.0, cluster, present)
    torch.testing.assert_close(cut, other)
    assert not torch.allclose(cut, with_message)


def test_placement_head_masks_absent_candidates_and_by_shape_matches_rows() -> None:
    model = net()
    config = network_config(16)
    g = torch.Generator().manual_seed(3)
    jobs = torch.randn(4, config.job_features, generator=g)
    cluster = torch.randn(config.cluster_features, generator=g)
    shapes = torch.randn(2, 3, config.candidate_features, generator=g)
    present = torch.tensor([[True, True, False], [True, True, True]])
    shape_of = torch.tensor([0, 1, 1, 0])
    with torch.no_grad():
        by_shape = model.placement.by_shape(jobs, cluster, shapes, present, shape_of)
        rows = model.placement(jobs, shapes[shape_of], cluster.expand(4, -1), present[shape_of])
    torch.testing.assert_close(by_shape, rows)
    assert torch.isinf(rows[0, 2]) and rows[0, 2] < 0


def test_a_new_head_with_a_pace_prior_starts_as_the_prior_and_learns_a_residual() -> None:
    assert CANDIDATE_FEATURES[PACE_COLUMN] == "pace"
    torch.manual_seed(0)
    model = DualNetwork(network_config(16, pace_sharpness=4.0))
    config = model.config
    g = torch.Generator().manual_seed(4)
    jobs = torch.randn(2, config.job_features, generator=g)
    cluster = torch.randn(2, config.cluster_features, generator=g)
    candidates = torch.rand(2, 3, config.candidate_features, generator=g)
    candidates[:, :, PACE_COLUMN] = torch.tensor([[1.0, 0.5, 0.25], [0.25, 0.5, 1.0]])
    present = torch.ones(2, 3, dtype=torch.bool)
    logits = model.placement(jobs, candidates, cluster, present)
    torch.testing.assert_close(logits, 4.0 * torch.log(candidates[:, :, PACE_COLUMN]))
    assert logits.argmax(dim=1).tolist() == [0, 2]  # the fastest predicted set first
    (-torch.log_softmax(logits, dim=1)[:, 1].sum()).backward()  # ask for the middle one
    tower = model.placement.candidate[-1]
    assert tower.weight.grad is not None and tower.weight.grad.abs().sum() > 0


def test_a_cost_prior_starts_as_the_choosers_cheapest_candidate() -> None:
    torch.manual_seed(0)
    model = DualNetwork(network_config(16, pace_sharpness=4.0, prior="cost"))
    config = model.config
    jobs = torch.randn(1, config.job_features)
    cluster = torch.randn(1, config.cluster_features)
    candidates = torch.rand(1, 3, config.candidate_features)
    candidates[0, :, PACE_COLUMN] = torch.tensor([1.0, 0.5, 0.25])  # fastest first...
    log_cost = torch.log(torch.tensor([[2.0, 1.0, 4.0]]))  # ...but the middle is cheapest
    present = torch.ones(1, 3, dtype=torch.bool)
    logits = model.placement(jobs, candidates, cluster, present, log_cost)
    torch.testing.assert_close(logits, -4.0 * log_cost)
    assert int(logits.argmax()) == 1
    shaped = model.placement.by_shape(jobs, cluster[0], candidates, present, torch.tensor([0]),
                                      log_cost)
    torch.testing.assert_close(shaped, logits)
    with pytest.raises(ValueError, match="log cost"):
        model.placement(jobs, candidates, cluster, present)
    with pytest.raises(ValueError, match="unknown placement prior"):
        DualNetwork(network_config(16, pace_sharpness=4.0, prior="fastest"))


def test_a_head_without_prior_is_the_plain_two_tower_form() -> None:
    model = net()  # pace_sharpness 0, as in bundles trained before the prior
    config = model.config
    candidates = torch.rand(1, 2, config.candidate_features)
    assert model.placement.prior(candidates).abs().sum() == 0


def test_critic_gives_one_value_per_state() -> None:
    model = net()
    jobs, messages, cluster, present = inputs(6)
    batch = [torch.cat([x, x]) for x in (jobs, messages, cluster, present)]
    with torch.no_grad():
        values = model.critic(*batch)
    assert values.shape == (2,)
    torch.testing.assert_close(values[0], values[1])


def test_the_ordering_prior_reads_the_time_limit_columns() -> None:
    assert JOB_FEATURES[HAS_LIMIT_COLUMN] == "has_limit"
    assert JOB_FEATURES[LOG_LIMIT_COLUMN] == "log_limit_h"


def test_a_new_network_with_an_ordering_prior_scores_shortest_limit_first() -> None:
    torch.manual_seed(0)
    model = DualNetwork(network_config(16, ordering_sharpness=8.0)).eval()
    jobs, messages, cluster, present = inputs(5)
    jobs[0, :, HAS_LIMIT_COLUMN] = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0])
    jobs[0, :, LOG_LIMIT_COLUMN] = torch.tensor([0.7, 2.0, 0.0, 0.7, 3.0])
    with torch.no_grad():
        scores = model.ordering(jobs, messages, cluster, present)[0]
    # the residual starts at zero: the scores are the prior alone, whatever the other inputs
    torch.testing.assert_close(scores, 8.0 * ordering_prior(jobs[0]))
    assert torch.argsort(scores, descending=True, stable=True).tolist() == [0, 3, 1, 4, 2]
    # the residual learns: the head's last layer is a parameter like any other
    assert model.ordering.head[-1].weight.requires_grad

