"""Migrations: a running, checkpointable job requeued and restarted on faster nodes. The
simulator loses the work since the checkpoint and counts every run's fees; the scheduler offers
the GPUs no placement took; RWGP moves long jobs off nodes far slower than a free one."""

from __future__ import annotations

import pytest

from slurm_rl.agents.ordering_baselines import Fifo
from slurm_rl.agents.placement_baselines import FirstFit
from slurm_rl.agents.rwgp.placement import PlacementConfig, RwgpPlacement
from slurm_rl.core import ClusterSnapshot, Decision, JobId, Placement, RunningJob
from slurm_rl.loop import run_loop
from slurm_rl.scheduler import Scheduler
from slurm_rl.simulator.world import SimActuator, TraceSource
from tests.sim_doubles import job, simulation
from tests.test_exclusions import SPEEDS, mixed_cluster

A100_0 = Placement(("a100-0",), (8,))
A100_1 = Placement(("a100-1",), (8,))
ON_V100 = Placement(("v100-0",), (4,))
TO_A100 = Placement(("a100-0",), (4,))


class Mover:
    """Pins jobs where a table says; moves ``slow`` to ``a100-0`` once that node is free."""

    def __init__(self, pins: dict[JobId, Placement], move: JobId = "slow") -> None:
        self.pins, self.move, self.asked_idle = pins, move, 0

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        pins = {j.job_id: self.pins[j.job_id] for j in snapshot.pending}
        self.asked_idle += not snapshot.pending
        running = {r.job.job_id: r for r in snapshot.running}
        moves = {}
        mover = running.get(self.move)
        if snapshot.free_gpus[0] == 8 and mover is not None and mover.placement == ON_V100:
            moves = {self.move: TO_A100}
        return Decision("mover", tuple(pins), pins, migrations=moves)


def blocked_a100s(checkpointable: bool = True):
    """Both A100 nodes busy for 1000 s; ``slow`` (10,000 s of reference work) on a V100."""
    return [job("hog0", 0.0, 8, 2000.0), job("hog1", 0.0, 8, 2000.0),
            job("slow", 0.0, 4, 10_000.0, checkpointable=checkpointable)]


PINS = {"hog0": A100_0, "hog1": A100_1, "slow": ON_V100}


@pytest.mark.parametrize("mode", ["direct", "slurm"])
def test_a_migrated_job_restarts_on_the_faster_node_losing_only_the_overhead(mode):
    sim = simulation(blocked_a100s(), mode=mode, defer_window_s=0.0)
    mover = Mover(PINS)
    run_loop(TraceSource(sim), mover, SimActuator(sim))
    outcomes = {o.job.job_id: o for o in sim.outcomes}
    slow = outcomes["slow"]
    moved_at = outcomes["hog0"].end  # 2000 s of work at the A100's 2×: t = 1000
    assert moved_at == pytest.approx(1000.0)
    assert mover.asked_idle >= 1  # nothing pending, yet the simulator asked: a job can move
    # 1000 s done on the V100 (speed 1), 9000 left + 300 lost, at 2× on the A100
    assert slow.start == 0.0 and slow.restarts == 1 and slow.nodes == ("a100-0",)
    assert slow.end == pytest.approx(1000.0 + 9300.0 / 2.0)
    assert slow.gpu_seconds == pytest.approx({"V100": 4 * 1000.0, "A100": 4 * 4650.0})
    assert slow.fee == pytest.approx(4 * 1000.0 * 2.0 / 3600 + 4 * 4650.0 * 4.0 / 3600)
    assert sim.fees_accrued == pytest.approx(sum(o.fee for o in sim.outcomes))
    assert sim.rejected_actions == 0


def test_a_job_that_did_not_opt_in_is_never_moved():
    sim = simulation(blocked_a100s(checkpointable=False), defer_window_s=0.0)
    mover = Mover(PINS)
    run_loop(TraceSource(sim), mover, SimActuator(sim))
    slow = next(o for o in sim.outcomes if o.job.job_id == "slow")
    assert slow.restarts == 0 and slow.nodes == ("v100-0",)
    assert slow.end == pytest.approx(10_000.0)
    assert mover.asked_idle == 0  # nothing could move: no decision without pending jobs


def test_a_move_to_busy_nodes_is_refused_and_the_job_keeps_running():
    sim = simulation(blocked_a100s(), defer_window_s=0.0)
    snapshot = sim.next_snapshot()
    assert snapshot is not None
    sim.apply(Mover(PINS).decide(snapshot))
    sim.apply(Decision("late", (), migrations={"slow": TO_A100}))  # a100-0 is busy
    assert sim.rejected_actions == 1
    assert [r.placement for r in sim.peek().running if r.job.job_id == "slow"] == [ON_V100]


