"""The daemon against a real Slurm: plain ``sbatch`` jobs from alice and bob, the daemon's
cycles (in this process through the cluster's own runner, or as a real ``slurm-rl daemon``
process), and everything read back from Slurm and compared with the daemon's store.

The tests that start the daemon as a separate process need the native cluster (the daemon
must share the heartbeat file and slurm.conf with slurmctld); against compose they skip.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from slurm_rl.config import DaemonConfig
from slurm_rl.daemon.heartbeat import FileHeartbeat, Heartbeat
from slurm_rl.daemon.runner import Daemon
from slurm_rl.live_policy import gpu_speeds
from slurm_rl.slurm.deferral import CONF_NAME, deferred_until
from slurm_rl.slurm.scontrol import ScontrolJob
from slurm_rl.store.models import DecisionRow
from slurm_rl.store.repository import Store
from tests.slurm.live import LiveCluster, daemon_toml

pytestmark = pytest.mark.slurm

CLUSTER = "live"  # the cluster name the daemon stores jobs under
SCHED_SLACK_S = 8.0  # scheduling passes run every 2 s on the test cluster
REPO = Path(__file__).resolve().parents[2]


# -- where the daemon meets the cluster ---------------------------------------------------


@dataclass(frozen=True)
class Site:
    """The cluster's files the daemon shares with slurmctld (native cluster only)."""

    slurm_conf: Path
    conf_dir: Path
    heartbeat: Path
    jobcomp: Path


@dataclass(frozen=True)
class ContainerHeartbeat:
    """The compose cluster's heartbeat lives in the controller's volume."""

    write: Callable[[float], None]

    def beat(self, now: float) -> None:
        self.write(now)

    def retire(self) -> None:
        self.write(0.0)


def _native_site(live: LiveCluster) -> Site | None:
    if live.kind != "native":
        return None
    shown = live.run("scontrol", "show", "config")
    match = re.search(r"^SLURM_CONF\s*=\s*(\S+)", shown.stdout, re.MULTILINE)
    assert match, "scontrol show config names no SLURM_CONF"
    conf_dir = Path(match.group(1)).parent
    plugin = (conf_dir / CONF_NAME).read_text()
    beat = re.search(r"^heartbeat_path\s*=\s*(\S+)", plugin, re.MULTILINE)
    assert beat, f"{CONF_NAME} names no heartbeat"
    jobcomp = re.search(r"^JobCompLoc\s*=\s*(\S+)", shown.stdout, re.MULTILINE)
    assert jobcomp, "the test cluster writes no jobcomp log"
    return Site(Path(match.group(1)), conf_dir, Path(beat.group(1)), Path(jobcomp.group(1)))


@pytest.fixture
def site(live: LiveCluster) -> Site:
    found = _native_site(live)
    if found is None:
        pytest.skip("the daemon process shares files with slurmctld: native cluster only")
    return found


def _heartbeat(live: LiveCluster) -> Callable[[DaemonConfig], Heartbeat]:
    found = _native_site(live)
    if found is None:
        return lambda config: ContainerHeartbeat(live.set_heartbeat)
    return lambda config: FileHeartbeat(found.heartbeat)


def _daemon(live: LiveCluster, tmp_path: Path, **values: Any) -> Daemon:
    """The daemon as one ``--once`` run builds it, on the cluster's own command runner."""
    settings: dict[str, Any] = {
        "mode": "enforce", "state_dir": tmp_path, "partitions": ("gpu",),
        "cluster_name": CLUSTER, "interval_s": 1.0, "slurm_timeout_s": 30.0,
    }
    config = DaemonConfig(**{**settings, **values})
    return Daemon(lambda: config, runner=live.runner, heartbeat=_heartbeat(live))


def _once(live: LiveCluster, tmp_path: Path, **values: Any) -> Store:
    daemon = _daemon(live, tmp_path, **values)
    try:
        assert daemon.run_once().ok
    finally:
        daemon.close(retire=False)
    return Store(daemon.config.store)


