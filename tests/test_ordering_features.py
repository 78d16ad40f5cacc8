"""Features of the learned agents: only what a live cluster has, history learned in observe()."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from slurm_rl.agents.dual.features import (
    CLUSTER_FEATURES,
    JOB_FEATURES,
    FeatureBuilder,
    QueueGroups,
)
from slurm_rl.core import ClusterSnapshot, FinishedJob, Job, Placement
from tests.sim_doubles import small_cluster

SPEED = {"A100": 2.0, "V100": 1.0}


def col(name: str) -> int:
    return JOB_FEATURES.index(name)


def finished(job_id: str, runtime: float, gpus: int = 1, partition: str = "vc1",
             limit: float | None = None) -> FinishedJob:
    job = Job(job_id, 0.0, gpus, partition=partition, time_limit=limit)
    return FinishedJob(job, 100.0, 100.0 + runtime, Placement(("v100-0",), (gpus,)))


def snapshot(pending: tuple[Job, ...], time: float = 1000.0, free: tuple[int, ...] | None = None,
             done: tuple[FinishedJob, ...] = ()) -> ClusterSnapshot:
    cluster = small_cluster()
    free = free if free is not None else tuple(n.gpus for n in cluster.nodes)
    return ClusterSnapshot(time, cluster, free, pending, finished=done)


def test_the_oracle_and_the_family_never_reach_the_features() -> None:
    a = Job("a", 10.0, 2, partition="vc1", time_limit=7200.0, oracle_duration=60.0,
            model_family="cifar10")
    b = dataclasses.replace(a, job_id="b", oracle_duration=86400.0, model_family="imagenet")
    builder = FeatureBuilder(SPEED)
    rows = builder.encode(snapshot((a, b))).jobs
    np.testing.assert_array_equal(rows[0], rows[1])


def test_history_predicts_the_median_runtime_of_the_account_and_size() -> None:
    builder = FeatureBuilder(SPEED)
    history = (finished("f1", 600.0), finished("f2", 1800.0), finished("f3", 3600.0),
               finished("f4", 99_999.0, gpus=8))
    builder.observe(snapshot((), done=history))
    queued = (Job("q1", 0.0, 1, partition="vc1"), Job("q8", 0.0, 8, partition="vc1"),
              Job("q2", 0.0, 2, partition="vc1"), Job("other", 0.0, 1, partition="vc9"))
    rows = builder.encode(snapshot(queued)).jobs
    hours = np.expm1(rows[:, col("log_pred_h")])
    assert hours[0] == pytest.approx(1800.0 / 3600)  # same account and size
    assert hours[1] == pytest.approx(99_999.0 / 3600)
    assert hours[2] == pytest.approx(np.median([600, 1800, 3600, 99_999]) / 3600)  # account
    assert hours[3] == pytest.approx(hours[2])  # an unknown account: the whole cluster
    assert rows[0, col("log_history")] == pytest.approx(math.log1p(4))
    assert rows[3, col("log_history")] == 0.0


def test_observe_is_idempotent_per_snapshot_so_two_agents_can_share_a_builder() -> None:
    builder = FeatureBuilder(SPEED)
    view = snapshot((), done=(finished("f1", 600.0),))
    builder.observe(view)
    builder.observe(view)
    builder.observe(dataclasses.replace(view, finished=(finished("f2", 6000.0),)))
    queued = snapshot((Job("q", 0.0, 1, partition="vc1"),))
    assert builder.encode(queued).jobs[0, col("log_history")] == pytest.approx(math.log1p(2))


def test_wait_limit_and_request_columns() -> None:
    job = Job("j", 1000.0 - 7200.0, 4, partition="vc1", num_nodes=2, time_limit=3600.0)
    free = (8, 0, 0, 0)
    rows = FeatureBuilder(SPEED).encode(snapshot((job,), free=free)).jobs
    assert rows[0, col("log_wait_h")] == pytest.approx(math.log1p(2.0))
    assert rows[0, col("log_limit_h")] == pytest.approx(math.log1p(1.0))
    assert rows[0, col("has_limit")] == 1.0
    assert rows[0, col("log_nodes")] == pytest.approx(math.log1p(2))
    assert rows[0, col("fixed_shape")] == 1.0
    assert rows[0, col("demand_share")] == pytest.approx(4 / 8)


def test_cluster_features_follow_free_capacity() -> None:
    builder = FeatureBuilder(SPEED)
    full = builder.encode(snapshot((Job("j", 0.0, 1),), free=(0, 0, 0, 0))).cluster
    empty = builder.encode(snapshot((Job("j", 0.0, 1),))).cluster
    assert len(full) == len(CLUSTER_FEATURES)
    share = CLUSTER_FEATURES.index("free_share")
    assert full[share] == 0.0 and empty[share] == 1.0


def test_queue_groups_share_rows_by_account_and_shape() -> None:
    jobs = [Job(f"j{i}", 0.0, 1 + i % 2, partition=f"vc{i % 3}") for i in range(12)]
    groups = QueueGroups.of(jobs)
    assert len(groups.groups) == 6 and len(groups.shapes) == 2
    for j, job in enumerate(jobs):
        assert groups.shapes[groups.shape_of[j]].num_gpus == job.num_gpus
        assert groups.groups[groups.group_of[j]].partition == job.partition