TO_A100_1 = Placement(("a100-1",), (4,))


def on_the_v100s(cap: int | None):
    """``s0`` and ``s1`` (checkpointable) running on ``v100-0`` and ``v100-1``, the A100s
    free; at most ``cap`` moves a decision."""
    sim = simulation([job(j, 0.0, 4, 10_000.0, checkpointable=True) for j in ("s0", "s1")],
                     migrations_per_cycle=cap)
    assert sim.next_snapshot() is not None
    pins = {"s0": ON_V100, "s1": Placement(("v100-1",), (4,))}
    sim.apply(Decision("pin", tuple(pins), pins))
    return sim


def on_an_a100(sim) -> set[str]:
    return {r.job.job_id for r in sim.peek().running if r.placement.nodes[0].startswith("a100")}


@pytest.mark.parametrize(("cap", "moved"), [(None, {"s0", "s1"}), (2, {"s0", "s1"}),
                                            (1, {"s0"}), (0, set())])
def test_a_decision_moves_at_most_the_cap_in_its_order(cap, moved):
    """As the daemon sends at most ``max_migrations_per_cycle`` moves, none without
    ``migrate`` (the gate's and fine-tuning's replays play it so: ``LiveWorld``)."""
    sim = on_the_v100s(cap)
    sim.apply(Decision("mover", (), migrations={"s0": TO_A100, "s1": TO_A100_1}))
    assert on_an_a100(sim) == moved
    assert sim.rejected_actions == 0  # a move past the cap is not sent, not refused


def test_a_move_that_cannot_be_made_does_not_use_up_the_cap():
    sim = on_the_v100s(1)
    sim.apply(Decision("mover", (), migrations={"gone": TO_A100, "s1": TO_A100_1}))
    assert on_an_a100(sim) == {"s1"} and sim.rejected_actions == 1


class FixedMoves(FirstFit):
    """First-fit placement that moves whatever job runs on ``v100-0`` into the free GPUs."""

    def __init__(self) -> None:
        self.offered: list[tuple[int, ...]] = []

    def migrations(self, snapshot, free_gpus):
        self.offered.append(tuple(free_gpus))
        return {r.job.job_id: TO_A100 for r in snapshot.running if r.placement == ON_V100}


def test_the_scheduler_offers_moves_the_gpus_its_placements_left_and_asks_when_idle():
    running = (RunningJob(job("slow", 0.0, 4, 10.0, checkpointable=True), 0.0, ON_V100),)
    free = (8, 0, 0, 4)
    placement = FixedMoves()
    busy = ClusterSnapshot(10.0, simulation([]).cluster, free, (job("new", 5.0, 8, 10.0),),
                           running)
    decision = Scheduler(Fifo(), placement).decide(busy)
    assert decision.placements["new"].nodes == ("a100-0",)
    assert placement.offered == [(0, 0, 0, 4)]  # a100-0 went to the pending job first
    idle = ClusterSnapshot(10.0, busy.cluster, free, (), running)
    assert dict(Scheduler(Fifo(), placement).decide(idle).migrations) == {"slow": TO_A100}
    assert Scheduler(Fifo(), FirstFit()).decide(idle).migrations == {}


# ----- RWGP's rule ----------------------------------------------------------------------


def k80_run(started: float, *, checkpointable: bool = True, gpus: int = 4) -> RunningJob:
    long = job("long", started, gpus, 1e6, checkpointable=checkpointable)
    return RunningJob(long, started, Placement(("k80-0",), (gpus,)))


def moves(rwgp: RwgpPlacement, run: RunningJob, free: tuple[int, ...], now: float = 20_000.0):
    snapshot = ClusterSnapshot(now, mixed_cluster(), free, (), (run,))
    rwgp.observe(snapshot)
    return rwgp.migrations(snapshot, free)


def test_rwgp_moves_a_long_job_off_a_slow_node_to_the_best_free_one():
    rwgp = RwgpPlacement(SPEEDS)
    free = (8, 8, 4, 8)  # A100, V100, the rest of the job's K80 node, another K80
    assert moves(rwgp, k80_run(0.0), free) == {"long": Placement(("a100-0",), (4,))}
    assert moves(rwgp, k80_run(0.0), (0, 8, 4, 8)) == {"long": Placement(("v100-0",), (4,))}


