"""The actuator's plan and its record of Slurm's answers, on the recorded 22.05 state.

Only the subprocess boundary is fake: squeue/sinfo answer with the golden files and
``scontrol update`` with recorded or chosen answers.
"""

from __future__ import annotations

import dataclasses
import json
import time
from types import MappingProxyType

import pytest

from slurm_rl.core import Decision, Placement
from slurm_rl.slurm.actuator import (
    ActuatorConfig,
    Mode,
    SlurmActuator,
    Update,
    classify_error,
    outcomes_for,
    slurm_time,
)
from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.errors import SlurmTimeoutError
from slurm_rl.slurm.priority import BOTTOM_ROOM, STEP, assign_priorities
from slurm_rl.slurm.proc import CommandResult
from slurm_rl.slurm.source import SlurmSource, SlurmState
from tests.slurm.fakes import FakeRunner, fixture_text, recorded_answer, recorded_cluster

ROLES: dict[str, str] = json.loads(fixture_text("22.05", "jobs.json"))
SUBMIT = 1795970505.0  # every job of the recording was submitted in this second
DEFERRED_UNTIL = SUBMIT + 3600
OK = CommandResult((), 0, "", "")


def _setup(
    mode: Mode, now: float = SUBMIT + 60, **config: float
) -> tuple[SlurmActuator, FakeRunner, SlurmState]:
    runner = recorded_cluster("22.05")
    client = CliSlurmClient(runner=runner)
    source = SlurmSource(client, clock=lambda: now)
    state = source.state()
    runner.default = OK  # from here on only scontrol update calls are made
    runner.calls.clear()
    settings = ActuatorConfig(mode=mode, **config)  # type: ignore[arg-type]
    return SlurmActuator(client, settings, pins=source.pins, clock=lambda: now), runner, state


def _hold_all(state: SlurmState) -> Decision:
    """A decision that releases nothing and holds every pending job back."""
    pending = tuple(job_id for job_id, job in state.managed.items() if job.is_pending)
    return Decision("p", (), holds=pending)


def _updates(runner: FakeRunner) -> list[tuple[str, ...]]:
    return [argv for argv in runner.argvs if argv[:2] == ("scontrol", "update")]


# -- priorities ---------------------------------------------------------------------------


def test_priorities_follow_the_ranking() -> None:
    got = assign_priorities(["a", "b", "c"], {}, floor=1000)
    base = 1000 + BOTTOM_ROOM  # room below for later arrivals
    assert got == {"a": base + 2 * STEP, "b": base + STEP, "c": base}


def test_priorities_keep_values_that_are_already_in_order() -> None:
    current: dict[str, int | None] = {"a": 1500, "b": 1200, "c": 1}
    got = assign_priorities(["a", "b", "c"], current, floor=1000)
    assert (got["a"], got["b"]) == (1500, 1200) and 1000 <= got["c"] < 1200
    # A new job on top costs one update; the others keep theirs.
    current = {"a": 1500, "b": 1200, "c": 1000}
    got = assign_priorities(["new", "a", "b", "c"], current, floor=1000)
    assert got == {**current, "new": 1500 + STEP}


def test_a_fifo_arrival_at_the_bottom_moves_nobody_else() -> None:
    """The old walk gave the bottom job the floor and moved every job above it up by one:
    one new FIFO job cost an update per pending job."""
    current: dict[str, int | None] = assign_priorities([f"j{i}" for i in range(50)], {}, 1000)
    for n in range(50, 60):
        ranking = [f"j{i}" for i in range(n + 1)]
        got = assign_priorities(ranking, current, floor=1000)
        assert {job for job in ranking if got[job] != current.get(job)} == {f"j{n}"}
        current = dict(got)


def test_a_job_moving_between_two_others_moves_alone() -> None:
    current: dict[str, int | None] = {"a": 1300, "b": 1200, "c": 1100, "d": 1000}
    got = assign_priorities(["a", "d", "b", "c"], current, floor=1000)
    assert {job for job in got if got[job] != current[job]} == {"d"}
    assert 1200 < got["d"] < 1300


