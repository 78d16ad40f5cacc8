"""The shared ranking step (slurm_rl/fairness.py) on drawn queues: whatever the users, waits,
nice values and rules, it never drops or duplicates a job, keeps each user's own jobs in the
policy's order, changes nothing when the bound holds (or is off) and nobody is niced, moves a
lone niced job exactly its places, and its figures stay within their ranges."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from slurm_rl.agents.placement_baselines import FirstFit
from slurm_rl.core import Cluster, ClusterSnapshot, Job, Node, Placement, RunningJob
from slurm_rl.fairness import (
    RankingRules,
    guard_applies,
    jain_index,
    needs_reranking,
    nice_places,
    rerank,
    wait_ratio,
    waiting_fairness,
)
from slurm_rl.scheduler import Scheduler
from tests.property._support import budget

CLUSTER = Cluster("c", (Node("n0", "a100", 4), Node("n1", "v100", 2)))
NOW = 10_000.0
USERS = st.sampled_from(["", "alice", "bob", "carol", "dave"])
NICES = st.one_of(st.just(0), st.sampled_from([50, 100, -100, 250, 10_000, -10_000]),
                  st.integers(-(2**31), 2**31 - 1))


@dataclass(frozen=True)
class Queue:
    snapshot: ClusterSnapshot
    policy_order: list[int]


@st.composite
def queues(draw: st.DrawFn, nice: bool = True) -> Queue:
    count = draw(st.integers(1, 40))
    pending = tuple(
        Job(f"j{i}", draw(st.floats(0.0, NOW + 100.0)), draw(st.integers(1, 4)),
            user=draw(USERS), nice=draw(NICES) if nice else 0)
        for i in range(count)
    )
    running = tuple(
        RunningJob(Job(f"r{i}", submit, 1, user=draw(USERS)),
                   submit + draw(st.floats(0.0, 5000.0)), Placement(("n0",), (1,)))
        for i, submit in enumerate(draw(st.lists(st.floats(0.0, NOW), max_size=10)))
    )
    free = (draw(st.integers(0, 4)), draw(st.integers(0, 2)))
    snapshot = ClusterSnapshot(NOW, CLUSTER, free, pending, running)
    return Queue(snapshot, draw(st.permutations(range(count))))


RULES = st.builds(
    RankingRules,
    max_wait_ratio=st.sampled_from([None, 0.0, 1.0, 1.05, 1.2, 2.0, 10.0]),
    window_s=st.sampled_from([0.0, 600.0, 3600.0]),
    min_wait_s=st.sampled_from([0.0, 60.0, 3600.0]),
    nice_per_rank=st.sampled_from([None, 0, 1, 100, 10_000]),
)


def _by_user(queue: Queue, order: list[int]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for index in order:
        found.setdefault(queue.snapshot.pending[index].user, []).append(index)
    return found


@budget(300)
@given(queues(), RULES)
def test_the_step_never_drops_or_duplicates_a_job(queue: Queue, rules: RankingRules) -> None:
    fairness = waiting_fairness(queue.snapshot, rules.window_s)
    order, reranking = rerank(queue.snapshot, queue.policy_order, fairness, rules)
    assert sorted(order) == sorted(queue.policy_order)
    assert set(reranking.policy_rank) <= {job.job_id for job in queue.snapshot.pending}


@budget(300)
@given(queues(nice=False), RULES)
def test_each_users_jobs_keep_the_policys_relative_order(queue: Queue,
                                                          rules: RankingRules) -> None:
    fairness = waiting_fairness(queue.snapshot, rules.window_s)
    order, reranking = rerank(queue.snapshot, queue.policy_order, fairness, rules)
    assert _by_user(queue, order) == _by_user(queue, queue.policy_order)
    forward = set(reranking.brought_forward)
    leading = [queue.snapshot.pending[i].user in forward for i in order]
    assert leading == sorted(leading, reverse=True)  # the brought-forward users' jobs first


@budget(300)
@given(queues(nice=False), RULES)
def test_without_nice_the_step_is_the_identity_below_where_the_guard_acts(
    queue: Queue, rules: RankingRules
) -> None:
    fairness = waiting_fairness(queue.snapshot, rules.window_s)
    order, reranking = rerank(queue.snapshot, queue.policy_order, fairness, rules)
    holds = not rules.act_at or fairness.wait_ratio <= rules.act_at  # the guard acts half-way
    if holds or fairness.users < 2:
        assert not guard_applies(fairness, rules)
        assert not needs_reranking(queue.snapshot, fairness, rules)
        assert order == queue.policy_order and not reranking.policy_rank
    if not reranking.guard_applied:
        assert order == queue.policy_order


@budget(200)
@given(queues(), st.sampled_from([None, 0, 1, 100]))
def test_with_the_guard_off_only_nice_moves_jobs(queue: Queue, per_rank: int | None) -> None:
    rules = RankingRules(max_wait_ratio=None, nice_per_rank=per_rank)
    fairness = waiting_fairness(queue.snapshot)
    order, reranking = rerank(queue.snapshot, queue.policy_order, fairness, rules)
    jobs = queue.snapshot.pending
    if all(nice_places(job.nice, per_rank) == 0 for job in jobs):
        assert order == queue.policy_order and not reranking.nice_places
    assert not reranking.guard_applied


@budget(200)
@given(queues(nice=False), st.data())
def test_a_lone_niced_job_moves_exactly_its_places(queue: Queue, data: st.DataObject) -> None:
    rules = RankingRules(max_wait_ratio=None, nice_per_rank=100)
    count = len(queue.policy_order)
    at = data.draw(st.integers(0, count - 1))
    nice = data.draw(st.integers(-(2**31), 2**31 - 1))
    index = queue.policy_order[at]
    jobs = list(queue.snapshot.pending)
    jobs[index] = Job(jobs[index].job_id, jobs[index].submit_time, jobs[index].num_gpus,
                      user=jobs[index].user, nice=nice)
    snapshot = ClusterSnapshot(NOW, CLUSTER, queue.snapshot.free_gpus, tuple(jobs))
    order, _ = rerank(snapshot, queue.policy_order, waiting_fairness(snapshot), rules)
    expected = min(max(at + nice_places(nice, 100), 0), count - 1)
    assert order.index(index) == expected
    others = [i for i in queue.policy_order if i != index]
    assert [i for i in order if i != index] == others


@budget(200)
@given(queues(), RULES, st.integers(1, 50))
def test_a_decision_releases_distinct_pending_jobs_up_to_max_ranked(
    queue: Queue, rules: RankingRules, max_ranked: int
) -> None:
    class Drawn:
        name = "drawn"

        def observe(self, snapshot: ClusterSnapshot) -> None:
            pass

        def score(self, snapshot: ClusterSnapshot) -> list[float]:
            scores = [0.0] * len(snapshot.pending)
            for rank, index in enumerate(queue.policy_order):
                scores[index] = -float(rank)
            return scores

    scheduler = Scheduler(Drawn(), FirstFit(), max_ranked=max_ranked, rules=rules)
    decision = scheduler.decide(queue.snapshot)
    pending = [job.job_id for job in queue.snapshot.pending]
    assert len(set(decision.ranking)) == len(decision.ranking)
    assert set(decision.ranking) <= set(pending)
    assert len(decision.ranking) == min(len(pending), max_ranked)
    assert set(decision.placements) <= set(decision.ranking)
    assert len(decision.scores) == len(decision.ranking)


@budget(300)
@given(st.lists(st.floats(0.0, 1e9), max_size=30))
def test_the_figures_stay_within_their_ranges(values: list[float]) -> None:
    n = max(len(values), 1)
    assert 1 / n - 1e-9 <= jain_index(values) <= 1.0
    assert 1.0 <= wait_ratio(values) <= n + 1e-9
