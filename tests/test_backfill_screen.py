"""The backfill plan's shortcuts (slurm_rl/simulator/backfill.py) against the slow ways they
replace, on random inputs: the golden schedules prove them on replays, these on the corners
(empty maps, no candidate nodes, one-row windows, per-node needs of a pin, mixed shares)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from slurm_rl.agents.nodesets import place_in_order
from slurm_rl.core import Cluster, Job, Node, Placement
from slurm_rl.simulator import backfill
from slurm_rl.simulator.backfill import FreeMap, _nodes_lasting, earliest
from slurm_rl.simulator.slurm_emulation import QueuedJob, RunningShape, schedule_pass


def _by_hand(held: np.ndarray, ends: np.ndarray, least: np.ndarray) -> list[int]:
    rows, columns = held.shape
    return [sum(all(held[r, c] >= least[c] for r in range(k, int(ends[k])))
                for c in range(columns)) for k in range(rows)]


def test_nodes_lasting_counts_the_nodes_free_throughout_each_window() -> None:
    rng = np.random.default_rng(21)
    for _ in range(500):
        rows, columns = int(rng.integers(0, 25)), int(rng.integers(0, 6))
        held = rng.integers(0, 5, size=(rows, columns))
        # a job's windows: each starts at its row, ends after it, and never ends earlier
        # than the window before
        ends = np.maximum.accumulate(np.maximum(rng.integers(0, rows + 1, size=rows),
                                                np.arange(1, rows + 1)))
        if rng.random() < 0.5:  # one need for every node (a share's GPUs)
            share = int(rng.integers(0, 5))
            got = _nodes_lasting(held, ends, share)
            assert got.tolist() == _by_hand(held, ends, np.full(columns, share))
        else:  # one need per node (a pin's GPUs)
            least = rng.integers(0, 5, size=columns)
            got = _nodes_lasting(held, ends, least)
            assert got.tolist() == _by_hand(held, ends, least)


def _walked(job: Job, pin: Placement | None, order: list[int], free: FreeMap,
            cluster: Cluster, from_row: int) -> tuple[int, Placement] | None:
    """The first row from ``from_row`` where the job fits for its whole limit, row by row."""
    limit = job.time_limit if job.time_limit is not None else math.inf
    for k in range(from_row, len(free.times)):
        available = free.available(k, limit)
        if pin is not None:
            if all(available[cluster.index(n)] >= g
                   for n, g in zip(pin.nodes, pin.gpus, strict=True)):
                return k, pin
            continue
        placement = place_in_order(job, cluster, available, order)
        if placement is not None:
            return k, placement
    return None


def test_earliest_finds_the_row_a_row_by_row_walk_finds() -> None:
    rng = np.random.default_rng(5)
    cluster = Cluster("mixed", tuple(Node(f"n{i}", ("a100", "v100")[i % 2], (4, 8)[i % 3 == 0])
                                     for i in range(7)))
    for _ in range(400):
        releases = [(float(rng.integers(1, 60)), (int(node),), (int(rng.integers(1, 4)),))
                    for node in rng.integers(0, 7, size=int(rng.integers(0, 12)))]
        free = FreeMap(0.0, [int(rng.integers(0, 3)) for _ in range(7)], releases)
        for _ in range(int(rng.integers(0, 4))):  # some plans booked already
            planned = _random_job(rng)
            found = _walked(planned, None, list(range(7)), free, cluster, 1)
            if found is not None:
                free.book(free.times[found[0]], float(planned.time_limit or 0), found[1], cluster)
        job, order = _random_job(rng), [int(i) for i in rng.permutation(7) if rng.random() < 0.8]
        pin = None
        if rng.random() < 0.2 and job.num_nodes == 1 and not job.gpu_type:
            pin = Placement((f"n{int(rng.integers(0, 7))}",), (job.num_gpus,))
        from_row = int(rng.integers(0, len(free.times) + 1))
        assert (earliest(job, pin, order, free, cluster, from_row)
                == _walked(job, pin, order, free, cluster, from_row))


def _random_job(rng: np.random.Generator) -> Job:
    gpus, limit = int(rng.integers(1, 9)), float(rng.integers(1, 50))
    gpu_type = (None, "a100", "v100")[int(rng.integers(0, 3))]
    shape = int(rng.integers(0, 3))
    if shape == 0:  # free shape
        return Job("j", 0.0, gpus, gpu_type=gpu_type, time_limit=limit)
    nodes = int(rng.integers(1, 4))
    if shape == 1:  # so many nodes, the GPUs shared out
        return Job("j", 0.0, gpus, num_nodes=nodes, gpu_type=gpu_type, time_limit=limit)
    per_node = int(rng.integers(1, 5))
    return Job("j", 0.0, per_node * nodes, num_nodes=nodes, gpus_per_node=per_node,
               gpu_type=gpu_type, time_limit=limit)


def test_a_pass_that_ends_early_starts_what_a_full_walk_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass ends once no later job can start now (too few GPUs free for any, or none
    fits around the plan); walking and planning the whole queue starts the same jobs."""
    rng = np.random.default_rng(8)
    cluster = Cluster("mixed", tuple(Node(f"n{i}", ("a100", "v100")[i % 2], (4, 8)[i % 3 == 0])
                                     for i in range(7)))
    cases = []
    for _ in range(150):
        running = [RunningShape(float(rng.integers(1, 80)), (int(node),),
                                (int(rng.integers(1, 4)),))
                   for node in rng.integers(0, 7, size=int(rng.integers(0, 10)))]
        free = [int(rng.integers(0, 4)) for _ in range(7)]
        queue = [_random_queued(rng, cluster, k) for k in range(int(rng.integers(1, 30)))]
        cases.append((free, running, queue, int(rng.integers(1, 8))))
    quick = [_started(case, cluster) for case in cases]
    monkeypatch.setattr(backfill, "_fewest_gpus_from",
                        lambda queue: [-math.inf] * (len(queue) + 1))
    monkeypatch.setattr(backfill.PlannedPass, "_one_may_start_after", lambda self, *_: True)
    assert quick == [_started(case, cluster) for case in cases]


def _started(case: tuple[list[int], list[RunningShape], list[QueuedJob], int],
             cluster: Cluster) -> list[tuple[str, Placement]]:
    free, running, queue, reservations = case
    return [(job.job_id, placement) for job, placement in schedule_pass(
        0.0, iter(queue), list(free), lambda: running, cluster, reservations=reservations)]


def _random_queued(rng: np.random.Generator, cluster: Cluster, k: int) -> QueuedJob:
    job = replace(_random_job(rng), job_id=f"j{k}")
    if rng.random() < 0.15 and job.num_nodes == 1 and not job.gpu_type:
        node = int(rng.integers(0, len(cluster.nodes)))
        return QueuedJob(job, -k, Placement((cluster.nodes[node].name,), (job.num_gpus,)))
    excluded = frozenset(int(i) for i in rng.integers(0, 7, size=int(rng.integers(0, 3))))
    if rng.random() < 0.2 and not job.gpu_type and job.num_gpus >= 2:  # Features=[a100|v100]
        one_of = tuple(replace(job, gpu_type=t) for t in ("a100", "v100"))
        return QueuedJob(job, -k, excluded=excluded, one_of=one_of)
    return QueuedJob(job, -k, excluded=excluded)
