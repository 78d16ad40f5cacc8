"""Priority churn bounds: tolerance, hourly rate and cap per cycle (slurm/priority.py), and
the actuator holding a churning policy to at most N priority changes per job and hour."""

from __future__ import annotations

import json
import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_rl.core import Decision, Placement
from slurm_rl.slurm.actuator import ActuationReport, ActuatorConfig, Mode, SlurmActuator
from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.priority import (
    CAP,
    PRIORITY_CEILING,
    RATE,
    TOLERANCE,
    PriorityLimits,
    above_the_held,
    assign_priorities,
    plan_priorities,
)
from slurm_rl.slurm.proc import CommandResult
from slurm_rl.slurm.source import SlurmSource
from tests.slurm.fakes import FakeRunner, fixture_text, recorded_cluster

FLOOR = 1000


def _changes(plan_wanted: dict[str, int], current: dict[str, int | None]) -> set[str]:
    return {job for job, value in plan_wanted.items() if current.get(job) != value}


def test_without_limits_the_plan_is_the_plain_assignment() -> None:
    current: dict[str, int | None] = {"a": 1002, "b": 1001, "c": 1000}
    ranking = ["c", "b", "a"]
    plan = plan_priorities(ranking, current, FLOOR, PriorityLimits())
    assert plan.wanted == assign_priorities(ranking, current, FLOOR)
    assert plan.withheld == {}


def test_a_job_one_place_from_its_rank_keeps_its_priority() -> None:
    current: dict[str, int | None] = {"a": 1003, "b": 1002, "c": 1001, "d": 1000}
    swapped = ["b", "a", "c", "d"]  # a and b trade places
    strict = plan_priorities(swapped, current, FLOOR, PriorityLimits())
    assert _changes(strict.wanted, current) == {"b"}
    tolerant = plan_priorities(swapped, current, FLOOR, PriorityLimits(tolerance_ranks=1))
    assert _changes(tolerant.wanted, current) == set()
    assert tolerant.withheld == {"b": TOLERANCE}


def test_a_job_placed_now_moves_whatever_the_tolerance() -> None:
    """b is started now: left one place below a, which cannot start, Slurm's backfill would
    keep it waiting for a's reservation (docs/daemon.md, "Priorities")."""
    current: dict[str, int | None] = {"a": 1003, "b": 1002, "c": 1001}
    plan = plan_priorities(["b", "a", "c"], current, FLOOR, PriorityLimits(tolerance_ranks=2),
                           exempt={"b"})
    assert _changes(plan.wanted, current) == {"b"} and plan.wanted["b"] > 1003


def test_a_job_far_from_its_rank_moves_despite_the_tolerance() -> None:
    current: dict[str, int | None] = {j: 1010 - i for i, j in enumerate("abcdefgh")}
    ranking = ["h", *"abcdefg"]  # the last job goes first: seven places
    plan = plan_priorities(ranking, current, FLOOR, PriorityLimits(tolerance_ranks=2))
    assert plan.wanted["h"] > max(v for v in current.values() if v is not None)


def test_a_new_job_always_gets_its_priority_under_the_tolerance() -> None:
    current: dict[str, int | None] = {"a": 1001, "b": 1000, "new": 5}
    plan = plan_priorities(["a", "new", "b"], current, FLOOR, PriorityLimits(tolerance_ranks=5))
    assert "new" in _changes(plan.wanted, current)


def test_a_job_over_its_hourly_rate_keeps_its_priority() -> None:
    current: dict[str, int | None] = {"a": 1001, "b": 1000}
    plan = plan_priorities(["b", "a"], current, FLOOR, PriorityLimits(updates_per_job_hour=2),
                           may_change=lambda job: job != "b")
    assert plan.withheld == {"b": RATE}
    assert "b" not in plan.wanted


def test_the_cap_keeps_the_highest_ranked_changes() -> None:
    ranking = [f"j{i}" for i in range(10)]
    plan = plan_priorities(ranking, {}, FLOOR, PriorityLimits(per_cycle=3))
    assert _changes(plan.wanted, {}) == {"j0", "j1", "j2"}
    assert Counter(plan.withheld.values()) == {CAP: 7}
    values = [plan.wanted[j] for j in ("j0", "j1", "j2")]
    assert values == sorted(values, reverse=True) and len(set(values)) == 3


