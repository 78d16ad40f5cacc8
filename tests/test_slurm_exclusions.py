"""``Decision.exclusions`` -> ``ExcNodeList`` on the recorded 22.05 state, and its safety rules.

Only the subprocess boundary is fake (see tests/test_slurm_actuator.py). In the recording,
a100-[01-03] are usable and a100-04 is down; v100-[01-03] are usable and v100-04 drained.
"""

from __future__ import annotations

import dataclasses
import logging
from types import MappingProxyType
from typing import Any

import pytest

from slurm_rl.core import Decision, Placement
from slurm_rl.daemon.recorder import action_record
from slurm_rl.ops.revert import restore_fields
from slurm_rl.slurm.actuator import JobOutcome, Mode, SlurmActuator
from slurm_rl.slurm.records import SlurmJob
from slurm_rl.slurm.source import SlurmState
from tests.slurm.fakes import FakeRunner
from tests.test_slurm_actuator import ROLES, SUBMIT, _setup, _updates

NOW = SUBMIT + 60
PRIO = ROLES["pending_prio"]  # --gres=gpu:a100:8 on one node, priority 5000, deferred
WIDE = ROLES["pending_unlimited"]  # --gpus=4 (any type) over -N2, deferred


def _exclude(job_id: str, *nodes: str, **placements: Placement) -> Decision:
    return Decision("p", (job_id,), dict(placements), exclusions={job_id: nodes})


def _shows(state: SlurmState, job_id: str, **changes: Any) -> SlurmState:
    """``state`` with one job changed (what Slurm shows at a later cycle)."""
    managed = dict(state.managed)
    managed[job_id] = dataclasses.replace(managed[job_id], **changes)
    return dataclasses.replace(state, managed=MappingProxyType(managed))


def _released(state: SlurmState, job_id: str, *excluded: str) -> SlurmState:
    return _shows(state, job_id, eligible_time=NOW, excluded_nodes=excluded)


def _ours(mode: Mode = Mode.ENFORCE) -> tuple[SlurmActuator, FakeRunner, SlurmState]:
    """An actuator that has excluded a100-[01-02] from PRIO, and Slurm showing it."""
    actuator, runner, state = _setup(mode, now=NOW, priority_floor=1)
    actuator.apply(_exclude(PRIO, "a100-01", "a100-02"))
    runner.calls.clear()
    return actuator, runner, _released(state, PRIO, "a100-01", "a100-02")


def test_enforce_excludes_nodes_from_a_released_unplaced_job() -> None:
    actuator, runner, _ = _setup(Mode.ENFORCE, now=NOW, priority_floor=1)
    report = actuator.apply(_exclude(PRIO, "a100-02", "a100-01"))
    assert _updates(runner) == [
        ("scontrol", "update", f"JobId={PRIO}", "ExcNodeList=a100-[01-02]", "StartTime=now")
    ]
    outcome = report.outcomes[0]
    assert (outcome.kind, outcome.sent, outcome.ok, outcome.note) == ("exclude", True, True, "")
    assert dict(outcome.before)["ExcNodeList"] == ""


def test_advise_never_excludes_and_shadow_only_plans() -> None:
    actuator, runner, _ = _setup(Mode.ADVISE, now=NOW, priority_floor=1)
    report = actuator.apply(_exclude(PRIO, "a100-01"))
    assert _updates(runner) == [("scontrol", "update", f"JobId={PRIO}", "StartTime=now")]
    assert report.outcomes[0].kind == "release"
    actuator, runner, _ = _setup(Mode.SHADOW, now=NOW, priority_floor=1)
    report = actuator.apply(_exclude(PRIO, "a100-01"))
    assert _updates(runner) == [] and report.commands == ()
    outcome = report.outcomes[0]
    assert (outcome.kind, outcome.sent) == ("exclude", False)
    assert "ExcNodeList=a100-01" in outcome.argv


def test_an_exclusion_slurm_already_shows_is_not_sent_again() -> None:
    actuator, runner, state = _ours()
    report = actuator.apply(_exclude(PRIO, "a100-02", "a100-01"), state)
    assert _updates(runner) == [] and report.outcomes[0].kind == "unchanged"


