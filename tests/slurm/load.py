"""The production-like load of issue 19, shared by ``tests/slurm/test_load_live.py`` (a short
run) and ``benchmarks/load_live.py`` (≥ 300 jobs).

A private dev cluster with slurmdbd (a private MariaDB) and a non-root SlurmUser (Debian's
``slurm``); ``sbatch`` bursts as three users of 1–16 GPU jobs that ``sleep`` a few seconds:
most untyped (``--gpus=2``), some typed (``--gpus=a100:2``), some multi-node (``-N 2
--gpus-per-node=4``). The daemon runs as a real process (``python -m slurm_rl.cli.daemon``, as
SlurmUser) in enforce mode; once, right after a burst, it is killed with SIGKILL as soon as
slurmctld logs the first pin of its next cycle (the cycle has sent Slurm a call and not yet
stored it), then restarted on the same store. The checks of what happened are in
``tests/slurm/load_checks.py``.

``python -m tests.slurm.load USER ARGS...`` is the daemon's launcher: it builds the policy
named by ``--policy`` as root first, so that a learned policy's imports (torch and the
standard library under this host's /root) are loaded before tests/slurm/as_user.py drops to
USER, who could not read them.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from slurm_rl.devcluster.cluster import DevCluster, free_base_port
from slurm_rl.devcluster.config import DevClusterConfig
from tests.slurm.live import daemon_toml

REPO = Path(__file__).resolve().parents[2]
USERS = ("alice", "bob", "carol")
SLURM_USER = "slurm"
CLUSTER = "load"
WINDOW_S = 15  # long enough for a killed daemon's successor to start before windows end
MIN_WAIT_S = 20.0  # the fairness guard's floor at this load's time scale (write_config)
TIME_LIMIT_MIN = "3"
# slurmctld's line for a pin it took (22.05.8, measured): "... setting req_nodes to X for JobId=N"
PIN_LINE = re.compile(r"_update_job: setting req_nodes to \S+ for JobId=\d+")

# The request shapes and their weights: (weight, -N or None, GPUs per node, type or None).
# An untyped gang of 4 x 4 GPUs fits the a100 nodes, the v100 nodes, or a mix of both.
SHAPES: tuple[tuple[int, int | None, int, str | None], ...] = (
    (30, None, 2, None), (10, None, 1, None), (8, None, 4, None), (4, None, 8, None),
    (8, 2, 2, None), (6, 2, 4, None), (3, 2, 8, None), (5, 4, 4, None),
    (6, None, 2, "a100"), (4, None, 1, "v100"), (3, None, 4, "v100"), (2, None, 8, "a100"),
    (3, 2, 4, "a100"), (2, 2, 2, "v100"),
)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job of the load: who submits it, what it asks for, how long it sleeps."""

    user: str
    nodes: int | None  # -N, for a multi-node request
    gpus_per_node: int
    gpu_type: str | None  # a typed request names its GPU type
    sleep_s: int

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * (self.nodes or 1)

    @property
    def kind(self) -> str:
        typed = "typed" if self.gpu_type else "untyped"
        return f"{typed} multi-node" if self.nodes else typed

    def options(self) -> tuple[str, ...]:
        typed = f"{self.gpu_type}:" if self.gpu_type else ""
        if self.nodes:
            return ("-N", str(self.nodes), f"--gpus-per-node={typed}{self.gpus_per_node}")
        return (f"--gpus={typed}{self.gpus_per_node}",)


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """Bursts of jobs, ``gap_s`` apart; the daemon is killed after burst ``kill_after``."""

    bursts: tuple[tuple[JobSpec, ...], ...]
    gap_s: float
    kill_after: int | None

    @property
    def jobs(self) -> tuple[JobSpec, ...]:
        return tuple(spec for burst in self.bursts for spec in burst)