def test_priorities_fix_an_inversion_and_renumber_near_the_ceiling() -> None:
    got = assign_priorities(["low", "high"], {"low": 1000, "high": 1500}, floor=1000)
    assert got["low"] > got["high"] >= 1000
    near = assign_priorities(["a", "b"], {"b": 99}, floor=10, ceiling=100)
    assert 100 > near["a"] > near["b"] >= 10


# -- advise -------------------------------------------------------------------------------


def test_advise_orders_and_releases_only() -> None:
    actuator, runner, _ = _setup(Mode.ADVISE)
    top, below, held = ROLES["pending_unlimited"], ROLES["pending_prio"], ROLES["pending_pinned"]
    placements = {top: Placement(("a100-03", "v100-02"), (2, 2))}
    report = actuator.apply(Decision("p", (top, below), placements))
    # pending_prio already has 5000 (>= floor), so only the new top job gets a priority.
    assert _updates(runner) == [
        ("scontrol", "update", f"JobId={top}", f"Priority={5000 + STEP}", "StartTime=now"),
        ("scontrol", "update", f"JobId={below}", "StartTime=now"),
    ]
    assert [o.kind for o in report.outcomes] == ["release", "release"]
    assert report.outcome(held) is None  # advise never touches held jobs
    assert all(o.sent and o.ok and o.returncode == 0 for o in report.outcomes)


def test_jobs_with_the_same_change_share_one_call() -> None:
    actuator, runner, _ = _setup(Mode.ADVISE, priority_floor=1)
    first, second = ROLES["pending_prio"], ROLES["pending_unlimited"]
    actuator.apply(Decision("p", (first, second)))
    assert _updates(runner) == [
        ("scontrol", "update", f"JobId={first},{second}", "StartTime=now"),
    ]


def test_pins_go_one_job_a_call() -> None:
    """Slurm 22.05 refuses a job list with ReqNodeList or NumNodes (issue 19)."""
    actuator, runner, _ = _setup(Mode.ENFORCE, priority_floor=1)
    first, second = ROLES["pending_prio"], ROLES["pending_unlimited"]
    placements = {j: Placement(("a100-03",), (1,)) for j in (first, second)}
    report = actuator.apply(Decision("p", (first, second), placements))
    updates = _updates(runner)
    assert [argv[2] for argv in updates] == [f"JobId={first}", f"JobId={second}"]
    assert all("ReqNodeList=a100-03" in argv for argv in updates)
    assert all(o.ok and o.kind == "place" for o in report.outcomes)


def test_a_users_own_begin_time_is_never_released() -> None:
    actuator, runner, _ = _setup(Mode.ENFORCE, priority_floor=1)
    report = actuator.apply(Decision("p", (ROLES["user_begin"],)))
    assert _updates(runner) == []
    assert report.outcomes[0].kind == "unchanged"


def test_nothing_is_sent_again_once_slurm_shows_it() -> None:
    now = SUBMIT + 60
    actuator, runner, state = _setup(Mode.ADVISE, now=now)
    top, below = ROLES["pending_unlimited"], ROLES["pending_prio"]
    decision = Decision("p", (top, below), {top: Placement(("v100-03",), (2,))})
    actuator.apply(decision)
    assert len(_updates(runner)) == 2  # the placed job's priority and release, the other's
    runner.calls.clear()
    managed = dict(state.managed)
    managed[top] = dataclasses.replace(managed[top], priority=5001, eligible_time=now)
    managed[below] = dataclasses.replace(managed[below], eligible_time=now)
    after = dataclasses.replace(state, managed=MappingProxyType(managed))
    report = actuator.apply(decision, after)
    assert _updates(runner) == []
    assert {o.kind for o in report.outcomes} == {"unchanged"}


