"""Retention is never starved by a retrain (review 45b): APScheduler checks the misfire
grace when a job starts in its worker, and retention shared the retrain's one worker. With
``retrain_every_h`` dividing 24 both fall due together, the retrain first, so a retrain
longer than the grace made the day's retention "missed", every day."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import slurm_rl.retrain.schedule as schedule
from slurm_rl.config import DaemonConfig
from slurm_rl.retrain.schedule import RETENTION_JOB, RETRAIN_JOB, start_schedule


def test_retention_runs_on_time_while_a_long_retrain_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    retained = threading.Event()
    retraining = threading.Event()

    def long_retrain(**kwargs: object) -> int:
        retraining.set()
        retained.wait(3.0)  # "longer than the grace" (1 s), unless retention ran meanwhile
        return 0

    monkeypatch.setattr(schedule, "run_retrain_process", long_retrain)
    monkeypatch.setattr(schedule, "run_retention", lambda **kwargs: retained.set())
    config = DaemonConfig(store_url=f"sqlite:///{tmp_path}/s.sqlite", state_dir=tmp_path,
                          retrain_every_h=24, retention_days=30, retrain_misfire_grace_s=1)
    started = start_schedule(config)
    assert started is not None
    try:
        scheduler = started.scheduler
        retrain_due = scheduler.get_job(RETRAIN_JOB).next_run_time
        assert retrain_due <= scheduler.get_job(RETENTION_JOB).next_run_time  # the same tick
        # A day later: both due together, the retrain first.
        now = datetime.now(UTC) + timedelta(seconds=0.2)
        scheduler.modify_job(RETRAIN_JOB, next_run_time=now)
        scheduler.modify_job(RETENTION_JOB, next_run_time=now + timedelta(milliseconds=50))
        assert retraining.wait(5.0)
        assert retained.wait(2.0)  # was: queued behind the retrain, then dropped as missed
    finally:
        started.shutdown()