def test_a_users_own_exclude_is_never_overwritten_or_cleared() -> None:
    actuator, runner, state = _setup(Mode.ENFORCE, now=NOW, priority_floor=1)
    mine = _shows(state, PRIO, excluded_nodes=("v100-01",))  # sbatch --exclude=v100-01
    report = actuator.apply(_exclude(PRIO, "a100-01"), mine)
    assert _updates(runner) == [("scontrol", "update", f"JobId={PRIO}", "StartTime=now")]
    assert "ExcNodeList=v100-01 was not set by slurm-rl: left alone" in report.outcomes[0].note
    runner.calls.clear()
    released = _shows(mine, PRIO, eligible_time=NOW)
    report = actuator.apply(Decision("p", (PRIO,)), released)  # no exclusion wanted any more
    assert _updates(runner) == [] and report.outcomes[0].kind == "unchanged"
    # A pin elsewhere goes out as usual and leaves the user's list as it is.
    actuator.apply(Decision("p", (PRIO,), {PRIO: Placement(("a100-03",), (8,))}), released)
    assert _updates(runner) == [
        ("scontrol", "update", f"JobId={PRIO}", "ReqNodeList=a100-03", "NumNodes=1-1")
    ]


def test_a_pin_onto_a_users_excluded_node_is_dropped() -> None:
    actuator, runner, state = _setup(Mode.ENFORCE, now=NOW, priority_floor=1)
    mine = _shows(state, WIDE, excluded_nodes=("v100-01",))
    pin = Placement(("v100-01", "v100-02"), (2, 2))
    report = actuator.apply(Decision("p", (WIDE,), {WIDE: pin}), mine)
    # Slurm would keep the job pending with BadConstraints for good: release it unplaced.
    assert _updates(runner) == [("scontrol", "update", f"JobId={WIDE}", "StartTime=now")]
    outcome = report.outcomes[0]
    assert outcome.kind == "release"
    assert outcome.note.startswith("placement on v100-[01-02] dropped")


def test_a_placement_clears_our_exclusion_in_the_same_update() -> None:
    actuator, runner, state = _ours()
    pin = Placement(("a100-01",), (8,))  # inside our exclusion: Slurm needs it cleared
    report = actuator.apply(Decision("p", (PRIO,), {PRIO: pin}), state)
    assert _updates(runner) == [
        ("scontrol", "update", f"JobId={PRIO}", "ReqNodeList=a100-01", "NumNodes=1-1",
         "ExcNodeList=")
    ]
    outcome = report.outcomes[0]
    assert outcome.kind == "place"
    assert dict(outcome.before)["ExcNodeList"] == "a100-01,a100-02"


def test_our_exclusion_is_changed_or_cleared_as_the_decision_changes() -> None:
    actuator, runner, state = _ours()
    actuator.apply(_exclude(PRIO, "a100-01"), state)
    assert _updates(runner) == [("scontrol", "update", f"JobId={PRIO}", "ExcNodeList=a100-01")]
    runner.calls.clear()
    state = _shows(state, PRIO, excluded_nodes=("a100-01",))
    report = actuator.apply(Decision("p", (PRIO,)), state)
    assert _updates(runner) == [("scontrol", "update", f"JobId={PRIO}", "ExcNodeList=")]
    assert report.outcomes[0].kind == "unexclude"
    runner.calls.clear()
    # Cleared: the actuator no longer counts it as its own.
    actuator.apply(Decision("p", (PRIO,)), _shows(state, PRIO, excluded_nodes=()))
    assert _updates(runner) == []


def test_our_exclusion_is_cleared_when_the_job_is_held_or_left_to_slurm() -> None:
    actuator, runner, state = _ours()
    report = actuator.apply(Decision("p", (), holds=(PRIO,)), state)
    (argv,) = _updates(runner)
    assert argv[2] == f"JobId={PRIO}" and argv[3].startswith("StartTime=") and argv[4:] == (
        "ExcNodeList=",
    )
    assert report.outcome(PRIO).kind == "defer"  # type: ignore[union-attr]
    actuator, runner, state = _ours()
    report = actuator.apply(Decision("p", ()), state)
    assert _updates(runner) == [("scontrol", "update", f"JobId={PRIO}", "ExcNodeList=")]
    assert report.outcome(PRIO).kind == "unexclude"  # type: ignore[union-attr]