def make_plan(jobs: int, bursts: int, gap_s: float, sleep_s: tuple[int, int], *,
              users: Sequence[str] = USERS, seed: int = 0, kill: bool = True) -> LoadPlan:
    """``jobs`` jobs in ``bursts`` bursts. Each burst is mostly one user's (a user dumping a
    batch, the case the fairness guard is for), the lead going round the users."""
    rng = random.Random(seed)
    weights = [shape[0] for shape in SHAPES]
    sizes = [jobs // bursts + (1 if i < jobs % bursts else 0) for i in range(bursts)]
    planned = []
    for number, size in enumerate(sizes):
        lead = users[number % len(users)]
        burst = []
        for _ in range(size):
            _, nodes, per_node, gpu_type = rng.choices(SHAPES, weights)[0]
            user = lead if rng.random() < 0.7 else rng.choice(users)
            burst.append(JobSpec(user, nodes, per_node, gpu_type, rng.randint(*sleep_s)))
        planned.append(tuple(burst))
    kill_after = bursts // 2 if kill and bursts > 1 else None
    return LoadPlan(tuple(planned), gap_s, kill_after)


def describe(plan: LoadPlan) -> list[str]:
    """The plan's figures, one per line."""
    jobs = plan.jobs
    kinds = Counter(spec.kind for spec in jobs)
    users = Counter(spec.user for spec in jobs)
    return [
        f"jobs {len(jobs)} in {len(plan.bursts)} bursts {plan.gap_s:g} s apart; "
        f"{sum(s.gpus for s in jobs)} GPUs asked, 1-{max(s.gpus for s in jobs)} a job",
        "by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())),
        "by user: " + ", ".join(f"{u} {n}" for u, n in sorted(users.items())),
        f"sleep {min(s.sleep_s for s in jobs)}-{max(s.sleep_s for s in jobs)} s; daemon "
        + (f"killed after burst {plan.kill_after + 1}" if plan.kill_after is not None
           else "never killed"),
    ]


# -- the cluster ------------------------------------------------------------------------


def missing_tools() -> str | None:
    """Why this machine cannot run the load (None: it can)."""
    if os.geteuid() != 0:
        return "the load test starts its own native cluster: root needed"
    try:
        pwd.getpwnam(SLURM_USER)
    except KeyError:
        return f"Debian's {SLURM_USER} user is missing (apt-get install slurmctld)"
    for tool in ("mariadb-install-db", "mariadb", "sacct", "sacctmgr"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/install-slurm.sh)"
    for daemon in ("slurmdbd", "mariadbd"):
        if not Path("/usr/sbin", daemon).exists():
            return f"{daemon} is not installed (scripts/install-slurm.sh)"
    return None


@contextlib.contextmanager
def accounting_cluster(users: Sequence[str] = USERS) -> Iterator[tuple[DevCluster, float]]:
    """The load's cluster (4 x a100:8, 4 x v100:4, slurmdbd, SlurmUser slurm) in a temporary
    directory with free ports; yields it and the seconds ``up`` took."""
    root = Path(tempfile.mkdtemp(prefix="slurm-rl-load-"))
    root.chmod(0o755)  # the users' jobs reach their working directory
    ports = DevClusterConfig(accounting=True).port_count
    config = DevClusterConfig(root=root / "cluster", base_port=free_base_port(ports, 24800),
                              users=tuple(users), deferral_window_s=WINDOW_S,
                              slurm_user=SLURM_USER, accounting=True, cluster_name=CLUSTER)
    cluster = DevCluster(config)
    try:
        started = time.monotonic()
        cluster.up(timeout_s=180.0)
        yield cluster, time.monotonic() - started
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)


# -- submitting -------------------------------------------------------------------------


def submit(cluster: DevCluster, spec: JobSpec) -> str:
    """``sbatch`` as the job's user; returns the job id."""
    argv = ["runuser", "-u", spec.user, "--", "sbatch", "--parsable", "--output=/dev/null",
            f"--chdir={cluster.jobs_dir}", "-t", TIME_LIMIT_MIN, *spec.options(),
            f"--wrap=sleep {spec.sleep_s}"]
    done = subprocess.run(argv, env=cluster.client_env(), capture_output=True, text=True,
                          timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"sbatch {spec.options()} as {spec.user}: {done.stderr.strip()}")
    return done.stdout.strip().split(";")[0]


