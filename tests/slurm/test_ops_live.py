"""``slurm-rl explain``, ``revert`` and ``selftest`` against the real cluster: the daemon
decides and records, then the commands (as separate processes) read the store and Slurm."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_rl.core import ClusterSnapshot, Decision, Placement
from slurm_rl.daemon.guard import GuardedScheduler
from slurm_rl.daemon.runner import Daemon
from slurm_rl.store.repository import Store
from tests.slurm.live import LiveCluster
from tests.slurm.test_daemon_live import CLUSTER, REPO, SCHED_SLACK_S, _daemon, _native_site

pytestmark = pytest.mark.slurm


def _cli(live: LiveCluster, tmp_path: Path, *args: str, enforce: bool = False,
         state: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``slurm-rl <args>`` as its own process, on the daemon's config file (``enforce``: the
    site's own heartbeat and window, as a daemon that enforces would have them; ``state``:
    the state directory, default ``tmp_path``, which holds the config file)."""
    site = _native_site(live)
    lines = ["[daemon]", f'state_dir = "{state or tmp_path}"', f'cluster_name = "{CLUSTER}"',
             'partitions = ["gpu"]', "slurm_timeout_s = 30"]
    if site is not None:
        beat = site.heartbeat if enforce else tmp_path / "beat"
        lines += [f'slurm_conf = "{site.slurm_conf}"', f'heartbeat_path = "{beat}"']
    if enforce:
        lines += ['mode = "enforce"', f"defer_window_s = {live.window_s}"]
    config = tmp_path / "ops.toml"
    config.write_text("\n".join(lines) + "\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "slurm_rl.cli.main", *args, "--config", str(config)]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, env=env,
                          check=False)


def _native(live: LiveCluster) -> None:
    if _native_site(live) is None:
        pytest.skip("the commands read the cluster's slurm.conf: native cluster only")


def test_explain_shows_rank_gp_belief_alternatives_and_outcome(
    live: LiveCluster, tmp_path: Path
) -> None:
    _native(live)
    short = "sleep 3"
    first = live.sbatch("alice", "--gres=gpu:a100:2", "-t", "10", script=short)
    second = live.sbatch("bob", "--gres=gpu:v100:1", "-t", "10", script=short)
    daemon = _daemon(live, tmp_path, policy="rl+rl")
    try:
        assert daemon.run_once().ok
        for job_id in (first, second):
            live.wait_state(job_id, "COMPLETED", timeout_s=live.window_s + SCHED_SLACK_S + 4)
        assert daemon.run_once().ok  # stores the outcomes
    finally:
        daemon.close(retire=False)
    shown = _cli(live, tmp_path, "explain", first)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert f"job {first} (cluster {CLUSTER}): user alice" in text
    assert "rank 1 of 2 ranked" in text or "rank 2 of 2 ranked" in text
    assert "GP mean" in text and "std" in text
    assert "alternative" in text
    assert f"sent: scontrol update JobId={first} ReqNodeList=" in text and "-> exit 0" in text
    assert "outcome: COMPLETED (exit 0)" in text
    as_json = _cli(live, tmp_path, "explain", second, "--json")
    assert as_json.returncode == 0 and '"gp_mean"' in as_json.stdout
    missing = _cli(live, tmp_path, "explain", "999999")
    assert missing.returncode == 2 and "not in the store" in missing.stderr
    assert "Traceback" not in missing.stderr


class HoldAll:
    """A policy that keeps every pending job deferred (what a learned policy does when it
    wants a job to wait for better nodes)."""

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        return Decision("hold-all", ranking=(), holds=tuple(j.job_id for j in snapshot.pending))


class PinToBusy:
    """A policy that ranks one job and pins it to a node another job fills: it stays pending
    there with the daemon's node list and priority."""

    def __init__(self, job_id: str, node: str) -> None:
        self.job_id, self.node = job_id, node

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        placement = Placement((self.node,), (2,))
        return Decision("pin-to-busy", ranking=(self.job_id,),
                        placements={self.job_id: placement})


