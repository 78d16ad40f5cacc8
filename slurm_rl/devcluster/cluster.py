"""A real Slurm 22.05 cluster on this one machine, for development and integration tests.

One private munged, one slurmctld and one ``slurmd -N <node>`` per emulated node, all with
their own directory and ports, so several clusters can coexist. GPUs are emulated with
placeholder character devices (``mknod ... c 1 3``): slurmd drops "file-less" GPUs, and
``TaskPlugin=task/none`` means no device cgroup ever opens them. With ``accounting`` on, a
private MariaDB (``<root>/db``, 127.0.0.1 and its own socket) and slurmdbd run too. Needs
root (slurmd, mknod, useradd); see docs/slurm.md.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_rl.devcluster.config import (
    DevClusterConfig,
    DevNode,
    render_gres_conf,
    render_slurm_conf,
    render_slurmdbd_conf,
)
from slurm_rl.paths import REPO_DIR
from slurm_rl.slurm import deferral
from slurm_rl.slurm.errors import DevClusterError, SlurmError
from slurm_rl.slurm.proc import CommandResult, run_command

MARKER = ".slurm-rl-devcluster"
_Predicate = Callable[[], bool]
INSTALL_SCRIPT = REPO_DIR / "scripts" / "install-slurm.sh"
SBIN = Path("/usr/sbin")
ACCOUNT = "rl"  # the one account the test users are added to


@dataclass(frozen=True, slots=True)
class DaemonStatus:
    name: str
    pid: int | None

    @property
    def alive(self) -> bool:
        return self.pid is not None


@dataclass(frozen=True, slots=True)
class DevClusterStatus:
    """Which daemons run (by pidfile) and what slurmctld says about each node."""

    root: Path
    slurm_conf: Path
    daemons: tuple[DaemonStatus, ...]
    node_states: tuple[tuple[str, str], ...] = field(default=())

    @property
    def running(self) -> bool:
        return all(d.alive for d in self.daemons)

    @property
    def stopped(self) -> bool:
        return not any(d.alive for d in self.daemons)


class DevCluster:
    """Start, inspect and stop one native development cluster described by a config."""

    def __init__(self, config: DevClusterConfig) -> None:
        self.config = config
        self._children: list[subprocess.Popen[bytes]] = []  # MariaDB: reaped in down()

    # -- paths -------------------------------------------------------------------------

    @property
    def root(self) -> Path:
        return self.config.root

    @property
    def slurm_conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def heartbeat_path(self) -> Path:
        if self.config.slurm_user != "root":
            return self.root / "run" / "heartbeat"  # a daemon running as SlurmUser writes it
        return self.root / "heartbeat"

    @property
    def jobs_dir(self) -> Path:
        """A world-writable working directory for test jobs (any user can write output)."""
        return self.root / "jobs"

    def env(self) -> dict[str, str]:
        """Environment variables a Slurm client needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.slurm_conf)}

    def client_env(self) -> dict[str, str]:
        return {**os.environ, **self.env()}

    # -- lifecycle ---------------------------------------------------------------------

    def up(self, timeout_s: float = 60.0) -> DevClusterStatus:
        """Start the cluster (installing Slurm if needed); a running cluster is left alone."""
        current = self.status()
        if current.running:
            return current
        ensure_installed(accounting=self.config.accounting)
        if self.config.users:
            _check_traversable(self.root.parent)
        self._stop_processes(current)
        self._prepare_root()
        ensure_users(self.config.users)
        self._start_munged(timeout_s)
        if self.config.accounting:
            self._start_accounting(timeout_s)
        self._start_slurmctld(timeout_s)
        self._start_slurmds()
        return self.wait_idle(timeout_s)

    def down(self, timeout_s: float = 30.0) -> DevClusterStatus:
        """Cancel every job, stop every daemon (SIGKILL if SIGTERM is ignored)."""
        current = self.status()
        if current.daemons[0].alive and current.daemons[1].alive:
            self._cancel_all_jobs(timeout_s)
        self._stop_processes(self.status())
        final = self.status()
        for child in self._children:
            child.poll()  # reap the MariaDB this object started, if it is gone
        if not final.stopped or any(d.alive for d in self._accounting_daemons()):
            raise DevClusterError(f"dev cluster at {self.root}: daemons survived SIGKILL")
        return final

    def status(self) -> DevClusterStatus:
        daemons = (
            DaemonStatus("munged", self._alive_pid("munged.pid", "munged")),
            DaemonStatus("slurmctld", self._alive_pid("slurmctld.pid", "slurmctld")),
            *(
                DaemonStatus(f"slurmd {n.name}", self._alive_pid(f"slurmd-{n.name}.pid", "slurmd"))
                for n in self.config.nodes()
            ),
            *(self._accounting_daemons() if self.config.accounting else ()),
        )
        states = self._node_states() if daemons[1].alive else ()
        return DevClusterStatus(self.root, self.slurm_conf, daemons, states)

    def wait_idle(self, timeout_s: float) -> DevClusterStatus:
        """Poll until slurmctld reports every node idle."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.status()
            names = {n.name for n in self.config.nodes()}
            idle = {name for name, state in status.node_states if state == "idle"}
            if status.running and idle >= names:
                return status
            if time.monotonic() > deadline:
                raise DevClusterError(self._not_ready_message(status))
            time.sleep(0.1)

    # -- preparation -------------------------------------------------------------------

    def _prepare_root(self) -> None:
        """Recreate the cluster directory: fresh state, configs, key and GPU placeholders."""
        if self.root.exists():
            if not (self.root / MARKER).exists() and any(self.root.iterdir()):
                raise DevClusterError(
                    f"{self.root} exists and is not a slurm-rl dev cluster; refusing to wipe it"
                )
            shutil.rmtree(self.root)
        for sub in ("etc", "munge", "state", "spool", "log", "run", "dev"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / MARKER).write_text("created by slurm-rl devcluster\n")
        # Other users' jobs must reach their working dir and munge's socket.
        self.root.chmod(0o755)
        (self.root / "munge").chmod(0o711)
        self.jobs_dir.mkdir()
        self.jobs_dir.chmod(0o1777)
        if self.config.slurm_user != "root":
            # slurmctld drops to SlurmUser: its state, logs, pid and the heartbeat it reads.
            for sub in ("state", "log", "run"):
                shutil.chown(self.root / sub, self.config.slurm_user, self.config.slurm_user)
        self._write_configs()
        self._make_gpu_devices()
        self._write_munge_key()

    def _write_configs(self) -> None:
        etc = self.root / "etc"
        (etc / "slurm.conf").write_text(render_slurm_conf(self.config))
        (etc / "gres.conf").write_text(render_gres_conf(self.config))
        shutil.copyfile(deferral.plugin_source(), etc / deferral.PLUGIN_NAME)
        deferral.write_config(etc, self.deferral_config())
        for path in etc.iterdir():
            path.chmod(0o644)

    def deferral_config(self) -> deferral.DeferralConfig:
        cfg = self.config
        return deferral.DeferralConfig(
            heartbeat_path=self.heartbeat_path,
            heartbeat_max_age_s=cfg.heartbeat_max_age_s,
            window_s=cfg.deferral_window_s,
            partitions=(cfg.partition,),
            path_check_every_s=0,  # the live tests swap the heartbeat between submissions
        )

    def _make_gpu_devices(self) -> None:
        most = max(n.gpus for n in self.config.nodes())
        for index in range(most):
            # Same major/minor as /dev/null: nothing opens them (TaskPlugin=task/none).
            os.mknod(self.root / "dev" / f"nvidia{index}", 0o666 | 0o020000, os.makedev(1, 3))

    def _write_munge_key(self) -> None:
        key = self.root / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o600)

    # -- daemons -----------------------------------------------------------------------

    def _daemon(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """Run a self-daemonizing program; its parent exits once the daemon is set up."""
        result = run_command(argv, timeout_s, self.client_env())
        if not result.ok:
            log = _tail(self.root / "log", argv)
            raise DevClusterError(
                f"`{' '.join(argv)}` failed (exit {result.returncode}): "
                f"{result.stderr.strip() or log}"
            )
        return result

    def _start_munged(self, timeout_s: float) -> None:
        munge = self.root / "munge"
        self._daemon(
            [
                str(SBIN / "munged"),
                "--force",
                f"--key-file={munge / 'munge.key'}",
                f"--socket={munge / 'munge.socket'}",
                f"--pid-file={self.root / 'run' / 'munged.pid'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
                f"--seed-file={munge / 'munge.seed'}",
            ],
            timeout_s,
        )
        _wait_for(lambda: (munge / "munge.socket").exists(), timeout_s, "munged socket")

    def controller_pid(self) -> int | None:
        """slurmctld's pid, while it runs (the fault tests stop and kill it)."""
        return self._alive_pid("slurmctld.pid", "slurmctld")

    def start_controller(self, timeout_s: float = 60.0) -> None:
        """Start slurmctld again (state recovered from StateSaveLocation) after it died."""
        self._start_slurmctld(timeout_s)

    def _start_slurmctld(self, timeout_s: float) -> None:
        self._daemon([str(SBIN / "slurmctld"), "-i"], timeout_s)
        _wait_for(self._controller_answers, timeout_s, "slurmctld to answer")

    def _start_slurmds(self) -> None:
        for node in self.config.nodes():
            (self.root / "spool" / node.name).mkdir(exist_ok=True)
            self._daemon([str(SBIN / "slurmd"), "-N", node.name], 30.0)

    def _controller_answers(self) -> bool:
        try:
            return run_command(["scontrol", "ping"], 5.0, self.client_env()).ok
        except SlurmError:
            return False

    def _node_states(self) -> tuple[tuple[str, str], ...]:
        try:
            result = run_command(["sinfo", "-h", "-N", "-o", "%N %T"], 5.0, self.client_env())
        except SlurmError:
            return ()
        pairs = (line.split() for line in result.stdout.splitlines())
        return tuple((p[0], p[1].rstrip("*~#!%$@^-")) for p in pairs if len(p) == 2)

    def _cancel_all_jobs(self, timeout_s: float) -> None:
        env = self.client_env()
        listed = run_command(["squeue", "-h", "-o", "%A"], 10.0, env)
        ids = [line.strip() for line in listed.stdout.splitlines() if line.strip()]
        if not ids:
            return
        run_command(["scancel", *ids], 10.0, env)

        def drained() -> bool:
            out = run_command(["squeue", "-h", "-t", "R,CG,S", "-o", "%A"], 10.0, env)
            return not out.ok or not out.stdout.strip()

        # KillWait is short in the dev config; give up waiting and rely on SIGKILL after.
        _wait_for(drained, min(timeout_s, 15.0), "jobs to end", fail=False)

    def _stop_processes(self, status: DevClusterStatus) -> None:
        slurm_pids = [d.pid for d in status.daemons
                      if d.pid is not None and d.name.split()[0] in ("slurmctld", "slurmd")]
        # Steps and job processes of this cluster carry its SLURM_CONF in their environment.
        strays = _processes_with_env("SLURM_CONF", str(self.slurm_conf), exclude=_ancestors())
        _terminate(slurm_pids, grace_s=3.0)
        _terminate(_with_descendants(strays), grace_s=0.5)
        # slurmdbd before its database; by pidfile whatever the config says (a CLI `down`
        # knows no accounting flag)
        for daemon in self._accounting_daemons():
            if daemon.pid is not None:
                _terminate([daemon.pid], grace_s=10.0)
        munged = status.daemons[0].pid
        if munged is not None:
            _terminate([munged], grace_s=3.0)

    def _alive_pid(self, pidfile: str, program: str, directory: str = "run") -> int | None:
        try:
            pid = int((self.root / directory / pidfile).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _process_name(pid) == program else None

    # -- accounting (opt-in) ----------------------------------------------------------

    @property
    def db_socket(self) -> Path:
        return self.root / "db" / "mariadb.sock"

    def _accounting_daemons(self) -> tuple[DaemonStatus, ...]:
        return (
            DaemonStatus("slurmdbd", self._alive_pid("slurmdbd.pid", "slurmdbd")),
            DaemonStatus("mariadbd", self._alive_pid("mariadb.pid", "mariadbd", "db")),
        )

    def _start_accounting(self, timeout_s: float) -> None:
        """MariaDB, then slurmdbd, then the cluster, account and users (slurmctld starts
        after: it registers with slurmdbd at start-up)."""
        password = secrets.token_hex(16)  # lives only in slurmdbd.conf (0600) and MariaDB
        self._start_mariadb(password, timeout_s)
        conf = self.root / "etc" / "slurmdbd.conf"
        conf.touch(mode=0o600)
        shutil.chown(conf, self.config.slurm_user, self.config.slurm_user)
        conf.write_text(render_slurmdbd_conf(self.config, password))
        self._daemon([str(SBIN / "slurmdbd")], timeout_s)
        cfg = self.config
        self._sacctmgr(["add", "cluster", cfg.cluster_name], max(timeout_s, 60.0))
        self._sacctmgr(["add", "account", ACCOUNT, "Description=slurm-rl dev cluster",
                        "Organization=slurm-rl"], timeout_s)
        if cfg.users:
            self._sacctmgr(["add", "user", f"name={','.join(cfg.users)}",
                            f"account={ACCOUNT}"], timeout_s)

    def _start_mariadb(self, password: str, timeout_s: float) -> None:
        """A private server: its own data directory, socket and 127.0.0.1 port, no system
        config (``--no-defaults``), root only through the socket, one database for slurmdbd."""
        db = self.root / "db"
        db.mkdir(mode=0o700)
        owner = "mysql" if run_command(["getent", "passwd", "mysql"], 10.0).ok else "root"
        shutil.chown(db, owner, owner)
        base = ["--no-defaults", f"--datadir={db / 'data'}", f"--user={owner}"]
        self._daemon(["mariadb-install-db", *base, "--skip-test-db", "--skip-name-resolve",
                      "--auth-root-authentication-method=socket"], max(timeout_s, 120.0))
        argv = [str(SBIN / "mariadbd"), *base, f"--socket={self.db_socket}",
                f"--port={self.config.db_port}", "--bind-address=127.0.0.1",
                f"--pid-file={db / 'mariadb.pid'}", f"--log-error={db / 'mariadb.err'}",
                "--skip-name-resolve", "--innodb-lock-wait-timeout=900",
                # a throw-away database: no flush per commit (slurmdbd's schema set-up is
                # hundreds of statements)
                "--innodb-flush-log-at-trx-commit=0"]
        self._children.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                               stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL,
                                               start_new_session=True))
        _wait_for(lambda: self.db_socket.exists(), timeout_s, "MariaDB's socket")
        grants = (f"CREATE DATABASE slurm_acct_db; CREATE USER 'slurm'@'127.0.0.1' "
                  f"IDENTIFIED BY '{password}'; GRANT ALL ON slurm_acct_db.* TO "
                  "'slurm'@'127.0.0.1';")
        # On stdin, never in argv: the password must not show in ps or a log.
        done = subprocess.run(["mariadb", "--no-defaults", f"--socket={self.db_socket}",
                               "-uroot"], input=grants.encode(), capture_output=True,
                              timeout=timeout_s, check=False)
        if done.returncode != 0:
            raise DevClusterError(f"MariaDB set-up failed: "
                                  f"{done.stderr.decode(errors='replace').strip()}")

    def _sacctmgr(self, args: Sequence[str], timeout_s: float) -> None:
        """``sacctmgr -i ARGS``, retried while slurmdbd comes up (a first start creates
        its tables before it answers)."""
        deadline = time.monotonic() + timeout_s
        while True:
            done = run_command(["sacctmgr", "-i", *args], 30.0, self.client_env())
            if done.ok or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if not done.ok:
            raise DevClusterError(f"sacctmgr {' '.join(args)}: {done.stderr.strip()}; see "
                                  f"{self.root / 'log' / 'slurmdbd.log'}")

    def _not_ready_message(self, status: DevClusterStatus) -> str:
        dead = [d.name for d in status.daemons if not d.alive]
        states = ", ".join(f"{n}={s}" for n, s in status.node_states) or "no answer"
        where = self.root / "log"
        return f"dev cluster not ready: dead daemons {dead or 'none'}; nodes: {states}; see {where}"


