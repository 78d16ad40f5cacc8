"""Outcomes from sacct (slurm_rl/daemon/accounting.py): the recorded 22.05.8 text output, a
bad line, and the daemon asking sacct for the jobs it decided but saw no end of. Only the
subprocess boundary is fake."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from slurm_rl.daemon.accounting import parse_sacct
from slurm_rl.slurm.errors import SlurmOutputError, SlurmTimeoutError
from slurm_rl.slurm.proc import CommandResult
from slurm_rl.slurm.scontrol import parse_local_time
from tests.slurm.fakes import fixture_text
from tests.test_daemon import NOW, ROLES, _cluster, make_daemon  # noqa: F401


def test_the_recorded_output_gives_the_finished_jobs() -> None:
    found = {job.job_id: job for job in parse_sacct(fixture_text("22.05", "sacct.txt"))}
    assert set(found) == {"1", "2", "4", "5"}  # 3 still runs
    assert {k: (j.state, j.exit_code) for k, j in found.items()} == {
        "1": ("COMPLETED", 0), "2": ("FAILED", 3), "4": ("FAILED", 137), "5": ("CANCELLED", 0)}
    assert found["1"].nodes == ("a100-01",)
    assert found["1"].start_time == parse_local_time("2026-11-30T06:03:03")
    assert found["1"].end_time == parse_local_time("2026-11-30T06:03:04")


def test_a_line_with_the_wrong_fields_is_one_clear_error() -> None:
    with pytest.raises(SlurmOutputError, match=r"^sacct:2: expected 6 '\|'-separated fields"):
        parse_sacct("1|COMPLETED|2026-11-30T06:03:03|2026-11-30T06:03:04|a100-01|0:0\n"
                    "2|FAILED|2026-11-30T06:03:03\n")


class SacctAnswers:
    """The recorded cluster's runner, with every sacct call answered by ``stdout`` (and
    kept in ``calls``)."""

    def __init__(self, inner: Any, stdout: str, rc: int = 0, stderr: str = "") -> None:
        self.inner, self.result = inner, (rc, stdout, stderr)
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        if argv[0] != "sacct":
            return self.inner(argv, timeout_s)  # type: ignore[no-any-return]
        self.calls.append(tuple(argv))
        return CommandResult(tuple(argv), *self.result)


def _forgotten(runner: Any, job_id: str) -> None:
    """squeue no longer shows ``job_id`` (it ended longer than MinJobAge ago)."""
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    doc["jobs"] = [job for job in doc["jobs"] if str(job["job_id"]) != job_id]
    runner.inner.answer(("squeue", "--json"), json.dumps(doc))


def test_the_daemon_takes_the_outcomes_squeue_forgot_from_sacct(
    make_daemon: Any,  # noqa: F811
) -> None:
    placed = ROLES["pending_prio"]
    line = f"{placed}|COMPLETED|2026-11-30T06:03:03|2026-11-30T06:33:03|a100-03|0:0\n"
    runner = SacctAnswers(_cluster(), line + "999|FAILED|2026-11-30T06:03:03|"
                          "2026-11-30T06:03:04|a100-01|3:0\n")
    calls = runner.calls
    daemon, _, clock = make_daemon(runner, accounting_outcomes=True, accounting_every_s=600)
    assert daemon.run_once().ok  # decides; every decided job is still in squeue: no call
    assert calls == []
    _forgotten(runner, placed)
    clock.now += 600
    assert daemon.run_once().ok
    assert len(calls) == 1 and f"--jobs={placed}" in calls[0]
    outcome = daemon.store.outcome_for("slurm", placed)
    assert outcome is not None and (outcome.source, outcome.state, outcome.nodes) == (
        "sacct", "COMPLETED", "a100-03")
    assert daemon.store.outcome_for("slurm", "999") is None  # never decided by the daemon
    for _ in range(2):
        clock.now += 600
        assert daemon.run_once().ok
    assert len(calls) == 1  # it has its outcome now: nothing left to ask


def test_no_slurmdbd_is_one_warning_and_the_cycles_go_on(
    make_daemon: Any, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    runner = SacctAnswers(_cluster(), "", rc=1,
                          stderr="sacct: error: Slurm accounting storage is disabled\n")
    calls = runner.calls
    daemon, _, clock = make_daemon(runner, accounting_outcomes=True, accounting_every_s=1)
    assert daemon.run_once().ok
    _forgotten(runner, ROLES["pending_prio"])
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            clock.now += 5
            assert daemon.run_once().ok
    warnings = [r.getMessage() for r in caplog.records if "sacct" in r.getMessage()]
    assert len(calls) == 3 and warnings == [
        "outcomes from sacct not read (is slurmdbd running?): sacct: Slurm accounting storage "
        "is disabled"]


def test_a_sacct_that_does_not_answer_costs_no_cycle(
    make_daemon: Any, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    class Hanging(SacctAnswers):
        def __call__(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
            if argv[0] == "sacct":
                self.calls.append(tuple(argv))
                raise SlurmTimeoutError(argv, timeout_s)
            return super().__call__(argv, timeout_s)

    runner = Hanging(_cluster(), "")
    daemon, _, clock = make_daemon(runner, accounting_outcomes=True, accounting_every_s=1)
    assert daemon.run_once().ok
    _forgotten(runner, ROLES["pending_prio"])
    with caplog.at_level(logging.WARNING):
        clock.now += 5
        assert daemon.run_once().ok
    assert len(runner.calls) == 1
    assert any("did not answer within" in r.getMessage() for r in caplog.records)


def test_after_a_reload_the_reader_reads_the_new_source_on_the_old_schedule(
    make_daemon: Any,  # noqa: F811
) -> None:
    runner = SacctAnswers(_cluster(), "")
    daemon, _, clock = make_daemon(runner, accounting_outcomes=True, accounting_every_s=600)
    assert daemon.run_once().ok
    before = daemon.recorder.accounting
    assert before is not None and daemon.reload()
    after = daemon.recorder.accounting
    assert after is not None and after is not before and after is daemon.parts.accounting
    assert after.clock_due == before.clock_due
    _forgotten(runner, ROLES["pending_prio"])
    clock.now += 600
    assert daemon.run_once().ok  # the new source's squeue: the forgotten job is asked about
    assert len(runner.calls) == 1 and f"--jobs={ROLES['pending_prio']}" in runner.calls[0]