job_ids = st.lists(st.sampled_from([f"j{i}" for i in range(30)]), unique=True, max_size=30)


@settings(max_examples=200, deadline=None)
@given(ranking=job_ids, seed=st.integers(0, 2**16), tolerance=st.integers(0, 4),
       cap=st.one_of(st.none(), st.integers(1, 10)), frozen=st.sets(st.integers(0, 29)))
def test_the_limits_hold_and_the_changed_jobs_stay_in_order(
    ranking: list[str], seed: int, tolerance: int, cap: int | None, frozen: set[int]
) -> None:
    rng = random.Random(seed)
    current: dict[str, int | None] = {j: rng.choice([None, 1, rng.randint(FLOOR, FLOOR + 60)])
                                      for j in ranking}
    rated = {f"j{i}" for i in frozen}
    limits = PriorityLimits(tolerance, 2, cap)
    plan = plan_priorities(ranking, current, FLOOR, limits, lambda job: job not in rated)
    changed = [j for j in ranking if j in _changes(plan.wanted, current)]
    assert not set(changed) & rated, "a job over its rate changed"
    assert cap is None or len(changed) <= cap
    assert set(plan.wanted) | set(plan.withheld) == set(ranking)
    moved = [plan.wanted[j] for j in ranking if j in plan.wanted]
    assert moved == sorted(moved, reverse=True) and len(set(moved)) == len(moved)
    assert all(v >= FLOOR for v in moved)


@settings(max_examples=200, deadline=None)
@given(promoted=st.integers(1, 12), context=st.integers(1, 12), seed=st.integers(0, 2**16),
       tolerance=st.integers(0, 3))
def test_the_jobs_planned_around_keep_their_values_and_the_others_rise_above(
    promoted: int, context: int, seed: int, tolerance: int
) -> None:
    """The actuator's order: the promoted jobs, then the others holding a value of ours by
    value (``above_the_held``), whose values are never sent. Whatever values the promoted
    jobs hold, every one the plan changes ends above every job planned around."""
    rng = random.Random(seed)
    top = [f"p{i}" for i in range(promoted)]
    values = rng.sample(range(FLOOR, FLOOR + 400), context)
    around = {f"c{i}": v for i, v in enumerate(sorted(values, reverse=True))}
    current: dict[str, int | None] = {
        **{j: rng.choice([None, rng.randint(FLOOR, FLOOR + 400)]) for j in top}, **around}
    plan = plan_priorities([*top, *around], current, FLOOR, PriorityLimits(tolerance),
                           fixed=frozenset(around))
    assert {j: plan.wanted[j] for j in around} == around
    for job in top:
        assert job in plan.withheld or plan.wanted[job] > max(around.values()), job


def test_a_value_at_the_ceiling_is_not_passed_but_renumbers_nothing() -> None:
    """C holds 2**31 - 1 (an admin's "top"): no value of ours fits above it, and its own is
    not sent, so the promoted jobs go just below it and above D, instead of the whole
    ranking being renumbered from the floor (which left them below D, whose value is not
    sent either)."""
    current: dict[str, int | None] = {"C": PRIORITY_CEILING - 1, "D": 5000, "P1": None,
                                      "P2": 4000}
    order = above_the_held(["P1", "P2"], {"C": PRIORITY_CEILING - 1, "D": 5000})
    plan = plan_priorities(order, current, FLOOR, PriorityLimits(),
                           fixed=frozenset({"C", "D"}))
    assert (plan.wanted["C"], plan.wanted["D"]) == (PRIORITY_CEILING - 1, 5000)
    assert PRIORITY_CEILING - 1 > plan.wanted["P1"] > plan.wanted["P2"] > 5000


def _priorities_sent(report: ActuationReport) -> list[tuple[str, tuple[str, ...]]]:
    return [(outcome.job_id, outcome.argv) for outcome in report.outcomes
            if outcome.sent and any(arg.startswith("Priority=") for arg in outcome.argv)]


