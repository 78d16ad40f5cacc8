"""The sim-to-real replay of issue 22, shared by ``tests/slurm/test_replay_live.py`` (one tiny
run) and ``benchmarks/replay_live.py`` (the table): a mini-trace run by a real slurmctld with
the daemon steering it, then by the simulator's emulation, and the two compared
(:mod:`slurm_rl.sim2real`).

Live: a private dev cluster (2 x a100:8, 2 x v100:4) under ``sched/backfill`` or
``sched/builtin``; the daemon in enforce mode in this process (``Daemon.run`` in a thread, on
the cluster's own runner), a fresh store per run; every job submitted with plain ``sbatch``
at its time, as alice or bob, ``-N n --gres=gpu[:type]:k -t <min>`` running ``sleep``. What
Slurm did is read back from ``squeue --json`` (finished jobs stay ``MinJobAge`` s) in
Slurm's own clock. Simulated: those jobs with Slurm's submit times, the sleeps as fixed
durations, the same policy built by the daemon's own constructor and guard, the daemon's
cycle and deferral window.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_rl.config import STORE_FILE, DaemonConfig
from slurm_rl.core import Job
from slurm_rl.daemon.guard import GuardedScheduler
from slurm_rl.daemon.history import PrimedScheduler
from slurm_rl.daemon.runner import Daemon
from slurm_rl.devcluster.cluster import DevCluster, free_base_port
from slurm_rl.devcluster.config import DevClusterConfig, NodeGroup
from slurm_rl.live_policy import make_policy
from slurm_rl.sim2real import Comparison, JobRun, WorldSetup, compare, dev_cluster, simulate_runs
from slurm_rl.simulator.slurm_emulation import SlurmScheduler
from slurm_rl.slurm.hostlist import expand
from slurm_rl.slurm.priority import HeldPriorities, PriorityLimits
from slurm_rl.slurm.proc import make_runner

USERS = ("alice", "bob")
GROUPS = (NodeGroup("a100", 2, 8), NodeGroup("v100", 2, 4))
CLUSTER = "replay"
PARTITION = "gpu"
WINDOW_S = 6  # the job_submit plugin's deferral window and the simulator's
CYCLE_S = 2.0  # the daemon's interval_s and the simulator's cycle
BF_RESOLUTION_S = 1  # the emulation plans to the second; Slurm's default is 60
# from the daemon's last scontrol call to slurmctld starting the job: fitted on the saved
# runs (0, 0.3, 0.6, 1 s tried; 0.6 gave the smallest median error), docs/slurm-emulation.md
SLURM_REACTION_S = 0.5
# after a job's end, Slurm starts nothing on its nodes this long (SimConfig.slurm_end_lag_s):
# measured on the dev cluster, not fitted (docs/slurm-emulation.md: 0.9 s on average over 224
# starts in the saved runs, 0.93-0.95 s in a probe without a daemon)
SLURM_END_LAG_S = 0.9
# The daemon stamps a snapshot before it queries Slurm (SlurmSource.state: the clock, then
# squeue, then sinfo), so what it sees is Slurm's state a little after the stamp. The
# emulation observes this much after each live cycle's stamp (its levers still act at the
# same moment): fitted on the 30 saved runs (0, 0.1, 0.2, 0.3 s tried: identical node sets
# 87.7, 89.2, 88.3, 83.7 %), then checked on the holdout and the dispatch runs
# (docs/slurm-emulation.md, "The snapshot's own delay")
SLURM_OBSERVE_LAG_S = 0.1
# (weight, nodes, GPUs per node, type): gangs that fill a node, span two, or need one type
SHAPES: tuple[tuple[int, int, int, str | None], ...] = (
    (6, 1, 1, None), (8, 1, 2, None), (6, 1, 4, None), (3, 1, 8, None), (3, 2, 4, None),
    (3, 1, 2, "a100"), (3, 1, 4, "v100"), (2, 2, 2, "v100"), (2, 1, 8, "a100"),
    (1, 2, 8, None),
)


@dataclass(frozen=True, slots=True)
class MiniJob:
    """One job of a mini-trace: submitted ``offset_s`` after the first, sleeps ``sleep_s``."""

    name: str
    user: str
    offset_s: float
    nodes: int
    gpus_per_node: int
    gpu_type: str | None
    sleep_s: int
    limit_min: int

    def options(self) -> tuple[str, ...]:
        typed = f"{self.gpu_type}:" if self.gpu_type else ""
        return ("-J", self.name, "-N", str(self.nodes), f"--gres=gpu:{typed}{self.gpus_per_node}",
                "-t", str(self.limit_min))


def make_trace(jobs: int, seed: int, gap_s: tuple[float, float] = (0.0, 3.0),
               sleep_s: tuple[int, int] = (4, 30)) -> tuple[MiniJob, ...]:
    """``jobs`` jobs of two users, gaps and sleeps drawn in the given ranges (seconds); time
    limits of 1 or 2 minutes (users overestimate), never shorter than the sleep."""
    rng = random.Random(seed)
    weights = [shape[0] for shape in SHAPES]
    offset, planned = 0.0, []
    for number in range(jobs):
        _, nodes, per_node, gpu_type = rng.choices(SHAPES, weights)[0]
        sleep = rng.randint(*sleep_s)
        limit = max(rng.choice((1, 1, 2)), -(-sleep // 60))
        planned.append(MiniJob(f"r{seed}-{number:02d}", rng.choice(USERS), round(offset, 1),
                               nodes, per_node, gpu_type, sleep, limit))
        offset += rng.uniform(*gap_s)
    return tuple(planned)


# -- the cluster ------------------------------------------------------------------------


@contextlib.contextmanager
def replay_cluster(scheduler: SlurmScheduler) -> Iterator[DevCluster]:
    """A private dev cluster under ``sched/<scheduler>`` in a temporary directory."""
    root = Path(tempfile.mkdtemp(prefix="slurm-rl-replay-"))
    root.chmod(0o755)  # the users' jobs reach their working directory
    ports = DevClusterConfig(groups=GROUPS).port_count
    config = DevClusterConfig(root=root / "cluster", base_port=free_base_port(ports, 26800),
                              groups=GROUPS, users=USERS, deferral_window_s=WINDOW_S,
                              scheduler=scheduler, cluster_name=CLUSTER, partition=PARTITION,
                              bf_resolution_s=BF_RESOLUTION_S)
    cluster = DevCluster(config)
    try:
        cluster.up(timeout_s=120.0)
        yield cluster
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)


def daemon_config(cluster: DevCluster, policy: str, state: Path,
                  limits: PriorityLimits | None = None, dispatch: bool = False) -> DaemonConfig:
    """The daemon of the replay, on ``cluster``."""
    return daemon_config_for(policy, state, limits, dispatch).model_copy(update={
        "slurm_conf": cluster.slurm_conf, "heartbeat_path": cluster.heartbeat_path})


def daemon_config_for(policy: str, state: Path, limits: PriorityLimits | None = None,
                      dispatch: bool = False) -> DaemonConfig:
    """The replay's daemon settings. Its limits on priority changes are production's
    (``DaemonConfig``'s defaults) unless ``limits`` says otherwise: the emulation plans
    priorities within the same limits (:func:`held_priorities`), and what is measured is
    the emulation of the daemon as sites run it. ``dispatch``: the daemon's ``dispatch =
    true`` (docs/daemon.md), only its decisions start jobs."""
    config = DaemonConfig(
        policy=policy, mode="enforce", interval_s=CYCLE_S, state_dir=state,
        cluster_name=CLUSTER, partitions=(PARTITION,), defer_window_s=WINDOW_S,
        metrics_port=0, log_json=False, slurm_timeout_s=30.0, dispatch=dispatch)
    if limits is None:
        return config
    return config.model_copy(update={
        "priority_tolerance_ranks": limits.tolerance_ranks,
        "priority_updates_per_job_hour": limits.updates_per_job_hour or 3600,
        "priority_updates_per_cycle": limits.per_cycle or 1_000_000})


def priority_limits(config: DaemonConfig) -> PriorityLimits:
    """The daemon's limits on priority changes, as its runner hands them to the actuator."""
    return PriorityLimits(config.priority_tolerance_ranks, config.priority_updates_per_job_hour,
                          config.priority_updates_per_cycle)


# Runs saved before the limits were recorded ran the daemon with tolerance 0 and no cap
LEGACY_LIMITS = PriorityLimits(0, 3600, 200)
REPO = Path(__file__).resolve().parents[2]
# The bundle a learned policy ran in runs saved without a "bundle" key: the one shipped in
# policies/default until session 31, kept here so that their rl+rl runs re-simulate with the
# weights the live daemon used (the shipped bundle changes; a saved run must not)
LEGACY_BUNDLE = "benchmarks/bundles/session-14"


@contextlib.contextmanager
def running_daemon(cluster: DevCluster, config: DaemonConfig) -> Iterator[Daemon]:
    """``Daemon.run`` in a thread until the block ends; waits for its first heartbeat."""
    daemon = Daemon(lambda: config, runner=make_runner(cluster.env()))
    since = time.time()
    thread = threading.Thread(target=daemon.run, name="replay-daemon", daemon=True)
    thread.start()
    try:
        beat = cluster.heartbeat_path
        _wait(lambda: beat.exists() and beat.stat().st_mtime >= since, 120.0, "a heartbeat")
        yield daemon
    finally:
        daemon.request_stop()
        thread.join(timeout=60.0)


# -- one live run -----------------------------------------------------------------------


def submit(cluster: DevCluster, job: MiniJob) -> str:
    argv = ["runuser", "-u", job.user, "--", "sbatch", "--parsable", "--output=/dev/null",
            f"--chdir={cluster.jobs_dir}", f"--partition={PARTITION}", *job.options(),
            f"--wrap=sleep {job.sleep_s}"]
    done = subprocess.run(argv, env=cluster.client_env(), capture_output=True, text=True,
                          timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"sbatch {job.options()} as {job.user}: {done.stderr.strip()}")
    return done.stdout.strip().split(";")[0]


def submit_trace(cluster: DevCluster, trace: Sequence[MiniJob]
                 ) -> tuple[dict[str, MiniJob], dict[str, float]]:
    """Each job at its offset from the first (late ones go at once): job id -> job, and
    job id -> when it was submitted (the middle of its sbatch call: Slurm's submit_time is
    that, in whole seconds)."""
    began, ids, times = time.monotonic(), {}, {}
    for job in trace:
        time.sleep(max(0.0, began + job.offset_s - time.monotonic()))
        before = time.time()
        job_id = submit(cluster, job)
        ids[job_id], times[job_id] = job, (before + time.time()) / 2
    return ids, times


def read_back(cluster: DevCluster, ids: Sequence[str]) -> dict[str, JobRun]:
    """Submit, start, end and nodes of the finished jobs, from ``squeue --json``."""
    done = subprocess.run(["squeue", "--json"], env=cluster.client_env(), capture_output=True,
                          text=True, timeout=60, check=True)
    wanted, runs = set(ids), {}
    for record in json.loads(done.stdout)["jobs"]:
        job_id = str(record["job_id"])
        if job_id in wanted and record["job_state"] == "COMPLETED":
            runs[job_id] = JobRun(job_id, float(record["submit_time"]),
                                  float(record["start_time"]), float(record["end_time"]),
                                  expand(record["nodes"]))
    return runs


def unfinished(cluster: DevCluster, ids: Sequence[str]) -> set[str]:
    done = subprocess.run(["squeue", "-h", "-t", "PD,R,CG,CF", "-o", "%A"],
                          env=cluster.client_env(), capture_output=True, text=True,
                          timeout=60, check=False)
    return set(ids) if done.returncode != 0 else set(done.stdout.split()) & set(ids)


@dataclass(frozen=True, slots=True)
class ReplayRun:
    """One trace under one policy and scheduler: what Slurm did, what the simulator did."""

    policy: str
    scheduler: SlurmScheduler
    jobs: dict[str, MiniJob]
    real: dict[str, JobRun]
    sim: dict[str, JobRun]
    overhead_s: float  # mean real run time minus sleep: Slurm's launch and end latency
    cycles: tuple[tuple[float, float], ...]  # the daemon's cycles: snapshot time, duration
    submitted: dict[str, float]  # when each sbatch ran (Slurm's submit_time is whole seconds)
    # the daemon's stored decisions: (snapshot time, job id, action, nodes), to explain
    # a disagreement (which pins the live daemon set, and when)
    decisions: tuple[tuple[float, str, str, str], ...] = ()
    limits: PriorityLimits = PriorityLimits()  # the daemon's limits on priority changes
    dispatch: bool = False  # the daemon ran with dispatch = true
    bundle: str = "policies/default"  # its learned policies' bundle, relative to the checkout

    @property
    def comparison(self) -> Comparison:
        return compare(self.real, self.sim)


def run_live(cluster: DevCluster, trace: Sequence[MiniJob], policy: str,
             scheduler: SlurmScheduler, state: Path, drain_timeout_s: float = 600.0,
             limits: PriorityLimits | None = None, dispatch: bool = False) -> ReplayRun:
    """The trace on the cluster with the daemon running ``policy`` (its limits on priority
    changes ``limits``, default production's; ``dispatch`` as the daemon's setting), then in
    the simulator."""
    state.mkdir(mode=0o700)
    config = daemon_config(cluster, policy, state, limits, dispatch)
    with running_daemon(cluster, config):
        jobs, submitted = submit_trace(cluster, trace)
        _wait(lambda: not unfinished(cluster, list(jobs)), drain_timeout_s, "every job to end")
    real = read_back(cluster, list(jobs))
    cycles = daemon_cycles(config)
    sim = simulate_world(jobs, submitted, real, config, scheduler, cycles)
    over = [run.end - run.start - jobs[j].sleep_s for j, run in real.items()]
    return ReplayRun(policy, scheduler, jobs, real, sim, sum(over) / max(1, len(over)),
                     cycles, submitted, daemon_decisions(config), priority_limits(config),
                     dispatch)


def daemon_decisions(config: DaemonConfig) -> tuple[tuple[float, str, str, str], ...]:
    """Every decision row the daemon stored: when, which job, what, on which nodes."""
    query = ("SELECT c.snapshot_time, d.job_key, d.action, COALESCE(d.nodes, '') "
             "FROM decisions d JOIN cycles c ON c.id = d.cycle_id ORDER BY d.id")
    with contextlib.closing(sqlite3.connect(config.state_dir / STORE_FILE)) as db:
        rows = db.execute(query).fetchall()
    return tuple((float(t), str(key).rpartition(":")[2], str(a), str(n)) for t, key, a, n in rows)


def daemon_cycles(config: DaemonConfig) -> tuple[tuple[float, float], ...]:
    """When each of the daemon's cycles took its snapshot and how long it ran, from its
    store (``cycles`` rows)."""
    with contextlib.closing(sqlite3.connect(config.state_dir / STORE_FILE)) as db:
        rows = db.execute("SELECT snapshot_time, duration_s FROM cycles ORDER BY id").fetchall()
    return tuple((float(t), float(d)) for t, d in rows)


def cycle_timing(cycles: Sequence[tuple[float, float]], origin: float, interval_s: float
                 ) -> tuple[float, float, float]:
    """The live cycles' period, their phase after ``origin`` (the first sbatch) and their
    median duration: the emulation decides on the same grid, and its levers act that much
    later plus slurmctld's reaction (:data:`SLURM_REACTION_S`). The period is fitted (least
    squares over every cycle): a live cycle lasts ``interval_s`` plus a millisecond or so of
    sleep overshoot, which over a 2-minute run moves the late cycles by a tenth of a second,
    enough to see a job submitted a few ms before a cycle, or not."""
    if not cycles:
        return interval_s, 0.0, 0.0
    times = sorted(t for t, _ in cycles)
    steps = [round((t - times[0]) / interval_s) for t in times]
    period = interval_s
    if len(set(steps)) > 1:
        mean_k, mean_t = statistics.fmean(steps), statistics.fmean(times)
        spread = sum((k - mean_k) ** 2 for k in steps)
        pairs = zip(steps, times, strict=True)
        period = sum((k - mean_k) * (t - mean_t) for k, t in pairs) / spread
        start = mean_t - period * mean_k
    else:
        start = times[0]
    durations = sorted(d for _, d in cycles)
    return period, (start - origin) % period, durations[len(durations) // 2]


def sim_jobs(jobs: dict[str, MiniJob], submitted: dict[str, float], real: dict[str, JobRun],
             extra_s: Mapping[str, float] | None = None) -> list[Job]:
    """The jobs as the daemon's source sees them (Slurm's ids), submitted when sbatch ran,
    with the sleeps (plus ``extra_s``, Slurm's launch and end latency) as their durations."""
    extra = extra_s or {}
    return [
        Job(job_id=job_id, submit_time=submitted[job_id], num_gpus=m.nodes * m.gpus_per_node,
            user=m.user, partition=PARTITION, num_nodes=m.nodes, gpus_per_node=m.gpus_per_node,
            gpu_type=m.gpu_type, time_limit=60.0 * m.limit_min,
            oracle_duration=m.sleep_s + extra.get(job_id, 0.0))
        for job_id, m in jobs.items() if job_id in real
    ]


@dataclass(frozen=True, slots=True)
class Jitter:
    """The sub-second timings a live run draws anew each time (docs/slurm-emulation.md): how
    long a decision's levers take to act beyond the cycle's own work (one draw a replica,
    uniform in ``reaction_s``) and how much longer than its ``sleep`` each job runs
    (uniform in ``overrun_s``: launch and completion, measured 0.0-0.6 s a run on average)."""

    reaction_s: tuple[float, float] = (0.1, 0.9)
    overrun_s: tuple[float, float] = (0.0, 0.5)

    def draw(self, rng: random.Random, job_ids: Sequence[str]) -> tuple[float, dict[str, float]]:
        reaction = rng.uniform(*self.reaction_s)
        return reaction, {job_id: rng.uniform(*self.overrun_s) for job_id in sorted(job_ids)}


def simulate_world(jobs: dict[str, MiniJob], submitted: dict[str, float],
                   real: dict[str, JobRun], config: DaemonConfig, scheduler: SlurmScheduler,
                   cycles: Sequence[tuple[float, float]] = (), reaction_s: float | None = None,
                   extra_s: Mapping[str, float] | None = None,
                   end_lag_s: float = SLURM_END_LAG_S,
                   observe_lag_s: float = SLURM_OBSERVE_LAG_S) -> dict[str, JobRun]:
    """The simulator's replay of the jobs Slurm ran, under the daemon's own policy object
    (``reaction_s``, ``extra_s``: a :class:`Jitter` draw; default none; ``end_lag_s``:
    ``SimConfig.slurm_end_lag_s``; ``observe_lag_s``: how long after its stamp a live
    snapshot sees Slurm's state, :data:`SLURM_OBSERVE_LAG_S`)."""
    policy = make_policy(config.policy, seed=config.seed, bundle=config.policy_bundle,
                         rules=config.ranking_rules)
    guarded = GuardedScheduler(PrimedScheduler(policy, None),
                               allow_mixed_gpu_types=config.allow_mixed_gpu_types,
                               hold_refused=config.dispatch)
    cluster = dev_cluster(CLUSTER, [(n.name, n.gpu_type, n.gpus)
                                    for n in DevClusterConfig(groups=GROUPS).nodes()])
    origin = min((submitted[job_id] for job_id in real), default=0.0)
    period, phase, duration = cycle_timing(cycles, origin, config.interval_s)
    phase, duration = phase + observe_lag_s, max(0.0, duration - observe_lag_s)
    reaction = SLURM_REACTION_S if reaction_s is None else reaction_s
    limits, floor = priority_limits(config), config.priority_floor
    setup = WorldSetup(period, float(config.defer_window_s), scheduler,
                       lever_delay_s=duration + reaction, cycle_phase_s=phase,
                       held_priorities=lambda: HeldPriorities(limits, floor),
                       end_lag_s=end_lag_s, hold_cap_s=config.defer_cap_s)
    return simulate_runs(cluster, sim_jobs(jobs, submitted, real, extra_s), guarded, setup)


def _wait(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.2)


# -- saved runs: the live half is minutes, re-simulating it is instant ------------------


def save_run(run: ReplayRun, path: Path) -> None:
    """The live half of a run as JSON (what Slurm and the daemon did), for :func:`resimulate`
    with a later emulation."""
    document = {
        "policy": run.policy, "scheduler": run.scheduler,
        "jobs": {job_id: dataclasses.asdict(job) for job_id, job in run.jobs.items()},
        "real": {job_id: dataclasses.asdict(r) for job_id, r in run.real.items()},
        "cycles": run.cycles, "submitted": run.submitted, "decisions": run.decisions,
        "priority_limits": dataclasses.asdict(run.limits), "dispatch": run.dispatch,
        "bundle": run.bundle,
    }
    path.write_text(json.dumps(document, indent=1))


def resimulate(path: Path, end_lag_s: float = SLURM_END_LAG_S) -> ReplayRun:
    """A saved run's live half, replayed again by the emulation as it is now."""
    run, config = _saved(path)
    sim = simulate_world(run.jobs, run.submitted, run.real, config, run.scheduler, run.cycles,
                         end_lag_s=end_lag_s)
    return dataclasses.replace(run, sim=sim)


def resimulate_jittered(path: Path, replicas: int, seed: int = 0,
                        jitter: Jitter = Jitter(), end_lag_s: float = SLURM_END_LAG_S
                        ) -> list[dict[str, JobRun]]:
    """A saved run replayed ``replicas`` times, each with its own :class:`Jitter` draw: the
    schedules the emulation finds possible when the sub-second timings vary as they do live."""
    run, config = _saved(path)
    rng = random.Random(f"{path.stem}:{seed}")
    sims = []
    for _ in range(replicas):
        reaction, extra = jitter.draw(rng, list(run.real))
        sims.append(simulate_world(run.jobs, run.submitted, run.real, config, run.scheduler,
                                   run.cycles, reaction, extra, end_lag_s))
    return sims


def _saved(path: Path) -> tuple[ReplayRun, DaemonConfig]:
    """A saved run's live half (its ``sim`` empty) and the daemon settings it ran with."""
    document = json.loads(path.read_text())
    jobs = {job_id: MiniJob(**fields) for job_id, fields in document["jobs"].items()}
    real = {job_id: JobRun(**{**fields, "nodes": tuple(fields["nodes"])})
            for job_id, fields in document["real"].items()}
    cycles = tuple((float(t), float(d)) for t, d in document["cycles"])
    submitted = {job_id: float(t) for job_id, t in document["submitted"].items()}
    scheduler: SlurmScheduler = "builtin" if document["scheduler"] == "builtin" else "backfill"
    limits = (PriorityLimits(**document["priority_limits"]) if "priority_limits" in document
              else LEGACY_LIMITS)
    dispatch = document.get("dispatch") is True  # runs saved before it: without
    bundle = str(document.get("bundle", LEGACY_BUNDLE))
    config = daemon_config_for(document["policy"], Path(tempfile.gettempdir()), limits,
                               dispatch).model_copy(update={"policy_bundle": REPO / bundle})
    over = [r.end - r.start - jobs[j].sleep_s for j, r in real.items()]
    decisions = tuple((float(t), str(j), str(a), str(n))
                      for t, j, a, n in document.get("decisions", ()))
    run = ReplayRun(document["policy"], scheduler, jobs, real, {},
                    sum(over) / max(1, len(over)), cycles, submitted, decisions,
                    priority_limits(config), dispatch, bundle)
    return run, config
