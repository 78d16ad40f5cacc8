"""Episodes: warm-up, the agent phase, truncation and drain; what PPO re-evaluates matches what
the actors did; reproducible from the seed; the held-out month is refused."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from slurm_rl.agents.dual.agent import build_scheduler, network_config
from slurm_rl.agents.dual.bundle import Bundle
from slurm_rl.agents.dual.features import JOB_FEATURES
from slurm_rl.agents.dual.network import DualNetwork
from slurm_rl.agents.registry import with_rules
from slurm_rl.agents.rwgp.placement import RwgpPlacement
from slurm_rl.core import Cluster
from slurm_rl.errors import InputError
from slurm_rl.fairness import LONGEST_HOLD_S, RankingRules
from slurm_rl.traces import parse_window, synthetic_philly
from slurm_rl.training.actors import RolloutConfig, teacher_keys, training_actors
from slurm_rl.training.batch import collate_placements, collate_steps
from slurm_rl.training.episodes import EpisodeSampler, check_not_held_out
from slurm_rl.training.objectives import plackett_luce_logp
from slurm_rl.training.rewards import mean_price, pending_integrals
from slurm_rl.training.rollout import Episode, EpisodeSpec, run_episode
from tests.sim_doubles import job, simulation, small_cluster

SPEED = {"A100": 2.0, "V100": 1.0}
SPEC = EpisodeSpec(warmup_start=0.0, start=3000.0, end=9000.0, seed=7)


def roomy_cluster() -> Cluster:
    """Twice the small cluster (48 GPUs): at 80 jobs the queue then empties now and then, so
    the agent phase places jobs. On 24 GPUs the queue never empties, Slurm starts every job
    between two decisions at its own priority (only placed jobs get one of the daemon's) and
    the agent places none."""
    small = small_cluster()
    twins = tuple(replace(node, name=f"{node.name}-b") for node in small.nodes)
    return Cluster("roomy", small.nodes + twins)


def jobs() -> list:
    rng = np.random.default_rng(2)
    return [job(f"j{i}", float(rng.uniform(0, 10_000)), int(rng.choice([1, 2, 4, 8])),
                float(rng.lognormal(7, 1)), partition=f"vc{i % 3}") for i in range(80)]


def episode(mode: str = "sample", reward: str = "job", seed: int = 0, prior: str = "pace",
            chooser: str = "best-fit", cluster: Cluster | None = None,
            placement_teacher: str = "fastest", dispatch: bool = False) -> tuple[Episode, list]:
    torch.manual_seed(seed)
    network = DualNetwork(network_config(16, 4.0 if prior == "cost" else 0.0, prior))
    sim = simulation(jobs(), mode="slurm", cycle_s=10.0, cluster=cluster or roomy_cluster(),
                     hold_cap_s=LONGEST_HOLD_S if dispatch else 3600.0)  # as the World holds
    config = RolloutConfig(fee_weight=0.1, chooser=chooser, mode=mode,  # type: ignore[arg-type]
                           max_jobs=8, rank_k=4, reward=reward,  # type: ignore[arg-type]
                           placement_teacher=placement_teacher,
                           rules=RankingRules(dispatch=dispatch))
    return run_episode(network, sim, SPEED, config, SPEC), [network, sim]


def test_an_episode_records_the_agent_phase_and_drains() -> None:
    result, (_, sim) = episode()
    assert result.steps and all(len(s.jobs) <= 8 for s in result.steps)
    assert all(len(s.order) <= 4 for s in result.steps)
    assert any(s.placements for s in result.steps)
    assert sim.done  # the drain finished every job, so every started job has an outcome


def test_in_dispatch_mode_only_decisions_start_jobs_in_a_queue_that_never_empties() -> None:
    """On 24 GPUs the queue never empties: without dispatch Slurm starts jobs between two
    decisions at its own priority (roomy_cluster); with it, every job the agent phase starts
    starts at a decision (the cycles fall at the first submit + k · 10 s)."""
    first = min(j.submit_time for j in jobs())

    def between_decisions(sim) -> int:
        starts = [o.start for o in sim.outcomes if SPEC.start <= o.start <= SPEC.end]
        assert starts
        return sum(abs((s - first) / 10.0 - round((s - first) / 10.0)) > 1e-6 for s in starts)

    assert between_decisions(episode(cluster=small_cluster())[1][1]) > 0
    assert between_decisions(episode(cluster=small_cluster(), dispatch=True)[1][1]) == 0


def test_job_rewards_add_up_to_waiting_plus_attributed_runs() -> None:
    result, (_, sim) = episode()
    first, end = result.span
    assert SPEC.start <= first < SPEC.end <= end
    charged = [o for o in sim.outcomes if first <= o.start < end]
    reference = mean_price(sim.cluster)
    runs = sum((o.runtime - o.best_runtime) / 3600 + 0.1 * (
        o.fee - o.best_runtime * o.job.num_gpus * reference / 3600) for o in charged)
    waiting = pending_integrals(sim.timeline, np.array([first, end]))[0] / 3600
    assert waiting > 0 and charged
    assert -sum(s.reward for s in result.steps) == pytest.approx(waiting + runs)


def test_the_same_seed_gives_the_same_episode() -> None:
    first, _ = episode()
    second, _ = episode()
    assert [s.reward for s in first.steps] == [s.reward for s in second.steps]
    assert all(np.array_equal(a.order, b.order) for a, b in zip(first.steps, second.steps,
                                                                strict=True))


def test_recorded_log_probabilities_are_what_the_batch_recomputes() -> None:
    result, (network, _) = episode()
    steps = [s for s in result.steps if len(s.order)]
    batch = collate_steps(steps)
    with torch.no_grad():
        scores = batch.padded(network.ordering.ragged(*batch.ragged()))
        logp = plackett_luce_logp(scores, batch.order, batch.prefix, batch.valid)
    np.testing.assert_allclose(logp.numpy(), [s.logp for s in steps], atol=1e-4)
    placements = collate_placements(result.steps)
    assert placements is not None
    with torch.no_grad():
        logits = network.placement(placements.job, placements.candidates, placements.cluster,
                                   placements.present)
    again = torch.log_softmax(logits, 1).gather(1, placements.choice[:, None])[:, 0]
    np.testing.assert_allclose(again.numpy(), placements.old_logp.numpy(), atol=1e-4)


def test_teacher_mode_follows_the_teacher() -> None:
    result, _ = episode(mode="teacher")
    for step in result.steps:
        for p in step.placements:
            assert p.choice == int(np.argmax(p.candidates[:, 0]))  # the fastest candidate


def test_a_prior_teacher_clones_the_cost_prior_s_cheapest_candidate_per_unit_of_work() -> None:
    # A100s twice as fast at ten times V100's price: work is cheaper on V100s at λ = 0.1
    pricey = Cluster("pricey", tuple(replace(n, price_per_gpu_hour=20.0) if n.gpu_type == "A100"
                                     else n for n in small_cluster().nodes))
    result, _ = episode(mode="teacher", prior="cost", chooser="rwgp-excluding", cluster=pricey,
                        placement_teacher="prior")
    placements = [p for step in result.steps for p in step.placements]
    assert all(p.choice == int(np.argmin(p.log_cost)) for p in placements)
    # fees make a difference here: some cheapest candidate is not the fastest
    assert any(p.choice != int(np.argmax(p.candidates[:, 0])) for p in placements)


def test_time_rewards_are_the_cost_accrued_between_decisions() -> None:
    result, _ = episode(reward="time")
    assert -sum(s.reward for s in result.steps) == pytest.approx(result.cost(0.1))


def test_training_never_touches_the_held_out_month() -> None:
    check_not_held_out("philly", "2017-09-01:2017-12-01", "2017-11")
    with pytest.raises(InputError, match="held-out"):
        check_not_held_out("philly", "2017-11-20:2017-12-02")
    with pytest.raises(InputError, match="held-out"):
        check_not_held_out("/data/philly_pollux_jobs.csv.gz", "2017-12")
    check_not_held_out("venus", "2017-12")


def test_episodes_lie_inside_the_window_and_repeat_with_the_seed() -> None:
    trace = synthetic_philly(days=1.0, seed=0)
    sampler = EpisodeSampler(trace, "2017-10-01:2017-10-11", warmup_days=2.0, episode_days=1.0)
    first = sampler.sample(np.random.default_rng(3), 20, seed=1, iteration=1)
    low, high = parse_window("2017-10-01:2017-10-11")
    assert all(low <= s.warmup_start and s.end <= high and s.start % 3600 == 0 for s in first)
    assert first == sampler.sample(np.random.default_rng(3), 20, seed=1, iteration=1)
    with pytest.raises(InputError, match="shorter"):
        EpisodeSampler(trace, "2017-10-01:2017-10-02", warmup_days=2.0, episode_days=1.0)


@pytest.mark.parametrize("dispatch", [False, True])
def test_a_rollout_decides_as_the_deployed_scheduler_on_the_same_snapshot(dispatch: bool) -> None:
    """One decision loop (issue 20): the training scheduler, greedy, gives the decision the
    deployed one built from a bundle of the same network gives: ranking cut at max_ranked,
    the same placements and the same exclusions; in dispatch mode (a daemon's dispatch =
    true), the same holds too."""
    torch.manual_seed(3)
    network = DualNetwork(network_config(16, 0.0, "pace"))
    burst = [job(f"b{i}", float(i), [1, 2, 4, 8][i % 4], 600.0 + 50 * i) for i in range(30)]
    sim = simulation(burst, mode="slurm", cycle_s=10.0)
    snapshot = sim.next_snapshot()
    while snapshot is not None and len(snapshot.pending) < 20:
        snapshot = sim.next_snapshot()
    assert snapshot is not None
    config = RolloutConfig(fee_weight=0.1, chooser="rwgp-excluding", mode="greedy",
                           max_ranked=5, rules=RankingRules(dispatch=dispatch))
    trained = training_actors(network, SPEED, config, seed=0).scheduler.decide(snapshot)
    bundle = Bundle(Path("unsaved"), network, {"chooser": "rwgp-excluding", "fee_weight": 0.1})
    deployed = with_rules(build_scheduler(bundle, SPEED, max_ranked=5, threads=None),
                          RankingRules(dispatch=dispatch)).decide(snapshot)
    assert trained.holds == deployed.holds
    if dispatch:  # released: only the placed jobs; every other pending job is held
        assert set(trained.ranking) == set(trained.placements)
        assert len(trained.ranking) + len(trained.holds) == len(snapshot.pending)
    else:
        assert len(trained.ranking) == 5 and not trained.holds
    assert trained.ranking == deployed.ranking
    assert trained.placements == deployed.placements
    assert trained.exclusions == deployed.exclusions
    assert trained.migrations == deployed.migrations


def test_a_rollout_keeps_long_jobs_off_slow_nodes_from_its_configured_limit() -> None:
    """The long-job rule's limit reaches the training chooser as it reaches the deployed
    one (a bundle's long_limit_h; ``train --long-limit-h``)."""
    network = DualNetwork(network_config(16, 0.0, "pace"))
    config = RolloutConfig(fee_weight=0.1, chooser="rwgp-long", long_limit_s=48 * 3600.0)
    chooser = training_actors(network, SPEED, config, seed=0).placement.generator.chooser
    assert isinstance(chooser, RwgpPlacement)
    assert chooser.config.exclusion_min_limit_s == 48 * 3600.0


def test_a_limit_teacher_ranks_shortest_time_limit_first() -> None:
    rows = np.zeros((3, len(JOB_FEATURES)))
    rows[:, JOB_FEATURES.index("has_limit")] = [1.0, 0.0, 1.0]
    rows[:, JOB_FEATURES.index("log_limit_h")] = [2.0, 0.0, 0.5]
    rows[:, JOB_FEATURES.index("log_pred_gpu_h")] = [0.1, 0.2, 3.0]
    assert np.argsort(-teacher_keys(rows, "limit")).tolist() == [2, 0, 1]
    assert np.argsort(-teacher_keys(rows, "qssf")).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="unknown ordering teacher"):
        teacher_keys(rows, "fifo")
