"""The SQL audit trail: migrations, decisions linked to outcomes, nothing lost or duplicated."""

from __future__ import annotations

import contextlib

import sqlalchemy as sa

from slurm_rl.core import Cluster, ClusterSnapshot, Decision, FinishedJob, Job, Node, Placement
from slurm_rl.store import migrate
from slurm_rl.store.models import CycleRow, DecisionRow, OutcomeRow
from slurm_rl.store.repository import ActionRecord, Store, make_engine

CLUSTER = Cluster("c1", (Node("a100-01", "A100", 8), Node("v100-01", "V100", 4)))


def _cycle(store: Store, job: Job, t: float) -> int:
    snapshot = ClusterSnapshot(t, CLUSTER, (8, 4), (job,))
    decision = Decision("fifo+first-fit", (job.job_id,),
                        {job.job_id: Placement(("a100-01",), (job.num_gpus,))}, (1.5,))
    action = ActionRecord(job.job_id, "pin", ("scontrol", "update", f"JobId={job.job_id}"), 0, "")
    return store.record_cycle(snapshot, decision, [action], mode="enforce", duration_s=0.01)


def test_decision_links_to_outcome(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/a.sqlite")
    job = Job("42", 100.0, 2, user="alice", partition="gpu")
    _cycle(store, job, 101.0)
    done = FinishedJob(job, 105.0, 205.0, Placement(("a100-01",), (2,)), "COMPLETED", 0)
    assert store.record_outcomes("c1", [done], "squeue") == 1
    assert store.record_outcomes("c1", [done], "squeue") == 0  # seen again: not duplicated
    (decision,) = store.decisions_for("c1", "42")
    outcome = store.outcome_for("c1", "42")
    assert decision.policy_id == "fifo+first-fit"
    assert decision.nodes == "a100-01" and decision.rank == 0 and decision.score == 1.5
    assert decision.argv == ["scontrol", "update", "JobId=42"]
    assert outcome is not None and outcome.job_key == decision.job_key
    assert outcome.end_time == 205.0 and outcome.exit_code == 0


def test_cycles_accumulate_and_survive_reopening(tmp_path):
    url = f"sqlite:///{tmp_path}/b.sqlite"
    store = Store(url)
    for i in range(5):
        _cycle(store, Job(str(i), float(i), 1), float(i) + 0.5)
    reopened = Store(url)
    assert reopened.count(CycleRow) == 5
    assert reopened.count(DecisionRow) == 5


def test_upgrade_and_downgrade(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path}/c.sqlite")
    migrate.upgrade(engine)
    audit = {"cycles", "jobs", "decisions", "outcomes"}
    assert audit <= set(sa.inspect(engine).get_table_names())
    migrate.downgrade(engine, "base")
    assert not audit & set(sa.inspect(engine).get_table_names())
    migrate.upgrade(engine)
    assert OutcomeRow.__tablename__ in sa.inspect(engine).get_table_names()


def test_sqlite_runs_in_wal_mode(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/d.sqlite")
    with store.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_a_cycle_that_failed_to_commit_does_not_hide_its_job_rows(tmp_path, monkeypatch):
    """A locked store fails a cycle after its job rows were added to the session: the next
    writes must add them again, or the job's outcome breaks the foreign key for good."""
    from slurm_rl.store import repository

    store = Store(f"sqlite:///{tmp_path}/c.sqlite")
    job = Job("7", 100.0, 2, user="alice", partition="gpu")
    real = repository._cycle_row

    def locked(*args, **kwargs):
        raise sa.exc.OperationalError("INSERT", {}, Exception("database is locked"))

    monkeypatch.setattr(repository, "_cycle_row", locked)
    with contextlib.suppress(sa.exc.OperationalError):
        _cycle(store, job, 101.0)
    monkeypatch.setattr(repository, "_cycle_row", real)
    done = FinishedJob(job, 105.0, 205.0, Placement(("a100-01",), (2,)), "COMPLETED", 0)
    assert store.record_outcomes("c1", [done], "squeue") == 1
    assert store.outcome_for("c1", "7") is not None
