"""The store on SQLite and on a real PostgreSQL server: Alembic upgrade and downgrade, the
daemon writing while a retrain reads (no lock errors, no lost rows), retention, export, and
the models commands."""

from __future__ import annotations

import csv
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from slurm_rl.cli.main import main
from slurm_rl.core import Cluster, ClusterSnapshot, Decision, FinishedJob, Job, Placement
from slurm_rl.retrain.window import load_window
from slurm_rl.store import migrate
from slurm_rl.store.models import CycleRow, DecisionRow, JobRow, OutcomeRow
from slurm_rl.store.registry import ModelRegistry
from slurm_rl.store.repository import ActionRecord, Store, make_engine
from slurm_rl.store.retention import apply_retention
from tests.retrain.logged import CLUSTER, NODES, fill

NOW = 1_800_000_000.0
TABLES = {"cycles", "jobs", "decisions", "outcomes", "nodes", "model_versions",
          "model_events", "retrain_runs"}


@pytest.fixture
def url(store_url: str) -> str:
    return store_url


def test_alembic_upgrade_and_downgrade(url: str) -> None:
    engine = make_engine(url)
    migrate.upgrade(engine, "0001")
    store = Store(url, upgrade=False)
    fill(store, 5, now=NOW, nodes=False)  # rows of the older schema
    migrate.upgrade(engine)
    assert set(sa.inspect(engine).get_table_names()) >= TABLES
    assert "apscheduler_jobs" not in sa.inspect(engine).get_table_names()  # unpickled rows
    assert store.count(OutcomeRow) == 5  # kept through the upgrade
    migrate.downgrade(engine, "0001")
    names = set(sa.inspect(engine).get_table_names())
    assert not {"model_versions", "nodes", "apscheduler_jobs"} & names
    assert store.count(OutcomeRow) == 5  # and through the downgrade
    migrate.downgrade(engine, "base")
    assert not TABLES & set(sa.inspect(engine).get_table_names())
    migrate.upgrade(engine)
    assert set(sa.inspect(engine).get_table_names()) >= TABLES
    assert "apscheduler_jobs" not in sa.inspect(engine).get_table_names()  # unpickled rows
    engine.dispose()


def _cycle(store: Store, k: int, start: float) -> None:
    """What one daemon cycle writes: a cycle with a decision, and an outcome."""
    job = Job(f"w{k}", start + k, 1, user="writer", num_nodes=1, gpus_per_node=1)
    cluster = Cluster(CLUSTER, NODES)
    snapshot = ClusterSnapshot(time=start + k, cluster=cluster, free_gpus=(8, 8, 4, 4),
                               pending=(job,), running=(), finished=())
    decision = Decision(ranking=(job.job_id,), placements={}, policy_id="writer")
    store.record_cycle(snapshot, decision, [ActionRecord(job.job_id, "release")], mode="shadow")
    done = FinishedJob(job, start + k + 1, start + k + 2, Placement(("v100-01",), (1,)))
    store.record_outcomes(CLUSTER, [done], "squeue")


def test_the_daemon_writes_while_a_retrain_reads(url: str) -> None:
    """A writer thread (the daemon's cycles, each its own transaction) against a reader
    (the retrain's window, the registry, export's scans) for a few seconds on one store:
    every write lands, no reader or writer sees a lock error."""
    writer_store = Store(url)
    fill(writer_store, 30, now=NOW)
    reader = make_engine(url)
    errors: list[BaseException] = []
    written = 0
    stop = threading.Event()

    def write() -> None:
        nonlocal written
        try:
            while not stop.is_set() and written < 400:
                _cycle(writer_store, written, NOW - 600.0)
                written += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    reads = 0
    deadline = time.monotonic() + 4.0
    try:
        while time.monotonic() < deadline and thread.is_alive():
            window = load_window(reader, CLUSTER, 1.0, NOW)
            assert len(window.jobs) >= 30
            ModelRegistry(reader).versions()
            with reader.connect() as connection:  # a long scan, as export does
                connection.execute(sa.select(DecisionRow, CycleRow).join(CycleRow)).all()
            reads += 1
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not errors, errors
    assert reads >= 3 and written >= 20
    print(f"{url.split(':')[0]}: {written} cycles written during {reads} retrain reads")
    check = Store(url, upgrade=False)
    # fill() wrote one cycle deciding its 30 jobs; the writer one cycle and decision each
    assert check.count(CycleRow) == 1 + written and check.count(DecisionRow) == 30 + written
    assert check.count(OutcomeRow) == 30 + written
    assert check.count(JobRow) == 30 + written
    reader.dispose()