def test_only_the_jobs_a_decision_starts_or_brings_forward_get_a_priority() -> None:
    """The others keep Slurm's own priority (the site's multifactor, ties by submit time):
    a full order sent at release would be frozen by the hourly limit in whatever place each
    job got, under load (docs/fairness.md). The promoted jobs go above every job holding a
    priority of ours from before, the pinned one first."""
    actuator, runner, state = _setup(Mode.ENFORCE, now=SUBMIT + 60)
    placed, forward, other = (ROLES[k] for k in ("pending_unlimited", "pending_pinned",
                                                  "pending_prio"))
    assert state.managed[other].priority == 5000  # ours from before (floor 1000)
    decision = Decision("p", (other, forward, placed), {placed: Placement(("v100-03",), (2,))},
                        forward=(forward,))
    actuator.apply(decision, state)
    sent = {call[2]: call[3:] for call in _updates(runner)}

    def priority(job_id: str) -> int | None:
        fields = [f for f in sent.get(f"JobId={job_id}", ()) if f.startswith("Priority=")]
        return int(fields[0].removeprefix("Priority=")) if fields else None

    assert priority(other) is None
    assert (priority(placed) or 0) > (priority(forward) or 0) > 5000


def test_ranked_jobs_that_are_not_pending_are_reported_not_sent() -> None:
    actuator, runner, _ = _setup(Mode.ENFORCE)
    running = ROLES["running_multinode"]
    report = actuator.apply(Decision("p", (running, "424242")))
    assert _updates(runner) == []
    assert [o.kind for o in report.outcomes[:2]] == ["not_pending", "not_pending"]
    assert [o.job_id for o in report.outcomes[:2]] == [running, "424242"]


# -- enforce ------------------------------------------------------------------------------


def test_enforce_pins_exactly_the_chosen_nodes() -> None:
    actuator, runner, _ = _setup(Mode.ENFORCE, priority_floor=1)
    job = ROLES["pending_unlimited"]
    placement = Placement(("v100-03", "a100-03"), (2, 2))
    report = actuator.apply(Decision("p", (job,), {job: placement}))
    assert _updates(runner)[0] == (
        "scontrol",
        "update",
        f"JobId={job}",
        "ReqNodeList=a100-03,v100-03",
        "NumNodes=2-2",
        "Priority=5100",  # above every job without a pin: it is to start now
        "StartTime=now",
    )
    assert report.outcomes[0].kind == "place"


def test_enforce_skips_a_placement_slurm_already_has() -> None:
    actuator, runner, _ = _setup(Mode.ENFORCE, priority_floor=1)
    job = ROLES["pending_pinned"]  # ReqNodeList=v100-03 in the recording
    actuator.apply(Decision("p", (job,), {job: Placement(("v100-03",), (2,))}))
    assert _updates(runner)[0] == ("scontrol", "update", f"JobId={job}", "StartTime=now")


def test_enforce_extends_held_deferrals_up_to_the_cap() -> None:
    now = DEFERRED_UNTIL - 5  # the plugin's window is about to end
    actuator, runner, state = _setup(Mode.ENFORCE, now=now, defer_cap_s=7200, defer_extension_s=30)
    report = actuator.apply(_hold_all(state))
    held = sorted(
        (ROLES[k] for k in ("pending_prio", "pending_pinned", "pending_unlimited")), key=int
    )
    assert _updates(runner) == [
        ("scontrol", "update", f"JobId={','.join(held)}", f"StartTime={slurm_time(now + 30)}")
    ]
    assert {o.job_id: o.kind for o in report.outcomes} == dict.fromkeys(held, "defer")
    # Never past submit + cap:
    late = SUBMIT + 7200 - 10
    actuator, runner, state = _setup(Mode.ENFORCE, now=late, defer_cap_s=7200, defer_extension_s=30)
    actuator.apply(_hold_all(state))
    assert _updates(runner)[0][-1] == f"StartTime={slurm_time(SUBMIT + 7200)}"


def test_after_the_cap_a_held_job_is_left_to_slurm() -> None:
    actuator, runner, state = _setup(Mode.ENFORCE, now=SUBMIT + 700, defer_cap_s=600)
    report = actuator.apply(_hold_all(state))
    assert _updates(runner) == []
    assert {o.kind for o in report.outcomes} == {"left_to_slurm"}


def test_a_deferral_with_time_left_is_not_touched() -> None:
    actuator, runner, state = _setup(Mode.ENFORCE, now=SUBMIT + 60, defer_cap_s=7200)
    report = actuator.apply(_hold_all(state))
    assert _updates(runner) == []
    assert {o.kind for o in report.outcomes} == {"unchanged"}


