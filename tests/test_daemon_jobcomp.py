"""Outcomes from Slurm's jobcomp/filetxt log: lines slurmctld 22.05.8 wrote parse like squeue's
outcomes, and jobs squeue has forgotten get their outcome from the log (across a restart and
a rotation). Only the subprocess boundary is fake, as in tests/test_daemon.py."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import text

from slurm_rl.daemon.jobcomp import parse_line, parse_lines
from slurm_rl.daemon.runner import Daemon
from tests.slurm.fakes import fixture_text
from tests.test_daemon import ROLES, SQUEUE, Clock, _cluster, _config

# Lines slurmctld 22.05.8 wrote on the dev cluster (local time; the daemon reads them as such).
JOBCOMP_LINES = {
    "multi": "JobId={id} UserId={user}(1001) GroupId={user}(1001) Name=wrap JobState=COMPLETED "
    "Partition=gpu TimeLimit=5 StartTime=2026-11-29T17:25:08 EndTime=2026-11-29T17:25:09 "
    "NodeList=a100-[01-02] NodeCnt=2 ProcCnt=2 WorkDir=/tmp/jc/cluster/jobs ReservationName= "
    "Tres=cpu=2,mem=125G,node=2,billing=2 Account= QOS= WcKey= Cluster=unknown "
    "SubmitTime=2026-11-29T17:25:06 EligibleTime=2026-11-29T17:25:06 DerivedExitCode=0:0 "
    "ExitCode=0:0 ",
    "failed": "JobId={id} UserId={user}(1002) GroupId={user}(1002) Name=wrap JobState=FAILED "
    "Partition=gpu TimeLimit=5 StartTime=2026-11-29T17:25:08 EndTime=2026-11-29T17:25:08 "
    "NodeList=v100-01 NodeCnt=1 ProcCnt=1 WorkDir=/tmp/jc/cluster/jobs ReservationName= "
    "Tres=cpu=1,mem=62.50G,node=1,billing=1 Account= QOS= WcKey= Cluster=unknown "
    "SubmitTime=2026-11-29T17:25:06 EligibleTime=2026-11-29T17:25:06 DerivedExitCode=0:0 "
    "ExitCode=3:0 ",
    "killed": "JobId={id} UserId={user}(1002) GroupId={user}(1002) Name=wrap JobState=FAILED "
    "Partition=gpu TimeLimit=5 StartTime=2026-11-29T17:25:48 EndTime=2026-11-29T17:25:48 "
    "NodeList=a100-01 NodeCnt=1 ProcCnt=1 WorkDir=/tmp/jc/cluster/jobs ReservationName= "
    "Tres=cpu=1,mem=62.50G,node=1,billing=1 Account= QOS= WcKey= Cluster=unknown "
    "SubmitTime=2026-11-29T17:25:47 EligibleTime=2026-11-29T17:25:47 DerivedExitCode=0:0 "
    "ExitCode=0:9 ",
    "never_ran": "JobId={id} UserId={user}(1001) GroupId={user}(1001) Name=wrap "
    "JobState=CANCELLED Partition=gpu TimeLimit=5 StartTime=2026-11-29T17:25:51 "
    "EndTime=2026-11-29T17:25:51 NodeList=(null) NodeCnt=0 ProcCnt=0 "
    "WorkDir=/tmp/jc/cluster/jobs ReservationName= Tres=cpu=1,mem=62.50G,node=1,billing=1 "
    "Account= QOS= WcKey= Cluster=unknown SubmitTime=2026-11-29T17:25:47 "
    "EligibleTime=2026-11-29T17:26:47 DerivedExitCode=0:0 ExitCode=0:0 ",
}


USERS = {str(job["job_id"]): job["user_name"]
         for job in json.loads(fixture_text("22.05", "squeue.json"))["jobs"]}


def line(kind: str, job_id: str, user: str | None = None) -> str:
    """A recorded line of ``kind`` for ``job_id``, of the user who submitted it."""
    return JOBCOMP_LINES[kind].format(id=job_id, user=user or USERS.get(job_id, "alice"))


def test_jobcomp_lines_parse_like_squeue_outcomes() -> None:
    multi = parse_line(line("multi", "1"))
    assert multi is not None
    assert (multi.job_id, multi.state, multi.nodes, multi.exit_code) == (
        "1", "COMPLETED", ("a100-01", "a100-02"), 0)
    assert multi.end_time - multi.start_time == 1.0
    failed = parse_line(line("failed", "2"))
    killed = parse_line(line("killed", "3"))
    assert failed is not None and failed.exit_code == 3
    assert killed is not None and killed.exit_code == 128 + 9
    assert parse_line(line("never_ran", "4")) is None
    assert parse_line("not a jobcomp line") is None


def _without_jobs(*job_ids: str) -> str:
    """squeue once those jobs have passed MinJobAge: they are no longer listed."""
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    doc["jobs"] = [job for job in doc["jobs"] if str(job["job_id"]) not in job_ids]
    return json.dumps(doc)


def test_jobs_squeue_forgot_get_their_outcome_from_jobcomp(tmp_path: Path) -> None:
    log = tmp_path / "jobcomp.txt"
    log.write_text(line("multi", ROLES["pending_prio"]) + "\n")  # old
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
        handle.write(line("failed", seen) + "\n")
        handle.write(line("failed", unseen) + "\n")
        handle.write(line("killed", later))  # a line still being written
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
    log.write_text(line("multi", rotated) + "\n")
    assert again.run_once().ok
    pinned = again.store.outcome_for("slurm", rotated)
    assert pinned is not None and pinned.nodes == "a100-01,a100-02"
    again.close(retire=False)


# ----- a user's own fields cannot forge another job's outcome (issue 18, finding 2) -------

def _named(kind: str, job_id: str, name: str) -> str:
    return line(kind, job_id).replace(" Name=wrap ", f" Name={name} ")


def test_a_field_name_inside_a_job_name_forges_nothing() -> None:
    """Later pairs won: a name holding `` JobId=7`` filed the line under job 7."""
    assert parse_line(_named("failed", "4", "x JobId=7")) is None
    assert parse_line(_named("failed", "4", "x\tNodeList=v100-09")) is None
    work_dir = line("failed", "4").replace("WorkDir=/tmp/jc/cluster/jobs",
                                           "WorkDir=/tmp/x ExitCode=0:0")
    assert parse_line(work_dir) is None
    assert parse_line(line("failed", "4")) is not None  # the untouched line is read


def test_a_newline_in_a_job_name_forges_no_line() -> None:
    """slurmctld writes a name's newline as it is: ``sbatch -J $'x\\nJobId=1 ...'`` made a
    whole line for another user's job 1 (still running)."""
    forged = line("multi", "1")  # alice's job, as the attacker wrote it
    text = _named("failed", "4", f"x\n{forged}")  # bob's job 4, its name ending in a line
    records = parse_lines(text.split("\n"))
    assert records == []  # bob's split line and the forged one with the rest of it
    # Even a forged line that parses on its own is dropped when what follows it is the
    # rest of a split line.
    alone = parse_lines([forged, "JobState=FAILED Partition=gpu DerivedExitCode=0:0"])
    assert alone == []


