"""The guard's memory of started jobs (fairness.StartedWaits) and its reservation for a job too
big for the GPUs free now (slurm_rl/reservation.py), by hand and in a replay."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from slurm_rl import scheduler as scheduler_module
from slurm_rl.agents.placement_baselines import FirstFit
from slurm_rl.core import (
    Cluster,
    ClusterSnapshot,
    FinishedJob,
    Job,
    Node,
    Placement,
    RunningJob,
)
from slurm_rl.fairness import POLICY_ORDER_ONLY, StartedWaits, waiting_fairness
from slurm_rl.ops.explain import render
from slurm_rl.ops.reasons import explain_decision
from slurm_rl.reservation import reserve
from slurm_rl.scheduler import Scheduler
from tests.test_fairness import FavoursAlice

CLUSTER = Cluster("c", tuple(Node(f"n{i}", "a100", 4) for i in range(4)))  # 16 GPUs


def _job(job_id: str, user: str, submit: float, gpus: int, *, limit: float | None = 600.0,
         nodes: int | None = None) -> Job:
    per_node = gpus // nodes if nodes else None
    return Job(job_id, submit, gpus, user=user, num_nodes=nodes, gpus_per_node=per_node,
               time_limit=limit)


def _run(job_id: str, node: str, gpus: int, start: float, limit: float) -> RunningJob:
    return RunningJob(_job(job_id, "carol", 0.0, gpus, limit=limit), start,
                      Placement((node,), (gpus,)))


def _snapshot(now: float, pending: Sequence[Job], running: Sequence[RunningJob],
              finished: Sequence[FinishedJob] = ()) -> ClusterSnapshot:
    free = [4] * len(CLUSTER.nodes)
    for run in running:
        for name, gpus in zip(run.placement.nodes, run.placement.gpus, strict=True):
            free[CLUSTER.index(name)] -= gpus
    return ClusterSnapshot(now, CLUSTER, tuple(free), tuple(pending), tuple(running),
                           tuple(finished))


# ----- the memory ------------------------------------------------------------------------------

def test_a_finished_jobs_wait_counts_until_it_started_a_window_ago() -> None:
    """bob's job waited 90 s, started at 100 and finished before the next snapshot showed it
    running: the memory keeps his 90 s (bob: (90 + 10) / 2 = 50 s at t=110) until its start
    leaves the window (t > 100 + 600), where only his pending job's wait is left."""
    done = FinishedJob(_job("b1", "bob", 10.0, 1), 100.0, 105.0, Placement(("n0",), (1,)))
    memory = StartedWaits(window_s=600.0)
    pending = [_job("b2", "bob", 100.0, 1), _job("a1", "alice", 100.0, 1)]
    first = _snapshot(110.0, pending, [], [done])
    memory.observe(first)
    assert dict(waiting_fairness(first, 600.0, memory).mean_wait_s) == {"bob": 50.0,
                                                                        "alice": 10.0}
    assert dict(waiting_fairness(first, 600.0).mean_wait_s)["bob"] == 10.0  # no memory
    later = _snapshot(701.0, pending, [])
    memory.observe(later)
    assert dict(waiting_fairness(later, 600.0, memory).mean_wait_s)["bob"] == 601.0


def test_a_requeued_job_counts_with_its_latest_start() -> None:
    memory = StartedWaits(window_s=3600.0)
    job = _job("j", "bob", 0.0, 1)
    memory.observe(_snapshot(50.0, [], [RunningJob(job, 40.0, Placement(("n0",), (1,)))]))
    memory.observe(_snapshot(300.0, [], [RunningJob(job, 250.0, Placement(("n1",), (1,)))]))
    assert memory.waits(since=0.0) == [("bob", 250.0)]


# ----- the reservation, by hand ----------------------------------------------------------------

# n0 idle; n1's 4 GPUs free at 100 (limit), n2's at 300; n3 has 2 free, the other 2 free at 400
RUNNING = (_run("r1", "n1", 4, 0.0, 100.0), _run("r2", "n2", 4, 0.0, 300.0),
           _run("r3", "n3", 2, 0.0, 400.0))
BIG = _job("big", "bob", 0.0, 8, nodes=2)  # two whole nodes


def test_the_reservation_starts_when_enough_limits_have_ended_and_holds_only_what_it_needs(
) -> None:
    """At 100 r1's limit ends and n0 + n1 fit two whole nodes: the job starts by 100 on them,
    n0's 4 free GPUs are held (nothing frees there), n1's are r1's (nothing to hold now),
    n3's 2 free GPUs stay free for anyone."""
    snapshot = _snapshot(10.0, [BIG], RUNNING)
    found = reserve(BIG, snapshot.free_gpus, snapshot, FirstFit())
    assert found is not None
    assert (found.start, found.placement.nodes, found.held) == (100.0, ("n0", "n1"),
                                                                (4, 0, 0, 0))
    assert found.allows(_job("short", "alice", 0.0, 1, limit=90.0), now=10.0)
    assert not found.allows(_job("long", "alice", 0.0, 1, limit=91.0), now=10.0)
    assert not found.allows(_job("unlimited", "alice", 0.0, 1, limit=None), now=10.0)