def test_a_policy_reversing_its_ranking_every_cycle_is_held_to_the_hourly_rate() -> None:
    """The churn of issue 19 (10-47 updates a cycle on a static queue): a ranking that flips
    every 5-s cycle for an hour, its top two jobs placed each time, sends each job at most
    two priority changes."""
    runner, doc, clock, source, actuator = _advising_at_two_an_hour()
    sent: Counter[str] = Counter()
    for cycle in range(720):
        snapshot, state = source.observe()
        pending = [job.job_id for job in snapshot.pending]
        ranking = tuple(pending if cycle % 2 else reversed(pending))
        placed = {job_id: Placement(("v100-01",), (1,)) for job_id in ranking[:2]}
        decided = Decision("flip", ranking, placed)
        for job_id, argv in _priorities_sent(actuator.apply(decided, state)):
            sent[job_id] += 1
            _show_priority(doc, job_id, argv)
        runner.answer(("squeue", "--json"), json.dumps(doc))
        clock[0] += 5.0
    assert sent and max(sent.values()) <= 2


def test_a_ranking_alone_sends_no_priority_however_it_flips() -> None:
    """Only the jobs a decision starts, pins or brings forward get a priority; a policy that
    reorders its queue every cycle and places nothing sends none, and a job the guard
    brings forward gets one."""
    runner, doc, clock, source, actuator = _advising_at_two_an_hour()
    sent: Counter[str] = Counter()
    last = ""
    for cycle in range(6):
        snapshot, state = source.observe()
        pending = [job.job_id for job in snapshot.pending]
        last = pending[-1]
        ranking = tuple(pending if cycle % 2 else reversed(pending))
        forward = (last,) if cycle == 5 else ()
        if forward:
            ranking = (last, *[j for j in pending if j != last])
        report = actuator.apply(Decision("flip", ranking, forward=forward), state)
        for job_id, argv in _priorities_sent(report):
            sent[job_id] += 1
            _show_priority(doc, job_id, argv)
        runner.answer(("squeue", "--json"), json.dumps(doc))
        clock[0] += 5.0
    assert len(pending) == 2 and sent == Counter({last: 1})


def _advising_at_two_an_hour() -> tuple[FakeRunner, dict[str, object], list[float],
                                         SlurmSource, SlurmActuator]:
    """The recorded 22.05 cluster, its squeue document (to show what Slurm holds after an
    update), a clock to move and an advising actuator held to two changes a job-hour."""
    runner = recorded_cluster("22.05")
    runner.default = CommandResult((), 0, "", "")
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    clock = [1795970565.0]
    source = SlurmSource(CliSlurmClient(runner=runner), clock=lambda: clock[0])
    limits = PriorityLimits(tolerance_ranks=0, updates_per_job_hour=2, per_cycle=200)
    actuator = SlurmActuator(CliSlurmClient(runner=runner),
                             ActuatorConfig(mode=Mode.ADVISE, priority_limits=limits),
                             pins=source.pins, clock=lambda: clock[0])
    return runner, doc, clock, source, actuator


def _show_priority(doc: dict[str, object], job_id: str, argv: tuple[str, ...]) -> None:
    """What Slurm shows after the update: the job holds the priority sent."""
    value = next(int(a.split("=", 1)[1]) for a in argv if a.startswith("Priority="))
    jobs = doc["jobs"]
    assert isinstance(jobs, list)
    for job in jobs:
        if str(job["job_id"]) == job_id:
            job["priority"] = value