def _decision(store: Store, job_id: str) -> DecisionRow:
    rows = store.decisions_for(CLUSTER, job_id)
    assert len(rows) == 1, f"job {job_id}: {len(rows)} decisions stored"
    return rows[0]


def _nodes(row: DecisionRow) -> set[str]:
    assert row.nodes, f"{row.job_key}: no nodes decided"
    return set(row.nodes.split(","))


def _state_of(job: ScontrolJob) -> tuple[object, ...]:
    return (job.state, job.reason, job.priority, job.eligible_time, job.required_nodes,
            job.admin_comment)


# -- enforce: nodes and order -------------------------------------------------------------


def test_jobs_start_on_exactly_the_nodes_the_daemon_decided(
    live: LiveCluster, tmp_path: Path
) -> None:
    short = "sleep 4"
    jobs = [
        live.sbatch("alice", "-N2", "--gres=gpu:a100:8", "-t", "10", script=short),
        live.sbatch("bob", "--gres=gpu:a100:4", "-t", "10", script=short),
        live.sbatch("alice", "--gpus=v100:2", "-t", "10", script=short),
        live.sbatch("bob", "-N2", "--gres=gpu:v100:2", "-t", "10", script=short),
        live.sbatch("alice", "--gres=gpu:1", "-t", "10", script=short),
        live.sbatch("bob", "--gres=gpu:a100:8", "-t", "10", script=short),
    ]
    found = _native_site(live)
    jobcomp = {"jobcomp_path": found.jobcomp} if found else {}
    daemon = _daemon(live, tmp_path, policy="fifo+best-fit", **jobcomp)
    assert daemon.run_once().ok
    store = daemon.store
    decided = {job_id: _decision(store, job_id) for job_id in jobs}
    assert {(d.policy_id, d.action) for d in decided.values()} == {("fifo+best-fit", "place")}
    ran = {}
    for job_id in jobs:
        timeout = live.window_s + SCHED_SLACK_S + 4
        ran[job_id] = live.wait_state(job_id, "COMPLETED", timeout_s=timeout)
        assert set(ran[job_id].nodes) == _nodes(decided[job_id]), job_id
    by_rank = sorted(jobs, key=lambda j: decided[j].rank or 0)
    starts = [ran[j].start_time or 0.0 for j in by_rank]
    assert starts == sorted(starts) and all(starts)
    assert daemon.run_once().ok  # the next cycle stores how the jobs ended
    for job_id in jobs:
        outcome = store.outcome_for(CLUSTER, job_id)
        assert outcome is not None and outcome.job_key == decided[job_id].job_key
        assert (outcome.state, outcome.exit_code, outcome.source) == ("COMPLETED", 0, "squeue")
        assert set(outcome.nodes.split(",")) == _nodes(decided[job_id])
        assert outcome.start_time == ran[job_id].start_time
    if found is not None:  # the jobcomp log was read to its end (squeue's outcomes came first)
        inode, offset = (tmp_path / "jobcomp.position").read_text().split()
        assert (int(inode), int(offset)) == (found.jobcomp.stat().st_ino,
                                             found.jobcomp.stat().st_size)
    daemon.close(retire=False)


