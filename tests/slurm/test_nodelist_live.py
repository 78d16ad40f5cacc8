"""A user's ``sbatch --nodelist`` against a real Slurm: the daemon sets the job aside and
never pins it elsewhere, although its node is busy and others are free; Slurm starts it on
the user's node once that node frees up. A job without a node list is placed as usual."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_rl.slurm.source import SlurmSource
from tests.slurm.live import LiveCluster
from tests.slurm.test_daemon_live import CLUSTER, _daemon, _decision
from tests.slurm.test_live import SCHED_SLACK_S, _nodes

pytestmark = pytest.mark.slurm


def test_a_users_nodelist_is_left_to_slurm(live: LiveCluster, tmp_path: Path) -> None:
    a100 = _nodes(SlurmSource(live.client).snapshot(), "a100")
    live.stop_beating()  # not deferred: it fills the user's node from the start
    blocker = live.sbatch("alice", f"--nodelist={a100[-1]}", "--gres=gpu:a100:8", "-t", "10")
    live.wait_state(blocker, "RUNNING", timeout_s=SCHED_SLACK_S)
    live.beat()
    theirs = live.sbatch("bob", "--gres=gpu:a100:1", "-t", "10", f"--nodelist={a100[-1]}")
    plain = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", keep_deferred=True)
    daemon = _daemon(live, tmp_path, policy="fifo+best-fit")
    try:
        for _ in range(2):  # a later cycle leaves it alone too
            assert daemon.run_once().ok
            assert daemon.parts.source.set_aside.get(theirs) == "nodelist"
        assert daemon.store.decisions_for(CLUSTER, theirs) == []
        assert _decision(daemon.store, plain).action == "place"
    finally:
        daemon.close(retire=False)
    waiting = live.job(theirs)
    assert (waiting.state, waiting.required_nodes) == ("PENDING", (a100[-1],))
    assert live.run("scancel", blocker).ok
    started = live.wait_state(theirs, "RUNNING", timeout_s=SCHED_SLACK_S + live.window_s)
    assert (started.nodes, started.required_nodes) == ((a100[-1],), (a100[-1],))
