"""The write-ahead journal: a daemon killed between its calls and its record loses nothing.

Only the subprocess boundary is fake (the recorded 22.05 cluster); the store is a real
SQLite file. "Killed" is a ``SystemExit`` raised from inside the runner or the store, which
unwinds the daemon the way a kill -9 stops it: nothing after that point runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from slurm_rl.cli.main import main
from slurm_rl.config import DaemonConfig
from slurm_rl.daemon.runner import Daemon
from slurm_rl.journal import APPLIED, NOT_APPLIED, REFUSED, UNANSWERED, UNKNOWN
from slurm_rl.ops.revert import changes, revert
from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.errors import SlurmTimeoutError
from slurm_rl.slurm.priority import STEP
from slurm_rl.slurm.proc import CommandResult
from slurm_rl.store.models import DecisionRow, IntentRow
from slurm_rl.store.repository import Store
from tests.slurm.fakes import FakeRunner, fixture_text, recorded_cluster

NOW = 1795970505.0 + 60
SQUEUE = ("squeue", "--json")
PIN_3 = ("scontrol", "update", "JobId=3", "ReqNodeList=a100-03", "NumNodes=1-1", "StartTime=now")
# Job 3 keeps the 5000 it has; job 10, ranked below it, gets one STEP less.
PIN_10 = ("scontrol", "update", "JobId=10", "ReqNodeList=a100-[01-02]", "NumNodes=2-2",
          f"Priority={5000 - STEP}", "StartTime=now")


class Killed(SystemExit):
    """The daemon's process ends here (a kill -9 runs no cleanup either)."""


def _config(tmp_path: Path, **values: Any) -> DaemonConfig:
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    settings: dict[str, Any] = {"mode": "enforce", "state_dir": tmp_path / "state",
                                "plugin_conf_dir": etc, "interval_s": 0.01}
    return DaemonConfig(**{**settings, **values})


def _runner() -> FakeRunner:
    runner = recorded_cluster("22.05")
    runner.default = CommandResult((), 0, "", "")
    return runner


def _squeue_showing(changes: dict[int, dict[str, Any]]) -> str:
    """The recorded squeue document with some jobs' fields changed (what Slurm shows after
    the calls went through)."""
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    for job in doc["jobs"]:
        job.update(changes.get(job["job_id"], {}))
    return json.dumps(doc)


