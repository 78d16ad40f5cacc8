"""The priorities the actuator leaves in Slurm, as the simulator's emulation holds them
(slurm_rl/slurm/priority.py HeldPriorities, PriorityBudget; slurm_rl/simulator/
slurm_emulation.py SlurmJobState): only promoted jobs get a value, above every value held
before; the hourly limit freezes a job where its value puts it; without limits the holder
and the emulation's own model give the same queue."""

from __future__ import annotations

import random

from slurm_rl.core import Job, Placement
from slurm_rl.simulator.slurm_emulation import SlurmJobState
from slurm_rl.slurm.priority import HOUR_S, HeldPriorities, PriorityBudget, PriorityLimits


def _jobs(*ids: str) -> dict[str, Job]:
    return {job_id: Job(job_id, float(i), 1, oracle_duration=60.0) for i, job_id in
            enumerate(ids)}


def _order(state: SlurmJobState, pending: dict[str, Job]) -> list[str]:
    return [queued.job.job_id for queued in state.queue(pending, 0.0)]


def test_promoted_jobs_go_above_every_value_held_before_and_the_others_keep_theirs() -> None:
    held = HeldPriorities(PriorityLimits())
    alive = ["a", "b", "c"]
    held.apply(["a"], 0.0, alive)
    first = dict(held.values)
    held.apply(["b"], 5.0, alive)
    assert held.values["a"] == first["a"]  # not promoted now: it keeps its value
    assert held.values["b"] > held.values["a"]
    assert "c" not in held.values  # never promoted: Slurm's own priority


def test_the_hourly_limit_keeps_a_job_where_its_value_puts_it() -> None:
    held = HeldPriorities(PriorityLimits(updates_per_job_hour=1))
    alive = ["a", "b"]
    held.apply(["a"], 0.0, alive, urgent={"a"})
    held.apply(["b"], 1.0, alive, urgent={"b"})
    held.apply(["a"], 2.0, alive, urgent={"a"})  # a's one change this hour is spent
    assert held.values["b"] > held.values["a"]
    held.apply(["a"], 2.0 + HOUR_S, alive, urgent={"a"})  # an hour later it may move again
    assert held.values["a"] > held.values["b"]


def test_the_last_change_of_the_hour_is_kept_for_urgent_jobs() -> None:
    budget = PriorityBudget(limit=2)
    budget.note("a", 0.0)
    assert not budget.may_change(1.0, ["a"])("a")  # a reordering: one a job, spent
    assert budget.may_change(1.0, ["a"], urgent={"a"})("a")
    budget.note("a", 1.0)
    assert not budget.may_change(2.0, ["a"], urgent={"a"})("a")
    assert budget.may_change(2.0 + HOUR_S, ["a"])("a")  # both changes older than an hour


def test_jobs_without_a_value_of_ours_follow_in_submit_order() -> None:
    pending = _jobs("a", "b", "c", "d")
    state = SlurmJobState(held=HeldPriorities(PriorityLimits()))
    state.set_levers(("d", "c", "b", "a"), {"c": Placement(("n1",), (1,))}, pending=pending,
                     now=0.0, urgent=("b",))
    assert _order(state, pending) == ["c", "b", "a", "d"]


def test_without_limits_the_holder_and_the_emulations_own_model_agree() -> None:
    """Random decisions (rankings, pins, guard moves) over a changing queue: the queue order
    of the emulation without a holder is the order of the values the actuator's plan would
    leave when no limit binds."""
    rng = random.Random(7)
    ids = [f"j{i}" for i in range(30)]
    plain, held = SlurmJobState(), SlurmJobState(held=HeldPriorities(PriorityLimits()))
    pending = _jobs(*ids[:12])
    for step in range(60):
        if step % 3 == 0 and len(pending) < len(ids):  # an arrival
            new = ids[len(pending)]
            pending[new] = Job(new, float(len(pending)), 1, oracle_duration=60.0)
        if step % 5 == 4:  # a start
            del pending[rng.choice(sorted(pending))]
        ranking = tuple(rng.sample(sorted(pending), len(pending)))
        pins = {job_id: Placement(("n1",), (1,)) for job_id in ranking[:rng.randint(0, 2)]}
        forward = tuple(rng.sample(ranking, rng.randint(0, 2)))
        for state in (plain, held):
            state.set_levers(ranking, pins, pending=pending, now=float(step), urgent=forward,
                             placed=pins)
        assert _order(plain, pending) == _order(held, pending), step


def test_promoted_jobs_go_above_a_higher_value_even_when_theirs_already_decrease() -> None:
    """a, b and c promoted again in the order their values already have, below d's value:
    keeping their values and planning d lower would change nothing Slurm holds (d's value
    is not the decision's to send), so they rise above d."""
    held = HeldPriorities(PriorityLimits())
    alive = ["a", "b", "c", "d"]
    held.apply(["a", "b", "c"], 0.0, alive)
    held.apply(["d"], 1.0, alive)
    held.apply(["a", "b", "c"], 2.0, alive)
    assert sorted(held.values, key=lambda job: -held.values[job]) == ["a", "b", "c", "d"]


def test_without_limits_a_steady_ranking_keeps_the_holder_and_the_model_in_step() -> None:
    """As above, with a ranking that keeps its order from decision to decision (a learned
    agent's scores move slowly): the promoted jobs' values then already decrease along it,
    which is where the walk once kept them below an older promoted job."""
    rng = random.Random(11)
    ids = [f"j{i:02d}" for i in range(40)]
    plain, held = SlurmJobState(), SlurmJobState(held=HeldPriorities(PriorityLimits()))
    pending = _jobs(*ids[:10])
    for step in range(80):
        if step % 2 == 0 and len(pending) < len(ids):
            new = ids[len(pending)]
            pending[new] = Job(new, float(len(pending)), 1, oracle_duration=60.0)
        if step % 4 == 3:
            del pending[rng.choice(sorted(pending))]
        ranking = tuple(sorted(pending, reverse=rng.random() < 0.2))
        placed = rng.sample(ranking, rng.randint(0, min(4, len(ranking))))
        for state in (plain, held):
            state.set_levers(ranking, {}, pending=pending, now=float(step), placed=placed)
        assert _order(plain, pending) == _order(held, pending), step
