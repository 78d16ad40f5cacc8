"""A restarted daemon recognises the ``ExcNodeList`` it set before, from its audit trail.

Only the subprocess boundary is fake (squeue/sinfo answer with the 22.05 golden files,
``scontrol update`` with success); the store is a real SQLite file written by the real
recorder. See tests/test_slurm_exclusions.py for the rules while the daemon keeps running.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from slurm_rl.config import DaemonConfig
from slurm_rl.core import Decision, Placement
from slurm_rl.daemon.recorder import StoreRecorder
from slurm_rl.daemon.runner import Daemon
from slurm_rl.slurm.actuator import Mode, SlurmActuator
from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.source import SlurmSource, SlurmState
from slurm_rl.store.exclusions import excluded_value, last_exclusions
from slurm_rl.store.repository import ActionRecord, Store
from tests.slurm.fakes import FakeRunner, fixture_text, recorded_cluster
from tests.test_slurm_actuator import OK, _setup, _updates
from tests.test_slurm_exclusions import NOW, PRIO, _exclude, _released

CLUSTER = "slurm"  # 22.05's JSON names no cluster
PIN = Decision("p", (PRIO,), {PRIO: Placement(("a100-01",), (8,))})


def _store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'store.sqlite'}")


def _run(store: Store, *decisions: Decision, mode: Mode = Mode.ENFORCE) -> None:
    """Daemon cycles of one run: the actuator applies each decision (Slurm showing what the
    one before set) and the recorder stores it."""
    actuator, runner, state = _setup(mode, now=NOW, priority_floor=1)
    recorder = StoreRecorder(store, mode.value)
    snapshot = _snapshot(lambda: NOW)  # what _setup's state shows
    for decision in decisions:
        report = actuator.apply(decision, state)
        recorder.record(snapshot, decision, report)
        excluded = decision.exclusions.get(PRIO, ()) if mode is Mode.ENFORCE else ()
        state = _released(state, PRIO, *excluded)


def _restarted(store: Store, asked: list[Sequence[str]] | None = None
               ) -> tuple[SlurmActuator, FakeRunner, SlurmState]:
    """A new actuator (a restarted daemon) that asks ``store``, and the state it starts on."""
    actuator, runner, state = _setup(Mode.ENFORCE, now=NOW, priority_floor=1)

    def recall(job_ids: Sequence[str]) -> Mapping[str, str]:
        if asked is not None:
            asked.append(tuple(job_ids))
        return last_exclusions(store, CLUSTER, job_ids)

    actuator.recall = recall
    return actuator, runner, state


def test_the_store_holds_the_last_exclusion_the_daemon_set(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _run(store, _exclude(PRIO, "a100-01", "a100-02"))
    assert last_exclusions(store, CLUSTER, [PRIO, "10"]) == {PRIO: "a100-[01-02]"}
    assert excluded_value(["scontrol", "update", "JobId=3", "ExcNodeList="]) == ""
    assert excluded_value(["scontrol", "update", "JobId=3", "Priority=5"]) is None


def test_a_restarted_daemon_pins_over_and_clears_its_own_exclusion(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _run(store, _exclude(PRIO, "a100-01", "a100-02"))
    actuator, runner, state = _restarted(store)
    shown = _released(state, PRIO, "a100-01", "a100-02")
    report = actuator.apply(PIN, shown)  # a pin inside the exclusion: cleared with it
    assert _updates(runner) == [
        ("scontrol", "update", f"JobId={PRIO}", "ReqNodeList=a100-01", "NumNodes=1-1",
         "ExcNodeList=")
    ]
    assert report.outcomes[0].note == ""
    actuator, runner, state = _restarted(store)
    actuator.apply(Decision("p", (PRIO,)), _released(state, PRIO, "a100-01", "a100-02"))
    assert _updates(runner) == [("scontrol", "update", f"JobId={PRIO}", "ExcNodeList=")]


def test_a_users_exclude_stays_theirs_and_is_asked_about_once(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _run(store, Decision("p", (PRIO,)))  # rows for the job, none with an ExcNodeList
    asked: list[Sequence[str]] = []
    actuator, runner, state = _restarted(store, asked)
    theirs = _released(state, PRIO, "a100-01")  # sbatch --exclude=a100-01
    report = actuator.apply(PIN, theirs)
    assert _updates(runner) == []  # the pin would never start: dropped
    assert report.outcomes[0].note.startswith("placement on a100-01 dropped")
    actuator.apply(Decision("p", (PRIO,)), theirs)
    assert _updates(runner) == [] and asked == [(PRIO,)]


def test_only_the_last_accepted_value_counts(tmp_path: Path) -> None:
    store = _store(tmp_path)
    # The daemon excluded the nodes, then cleared its own exclusion.
    _run(store, _exclude(PRIO, "a100-01", "a100-02"), Decision("p", (PRIO,)))
    assert last_exclusions(store, CLUSTER, [PRIO]) == {PRIO: ""}
    actuator, runner, state = _restarted(store)
    actuator.apply(Decision("p", (PRIO,)), _released(state, PRIO, "a100-01", "a100-02"))
    assert _updates(runner) == []  # set again since, by someone else


def test_shadow_rows_and_refused_calls_do_not_count(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _run(store, _exclude(PRIO, "a100-01"), mode=Mode.SHADOW)  # planned, never sent
    refused = ActionRecord(PRIO, "exclude", ("scontrol", "update", f"JobId={PRIO}",
                                             "ExcNodeList=a100-02"), rc=1, answer="rejected")
    store.record_cycle(_snapshot(), Decision("p", (PRIO,)), [refused], mode="enforce")
    assert last_exclusions(store, CLUSTER, [PRIO]) == {}


def test_a_changed_list_is_not_adopted(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _run(store, _exclude(PRIO, "a100-01", "a100-02"))
    actuator, runner, state = _restarted(store)
    actuator.apply(Decision("p", (PRIO,)), _released(state, PRIO, "a100-02"))
    assert _updates(runner) == []


def test_a_store_that_cannot_answer_is_asked_again_next_cycle(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _run(store, _exclude(PRIO, "a100-01", "a100-02"))
    actuator, runner, state = _setup(Mode.ENFORCE, now=NOW, priority_floor=1)
    answers: list[Mapping[str, str] | None] = [None, last_exclusions(store, CLUSTER, [PRIO])]
    actuator.recall = lambda job_ids: answers.pop(0)
    shown = _released(state, PRIO, "a100-01", "a100-02")
    actuator.apply(Decision("p", (PRIO,)), shown)
    assert _updates(runner) == []  # not known to be ours: left alone this cycle
    actuator.apply(Decision("p", (PRIO,)), shown)
    assert _updates(runner) == [("scontrol", "update", f"JobId={PRIO}", "ExcNodeList=")]


def test_a_reloaded_actuator_inherits_what_the_old_one_set() -> None:
    old, _, state = _setup(Mode.ENFORCE, now=NOW, priority_floor=1)
    old.apply(_exclude(PRIO, "a100-01", "a100-02"))
    new, runner, _ = _setup(Mode.ENFORCE, now=NOW, priority_floor=1)
    new.inherit(old)
    new.apply(Decision("p", (PRIO,)), _released(state, PRIO, "a100-01", "a100-02"))
    assert _updates(runner) == [("scontrol", "update", f"JobId={PRIO}", "ExcNodeList=")]


# -- the daemon ------------------------------------------------------------------------------


def _snapshot(clock: Callable[[], float] = time.time) -> Any:
    return SlurmSource(CliSlurmClient(runner=recorded_cluster("22.05")), clock=clock).snapshot()


def _excluding_cluster(nodes: str) -> FakeRunner:
    """The recording, with squeue showing ``ExcNodeList=nodes`` on the top pending job."""
    runner = recorded_cluster("22.05")
    data = json.loads(fixture_text("22.05", "squeue.json"))
    for job in data["jobs"]:
        if str(job["job_id"]) == PRIO:
            job["excluded_nodes"] = nodes
    runner.answer(("squeue", "--json"), json.dumps(data))
    runner.default = OK
    return runner


def _daemon(tmp_path: Path, runner: FakeRunner) -> Callable[[], Daemon]:
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    config = DaemonConfig(mode="enforce", state_dir=tmp_path / "state", plugin_conf_dir=etc,
                          interval_s=0.01)
    return lambda: Daemon(lambda: config, runner=runner, clock=lambda: NOW)


def _placed_argv(runner: FakeRunner) -> tuple[str, ...]:
    (argv,) = [a for a in _updates(runner) if f"JobId={PRIO}" in a]
    return argv


def test_the_daemon_recalls_its_exclusions_from_its_store(tmp_path: Path) -> None:
    runner = _excluding_cluster("a100-[01-02]")
    make = _daemon(tmp_path, runner)
    first = make()
    try:  # fifo+best-fit pins the job on a100-03: the user's exclusion stays
        assert first.run_once().ok
        argv = _placed_argv(runner)
        assert "ReqNodeList=a100-03" in argv and "ExcNodeList=" not in argv
        # What an earlier run of this daemon stored when it excluded the nodes.
        sent = ActionRecord(PRIO, "exclude", ("scontrol", "update", f"JobId={PRIO}",
                                              "ExcNodeList=a100-[01-02]"), rc=0)
        first.store.record_cycle(_snapshot(), Decision("p", (PRIO,)), [sent], mode="enforce")
    finally:
        first.close(retire=False)
    runner.calls.clear()
    second = make()
    try:
        assert second.run_once().ok
        argv = _placed_argv(runner)
        assert "ReqNodeList=a100-03" in argv and "ExcNodeList=" in argv
    finally:
        second.close(retire=False)


def test_a_daemon_reload_keeps_what_its_actuator_set(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path, _excluding_cluster(""))()
    try:
        daemon.parts.actuator.exclusions.remember(PRIO, "a100-01")
        assert daemon.reload()
        assert dict(daemon.parts.actuator.exclusions.values) == {PRIO: frozenset({"a100-01"})}
    finally:
        daemon.close(retire=False)
