"""The emulated slurmctld's backfill plan (slurm_rl/simulator/backfill.py), the pins it keeps
and the one-GPU-type constraint the daemon sets (docs/slurm-emulation.md): cases worked out
by hand, each a behaviour the sim-to-real replay found the emulation missing."""

from __future__ import annotations

import pytest

from slurm_rl.core import Cluster, Job, Node, Placement
from slurm_rl.simulator.slurm_emulation import (
    QueuedJob,
    RunningShape,
    SlurmJobState,
    completing_nodes,
    schedule_pass,
)

CLUSTER = Cluster("three", (Node("n1", "a100", 4), Node("n2", "v100", 4), Node("n3", "v100", 4)))


def _job(job_id: str, gpus: int, nodes: int, gpu_type: str | None, limit: float) -> Job:
    return Job(job_id, 0.0, gpus * nodes, num_nodes=nodes, gpus_per_node=gpus,
               gpu_type=gpu_type, time_limit=limit)


def _starts(reservations: int) -> list[str]:
    """n1 (a100) is busy until 100, n3 (v100) until 30; n2 (v100) is free. B (a100:4) waits
    for n1; C (two v100 nodes) waits for n3, planned 30-80 on n2 and n3; D (v100:4 for 60 s)
    fits n2 now but would run into C's plan."""
    running = [RunningShape(100.0, (0,), (4,)), RunningShape(30.0, (2,), (4,))]
    queue = [QueuedJob(_job("B", 4, 1, "a100", 50.0), 0.0),
             QueuedJob(_job("C", 4, 2, "v100", 50.0), -1.0),
             QueuedJob(_job("D", 4, 1, "v100", 60.0), -2.0)]
    free = [0, 4, 0]
    started = schedule_pass(0.0, iter(queue), free, lambda: running, CLUSTER,
                            reservations=reservations)
    return [job.job_id for job, _ in started]


def test_every_waiting_job_is_planned_as_slurm_does_not_only_the_first() -> None:
    assert _starts(reservations=100) == []  # D would delay C, which Slurm planned too
    assert _starts(reservations=1) == ["D"]  # EASY: only B is protected


def test_a_short_job_still_backfills_before_the_plan() -> None:
    running = [RunningShape(100.0, (0,), (4,)), RunningShape(30.0, (2,), (4,))]
    queue = [QueuedJob(_job("C", 4, 2, "v100", 50.0), 0.0),
             QueuedJob(_job("E", 4, 1, "v100", 30.0), -1.0)]  # ends by 30, when C starts
    started = schedule_pass(0.0, iter(queue), [0, 4, 0], lambda: running, CLUSTER)
    assert [(job.job_id, p.nodes) for job, p in started] == [("E", ("n2",))]


def test_a_pin_stays_until_the_daemon_pins_the_job_elsewhere() -> None:
    state = SlurmJobState()
    pin = Placement(("n2",), (4,))
    state.set_levers(("x",), {"x": pin})
    state.set_levers(("x",), {})  # ranked again, placed nowhere this cycle
    (queued,) = state.queue({"x": _job("x", 4, 1, None, 60.0)}, now=0.0)
    assert queued.pin == pin
    moved = Placement(("n3",), (4,))
    state.set_levers(("x",), {"x": moved})
    assert next(state.queue({"x": _job("x", 4, 1, None, 60.0)}, 0.0)).pin == moved
    state.forget("x")
    assert next(state.queue({"x": _job("x", 4, 1, None, 60.0)}, 0.0)).pin is None


def test_a_released_untyped_gang_runs_on_one_gpu_type() -> None:
    """Slurm's first fit would take n1 (a100) and n2 (v100); Features=[a100|v100] keeps the
    gang on one type: a100 has one node, so both v100 nodes."""
    state = SlurmJobState(one_type_of=(("a100", (4,)), ("v100", (4, 4))))
    gang = _job("g", 4, 2, None, 60.0)
    state.set_levers(("g",), {})
    started = schedule_pass(0.0, state.queue({"g": gang}, 0.0), [4, 4, 4], list, CLUSTER)
    assert [p.nodes for _, p in started] == [("n2", "n3")]
    one_node = _job("s", 2, 1, None, 60.0)  # -N 1: no constraint (it cannot span types)
    state.set_levers(("s",), {})
    assert next(state.queue({"s": one_node}, 0.0)).one_of == ()


