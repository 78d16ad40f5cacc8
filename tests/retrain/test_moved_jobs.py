"""A job the daemon moved: its stored move keeps the run it ended, and retraining counts the
job's run time from its first start (Slurm resets a requeued job's start time, so its
outcome holds the last run only)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from slurm_rl.core import (
    Cluster,
    ClusterSnapshot,
    Decision,
    FinishedJob,
    Job,
    Placement,
    RunningJob,
)
from slurm_rl.daemon.recorder import StoreRecorder
from slurm_rl.retrain.run import retrain
from slurm_rl.retrain.window import StoreRowDamaged, load_window
from slurm_rl.slurm.actuator import ActuationReport, JobOutcome, Mode
from slurm_rl.store.repository import Store, job_key
from tests.retrain.logged import CLUSTER, NODES, fill
from tests.retrain.test_gate_and_retrain import tiny

NOW = 1_800_000_000.0
FIRST_START = NOW - 3 * 3600.0
MOVED_AT = NOW - 2 * 3600.0
RESTART = MOVED_AT + 2.0
END = NOW - 600.0


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'store.sqlite'}")


def _move(store: Store, returncode: int = 0) -> Job:
    """The daemon moves job m1 from v100-01 to a100-01 (one cycle), later it finishes there."""
    job = Job("m1", FIRST_START - 60.0, 1, user="long", partition="gpu", checkpointable=True)
    cluster = Cluster(CLUSTER, NODES)
    run = RunningJob(job, FIRST_START, Placement(("v100-01",), (1,)))
    snapshot = ClusterSnapshot(MOVED_AT, cluster, tuple(n.gpus for n in NODES), (), (run,), ())
    target = Placement(("a100-01",), (1,))
    decision = Decision("p", (), migrations={"m1": target})
    outcome = JobOutcome("m1", "migrate", ("scontrol", "requeue", "m1"), True, returncode,
                         note="restarts on a100-01")
    report = ActuationReport(Mode.ENFORCE, MOVED_AT, "p", (outcome,), ())
    StoreRecorder(store, "enforce").record(snapshot, decision, report)
    store.record_outcomes(CLUSTER, [FinishedJob(job, RESTART, END, target)], "squeue")
    return job


def test_the_move_row_keeps_the_run_it_ended(store: Store) -> None:
    _move(store)
    (row,) = store.decisions_for(CLUSTER, "m1")
    assert row.action == "migrate" and row.nodes == "a100-01"
    assert row.details is not None
    assert row.details["moved_from"] == {"nodes": ["v100-01"], "start_time": FIRST_START}


def test_retraining_counts_a_moved_jobs_run_from_its_first_start(store_url: str) -> None:
    store = Store(store_url)  # both backends: the move's details are read back as text
    fill(store, 6, now=NOW)
    _move(store)
    jobs = {job.job_id: job for job in load_window(store.engine, CLUSTER, 1.0, NOW).jobs}
    moved = jobs["m1"]
    assert (moved.start_time, moved.end_time) == (FIRST_START, END)
    assert moved.nodes == ("a100-01",)
    assert store.outcome_for(CLUSTER, "m1").start_time == RESTART  # what Slurm reported


def test_a_failed_requeue_changes_nothing(store: Store) -> None:
    fill(store, 6, now=NOW)
    _move(store, returncode=1)
    (row,) = store.decisions_for(CLUSTER, "m1")
    assert "moved_from" not in (row.details or {})
    jobs = {job.job_id: job for job in load_window(store.engine, CLUSTER, 1.0, NOW).jobs}
    assert jobs["m1"].start_time == RESTART
    assert job_key(CLUSTER, "m1") == row.job_key


def test_a_damaged_move_row_fails_the_retrain_with_a_line_naming_it(
        store: Store, tmp_path: Path) -> None:
    """SQLite keeps any text in the JSON column: one bad row must name itself, not surface as
    a bare JSONDecodeError that the retrain run reports without saying where."""
    fill(store, 40, now=NOW)
    _move(store)
    with store.engine.begin() as connection:
        (row_id,) = connection.execute(
            sa.text("SELECT id FROM decisions WHERE action = 'migrate'")).one()
        connection.execute(sa.text("UPDATE decisions SET details = '{\"moved_from\": {' "
                                   "WHERE id = :id"), {"id": row_id})
    with pytest.raises(StoreRowDamaged) as raised:
        load_window(store.engine, CLUSTER, 1.0, NOW)
    assert str(raised.value).startswith(
        f"store table decisions, row {row_id} (job {job_key(CLUSTER, 'm1')}): column 'details' "
        "is not JSON")
    url = str(store.engine.url)
    result = retrain(url, tiny(tmp_path), now=NOW)
    assert result.status == "failed"
    assert f"row {row_id} (job {job_key(CLUSTER, 'm1')})" in result.message
    assert "JSONDecodeError" not in result.message