@settings(max_examples=200, deadline=None)
@given(size=st.integers(2, 60), data=st.data())
def test_one_job_moved_anywhere_is_the_only_change(size: int, data: st.DataObject) -> None:
    """On a numbering the daemon made, a policy moving one job (or a new job arriving
    anywhere) costs one update, not one per job it passes."""
    ranking = [f"j{i}" for i in range(size)]
    current: dict[str, int | None] = dict(assign_priorities(ranking, {}, FLOOR))
    moved = data.draw(st.sampled_from(ranking))
    rest = [job for job in ranking if job != moved]
    rest.insert(data.draw(st.integers(0, len(rest))), moved)
    got = assign_priorities(rest, current, FLOOR)
    # one job changes: the moved one, or (moved past one neighbour) that neighbour instead
    assert len({job for job in rest if got[job] != current[job]}) <= 1
    values = [got[job] for job in rest]
    assert values == sorted(values, reverse=True) and len(set(values)) == size
    arrival = assign_priorities([*rest[:size // 2], "new", *rest[size // 2:]], got, FLOOR)
    assert {job for job in arrival if arrival[job] != got.get(job)} == {"new"}


def test_a_job_pinned_now_goes_above_the_unplaced_jobs_ranked_before_it() -> None:
    """Ranked second but pinned to free GPUs, job 10 gets the higher priority: below job 3
    Slurm's backfill would keep it waiting for job 3's reservation."""
    runner = recorded_cluster("22.05")
    runner.default = CommandResult((), 0, "", "")
    source = SlurmSource(CliSlurmClient(runner=runner), clock=lambda: 1795970565.0)
    actuator = SlurmActuator(CliSlurmClient(runner=runner), ActuatorConfig(mode=Mode.ENFORCE),
                             pins=source.pins, clock=lambda: 1795970565.0)
    snapshot, state = source.observe()
    pending = [job.job_id for job in snapshot.pending]
    assert pending == ["3", "10"]
    node = snapshot.cluster.nodes[0].name
    report = actuator.apply(Decision("p", ("3", "10"), {"10": Placement((node,), (1,))}), state)
    sent = {o.job_id: int(a.split("=", 1)[1]) for o in report.outcomes for a in o.argv
            if a.startswith("Priority=")}
    jobs = json.loads(fixture_text("22.05", "squeue.json"))["jobs"]
    held = {str(job["job_id"]): job["priority"] for job in jobs}
    assert sent["10"] > sent.get("3", held["3"])


def test_a_placed_job_one_place_below_an_older_value_is_not_tolerated_there() -> None:
    """Job 10 is placed now and holds a value of ours one place below job 3's: under a
    tolerance of two places it still gets a priority above job 3's."""
    held = {"3": FLOOR + 200, "10": FLOOR + 100}
    sent, _ = _sent_for(held, ("10", "3"), ("10",), PriorityLimits(tolerance_ranks=2))
    assert sent["10"] > held["3"] and "3" not in sent
    waiting, _ = _sent_for(held, ("10", "3"), (), PriorityLimits(tolerance_ranks=2))
    assert waiting == {}  # ranked first but not placed: within the tolerance, not moved


def test_promoted_jobs_go_above_a_job_still_holding_a_higher_priority_of_ours() -> None:
    """Jobs 10 and 11 are placed now and already hold values of ours in their ranked order,
    below job 3's, an earlier decision's. Only the promoted jobs' values are sent, so they
    must rise above job 3's: the walk's run of unchanged values may not keep theirs and plan
    job 3 lower instead (it did once, and job 3 stayed first in Slurm)."""
    held = {"3": FLOOR + 300, "10": FLOOR + 200, "11": FLOOR + 100}
    sent, pending = _sent_for(held, ("10", "11", "3"), ("10", "11"), PriorityLimits())
    assert sorted(pending) == ["10", "11", "3"]
    assert "3" not in sent  # not promoted: it keeps its value
    assert sent["10"] > sent["11"] > held["3"]


def _sent_for(held: dict[str, int], ranking: tuple[str, ...], placed: tuple[str, ...],
              limits: PriorityLimits) -> tuple[dict[str, int], list[str]]:
    """The priorities an enforcing actuator sends for a decision on the recorded 22.05
    cluster with a third pending job (11, a copy of 10), the jobs holding ``held``; and
    the pending jobs it saw."""
    runner = recorded_cluster("22.05")
    runner.default = CommandResult((), 0, "", "")
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    jobs = doc["jobs"]
    eleven = json.loads(json.dumps(next(j for j in jobs if str(j["job_id"]) == "10")))
    jobs.append({**eleven, "job_id": 11, "name": "eleven"})
    for job in jobs:
        if str(job["job_id"]) in held:
            job["priority"] = held[str(job["job_id"])]
    runner.answer(("squeue", "--json"), json.dumps(doc))
    source = SlurmSource(CliSlurmClient(runner=runner), clock=lambda: 1795970565.0)
    config = ActuatorConfig(mode=Mode.ENFORCE, priority_limits=limits)
    actuator = SlurmActuator(CliSlurmClient(runner=runner), config, pins=source.pins,
                             clock=lambda: 1795970565.0)
    snapshot, state = source.observe()
    node = snapshot.cluster.nodes[0].name
    decision = Decision("p", ranking, {job_id: Placement((node,), (1,)) for job_id in placed})
    report = actuator.apply(decision, state)
    sent = {o.job_id: int(a.split("=", 1)[1]) for o in report.outcomes for a in o.argv
            if a.startswith("Priority=")}
    return sent, [job.job_id for job in snapshot.pending]