def test_only_the_first_line_for_a_job_counts() -> None:
    real, forged = line("failed", "3"), line("multi", "3")
    (record,) = parse_lines([real, forged])
    assert record.state == "FAILED"


def test_an_outcome_is_never_made_for_another_users_job_or_an_active_one() -> None:
    from slurm_rl.core import Job
    from slurm_rl.daemon.jobcomp import outcomes

    known = {"3": Job(job_id="3", submit_time=0.0, num_gpus=2, user="alice"),
             "1": Job(job_id="1", submit_time=0.0, num_gpus=2, user="alice")}
    as_bob = parse_line(line("failed", "3", user="bob"))
    running = parse_line(line("failed", "1"))
    assert as_bob is not None and running is not None
    assert outcomes([as_bob], known) == []
    assert outcomes([running], known, active={"1"}) == []
    assert len(outcomes([running], known)) == 1


def test_the_daemon_stores_no_outcome_a_user_forged(tmp_path: Path) -> None:
    """The attack as it was made on the dev cluster: bob's job 4 ends with a name holding a
    newline and a COMPLETED line for alice's job 3, which the daemon saw pending and squeue
    still shows; the daemon stored "COMPLETED" for job 3, and the real outcome was ignored
    later."""
    log = tmp_path / "jobcomp.txt"
    log.write_text("")
    runner = _cluster()
    config = _config(tmp_path, jobcomp_path=log)
    daemon = Daemon(lambda: config, runner=runner, clock=Clock())
    assert daemon.run_once().ok
    attacker, victim = ROLES["pending_pinned"], ROLES["pending_prio"]
    assert USERS[attacker] != USERS[victim]
    runner.answer(SQUEUE, _without_jobs(attacker))
    with log.open("a") as handle:
        handle.write(_named("failed", attacker, f"x\n{line('multi', victim)}") + "\n")
        handle.write(line("multi", victim) + "\n")  # and a whole forged line by itself
    assert daemon.run_once().ok
    assert daemon.store.outcome_for("slurm", victim) is None
    daemon.close(retire=False)