def test_the_daemons_pinned_jobs_come_first_in_priority() -> None:
    """The actuator gives the jobs it pins the top priorities, in ranking order; the other
    released jobs keep Slurm's own order, by submit time (slurm_rl/slurm/plan.py,
    promoted_order); a pin persists and counts."""
    state = SlurmJobState()
    pending = {j: _job(j, 1, 1, None, 60.0) for j in ("a", "b", "c")}
    state.set_levers(("b", "a", "c"), {"c": Placement(("n2",), (1,))}, pending=pending)
    assert [q.job.job_id for q in state.queue(pending, 0.0)] == ["c", "a", "b"]
    state.set_levers(("a", "b", "c"), {"b": Placement(("n3",), (1,))}, pending=pending)
    assert [q.job.job_id for q in state.queue(pending, 0.0)] == ["b", "c", "a"]


def test_a_job_the_guard_brings_forward_goes_above_the_unpromoted_ones() -> None:
    state = SlurmJobState()
    pending = {j: _job(j, 1, 1, None, 60.0) for j in ("a", "b", "c")}
    state.set_levers(("c", "a", "b"), {}, pending=pending, urgent=("b",))
    assert [q.job.job_id for q in state.queue(pending, 0.0)] == ["b", "a", "c"]


def test_nothing_starts_on_a_completing_node_until_its_epilog_ends() -> None:
    """A job ended on n1 at 0 and its epilog reports at 0.8: n1's 4 GPUs are free to the
    daemon but not to Slurm. P (pinned to n1) waits and masks n1; U (a100:4, unpinned) is
    planned at 0.8, so V (v100:4, 60 s, on the free n2) still starts; after 0.8 P starts."""
    free, shapes = completing_nodes([4, 4, 0], {0: 0.8, 2: 0.5}, 0.0)
    assert free == [0, 4, 0] and shapes == [RunningShape(0.8, (0,), (4,))]
    running = [RunningShape(30.0, (2,), (4,)), *shapes]
    pinned = Placement(("n1",), (4,))
    queue = [QueuedJob(_job("P", 4, 1, None, 50.0), 0.0, pin=pinned),
             QueuedJob(_job("U", 4, 1, "a100", 50.0), -1.0),
             QueuedJob(_job("V", 4, 1, "v100", 60.0), -2.0)]
    started = schedule_pass(0.0, iter(queue), free, lambda: running, CLUSTER)
    assert [job.job_id for job, _ in started] == ["V"]
    free, shapes = completing_nodes([4, 0, 0], {0: 0.8}, 0.8)
    assert free == [4, 0, 0] and not shapes
    started = schedule_pass(0.8, iter(queue[:2]), free, lambda: running[:1], CLUSTER)
    assert [job.job_id for job, _ in started] == ["P"]


def test_a_job_s_end_keeps_its_nodes_from_slurm_for_the_end_lag() -> None:
    """SimConfig.slurm_end_lag_s through SlurmJobState: none by default; with 0.9 s, the
    nodes a job left are Slurm's again 0.9 s after its latest end there, planned from then."""
    assert SlurmJobState().job_ended((0,), 5.0) is None
    state = SlurmJobState(end_lag_s=0.9)
    assert state.job_ended((0, 1), 5.0) == pytest.approx(5.9)
    assert state.job_ended((1,), 5.5) == pytest.approx(6.4)
    free, shapes = state.usable([4, 4, 0], 6.0)
    assert free == [4, 0, 0] and [(round(s.limit_end, 6), s.nodes, s.gpus) for s in shapes] == [
        (6.4, (1,), (4,))]
    assert state.usable([4, 4, 0], 6.4) == ([4, 4, 0], []) and not state.completing
