"""Pending jobs no decision can start are left out of the snapshot (slurm_rl/slurm/waiting.py).

The golden file ``squeue_waiting.json`` was recorded on Slurm 22.05.8
(``tests/fixtures/slurm/record_22_05.py --waiting``): a running parent, a child waiting on
it (``--dependency=afterok``), a held job (``--hold``), a job with its user's own
``--begin=now+3600`` and a plain job, deferred by the plugin. The limit and partition
reasons are not recorded here (no accounting database in the recording cluster); their
names are those of Slurm's job reason codes page.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import pytest

from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.records import SlurmJob
from slurm_rl.slurm.source import SlurmSource
from slurm_rl.slurm.waiting import waits_on
from tests.slurm.fakes import NO_RESERVATIONS, RESERVATIONS, FakeRunner, fixture_text
from tests.test_daemon import OK

ROLES: dict[str, str] = json.loads(fixture_text("22.05", "waiting_jobs.json"))
DOC: dict[str, Any] = json.loads(fixture_text("22.05", "squeue_waiting.json"))
SUBMIT = max(float(job["submit_time"]) for job in DOC["jobs"])
USER_BEGIN = next(float(j["eligible_time"]) for j in DOC["jobs"]
                  if str(j["job_id"]) == ROLES["later"])


def _runner(doc: dict[str, Any] = DOC) -> FakeRunner:
    runner = FakeRunner()
    runner.answer(("sinfo", "--version"), fixture_text("22.05", "sinfo_version.txt"))
    runner.answer(("sinfo", "--json"), fixture_text("22.05", "sinfo.json"))
    runner.answer(("squeue", "--json"), json.dumps(doc))
    runner.answer(RESERVATIONS, NO_RESERVATIONS)
    runner.default = OK
    return runner


def _source(now: float, doc: dict[str, Any] = DOC) -> SlurmSource:
    return SlurmSource(CliSlurmClient(runner=_runner(doc)), clock=lambda: now)


def test_held_dependent_and_user_begin_jobs_are_set_aside() -> None:
    source = _source(SUBMIT + 5)
    snap = source.snapshot()
    assert [j.job_id for j in snap.pending] == [ROLES["plain"]]
    assert source.set_aside == {ROLES["child"]: "dependency", ROLES["held"]: "held",
                                ROLES["later"]: "begin_time"}
    assert [r.job.job_id for r in snap.running] == [ROLES["parent"]]


def test_a_users_begin_time_that_has_passed_is_the_schedulers_again() -> None:
    source = _source(USER_BEGIN + 1)
    assert ROLES["later"] in [j.job_id for j in source.snapshot().pending]
    assert ROLES["later"] not in source.set_aside


def test_each_job_set_aside_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    source = _source(SUBMIT + 5)
    with caplog.at_level(logging.INFO, logger="slurm_rl.slurm.source"):
        source.snapshot()
        source.snapshot()
    lines = [r.getMessage() for r in caplog.records]
    assert sorted(lines) == sorted(
        f"job {ROLES[role]} left to Slurm while it waits ({kind})"
        for role, kind in (("child", "dependency"), ("held", "held"), ("later", "begin_time"))
    )


def _plain() -> SlurmJob:
    snap_source = _source(SUBMIT + 5)
    snap_source.snapshot()
    assert snap_source.last_state is not None
    job = snap_source.last_state.job(ROLES["plain"])
    assert job is not None
    return job


@pytest.mark.parametrize(("reason", "kind"), [
    ("QOSMaxGRESPerUser", "limit"),
    ("AssocGrpGRES", "limit"),
    ("MaxGRESPerAccount", "limit"),
    ("QOSNotAllowed", "limit"),
    ("PartitionDown", "configuration"),
    ("PartitionTimeLimit", "configuration"),
    ("JobHeldAdmin", "held"),
    ("DependencyNeverSatisfied", "dependency"),
    # the scheduler's to act on: waiting for GPUs, or for nodes a pin (maybe ours) names
    ("Resources", None),
    ("Priority", None),
    ("ReqNodeNotAvail", None),
    ("BadConstraints", None),
    ("BeginTime", None),  # the plugin's deferral (tagged)
])
def test_reasons(reason: str, kind: str | None) -> None:
    job = dataclasses.replace(_plain(), reason=reason)
    assert waits_on(job, SUBMIT + 5) == kind


def test_the_daemon_leaves_them_alone_and_counts_them(tmp_path: Any) -> None:
    from slurm_rl.daemon.runner import Daemon
    from tests.test_daemon import _config, _updates

    runner = _runner()
    config = _config(tmp_path)
    daemon = Daemon(lambda: config, runner=runner, clock=lambda: SUBMIT + 5)
    try:
        assert daemon.run_once().ok
        touched = {part.split("=", 1)[1] for argv in _updates(runner) for part in argv
                   if part.startswith("JobId=")}
        assert touched == {ROLES["plain"]}
        for role in ("child", "held", "later"):
            assert daemon.store.decisions_for("slurm", ROLES[role]) == []
        registry = daemon.metrics.registry
        counts = {kind: registry.get_sample_value("slurm_rl_set_aside_jobs", {"waits_on": kind})
                  for kind in ("held", "dependency", "begin_time", "limit")}
        assert counts == {"held": 1, "dependency": 1, "begin_time": 1, "limit": 0}
    finally:
        daemon.close(retire=False)


def test_a_later_begin_its_user_set_on_a_deferred_job_is_theirs() -> None:
    """The plugin's tag stays after ``scontrol update StartTime=now+1hour`` by the job's
    user (rc 0 on their own pending job); the daemon released it with ``StartTime=now``
    (a review measured it on 22.05.8). Past submit + defer_cap_s the daemon never defers,
    so such a begin is the user's: set aside, and never released."""
    from slurm_rl.core import Decision
    from slurm_rl.slurm.deferral import deferred_until
    from slurm_rl.slurm.plan import ActuatorConfig, Mode, plan

    plain = _plain()
    until = deferred_until(plain.admin_comment)  # the recording lengthened the window
    assert until is not None and plain.submit_time is not None
    end = max(until, plain.submit_time + 600.0)
    later = dataclasses.replace(plain, eligible_time=end + 3600)
    assert waits_on(later, SUBMIT + 5, defer_cap_s=600.0) == "begin_time"
    assert waits_on(later, SUBMIT + 5) is None  # no cap known: the tag's
    held = dataclasses.replace(plain, eligible_time=end)  # the plugin's or the daemon's
    assert waits_on(held, SUBMIT + 5, defer_cap_s=600.0) is None

    source = _source(SUBMIT + 5)
    source.snapshot()
    assert source.last_state is not None
    config = ActuatorConfig(mode=Mode.ENFORCE, defer_cap_s=600.0)
    for job, released in ((later, False), (held, True)):
        state = dataclasses.replace(source.last_state, managed={job.job_id: job})
        planned = plan(Decision("p", (job.job_id,)), state, config, set())
        fields = {k: v for update in planned.updates for k, v in update.fields}
        assert (fields.get("StartTime") == "now") is released, job.eligible_time