def test_retention_keeps_the_recent_rows(url: str) -> None:
    store = Store(url)
    for k in range(10):
        _cycle(store, k, NOW - 10 * 86400.0)  # ten days old
    for k in range(10, 15):
        _cycle(store, k, NOW - 3600.0)
    ModelRegistry(store.engine).register("fifo+best-fit")
    removed = apply_retention(store.engine, 7.0, now=NOW)
    assert (removed.cycles, removed.decisions, removed.outcomes, removed.jobs) == (10, 10, 10, 10)
    assert store.count(CycleRow) == 5 and store.count(OutcomeRow) == 5
    assert store.count(JobRow) == 5 and ModelRegistry(store.engine).count() == 1


def test_a_job_whose_row_retention_removed_while_it_ran_is_stored_again(url: str) -> None:
    """Job 42 was pinned on day 0 (its only decision row) and ran for 9 days; retention
    (7 days) on day 8 removed its row, which this process still believed stored. Its outcome
    on day 9, and job 43's in the same batch, are stored: the job row is written again."""
    store = Store(url)
    long_job, other = Job("42", NOW, 2, user="alice"), Job("43", NOW + 9 * 86400.0, 2)
    cluster = Cluster(CLUSTER, NODES)
    snapshot = ClusterSnapshot(NOW + 10, cluster, (8, 8, 4, 4), (long_job,))
    on = Placement(("a100-01",), (2,))
    decision = Decision("fifo+first-fit", ("42",), {"42": on}, (1.0,))
    store.record_cycle(snapshot, decision, [ActionRecord("42", "place", ("scontrol",), 0, "")],
                       mode="enforce")
    apply_retention(store.engine, 7.0, now=NOW + 8 * 86400.0)
    assert store.count(JobRow) == 0
    store.record_outcomes(CLUSTER, [
        FinishedJob(long_job, NOW + 20, NOW + 9 * 86400.0, on, "COMPLETED", 0),
        FinishedJob(other, NOW + 9 * 86400.0 + 1, NOW + 9 * 86400.0 + 60, on, "COMPLETED", 0),
    ], "squeue")
    assert store.count(OutcomeRow) == 2 and store.count(JobRow) == 2


def test_export_since_writes_csv(url: str, tmp_path: Path) -> None:
    store = Store(url)
    for k in range(4):
        _cycle(store, k, time.time() - 10 * 86400.0)
    for k in range(4, 7):
        _cycle(store, k, time.time() - 3600.0)
    out = tmp_path / "export"
    result = CliRunner().invoke(main, ["export", "--store", url, "--since", "2d",
                                       "--output", str(out)])
    assert result.exit_code == 0, result.output
    with (out / "outcomes.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(r["job_key"] for r in rows) == [f"{CLUSTER}:w{k}" for k in range(4, 7)]
    with (out / "decisions.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == 3


def test_models_commands(url: str, tmp_path: Path) -> None:
    from slurm_rl.paths import default_bundle_path

    registry = ModelRegistry(Store(url).engine)
    first = registry.register("rl+rl", bundle=default_bundle_path())
    second = registry.register("qssf+fastest-gpu")
    runner = CliRunner()
    assert runner.invoke(main, ["models", "promote", "--store", url, str(first)]).exit_code == 0
    done = runner.invoke(main, ["models", "promote", "--store", url, str(second)])
    assert done.exit_code == 0 and f"v{second} active (was v{first})" in done.output
    listed = runner.invoke(main, ["models", "list", "--store", url])
    assert f"* v{second}" in listed.output and f"  v{first}" in listed.output
    back = runner.invoke(main, ["models", "rollback", "--store", url])
    assert back.exit_code == 0 and f"rolled back v{second}; active: v{first}" in back.output
    assert registry.active_number() == first
    bundle = registry.materialize(first, tmp_path / "cache")
    assert (bundle / "weights.pt").read_bytes() == \
        (default_bundle_path() / "weights.pt").read_bytes()
    missing = runner.invoke(main, ["models", "promote", "--store", url, "99"])
    assert missing.exit_code == 2
    assert missing.output.strip().splitlines()[-1].startswith("error: no model version 99")


def test_a_retrain_on_this_store(url: str, tmp_path: Path) -> None:
    from slurm_rl.retrain.run import retrain
    from tests.retrain.logged import NEGATABLE_BUNDLE, damaged_bundle
    from tests.retrain.test_gate_and_retrain import tiny

    store = Store(url)
    fill(store, 40, now=NOW)
    registry = ModelRegistry(store.engine)
    bad = registry.register("rl+rl", bundle=damaged_bundle(NEGATABLE_BUNDLE,
                                                           tmp_path / "bad"))
    registry.promote(bad)
    result = retrain(url, tiny(tmp_path, base_bundle=NEGATABLE_BUNDLE), now=NOW)
    assert result.status == "promoted", result.message
    assert registry.active_number() == result.version == bad + 1
