"""The daemon with the RWGP placement on a real Slurm keeps a gang off far slower GPUs.

The session cluster's a100 and v100 differ too little for RWGP to exclude either (v100 runs
at about 0.64 of an a100 on the datasheet, above the exclusion ratio of 0.25), so this test
starts its own small native cluster of two a100:8 and two k80:4 nodes (a k80 runs at about
0.13 of an a100). With both a100 nodes busy, a two-node gang of 4 GPUs per node that may run
on any type is released without a placement and with ``ExcNodeList=k80-[01-02]``: Slurm
leaves it pending although the two k80 nodes would hold it, and starts it on the a100 nodes
once they free.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_rl.devcluster.cluster import DevCluster, free_base_port
from slurm_rl.devcluster.config import DevClusterConfig, NodeGroup
from slurm_rl.slurm import deferral
from slurm_rl.slurm.proc import make_runner
from slurm_rl.store.repository import Store
from tests.slurm.live import LiveCluster
from tests.slurm.test_daemon_live import SCHED_SLACK_S, _daemon

pytestmark = pytest.mark.slurm

WINDOW_S = 6
NAME = "rwgpc"
FAST, SLOW = ("a100-01", "a100-02"), ("k80-01", "k80-02")


@pytest.fixture(scope="module")
def mixed_cluster(slurm_cluster: LiveCluster) -> Iterator[LiveCluster]:
    if slurm_cluster.kind != "native":
        pytest.skip("starts its own native cluster")
    root = Path(tempfile.mkdtemp(prefix="slurm-rl-rwgp-"))
    root.chmod(0o755)  # jobs of alice and bob must reach their working directory
    config = DevClusterConfig(root=root / "cluster", base_port=free_base_port(5, start=24800),
                              groups=(NodeGroup("a100", 2, 8), NodeGroup("k80", 2, 4)),
                              deferral_window_s=WINDOW_S, cluster_name=NAME)
    cluster = DevCluster(config)
    try:
        cluster.up(timeout_s=120.0)
        yield LiveCluster("native", make_runner(cluster.env()), str(cluster.jobs_dir),
                          WINDOW_S, lambda t: deferral.beat(cluster.heartbeat_path, t),
                          lambda user, argv: ("runuser", "-u", user, "--", *argv))
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)


def test_rwgp_keeps_a_gang_off_slow_nodes_until_a_fast_one_frees(
    mixed_cluster: LiveCluster, tmp_path: Path
) -> None:
    live = mixed_cluster
    live.stop_beating()  # not deferred: it takes both a100 nodes from the start
    blocker = live.sbatch("bob", "-N2", "--gres=gpu:a100:8", "-t", "10")
    try:
        live.wait_state(blocker, "RUNNING", timeout_s=SCHED_SLACK_S + 4)
        live.beat()
        gang = live.sbatch("alice", "-N2", "--gres=gpu:4", "-t", "10")  # any GPU type
        daemon = _daemon(live, tmp_path, policy="fifo+rwgp", cluster_name=NAME)
        try:
            assert daemon.run_once().ok
        finally:
            daemon.close(retire=False)
        (row,) = Store(daemon.config.store).decisions_for(NAME, gang)
        assert (row.action, row.slurm_rc, row.nodes) == ("exclude", 0, None), row.slurm_answer
        assert row.argv and "ExcNodeList=k80-[01-02]" in row.argv and "StartTime=now" in row.argv
        time.sleep(SCHED_SLACK_S / 2)  # scheduling passes: only the excluded k80s are free
        held = live.job(gang)
        assert (held.state, held.excluded_nodes, held.eligible_time is not None) == (
            "PENDING", SLOW, True)
        live.run("scancel", blocker)
        started = live.wait_state(gang, "RUNNING", timeout_s=SCHED_SLACK_S + 4)
        assert set(started.nodes) == set(FAST)
    finally:
        live.cancel_all()