# -- host setup -------------------------------------------------------------------------


def ensure_installed(script: Path = INSTALL_SCRIPT, *, accounting: bool = False) -> None:
    """Install Debian's Slurm packages (and slurmdbd, MariaDB) if a binary is missing."""
    if _slurm_installed(accounting):
        return
    if not script.exists():
        raise DevClusterError(f"Slurm is not installed and {script} is missing")
    result = run_command([str(script)], 600.0)
    if not result.ok or not _slurm_installed(accounting):
        detail = result.stderr.strip() or "Slurm is still missing"
        raise DevClusterError(f"{script} failed: {detail}")


def _slurm_installed(accounting: bool = False) -> bool:
    needed = ("slurmctld", "slurmd", "munged", *(("slurmdbd", "mariadbd") if accounting else ()))
    tools = ("sbatch", *(("sacctmgr", "mariadb-install-db", "mariadb") if accounting else ()))
    return all((SBIN / name).exists() for name in needed) and all(map(shutil.which, tools))


def ensure_users(users: Iterable[str]) -> None:
    """Create the test users (no home directory) that jobs are submitted as."""
    for user in users:
        if run_command(["getent", "passwd", user], 10.0).ok:
            continue
        made = run_command(
            ["useradd", "--no-create-home", "--shell", "/bin/sh", "--user-group", user], 30.0
        )
        if not made.ok:
            raise DevClusterError(f"cannot create test user {user}: {made.stderr.strip()}")


