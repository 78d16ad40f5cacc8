"""Least privilege, measured on a real cluster: the daemon runs as the non-root SlurmUser.

Slurm 22.05 without slurmdbd knows exactly two privileged identities: root and SlurmUser
(``AdminLevel=Operator`` lives in the accounting database, set with ``sacctmgr``). So the
least privilege that works here is the daemon running as SlurmUser (Debian's ``slurm``)
beside a slurmctld that runs as that user too. This module starts its own small cluster that
way (the session's cluster runs as root) and shows: the daemon as ``slurm`` places and
prioritises alice's jobs; the daemon as an ordinary user (bob) is refused by Slurm on every
job, records each refusal and keeps running; ``selftest`` says which it is and how to fix it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_rl.devcluster.cluster import DevCluster, free_base_port
from slurm_rl.devcluster.config import DevClusterConfig, NodeGroup
from slurm_rl.slurm import deferral
from slurm_rl.slurm.proc import make_runner
from slurm_rl.store.repository import Store
from tests.slurm.live import LiveCluster

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SLURM_USER = "slurm"
WINDOW_S = 6


@pytest.fixture(scope="module")
def slurm_user_cluster(slurm_cluster: LiveCluster) -> Iterator[tuple[DevCluster, LiveCluster]]:
    """A 2-node cluster whose slurmctld runs as ``slurm`` (needs the native session cluster,
    which installed Slurm and created the test users)."""
    if slurm_cluster.kind != "native":
        pytest.skip("starts its own native cluster")
    try:
        pwd.getpwnam(SLURM_USER)
    except KeyError:
        pytest.skip("Debian's slurm user is missing")
    root = Path(tempfile.mkdtemp(prefix="slurm-rl-lp-"))
    root.chmod(0o755)
    config = DevClusterConfig(root=root / "cluster", base_port=free_base_port(3, start=18800),
                              groups=(NodeGroup("a100", 2, 8),), deferral_window_s=WINDOW_S,
                              slurm_user=SLURM_USER, cluster_name="lp")
    cluster = DevCluster(config)
    try:
        cluster.up(timeout_s=120.0)
        live = LiveCluster("native", make_runner(cluster.env()), str(cluster.jobs_dir),
                           WINDOW_S, lambda t: deferral.beat(cluster.heartbeat_path, t),
                           lambda user, argv: ("runuser", "-u", user, "--", *argv))
        yield cluster, live
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)


def _as(
    user: str, cluster: DevCluster, state: Path, *args: str, heartbeat: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m <args>`` run as ``user``, no root left in the process (tests/slurm/as_user.py:
    this host's Python lives under /root, where runuser could not execute it)."""
    conf = state / "slurm-rl.toml"
    conf.write_text(
        "[daemon]\n"
        f'mode = "enforce"\nstate_dir = "{state}"\ncluster_name = "lp"\n'
        f'slurm_conf = "{cluster.slurm_conf}"\n'
        f'heartbeat_path = "{heartbeat or cluster.heartbeat_path}"\n'
        f"defer_window_s = {WINDOW_S}\nslurm_timeout_s = 30\nmetrics_port = 0\n"
    )
    argv = [sys.executable, "-m", "tests.slurm.as_user", user, *args, "--config", str(conf)]
    env = {**os.environ, "HOME": str(state), "PYTHONUNBUFFERED": "1"}
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, env=env,
                          check=False)


def _state_dir(user: str) -> Path:
    state = Path(tempfile.mkdtemp(prefix=f"slurm-rl-lp-{user}-"))
    shutil.chown(state, user, user)
    return state


def test_the_daemon_as_slurmuser_places_jobs_without_root(slurm_user_cluster) -> None:
    cluster, live = slurm_user_cluster
    shown = live.run("scontrol", "show", "config").stdout
    assert f"SlurmUser               = {SLURM_USER}(" in shown
    live.beat()
    shutil.chown(cluster.heartbeat_path, SLURM_USER, SLURM_USER)
    job = live.sbatch("alice", "--gres=gpu:a100:2", "-t", "5", script="sleep 30")
    assert deferral.deferred_until(live.job(job).admin_comment) is not None
    state = _state_dir(SLURM_USER)
    try:
        ran = _as(SLURM_USER, cluster, state, "slurm_rl.cli.daemon", "--once")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        (row,) = Store(f"sqlite:///{state / 'slurm-rl.sqlite'}").decisions_for("lp", job)
        assert row.slurm_rc == 0 and row.argv and any(a.startswith("Priority=") for a in row.argv)
        started = live.wait_state(job, "RUNNING", timeout_s=WINDOW_S + 8)
        assert row.nodes is not None and set(started.nodes) == set(row.nodes.split(","))
        assert started.start_time is not None
        checked = _as(SLURM_USER, cluster, state, "slurm_rl.cli.main", "selftest")
        assert "ok   permission to update jobs: running as slurm" in checked.stdout, checked.stdout
    finally:
        live.cancel_all()
        shutil.rmtree(state, ignore_errors=True)


def test_an_ordinary_user_is_refused_recorded_and_told_the_fix(slurm_user_cluster) -> None:
    cluster, live = slurm_user_cluster
    live.beat()
    job = live.sbatch("alice", "--gres=gpu:a100:2", "-t", "5", script="sleep 30")
    state = _state_dir("bob")
    try:  # bob may not write SlurmUser's heartbeat either: his own file stands in for it
        ran = _as("bob", cluster, state, "slurm_rl.cli.daemon", "--once", heartbeat=state / "beat")
        assert ran.returncode == 0, ran.stdout + ran.stderr  # refusals are per job, not fatal
        (row,) = Store(f"sqlite:///{state / 'slurm-rl.sqlite'}").decisions_for("lp", job)
        assert row.slurm_rc not in (0, None)
        assert row.slurm_answer is not None and row.slurm_answer.startswith("permission:")
        checked = _as("bob", cluster, state, "slurm_rl.cli.main", "selftest", heartbeat=state / "b")
        assert checked.returncode == 1
        assert "FAIL permission to update jobs: running as bob" in checked.stdout
        assert f"fix: run the daemon as {SLURM_USER}, or where slurmdbd runs" in checked.stdout
        # Nothing was changed for alice's job: it starts when the plugin's window ends.
        live.wait_state(job, "RUNNING", timeout_s=WINDOW_S + 8)
    finally:
        live.cancel_all()
        shutil.rmtree(state, ignore_errors=True)