def test_an_exclusion_someone_else_changed_is_no_longer_ours() -> None:
    actuator, runner, state = _ours()
    theirs = _shows(state, PRIO, excluded_nodes=("a100-02",))  # scontrol update by the user
    actuator.apply(Decision("p", (PRIO,)), theirs)
    assert _updates(runner) == []
    actuator.apply(Decision("p", (PRIO,)), _shows(theirs, PRIO, excluded_nodes=("a100-01",)))
    assert _updates(runner) == []  # still not ours, even if it matches an earlier value


def test_an_exclusion_that_would_strand_the_job_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="slurm_rl.slurm.exclusion")
    actuator, runner, _ = _setup(Mode.ENFORCE, now=NOW, priority_floor=1)
    # a100-04 is down, so without a100-[01-03] no a100 node is left for 8 a100 GPUs.
    report = actuator.apply(_exclude(PRIO, "a100-01", "a100-02", "a100-03"))
    assert _updates(runner) == [("scontrol", "update", f"JobId={PRIO}", "StartTime=now")]
    assert "would strand the job" in report.outcomes[0].note
    lines = [r.getMessage() for r in caplog.records if r.name == "slurm_rl.slurm.exclusion"]
    assert len(lines) == 1 and "a100-[01-03] dropped" in lines[0]


@pytest.mark.parametrize(
    ("excluded", "sent"),
    [
        # 4 GPUs over 2 nodes: the three usable v100 nodes are enough.
        (("a100-01", "a100-02", "a100-03"), True),
        # Only v100-01 left: 4 GPUs, but one node for a two-node job.
        (("a100-01", "a100-02", "a100-03", "v100-02", "v100-03"), False),
    ],
)
def test_the_stranding_check_counts_nodes_too(excluded: tuple[str, ...], sent: bool) -> None:
    actuator, runner, _ = _setup(Mode.ENFORCE, now=NOW, priority_floor=1)
    actuator.apply(_exclude(WIDE, *excluded))
    assert any(a.startswith("ExcNodeList=") for a in _updates(runner)[0]) is sent


def test_unknown_node_names_are_not_sent() -> None:
    actuator, runner, _ = _setup(Mode.ENFORCE, now=NOW, priority_floor=1)
    report = actuator.apply(_exclude(PRIO, "a100-01", "gone-07"))
    assert _updates(runner)[0][3] == "ExcNodeList=a100-01"
    assert report.outcomes[0].note == "unknown nodes not excluded: gone-07"


def test_a_failed_exclusion_is_not_remembered_as_ours() -> None:
    actuator, runner, state = _setup(Mode.ENFORCE, now=NOW, priority_floor=1)
    argv = ("scontrol", "update", f"JobId={PRIO}", "ExcNodeList=a100-01", "StartTime=now")
    runner.answer(argv, rc=1, stderr=f"Invalid node name specified for job {PRIO}\n")
    assert actuator.apply(_exclude(PRIO, "a100-01")).outcomes[0].error_kind == "rejected"
    runner.calls.clear()
    actuator.apply(Decision("p", (PRIO,)), _released(state, PRIO, "a100-01"))
    assert _updates(runner) == []  # whoever set it, it is not the actuator's to clear


# -- the audit trail and revert --------------------------------------------------------------


def test_the_note_and_the_before_value_reach_the_store_row() -> None:
    outcome = JobOutcome("3", "release", ("scontrol",), True, 0,
                         before=(("ExcNodeList", ""),), note="left alone")
    record = action_record(outcome)
    assert record.details == {"before": {"ExcNodeList": ""}, "note": "left alone"}
    assert action_record(JobOutcome("3", "unchanged")).details is None


def _job(**values: Any) -> SlurmJob:
    return SlurmJob(**{"job_id": "5", "name": "x", "user": "alice", "partition": "gpu",
                       "state": "PENDING", **values})


def test_revert_restores_the_excluded_nodes() -> None:
    ours = _job(excluded_nodes=("a100-01", "a100-02"))
    assert restore_fields(ours, {"ExcNodeList": ""}, 0.0) == {"ExcNodeList": ""}
    cleared = _job(excluded_nodes=())
    before = {"ExcNodeList": "a100-01,a100-02"}
    assert restore_fields(cleared, before, 0.0) == {"ExcNodeList": "a100-01,a100-02"}
    assert restore_fields(ours, before, 0.0) == {}
