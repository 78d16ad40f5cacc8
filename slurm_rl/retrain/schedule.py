"""Scheduled retraining inside the daemon: an APScheduler 3 job in a job store held in
memory, rebuilt from the config at every start and reload.

Never a persistent job store: APScheduler's SQLAlchemy store unpickles its rows, so anyone
who could write the store's database could run code as the daemon. The config says what
runs and when, so nothing is lost: the interval counts from the start or reload, as it did
with the persistent store (``replace_existing`` reset it there too).

The job is coalesced (missed runs collapse into one), runs one instance at a time, and a
run later than ``retrain_misfire_grace_s`` is dropped until the next one. Its thread only
waits: the retrain itself is a separate process (``python -m slurm_rl.cli.retrain``, an argv
list, never a shell), so training never shares the decision loop's thread, interpreter lock
or memory, and a crash in training cannot take the daemon down. Retention runs once a day
in the same scheduler when ``retention_days`` is set, in a thread of its own: APScheduler
checks the misfire grace when a job starts in its worker, so behind a retrain longer than
the grace it would be dropped every day (both fall due together when the retrain interval
divides 24 h) and the store would grow until its disk is full.

Shutting the schedule down ends a running retrain process (SIGTERM, SIGKILL after
``STOP_GRACE_S``): else the daemon's exit waits for it, up to ``retrain_timeout_s``. A
retrain process marks its own ``retrain_runs`` row failed on SIGTERM (``slurm-rl retrain``
turns it into an error); one that ended by another signal (SIGKILL after the grace, the OOM
killer) cannot, and its lease would then block every retrain for 6 hours: the daemon marks
it failed.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import update
from sqlalchemy.exc import SQLAlchemyError

from slurm_rl.config import DaemonConfig
from slurm_rl.errors import SlurmRLError
from slurm_rl.store.registry_models import RetrainRunRow
from slurm_rl.store.repository import make_engine
from slurm_rl.store.retention import apply_retention

log = logging.getLogger("slurm_rl.retrain")
RETRAIN_JOB = "slurm-rl-retrain"
RETENTION_JOB = "slurm-rl-retention"
RETENTION_EXECUTOR = "retention"
STORE_ENV = "SLURM_RL_STORE"  # the retrain command's --store, read from the environment
STOP_GRACE_S = 5.0  # a retrain process SIGTERM did not end by then is killed
NOT_STARTED = 143  # the status of a retrain the shutdown kept from starting (128 + SIGTERM)


def retrain_argv(config: DaemonConfig) -> list[str]:
    """The one-shot command the scheduled job runs, with the daemon's settings. The store
    URL is not among them (it may hold a password, and any user can read a process's
    command line): the child reads it from ``$SLURM_RL_STORE``, see :func:`retrain_env`."""
    argv = [sys.executable, "-m", "slurm_rl.cli.retrain",
            "--policy", config.policy, "--window-days", repr(config.retrain_window_days),
            "--margin", repr(config.retrain_margin),
            "--fee-tolerance", repr(config.retrain_fee_tolerance),
            "--wait-tolerance", repr(config.retrain_wait_tolerance),
            "--iterations", str(config.retrain_iterations),
            "--episodes", str(config.retrain_episodes),
            "--gate-seeds", str(config.retrain_gate_seeds),
            "--cycle", repr(config.interval_s), "--defer-window", str(config.defer_window_s),
            "--cache-dir", str(config.models_cache),
            # the world the candidate is fine-tuned and judged in: the daemon's
            "--dispatch" if config.dispatch else "--no-dispatch",
            "--defer-cap", repr(config.defer_cap_s),
            "--fairness-max-wait-ratio", repr(config.fairness_max_wait_ratio),
            "--fairness-window", repr(config.fairness_window_s),
            "--fairness-min-wait", repr(config.fairness_min_wait_s),
            "--nice-per-rank", str(config.nice_per_rank),
            "--allow-mixed-gpu-types" if config.allow_mixed_gpu_types else "--one-gpu-type",
            "--priority-tolerance-ranks", str(config.priority_tolerance_ranks),
            "--priority-updates-per-job-hour", str(config.priority_updates_per_job_hour),
            "--priority-updates-per-cycle", str(config.priority_updates_per_cycle),
            "--priority-floor", str(config.priority_floor),
            "--migrate" if config.migrate else "--no-migrate",
            "--max-migrations-per-cycle", str(config.max_migrations_per_cycle)]
    if config.cluster_name:
        argv += ["--cluster", config.cluster_name]
    if config.policy_bundle is not None:
        argv += ["--policy-bundle", str(config.policy_bundle)]
    if config.retrain_base_bundle is not None:
        argv += ["--base", str(config.retrain_base_bundle)]
    return argv


def retrain_env(config: DaemonConfig) -> dict[str, str]:
    """The child's environment: the daemon's, with the store URL (only the daemon's user
    and root can read another process's environment)."""
    return {**os.environ, STORE_ENV: config.store}


def schedule_settings(config: DaemonConfig) -> tuple[object, ...]:
    """What the schedule is built from: a reload that changes any of it restarts it."""
    return (retrain_argv(config), config.store, config.retrain_every_h, config.retention_days,
            config.retrain_misfire_grace_s, config.retrain_timeout_s)


@dataclass
class _Child:
    process: subprocess.Popen[str]
    exited: threading.Event = field(default_factory=threading.Event)  # reaped
    settled: threading.Event = field(default_factory=threading.Event)  # its row marked too
    stopped: bool = False  # ended by the schedule's shutdown


class RetrainProcesses:
    """The retrain processes the schedule started; :meth:`stop` ends them. One is shared by
    the schedules a daemon starts, so that a schedule a reload replaced (whose retrain runs
    on) still has its process ended when the daemon stops."""

    def __init__(self, grace_s: float = STOP_GRACE_S) -> None:
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._running: list[_Child] = []
        self._closed = False

    def start(self, argv: list[str], env: dict[str, str]) -> _Child | None:
        """The started process, or None once :meth:`stop` was called (a retrain queued just
        before the shutdown must not start after it)."""
        with self._lock:
            if self._closed:
                return None
            process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
            child = _Child(process)
            self._running.append(child)
            return child

    def finished(self, child: _Child) -> None:
        with self._lock:
            self._running.remove(child)
        child.exited.set()
        child.settled.set()

    def stop(self) -> None:
        """SIGTERM every running retrain process, SIGKILL those still there after the
        grace, and wait (bounded) until their runs are marked."""
        with self._lock:
            self._closed = True
            children = list(self._running)
        # Popen sends nothing to a process it has reaped, so no other process gets these.
        for child in children:
            child.stopped = True
            child.process.terminate()
        deadline = time.monotonic() + self.grace_s
        for child in children:
            if not child.exited.wait(max(0.0, deadline - time.monotonic())):
                child.process.kill()
        for child in children:
            child.settled.wait(self.grace_s)  # the store may be slow; never hang the exit


def run_retrain_process(argv: list[str], env: dict[str, str], timeout_s: float,
                        processes: RetrainProcesses | None = None) -> int:
    """The scheduled job."""
    processes = processes if processes is not None else RetrainProcesses()
    child = processes.start(argv, env)
    if child is None:
        log.info("retrain not started: the daemon is stopping")
        return NOT_STARTED
    try:
        status, out, err, timed_out = _wait(child, timeout_s)
        # stdout is the run's one outcome line; stderr carries warnings and, for a bug, its
        # trace.
        for line in out.splitlines():
            if line.strip():
                log.info("%s", line.strip())
        for line in err.splitlines():
            if line.strip():
                log.warning("retrain process: %s", line.rstrip())
        if timed_out or status < 0:  # killed, it could not mark its run: the daemon does
            why = "killed: retrain_timeout_s passed" if timed_out else _ended_by(child, status)
            _release_run(env.get(STORE_ENV), child.process.pid, why)
        return 124 if timed_out else status
    finally:
        processes.finished(child)


def _wait(child: _Child, timeout_s: float) -> tuple[int, str, str, bool]:
    """The process's status, stdout and stderr, and whether the timeout killed it."""
    timed_out = False
    try:
        out, err = child.process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.process.kill()
        out, err = child.process.communicate()
        log.warning("retrain process killed after %g s; the active policy stays", timeout_s)
        timed_out = True
    child.exited.set()
    return child.process.returncode, out, err, timed_out


def _ended_by(child: _Child, status: int) -> str:
    """Why a process ended by signal ``-status`` (one warning line says so too)."""
    try:
        signame = signal.Signals(-status).name
    except ValueError:
        signame = f"signal {-status}"
    if child.stopped:
        log.warning("retrain process ended (%s) as the daemon stops; the active policy "
                    "stays", signame)
        return f"ended ({signame}) as the daemon stopped"
    log.warning("retrain process killed by %s; the active policy stays", signame)
    return f"killed by {signame}"


def _release_run(store_url: str | None, pid: int, why: str) -> None:
    """Mark the ``retrain_runs`` row a killed retrain process left running (its lease would
    block the next retrains for 6 h). It is found by host and pid, as the process wrote it."""
    if not store_url:
        return
    try:
        engine = make_engine(store_url)
        try:
            with engine.begin() as connection:
                connection.execute(update(RetrainRunRow).where(
                    RetrainRunRow.status == "running", RetrainRunRow.pid == pid,
                    RetrainRunRow.host == socket.gethostname(),
                ).values(status="failed", finished_at=datetime.now(UTC),
                         message=f"retrain process {why}"))
        finally:
            engine.dispose()
    except (SlurmRLError, SQLAlchemyError) as exc:
        log.warning("the retrain run of process %d stays marked running until its lease "
                    "ends: store error: %s", pid, str(exc).splitlines()[0])


def run_retention(store_url: str, days: float) -> None:
    engine = make_engine(store_url)
    try:
        apply_retention(engine, days)
    finally:
        engine.dispose()


class RetrainSchedule:
    def __init__(self, scheduler: BackgroundScheduler, processes: RetrainProcesses) -> None:
        self.scheduler = scheduler
        self.processes = processes

    def run_now(self) -> None:
        """Move the retrain job's next run to now (tests, and an admin's `retrain now`)."""
        self.scheduler.modify_job(RETRAIN_JOB, next_run_time=datetime.now(UTC))

    def shutdown(self, *, end_retrain: bool = True) -> None:
        """Stop scheduling; with ``end_retrain``, also end a running retrain process (a
        reload that restarts the schedule lets it finish instead)."""
        self.scheduler.shutdown(wait=False)
        if end_retrain:
            self.processes.stop()


def start_schedule(config: DaemonConfig,
                   processes: RetrainProcesses | None = None) -> RetrainSchedule | None:
    """Start the scheduler when retraining or retention is configured (else None); the
    retrain processes it starts join ``processes`` (default: a set of its own)."""
    if config.retrain_every_h <= 0 and config.retention_days <= 0:
        return None
    if processes is None:
        processes = RetrainProcesses()
    scheduler = BackgroundScheduler(
        jobstores={"default": MemoryJobStore()},
        # Retention in its own thread, never waiting (and so never misfiring) behind a retrain.
        executors={"default": ThreadPoolExecutor(1), RETENTION_EXECUTOR: ThreadPoolExecutor(1)},
        job_defaults={"coalesce": True, "max_instances": 1,
                      "misfire_grace_time": int(config.retrain_misfire_grace_s)},
        timezone=UTC,
    )
    if config.retrain_every_h > 0:
        scheduler.add_job(run_retrain_process, "interval", hours=config.retrain_every_h,
                          id=RETRAIN_JOB,
                          kwargs={"argv": retrain_argv(config), "env": retrain_env(config),
                                  "timeout_s": config.retrain_timeout_s,
                                  "processes": processes})
    if config.retention_days > 0:
        scheduler.add_job(run_retention, "interval", hours=24.0, id=RETENTION_JOB,
                          executor=RETENTION_EXECUTOR,
                          kwargs={"store_url": config.store, "days": config.retention_days})
    scheduler.start()
    log.info("retraining every %g h (window %g days, margin %.1f%%); retention %s",
             config.retrain_every_h, config.retrain_window_days, 100 * config.retrain_margin,
             f"{config.retention_days:g} days" if config.retention_days else "off")
    return RetrainSchedule(scheduler, processes)
