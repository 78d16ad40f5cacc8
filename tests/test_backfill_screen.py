"""The backfill plan's shortcuts (slurm_rl/simulator/backfill.py) and its compiled scans
(map_scan.py) against the slow ways they replace, on random inputs: the golden schedules
prove them on replays, these on the corners (empty maps, no candidate nodes, one-row
windows, unlimited jobs, per-node needs of a pin, mixed shares)."""

from __future__ import annotations

import errno
import logging
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pytest

from slurm_rl.agents.nodesets import fixed_shape, place_in_order
from slurm_rl.core import Cluster, Job, Node, Placement
from slurm_rl.simulator import backfill, map_scan
from slurm_rl.simulator.backfill import FreeMap, earliest
from slurm_rl.simulator.slurm_emulation import QueuedJob, RunningShape, schedule_pass


def _lasting_by_hand(held: np.ndarray, times: np.ndarray, k: int, limit: float,
                     column: int, least: int) -> bool:
    """Whether the column holds ``least`` GPUs in every row that starts before
    ``times[k] + limit`` (row ``k`` at least), row by row."""
    rows = [r for r in range(k, len(times)) if r == k or times[r] < times[k] + limit]
    return all(held[r, column] >= least for r in rows)


def _random_map(rng: np.random.Generator, columns: int) -> tuple[np.ndarray, np.ndarray]:
    rows = int(rng.integers(0, 25))
    times = np.cumsum(rng.integers(1, 6, size=rows)).astype(np.float64)
    return rng.integers(0, 5, size=(rows, columns)).astype(np.int64), times


def test_first_passing_row_is_the_first_row_whose_window_meets_every_group() -> None:
    rng = np.random.default_rng(21)
    for _ in range(500):
        columns = int(rng.integers(0, 6))
        held, times = _random_map(rng, columns)
        limit = math.inf if rng.random() < 0.1 else float(rng.integers(0, 15))
        if rng.random() < 0.5:  # share sizes over the same columns (a fixed shape)
            members = [int(c) for c in range(columns) if rng.random() < 0.8]
            groups = [(int(rng.integers(1, 5)), int(rng.integers(0, len(members) + 2)),
                       members) for _ in range(int(rng.integers(1, 3)))]
        else:  # one group per node (a pin)
            groups = [(int(rng.integers(0, 5)), 1, [c]) for c in range(columns)]
        start = int(rng.integers(0, len(times) + 1))
        expected = next((k for k in range(start, len(times)) if all(
            sum(_lasting_by_hand(held, times, k, limit, c, least) for c in members) >= count
            for least, count, members in groups)), None)
        assert map_scan.first_passing_row(held, times, len(times), start, limit,
                                          map_scan.Needs(groups)) == expected


def test_first_fit_is_place_in_order_on_the_window() -> None:
    rng = np.random.default_rng(13)
    cluster = Cluster("mixed", tuple(Node(f"n{i}", ("a100", "v100")[i % 2], 8)
                                     for i in range(6)))
    for _ in range(500):
        held, times = _random_map(rng, 6)
        if not len(times):
            continue
        job = _random_job(rng)
        if job.num_nodes is None and job.gpus_per_node is None:
            continue  # a free shape stays with place_in_order
        k = int(rng.integers(0, len(times)))
        end = int(rng.integers(k + 1, len(times) + 1))
        order = [int(i) for i in rng.permutation(6) if rng.random() < 0.8]
        typed = [i for i in order if not job.gpu_type or cluster.nodes[i].gpu_type == job.gpu_type]
        chosen = map_scan.first_fit(held, k, end,
                                    map_scan.Shape(map_scan.Needs([]), typed, fixed_shape(job)))
        expected = place_in_order(job, cluster, held[k:end].min(axis=0).tolist(), order)
        got = None if chosen is None else Placement(
            tuple(cluster.nodes[i].name for i in chosen), fixed_shape(job))
        assert got == expected


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
        walked = _walked(job, pin, order, free, cluster, from_row)
        assert earliest(job, pin, order, free, cluster, from_row) == walked
        before = int(rng.integers(0, len(free.times) + 2))  # only rows before it
        assert (earliest(job, pin, order, free, cluster, from_row, before)
                == (walked if walked is not None and walked[0] < before else None))


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


def test_a_scan_whose_source_numba_cannot_cache_is_still_compiled() -> None:
    """numba caches beside the module or in the user's cache; where it may write nowhere
    (here: a function with no source file, as a read-only install with no home is for
    numba) it refuses to cache, and the scan is compiled without the cache instead."""
    namespace: dict[str, object] = {}
    exec(compile("def twice(x):\n    return 2 * x\n", "<no file>", "exec"), namespace)
    assert map_scan.compiled(namespace["twice"])(21) == 42


