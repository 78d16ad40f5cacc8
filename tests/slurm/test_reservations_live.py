"""Advance reservations against a real Slurm (slurm_rl/slurm/reservations.py): while a
reservation for alice holds an A100 node, sinfo shows it idle, yet the daemon pins no other
job there (Slurm would keep it pending with ``ReqNodeNotAvail``); alice's job that asks for
the reservation is left to Slurm, which starts it there. The REST client reads the same
reservations as scontrol."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_rl.slurm.source import SlurmSource
from tests.slurm.live import LiveCluster
from tests.slurm.test_daemon_live import CLUSTER, _daemon, _decision
from tests.slurm.test_live import SCHED_SLACK_S, _nodes

pytestmark = pytest.mark.slurm


@pytest.fixture
def reserved(live: LiveCluster) -> Iterator[str]:
    """An A100 node reserved for alice for half an hour (deleted after the test)."""
    node = sorted(n.name for n in live.client.show_nodes() if "a100" in n.gres)[0]
    created = live.run("scontrol", "create", "reservation", "ReservationName=slurmrl-test",
                       "StartTime=now", "Duration=30", "Users=alice", f"Nodes={node}")
    assert created.ok, created.stderr
    try:
        yield node
    finally:
        live.run("scontrol", "delete", "ReservationName=slurmrl-test")


def test_no_job_is_pinned_to_a_reserved_node(live: LiveCluster, reserved: str,
                                             tmp_path: Path) -> None:
    (reservation,) = live.client.reservations()
    assert reservation.nodes == (reserved,) and reservation.active(0.0)
    source = SlurmSource(live.client)
    snapshot = source.snapshot()
    assert snapshot.free_gpus[snapshot.cluster.index(reserved)] == 0
    whole_node = live.sbatch("bob", "--gres=gpu:a100:8", "-t", "10", script="sleep 2")
    inside = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", "--reservation=slurmrl-test",
                         script="sleep 2")
    daemon = _daemon(live, tmp_path, policy="fifo+best-fit")
    try:
        assert daemon.run_once().ok
        assert daemon.parts.source.set_aside == {inside: "reservation"}
    finally:
        daemon.close(retire=False)
    placed = _decision(daemon.store, whole_node)
    assert placed.nodes in _nodes(snapshot, "a100") and placed.nodes != reserved
    assert live.wait_state(whole_node, "COMPLETED", timeout_s=SCHED_SLACK_S + 4).nodes != (
        reserved,)
    ran = live.wait_state(inside, "COMPLETED", timeout_s=live.window_s + SCHED_SLACK_S + 4)
    assert ran.nodes == (reserved,)
    assert daemon.store.decisions_for(CLUSTER, inside) == []