class DyingRunner(FakeRunner):
    """Answers like ``base`` but ends the process when ``argv`` is about to be sent."""

    def __init__(self, base: FakeRunner, argv: Sequence[str]) -> None:
        super().__init__(dict(base.answers), base.default)
        self.dies_at = tuple(argv)

    def __call__(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        if tuple(argv) == self.dies_at:
            raise Killed(9)
        return super().__call__(argv, timeout_s)


def _daemon(tmp_path: Path, runner: FakeRunner, **values: Any) -> Daemon:
    config = _config(tmp_path, **values)
    return Daemon(lambda: config, runner=runner, clock=lambda: NOW)


def _intents(tmp_path: Path) -> list[IntentRow]:
    store = Store(f"sqlite:///{tmp_path / 'state' / 'slurm-rl.sqlite'}")
    try:
        with store.session() as session:
            return list(session.scalars(select(IntentRow).order_by(IntentRow.id)))
    finally:
        store.engine.dispose()


def _decisions(tmp_path: Path, job_id: str) -> list[DecisionRow]:
    store = Store(f"sqlite:///{tmp_path / 'state' / 'slurm-rl.sqlite'}")
    try:
        return store.decisions_for("linux", job_id) or store.decisions_for("slurm", job_id)
    finally:
        store.engine.dispose()


def test_every_call_is_in_the_store_before_it_is_sent(tmp_path: Path) -> None:
    seen: list[list[tuple[str, str]]] = []
    base = _runner()

    class Watching(FakeRunner):
        def __call__(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
            if tuple(argv[:2]) == ("scontrol", "update"):
                seen.append([(row.job_id, row.state) for row in _intents(tmp_path)])
            return super().__call__(argv, timeout_s)

    daemon = _daemon(tmp_path, Watching(dict(base.answers), base.default))
    assert daemon.run_once().ok
    daemon.close()
    assert seen[0] == [("3", "intended"), ("10", "intended")]  # both, before the first call
    rows = _intents(tmp_path)
    assert [(r.job_id, r.state, r.slurm_rc) for r in rows] == [("3", APPLIED, 0),
                                                               ("10", APPLIED, 0)]
    assert all(r.cycle_id is not None for r in rows)  # recorded by the cycle's row
    assert rows[0].argv == list(PIN_3)


def test_a_kill_between_two_calls_loses_no_decision(tmp_path: Path) -> None:
    """Job 3's pin went out, the daemon died before sending job 10's; the restarted daemon
    finds job 3 holding its pin (applied) and job 10 without (not applied), and stores both
    as decisions that explain, revert and its pin ledger read."""
    daemon = _daemon(tmp_path, DyingRunner(_runner(), PIN_10))
    with pytest.raises(Killed):
        daemon.run_once()
    assert [(r.job_id, r.state) for r in _intents(tmp_path)] == [("3", "intended"),
                                                                 ("10", "intended")]
    after = _runner()
    after.answer(SQUEUE, _squeue_showing({3: {"required_nodes": "a100-03",
                                              "eligible_time": int(NOW) - 1}}))
    restarted = _daemon(tmp_path, after)
    assert restarted.run_once().ok
    restarted.close()
    states = {r.job_id: (r.state, r.slurm_answer) for r in _intents(tmp_path)[:2]}
    assert states["3"] == (APPLIED, None)
    assert states["10"][0] == NOT_APPLIED
    assert "ReqNodeList=" in (states["10"][1] or "")
    recovered = [d for d in _decisions(tmp_path, "3") if (d.details or {}).get("recovered")]
    assert len(recovered) == 1 and recovered[0].slurm_rc == 0
    assert recovered[0].argv == list(PIN_3) and recovered[0].nodes == "a100-03"
    # The restarted daemon knew job 3's pin was its own: it did not pin it again.
    assert not any(argv[:3] == ("scontrol", "update", "JobId=3") and "ReqNodeList=a100-03"
                   in argv for argv in after.argvs)


def test_a_kill_after_the_calls_before_the_record_loses_no_decision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = _daemon(tmp_path, _runner())

    def dies(*_args: Any, **_kwargs: Any) -> int:
        raise Killed(9)

    monkeypatch.setattr(daemon.store, "record_cycle", dies)
    with pytest.raises(Killed):
        daemon.run_once()
    monkeypatch.undo()
    rows = _intents(tmp_path)
    assert [(r.state, r.cycle_id) for r in rows] == [(APPLIED, None), (APPLIED, None)]
    restarted = _daemon(tmp_path, _runner())
    assert restarted.run_once().ok
    restarted.close()
    assert all(r.cycle_id is not None for r in _intents(tmp_path))
    for job_id in ("3", "10"):
        sent = [d for d in _decisions(tmp_path, job_id) if d.argv and d.slurm_rc == 0]
        assert sent, f"job {job_id}'s pin is in no decision row"


def test_explain_shows_a_recovered_call(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path, DyingRunner(_runner(), PIN_10))
    with pytest.raises(Killed):
        daemon.run_once()
    _daemon(tmp_path, _runner()).close()  # start-up alone does not recover: a cycle does
    restarted = _daemon(tmp_path, _runner())
    assert restarted.run_once().ok
    restarted.close()
    conf = tmp_path / "daemon.toml"
    conf.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n')
    result = CliRunner().invoke(main, ["explain", "10", "--config", str(conf)])
    assert result.exit_code == 0, result.output
    assert "after a restart" in result.output and "not_applied" in result.output


def test_slurm_refusing_a_pin_is_recorded_as_refused_with_its_message(tmp_path: Path) -> None:
    runner = _runner()
    message = "Requested node configuration is not available for job 3"
    runner.answer(PIN_3, rc=1, stderr=message + "\n")
    daemon = _daemon(tmp_path, runner)
    assert daemon.run_once().ok
    daemon.close()
    row = next(r for r in _intents(tmp_path) if r.job_id == "3")
    assert (row.state, row.slurm_rc) == (REFUSED, 1)
    assert row.slurm_answer == "Requested node configuration is not available"
    stored = _decisions(tmp_path, "3")[-1]
    assert stored.slurm_answer == "rejected: Requested node configuration is not available"


def test_a_call_without_an_answer_is_checked_on_the_next_cycle(tmp_path: Path) -> None:
    runner = _runner()
    runner.fail(PIN_3, SlurmTimeoutError(PIN_3, 15))
    daemon = _daemon(tmp_path, runner)
    daemon.run_once()
    row = next(r for r in _intents(tmp_path) if r.job_id == "3")
    assert row.state == UNANSWERED
    gone = json.loads(fixture_text("22.05", "squeue.json"))
    gone["jobs"] = [job for job in gone["jobs"] if job["job_id"] != 3]
    runner.answer(SQUEUE, json.dumps(gone))
    daemon.run_once()
    daemon.close()
    row = next(r for r in _intents(tmp_path) if r.job_id == "3")
    assert row.state == UNKNOWN
    assert "left the queue" in (row.slurm_answer or "")


def test_shadow_mode_writes_no_journal(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path, _runner(), mode="shadow")
    assert daemon.run_once().ok
    daemon.close()
    assert _intents(tmp_path) == []


def test_a_restarted_daemon_keeps_counting_its_hourly_priority_changes(tmp_path: Path) -> None:
    """Job 10 got a priority from the first run; Slurm still shows it lower (say someone
    reset it), and the limit is one change an hour: the restarted daemon sends none."""
    first = _daemon(tmp_path, _runner(), priority_updates_per_job_hour=1)
    assert first.run_once().ok
    first.close()
    runner = _runner()
    restarted = _daemon(tmp_path, runner, priority_updates_per_job_hour=1)
    assert restarted.run_once().ok
    restarted.close()
    to_job_10 = [argv for argv in runner.argvs if argv[:3] == ("scontrol", "update", "JobId=10")]
    assert to_job_10 and not any(a.startswith("Priority=") for argv in to_job_10 for a in argv)


def test_the_log_lines_and_explain_number_cycles_and_ranks_alike(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 19 (8): the JSON line's cycle was the store's id and the INFO line's the
    process's count; explain's ranks were 1-based and the JSON's 0-based."""
    first = _daemon(tmp_path, _runner())
    assert first.run_once().ok
    first.close()
    caplog.set_level("INFO")
    caplog.clear()  # the first run's lines (a logger an earlier test left at INFO)
    restarted = _daemon(tmp_path, _runner(), mode="advise")  # a new process: count restarts
    assert restarted.run_once().ok
    restarted.close()
    lines = [r.getMessage() for r in caplog.records]
    (info,) = [line for line in lines if line.startswith("cycle ")]
    decisions = [json.loads(line) for line in lines if line.startswith('{"event":"decision"')]
    assert decisions and {d["cycle"] for d in decisions} == {int(info.split()[1])} == {2}
    job = decisions[0]
    conf = tmp_path / "daemon.toml"
    conf.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n')
    shown = CliRunner().invoke(main, ["explain", job["job"], "--config", str(conf), "--json"])
    assert shown.exit_code == 0, shown.output
    last = json.loads(shown.output)["decisions"][-1]
    assert (last["cycle"], last["rank"]) == (2, job["rank"]) and job["rank"] >= 1


def test_revert_undoes_a_call_only_the_journal_saw(tmp_path: Path) -> None:
    """The daemon died after pinning job 3; once a restarted daemon recovered the call,
    revert knows to take the pin back off."""
    daemon = _daemon(tmp_path, DyingRunner(_runner(), PIN_10))
    with pytest.raises(Killed):
        daemon.run_once()
    shown = _squeue_showing({3: {"required_nodes": "a100-03", "eligible_time": int(NOW) - 1}})
    after = _runner()
    after.answer(SQUEUE, shown)
    restarted = _daemon(tmp_path, after, mode="advise")  # advise: it places nothing itself
    try:
        assert restarted.run_once().ok
        found = changes(restarted.store, None, None)
        assert found["3"].before["ReqNodeList"] == ""  # what Slurm showed before the pin
        steps = revert(CliSlurmClient(runner=after), found, dry_run=False, now=NOW)
        (undo,) = [step for step in steps if step.job_id == "3" and step.sent]
        assert "ReqNodeList=" in undo.sent[-1].argv
    finally:
        restarted.close(retire=False)


def test_a_pinned_job_slurm_does_not_start_is_counted_and_explained(tmp_path: Path) -> None:
    """Issue 19 (7): pinned jobs waited 45-60 s behind an unpinned one while the summary said
    "placed"; now a gauge, the INFO line and explain show them."""
    runner = _runner()
    clock = [NOW]
    config = _config(tmp_path)
    daemon = Daemon(lambda: config, runner=runner, clock=lambda: clock[0])
    assert daemon.run_once().ok  # pins jobs 3 and 10
    runner.answer(SQUEUE, _squeue_showing({
        3: {"required_nodes": "a100-03", "eligible_time": int(NOW) - 1, "state_reason": "Priority"},
    }))
    clock[0] += 45
    result = daemon.run_once()
    assert result.ok and result.summary is not None
    assert (result.summary.pinned_waiting, result.summary.pinned_oldest_s) == (1, 45.0)
    registry = daemon.metrics.registry
    assert registry.get_sample_value("slurm_rl_pinned_not_started_jobs") == 1
    assert registry.get_sample_value("slurm_rl_pinned_not_started_oldest_seconds") == 45
    assert registry.get_sample_value("slurm_rl_fairness_jain_index") is not None
    daemon.close()
    conf = tmp_path / "daemon.toml"
    conf.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n')
    shown = CliRunner().invoke(main, ["explain", "3", "--config", str(conf)])
    assert shown.exit_code == 0, shown.output
    assert "pinned 45 s ago and not started yet (Slurm's reason: Priority)" in shown.output


def test_a_restarted_daemon_owns_the_pin_its_journal_holds_from_before_the_kill(
        tmp_path: Path) -> None:
    """The pin went out, then the process died before the cycle was stored. The restarted
    daemon's source asks the store whose ``ReqNodeList`` the job shows before its actuator
    stores the journal's leftovers; asked once per run, the pin counted as the user's for
    the whole run (the job set aside as ``nodelist``, never placed or moved again)."""
    daemon = _daemon(tmp_path, DyingRunner(_runner(), PIN_10))
    with pytest.raises(Killed):
        daemon.run_once()
    after = _runner()
    after.answer(SQUEUE, _squeue_showing({3: {"required_nodes": "a100-03",
                                              "eligible_time": int(NOW) - 1}}))
    restarted = _daemon(tmp_path, after)
    try:
        assert restarted.run_once().ok and restarted.run_once().ok
        assert restarted.parts.source.set_aside.get("3") != "nodelist"
        assert restarted.parts.actuator.pins.values["3"] == frozenset({"a100-03"})
    finally:
        restarted.close()
