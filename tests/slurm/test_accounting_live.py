"""Outcomes from sacct against a real Slurm with slurmdbd (natively the Operator test's
cluster; with ``--slurm-cluster=compose`` the compose cluster itself, whose slurmdbd runs on
MariaDB): for jobs the daemon decided, sacct's outcomes are the ones squeue reported (state,
times, nodes, exit code), and a job the daemon never decided is not taken.

``SLURM_RL_RECORD=1`` also re-records the golden file ``tests/fixtures/slurm/22.05/sacct.txt``
from a fixed job mix (see tests/fixtures/slurm/README.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import delete
from sqlalchemy.orm import Session

from slurm_rl.config import DaemonConfig
from slurm_rl.core import FinishedJob
from slurm_rl.daemon.accounting import FIELDS, AccountingReader
from slurm_rl.daemon.runner import Daemon
from slurm_rl.devcluster.cluster import DevCluster
from slurm_rl.store.models import OutcomeRow
from tests.slurm.live import LiveCluster
from tests.slurm.test_operator_live import WINDOW_S, operator_cluster  # noqa: F401

pytestmark = pytest.mark.slurm

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "22.05" / "sacct.txt"


@pytest.fixture
def accounting(request: pytest.FixtureRequest,
               slurm_cluster: LiveCluster) -> Iterator[tuple[Path | None, LiveCluster]]:
    """A cluster whose sacct answers, and its slurm.conf where the daemon must be told it:
    the compose cluster (its own slurmdbd; the commands run in its controller's container),
    else the Operator test's native cluster (the session's native cluster has no slurmdbd)."""
    if slurm_cluster.kind == "compose":
        yield None, slurm_cluster
        slurm_cluster.cancel_all()
        slurm_cluster.beat()
        return
    cluster, live = request.getfixturevalue("operator_cluster")
    yield cluster.slurm_conf, live


def _daemon(slurm_conf: Path | None, live: LiveCluster, state: Path) -> Daemon:
    config = DaemonConfig(mode="enforce", state_dir=state, cluster_name="opc",
                          slurm_conf=slurm_conf, heartbeat_path=state / "beat",
                          defer_window_s=WINDOW_S, slurm_timeout_s=30.0, metrics_port=0,
                          accounting_outcomes=True, policy="fifo+best-fit")
    return Daemon(lambda: config, runner=live.runner)


def test_sacct_outcomes_are_squeues(accounting: tuple[Path | None, LiveCluster],
                                    tmp_path: Path) -> None:
    slurm_conf, live = accounting
    # The daemon is up before the jobs come, as in production: built after them, its start
    # (a fresh store's migrations) could outlast the plugin's window on a loaded machine, and
    # Slurm then started the jobs itself, a second off what sacct records.
    daemon = _daemon(slurm_conf, live, tmp_path)
    live.beat()  # the cluster's plugin reads its own heartbeat: fresh, so the jobs are deferred
    jobs = {"ok": live.sbatch("alice", "--gres=gpu:a100:2", "-t", "10", script="sleep 1"),
            "exit3": live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", script="exit 3")}
    try:
        assert daemon.run_once().ok  # decides (places) both
        stranger = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", script="sleep 1")
        assert live.run("scontrol", "update", f"JobId={stranger}", "StartTime=now").ok
        for job_id in (*jobs.values(), stranger):
            live.wait_for(lambda j=job_id: live.job(j).state in ("COMPLETED", "FAILED"),
                          f"job {job_id} ended", 30.0)
        assert daemon.run_once().ok  # squeue still shows them: their outcomes, source squeue
        store = daemon.store
        squeue = {k: store.outcome_for("opc", j) for k, j in jobs.items()}
        assert all(o is not None and o.source == "squeue" for o in squeue.values())
        with Session(store.engine) as session, session.begin():
            session.execute(delete(OutcomeRow))  # as if the daemon had been down meanwhile
        found: dict[str, FinishedJob] = {}

        def all_recorded() -> bool:  # slurmctld hands end records to slurmdbd in its own time
            reader = AccountingReader(live.runner)  # a fresh one: a reader reads once a minute
            found.clear()
            found.update({d.job.job_id: d for d in reader.read(store, "opc", time.time())})
            return set(jobs.values()) <= set(found)

        live.wait_for(all_recorded, "slurmdbd to hold both end records", 30.0, every_s=1.0)
        assert set(found) == set(jobs.values())  # not the job the daemon never decided
        for kind, job_id in jobs.items():
            done, seen = found[job_id], squeue[kind]
            assert seen is not None
            assert (done.start_time, done.end_time, ",".join(done.placement.nodes),
                    done.state, done.exit_code) == (seen.start_time, seen.end_time, seen.nodes,
                                                    seen.state, seen.exit_code), kind
        assert found[jobs["exit3"]].exit_code == 3
    finally:
        daemon.close(retire=False)


@pytest.mark.skipif(os.environ.get("SLURM_RL_RECORD") != "1", reason="records a golden file")
def test_record_the_golden_file(operator_cluster: tuple[DevCluster, LiveCluster]) -> None:  # noqa: F811
    _, live = operator_cluster
    done = live.sbatch("alice", "--gres=gpu:a100:2", "-N1", "-t", "10", script="sleep 1")
    failed = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", script="exit 3")
    running = live.sbatch("alice", "--gres=gpu:a100:2", "-N2", "-t", "10", script="sleep 300")
    killed = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", script="kill -9 $$")
    live.run("scontrol", "update", f"JobId={done},{failed},{running},{killed}", "StartTime=now")
    live.wait_state(done, "COMPLETED", timeout_s=30)
    live.wait_state(running, "RUNNING", timeout_s=30)
    cancelled = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", script="sleep 300")
    live.run("scontrol", "update", f"JobId={cancelled}", "StartTime=now")
    live.wait_state(cancelled, "RUNNING", timeout_s=30)
    live.run("scancel", cancelled)
    time.sleep(4)
    result = live.run("sacct", "--parsable2", "--noheader", "--allocations", "--allusers",
                      "--starttime", "now-1hour", "--endtime", "now",
                      f"--format={','.join(FIELDS)}")
    assert result.ok, result.stderr
    GOLDEN.write_text(result.stdout)
