"""Outcomes from Slurm's jobcomp/filetxt log: lines slurmctld 22.05.8 wrote parse like squeue's
outcomes, and jobs squeue has forgotten get their outcome from the log (across a restart and
a rotation). Only the subprocess boundary is fake, as in tests/test_daemon.py."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import text

from slurm_rl.daemon.jobcomp import parse_line
from slurm_rl.daemon.runner import Daemon
from tests.slurm.fakes import fixture_text
from tests.test_daemon import ROLES, SQUEUE, Clock, _cluster, _config

# Lines slurmctld 22.05.8 wrote on the dev cluster (local time; the daemon reads them as such).
JOBCOMP_LINES = {
    "multi": "JobId={id} UserId=alice(1001) GroupId=alice(1001) Name=wrap JobState=COMPLETED "
    "Partition=gpu TimeLimit=5 StartTime=2026-11-29T17:25:08 EndTime=2026-11-29T17:25:09 "
    "NodeList=a100-[01-02] NodeCnt=2 ProcCnt=2 WorkDir=/tmp/jc/cluster/jobs ReservationName= "
    "Tres=cpu=2,mem=125G,node=2,billing=2 Account= QOS= WcKey= Cluster=unknown "
    "SubmitTime=2026-11-29T17:25:06 EligibleTime=2026-11-29T17:25:06 DerivedExitCode=0:0 "
    "ExitCode=0:0 ",
    "failed": "JobId={id} UserId=bob(1002) GroupId=bob(1002) Name=wrap JobState=FAILED "
    "Partition=gpu TimeLimit=5 StartTime=2026-11-29T17:25:08 EndTime=2026-11-29T17:25:08 "
    "NodeList=v100-01 NodeCnt=1 ProcCnt=1 WorkDir=/tmp/jc/cluster/jobs ReservationName= "
    "Tres=cpu=1,mem=62.50G,node=1,billing=1 Account= QOS= WcKey= Cluster=unknown "
    "SubmitTime=2026-11-29T17:25:06 EligibleTime=2026-11-29T17:25:06 DerivedExitCode=0:0 "
    "ExitCode=3:0 ",
    "killed": "JobId={id} UserId=bob(1002) GroupId=bob(1002) Name=wrap JobState=FAILED "
    "Partition=gpu TimeLimit=5 StartTime=2026-11-29T17:25:48 EndTime=2026-11-29T17:25:48 "
    "NodeList=a100-01 NodeCnt=1 ProcCnt=1 WorkDir=/tmp/jc/cluster/jobs ReservationName= "
    "Tres=cpu=1,mem=62.50G,node=1,billing=1 Account= QOS= WcKey= Cluster=unknown "
    "SubmitTime=2026-11-29T17:25:47 EligibleTime=2026-11-29T17:25:47 DerivedExitCode=0:0 "
    "ExitCode=0:9 ",
    "never_ran": "JobId={id} UserId=alice(1001) GroupId=alice(1001) Name=wrap "
    "JobState=CANCELLED Partition=gpu TimeLimit=5 StartTime=2026-11-29T17:25:51 "
    "EndTime=2026-11-29T17:25:51 NodeList=(null) NodeCnt=0 ProcCnt=0 "
    "WorkDir=/tmp/jc/cluster/jobs ReservationName= Tres=cpu=1,mem=62.50G,node=1,billing=1 "
    "Account= QOS= WcKey= Cluster=unknown SubmitTime=2026-11-29T17:25:47 "
    "EligibleTime=2026-11-29T17:26:47 DerivedExitCode=0:0 ExitCode=0:0 ",
}


def test_jobcomp_lines_parse_like_squeue_outcomes() -> None:
    multi = parse_line(JOBCOMP_LINES["multi"].format(id=1))
    assert multi is not None
    assert (multi.job_id, multi.state, multi.nodes, multi.exit_code) == (
        "1", "COMPLETED", ("a100-01", "a100-02"), 0)
    assert multi.end_time - multi.start_time == 1.0
    failed = parse_line(JOBCOMP_LINES["failed"].format(id=2))
    killed = parse_line(JOBCOMP_LINES["killed"].format(id=3))
    assert failed is not None and failed.exit_code == 3
    assert killed is not None and killed.exit_code == 128 + 9
    assert parse_line(JOBCOMP_LINES["never_ran"].format(id=4)) is None
    assert parse_line("not a jobcomp line") is None


def _without_jobs(*job_ids: str) -> str:
    """squeue once those jobs have passed MinJobAge: they are no longer listed."""
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    doc["jobs"] = [job for job in doc["jobs"] if str(job["job_id"]) not in job_ids]
    return json.dumps(doc)


def test_jobs_squeue_forgot_get_their_outcome_from_jobcomp(tmp_path: Path) -> None:
    log = tmp_path / "jobcomp.txt"
    log.write_text(JOBCOMP_LINES["multi"].format(id=ROLES["pending_prio"]) + "\n")  # old
    runner = _cluster()
    config = _config(tmp_path, jobcomp_path=log)
    daemon = Daemon(lambda: config, runner=runner, clock=Clock())
    # The recording pinned this job as the daemon pins one: this daemon's own pin, so the job
    # is pending for it (a pin it did not set would set the job aside).
    daemon.parts.source.pins.remember(ROLES["pending_pinned"], "v100-03")
    assert daemon.run_once().ok  # the daemon sees the pending jobs; old log lines are skipped
    assert daemon.store.outcome_for("slurm", ROLES["pending_prio"]) is None
    seen, unseen = ROLES["pending_prio"], "4242"
    later, rotated = ROLES["pending_unlimited"], ROLES["pending_pinned"]
    runner.answer(SQUEUE, _without_jobs(seen, later, rotated))
    with log.open("a") as handle:
        handle.write(JOBCOMP_LINES["failed"].format(id=seen) + "\n")
        handle.write(JOBCOMP_LINES["failed"].format(id=unseen) + "\n")
        handle.write(JOBCOMP_LINES["killed"].format(id=later))  # a line still being written
    assert daemon.run_once().ok
    outcome = daemon.store.outcome_for("slurm", seen)
    assert outcome is not None
    assert (outcome.source, outcome.state, outcome.exit_code, outcome.nodes) == (
        "jobcomp", "FAILED", 3, "v100-01")
    assert daemon.store.outcome_for("slurm", unseen) is None
    assert daemon.store.outcome_for("slurm", later) is None
    with daemon.store.engine.connect() as connection:
        made_up = connection.execute(text("SELECT count(*) FROM jobs WHERE job_id = '4242'"))
        assert made_up.scalar() == 0  # a job the daemon never saw: its request is unknown
    daemon.close(retire=False)
    # A restart carries on where the last run stopped, including the line that was not
    # finished then; a rotated log is read from its start.
    with log.open("a") as handle:
        handle.write("\n")
    again = Daemon(lambda: config, runner=runner, clock=Clock())
    assert again.run_once().ok
    killed = again.store.outcome_for("slurm", later)
    assert killed is not None and killed.exit_code == 137 and killed.nodes == "a100-01"
    log.unlink()
    log.write_text(JOBCOMP_LINES["multi"].format(id=rotated) + "\n")
    assert again.run_once().ok
    pinned = again.store.outcome_for("slurm", rotated)
    assert pinned is not None and pinned.nodes == "a100-01,a100-02"
    again.close(retire=False)