def free_base_port(count: int, start: int = 16800, stop: int = 30000) -> int:
    """The first port P >= start such that P .. P+count-1 are all free on 127.0.0.1."""
    for base in range(start, stop, count + 1):
        if all(_port_free(base + i) for i in range(count)):
            return base
    raise DevClusterError(f"no {count} consecutive free ports between {start} and {stop}")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _check_traversable(directory: Path) -> None:
    """Jobs of the test users run as them: every directory above the root needs o+x."""
    for path in (directory, *directory.parents):
        if path.exists() and not path.stat().st_mode & 0o001:
            raise DevClusterError(
                f"{path} is not searchable by other users (mode "
                f"{oct(path.stat().st_mode & 0o777)}); jobs of the test users could not "
                "reach their working directory: chmod o+x it or choose another --root"
            )


# -- processes (by pid only) ------------------------------------------------------------


def _process_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: parse after the last ')'.
    return int(stat.rsplit(")", 1)[1].split()[1])


def _ancestors() -> set[int]:
    pids: set[int] = set()
    pid: int | None = os.getpid()
    while pid:
        pids.add(pid)
        pid = _parent(pid)
    return pids


def _processes_with_env(key: str, value: str, exclude: set[int]) -> list[int]:
    needle = f"{key}={value}".encode()
    found = []
    for pid in _all_pids():
        if pid in exclude or _process_name(pid) not in ("slurmstepd", "slurmd", "slurmctld"):
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle in environ:
            found.append(pid)
    return found


