"""Jobs no decision can start, against a real Slurm: a held job and one waiting on a
dependency get no decision and no pin, while the job behind them in the queue is placed and
starts; once the hold is released, the next cycle orders it like any other job."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.slurm.live import LiveCluster
from tests.slurm.test_daemon_live import CLUSTER, _daemon, _decision
from tests.slurm.test_live import SCHED_SLACK_S

pytestmark = pytest.mark.slurm


def test_held_and_dependent_jobs_are_left_to_slurm(live: LiveCluster, tmp_path: Path) -> None:
    parent = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10")
    held = live.sbatch("bob", "--gres=gpu:a100:8", "-t", "10", "--hold")
    child = live.sbatch("alice", "--gres=gpu:a100:8", "-t", "10",
                        f"--dependency=afterok:{parent}")
    plain = live.sbatch("bob", "--gres=gpu:1", "-t", "10", script="sleep 2")
    # Slurm names the dependency at its next scheduling pass (at once on a settled cluster;
    # seconds later right after a slurmctld restart, as the fault tests leave it)
    live.wait_for(lambda: live.job(child).reason == "Dependency", "the child's reason",
                  SCHED_SLACK_S)
    daemon = _daemon(live, tmp_path, policy="fifo+best-fit")
    try:
        assert daemon.run_once().ok
        assert daemon.parts.source.set_aside == {held: "held", child: "dependency"}
        for job_id in (held, child):
            assert daemon.store.decisions_for(CLUSTER, job_id) == []
            assert live.job(job_id).required_nodes == ()
        assert _decision(daemon.store, plain).action == "place"
        live.wait_state(plain, "COMPLETED", timeout_s=SCHED_SLACK_S + 4)
        assert live.run("scontrol", "release", held).ok
        assert daemon.run_once().ok
        assert held not in daemon.parts.source.set_aside
        assert _decision(daemon.store, held).action == "place"
    finally:
        daemon.close(retire=False)