def test_revert_restores_node_lists_priorities_nice_and_deferrals(
    live: LiveCluster, tmp_path: Path
) -> None:
    _native(live)
    blocker = live.sbatch("alice", "--gres=gpu:a100:8", "-t", "10")
    assert live.run("scontrol", "update", f"JobId={blocker}", "StartTime=now").ok
    busy = live.wait_state(blocker, "RUNNING", timeout_s=SCHED_SLACK_S).nodes[0]
    pinned = live.sbatch("alice", "--gres=gpu:a100:2", "-t", "10", "--nice=50")
    before = live.job(pinned)
    assert before.required_nodes == () and before.reason == "BeginTime"
    assert live.nice(pinned) == 50
    daemon = _daemon(live, tmp_path)
    daemon.parts = dataclasses.replace(daemon.parts,
                                       scheduler=GuardedScheduler(PinToBusy(pinned, busy)))
    try:
        assert daemon.run_once().ok
    finally:
        daemon.close(retire=False)
    changed = live.job(pinned)
    assert changed.required_nodes == (busy,) and changed.priority != before.priority
    assert changed.state == "PENDING"
    assert live.nice(pinned) == 0  # slurmctld zeroes the nice of a job whose Priority is set

    # A policy that holds: the plugin's deferral is pushed 120 s out.
    held = live.sbatch("bob", "--gres=gpu:v100:1", "-t", "10")
    holding = _daemon(live, tmp_path, defer_extension_s=120.0)
    holding.parts = dataclasses.replace(holding.parts, scheduler=GuardedScheduler(HoldAll()))
    try:
        assert holding.run_once().ok
    finally:
        holding.close(retire=False)
    eligible = live.job(held).eligible_time or 0.0
    assert eligible > time.time() + 60, "the hold did not push the deferral"

    dry = _cli(live, tmp_path, "revert", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"job {pinned} (PENDING): ReqNodeList=(cleared)" in dry.stdout
    assert "Priority=(Slurm's own) Nice=50" in dry.stdout
    assert live.job(pinned).required_nodes == changed.required_nodes  # dry run sent nothing
    done = _cli(live, tmp_path, "revert")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 jobs changed by the daemon; 2 restored, 0 failed" in done.stdout, done.stdout
    # the pinned job: scontrol release, then its update; the held one: its update
    assert "3 scontrol calls recorded in the store as 'revert' decisions" in done.stdout
    trail = Store(daemon.config.store).decisions_for(CLUSTER, pinned)
    assert [row.action for row in trail][-1] == "revert" and trail[-1].slurm_rc == 0
    after = live.job(pinned)
    assert after.required_nodes == () and after.priority == before.priority
    assert live.nice(pinned) == 50  # back, and taken: the priority is Slurm's own again
    retake = live.run("scontrol", "update", f"JobId={pinned}", "Nice=60")
    assert retake.ok and live.nice(pinned) == 60  # a fixed Priority would ignore it
    started = live.wait_state(held, "RUNNING", timeout_s=SCHED_SLACK_S + 4)
    assert started.start_time is not None and started.start_time < eligible - 60
    again = _cli(live, tmp_path, "revert")  # idempotent: nothing left to undo
    assert again.returncode == 0
    assert "2 jobs changed by the daemon; 0 restored, 0 failed" in again.stdout, again.stdout


def test_revert_refuses_while_the_daemon_beats_and_rejects_a_bad_since(
    live: LiveCluster, tmp_path: Path
) -> None:
    _native(live)
    (tmp_path / "beat").write_text(f"{int(time.time())}\n")
    busy = _cli(live, tmp_path, "revert")
    assert busy.returncode == 2 and "stop it first, or pass --force" in busy.stderr
    bad = _cli(live, tmp_path, "revert", "--since", "yesterday-ish", "--force")
    assert bad.returncode == 2 and "--since: not a time" in bad.stderr
    assert "Traceback" not in bad.stderr + busy.stderr


def test_selftest_reports_each_check(live: LiveCluster, tmp_path: Path) -> None:
    _native(live)
    job = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", "--begin=now+300")
    daemon: Daemon = _daemon(live, tmp_path)  # creates and migrates the store
    daemon.close(retire=False)
    result = _cli(live, tmp_path, "selftest", enforce=True)
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("munge", "scontrol ping", "query latency", "permission to update jobs",
                 "job shrink", "site config", "deferral plugin", "directories", "store",
                 "model"):
        assert any(line.startswith(f"ok   {name}:") for line in lines), (name, lines)
    assert f"a no-op update of job {job} was accepted" in result.stdout
    assert "agrees with the daemon" in result.stdout
    assert "SchedulerParameters has disable_job_shrink" in result.stdout
    assert lines[-1] == "10 of 10 checks passed"


def test_selftest_before_the_daemons_first_run_passes_on_the_state_dir_it_will_make(
    live: LiveCluster, tmp_path: Path
) -> None:
    """Issue 19 (8): on a first trial the state directory is not there yet, and selftest
    failed on it; the daemon makes it at its first start, private."""
    _native(live)
    state = tmp_path / "var" / "slurm-rl"
    before = _cli(live, tmp_path, "selftest", enforce=True, state=state)
    assert before.returncode == 0, before.stdout + before.stderr
    assert f"state directory {state} will be created by the daemon" in before.stdout
    assert f"the daemon creates {state} and {state / 'slurm-rl.sqlite'}" in before.stdout
    assert before.stdout.splitlines()[-1] == "10 of 10 checks passed"
    assert not state.exists()  # selftest made nothing
    _daemon(live, tmp_path, state_dir=state).close(retire=False)
    after = _cli(live, tmp_path, "selftest", enforce=True, state=state)
    assert after.returncode == 0, after.stdout + after.stderr
    assert f"state directory {state} is private" in after.stdout


def test_selftest_never_writes_an_admin_comment_a_user_chose(
    live: LiveCluster, tmp_path: Path
) -> None:
    """Issue 18 (3): the permission probe re-sent the AdminComment it parsed from
    ``scontrol show job -o``, where alice's own StdOut path put one; selftest, as SlurmUser,
    then wrote alice's text into the administrators' field."""
    _native(live)
    job = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", "--begin=now+300",
                      "-o", "/tmp/slurm-rl-probe AdminComment=slurm-rl:deferred:1")
    before = _admin_comment(live, job)
    daemon: Daemon = _daemon(live, tmp_path)
    daemon.close(retire=False)
    result = _cli(live, tmp_path, "selftest", enforce=True)
    assert f"a no-op update of job {job} was accepted" in result.stdout, result.stdout
    assert _admin_comment(live, job) == before
    assert "slurm-rl:deferred:1" not in before


def _admin_comment(live: LiveCluster, job_id: str) -> str:
    """As squeue's JSON has it (scontrol's text form is what a user can forge)."""
    import json

    doc = json.loads(live.run("squeue", "--json").stdout)
    (record,) = [j for j in doc["jobs"] if str(j["job_id"]) == job_id]
    return str(record.get("admin_comment") or "")
