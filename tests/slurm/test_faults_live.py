"""The fault suite: a real ``slurm-rl daemon`` process beside the session's slurmctld, and
each fault a production daemon meets, caused for real where the host allows it:

slurmctld killed and restarted mid-cycle; slurmctld stopped (SIGSTOP) so calls time out;
truncated and malformed squeue output; a job vanishing between read and update; the store
locked and read-only; a corrupt model bundle; SIGTERM and SIGHUP mid-cycle; shell
metacharacters and unicode in job names and comments.

For each: the daemon keeps running (or exits cleanly with a clear message), no stored row is
lost, and every job the plugin deferred still starts. The session ends with the line
``N faults tried, N survived`` (tests/conftest.py). Native cluster only: the daemon shares
slurm.conf, the heartbeat and the controller's process with the test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_rl.slurm.deferral import deferred_until
from tests.slurm.faults import Rig, decision_lines, fault, make_shims, shim_env
from tests.slurm.live import LiveCluster, daemon_toml
from tests.slurm.test_daemon_live import CLUSTER, REPO, _native_site

pytestmark = pytest.mark.slurm

TIMEOUT_S = 3  # slurm_timeout_s of the rig's daemon: a stopped slurmctld costs this per call


def _toml(live: LiveCluster, tmp: Path, **values: object) -> str:
    site = _native_site(live)
    assert site is not None
    settings: dict[str, object] = {
        "policy": "fifo+best-fit", "mode": "enforce", "interval_s": 1.0,
        "state_dir": str(tmp), "cluster_name": CLUSTER, "partitions": ["gpu"],
        "slurm_conf": str(site.slurm_conf), "heartbeat_path": str(site.heartbeat),
        "defer_window_s": live.window_s, "slurm_timeout_s": TIMEOUT_S, "metrics_port": 0,
        **values,
    }
    return daemon_toml(settings)


@pytest.fixture
def make_rig(live: LiveCluster, tmp_path: Path) -> Iterator[object]:
    site = _native_site(live)
    if site is None or live.controller is None:
        pytest.skip("the fault suite drives slurmctld's process: native cluster only")
    rigs: list[Rig] = []

    def make(**values: object) -> Rig:
        tmp = tmp_path / f"rig{len(rigs)}"
        tmp.mkdir()
        faults, shims = tmp / "faults", tmp / "shims"
        faults.mkdir()
        make_shims(shims, faults)
        config = tmp / "slurm-rl.toml"
        config.write_text(_toml(live, tmp, **values))
        rig = Rig(live, tmp, config, faults, tmp / "slurm-rl.sqlite", site.heartbeat,
                  shim_env(shims))
        rigs.append(rig)
        rig.start()
        return rig

    live.stop_beating()
    yield make
    for rig in rigs:
        rig.stop()
    controller = live.controller
    if controller is not None and controller.controller_pid() is None:
        controller.start_controller()  # a failed fault test must not break the next ones


def _controller_pid(live: LiveCluster) -> int:
    assert live.controller is not None
    pid = live.controller.controller_pid()
    assert pid is not None, "slurmctld is not running"
    return pid


@contextlib.contextmanager
def _stopped_controller(live: LiveCluster) -> Iterator[int]:
    pid = _controller_pid(live)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _deferred(live: LiveCluster, jobs: list[str]) -> None:
    for job_id in jobs:
        assert deferred_until(live.job(job_id).admin_comment) is not None, job_id


# -- slurmctld ------------------------------------------------------------------------------


def test_slurmctld_killed_and_restarted_mid_cycle(make_rig, live: LiveCluster) -> None:
    with fault("slurmctld killed and restarted mid-cycle"):
        rig = make_rig()
        before = rig.rows()
        submitted = time.time()
        jobs = rig.submit("--gres=gpu:a100:8 -N2", user="bob")
        rig.submit("--gres=gpu:v100:1")
        _deferred(live, jobs)
        # slurmctld writes its job state a few seconds after a change; a job acknowledged
        # but not yet saved dies with a SIGKILLed controller (Slurm's durability, not ours).
        assert live.controller is not None
        saved = live.controller.root / "state" / "job_state"
        live.wait_for(lambda: saved.stat().st_mtime > submitted + 0.5, "the job state saved",
                      timeout_s=30.0)
        with _stopped_controller(live) as pid:
            time.sleep(1.5)  # the daemon's cycle now waits on squeue
            os.kill(pid, signal.SIGKILL)
        live.wait_for(lambda: live.controller is not None
                      and live.controller.controller_pid() is None, "slurmctld gone", 10.0)
        # A killed controller refuses connections or, while its port lingers, lets calls
        # time out: either way the cycle is skipped.
        skipped = rig.output().count("cycle skipped")
        live.wait_for(lambda: rig.output().count("cycle skipped") > skipped, "a skipped cycle")
        assert live.controller is not None
        live.controller.start_controller()
        rig.wait_healthy_cycles()
        _deferred(live, rig.submit("--gres=gpu:a100:4"))  # the beat stayed fresh meanwhile
        rig.survived(before)


def test_slurmctld_stopped_so_calls_time_out(make_rig, live: LiveCluster) -> None:
    with fault("slurmctld stopped (SIGSTOP), calls time out"):
        rig = make_rig()
        before = rig.rows()
        _deferred(live, rig.submit("--gres=gpu:a100:2", "--gres=gpu:v100:2"))
        with _stopped_controller(live):
            rig.wait_log(f"did not answer within {TIMEOUT_S} s", timeout_s=3 * TIMEOUT_S + 5)
            assert rig.alive()
        rig.wait_healthy_cycles()
        rig.survived(before)


# -- Slurm's output ------------------------------------------------------------------------


@pytest.mark.parametrize("kind, logged", [
    ("truncate", "invalid or truncated JSON"),
    ("malformed", "cycle skipped: squeue --json"),
])
def test_bad_squeue_output(make_rig, live: LiveCluster, kind: str, logged: str) -> None:
    with fault(f"{kind} squeue output"):
        rig = make_rig()
        rig.wait_healthy_cycles(1)
        before = rig.rows()
        rig.set_fault("squeue", kind)
        _deferred(live, rig.submit("--gres=gpu:a100:1 -N2"))
        rig.wait_log(logged)
        cycles = rig.cycles()
        time.sleep(1.5)
        assert rig.cycles() == cycles  # skipped cycles store nothing
        rig.set_fault("squeue", None)
        rig.wait_healthy_cycles()
        rig.survived(before)


def test_one_unreadable_job_record(make_rig, live: LiveCluster) -> None:
    """Issue 18 (7): one job whose record cannot be read no longer skips every cycle: the
    daemon keeps beating and places every other job; that one starts when its deferral window
    ends, as any job the daemon leaves alone."""
    with fault("one unreadable job record"):
        rig = make_rig()
        rig.wait_healthy_cycles(1)
        before = rig.rows()
        rig.set_fault("squeue", "badrecord")
        (bad,) = rig.submit("--gres=gpu:a100:1 -J unreadable")
        others = rig.submit("--gres=gpu:a100:1", "--gres=gpu:v100:1")
        _deferred(live, [bad, *others])
        window_ends = {j: deferred_until(live.job(j).admin_comment) for j in others}
        rig.wait_log(f"job record left out, Slurm schedules it alone: squeue --json: "
                     f"column 'tres_per_node': job {bad}")
        rig.wait_healthy_cycles(2)
        rig.all_start(others, timeout_s=20.0)
        for job_id, end in window_ends.items():  # released by the daemon, inside the window
            started = live.job(job_id).start_time
            assert started is not None and end is not None and started < end, (job_id, started)
        seen = {key.split(":")[-1] for key in rig.rows()["jobs"]}
        assert set(others) <= seen and bad not in seen, seen
        rig.set_fault("squeue", None)
        rig.survived(before)


def test_a_job_vanishing_between_read_and_update(make_rig, live: LiveCluster) -> None:
    with fault("job vanishing between read and update"):
        rig = make_rig()
        before = rig.rows()
        rig.set_fault("scontrol", "vanish")
        gone = rig.submit("--gres=gpu:a100:4")
        rig.jobs.clear()  # cancelled by the fault: it cannot start
        live.wait_for(lambda: live.job(gone[0]).state == "CANCELLED", "the job to vanish")
        rig.wait_healthy_cycles()
        rig.set_fault("scontrol", None)
        later = rig.submit("--gres=gpu:v100:1")
        _deferred(live, later)
        rig.survived(before)
        answers = [line.get("answer") for line in decision_lines(rig.output())
                   if line.get("job") == gone[0]]
        assert any(str(a).startswith("vanished:") for a in answers), answers


# -- the store -----------------------------------------------------------------------------


def test_the_store_locked(make_rig, live: LiveCluster) -> None:
    with fault("store locked"):
        rig = make_rig()
        rig.wait_healthy_cycles(1)
        before = rig.rows()
        with contextlib.closing(sqlite3.connect(rig.store, timeout=30,
                                                isolation_level=None)) as lock:
            lock.execute("BEGIN EXCLUSIVE")
            _deferred(live, rig.submit("--gres=gpu:a100:2", "--gres=gpu:v100:1"))
            rig.wait_log("database is locked", timeout_s=30.0)  # busy_timeout is 10 s
            assert rig.alive()
            lock.execute("ROLLBACK")
        rig.wait_healthy_cycles()
        rig.survived(before)


def test_the_store_read_only(make_rig, live: LiveCluster) -> None:
    if shutil.which("chattr") is None:
        pytest.skip("chattr is needed to make the store read-only for root")
    with fault("store read-only"):
        rig = make_rig()
        rig.wait_healthy_cycles(1)
        before = rig.rows()
        # Root ignores file modes: the immutable flag makes the store read-only even for it.
        # (Not the -shm file: SQLite maps it, and a write to an immutable mapping is SIGBUS.)
        frozen = [str(rig.store), f"{rig.store}-wal", str(rig.tmp)]
        subprocess.run(["chattr", "+i", *frozen], check=True)
        try:
            _deferred(live, rig.submit("--gres=gpu:a100:3"))
            rig.wait_log("store error:", timeout_s=20.0)
            assert rig.alive()
        finally:
            subprocess.run(["chattr", "-i", *frozen], check=True)
        rig.wait_healthy_cycles()
        rig.survived(before)


# -- the model -----------------------------------------------------------------------------


def test_a_corrupt_model_bundle(make_rig, live: LiveCluster, tmp_path: Path) -> None:
    with fault("corrupt model bundle"):
        bundle = tmp_path / "bundle"
        shutil.copytree(REPO / "policies" / "default", bundle)
        rig = make_rig(policy="rl+rl", policy_bundle=str(bundle))
        before = rig.rows()
        (bundle / "weights.pt").write_bytes(b"\x00not a torch file")
        rig.signal(signal.SIGHUP)
        rig.wait_log("reload failed, keeping the running config")
        jobs = rig.submit("--gres=gpu:a100:2")
        rig.survived(before)
        placed = [line for line in decision_lines(rig.output()) if line.get("job") == jobs[0]]
        assert placed and str(placed[0]["policy"]).startswith("rl+rl")
        # Starting on the corrupt bundle: the baseline takes over, with one line.
        rig.stop()
        assert rig.process is not None and rig.process.returncode == 0
        rig.start()
        rig.wait_log("running qssf+fastest-gpu instead")
        rig.submit("--gres=gpu:v100:1")
        rig.survived(before)


# -- signals -------------------------------------------------------------------------------


def test_sigterm_mid_cycle(make_rig, live: LiveCluster) -> None:
    with fault("SIGTERM mid-cycle"):
        rig = make_rig()
        before = rig.rows()
        _deferred(live, rig.submit("--gres=gpu:a100:2", "--gres=gpu:v100:1"))
        with _stopped_controller(live):
            time.sleep(1.5)  # inside a cycle: squeue waits on the stopped controller
            rig.signal(signal.SIGTERM)
            time.sleep(0.5)
        assert rig.process is not None
        assert rig.process.wait(timeout=30) == 0, rig.output()[-2000:]
        assert "daemon stopping" in rig.output()
        assert not rig.heartbeat.exists()  # retired: nothing is deferred any more
        rig.survived(before, running=False)
        after = live.sbatch("bob", "--gres=gpu:v100:1", "-t", "5", script="sleep 1")
        assert deferred_until(live.job(after).admin_comment) is None


def test_sighup_mid_cycle(make_rig, live: LiveCluster) -> None:
    with fault("SIGHUP mid-cycle"):
        rig = make_rig()
        before = rig.rows()
        rig.submit("--gres=gpu:a100:1")
        rig.config.write_text(rig.config.read_text().replace("fifo+best-fit",
                                                             "multifactor+first-fit"))
        with _stopped_controller(live):
            time.sleep(1.5)
            rig.signal(signal.SIGHUP)
            time.sleep(0.5)
        rig.wait_log("reloaded config: policy multifactor+first-fit")
        jobs = rig.submit("--gres=gpu:v100:2")
        rig.survived(before)
        decided = [line for line in decision_lines(rig.output()) if line.get("job") == jobs[0]]
        assert decided and decided[0]["policy"] == "multifactor+first-fit"


# -- hostile job names ---------------------------------------------------------------------

HOSTILE = [
    "$(touch {marker}-1)",
    "`touch {marker}-2`",
    "x; touch {marker}-3 #",
    "it's \"quoted\" & | > {marker}-4",
    "ünïcødé 名前 ✓ \u202e",
    "line\nbreak",
]


def test_shell_metacharacters_and_unicode_in_names_and_comments(
    make_rig, live: LiveCluster, tmp_path: Path
) -> None:
    with fault("shell metacharacters and unicode in job names and comments"):
        marker = str(tmp_path / "pwned")
        rig = make_rig()
        before = rig.rows()
        jobs = []
        for text in HOSTILE:
            value = text.format(marker=marker)
            jobs += rig.submit("--gres=gpu:v100:1", extra=(f"--job-name={value}",
                                                           f"--comment={value}"))
        rig.survived(before)
        rig.wait_healthy_cycles()
        assert not list(tmp_path.glob("pwned*")), "a job name was run as code"
        lines = decision_lines(rig.output())  # every line parses as JSON
        assert {str(line["job"]) for line in lines} >= set(jobs)
        config = ["--config", str(rig.config)]
        for job_id in jobs:
            shown = subprocess.run(
                [sys.executable, "-m", "slurm_rl.cli.main", "explain", job_id, *config],
                cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
            assert shown.returncode == 0, shown.stderr
            assert f"sent: scontrol update JobId={job_id} " in shown.stdout


# -- observability (not a fault) -------------------------------------------------------------


def test_metrics_are_served_on_localhost(make_rig, live: LiveCluster) -> None:
    from slurm_rl.devcluster.cluster import free_base_port

    port = free_base_port(1, start=19400)
    rig = make_rig(metrics_port=port)
    rig.submit("--gres=gpu:a100:1")
    rig.wait_healthy_cycles()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    assert 'slurm_rl_cycles_total{result="healthy"}' in text
    assert 'slurm_rl_decisions_total{action="place"}' in text
    assert 'slurm_rl_active_model_info{policy="fifo+best-fit",version="builtin"} 1.0' in text
    assert "slurm_rl_cycle_duration_seconds_bucket" in text
    assert "slurm_rl_pending_jobs" in text
    rig.all_start()