def test_a_scan_whose_cache_cannot_be_saved_still_runs_with_one_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """numba found the cache folder writable, then the first save fails (a full disk):
    the call still answers, compiled for this process only, and says so once."""
    monkeypatch.setattr(numba.core.config, "CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "scan_source.py"
    source.write_text("def thrice(x):\n    return 3 * x\n")
    namespace: dict[str, object] = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    scan = map_scan.compiled(namespace["thrice"])

    def full(*_args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(scan._cache._cache_file, "save", full)
    with caplog.at_level(logging.WARNING, logger="slurm_rl.simulator.map_scan"):
        assert scan(14) == 42
    assert [r.getMessage() for r in caplog.records] == [
        "numba could not cache thrice ([Errno 28] No space left on device): compiled for "
        "this process only"]


def test_a_scan_whose_cache_index_is_corrupt_is_compiled_anew_and_the_index_rewritten(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An index file left truncated (a crash, a disk that filled): numba's load raises out
    of the first call, in every process while the file is there. The call still answers,
    says so once, and the index is written again, so the next process reads it."""
    monkeypatch.setattr(numba.core.config, "CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "scan_source.py"
    source.write_text("def twice(x):\n    return 2 * x\n")

    def fresh_scan() -> Any:  # as a new process would see the function
        namespace: dict[str, object] = {}
        exec(compile(source.read_text(), str(source), "exec"), namespace)
        return map_scan.compiled(namespace["twice"])

    assert fresh_scan()(21) == 42
    (index,) = (tmp_path / "cache").rglob("*.nbi")
    index.write_bytes(index.read_bytes()[:7])
    with caplog.at_level(logging.WARNING, logger="slurm_rl.simulator.map_scan"):
        assert fresh_scan()(21) == 42
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith("numba could not read its cache of twice (")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="slurm_rl.simulator.map_scan"):
        assert fresh_scan()(22) == 44
    assert caplog.records == []


def test_a_pin_short_of_the_jobs_gpus_and_a_nan_limit_plan_as_before() -> None:
    """Two corners the engine never sends (it refuses such pins; loaders refuse such
    limits) but a caller of the pass may: figures from the numpy plan before the scans
    were compiled (b7932c7)."""
    cluster = Cluster("c", tuple(Node(f"n{i}", "a100", 4) for i in range(2)))
    running = [RunningShape(10.0, (0,), (4,)), RunningShape(20.0, (1,), (2,))]
    blocker = QueuedJob(Job("b", 0.0, 4, num_nodes=1, time_limit=100.0), 0)
    small = QueuedJob(Job("s", 0.0, 2, num_nodes=1, time_limit=15.0), -2)
    short_pin = QueuedJob(Job("p", 0.0, 4, time_limit=5.0), -1, Placement(("n1",), (2,)))
    planned = backfill.PlannedPass(0.0, [0, 2], lambda: running, cluster, 5)
    planned.walk([blocker, short_pin, small])
    assert [job.job_id for job, _ in planned.starts] == ["s"]  # p planned at 20, not 10
    assert planned.map is not None and planned.map.times.tolist() == [0, 10, 15, 20, 25, 110]
    unlimited = QueuedJob(Job("x", 0.0, 2, num_nodes=1, time_limit=math.nan), 0)
    planned = backfill.PlannedPass(0.0, [0, 2], lambda: running, cluster, 5)
    planned.walk([blocker, unlimited, small])
    assert [job.job_id for job, _ in planned.starts] == ["x"]
    assert planned.map is not None and planned.map.rows.tolist() == [[0, 0], [0, 0], [0, 2],
                                                                     [4, 2]]


def test_a_gang_kept_to_one_type_does_not_stand_for_an_untyped_job_of_its_shape() -> None:
    """A released gang kept to a100 (Features=[a100]) that cannot start says nothing about
    an eligible job of the same shape Slurm may place on any type (the start key once
    counted the choices but not their types, and the untyped job waited)."""
    cluster = Cluster("c", (Node("a", "a100", 4), Node("v", "v100", 4)))
    gang = Job("x", 0.0, 2, time_limit=50.0)
    kept = QueuedJob(gang, 0, one_of=(replace(gang, gpu_type="a100"),))
    untyped = QueuedJob(Job("y", 0.0, 2, time_limit=50.0), -1)
    assert kept.start_key != untyped.start_key
    planned = backfill.PlannedPass(0.0, [0, 4], lambda: [RunningShape(100.0, (0,), (4,))],
                                   cluster, 5)
    planned.walk([kept, untyped])
    assert [(job.job_id, p.nodes) for job, p in planned.starts] == [("y", ("v",))]
