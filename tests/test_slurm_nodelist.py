"""A ``ReqNodeList`` slurm-rl did not set (a user's ``sbatch --nodelist``) is never changed.

Only the subprocess boundary is fake (squeue/sinfo answer with the 22.05 golden files, with
some fields changed, and ``scontrol`` with success); the store is a real SQLite file written
by the real recorder. In the recording a100-[01-03] and v100-[01-03] are usable; job 3
(``--gres=gpu:a100:8``) and job 10 (``-N2 --gpus=4``) are pending and deferred, job 2
(``--gpus=v100:3``) runs on v100-01 without a pin.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from slurm_rl.core import ClusterSnapshot, Decision, Placement
from slurm_rl.daemon.recorder import StoreRecorder
from slurm_rl.daemon.runner import Daemon
from slurm_rl.loop import DecisionMaker
from slurm_rl.slurm.actuator import ActuatorConfig, Mode, SlurmActuator
from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.source import SlurmSource
from slurm_rl.slurm.waiting import waits_on
from slurm_rl.store.exclusions import last_exclusions, last_pins
from slurm_rl.store.repository import ActionRecord, Store
from tests.slurm.fakes import FakeRunner, fixture_text, recorded_cluster
from tests.test_daemon import NOW, OK, _config, _updates
from tests.test_slurm_exclusions import _shows

CLUSTER = "slurm"  # 22.05's JSON names no cluster
PRIO, WIDE, RUNNING = "3", "10", "2"
ON_A100_03 = Placement(("a100-03",), (8,))
OPT_IN = {"comment": "slurm-rl:checkpoint", "requeue": True}
SQUEUE = ("squeue", "--json")


def _squeue(changes: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The recorded ``squeue --json``, showing ``changes`` (by job id) on those jobs."""
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    for job in doc["jobs"]:
        job.update((changes or {}).get(str(job["job_id"]), {}))
    return json.dumps(doc)


def _recording(changes: Mapping[str, Mapping[str, Any]] | None = None) -> FakeRunner:
    """The 22.05 recording, with squeue showing ``changes``; scontrol calls succeed."""
    runner = recorded_cluster("22.05")
    runner.answer(SQUEUE, _squeue(changes))
    runner.default = OK
    return runner


def _pinned(nodes: str, **more: Any) -> dict[str, Any]:
    return {"required_nodes": nodes, **more}


def _daemon(tmp_path: Path, runner: FakeRunner, **values: Any) -> Daemon:
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = _config(tmp_path, **values)
    return Daemon(lambda: config, runner=runner, clock=lambda: NOW)


def _pins_sent(runner: FakeRunner, job_id: str) -> list[tuple[str, ...]]:
    return [argv for argv in _updates(runner) if f"JobId={job_id}" in argv
            and any(arg.startswith("ReqNodeList=") for arg in argv)]


def _source_and_actuator(runner: FakeRunner) -> tuple[SlurmSource, SlurmActuator]:
    client = CliSlurmClient(runner=runner)
    source = SlurmSource(client, clock=lambda: NOW)
    config = ActuatorConfig(mode=Mode.ENFORCE, priority_floor=1)
    return source, SlurmActuator(client, config, pins=source.pins, clock=lambda: NOW)


# -- pending jobs -----------------------------------------------------------------------------


