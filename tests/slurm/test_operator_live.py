"""An Operator account instead of root: slurmdbd with a private MariaDB, ``sacctmgr ... set
adminlevel=Operator`` for bob, and the daemon as bob steering alice's jobs.

Measured on 22.05.8: an Operator may set Priority, ReqNodeList, NumNodes, StartTime,
SiteFactor and ExcNodeList (set and cleared) of any user's job, but not AdminComment
(administrators only); an ordinary user setting ExcNodeList on another's job gets
``Invalid user id for job N``. sacctmgr and
slurmctld reach slurmdbd through munge's *default* socket whatever ``AuthInfo=socket=`` says,
so a second munged with the cluster's key serves that socket while the test runs.

Skips unless MariaDB and slurmdbd are installed (``make test`` installs them with
scripts/install-slurm.sh) and nothing else serves munge's default socket.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
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
WINDOW_S = 6
DEFAULT_MUNGE = Path("/run/munge/munge.socket.2")
OPERATOR = "bob"


def _missing() -> str | None:
    for tool in ("mariadb-install-db", "mariadbd", "mariadb", "slurmdbd", "sacctmgr"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"{tool} is not installed (apt-get install slurmdbd mariadb-server)"
    if DEFAULT_MUNGE.exists():
        return f"{DEFAULT_MUNGE} is in use: the test will not take over a real munged"
    return None


def _wait(path: Path, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _kill_pidfile(path: Path) -> None:
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(path.read_text().split()[0]), signal.SIGTERM)


@contextlib.contextmanager
def _database(root: Path) -> Iterator[int]:
    """A private MariaDB on 127.0.0.1 with slurm's database and user; yields its port."""
    data, sock, port = root / "data", root / "mysql.sock", free_base_port(1, start=23300)
    subprocess.run(["mariadb-install-db", f"--datadir={data}", "--user=root",
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   check=True, capture_output=True, timeout=120)
    with (root / "mariadb.log").open("wb") as log:
        server = subprocess.Popen(["mariadbd", f"--datadir={data}", "--user=root",
                                   f"--socket={sock}", f"--port={port}",
                                   "--bind-address=127.0.0.1", f"--pid-file={root / 'm.pid'}"],
                                  stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait(sock, "MariaDB's socket")
        grant = "; ".join(f"CREATE USER 'slurm'@'{h}' IDENTIFIED BY 'pw'; GRANT ALL ON "
                          f"slurm_acct_db.* TO 'slurm'@'{h}'" for h in ("127.0.0.1", "localhost"))
        subprocess.run(["mariadb", f"--socket={sock}", "-uroot", "-e",
                        f"CREATE DATABASE slurm_acct_db; {grant};"], check=True, timeout=60)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


@contextlib.contextmanager
def _default_munge(cluster: DevCluster, root: Path) -> Iterator[None]:
    created = not DEFAULT_MUNGE.parent.exists()
    DEFAULT_MUNGE.parent.mkdir(mode=0o755, exist_ok=True)
    key = cluster.root / "munge" / "munge.key"
    subprocess.run(["/usr/sbin/munged", "--force", f"--key-file={key}",
                    f"--socket={DEFAULT_MUNGE}", f"--pid-file={root / 'munged2.pid'}",
                    f"--log-file={root / 'munged2.log'}", f"--seed-file={root / 'munged2.seed'}"],
                   check=True, timeout=30)
    try:
        yield
    finally:
        _kill_pidfile(root / "munged2.pid")
        time.sleep(0.3)
        if created:
            shutil.rmtree(DEFAULT_MUNGE.parent, ignore_errors=True)


def _slurmdbd_conf(cluster: DevCluster, db_port: int, dbd_port: int) -> str:
    root = cluster.root
    return "\n".join([
        "AuthType=auth/munge", f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
        "DbdHost=localhost", "DbdAddr=127.0.0.1", f"DbdPort={dbd_port}", "SlurmUser=root",
        f"LogFile={root / 'log' / 'slurmdbd.log'}", f"PidFile={root / 'run' / 'slurmdbd.pid'}",
        "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1",
        f"StoragePort={db_port}", "StorageUser=slurm", "StoragePass=pw",
        "StorageLoc=slurm_acct_db", "",
    ])


@pytest.fixture(scope="module")
def operator_cluster(slurm_cluster: LiveCluster) -> Iterator[tuple[DevCluster, LiveCluster]]:
    if slurm_cluster.kind != "native":
        pytest.skip("starts its own native cluster")
    reason = _missing()
    if reason is not None:
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="slurm-rl-op-"))
    root.chmod(0o755)
    config = DevClusterConfig(root=root / "cluster", base_port=free_base_port(3, start=21800),
                              groups=(NodeGroup("a100", 2, 8),), deferral_window_s=WINDOW_S,
                              cluster_name="opc")
    cluster = DevCluster(config)
    env = {**os.environ, **cluster.env()}
    try:
        cluster.up(timeout_s=120.0)
        with _default_munge(cluster, root), _database(root) as db_port:
            dbd_port = free_base_port(1, start=23400)
            conf = cluster.root / "etc" / "slurmdbd.conf"
            conf.write_text(_slurmdbd_conf(cluster, db_port, dbd_port))
            conf.chmod(0o600)
            subprocess.run(["/usr/sbin/slurmdbd"], env=env, check=True, timeout=60,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            try:
                _with_accounting(cluster, dbd_port, env)
                live = LiveCluster("native", make_runner(cluster.env()), str(cluster.jobs_dir),
                                   WINDOW_S, lambda t: deferral.beat(cluster.heartbeat_path, t),
                                   lambda user, argv: ("runuser", "-u", user, "--", *argv))
                yield cluster, live
            finally:
                with contextlib.suppress(Exception):
                    cluster.down()
                _kill_pidfile(cluster.root / "run" / "slurmdbd.pid")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _with_accounting(cluster: DevCluster, dbd_port: int, env: dict[str, str]) -> None:
    """slurm.conf names slurmdbd (sacctmgr reads it), accounts for alice and (as Operator)
    bob, then slurmctld restarted with accounting."""
    def sacctmgr(*args: str) -> None:
        deadline = time.monotonic() + 20
        while True:  # slurmdbd takes a moment to listen
            done = subprocess.run(["sacctmgr", "-i", *args], env=env, capture_output=True,
                                  text=True, timeout=60)
            if done.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert done.returncode == 0, f"sacctmgr {args}: {done.stderr}"

    conf = cluster.slurm_conf
    conf.write_text(conf.read_text().replace(
        "AccountingStorageType=accounting_storage/none",
        "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n"
        f"AccountingStoragePort={dbd_port}"))

    sacctmgr("add", "cluster", "opc")
    sacctmgr("add", "account", "rl")
    sacctmgr("add", "user", "alice", "account=rl")
    sacctmgr("add", "user", OPERATOR, "account=rl", "adminlevel=Operator")
    pid = cluster.controller_pid()
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while cluster.controller_pid() is not None:
        assert time.monotonic() < deadline, "slurmctld did not stop"
        time.sleep(0.1)
    cluster.start_controller(60.0)
    cluster.wait_idle(60.0)  # nodes re-register before the daemon may place on them


def _as_operator(cluster: DevCluster, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    conf = state / "slurm-rl.toml"
    conf.write_text(
        f'[daemon]\nmode = "enforce"\nstate_dir = "{state}"\ncluster_name = "opc"\n'
        f'slurm_conf = "{cluster.slurm_conf}"\nheartbeat_path = "{state / "beat"}"\n'
        f"defer_window_s = {WINDOW_S}\nslurm_timeout_s = 30\nmetrics_port = 0\n")
    argv = [sys.executable, "-m", "tests.slurm.as_user", OPERATOR, *args, "--config", str(conf)]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(state)}, check=False)


