"""The daemon keeps recording, and its heartbeat keeps beating, after the daily retention
removed the rows of jobs it had stored (the golden 22.05 cluster, only the subprocess
boundary fake)."""

from __future__ import annotations

from pathlib import Path

from slurm_rl.daemon.runner import Daemon
from slurm_rl.store.models import CycleRow
from slurm_rl.store.retention import apply_retention
from tests.test_daemon import NOW, Clock, _cluster, _config

DAY = 86400.0


def test_cycles_after_retention_removed_rows_of_jobs_still_in_slurm_are_recorded(
    tmp_path: Path,
) -> None:
    """Retention (run in the daemon's own scheduler) removes the job rows of the jobs the
    first cycle stored, as it does for a job that has waited or run longer than
    ``retention_days`` with no new decision. The daemon still believed them stored: each
    later cycle broke the foreign key, was not recorded, and wrote no heartbeat (the
    job_submit plugin then stops deferring: the daemon is off)."""
    clock = Clock()
    config = _config(tmp_path)
    daemon = Daemon(lambda: config, runner=_cluster(), clock=clock)
    try:
        assert daemon.run_once().ok
        apply_retention(daemon.store.engine, 7, now=NOW + 8 * DAY)
        assert daemon.store.count(CycleRow) == 0
        for k in range(1, 4):
            clock.now = NOW + 60 * k
            result = daemon.run_once()
            assert result.ok, result.error
        assert daemon.store.count(CycleRow) == 3
        assert (tmp_path / "state" / "heartbeat").read_text() == f"{int(clock.now)}\n"
    finally:
        daemon.close(retire=False)