def test_a_users_nodelist_job_is_set_aside_and_never_gets_a_pin(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Without a node list of its own, fifo+best-fit pins job 3 on a100-03.
    plain = _recording()
    daemon = _daemon(tmp_path / "plain", plain)
    try:
        assert daemon.run_once().ok
    finally:
        daemon.close(retire=False)
    assert _pins_sent(plain, PRIO)[0][3] == "ReqNodeList=a100-03"
    # sbatch --nodelist=a100-02 (half of it busy now): Slurm starts it there, by its own rules.
    runner = _recording({PRIO: _pinned("a100-02")})
    daemon = _daemon(tmp_path / "users", runner)
    try:
        with caplog.at_level(logging.INFO, logger="slurm_rl.slurm.source"):
            assert daemon.run_once().ok
        assert daemon.parts.source.set_aside[PRIO] == "nodelist"
        assert not [argv for argv in _updates(runner) if f"JobId={PRIO}" in argv]
        assert daemon.store.decisions_for(CLUSTER, PRIO) == []
        gauge = daemon.metrics.registry.get_sample_value("slurm_rl_set_aside_jobs",
                                                         {"waits_on": "nodelist"})
        assert gauge == 2  # job 4's recorded ReqNodeList=v100-03 is not this daemon's either
        assert f"job {PRIO} left to Slurm while it waits (nodelist)" in caplog.text
    finally:
        daemon.close(retire=False)


def test_waits_on_names_a_pin_only_when_it_is_not_ours() -> None:
    source, _ = _source_and_actuator(_recording({PRIO: _pinned("a100-02")}))
    state = source.state()
    job = state.job(PRIO)
    assert job is not None
    assert waits_on(job, NOW) == "nodelist"  # nobody vouches for it: the user's
    assert waits_on(job, NOW, lambda j: True) is None
    assert waits_on(dataclasses.replace(job, required_nodes=()), NOW) is None
    assert waits_on(dataclasses.replace(job, reason="JobHeldUser"), NOW) == "held"


def test_the_daemons_own_pin_is_still_changed() -> None:
    runner = _recording()
    source, actuator = _source_and_actuator(runner)
    actuator.apply(Decision("p", (PRIO,), {PRIO: ON_A100_03}), source.observe().context)
    assert _pins_sent(runner, PRIO) == [("scontrol", "update", f"JobId={PRIO}",
                                         "ReqNodeList=a100-03", "NumNodes=1-1", "StartTime=now")]
    # Next cycle Slurm shows the pin: the source and the actuator share the ledger.
    runner.answer(SQUEUE, _squeue({PRIO: _pinned("a100-03", eligible_time=int(NOW),
                                                 state_reason="Resources")}))
    runner.calls.clear()
    observed = source.observe()
    assert PRIO in [job.job_id for job in observed.snapshot.pending]
    assert PRIO not in source.set_aside
    report = actuator.apply(Decision("p", (PRIO,), {PRIO: Placement(("a100-01",), (8,))}),
                            observed.context)
    assert _pins_sent(runner, PRIO) == [("scontrol", "update", f"JobId={PRIO}",
                                         "ReqNodeList=a100-01", "NumNodes=1-1")]
    assert report.outcomes[0].kind == "place" and report.outcomes[0].note == ""


def test_the_actuator_never_overwrites_a_users_nodelist() -> None:
    """Defence in depth: a decision made on other data than the snapshot places the job."""
    for mode in (Mode.ENFORCE, Mode.SHADOW):
        runner = _recording()
        source, actuator = _source_and_actuator(runner)
        actuator.config = dataclasses.replace(actuator.config, mode=mode)
        theirs = _shows(source.state(), PRIO, required_nodes=("a100-02",))
        report = actuator.apply(Decision("p", (PRIO,), {PRIO: ON_A100_03}), theirs)
        (outcome,) = report.outcomes
        assert not any(arg.startswith("ReqNodeList=") for arg in outcome.argv), mode
        assert outcome.argv == ("scontrol", "update", f"JobId={PRIO}", "StartTime=now")
        assert outcome.kind == "release"
        assert outcome.note == ("placement on a100-03 dropped: its --nodelist=a100-02 is the "
                                "user's")
        # Where the user's list is exactly the placement, there is nothing to change.
        same = actuator.apply(Decision("p", (PRIO,), {PRIO: Placement(("a100-02",), (8,))}),
                              theirs)
        assert same.outcomes[0].note == ""


def test_a_pin_changed_by_someone_else_is_theirs_from_then_on() -> None:
    runner = _recording()
    source, actuator = _source_and_actuator(runner)
    state = source.state()
    actuator.apply(Decision("p", (PRIO,), {PRIO: ON_A100_03}), state)
    assert dict(actuator.pins.values) == {PRIO: frozenset({"a100-03"})}
    changed = _shows(state, PRIO, required_nodes=("a100-01",), eligible_time=NOW)
    runner.calls.clear()
    report = actuator.apply(Decision("p", (PRIO,), {PRIO: ON_A100_03}), changed)
    assert _pins_sent(runner, PRIO) == [] and "is the user's" in report.outcomes[0].note
    assert dict(actuator.pins.values) == {}


# -- after a restart, from the store ----------------------------------------------------------


def test_a_restarted_daemon_knows_its_own_pins_and_not_the_users(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = _daemon(tmp_path, _recording())
    try:
        assert first.run_once().ok  # fifo+best-fit pins jobs 3 and 10
    finally:
        first.close(retire=False)
    placed = {job_id: first.store.decisions_for(CLUSTER, job_id)[-1].nodes
              for job_id in (PRIO, WIDE)}
    assert placed == {PRIO: "a100-03", WIDE: "a100-01,a100-02"}
    assert last_pins(first.store, CLUSTER, [PRIO, WIDE, "4"]) == {
        PRIO: "a100-03", WIDE: "a100-[01-02]"}
    # Slurm shows job 3 on our pin; job 10 on a list we never set (changed since: theirs).
    released = {"eligible_time": int(NOW), "state_reason": "Resources"}
    runner = _recording({PRIO: _pinned("a100-03", **released),
                         WIDE: _pinned("v100-[02-03]", **released)})
    second = _daemon(tmp_path, runner)
    try:
        with caplog.at_level(logging.INFO, logger="slurm_rl.slurm.ownership"):
            assert second.run_once().ok
        source = second.parts.source
        assert source.set_aside.get(WIDE) == "nodelist" and PRIO not in source.set_aside
        assert dict(source.pins.values) == {PRIO: frozenset({"a100-03"})}
        assert "job 3: ReqNodeList=a100-03 is slurm-rl's own (audit trail)" in caplog.text
        assert _pins_sent(runner, WIDE) == []
        # Its own pin it may still change.
        report = second.parts.actuator.apply(
            Decision("p", (PRIO,), {PRIO: Placement(("a100-01",), (8,))}))
        assert _pins_sent(runner, PRIO)[-1][3] == "ReqNodeList=a100-01"
        assert report.outcome(PRIO) is not None
    finally:
        second.close(retire=False)


def test_the_store_reads_back_placements_moves_and_reverts(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    runner = _recording()
    source, actuator = _source_and_actuator(runner)
    snapshot, state = source.observe()
    report = actuator.apply(Decision("p", (PRIO, WIDE), {PRIO: ON_A100_03}), state)
    StoreRecorder(store, "enforce").record(snapshot, Decision("p", (PRIO, WIDE)), report)
    assert last_pins(store, CLUSTER, [PRIO, WIDE]) == {PRIO: "a100-03"}
    then = [["scontrol", "update", f"JobId={WIDE}", "ReqNodeList=v100-02", "NumNodes=1-1"]]
    rows = [
        ActionRecord(WIDE, "migrate", ("scontrol", "requeue", WIDE), rc=0,
                     details={"then": then}),
        # slurm-rl revert put back what Slurm showed before the daemon: maybe a user's.
        ActionRecord(PRIO, "revert", ("scontrol", "update", f"JobId={PRIO}",
                                      "ReqNodeList=a100-02"), rc=0),
    ]
    store.record_cycle(snapshot, Decision("p", ()), rows, mode="enforce")
    assert last_pins(store, CLUSTER, [PRIO, WIDE]) == {PRIO: "", WIDE: "v100-02"}
    assert last_exclusions(store, CLUSTER, [PRIO, WIDE]) == {}


# -- running jobs and moves -------------------------------------------------------------------


@dataclass
class _Moving:
    """The daemon's policy, plus fixed moves; keeps the snapshot it decided on."""

    inner: DecisionMaker
    moves: dict[str, Placement]
    seen: ClusterSnapshot | None = None

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        self.seen = snapshot
        return dataclasses.replace(self.inner.decide(snapshot), migrations=self.moves)


def _moving_daemon(tmp_path: Path, runner: FakeRunner, to: str) -> tuple[Daemon, _Moving]:
    daemon = _daemon(tmp_path, runner, migrate=True)
    policy = _Moving(daemon.parts.scheduler, {RUNNING: Placement((to,), (3,))})
    daemon.parts = dataclasses.replace(daemon.parts, scheduler=policy)
    return daemon, policy


def _checkpointable(policy: _Moving) -> bool:
    assert policy.seen is not None
    (run,) = [r for r in policy.seen.running if r.job.job_id == RUNNING]
    return run.job.checkpointable


def test_a_move_pin_is_remembered_and_a_users_pin_is_never_moved(tmp_path: Path) -> None:
    runner = _recording({RUNNING: OPT_IN})
    runner.answer(("scontrol", "show", "job", "-o", RUNNING),
                  f"JobId={RUNNING} JobState=PENDING Reason=BeginTime UserId=bob(1002)\n")
    first, policy = _moving_daemon(tmp_path, runner, "v100-02")
    try:
        assert first.run_once().ok and _checkpointable(policy)  # no pin at all
        assert ("scontrol", "requeue", RUNNING) in runner.argvs
    finally:
        first.close(retire=False)
    (row,) = first.store.decisions_for(CLUSTER, RUNNING)
    assert row.action == "migrate" and row.details is not None
    assert row.details["then"] == [
        ["scontrol", "update", f"JobId={RUNNING}", "ReqNodeList=v100-02", "NumNodes=1-1"],
        ["scontrol", "update", f"JobId={RUNNING}", "StartTime=now"],
    ]
    # The restarted daemon finds the job running on the move's pin: its own, so movable.
    moved = {**OPT_IN, "nodes": "v100-02", "required_nodes": "v100-02"}
    runner.answer(SQUEUE, _squeue({RUNNING: moved}))
    runner.calls.clear()
    again, policy = _moving_daemon(tmp_path, runner, "v100-03")
    try:
        assert again.run_once().ok and _checkpointable(policy)
        assert ("scontrol", "requeue", RUNNING) in runner.argvs
    finally:
        again.close(retire=False)
    # A daemon that never pinned it (sbatch --nodelist=v100-02): the user's.
    runner.calls.clear()
    other, policy = _moving_daemon(tmp_path / "other", runner, "v100-03")
    try:
        assert other.run_once().ok and not _checkpointable(policy)
        assert ("scontrol", "requeue", RUNNING) not in runner.argvs
        (refused,) = other.store.decisions_for(CLUSTER, RUNNING)
        assert (refused.action, refused.argv) == ("not_movable", None)
        assert refused.details == {"note": "not moved: its --nodelist=v100-02 is the user's"}
    finally:
        other.close(retire=False)


def test_plan_moves_refuses_a_users_pin_with_a_note() -> None:
    runner = _recording({RUNNING: {**OPT_IN, "required_nodes": "v100-01"}})
    source, actuator = _source_and_actuator(runner)
    actuator.config = dataclasses.replace(actuator.config, migrate=True)
    snapshot, state = source.observe()
    (run,) = [r for r in snapshot.running if r.job.job_id == RUNNING]
    assert not run.job.checkpointable
    runner.calls.clear()
    report = actuator.apply(
        Decision("p", (), migrations={RUNNING: Placement(("v100-02",), (3,))}), state)
    (outcome,) = report.outcomes
    assert (outcome.kind, outcome.sent) == ("not_movable", False)
    assert outcome.note == "not moved: its --nodelist=v100-01 is the user's"
    assert runner.argvs == []


def test_a_reload_hands_the_pins_to_the_new_source_and_actuator(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path, _recording())
    try:
        daemon.parts.actuator.pins.remember(PRIO, "a100-03")
        old = daemon.parts
        assert daemon.reload()
        assert daemon.parts.source is not old.source
        assert daemon.parts.source.pins is daemon.parts.actuator.pins
        assert dict(daemon.parts.source.pins.values) == {PRIO: frozenset({"a100-03"})}
    finally:
        daemon.close(retire=False)


def test_an_actuator_records_pins_in_the_ledger_it_is_given() -> None:
    runner = _recording()
    source, actuator = _source_and_actuator(runner)
    assert actuator.pins is source.pins  # given the source's, as the daemon gives it
    client = CliSlurmClient(runner=runner)
    assert SlurmActuator(client).pins is not source.pins  # nothing taken from a source


def test_a_pin_of_ours_that_slurm_finds_it_can_never_hold_is_cleared() -> None:
    """After the pin, an admin moved a100-03 out of the job's partition (or took a feature
    away): Slurm keeps the job pending with BadConstraints and priority 0 for good. Set aside
    as held, it would wait there until someone noticed; the pin is ours, so the daemon takes it
    back off, and an update without a Priority makes slurmctld drop the BadConstraints and
    compute the priority again (job_mgr.c)."""
    runner = _recording()
    source, actuator = _source_and_actuator(runner)
    actuator.apply(Decision("p", (PRIO,), {PRIO: ON_A100_03}), source.observe().context)
    stranded = _pinned("a100-03", eligible_time=int(NOW), state_reason="BadConstraints",
                       priority=0)
    runner.answer(SQUEUE, _squeue({PRIO: stranded}))
    runner.calls.clear()
    observed = source.observe()
    assert source.set_aside[PRIO] == "held"  # no policy may order or place it as it is
    report = actuator.apply(Decision("p", ()), observed.context)
    assert _pins_sent(runner, PRIO) == [("scontrol", "update", f"JobId={PRIO}", "ReqNodeList=")]
    outcome = report.outcome(PRIO)
    assert outcome is not None and (outcome.kind, outcome.ok) == ("unpin", True)
    assert dict(outcome.before)["ReqNodeList"] == "a100-03"  # for revert and explain
    # Cleared: no longer ours, so it is not cleared again while Slurm catches up.
    runner.calls.clear()
    actuator.apply(Decision("p", ()), source.observe().context)
    assert _pins_sent(runner, PRIO) == []


def test_a_users_pin_that_slurm_finds_impossible_is_left_to_them() -> None:
    runner = _recording({PRIO: _pinned("a100-03", state_reason="BadConstraints", priority=0)})
    source, actuator = _source_and_actuator(runner)
    actuator.apply(Decision("p", ()), source.observe().context)
    assert _pins_sent(runner, PRIO) == []


def test_the_daemon_unpins_a_stranded_job_and_stores_the_call(tmp_path: Path) -> None:
    runner = _recording()
    daemon = _daemon(tmp_path, runner)
    try:
        assert daemon.run_once().ok
        assert _pins_sent(runner, PRIO)[0][3] == "ReqNodeList=a100-03"
        runner.answer(SQUEUE, _squeue({PRIO: _pinned(
            "a100-03", eligible_time=int(NOW), state_reason="BadConstraints", priority=0)}))
        runner.calls.clear()
        assert daemon.run_once().ok
        assert _pins_sent(runner, PRIO) == [
            ("scontrol", "update", f"JobId={PRIO}", "ReqNodeList=")]
        last = daemon.store.decisions_for(CLUSTER, PRIO)[-1]
        assert (last.action, last.slurm_rc, last.nodes) == ("unpin", 0, None)
        assert last.details is not None and last.details["before"]["ReqNodeList"] == "a100-03"
    finally:
        daemon.close(retire=False)