def test_slurm_time_is_local_and_rounded_up() -> None:
    assert slurm_time(100.2) == time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(101))


# -- shadow -------------------------------------------------------------------------------


def test_shadow_plans_like_enforce_and_sends_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="slurm_rl.slurm.actuator")
    actuator, runner, _ = _setup(Mode.SHADOW, priority_floor=1)
    job = ROLES["pending_unlimited"]
    report = actuator.apply(Decision("p", (job,), {job: Placement(("a100-03",), (4,))}))
    assert _updates(runner) == [] and report.commands == ()
    outcome = report.outcomes[0]
    assert (outcome.kind, outcome.sent, outcome.returncode) == ("place", False, None)
    assert "ReqNodeList=a100-03" in outcome.argv
    assert "shadow: would run scontrol update" in caplog.text


# -- Slurm's answers ----------------------------------------------------------------------


def test_batch_errors_are_attributed_to_the_job_named() -> None:
    answer = recorded_answer("22.05", "update_batch_partial.json")
    good = ROLES["pending_prio"]
    update = Update("release", (good, "99999"), (("Comment", "x"),))
    by_job = {o.job_id: o for o in outcomes_for(update, answer)}
    assert by_job[good].ok and by_job[good].returncode == 0
    assert by_job["99999"].error == "Invalid job id specified"
    assert (by_job["99999"].error_kind, by_job["99999"].returncode) == ("vanished", 1)


@pytest.mark.parametrize(
    ("name", "kind"),
    [("update_vanished.json", "vanished"), ("update_permission.json", "permission")],
)
def test_recorded_refusals_are_classified(name: str, kind: str) -> None:
    answer = recorded_answer("22.05", name)
    job_id = answer.argv[2].split("=", 1)[1]
    (outcome,) = outcomes_for(Update("prioritize", (job_id,), (("Priority", "1"),)), answer)
    assert (outcome.ok, outcome.error_kind, outcome.returncode) == (False, kind, 1)
    assert outcome.argv == ("scontrol", "update", f"JobId={job_id}", "Priority=1")


def test_failures_are_recorded_not_raised() -> None:
    actuator, runner, _ = _setup(Mode.ADVISE, priority_floor=1)
    job = ROLES["pending_prio"]
    argv = ("scontrol", "update", f"JobId={job}", "StartTime=now")
    runner.fail(argv, SlurmTimeoutError(argv, 15.0))
    report = actuator.apply(Decision("p", (job,)))
    outcome = report.outcomes[0]
    assert (outcome.ok, outcome.error_kind, outcome.returncode) == (False, "timeout", 124)
    runner.answer(argv, rc=1, stderr="scontrol: error: Unable to contact slurm controller\n")
    outcome = actuator.apply(Decision("p", (job,))).outcomes[0]
    assert (outcome.error_kind, outcome.returncode) == ("unreachable", 1)


def test_without_a_source_the_actuator_asks_slurm_itself() -> None:
    runner = recorded_cluster("22.05")
    runner.default = OK
    actuator = SlurmActuator(
        CliSlurmClient(runner=runner), ActuatorConfig(mode=Mode.ADVISE), clock=lambda: SUBMIT
    )
    actuator.apply(Decision("p", (ROLES["pending_prio"],)))
    assert ("squeue", "--json") in runner.argvs
    assert _updates(runner)[-1][-1] == "StartTime=now"


@pytest.mark.parametrize(("message", "kind"), [
    # Slurm 22.05.8's own words (measured on the dev cluster)
    ("Invalid job id specified", "vanished"),
    ("Job has already finished", "vanished"),
    # it started between the snapshot and the call (a pin may have resized it: docs/slurm.md)
    ("Job is no longer pending execution for job 1", "started"),
    ("Invalid node name specified", "rejected"),
    ("Invalid job ID 121,133", "rejected"),  # a job list for a one-job field: the call
    ("scontrol: error: Invalid Priority value: abc", "rejected"),
    ("`scontrol update` did not answer within 15 s", "timeout"),
])
def test_slurm_errors_are_classified_by_their_cause(message: str, kind: str) -> None:
    assert classify_error(message) == kind
