"""Exclusions (Slurm's ExcNodeList) for released jobs without a node set: the emulated
slurmctld keeps them off those nodes, the scheduler asks the placement for them, and RWGP
names the nodes far too slow for a gang."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from slurm_rl.agents.dual.agent import build_scheduler, network_config
from slurm_rl.agents.dual.bundle import Bundle
from slurm_rl.agents.dual.network import DualNetwork
from slurm_rl.agents.ordering_baselines import Fifo
from slurm_rl.agents.placement_baselines import FirstFit
from slurm_rl.agents.rwgp.placement import PlacementConfig, RwgpPlacement
from slurm_rl.core import Cluster, ClusterSnapshot, Decision, Job, Node, Placement
from slurm_rl.fairness import RankingRules
from slurm_rl.loop import run_loop
from slurm_rl.scheduler import Scheduler
from slurm_rl.simulator.world import SimActuator, TraceSource
from tests.sim_doubles import job, simulation

A100S = Placement(("a100-0", "a100-1"), (8, 8))
V100S = ("v100-0", "v100-1")


class Scripted:
    """Releases every pending job in a fixed order with fixed pins and exclusions."""

    def __init__(self, order, pins=None, exclusions=None):
        self.order, self.pins, self.exclusions = order, pins or {}, exclusions or {}

    def decide(self, snapshot):
        pending = {j.job_id for j in snapshot.pending}
        ranking = tuple(j for j in self.order if j in pending)
        pins = {j: p for j, p in self.pins.items() if j in pending}
        exclusions = {j: n for j, n in self.exclusions.items() if j in pending}
        return Decision("scripted", ranking, pins, exclusions=exclusions)


def replay(jobs, scheduler):
    sim = simulation(jobs, mode="slurm", cycle_s=10.0)
    run_loop(TraceSource(sim), scheduler, SimActuator(sim))
    return sim, {o.job.job_id: o for o in sim.outcomes}


def test_an_excluded_gang_waits_for_its_nodes_instead_of_starting_on_the_excluded_ones():
    jobs = [job("hog", 0.0, 16, 1000.0), job("gang", 20.0, 8, 100.0)]
    pins = {"hog": A100S}
    _, free_choice = replay(jobs, Scripted(["hog", "gang"], pins))
    assert set(free_choice["gang"].nodes) == set(V100S)  # Slurm's first fit, at once
    _, kept_off = replay(jobs, Scripted(["hog", "gang"], pins, {"gang": V100S}))
    assert kept_off["gang"].start == pytest.approx(kept_off["hog"].end)
    assert not set(kept_off["gang"].nodes) & set(V100S)


def test_an_exclusion_says_nothing_about_other_jobs_of_the_same_shape():
    jobs = [job("hog", 0.0, 16, 1000.0), job("kept", 20.0, 8, 100.0), job("free", 20.0, 8, 100.0)]
    scripted = Scripted(["hog", "kept", "free"], {"hog": A100S}, {"kept": V100S})
    _, outcomes = replay(jobs, scripted)
    assert outcomes["free"].start == pytest.approx(20.0)  # in the same pass, on the V100s
    assert set(outcomes["free"].nodes) == set(V100S)


def test_an_exclusion_that_would_strand_the_job_is_refused():
    jobs = [job("typed", 0.0, 4, 100.0, gpu_type="V100")]
    sim, outcomes = replay(jobs, Scripted(["typed"], exclusions={"typed": V100S}))
    assert sim.rejected_actions >= 1
    assert set(outcomes["typed"].nodes) <= set(V100S)


def test_a_pinned_job_ignores_its_exclusion():
    jobs = [job("pinned", 0.0, 4, 100.0)]
    pin = {"pinned": Placement(("v100-0",), (4,))}
    _, outcomes = replay(jobs, Scripted(["pinned"], pin, {"pinned": ("v100-0",)}))
    assert outcomes["pinned"].nodes == ("v100-0",)


# ----- who asks, and what RWGP names ----------------------------------------------------


def mixed_cluster() -> Cluster:
    nodes = (Node("a100-0", "A100", 8, "g", 4.0), Node("v100-0", "V100", 8, "g", 2.0),
             Node("k80-0", "K80", 8, "g", 0.5), Node("k80-1", "K80", 8, "g", 0.5))
    return Cluster("mixed", nodes)


SPEEDS = {"A100": 1.6, "V100": 1.0, "K80": 0.2}


def snapshot_of(cluster: Cluster, pending: tuple[Job, ...], free: tuple[int, ...]):
    return ClusterSnapshot(0.0, cluster, free, pending)


def test_rwgp_keeps_gangs_off_nodes_far_slower_than_their_best():
    cluster = mixed_cluster()  # nodes of 8 GPUs
    rwgp = RwgpPlacement(SPEEDS)
    snapshot = snapshot_of(cluster, (), (0, 0, 0, 0))
    rwgp.observe(snapshot)
    slow = ("k80-0", "k80-1")
    assert rwgp.exclusions(job("gang", 0.0, 2, 10.0), snapshot) == slow
    assert rwgp.exclusions(job("spans", 0.0, 12, 10.0), snapshot) == slow
    assert rwgp.exclusions(job("one", 0.0, 1, 10.0), snapshot) == ()
    assert rwgp.exclusions(job("k80", 0.0, 12, 10.0, gpu_type="K80"), snapshot) == ()
    spanning_only = RwgpPlacement(SPEEDS, PlacementConfig(exclusion_min_gpus=None))
    spanning_only.observe(snapshot)
    assert spanning_only.exclusions(job("two-nodes", 0.0, 4, 10.0, num_nodes=2), snapshot) == slow
    assert spanning_only.exclusions(job("spans", 0.0, 12, 10.0), snapshot) == slow
    assert spanning_only.exclusions(job("one-node", 0.0, 8, 10.0), snapshot) == ()
    off = RwgpPlacement(SPEEDS, PlacementConfig(exclusion_ratio=0.0))
    off.observe(snapshot)
    assert off.exclusions(job("spans", 0.0, 12, 10.0), snapshot) == ()


def test_the_scheduler_asks_for_exclusions_only_for_jobs_it_did_not_place():
    cluster = mixed_cluster()
    pending = (job("placed", 0.0, 2, 10.0), job("waiting", 0.0, 12, 10.0))
    snapshot = snapshot_of(cluster, pending, (2, 0, 0, 0))
    decision = Scheduler(Fifo(), RwgpPlacement(SPEEDS)).decide(snapshot)
    assert set(decision.placements) == {"placed"}
    assert dict(decision.exclusions) == {"waiting": ("k80-0", "k80-1")}
    assert Scheduler(Fifo(), FirstFit()).decide(snapshot).exclusions == {}


def test_under_dispatch_the_scheduler_asks_for_no_exclusion_a_held_job_would_drop():
    """Dispatch keeps exclusions for released jobs only; a held job's were asked for every
    cycle and thrown away (most of a learned agent's replay time). The decision is the same."""
    cluster = mixed_cluster()
    pending = (job("placed", 0.0, 2, 10.0), job("waiting", 0.0, 12, 10.0))
    snapshot = snapshot_of(cluster, pending, (2, 0, 0, 0))
    asked: list[str] = []

    class Counting(RwgpPlacement):
        def exclusions(self, job: Job, snapshot: ClusterSnapshot) -> tuple[str, ...]:
            asked.append(job.job_id)
            return super().exclusions(job, snapshot)

    decision = Scheduler(Fifo(), Counting(SPEEDS), rules=RankingRules(dispatch=True)).decide(
        snapshot)
    assert asked == [] and decision.exclusions == {}
    assert set(decision.placements) == {"placed"} and decision.holds == ("waiting",)


def test_rwgp_does_not_pin_a_gang_where_it_would_keep_slurm_from_starting_it():
    cluster = mixed_cluster()
    rwgp = RwgpPlacement(SPEEDS)
    only_k80_free = (0, 0, 8, 8)
    snapshot = snapshot_of(cluster, (), only_k80_free)
    rwgp.observe(snapshot)
    assert rwgp.place(job("gang", 0.0, 2, 10.0), only_k80_free, snapshot) is None
    placement = rwgp.place(job("one", 0.0, 1, 10.0), only_k80_free, snapshot)
    assert placement is not None and placement.nodes[0].startswith("k80")
    whole = job("whole", 0.0, 24, 10.0)  # the rest could never hold it: nothing is excluded
    assert rwgp.exclusions(whole, snapshot) == ()


def test_in_a_backlog_rwgp_lets_gangs_that_fit_a_node_take_slow_nodes():
    cluster = mixed_cluster()
    config = PlacementConfig(exclusion_backlog_s=300.0, exclusion_backlog_memory_s=3600.0)
    rwgp = RwgpPlacement(SPEEDS, config)
    only_k80_free = (0, 0, 8, 8)
    slow = ("k80-0", "k80-1")
    gang, spans = job("gang", 0.0, 2, 10.0), job("spans", 0.0, 12, 10.0)
    calm = ClusterSnapshot(1000.0, cluster, only_k80_free, (job("fresh", 900.0, 1, 10.0),))
    rwgp.observe(calm)
    assert rwgp.exclusions(gang, calm) == slow
    assert rwgp.place(gang, only_k80_free, calm) is None
    waiting = job("waiting", 0.0, 1, 10.0)  # a single-GPU job 20 min pending: all GPUs taken
    backlog = ClusterSnapshot(1200.0, cluster, (0, 0, 0, 0), (waiting, gang, spans))
    assert rwgp.exclusions(gang, backlog) == ()
    assert rwgp.exclusions(spans, backlog) == slow  # a spanning gang waits for good
    later = ClusterSnapshot(4000.0, cluster, only_k80_free, (gang,))
    placement = rwgp.place(gang, only_k80_free, later)  # the backlog is remembered an hour
    assert placement is not None and placement.nodes[0].startswith("k80")
    assert rwgp.exclusions(gang, ClusterSnapshot(5000.0, cluster, only_k80_free, ())) == slow


def test_with_patience_a_gang_that_has_waited_takes_slow_nodes():
    cluster = mixed_cluster()
    rwgp = RwgpPlacement(SPEEDS, PlacementConfig(exclusion_patience_s=3600.0))
    only_k80_free = (0, 0, 8, 8)
    gang = job("gang", 0.0, 2, 10.0)
    early = ClusterSnapshot(1000.0, cluster, only_k80_free, (gang,))
    rwgp.observe(early)
    assert rwgp.exclusions(gang, early) == ("k80-0", "k80-1")
    assert rwgp.place(gang, only_k80_free, early) is None  # it waits for a fast node a while
    late = ClusterSnapshot(3600.0, cluster, only_k80_free, (gang,))
    assert rwgp.exclusions(gang, late) == ()
    placement = rwgp.place(gang, only_k80_free, late)
    assert placement is not None and placement.nodes[0].startswith("k80")


def _dual_agent(chooser: str) -> Scheduler:
    torch.manual_seed(0)
    network = DualNetwork(network_config(16, pace_sharpness=4.0)).eval()
    return build_scheduler(Bundle(Path("-"), network, {"chooser": chooser, "fee_weight": 0.1}),
                           SPEEDS)


def test_the_dual_agent_excludes_as_its_chooser_does_when_trained_so():
    cluster = mixed_cluster()
    only_k80_free = (0, 0, 8, 8)
    gang, one = job("gang", 0.0, 2, 10.0), job("one", 1.0, 1, 10.0)
    snapshot = snapshot_of(cluster, (gang, one), only_k80_free)
    excluding = _dual_agent("rwgp-excluding").decide(snapshot)
    assert set(excluding.placements) == {"one"}  # the gang waits for a faster node
    assert dict(excluding.exclusions) == {"gang": ("k80-0", "k80-1")}
    assert _dual_agent("rwgp-patient").decide(snapshot) == excluding  # waited 0 s of 1 h
    every_set = _dual_agent("rwgp").decide(snapshot)  # as bundles before session 14
    assert set(every_set.placements) == {"gang", "one"} and not every_set.exclusions


def test_the_patient_dual_agent_tells_apart_gangs_of_one_shape_by_their_wait():
    # candidates are memoised per request shape: the wait must be part of the key
    cluster = mixed_cluster()
    old, new = job("old", 0.0, 2, 10.0), job("new", 3900.0, 2, 10.0)
    snapshot = ClusterSnapshot(4000.0, cluster, (0, 0, 8, 8), (new, old))
    decision = _dual_agent("rwgp-patient").decide(snapshot)
    assert set(decision.placements) == {"old"}


def test_a_long_job_is_kept_off_slow_nodes_whatever_its_size_and_even_in_a_backlog():
    cluster = mixed_cluster()
    config = PlacementConfig(exclusion_min_limit_s=86_400.0)
    rwgp = RwgpPlacement(SPEEDS, config)
    only_k80_free = (0, 0, 8, 8)
    slow = ("k80-0", "k80-1")
    long_one = job("long", 0.0, 1, 50_000.0, time_limit=86_400.0)
    short_one = job("short", 0.0, 1, 100.0, time_limit=3_600.0)
    unlimited = job("unlimited", 0.0, 1, 100.0, time_limit=None)
    snapshot = ClusterSnapshot(1000.0, cluster, only_k80_free, (long_one, short_one, unlimited))
    rwgp.observe(snapshot)
    assert rwgp.exclusions(long_one, snapshot) == slow
    assert rwgp.place(long_one, only_k80_free, snapshot) is None  # it waits for a fast GPU
    for small in (short_one, unlimited):  # an unknown limit is not long
        assert rwgp.exclusions(small, snapshot) == ()
        assert rwgp.place(small, only_k80_free, snapshot) is not None
    waiting = job("waiting", 0.0, 1, 10.0)  # a short single-GPU job 20 min pending: a backlog
    backlog = ClusterSnapshot(1200.0, cluster, (0, 0, 0, 0), (waiting, long_one))
    assert rwgp.exclusions(long_one, backlog) == slow


def test_a_patient_chooser_keeps_a_long_job_off_slow_nodes_for_an_hour_only():
    """Under shortest-limit-first the fast GPUs go to shorter jobs for as long as they keep
    coming: ``rwgp-long`` then kept a long job pending for weeks (session 46, Philly October
    at load 0.85 without pace readings: 585 jobs over two days, many to the 720 h cap)."""
    cluster = mixed_cluster()
    long_one = job("long", 0.0, 1, 50_000.0, time_limit=86_400.0)
    for now, patient_places in ((1800.0, False), (3700.0, True)):
        snapshot = ClusterSnapshot(now, cluster, (0, 0, 8, 8), (long_one,))
        patient = _dual_agent("rwgp-long-patient").decide(snapshot)
        assert ("long" in patient.placements) is patient_places, now
        assert "long" not in _dual_agent("rwgp-long").decide(snapshot).placements  # for ever
    assert patient.placements["long"].nodes[0].startswith("k80")


def test_a_long_job_waiting_for_a_fast_gpu_is_no_sign_of_a_backlog():
    cluster = mixed_cluster()
    rwgp = RwgpPlacement(SPEEDS, PlacementConfig(exclusion_min_limit_s=86_400.0))
    gang = job("gang", 1100.0, 2, 10.0)
    long_one = job("long", 0.0, 1, 50_000.0, time_limit=86_400.0)  # pending 20 min
    snapshot = ClusterSnapshot(1200.0, cluster, (0, 0, 8, 8), (long_one, gang))
    rwgp.observe(snapshot)
    assert rwgp.exclusions(gang, snapshot) == ("k80-0", "k80-1")  # no backlog: still excluded


def test_the_dual_agent_tells_apart_long_and_short_jobs_of_one_shape():
    # candidates are memoised per request shape: whether the job is long must be in the key
    cluster = mixed_cluster()
    short_one = job("short", 0.0, 1, 100.0, time_limit=3_600.0)
    long_one = job("long", 0.0, 1, 50_000.0, time_limit=7 * 86_400.0)
    for pending in ((short_one, long_one), (long_one, short_one)):  # either represents it
        snapshot = ClusterSnapshot(1000.0, cluster, (0, 0, 8, 8), pending)
        decision = _dual_agent("rwgp-excluding-long").decide(snapshot)
        assert set(decision.placements) == {"short"}
        assert dict(decision.exclusions) == {"long": ("k80-0", "k80-1")}
        assert set(_dual_agent("rwgp-excluding").decide(snapshot).placements) == {"short", "long"}


def test_a_single_gpu_job_of_unknown_limit_left_waiting_is_still_a_backlog_sign():
    cluster = mixed_cluster()
    rwgp = RwgpPlacement(SPEEDS, PlacementConfig(exclusion_min_limit_s=86_400.0))
    gang = job("gang", 1100.0, 2, 10.0)
    unlimited = job("unlimited", 0.0, 1, 10.0, time_limit=None)  # pending 20 min
    snapshot = ClusterSnapshot(1200.0, cluster, (0, 0, 8, 8), (unlimited, gang))
    rwgp.observe(snapshot)
    assert rwgp.exclusions(gang, snapshot) == ()  # a backlog: the gang may take slow nodes


def test_the_long_rule_alone_keeps_only_long_jobs_off_slow_nodes():
    cluster = mixed_cluster()
    snapshot = snapshot_of(cluster, (), (0, 0, 0, 0))
    rwgp = RwgpPlacement(SPEEDS, PlacementConfig(exclusion_spanning=False, exclusion_min_gpus=None,
                                                 exclusion_min_limit_s=86_400.0))
    rwgp.observe(snapshot)
    assert rwgp.exclusions(job("spans", 0.0, 12, 10.0, time_limit=3_600.0), snapshot) == ()
    assert rwgp.exclusions(job("gang", 0.0, 2, 10.0, time_limit=3_600.0), snapshot) == ()
    long_one = job("long", 0.0, 1, 50_000.0, time_limit=86_400.0)
    assert rwgp.exclusions(long_one, snapshot) == ("k80-0", "k80-1")
    long_span = job("long-span", 0.0, 12, 50_000.0, time_limit=86_400.0)
    assert rwgp.exclusions(long_span, snapshot) == ("k80-0", "k80-1")


def test_the_rwgp_long_chooser_excludes_the_long_job_and_not_the_short_gang():
    cluster = mixed_cluster()
    gang = job("gang", 0.0, 2, 100.0, time_limit=3_600.0)
    long_one = job("long", 0.0, 1, 50_000.0, time_limit=7 * 86_400.0)
    snapshot = ClusterSnapshot(1000.0, cluster, (0, 0, 8, 8), (gang, long_one))
    decision = _dual_agent("rwgp-long").decide(snapshot)
    assert set(decision.placements) == {"gang"}
    assert dict(decision.exclusions) == {"long": ("k80-0", "k80-1")}


def test_the_long_rule_lets_go_while_the_long_jobs_queue_is_deep():
    """``exclusion_queue_h``: past that many hours of the whole cluster's GPUs in pending
    long jobs (by their limits) a long job may take slow nodes (session 48: at load 1.0 the
    day-long gangs kept off K80 nodes waited twice as long as shortest-limit-first's)."""
    cluster = mixed_cluster()  # 32 GPUs: 72 h of them is 2,304 GPU-hours
    rwgp = RwgpPlacement(SPEEDS, PlacementConfig(exclusion_min_limit_s=86_400.0,
                                                 exclusion_queue_h=72.0))
    only_k80_free = (0, 0, 8, 8)
    long_one = job("long", 0.0, 1, 50_000.0, time_limit=86_400.0)
    short_gangs = tuple(job(f"short-{i}", 0.0, 8, 100.0, time_limit=23 * 3600.0)
                        for i in range(20))  # not long: they count for nothing
    shallow = ClusterSnapshot(1000.0, cluster, only_k80_free, (long_one, *short_gangs))
    rwgp.observe(shallow)
    assert rwgp.exclusions(long_one, shallow) == ("k80-0", "k80-1")
    gangs = tuple(job(f"gang-{i}", 0.0, 8, 100.0, time_limit=168 * 3600.0) for i in range(2))
    at_most = ClusterSnapshot(1000.0, cluster, only_k80_free, (long_one, gangs[0]))
    assert rwgp.exclusions(long_one, at_most) != ()  # 24 + 1,344 GPU-hours: not past it
    deep = ClusterSnapshot(1000.0, cluster, only_k80_free, (long_one, *gangs))
    assert rwgp.exclusions(long_one, deep) == ()  # 2,712 GPU-hours
    placed = rwgp.place(long_one, only_k80_free, deep)
    assert placed is not None and placed.nodes[0].startswith("k80")


def test_the_rwgp_long_queue_chooser_keeps_a_long_job_waiting_only_behind_a_shallow_queue():
    cluster = mixed_cluster()
    long_one = job("long", 0.0, 1, 50_000.0, time_limit=86_400.0)
    gangs = tuple(job(f"gang-{i}", 0.0, 8, 100.0, time_limit=168 * 3600.0) for i in range(2))
    for pending, places in (((long_one,), False), ((long_one, *gangs), True)):
        snapshot = ClusterSnapshot(1000.0, cluster, (0, 0, 8, 8), pending)
        decision = _dual_agent("rwgp-long-queue").decide(snapshot)
        assert ("long" in decision.placements) is places, pending
        assert "long" not in _dual_agent("rwgp-long").decide(snapshot).placements


def test_in_a_lull_only_the_deep_long_queue_lets_a_long_job_onto_slow_nodes():
    """``exclusion_queue_lull``: a deep long queue opens the slow nodes only while no shorter
    job has waited ``exclusion_backlog_s`` (session 48: released at once, long jobs took the
    nodes the short single-GPU jobs would have started on)."""
    cluster = mixed_cluster()
    rwgp = RwgpPlacement(SPEEDS, PlacementConfig(exclusion_min_limit_s=86_400.0,
                                                 exclusion_queue_h=72.0,
                                                 exclusion_queue_lull=True))
    only_k80_free = (0, 0, 8, 8)
    long_one = job("long", 0.0, 1, 50_000.0, time_limit=86_400.0)
    gangs = tuple(job(f"gang-{i}", 0.0, 8, 100.0, time_limit=168 * 3600.0) for i in range(2))
    short = job("short", 600.0, 1, 100.0, time_limit=3600.0)
    lull = ClusterSnapshot(1000.0, cluster, only_k80_free, (long_one, *gangs))
    rwgp.observe(lull)
    assert rwgp.exclusions(long_one, lull) == ()  # deep, and nothing shorter waits
    just_in = ClusterSnapshot(800.0, cluster, only_k80_free, (long_one, *gangs, short))
    assert rwgp.exclusions(long_one, just_in) == ()  # the short job has waited 200 s only
    waiting = ClusterSnapshot(1000.0, cluster, only_k80_free, (long_one, *gangs, short))
    assert rwgp.exclusions(long_one, waiting) == ("k80-0", "k80-1")  # 400 s: it waits
    assert rwgp.place(long_one, only_k80_free, waiting) is None
    unlimited = job("unlimited", 0.0, 1, 100.0, time_limit=None)  # no limit: not long
    no_limit = ClusterSnapshot(1000.0, cluster, only_k80_free, (long_one, *gangs, unlimited))
    assert rwgp.exclusions(long_one, no_limit) == ("k80-0", "k80-1")


def test_the_rwgp_long_lull_chooser_places_a_long_job_on_slow_nodes_only_in_a_lull():
    cluster = mixed_cluster()
    long_one = job("long", 0.0, 1, 50_000.0, time_limit=86_400.0)
    gangs = tuple(job(f"gang-{i}", 0.0, 8, 100.0, time_limit=168 * 3600.0) for i in range(2))
    short = job("short", 0.0, 24, 100.0, time_limit=3600.0)  # waiting: 16 GPUs free
    for pending, places in (((long_one, *gangs), True), ((long_one, *gangs, short), False)):
        snapshot = ClusterSnapshot(1000.0, cluster, (0, 0, 8, 8), pending)
        decision = _dual_agent("rwgp-long-lull").decide(snapshot)
        assert ("long" in decision.placements) is places, pending
