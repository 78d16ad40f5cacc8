"""Dispatch mode (``RankingRules.dispatch``): the scheduler releases only the jobs it starts,
holds every other pending job, and so its order holds however Slurm would order the queue."""

from __future__ import annotations

import pytest

from slurm_rl.agents.ordering_baselines import Fifo, SjfOracle
from slurm_rl.agents.placement_baselines import FirstFit
from slurm_rl.core import Cluster, ClusterSnapshot, Decision, Node, Placement
from slurm_rl.fairness import RankingRules
from slurm_rl.loop import run_loop
from slurm_rl.scheduler import Scheduler, dispatched
from slurm_rl.simulator.world import SimActuator, TraceSource
from tests.sim_doubles import job, simulation

DISPATCH = RankingRules(dispatch=True)


def _starts(jobs, rules, ordering=SjfOracle):
    sim = simulation(jobs, mode="slurm", cycle_s=10.0)
    run_loop(TraceSource(sim), Scheduler(ordering(), FirstFit(), rules=rules), SimActuator(sim))
    return {o.job.job_id: o.start for o in sim.outcomes}


HOG_END = 1005.0 / 0.8**3  # 24 GPUs: all 4 nodes (0.8 per extra node), paced by the V100s


def _queue_behind_a_hog():
    """Every GPU held by ``hog``; behind it a long whole-cluster job submitted first, then
    three short ones. The hog ends between two cycles (decisions at 0, 10, 20, ...)."""
    jobs = [job("hog", 0.0, 24, 1005.0), job("long", 1.0, 24, 5000.0)]
    return jobs + [job(f"short{i}", 2.0 + i, 24, 100.0) for i in range(3)]


def test_without_dispatch_slurm_starts_its_own_first_job_when_gpus_free_between_cycles():
    starts = _starts(_queue_behind_a_hog(), RankingRules())
    # Slurm's pass at the hog's end starts the oldest released job, not SJF's first.
    assert starts["long"] == pytest.approx(HOG_END)
    assert starts["long"] < starts["short0"]


def test_with_dispatch_the_policy_order_holds_from_the_next_cycle():
    starts = _starts(_queue_behind_a_hog(), DISPATCH)
    assert starts["short0"] < starts["short1"] < starts["short2"] < starts["long"]
    assert HOG_END < starts["short0"] <= HOG_END + 10.0  # the GPUs wait for the next cycle


def test_dispatch_gives_fifo_the_same_schedule_when_every_job_fits_at_once():
    jobs = [job(f"j{i}", 10.0 * i, 1, 50.0) for i in range(6)]
    assert _starts(jobs, DISPATCH, Fifo) == _starts(jobs, RankingRules(), Fifo)


def test_dispatched_releases_the_started_and_forward_jobs_and_holds_the_rest():
    cluster = Cluster("c", (Node("n0", "V100", 8), Node("n1", "V100", 8)))
    pending = tuple(job(name, float(i), 1, 10.0) for i, name in enumerate("abcde"))
    snapshot = ClusterSnapshot(100.0, cluster, (8, 8), pending)
    decision = Decision("p", ranking=("c", "a", "b", "d"),
                        placements={"a": Placement(("n0",), (1,))}, scores=(4.0, 3.0, 2.0, 1.0),
                        exclusions={"b": ("n1",), "c": ("n1",)}, forward=("b",))
    held = dispatched(decision, snapshot)
    assert held.ranking == ("a", "b")
    assert held.scores == (3.0, 2.0)
    assert held.holds == ("c", "d", "e")  # ranked first, then the unranked in queue order
    assert dict(held.exclusions) == {"b": ("n1",)}
    assert dict(held.placements) == dict(decision.placements)


class _CountingFifo(Fifo):
    """FIFO that counts how often the scheduler asks it for scores."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def score(self, snapshot: ClusterSnapshot):  # type: ignore[no-untyped-def]
        self.asked += 1
        return super().score(snapshot)


def _crowded(*, nice: int = 0) -> ClusterSnapshot:
    """3 GPUs free in all; every pending job asks for 4."""
    cluster = Cluster("c", (Node("n0", "V100", 8), Node("n1", "V100", 8)))
    pending = tuple(job(name, float(i), 4, 10.0, nice=nice if name == "b" else 0)
                    for i, name in enumerate("cab"))
    return ClusterSnapshot(100.0, cluster, (2, 1), pending)


def test_dispatch_holds_everything_unscored_when_no_pending_job_fits_in_the_free_gpus():
    ordering = _CountingFifo()
    decision = Scheduler(ordering, FirstFit(), rules=DISPATCH).decide(_crowded())
    assert ordering.asked == 0
    assert (decision.ranking, decision.scores, dict(decision.placements)) == ((), (), {})
    assert decision.holds == ("c", "a", "b")  # every pending job, in queue order


def test_the_unscored_hold_keeps_the_decision_the_scored_one_would_make():
    full = dispatched(Scheduler(Fifo(), FirstFit()).decide(_crowded()), _crowded())
    idle = Scheduler(Fifo(), FirstFit(), rules=DISPATCH).decide(_crowded())
    assert (idle.ranking, dict(idle.placements), dict(idle.exclusions), idle.forward) == (
        full.ranking, dict(full.placements), dict(full.exclusions), full.forward)
    assert sorted(idle.holds) == sorted(full.holds)


@pytest.mark.parametrize("rules, snapshot", [
    (RankingRules(), _crowded()),  # without dispatch the ranking is Slurm's priorities
    (DISPATCH, _crowded(nice=500)),  # --nice re-ranks: the step needs the policy's order
])
def test_the_ordering_is_asked_when_its_order_can_matter(rules, snapshot):
    ordering = _CountingFifo()
    Scheduler(ordering, FirstFit(), rules=rules).decide(snapshot)
    assert ordering.asked == 1