def _with_descendants(roots: Iterable[int]) -> list[int]:
    parents = {pid: _parent(pid) for pid in _all_pids()}
    chosen = set(roots)
    grew = True
    while grew:
        children = {pid for pid, ppid in parents.items() if ppid in chosen} - chosen
        chosen |= children
        grew = bool(children)
    return sorted(chosen)


def _terminate(pids: Sequence[int], grace_s: float) -> None:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL (slurmd ignores TERM while it retries)."""
    _signal_all(pids, signal.SIGTERM)
    _wait_for(lambda: not _living(pids), grace_s, "processes to exit", fail=False)
    _signal_all(_living(pids), signal.SIGKILL)
    _wait_for(lambda: not _living(pids), 5.0, "processes to die", fail=False)


def _living(pids: Iterable[int]) -> list[int]:
    return [pid for pid in pids if _is_running(pid)]


def _is_running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _signal_all(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _wait_for(predicate: _Predicate, timeout_s: float, what: str, *, fail: bool = True) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            if fail:
                raise DevClusterError(f"timed out after {timeout_s:g} s waiting for {what}")
            return False
        time.sleep(0.05)
    return True


def _tail(log_dir: Path, argv: Sequence[str]) -> str:
    name = Path(argv[0]).name
    logs = sorted(log_dir.glob(f"{name}*.log"))
    if not logs:
        return "no log"
    lines = logs[0].read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else "empty log"


__all__ = [
    "DaemonStatus",
    "DevCluster",
    "DevClusterConfig",
    "DevClusterStatus",
    "DevNode",
    "ensure_installed",
    "ensure_users",
    "free_base_port",
]