def test_no_reservation_when_the_gpus_never_free_within_the_limits() -> None:
    forever = (_run("r1", "n1", 4, 0.0, 100.0), RunningJob(
        _job("r2", "carol", 0.0, 4, limit=None), 0.0, Placement(("n2",), (4,))))
    huge = _job("huge", "bob", 0.0, 16, nodes=4)
    snapshot = _snapshot(10.0, [huge], forever)
    assert reserve(huge, snapshot.free_gpus, snapshot, FirstFit()) is None


# ----- the reservation in the scheduler's walk -------------------------------------------------

def test_the_walk_keeps_later_jobs_off_the_held_gpus_unless_they_end_in_time() -> None:
    """bob has waited 1,000 s, alice 100 s: the guard brings bob's job forward. It does not fit;
    with its reservation alice's long 2-GPU jobs get n3 and nothing else, her 4-GPU job that
    ends by 100 takes n0. Without the guard alice's first two jobs take n0."""
    pending = [BIG, _job("a1", "alice", 900.0, 2), _job("a2", "alice", 900.0, 2),
               _job("a3", "alice", 900.0, 4, limit=60.0)]
    now = 1000.0
    running = tuple(RunningJob(r.job, now - 10.0, r.placement) for r in RUNNING)
    snapshot = _snapshot(now, pending, running)
    guarded = Scheduler(FavoursAlice(), FirstFit())
    decision = guarded.decide(snapshot)
    assert decision.ranking[0] == "big"
    assert {j: p.nodes for j, p in decision.placements.items()} == {"a1": ("n3",),
                                                                    "a3": ("n0",)}
    assert guarded.last_reservation is not None
    assert guarded.last_reservation.job_id == "big" and guarded.last_reservation.held_gpus == 0
    plain = Scheduler(FavoursAlice(), FirstFit(), rules=POLICY_ORDER_ONLY)
    decision = plain.decide(snapshot)
    assert {j: p.nodes for j, p in decision.placements.items()} == {"a1": ("n0",),
                                                                    "a2": ("n0",)}
    assert plain.last_reservation is None


def _stream(scheduler: Scheduler, *, until_s: float = 300.0, step_s: float = 5.0) -> float:
    """alice submits four 1-GPU jobs of 20 s (limit 30 s) every 5 s until ``until_s``; bob one
    16-GPU job at 0. The time bob's job started."""
    running: list[tuple[RunningJob, float]] = []  # with its end
    pending = [_job("bob-big", "bob", 0.0, 16, nodes=4, limit=30.0)]
    now, count = 0.0, 0
    while True:
        running = [(run, end) for run, end in running if end > now]
        if now < until_s:
            pending += [_job(f"a{count + i}", "alice", now, 1, limit=30.0) for i in range(4)]
            count += 4
        decision = scheduler.decide(_snapshot(now, pending, [run for run, _ in running]))
        for job in pending:
            placement = decision.placements.get(job.job_id)
            if placement is not None:
                if job.user == "bob":
                    return now
                running.append((RunningJob(job, now, placement), now + 20.0))
        pending = [job for job in pending if job.job_id not in decision.placements]
        now += step_s


def test_a_big_job_brought_forward_starts_only_with_its_reservation(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the reservation bob's 16-GPU job starts once the GPUs alice held at the time drain
    (20 s later); brought forward without one, it waits out alice's whole stream."""
    reserved = _stream(Scheduler(FavoursAlice(), FirstFit()))
    monkeypatch.setattr(scheduler_module, "reserve", lambda *args: None)
    unreserved = _stream(Scheduler(FavoursAlice(), FirstFit()))
    assert reserved <= 150.0 and unreserved >= 300.0


def test_explain_shows_the_guard_the_nice_and_the_reservation() -> None:
    """The stored reasons carry the reservation; explain's text says what the guard did, what
    --nice did and which GPUs were held (before, only --json showed the first two)."""
    pending = [BIG, _job("a1", "alice", 900.0, 2)]
    running = tuple(RunningJob(r.job, 990.0, r.placement) for r in RUNNING)
    snapshot = _snapshot(1000.0, pending, running)
    scheduler = Scheduler(FavoursAlice(), FirstFit())
    decision = scheduler.decide(snapshot)
    why = explain_decision(scheduler, snapshot, decision)
    assert why["big"]["reservation"] == {"start": 1090.0, "nodes": ["n0", "n1"],
                                         "held": {"n0": 4}}
    decision_row = {"cycle": 7, "at": "t", "mode": "enforce", "policy": "favours-alice+ff",
                    "action": "release", "rank": 1, "score": 0.0, "nodes": None, "argv": None,
                    "rc": None, "answer": None, "why": why["big"], "before": None,
                    "recovered": None, "waiting": None}
    job = {"id": "big", "cluster": "c", "user": "bob", "partition": "gpu", "gpus": 8,
           "nodes": 2, "gpu_type": None, "submit_time": 0.0}
    text = "\n".join(render({"job": job, "decisions": [decision_row], "outcome": None}))
    assert "fairness guard (the policy ranked it 2): brought forward: the user waits too " \
           "long; bob's mean wait 1000 s, wait ratio 1.818 (bound 1.2)" in text
    assert "reserved: to start by 1970-01-01 00:18:10 UTC on n0,n1; GPUs held for it now: " \
           "n0 4" in text
    niced = dict(why["a1"], nice={"nice": 300, "places": 3})
    text = "\n".join(render({"job": job, "decisions": [dict(decision_row, why=niced)],
                             "outcome": None}))
    assert "its --nice 300 moved it 3 place(s) down" in text