def test_released_jobs_it_does_not_start_keep_slurms_own_order(
    live: LiveCluster, tmp_path: Path
) -> None:
    """Only the jobs a decision starts (or the guard brings forward) get a priority of the
    daemon's (docs/daemon.md, "Priorities"): jobs it ranks but cannot place are released at
    Slurm's own priority, and with the dev cluster's zero multifactor weights Slurm starts
    them in submit order, whatever the policy's ranking. Before session 27 they started in
    the daemon's ranking, which a load then froze under the hourly priority limit."""
    blocker = live.sbatch("bob", "-N4", "--gres=gpu:a100:8", "-t", "10")
    _once(live, tmp_path / "first", policy="multifactor+best-fit")
    live.wait_state(blocker, "RUNNING", timeout_s=live.window_s + SCHED_SLACK_S)
    # Submitted largest first; multifactor (favouring small jobs) ranks them the other way.
    submitted = [
        live.sbatch("alice", "-N4", "--gres=gpu:a100:8", "-t", "10"),
        live.sbatch("bob", "-N3", "--gres=gpu:a100:8", "-t", "10"),
        live.sbatch("alice", "-N3", "--gres=gpu:a100:6", "-t", "10"),
    ]
    store = _once(live, tmp_path / "second", policy="multifactor+best-fit")
    decided = {job_id: _decision(store, job_id) for job_id in submitted}
    ranking = sorted(submitted, key=lambda j: decided[j].rank or 0)
    assert ranking == submitted[::-1]
    assert all(d.nodes is None and d.action == "release" for d in decided.values())
    assert not any(a.startswith("Priority=") for d in decided.values() for a in d.argv or ())
    live.run("scancel", blocker)
    started: list[str] = []
    for job_id in submitted:  # each needs more than half the a100s: one runs at a time
        live.wait_state(job_id, "RUNNING", timeout_s=SCHED_SLACK_S + 4)
        waiting = [j for j in submitted if j not in started and j != job_id]
        assert all(live.job(j).state == "PENDING" for j in waiting)
        started.append(job_id)
        live.run("scancel", job_id)
    assert started == submitted


# -- shadow and dry-run -------------------------------------------------------------------


@pytest.mark.parametrize("mode, dry_run", [("shadow", False), ("enforce", True)])
def test_shadow_and_dry_run_change_nothing_in_slurm(
    live: LiveCluster, tmp_path: Path, mode: str, dry_run: bool
) -> None:
    gpu_speeds()  # computed once per process: not inside the jobs' deferral window
    jobs = [live.sbatch("alice", "--gres=gpu:v100:1", "-t", "10"),
            live.sbatch("bob", "-N2", "--gres=gpu:a100:2", "-t", "10")]
    before = {job_id: _state_of(live.job(job_id)) for job_id in jobs}
    found = _native_site(live)
    beat = found.heartbeat.read_text() if found else None
    store = _once(live, tmp_path, mode=mode, dry_run=dry_run)
    assert {job_id: _state_of(live.job(job_id)) for job_id in jobs} == before
    assert before[jobs[0]][1] == "BeginTime"  # still deferred by the plugin, untouched
    if found is not None:
        assert found.heartbeat.read_text() == beat
    for job_id in jobs:
        row = _decision(store, job_id)
        assert row.action == "place" and row.slurm_rc is None and row.argv
        assert any(arg.startswith("ReqNodeList=") for arg in row.argv)


# -- the daemon as a process --------------------------------------------------------------


@dataclass
class DaemonProcess:
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)

    def stop(self, timeout_s: float = 20.0) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout_s)


def _toml(site: Site, tmp_path: Path, live: LiveCluster, **values: object) -> str:
    settings: dict[str, object] = {
        "policy": "fifo+best-fit", "mode": "enforce", "interval_s": 1.0,
        "state_dir": str(tmp_path), "cluster_name": CLUSTER, "partitions": ["gpu"],
        "slurm_conf": str(site.slurm_conf), "heartbeat_path": str(site.heartbeat),
        "defer_window_s": live.window_s, "slurm_timeout_s": 30.0, **values,
    }
    return daemon_toml(settings)


@pytest.fixture
def start_daemon(
    live: LiveCluster, site: Site, tmp_path: Path
) -> Iterator[Callable[..., tuple[DaemonProcess, Path]]]:
    """Starts ``python -m slurm_rl.cli.daemon --config <toml>``; restores the plugin config."""
    plugin_conf = (site.conf_dir / CONF_NAME).read_text()
    started: list[DaemonProcess] = []

    def start(**values: object) -> tuple[DaemonProcess, Path]:
        path = tmp_path / "slurm-rl.toml"
        path.write_text(_toml(site, tmp_path, live, **values))
        log = tmp_path / "daemon.log"
        argv = [sys.executable, "-m", "slurm_rl.cli.daemon", "--config", str(path)]
        with log.open("wb") as out:
            process = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        started.append(DaemonProcess(process, log))
        return started[-1], path

    yield start
    for daemon in started:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait(timeout=10)
    (site.conf_dir / CONF_NAME).write_text(plugin_conf)


