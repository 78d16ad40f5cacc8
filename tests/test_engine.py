"""The discrete-event engine: exact timings, conservation, and Slurm's levers in slurm mode."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_rl.agents.ordering_baselines import Fifo, SjfOracle
from slurm_rl.agents.placement_baselines import BestFit, FirstFit
from slurm_rl.core import Decision, Placement
from slurm_rl.loop import run_loop
from slurm_rl.metrics import compute_metrics
from slurm_rl.scheduler import Scheduler
from slurm_rl.simulator.world import SimActuator, TraceSource
from tests.sim_doubles import job, simulation


def run(sim, scheduler):
    return run_loop(TraceSource(sim), scheduler, SimActuator(sim))


def test_single_job_runs_for_its_duration_scaled_by_gpu_speed():
    sim = simulation([job("j1", 100.0, 4, 1000.0)])
    run(sim, Scheduler(Fifo(), FirstFit()))
    (outcome,) = sim.outcomes
    assert outcome.start == 100.0
    assert outcome.nodes == ("a100-0",)
    assert outcome.end == pytest.approx(100.0 + 1000.0 / 2.0)  # A100 is twice the reference


def test_decisions_wait_for_the_next_cycle():
    sim = simulation([job("j0", 100.0, 1, 50.0), job("j1", 103.0, 1, 50.0)], cycle_s=10.0)
    run(sim, Scheduler(Fifo(), FirstFit()))
    starts = {o.job.job_id: o.start for o in sim.outcomes}
    assert starts == {"j0": 100.0, "j1": pytest.approx(110.0)}  # cycles from the first submit


def test_spread_and_colocation_slow_jobs_down():
    sim = simulation([job("big", 0.0, 10, 800.0, gpu_type="A100")])
    run(sim, Scheduler(Fifo(), FirstFit()))
    (outcome,) = sim.outcomes
    assert outcome.gpus == (8, 2)
    assert outcome.runtime == pytest.approx(800.0 / (2.0 * 0.8))


def _random_jobs(n: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 1, 1, 2, 4, 8, 12], size=n)
    return [
        job(f"j{i}", float(rng.uniform(0, 20_000)), int(g), float(rng.lognormal(6, 1.5)),
            user=f"u{i % 3}")
        for i, g in enumerate(sizes)
    ]


def _assert_conserved(sim, jobs) -> None:
    ids = [o.job.job_id for o in sim.outcomes]
    assert sorted(ids) == sorted(j.job_id for j in jobs)  # every job exactly once
    _assert_no_gpu_overcommit(sim)
    prices = {n.name: n.price_per_gpu_hour for n in sim.cluster.nodes}
    for o in sim.outcomes:
        assert sum(o.gpu_seconds.values()) == pytest.approx(sum(o.gpus) * o.runtime)
        fee = sum(g * o.runtime * prices[n] / 3600 for n, g in zip(o.nodes, o.gpus, strict=True))
        assert o.fee == pytest.approx(fee)
        assert o.start >= o.job.submit_time
        assert sum(o.gpus) == o.job.num_gpus


def _assert_no_gpu_overcommit(sim) -> None:
    capacity = {n.name: n.gpus for n in sim.cluster.nodes}
    events = []
    for o in sim.outcomes:
        for node, gpus in zip(o.nodes, o.gpus, strict=True):
            events += [(o.start, 1, node, gpus), (o.end, 0, node, -gpus)]  # ends before starts
    used = dict.fromkeys(capacity, 0)
    for _, _, node, delta in sorted(events):
        used[node] += delta
        assert used[node] <= capacity[node]


@pytest.mark.parametrize("mode", ["direct", "slurm"])
@pytest.mark.parametrize("ordering", [Fifo, SjfOracle])
@pytest.mark.parametrize("placement", [FirstFit, BestFit])
def test_conservation(mode, ordering, placement):
    jobs = _random_jobs(300, seed=7)
    sim = simulation(jobs, mode=mode, cycle_s=10.0)
    run(sim, Scheduler(ordering(), placement()))
    _assert_conserved(sim, jobs)
    metrics = compute_metrics(sim.outcomes, sim.cluster.total_gpus)
    assert metrics.avg_jct_s >= metrics.jct_lower_bound_s
    assert sim.done


def test_sum_of_jcts_equals_integral_of_jobs_in_system():
    jobs = _random_jobs(100, seed=3)
    sim = simulation(jobs)
    run(sim, Scheduler(Fifo(), FirstFit()))
    assert sim.job_seconds == pytest.approx(sum(o.jct for o in sim.outcomes))
    assert sim.fees_accrued == pytest.approx(sum(o.fee for o in sim.outcomes))


def test_sjf_beats_fifo_when_a_long_job_arrives_first():
    jobs = [job("long", 0.0, 24, 10_000.0)] + [job(f"s{i}", 1.0, 24, 100.0) for i in range(5)]
    jobs.insert(0, job("hog", 0.0, 24, 50.0))
    averages = {}
    for ordering in (Fifo, SjfOracle):
        sim = simulation(jobs)
        run(sim, Scheduler(ordering(), FirstFit(), walk="strict"))
        averages[ordering.name] = compute_metrics(sim.outcomes, 24).avg_jct_s
    assert averages["sjf-oracle"] < averages["fifo"]


# ----- slurm mode: Slurm's own behaviour around the levers ------------------------------


class Scripted:
    """Releases jobs in a fixed priority order with fixed pins (a test-only scheduler)."""

    def __init__(self, order, pins=None, holds=()):
        self.order, self.pins, self.holds = order, pins or {}, holds

    def decide(self, snapshot):
        pending = {j.job_id for j in snapshot.pending}
        ranking = tuple(j for j in self.order if j in pending)
        pins = {j: p for j, p in self.pins.items() if j in pending}
        holds = tuple(j for j in self.holds if j in pending)
        return Decision("scripted", ranking, pins, holds=holds)


def test_pinned_job_waits_for_its_nodes_without_blocking_others():
    blocker = job("blocker", 0.0, 8, 1000.0)
    pinned = job("pinned", 10.0, 1, 100.0)
    other = job("other", 10.0, 1, 100.0)
    pins = {"blocker": Placement(("a100-0",), (8,)), "pinned": Placement(("a100-0",), (1,))}
    sim = simulation([blocker, pinned, other], mode="slurm")
    run(sim, Scripted(["blocker", "pinned", "other"], pins))
    starts = {o.job.job_id: o for o in sim.outcomes}
    assert starts["pinned"].nodes == ("a100-0",)
    assert starts["pinned"].start == pytest.approx(starts["blocker"].end)
    assert starts["other"].start == pytest.approx(10.0)  # not blocked by the waiting pin
    assert starts["other"].nodes != ("a100-0",)


def test_easy_backfill_lets_short_jobs_pass_but_protects_the_reservation():
    # 24 GPUs; "wide" needs all of them and must wait for "running" (limit 2000 s).
    running = job("running", 0.0, 8, 1000.0, time_limit=2000.0, gpu_type="A100")
    wide = job("wide", 10.0, 24, 100.0)
    short = job("short", 20.0, 4, 200.0, time_limit=400.0, gpu_type="V100")
    long = job("long", 20.0, 4, 4000.0, time_limit=8000.0, gpu_type="V100")
    sim = simulation([running, wide, short, long], mode="slurm")
    run(sim, Scripted(["running", "wide", "short", "long"]))
    starts = {o.job.job_id: o for o in sim.outcomes}
    assert starts["short"].start == pytest.approx(20.0)  # ends before the reservation
    assert starts["long"].start >= starts["wide"].start  # would have delayed "wide"


def test_held_jobs_wait_until_the_cap():
    sim = simulation([job("j", 0.0, 1, 10.0)], mode="slurm", cycle_s=10.0)
    run(sim, Scripted([], holds=["j"]))
    assert sim.outcomes[0].start >= sim.config.hold_cap_s


def test_jobs_neither_ranked_nor_held_start_when_their_deferral_ends():
    sim = simulation([job("j", 0.0, 1, 10.0)], mode="slurm", cycle_s=10.0, defer_window_s=30.0)
    run(sim, Scripted([]))
    assert sim.outcomes[0].start == pytest.approx(30.0)


def test_a_decision_releases_at_most_max_ranked_jobs():
    jobs = [job(f"j{i}", float(i), 1, 1000.0) for i in range(20)]
    sim = simulation(jobs)
    snapshot = sim.next_snapshot()
    while len(snapshot.pending) < 20:
        sim.apply(Decision("none", ()))
        snapshot = sim.next_snapshot()
    decision = Scheduler(Fifo(), FirstFit(), max_ranked=5).decide(snapshot)
    assert decision.ranking == ("j0", "j1", "j2", "j3", "j4")
    assert list(decision.placements) == ["j0", "j1", "j2", "j3", "j4"]


def test_direct_mode_rejects_placements_on_busy_nodes():
    a = job("a", 0.0, 8, 100.0)
    b = job("b", 0.0, 8, 100.0)
    sim = simulation([a, b])
    snapshot = sim.next_snapshot()
    same = Placement(("a100-0",), (8,))
    sim.apply(Decision("t", ("a", "b"), {"a": same, "b": same}))
    assert sim.rejected_actions == 1
    assert [r.job.job_id for r in sim.peek().running] == ["a"]
    assert snapshot is not None


def test_placement_honours_the_requested_gpu_type():
    from slurm_rl.agents.nodesets import place_in_order
    from tests.sim_doubles import small_cluster

    cluster = small_cluster()
    typed = job("t", 0.0, 2, 10.0, gpu_type="v100")
    placement = place_in_order(typed, cluster, [8, 8, 4, 4], range(4))
    assert placement is not None and placement.nodes == ("v100-0",)
    assert place_in_order(typed, cluster, [8, 8, 0, 1], range(4)) is None


def test_a_replica_moves_the_fluctuation_and_noise_seeds_and_changes_speeds():
    from slurm_rl.scenario import Scenario
    from slurm_rl.simulator.cluster_spec import load_cluster_spec
    from slurm_rl.simulator.fluctuation import MachineFluctuation
    from slurm_rl.traces import synthetic_philly

    trace = synthetic_philly(days=0.1, seed=3)
    scenario = Scenario(load_cluster_spec("philly-hetero"), trace)
    assert scenario.replica(0) is scenario
    other = scenario.replica(2)
    assert other.spec.fluctuation.seed == scenario.spec.fluctuation.seed + 2
    assert other.sim.seed == scenario.sim.seed + 2 and other.trace is trace
    n = len(scenario.cluster.nodes)
    speeds = [MachineFluctuation(n, s.spec.fluctuation).factors for s in (scenario, other)]
    assert not np.allclose(speeds[0], speeds[1])
