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
in the same scheduler when ``retention_days`` is set.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from datetime import UTC, datetime

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.background import BackgroundScheduler

from slurm_rl.config import DaemonConfig
from slurm_rl.store.repository import make_engine
from slurm_rl.store.retention import apply_retention

log = logging.getLogger("slurm_rl.retrain")
RETRAIN_JOB = "slurm-rl-retrain"
RETENTION_JOB = "slurm-rl-retention"
STORE_ENV = "SLURM_RL_STORE"  # the retrain command's --store, read from the environment


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


def run_retrain_process(argv: list[str], env: dict[str, str], timeout_s: float) -> int:
    """The scheduled job."""
    try:
        done = subprocess.run(argv, env=env, timeout=timeout_s, check=False,
                              capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        log.warning("retrain process killed after %g s; the active policy stays", timeout_s)
        return 124
    # stdout is the run's one outcome line; stderr carries warnings and, for a bug, its trace.
    for line in done.stdout.splitlines():
        if line.strip():
            log.info("%s", line.strip())
    for line in done.stderr.splitlines():
        if line.strip():
            log.warning("retrain process: %s", line.rstrip())
    return done.returncode


def run_retention(store_url: str, days: float) -> None:
    engine = make_engine(store_url)
    try:
        apply_retention(engine, days)
    finally:
        engine.dispose()


class RetrainSchedule:
    def __init__(self, scheduler: BackgroundScheduler) -> None:
        self.scheduler = scheduler

    def run_now(self) -> None:
        """Move the retrain job's next run to now (tests, and an admin's `retrain now`)."""
        self.scheduler.modify_job(RETRAIN_JOB, next_run_time=datetime.now(UTC))

    def shutdown(self) -> None:
        self.scheduler.shutdown(wait=False)


def start_schedule(config: DaemonConfig) -> RetrainSchedule | None:
    """Start the scheduler when retraining or retention is configured (else None)."""
    if config.retrain_every_h <= 0 and config.retention_days <= 0:
        return None
    scheduler = BackgroundScheduler(
        jobstores={"default": MemoryJobStore()},
        executors={"default": ThreadPoolExecutor(1)},
        job_defaults={"coalesce": True, "max_instances": 1,
                      "misfire_grace_time": int(config.retrain_misfire_grace_s)},
        timezone=UTC,
    )
    if config.retrain_every_h > 0:
        scheduler.add_job(run_retrain_process, "interval", hours=config.retrain_every_h,
                          id=RETRAIN_JOB,
                          kwargs={"argv": retrain_argv(config), "env": retrain_env(config),
                                  "timeout_s": config.retrain_timeout_s})
    if config.retention_days > 0:
        scheduler.add_job(run_retention, "interval", hours=24.0, id=RETENTION_JOB,
                          kwargs={"store_url": config.store, "days": config.retention_days})
    scheduler.start()
    log.info("retraining every %g h (window %g days, margin %.1f%%); retention %s",
             config.retrain_every_h, config.retrain_window_days, 100 * config.retrain_margin,
             f"{config.retention_days:g} days" if config.retention_days else "off")
    return RetrainSchedule(scheduler)
