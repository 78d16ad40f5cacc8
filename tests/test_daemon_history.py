"""A new policy first learns from the finished jobs the store recorded (slurm_rl/daemon/history.py):
a real SQLite store written as the daemon writes it, a real RWGP, a real scheduler."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurm_rl.agents.rwgp.placement import RwgpPlacement
from slurm_rl.core import (
    Cluster,
    ClusterSnapshot,
    Decision,
    FinishedJob,
    Job,
    Placement,
    SpeedObservation,
)
from slurm_rl.daemon.history import PrimedScheduler, stored_history, with_history
from slurm_rl.daemon.runner import Daemon
from slurm_rl.live_policy import make_policy
from slurm_rl.store.repository import Store
from tests.retrain.logged import CLUSTER, NODES, fill
from tests.test_daemon import Clock, _cluster, _config

NOW = 1_800_000_000.0


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'store.sqlite'}")


def snapshot(finished: tuple[FinishedJob, ...] = (), pending: tuple[Job, ...] = ()
             ) -> ClusterSnapshot:
    return ClusterSnapshot(NOW, Cluster(CLUSTER, NODES), tuple(n.gpus for n in NODES), pending,
                           (), finished)


class Recording:
    def __init__(self) -> None:
        self.seen: list[ClusterSnapshot] = []

    def decide(self, snap: ClusterSnapshot) -> Decision:
        self.seen.append(snap)
        return Decision("recording", ranking=())


def test_the_stored_jobs_come_back_oldest_first_as_the_source_reports_them(store: Store) -> None:
    done = fill(store, 12, now=NOW)
    history = stored_history(lambda: store, 1.0)(snapshot())
    assert [f.job.job_id for f in history] == [
        f.job.job_id for f in sorted(done, key=lambda f: f.end_time)]
    first = next(f for f in history if f.job.job_id == done[0].job.job_id)
    assert (first.start_time, first.end_time, first.placement) == (
        done[0].start_time, done[0].end_time, done[0].placement)
    assert first.job.user == done[0].job.user and first.job.num_gpus == 8


def test_only_the_first_decision_sees_the_history_and_never_a_job_slurm_reports(
        store: Store) -> None:
    done = fill(store, 12, now=NOW)
    inner = Recording()
    primed = PrimedScheduler(inner, stored_history(lambda: store, 1.0))
    reported = done[-1]
    primed.decide(snapshot(finished=(reported,)))
    primed.decide(snapshot())
    first, second = inner.seen
    ids = [f.job.job_id for f in first.finished]
    assert ids.count(reported.job.job_id) == 1 and ids[-1] == reported.job.job_id
    assert len(ids) == len(done)
    assert second.finished == ()


def test_jobs_on_nodes_the_cluster_no_longer_has_are_left_out() -> None:
    gone = FinishedJob(Job("old", NOW - 900, 1), NOW - 800, NOW - 100,
                       Placement(("k80-01",), (1,)))
    kept = FinishedJob(Job("new", NOW - 900, 1), NOW - 800, NOW - 100,
                       Placement(("v100-01",), (1,)))
    assert with_history(snapshot(), (gone, kept)).finished == (kept,)
    assert with_history(snapshot(pending=(kept.job,)), (kept,)).finished == ()  # requeued


def test_an_empty_store_leaves_the_policy_to_its_prior(store: Store) -> None:
    assert stored_history(lambda: store, 1.0)(snapshot()) == ()


def test_a_new_rwgp_learns_machine_speeds_from_the_stored_jobs(store: Store) -> None:
    fill(store, 40, now=NOW)
    fresh, primed = make_policy("fifo+rwgp"), make_policy("fifo+rwgp")
    fresh.decide(snapshot())
    PrimedScheduler(primed, stored_history(lambda: store, 1.0)).decide(snapshot())
    assert isinstance(primed.placement, RwgpPlacement)
    assert isinstance(fresh.placement, RwgpPlacement)
    assert fresh.placement.model is not None and primed.placement.model is not None
    assert fresh.placement.model.readings_seen == 0
    assert primed.placement.model.readings_seen > 0


def test_the_placement_belief_lives_across_cycles(tmp_path: Path) -> None:
    # each squeue/sinfo query builds the cluster anew; the RWGP keys its belief on the object
    clock = Clock()
    config = _config(tmp_path, policy="fifo+rwgp")
    daemon = Daemon(lambda: config, runner=_cluster(), clock=clock)
    try:
        assert daemon.run_once().ok
        model = daemon.parts.scheduler.inner.placement.model
        clock.now += 30
        assert daemon.run_once().ok
        assert model is not None and daemon.parts.scheduler.inner.placement.model is model
    finally:
        daemon.close(retire=False)


def test_gpus_go_evenly_over_the_nodes_when_nothing_says_how_many_each_had() -> None:
    assert Placement.even(("a", "b", "c"), 8) == Placement(("a", "b", "c"), (3, 3, 2))
    assert Placement.even(("a",), 4) == Placement(("a",), (4,))


def test_a_node_leaving_the_partition_does_not_reset_what_the_placement_learned() -> None:
    """The cluster object changes when a node leaves the partition (a drained one stays); the
    RWGP carries its belief over instead of starting from the prior."""
    policy = RwgpPlacement()
    slow = NODES[0].name
    readings = tuple(SpeedObservation(NOW - 60 * i, (slow,), "bert", 0.5) for i in range(64))
    policy.observe(replace(snapshot(), observations=readings))
    assert policy.model is not None
    seen = policy.model.readings_seen
    smaller = Cluster(CLUSTER, NODES[:-1])
    job = Job("j", NOW, 1, model_family="bert")
    policy.place(job, tuple(n.gpus for n in NODES[:-1]),
                 ClusterSnapshot(NOW, smaller, tuple(n.gpus for n in NODES[:-1]), (job,), (), ()))
    model = policy.model
    assert model.cluster is smaller and model.readings_seen == seen
    assert model.predict("bert").mean[0] < 0.8