def test_rwgp_does_not_move_young_jobs_jobs_without_checkpoints_or_to_no_faster_node():
    rwgp = RwgpPlacement(SPEEDS)
    free = (8, 8, 4, 8)
    assert moves(rwgp, k80_run(10_000.0), free) == {}  # 2.8 h: run time not yet telling
    assert moves(rwgp, k80_run(0.0, checkpointable=False), free) == {}
    assert moves(rwgp, k80_run(0.0), (0, 0, 4, 8)) == {}  # only K80s free
    assert moves(rwgp, k80_run(0.0, gpus=8), (4, 4, 0, 8)) == {}  # no room for all 8
    never = RwgpPlacement(SPEEDS, PlacementConfig(migrate_after_s=None))
    assert moves(never, k80_run(0.0), free) == {}


def test_rwgp_with_a_fee_weight_does_not_move_a_job_where_its_work_costs_more():
    # A100 work costs (1 + λ·4·4.0)/1.6 against the K80's (1 + λ·4·0.5)/0.2 per unit: at a
    # high λ the A100 is dearer per unit of work and the move would raise the reward's cost.
    dear = RwgpPlacement({"A100": 1.6, "V100": 1.0, "K80": 0.9},
                         PlacementConfig(fee_weight=10.0, migrate_speedup=1.5))
    assert moves(dear, k80_run(0.0), (8, 0, 4, 8)) == {}
    cheap = RwgpPlacement({"A100": 1.6, "V100": 1.0, "K80": 0.9},
                          PlacementConfig(fee_weight=0.0, migrate_speedup=1.5))
    assert moves(cheap, k80_run(0.0), (8, 0, 4, 8)) == {"long": Placement(("a100-0",), (4,))}


def test_rwgp_with_a_gain_threshold_moves_sooner_the_larger_the_speed_up():
    # elapsed × (1 − here/there) ≥ 3 h: K80 → A100 (8×) after 3.4 h, K80 → V100 (5×) after 3.75 h
    gain = RwgpPlacement(SPEEDS, PlacementConfig(migrate_gain_s=3 * 3600.0))
    a100_free, v100_free = (8, 0, 4, 8), (0, 8, 4, 8)
    assert moves(gain, k80_run(0.0), a100_free, now=3.3 * 3600) == {}
    assert moves(gain, k80_run(0.0), a100_free, now=3.5 * 3600) == {
        "long": Placement(("a100-0",), (4,))}
    assert moves(gain, k80_run(0.0), v100_free, now=3.6 * 3600) == {}
    assert moves(gain, k80_run(0.0), v100_free, now=3.9 * 3600) == {
        "long": Placement(("v100-0",), (4,))}


def test_in_a_backlog_the_gain_threshold_gives_way_to_the_plain_rule():
    gain = RwgpPlacement(SPEEDS, PlacementConfig(migrate_gain_s=3 * 3600.0))
    waiting = job("waiting", 0.0, 1, 10.0)  # a single-GPU job pending for hours: a backlog
    a100_free = (8, 0, 4, 8)

    def in_backlog(now: float):
        snapshot = ClusterSnapshot(now, mixed_cluster(), a100_free, (waiting,), (k80_run(0.0),))
        gain.observe(snapshot)
        return gain.migrations(snapshot, a100_free)

    assert in_backlog(3.5 * 3600) == {}  # the gain rule would move it; 4 h have not passed
    assert in_backlog(4.1 * 3600) == {"long": Placement(("a100-0",), (4,))}


def test_a_scenario_makes_the_same_share_of_jobs_checkpointable_for_every_replica():
    from slurm_rl.scenario import Scenario
    from slurm_rl.simulator.cluster_spec import load_cluster_spec
    from slurm_rl.traces.model import Trace

    jobs = tuple(job(f"j{i}", float(i), 1, 100.0) for i in range(2000))
    trace = Trace("t", jobs, "V100", "test")
    half = Scenario(load_cluster_spec("tiny"), trace, checkpointable=0.5)
    chosen = {j.job_id for j in half.runnable_jobs()[0] if j.checkpointable}
    assert 900 < len(chosen) < 1100
    assert {j.job_id for j in half.replica(3).runnable_jobs()[0] if j.checkpointable} == chosen
    every = Scenario(load_cluster_spec("tiny"), trace, checkpointable=1.0).runnable_jobs()[0]
    none = Scenario(load_cluster_spec("tiny"), trace).runnable_jobs()[0]
    assert all(j.checkpointable for j in every) and not any(j.checkpointable for j in none)