def submit_burst(cluster: DevCluster, burst: Sequence[JobSpec]) -> dict[str, JobSpec]:
    """A burst: the jobs submitted together, eight at a time (as users' scripts do)."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(lambda spec: submit(cluster, spec), burst))
    return dict(zip(ids, burst, strict=True))


def unfinished(cluster: DevCluster, job_ids: Sequence[str]) -> set[str]:
    """The jobs among ``job_ids`` squeue still shows pending, running or completing."""
    done = subprocess.run(["squeue", "-h", "-t", "PD,R,CG,CF", "-o", "%A"],
                          env=cluster.client_env(), capture_output=True, text=True,
                          timeout=60, check=False)
    if done.returncode != 0:
        return set(job_ids)  # not known: still waiting
    return set(done.stdout.split()) & set(job_ids)


# -- the daemon -------------------------------------------------------------------------


@dataclass
class DaemonProcess:
    """``python -m slurm_rl.cli.daemon`` as SlurmUser, on the load cluster, one store."""

    cluster: DevCluster
    state: Path
    policy: str
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def log(self) -> Path:
        return self.state.parent / f"{self.state.name}-daemon.log"

    @property
    def store_file(self) -> Path:
        return self.state / "slurm-rl.sqlite"

    @property
    def config_file(self) -> Path:
        return self.state.parent / f"{self.state.name}.toml"

    def write_config(self) -> Path:
        cluster = self.cluster
        settings: dict[str, object] = {
            "policy": self.policy, "mode": "enforce", "interval_s": 2.0,
            "state_dir": str(self.state), "cluster_name": CLUSTER, "partitions": ["gpu"],
            "slurm_conf": str(cluster.slurm_conf), "heartbeat_path": str(cluster.heartbeat_path),
            "defer_window_s": WINDOW_S, "slurm_timeout_s": 30.0, "metrics_port": 0,
            "jobcomp_path": str(cluster.root / "log" / "jobcomp.txt"),
            "accounting_every_s": 20.0,
            # The load runs ~100 times faster than a site's: 2-20 s jobs, 2 s cycles, a 15 s
            # window. The default floor (60 s: twelve 5 s cycles, minutes-to-hours jobs) would
            # keep the guard off for most of it; ten cycles here (docs/fairness.md).
            "fairness_min_wait_s": MIN_WAIT_S,
        }
        path = self.config_file
        # daemon_toml writes Python's True, which TOML does not read
        path.write_text(daemon_toml(settings) + "accounting_outcomes = true\n")
        path.chmod(0o644)
        return path

    def start(self) -> float:
        """Start it and wait for its first heartbeat; returns the seconds that took."""
        conf = self.write_config()
        argv = [sys.executable, "-m", "tests.slurm.load", SLURM_USER, "slurm_rl.cli.daemon",
                "--config", str(conf)]
        env = {**os.environ, "HOME": str(self.state), "PYTHONUNBUFFERED": "1"}
        began, since = time.monotonic(), time.time()
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=env)
        self.starts += 1
        _wait(lambda: self._beat_since(since), 120.0, "the daemon's first heartbeat")
        return time.monotonic() - began

    def _beat_since(self, since: float) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"the daemon exited: {self.log.read_text(errors='replace')[-3000:]}")
        # The file's time, not its content: a killed predecessor may have beaten within the
        # same second, and the content is whole seconds.
        beat = self.cluster.heartbeat_path
        return beat.exists() and beat.stat().st_mtime >= since

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> int:
        """SIGTERM: it ends its cycle, retires the heartbeat and exits (0 expected)."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)


@dataclass(frozen=True, slots=True)
class Kill:
    """One SIGKILL: when (epoch), how long after arming it, and when the successor beat."""

    armed_at: float
    killed_at: float
    restart_s: float


