"""Golden-file tests of the newer Slurm layouts, on output recorded from real Slurm 24.11.5
and 26.05.5 (tests/fixtures/slurm/record_compose.py, on the docker-compose cluster:
a100-[01-04] + v100-[01-04] as the native dev cluster, a100-04 DOWN and v100-04 DRAIN when
recorded), and of how the client picks a layout from ``sinfo --version``
(slurm_rl/slurm/layouts.py)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from slurm_rl.config import DaemonConfig
from slurm_rl.core import Placement
from slurm_rl.daemon.accounting import parse_sacct
from slurm_rl.daemon.runner import Daemon
from slurm_rl.ops.prometheus import error_kind
from slurm_rl.slurm.client import CliSlurmClient, parse_version
from slurm_rl.slurm.errors import SlurmUnavailableError
from slurm_rl.slurm.layouts import SlurmVersionError, layout_for
from slurm_rl.slurm.ownership import pin_ledger
from slurm_rl.slurm.parse import parse_jobs, parse_nodes
from slurm_rl.slurm.plan import classify_error
from slurm_rl.slurm.reservations import parse_reservations
from slurm_rl.slurm.scontrol import parse_jobs_text, parse_nodes_text
from slurm_rl.slurm.source import SlurmSource
from tests.slurm.fakes import FakeRunner, fixture_text, recorded_answer, recorded_cluster

NEWER = ("24.11", "26.05")
NODES = ["a100-01", "a100-02", "a100-03", "a100-04", "v100-01", "v100-02", "v100-03", "v100-04"]
FORMATS = {"24.11": ((24, 11, 5), "data_parser/v0.0.42"),
           "26.05": ((26, 5, 5), "data_parser/v0.0.45")}


def _roles(version: str, name: str = "jobs.json") -> dict[str, str]:
    roles: dict[str, str] = json.loads(fixture_text(version, name))
    return roles


@pytest.mark.parametrize("version", NEWER)
def test_recorded_squeue_fields(version: str) -> None:
    report = parse_jobs(fixture_text(version, "squeue.json"))
    roles = _roles(version)
    jobs = {j.job_id: j for j in report.jobs}
    assert (report.meta.version, report.meta.data_format) == FORMATS[version]
    assert report.meta.cluster == "slurmrl" and report.unreadable == ()
    running = jobs[roles["running_multinode"]]
    assert (running.state, running.user, running.partition) == ("RUNNING", "alice", "gpu")
    assert running.nodes == running.required_nodes == ("a100-01", "a100-02")
    assert running.gres_detail == ("gpu:a100:4(IDX:0-3)", "gpu:a100:4(IDX:0-3)")
    assert running.tres_per_node == "gres/gpu:a100:4" and running.time_limit_s == 30 * 60
    prio = jobs[roles["pending_prio"]]
    assert (prio.state, prio.reason, prio.priority) == ("PENDING", "BeginTime", 5000)
    assert prio.admin_comment.startswith("slurm-rl:deferred:")
    assert prio.eligible_time is not None and prio.submit_time is not None
    assert prio.eligible_time - prio.submit_time == 3600
    assert jobs[roles["user_begin"]].admin_comment == ""
    assert jobs[roles["pending_unlimited"]].time_limit_s is None
    assert jobs[roles["pending_unlimited"]].tres_per_job == "gres/gpu:4"
    assert jobs[roles["pending_pinned"]].required_nodes == ("v100-03",)
    assert jobs[roles["pending_pinned"]].tres_per_task == "gres/gpu=1"
    # Finished jobs are there only because the client asks for --states=all.
    assert (jobs[roles["failed"]].state, jobs[roles["failed"]].exit_code) == ("FAILED", 3)
    assert jobs[roles["killed"]].exit_code == 128 + 9  # SIGKILL
    assert jobs[roles["killed"]].reason == "RaisedSignal"
    assert jobs[roles["completed"]].is_finished and jobs[roles["completed"]].exit_code == 0
    assert jobs[roles["cancelled_pending"]].nodes == ()
    assert jobs[roles["array_pending"]].array_pending
    het = [j for j in report.jobs if j.het_job]
    assert len(het) == 2 and roles["het_job"] in {j.job_id for j in het}
    assert all(j.nice == 0 for j in report.jobs)


@pytest.mark.parametrize("version", NEWER)
def test_recorded_nodes_from_scontrol_and_sinfo_agree(version: str) -> None:
    flat = {n.name: n for n in parse_nodes(fixture_text(version, "scontrol_show_nodes.json"),
                                           "scontrol show nodes --json").nodes}
    assert list(flat) == NODES
    assert flat["a100-01"].states == ("MIXED",) and flat["a100-01"].features == ("a100",)
    assert flat["a100-01"].gres_used == "gpu:a100:4(IDX:0-3)"
    assert flat["a100-04"].states == ("DOWN",) and not flat["a100-04"].usable
    assert flat["v100-04"].states == ("IDLE", "DRAIN") and not flat["v100-04"].usable
    assert flat["v100-01"].partitions == ("gpu",)
    grouped = {n.name: n for n in parse_nodes(fixture_text(version, "sinfo.json")).nodes}
    assert set(grouped) == set(flat)
    for name, node in grouped.items():  # sinfo's groups carry no features
        assert (node.states, node.gres, node.gres_used, node.partitions) == (
            flat[name].states, flat[name].gres, flat[name].gres_used, flat[name].partitions)


def _source(version: str) -> SlurmSource:
    pins = pin_ledger()  # the recorder's pins, set as the daemon sets them
    for job in parse_jobs(fixture_text(version, "squeue.json")).jobs:
        pins.remember(job.job_id, ",".join(job.required_nodes))
    client = CliSlurmClient(runner=recorded_cluster(version))
    return SlurmSource(client, clock=lambda: 1_800_000_000.0, pins=pins)


@pytest.mark.parametrize("version", NEWER)
def test_recorded_snapshot(version: str) -> None:
    roles = _roles(version)
    source = _source(version)
    snap = source.snapshot()
    assert snap.cluster.name == "slurmrl"
    assert [n.name for n in snap.cluster.nodes] == NODES
    assert snap.free_gpus == (4, 4, 8, 0, 1, 4, 4, 0)  # a100-04 DOWN, v100-04 DRAIN
    pending = {j.job_id: j for j in snap.pending}
    assert list(pending) == [roles[k] for k in ("pending_prio", "pending_pinned", "user_begin",
                                                "pending_unlimited")]  # not array nor het
    big = pending[roles["pending_prio"]]
    assert (big.num_gpus, big.gpu_type, big.num_nodes, big.gpus_per_node) == (8, "a100", 1, 8)
    per_task = pending[roles["pending_pinned"]]
    assert (per_task.num_gpus, per_task.num_nodes, per_task.gpus_per_node) == (2, None, None)
    spread = pending[roles["pending_unlimited"]]
    assert (spread.num_gpus, spread.num_nodes, spread.time_limit) == (4, 2, None)
    running = {r.job.job_id: r for r in snap.running}
    assert set(running) == {roles["running_multinode"], roles["running_gpus"]}
    assert running[roles["running_multinode"]].placement == Placement(
        ("a100-01", "a100-02"), (4, 4))
    assert running[roles["running_gpus"]].placement == Placement(("v100-01",), (3,))
    finished = {f.job.job_id: f for f in snap.finished}
    assert set(finished) == {roles["failed"], roles["killed"], roles["completed"]}
    assert finished[roles["killed"]].exit_code == 137
    assert finished[roles["completed"]].placement == Placement(("a100-01",), (2,))
    assert source.snapshot().finished == ()  # reported once


@pytest.mark.parametrize("version", NEWER)
def test_recorded_text_views_agree_with_the_json(version: str) -> None:
    squeue = {j.job_id: j for j in parse_jobs(fixture_text(version, "squeue.json")).jobs}
    text = {j.job_id: j for j in parse_jobs_text(fixture_text(version,
                                                              "scontrol_show_job.txt"))}
    for job_id, job in text.items():
        if job_id in squeue:
            assert job.state == squeue[job_id].state, job_id
            assert job.required_nodes == squeue[job_id].required_nodes, job_id
    multi = parse_nodes_text(fixture_text(version, "scontrol_show_node.txt"))
    one = parse_nodes_text(fixture_text(version, "scontrol_show_node_oneline.txt"))
    assert [n.name for n in multi] == [n.name for n in one] == NODES
    assert [n.gres_used for n in multi] == [n.gres_used for n in one]
    assert {n.name: n.state for n in one}["v100-04"] == "IDLE+DRAIN"


@pytest.mark.parametrize("version", NEWER)
def test_recorded_reservations_sacct_and_waiting(version: str) -> None:
    now, later = parse_reservations(fixture_text(version, "reservations.txt"))
    assert (now.name, now.nodes, now.state) == ("now", ("a100-03",), "ACTIVE")
    assert (later.nodes, later.state, "MAINT" in later.flags) == (
        ("v100-01", "v100-02"), "INACTIVE", True)
    roles = _roles(version)
    done = {j.job_id: j for j in parse_sacct(fixture_text(version, "sacct.txt"))}
    assert set(done) == {roles["failed"], roles["killed"], roles["completed"]}  # not running
    assert (done[roles["failed"]].exit_code, done[roles["killed"]].exit_code) == (3, 137)
    waiting = _roles(version, "waiting_jobs.json")
    runner = FakeRunner()
    runner.answers.update(recorded_cluster(version).answers)
    recorded = fixture_text(version, "squeue_waiting.json")
    runner.answer(layout_for(FORMATS[version][0]).jobs_argv, recorded)
    # the clock of the recording: the "later" job's begin time is an hour after it, and on
    # the real clock it would pass (the test failed an hour after the fixture was recorded)
    at = float(json.loads(recorded)["last_update"]["number"])
    source = SlurmSource(CliSlurmClient(runner=runner), clock=lambda: at)
    snap = source.snapshot()
    assert [j.job_id for j in snap.pending] == [waiting["plain"]]
    assert source.set_aside == {waiting["child"]: "dependency", waiting["held"]: "held",
                                waiting["later"]: "begin_time"}


@pytest.mark.parametrize("version", NEWER)
@pytest.mark.parametrize(("name", "kind"), [("update_vanished.json", "vanished"),
                                            ("update_permission.json", "permission"),
                                            ("update_batch_partial.json", "vanished")])
def test_recorded_update_answers_are_classified(version: str, name: str, kind: str) -> None:
    answer = recorded_answer(version, name)
    assert not answer.ok and classify_error(answer.stderr) == kind


@pytest.mark.parametrize("version", NEWER)
@pytest.mark.parametrize("name", ["unreachable", "munge_down"])
@pytest.mark.parametrize("read", ["jobs", "nodes"])
def test_recorded_slurmctld_or_munge_down_is_unreachable(version: str, name: str,
                                                         read: str) -> None:
    """24.11 and 26.05 exit 1 with the reason on stderr (22.05 exited 0, the failure only in
    the JSON's errors)."""
    runner = recorded_cluster(version)
    what = "squeue" if read == "jobs" else "nodes"
    answer = recorded_answer(version, f"{name}_{what}.json")
    runner.answers[answer.argv] = answer
    with pytest.raises(SlurmUnavailableError) as caught:
        getattr(CliSlurmClient(runner=runner), read)()
    assert error_kind(caught.value) == "unreachable"
    assert "\n" not in str(caught.value)


# -- layouts -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["22.05", *NEWER])
def test_the_recorded_version_picks_its_layout(version: str) -> None:
    found = parse_version(fixture_text(version, "sinfo_version.txt"))
    layout = layout_for(found)
    line = layout.describe()
    assert line.startswith(f"Slurm {version}.") and "recorded on" in line
    client = CliSlurmClient(runner=recorded_cluster(version))
    client.jobs(), client.nodes()
    assert client.layout() == layout


def test_an_unrecorded_release_in_range_is_read_and_says_so() -> None:
    assert "not recorded" in layout_for((25, 5, 2)).describe()
    assert layout_for((23, 2, 7)).jobs_argv == ("squeue", "--json", "--states=all")


@pytest.mark.parametrize("text", ["slurm 27.05.0\n", "slurm-wlm 21.08.8\n", "slurm 24.08.1\n"])
def test_an_unknown_release_is_one_line_and_nothing_is_parsed(text: str) -> None:
    runner = FakeRunner()
    runner.answer(("sinfo", "--version"), text)
    with pytest.raises(SlurmVersionError) as caught:
        CliSlurmClient(runner=runner).jobs()
    message = str(caught.value)
    assert "is not a release slurm-rl reads" in message and "\n" not in message
    assert error_kind(caught.value) == "output"
    assert runner.argvs == [("sinfo", "--version")]  # no squeue was run, nothing parsed


def test_the_daemon_says_which_layout_at_start(tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    config = DaemonConfig(mode="shadow", state_dir=tmp_path, interval_s=0.01)
    daemon = Daemon(lambda: config, runner=recorded_cluster("26.05"), clock=time.time)
    daemon.request_stop()
    with caplog.at_level(logging.INFO):
        assert daemon.run() == 0
    assert any("Slurm 26.05.5: JSON layout data_parser (recorded on 26.05.5)" in m
               for m in caplog.messages)


def test_the_daemon_refuses_an_unknown_release_in_one_line(tmp_path: Path) -> None:
    runner = recorded_cluster("26.05")
    runner.answer(("sinfo", "--version"), "slurm 27.11.0\n")
    config = DaemonConfig(mode="shadow", state_dir=tmp_path, interval_s=0.01)
    daemon = Daemon(lambda: config, runner=runner, clock=time.time)
    with pytest.raises(SlurmVersionError, match="Slurm 27.11.0 is not a release"):
        daemon.run()
    daemon.close()