def test_an_operator_account_steers_other_users_jobs_without_root(operator_cluster) -> None:
    cluster, live = operator_cluster
    shown = live.run("sacctmgr", "-n", "-P", "show", "user", OPERATOR, "format=adminlevel")
    assert shown.stdout.strip() == "Operator", shown.stderr
    live.beat()
    job = live.sbatch("alice", "--gres=gpu:a100:2", "-t", "5", script="sleep 30")
    assert deferral.deferred_until(live.job(job).admin_comment) is not None
    state = Path(tempfile.mkdtemp(prefix="slurm-rl-op-bob-"))
    shutil.chown(state, OPERATOR, OPERATOR)
    try:
        ran = _as_operator(cluster, state, "slurm_rl.cli.daemon", "--once")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        (row,) = Store(f"sqlite:///{state / 'slurm-rl.sqlite'}").decisions_for("opc", job)
        assert row.slurm_rc == 0 and row.action == "place", row.slurm_answer
        assert row.argv and any(a.startswith("Priority=") for a in row.argv)
        started = live.wait_state(job, "RUNNING", timeout_s=WINDOW_S + 8)
        assert row.nodes is not None and set(started.nodes) == set(row.nodes.split(","))
        assert started.start_time is not None
        checked = _as_operator(cluster, state, "slurm_rl.cli.main", "selftest")
        assert f"ok   permission to update jobs: running as {OPERATOR}, AdminLevel=Operator" \
            in checked.stdout, checked.stdout
        # The one field the daemon's levers do not need is an administrator's.
        other = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "5", "--begin=now+300")
        _excludes_as_operator(live, other)
        denied = live.run("scontrol", "update", f"JobId={other}", "AdminComment=x",
                          user=OPERATOR)
        assert denied.returncode != 0 and "permission denied" in denied.stderr.lower()
    finally:
        live.cancel_all()
        shutil.rmtree(state, ignore_errors=True)


def _excludes_as_operator(live: LiveCluster, job: str) -> None:
    """An Operator sets and clears ExcNodeList on another user's job (the daemon's
    exclusions, docs/slurm.md)."""
    for value, shown in (("a100-02", ("a100-02",)), ("", ())):
        done = live.run("scontrol", "update", f"JobId={job}", f"ExcNodeList={value}",
                        user=OPERATOR)
        assert done.returncode == 0, done.stderr
        assert live.job(job).excluded_nodes == shown
    # Without the AdminLevel it is refused: alice on the Operator's own job.
    own = live.sbatch(OPERATOR, "--gres=gpu:a100:1", "-t", "5", "--begin=now+300")
    refused = live.run("scontrol", "update", f"JobId={own}", "ExcNodeList=a100-02", user="alice")
    assert refused.returncode != 0 and "invalid user id" in refused.stderr.lower()
    assert live.job(own).excluded_nodes == ()