def kill_on_first_pin(daemon: DaemonProcess, timeout_s: float) -> float | None:
    """SIGKILL the daemon the moment slurmctld logs a pin it took after now: that cycle has
    sent a call and stores its decisions only after its last call. Returns the kill's time,
    None when no pin came within ``timeout_s`` (the daemon is left running)."""
    log = daemon.cluster.root / "log" / "slurmctld.log"
    with log.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        deadline = time.monotonic() + timeout_s
        pending = b""
        while time.monotonic() < deadline:
            pending += handle.read()
            lines = pending.split(b"\n")
            pending = lines.pop()
            if any(PIN_LINE.search(line.decode(errors="replace")) for line in lines):
                daemon.kill()
                return time.time()
            time.sleep(0.002)
    return None


# -- one run ----------------------------------------------------------------------------


@dataclass
class LoadRun:
    """What one run did, for the checks and the benchmark's figures."""

    policy: str
    cluster: DevCluster
    daemon: DaemonProcess
    started_at: float
    jobs: dict[str, JobSpec] = field(default_factory=dict)
    kills: list[Kill] = field(default_factory=list)
    submit_s: list[float] = field(default_factory=list)
    first_start_s: float = 0.0
    makespan_s: float = 0.0
    drained: bool = False
    exit_code: int | None = None


def run_load(cluster: DevCluster, plan: LoadPlan, policy: str, drain_timeout_s: float
             ) -> LoadRun:
    """The whole run: daemon up, the bursts (and the kill), every job ended, daemon
    stopped. The daemon's state directory lives beside the cluster's root."""
    state = cluster.root.parent / f"state-{policy.replace('+', '-')}"
    state.mkdir(mode=0o700)
    shutil.chown(state, SLURM_USER, SLURM_USER)
    daemon = DaemonProcess(cluster, state, policy)
    run = LoadRun(policy, cluster, daemon, time.time())
    try:
        run.first_start_s = daemon.start()
        began = time.monotonic()
        for number, burst in enumerate(plan.bursts):
            submitted = time.monotonic()
            run.jobs.update(submit_burst(cluster, burst))
            run.submit_s.append(time.monotonic() - submitted)
            if number == plan.kill_after:
                _kill_and_restart(run, daemon)
            if number + 1 < len(plan.bursts):
                time.sleep(max(0.0, plan.gap_s - (time.monotonic() - submitted)))
        run.drained = _wait(lambda: not unfinished(cluster, list(run.jobs)), drain_timeout_s,
                            "every job to end", fail=False)
        run.makespan_s = time.monotonic() - began
        time.sleep(5.0)  # two more cycles: the daemon stores the last outcomes
    finally:
        run.exit_code = daemon.stop()
    return run


def _kill_and_restart(run: LoadRun, daemon: DaemonProcess) -> None:
    armed = time.time()
    killed = kill_on_first_pin(daemon, timeout_s=60.0)
    if killed is None:
        return  # no cycle pinned anything: nothing to kill in the middle of
    restart = daemon.start()
    run.kills.append(Kill(armed, killed, restart))


def _wait(check: Callable[[], bool], timeout_s: float, what: str, *, fail: bool = True
          ) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            if fail:
                raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
            return False
        time.sleep(0.2)
    return True


def _launch() -> None:
    """``python -m tests.slurm.load USER slurm_rl.daemon ... --config FILE``."""
    from slurm_rl.config import load_config
    from slurm_rl.live_policy import gpu_speeds, make_policy
    from tests.slurm import as_user

    config = load_config(Path(sys.argv[sys.argv.index("--config") + 1]), {})
    make_policy(config.policy, seed=config.seed, bundle=config.policy_bundle)
    gpu_speeds()
    # sacct's times go through time.strptime, which imports _strptime on first use (the
    # accounting reader; tests/slurm/as_user.py does not preload it)
    time.strptime("2000", "%Y")
    as_user.main()


if __name__ == "__main__":
    _launch()