def _wait_for_beat(live: LiveCluster, site: Site, daemon: DaemonProcess, since: float) -> None:
    def fresh() -> bool:
        assert daemon.process.poll() is None, f"daemon exited: {daemon.output()}"
        text = site.heartbeat.read_text() if site.heartbeat.exists() else ""
        return text.strip().isdigit() and int(text) >= int(since)

    live.wait_for(fresh, "the daemon's first heartbeat", timeout_s=30.0)


def test_a_running_daemon_reloads_on_sighup_and_stops_cleanly_on_sigterm(
    live: LiveCluster, site: Site, tmp_path: Path, start_daemon: Any
) -> None:
    live.stop_beating()
    begun = time.time()
    daemon, path = start_daemon(plugin_conf_dir=str(site.conf_dir))
    _wait_for_beat(live, site, daemon, begun)
    assert f"heartbeat_path = {site.heartbeat}" in (site.conf_dir / CONF_NAME).read_text()
    first = live.sbatch("alice", "--gres=gpu:a100:2", "-t", "10")
    window_end = deferred_until(live.job(first).admin_comment)
    assert window_end is not None  # deferred because the daemon beats
    running = live.wait_state(first, "RUNNING", timeout_s=live.window_s + SCHED_SLACK_S)
    assert running.start_time is not None and running.start_time < window_end  # released early
    store = Store(f"sqlite:///{tmp_path / 'slurm-rl.sqlite'}")
    assert set(running.nodes) == _nodes(_decision(store, first))

    path.write_text(path.read_text().replace("fifo+best-fit", "multifactor+first-fit"))
    daemon.signal(signal.SIGHUP)
    reloaded = "reloaded config: policy multifactor+first-fit"
    live.wait_for(lambda: reloaded in daemon.output(), "the reload", timeout_s=15.0)
    second = live.sbatch("bob", "--gres=gpu:v100:1", "-t", "10")
    live.wait_state(second, "RUNNING", timeout_s=live.window_s + SCHED_SLACK_S)
    assert _decision(store, second).policy_id == "multifactor+first-fit"

    assert daemon.stop() == 0, daemon.output()
    assert not site.heartbeat.exists()  # retired: the plugin defers nothing any more
    assert "daemon stopping" in daemon.output()
    after = live.sbatch("bob", "--gres=gpu:v100:1", "-t", "10")
    job = live.job(after)
    assert job.admin_comment == "" and job.reason != "BeginTime"
    took = live.wait_for(lambda: live.job(after).state == "RUNNING", "an undeferred start")
    assert took < live.window_s


def test_a_deferred_job_the_daemon_ignores_starts_when_its_window_ends(
    live: LiveCluster, site: Site, tmp_path: Path, start_daemon: Any
) -> None:
    live.stop_beating()
    begun = time.time()
    # The daemon manages another partition: it beats, but never acts on gpu jobs, which the
    # cluster's own plugin config still defers.
    daemon, _ = start_daemon(partitions=["elsewhere"])
    _wait_for_beat(live, site, daemon, begun)
    job_id = live.sbatch("bob", "--gres=gpu:v100:2", "-t", "10")
    until = deferred_until(live.job(job_id).admin_comment)
    assert until is not None
    running = live.wait_state(job_id, "RUNNING", timeout_s=live.window_s + SCHED_SLACK_S)
    assert running.start_time is not None and until <= running.start_time <= until + SCHED_SLACK_S
    assert daemon.process.poll() is None  # alive the whole time
    assert Store(f"sqlite:///{tmp_path / 'slurm-rl.sqlite'}").decisions_for(CLUSTER, job_id) == []
    assert daemon.stop() == 0
