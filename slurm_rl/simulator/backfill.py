"""Slurm's backfill plan: every job that cannot start now reserves where and when it will.

slurmctld's ``sched/backfill`` (``backfill.c``) walks the queue in priority order over a
map of free resources in time (``node_space``), built from the running jobs' time limits.
A job that fits now, for its whole time limit, without touching a resource planned for a
job before it, starts now; any other job is planned at the earliest time it fits and its
resources are added to the map, so that no later job may delay it. This is *conservative*
backfill (every job reserves), not EASY (only the first): measured on the dev cluster
(docs/slurm-emulation.md), an a100:2 job of 1 min waited 75 s behind two planned whole-node
jobs where EASY would have started it at once.

What it leaves out: ``bf_resolution`` (Slurm rounds the map to 60 s by default; the
emulation plans to the second), ``bf_window`` (no plan beyond a day by default; here,
beyond ``max_reservations`` planned jobs), per-user and per-partition limits.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from slurm_rl.agents.nodesets import fixed_shape, place_in_order
from slurm_rl.core import Cluster, Job, Placement
from slurm_rl.simulator.map_scan import (
    Needs,
    Shape,
    book,
    first_at_or_after,
    first_fit,
    first_passing_row,
    first_placement,
    window_end,
)

NO_LIMIT = math.inf
OVERDUE_S = 1.0


class FreeMap:
    """Free GPUs per node from ``now`` on: a step function over time. ``rows[k]`` holds
    the free GPUs of every node from ``times[k]`` until ``times[k + 1]``. The rows and
    their times live in buffers with room to spare, so that splitting a row (each booking
    may) shifts the rows below in place (compiled: :func:`map_scan.book`) instead of
    reallocating the whole map."""

    def __init__(self, now: float, free: Sequence[int],
                 releases: Sequence[tuple[float, Sequence[int], Sequence[int]]]) -> None:
        """``releases``: (when, node indices, GPUs) of each running job's limit end. A job
        past its limit (the simulator does not kill it there) is planned to end a second
        from now: its GPUs are not free now."""
        ends = [(when if when > now else now + OVERDUE_S, nodes, gpus)
                for when, nodes, gpus in releases if math.isfinite(when)]
        times = [now, *sorted({when for when, _, _ in ends})]
        row_of = {when: k for k, when in enumerate(times)}
        steps = np.zeros((len(times), len(free)), dtype=np.int64)
        steps[0] = free
        rows: list[int] = []
        nodes_hit: list[int] = []
        counts: list[int] = []
        for when, nodes, gpus in ends:
            rows.extend([row_of[when]] * len(nodes))
            nodes_hit.extend(nodes)
            counts.extend(gpus)
        np.add.at(steps, (rows, nodes_hit), counts)
        self.used = len(times)  # rows in use
        # a release frees its GPUs from its row on: every row is the running sum of steps
        self._buffer = np.empty((2 * self.used + 16, len(free)), dtype=np.int64)
        np.cumsum(steps, axis=0, out=self._buffer[:self.used])
        self._times_buffer = np.empty(len(self._buffer), dtype=np.float64)  # each row's start
        self._times_buffer[:self.used] = times

    @property
    def rows(self) -> np.ndarray:
        """The rows in use (a view: a row split changes it)."""
        return self._buffer[:self.used]

    @property
    def times(self) -> np.ndarray:
        """When each row starts, ascending (a view: a row split changes it)."""
        return self._times_buffer[:self.used]

    def time_at(self, k: int) -> float:
        return float(self._times_buffer[k])

    def row_of(self, when: float) -> int:
        """The first row that starts at or after ``when``."""
        return first_at_or_after(self._times_buffer, self.used, when)

    def available(self, k: int, limit: float) -> list[int]:
        """Per node, the fewest GPUs free from ``times[k]`` for ``limit`` seconds."""
        end = window_end(self._times_buffer, self.used, k, limit)
        least: list[int] = self._buffer[k:end].min(axis=0).tolist()
        return least

    def book(self, start: float, limit: float, placement: Placement, cluster: Cluster) -> None:
        """Take the placement's GPUs from ``start`` for ``limit`` seconds."""
        if self.used + 2 > len(self._buffer):  # room for the two rows a booking may split
            grown = np.empty((2 * len(self._buffer), self._buffer.shape[1]), dtype=np.int64)
            grown[:self.used] = self._buffer[:self.used]
            grown_times = np.empty(len(grown), dtype=np.float64)
            grown_times[:self.used] = self._times_buffer[:self.used]
            self._buffer, self._times_buffer = grown, grown_times
        columns = [cluster.index(name) for name in placement.nodes]
        self.used = book(self._buffer, self._times_buffer, self.used, start, limit,
                         columns, placement.gpus)


def job_limit(job: Job) -> float:
    return job.time_limit if job.time_limit is not None else NO_LIMIT


class Candidates:
    """What a pass asks again and again, kept across passes (the cluster does not change):
    per set of excluded nodes, the order a first fit walks (every other node, in the
    cluster's order); per order and GPU type, the columns a job may use; per fixed shape,
    what it needs of them (:class:`map_scan.Shape`); and the placements first fits return.
    An order is known by identity, and kept with its entries, so that its identity cannot
    pass to another list (``earliest`` takes any order). Forgets everything past
    ``LIMIT`` orders (exclusion sets come and go with the decisions)."""

    LIMIT = 4096

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._orders: dict[frozenset[int], list[int]] = {}
        self._columns: dict[tuple[int, str | None],
                            tuple[Sequence[int], list[int], np.ndarray]] = {}
        self._shapes: dict[tuple[int, str | None, int, int | None, int | None],
                           tuple[Sequence[int], Shape]] = {}
        self._placements: dict[tuple[tuple[int, ...], tuple[int, ...]], Placement] = {}

    def order(self, excluded: frozenset[int]) -> list[int]:
        order = self._orders.get(excluded)
        if order is None:
            if len(self._orders) >= self.LIMIT:
                self._orders, self._columns, self._shapes = {}, {}, {}
            order = [i for i in range(len(self.cluster.nodes)) if i not in excluded]
            self._orders[excluded] = order
        return order

    def columns(self, order: Sequence[int], gpu_type: str | None
                ) -> tuple[list[int], np.ndarray]:
        """``order`` less other GPU types' nodes, as a list and as an array."""
        kept = self._columns.get((id(order), gpu_type))
        if kept is None or kept[0] is not order:
            if len(self._columns) >= 16 * self.LIMIT:
                self._columns = {}
            typed = _of_type(gpu_type, self.cluster, order)
            kept = self._columns[id(order), gpu_type] = (
                order, typed, np.asarray(typed, dtype=np.int64))
        return kept[1], kept[2]

    def shape(self, order: Sequence[int], job: Job) -> Shape:
        """The job's fixed shape over its columns: per share size, so many of them with so
        many GPUs (the rows' own GPUs need no check: as many nodes as shares, each with
        room for its share or at least one GPU, hold the job's GPUs), and the first fit's
        order and shares."""
        key = (id(order), job.gpu_type, job.num_gpus, job.num_nodes, job.gpus_per_node)
        kept = self._shapes.get(key)
        if kept is None or kept[0] is not order:
            if len(self._shapes) >= 16 * self.LIMIT:
                self._shapes = {}
            typed, _ = self.columns(order, job.gpu_type)
            shares = fixed_shape(job)
            needs = Needs([(max(size, 1), count, typed) for size, count in _share_needs(shares)])
            kept = self._shapes[key] = (order, Shape(needs, typed, shares))
        return kept[1]

    def placement(self, chosen: tuple[int, ...], shares: tuple[int, ...]) -> Placement:
        """The placement of ``shares`` on the nodes of these indices."""
        placement = self._placements.get((chosen, shares))
        if placement is None:
            if len(self._placements) >= 16 * self.LIMIT:
                self._placements = {}
            placement = self._placements[chosen, shares] = Placement(
                tuple(self.cluster.nodes[i].name for i in chosen), shares)
        return placement


def earliest(job: Job, pin: Placement | None, order: Sequence[int], free: FreeMap,
             cluster: Cluster, from_row: int = 0, before_row: int | None = None,
             candidates: Candidates | None = None) -> tuple[int, Placement] | None:
    """The first row in ``[from_row, before_row)`` (``before_row``: the map's end if
    None) at which the job fits for its whole limit, and where: on its pin, or Slurm's
    first fit over ``order``; None if it fits at none. ``candidates``: the caller's cache
    (a fresh one if None).

    Rows are screened (compiled, :mod:`slurm_rl.simulator.map_scan`) on the job's
    candidate nodes (its pin, or ``order`` less the nodes of other GPU types) by a
    necessary condition: per share size, enough nodes free by that much throughout the
    row's window (for a pin: each of its nodes by its GPUs). A row that passes is
    placed, first fit over ``order``, which decides; so the row found is the one a
    row-by-row walk finds (a free shape: see ``_earliest_free_shape``)."""
    limit = job_limit(job)
    times, used = free.times, free.used
    searched = used if before_row is None else min(before_row, used)
    if pin is not None:
        return _earliest_pinned(job, pin, free, cluster, from_row, searched)
    candidates = candidates or Candidates(cluster)
    typed, _ = candidates.columns(order, job.gpu_type)
    if job.gpus_per_node is None and job.num_nodes is None:
        held = free.rows
        if job.gpu_type or len(order) < held.shape[1]:  # (else every node: no copy)
            held = held[:, typed]
        spread = _earliest_free_shape(job, order, held, free, cluster, from_row)
        return spread if spread is not None and spread[0] < searched else None
    shape = candidates.shape(order, job)
    found = first_placement(free.rows, times, used, from_row, searched, limit, shape)
    if found is None:
        return None
    row, chosen = found
    return row, candidates.placement(chosen, shape.shares)


def _earliest_pinned(job: Job, pin: Placement, free: FreeMap, cluster: Cluster,
                     from_row: int, searched: int) -> tuple[int, Placement] | None:
    """``earliest`` on a pin: each of its nodes free by its GPUs throughout the window,
    and the pin's nodes holding the job's GPUs at the row (implied, but for a pin that
    gives the job fewer GPUs than it asks for: the engine refuses those, a caller may not)."""
    columns = [cluster.index(node) for node in pin.nodes]
    needs = Needs([(gpus, 1, [column]) for column, gpus in zip(columns, pin.gpus, strict=True)])
    limit, row = job_limit(job), from_row
    while True:
        found = first_passing_row(free.rows, free.times, free.used, row, limit, needs, searched)
        if found is None or pin.num_gpus >= job.num_gpus:
            return (found, pin) if found is not None else None
        if int(free.rows[found, columns].sum()) >= job.num_gpus:
            return found, pin
        row = found + 1


def _share_needs(shares: tuple[int, ...]) -> list[tuple[int, int]]:
    """Per share size (shares largest first), how many shares are at least that large:
    so many nodes must hold that many GPUs."""
    return [(size, sum(1 for share in shares if share >= size)) for size in sorted(set(shares))]


def _earliest_free_shape(job: Job, order: Sequence[int], held: np.ndarray, free: FreeMap,
                         cluster: Cluster, from_row: int) -> tuple[int, Placement] | None:
    """``earliest`` for a job of free shape: it fits where its window's least free GPUs
    add up to its GPUs. The window minima of candidate rows (those whose own GPUs suffice)
    are found in chunks of growing size (most jobs fit within the first few)."""
    rows = from_row + np.flatnonzero(held[from_row:].sum(axis=1) >= job.num_gpus)
    limit = job_limit(job)
    times = free.times
    ends = np.maximum(np.searchsorted(times, times[rows] + limit, side="left"), rows + 1)
    first, size = 0, 8
    while first < len(rows):
        starts, stops = rows[first:first + size], ends[first:first + size]
        low = int(starts[0])
        windows = _window_minima(held[low:int(stops.max())], starts - low, stops - low)
        for k in starts[windows.sum(axis=1) >= job.num_gpus].tolist():
            placement = place_in_order(job, cluster, free.available(k, limit), order)
            if placement is not None:
                return k, placement
        first, size = first + size, size * 4
    return None


def _window_minima(held: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per window ``[starts[i], ends[i])`` of rows, the column-wise minimum. ``starts`` and
    ``ends`` are non-decreasing (a job's windows, row after row)."""
    last_start, first_end = int(starts[-1]), int(ends[0])
    if last_start >= first_end:
        return _sparse_minima(held, starts, ends)
    # every window holds [last_start, first_end): its minimum once, then each window's own
    # head (from its start to last_start) and tail (from first_end to its end) from running
    # minima, reading each row once
    windows = np.repeat(held[last_start:first_end].min(axis=0)[None, :], len(starts), axis=0)
    early = starts < last_start
    if early.any():
        first = int(starts[0])
        heads = np.minimum.accumulate(held[first:last_start][::-1], axis=0)[::-1]
        windows[early] = np.minimum(windows[early], heads[starts[early] - first])
    late = ends > first_end
    if late.any():
        tails = np.minimum.accumulate(held[first_end:int(ends[-1])], axis=0)
        windows[late] = np.minimum(windows[late], tails[ends[late] - first_end - 1])
    return windows


def _sparse_minima(held: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per window ``[starts[i], ends[i])`` of rows, the column-wise minimum (a sparse table:
    level j holds the minimum of 2**j rows from each row on, and two overlapping blocks
    of one level cover any window)."""
    lengths = ends - starts
    level_of = np.floor(np.log2(lengths)).astype(np.int64)
    # floor(log2) in floats can be off by one at powers of two: set it right exactly
    level_of += (np.left_shift(1, level_of + 1) <= lengths).astype(np.int64)
    level_of -= (np.left_shift(1, level_of) > lengths).astype(np.int64)
    windows = np.empty((len(starts), held.shape[1]), dtype=held.dtype)
    table = held
    for level in range(int(level_of.max()) + 1):
        if level > 0:
            half = 1 << (level - 1)
            table = np.minimum(table[:-half], table[half:])
        at = np.flatnonzero(level_of == level)
        if len(at):
            left, right = starts[at], ends[at] - (1 << level)
            windows[at] = np.minimum(table[left], table[right])
    return windows


def _of_type(gpu_type: str | None, cluster: Cluster, order: Sequence[int]) -> list[int]:
    """The nodes of ``order`` that place_in_order may use for a job of this GPU type."""
    if not gpu_type:
        return list(order)
    of_type = cluster.nodes_of_type(gpu_type)
    return [i for i in order if i in of_type]


def _fewest_gpus_from(queue: Sequence[Queued]) -> list[float]:
    """Per index of the queue, the fewest GPUs a job from there on asks for (any of its
    one-type choices; inf past the end): no such job starts on fewer free GPUs."""
    suffix_minima = itertools.accumulate(reversed([item.fewest_gpus for item in queue]), min)
    return [*reversed([*suffix_minima]), math.inf]


class Queued(Protocol):
    """A queued job as the pass sees it (slurm_emulation.QueuedJob)."""

    @property
    def job(self) -> Job: ...
    @property
    def pin(self) -> Placement | None: ...
    @property
    def excluded(self) -> frozenset[int]: ...
    @property
    def choices(self) -> tuple[Job, ...]: ...
    @property
    def fewest_gpus(self) -> int: ...
    @property
    def start_key(self) -> tuple[object, ...]:
        """Equal for jobs that start now, or are planned, alike (see ``no_start``)."""


class Running(Protocol):
    """A running job as the plan sees it (slurm_emulation.RunningShape)."""

    @property
    def limit_end(self) -> float: ...
    @property
    def nodes(self) -> tuple[int, ...]: ...
    @property
    def gpus(self) -> tuple[int, ...]: ...


class PlannedPass:
    """One backfill pass over the queue, highest priority first: start what fits now for
    its whole limit around the plan, plan the rest (up to ``max_reservations`` jobs; jobs
    after that may still start now, around the plan so far). The map is built only once a
    job has to be planned: until then no job is planned, and free GPUs only grow later.
    The pass ends once no later job can start now: what is planned after that changes no
    start, and a pass returns only its starts (``walk``)."""

    def __init__(self, now: float, free_gpus: list[int],
                 running: Callable[[], Sequence[Running]], cluster: Cluster,
                 max_reservations: int, candidates: Candidates | None = None) -> None:
        """``candidates``: kept from pass to pass by the caller (else this pass's own)."""
        self.now, self.free, self.running, self.cluster = now, free_gpus, running, cluster
        self.max_reservations = max_reservations
        self.planned = 0
        self.map: FreeMap | None = None
        self.starts: list[tuple[Job, Placement]] = []
        self.no_start: set[tuple[object, ...]] = set()  # shapes that cannot start now
        self.free_total = sum(free_gpus)
        self._candidates = candidates or Candidates(cluster)
        self._free_row = np.asarray([free_gpus], dtype=np.int64)  # self.free, as a map row
        self._may_start = 0  # the queue index of a job that could start now, last asked
        # while it still can (_still_able): the nodes it would start on, and until when
        self._able: tuple[frozenset[int], float] | None = None
        self._fewest: list[float] = [math.inf]  # per queue index, walk's _fewest_gpus_from
        # per shape, the last planned start: the map only fills up, so a job of the same
        # shape cannot be planned earlier
        self._planned_at: dict[tuple[object, ...], float] = {}

    @property
    def exhausted(self) -> bool:
        return self.free_total <= 0

    def walk(self, queue: Sequence[Queued]) -> None:
        """Consider the queue's jobs in order, until no job from the current one on asks
        for as few GPUs as are free, or none after it can start any more."""
        self._fewest = _fewest_gpus_from(queue)
        for index, item in enumerate(queue):
            if (self.exhausted or self._fewest[index] > self.free_total
                    or not self.consider(item, queue, index)):
                break

    def consider(self, item: Queued, queue: Sequence[Queued], index: int) -> bool:
        """Start the job now or plan it. False: the pass may end here, for no job after it
        in ``queue`` (``item`` is ``queue[index]``) can start now whatever is planned."""
        job = item.job
        choices = item.choices
        key = item.start_key
        if key in self.no_start and self.planned >= self.max_reservations:
            return True
        placement = None
        if key not in self.no_start:
            placement = self._now_any(item)
        if placement is not None:
            self._start(job, placement)
            return True
        self.no_start.add(key)
        if self.planned < self.max_reservations:
            if not self._one_may_start_after(queue, index):
                return False
            self._plan(choices, item.pin, self._order(item.excluded), key)
        return True

    def _now_any(self, item: Queued) -> Placement | None:
        """Where the job starts now (its first one-type choice that fits), or None."""
        order = self._order(item.excluded)
        return next((p for p in (self._now(c, item.pin, order) for c in item.choices)
                     if p is not None), None)

    def _one_may_start_after(self, queue: Sequence[Queued], index: int) -> bool:
        """Whether a job after ``queue[index]`` can still start now. A plan only books
        GPUs and a start only takes them, so what cannot start now on this pass's map
        cannot later in the pass either: a job found so is passed over for good, and the
        one found able is asked first next time. (Only then does planning pay: a plan
        changes nothing but what later jobs may start.)"""
        after = max(self._may_start, index + 1)
        if after == self._may_start < len(queue) and self._still_able(queue[after]):
            return True
        while (after < len(queue) and self._fewest[after] <= self.free_total
               and not self._could_start(queue[after])):
            after += 1
        if after < len(queue) and self._fewest[after] > self.free_total:
            after = len(queue)  # none from there on asks for as few GPUs as are free
        self._may_start = after
        return after < len(queue)

    def _could_start(self, item: Queued) -> bool:
        """What ``consider`` would find if the job came now: not one of a shape found
        unable to start, and fitting now for its whole limit (then kept: _still_able). A
        shape found unable joins ``no_start``: no job of that shape can start later in the
        pass (most jobs a pass looks past share a shape with one before them)."""
        self._able = None
        key = item.start_key
        if key in self.no_start:
            return False
        placement = self._now_any(item)
        if placement is None:
            self.no_start.add(key)
            return False
        self._able = (frozenset(self.cluster.index(n) for n in placement.nodes),
                      self.now + job_limit(item.job))
        return True

    def _still_able(self, item: Queued) -> bool:
        """Whether the job last found able to start still is, without placing it again:
        so it is while no start came since and no plan booked one of its nodes before its
        limit would end (it would find the same nodes: a first fit passes over the others
        as before) and its shape has not joined ``no_start``. (A wrong yes would only cost
        plans: the pass would walk on, as it did before it could end early.)"""
        return self._able is not None and item.start_key not in self.no_start

    def _order(self, excluded: frozenset[int]) -> list[int]:
        return self._candidates.order(excluded)

    def _now(self, job: Job, pin: Placement | None, order: list[int]) -> Placement | None:
        if job.num_gpus > self.free_total:
            return None
        if pin is None and (job.num_nodes is not None or job.gpus_per_node is not None):
            return self._first_fit_now(job, order)
        free = self.free if self.map is None else self.map.available(0, job_limit(job))
        if pin is not None:
            fits = all(free[self.cluster.index(n)] >= g
                       for n, g in zip(pin.nodes, pin.gpus, strict=True))
            return pin if fits else None
        return place_in_order(job, self.cluster, free, order)

    def _first_fit_now(self, job: Job, order: list[int]) -> Placement | None:
        """``place_in_order`` of a fixed shape on what is free now for the job's whole
        limit, compiled (:func:`map_scan.first_fit`)."""
        if self.map is None:
            rows, end = self._free_row, 1
        else:
            rows = self.map.rows
            end = window_end(self.map.times, self.map.used, 0, job_limit(job))
        shape = self._candidates.shape(order, job)
        chosen = first_fit(rows, 0, end, shape)
        return self._candidates.placement(chosen, shape.shares) if chosen is not None else None

    def _start(self, job: Job, placement: Placement) -> None:
        for name, gpus in zip(placement.nodes, placement.gpus, strict=True):
            self.free[self.cluster.index(name)] -= gpus
            self._free_row[0, self.cluster.index(name)] -= gpus
        self.free_total -= placement.num_gpus
        if self.map is not None:
            self.map.book(self.now, job_limit(job), placement, self.cluster)
        self.starts.append((job, placement))
        self._able = None

    def _plan(self, choices: tuple[Job, ...], pin: Placement | None, order: list[int],
              key: tuple[object, ...]) -> None:
        """Plan the job at its earliest time (over its one-type choices, the earliest)."""
        if self.map is None:
            self.map = self._build_map()
        self.planned += 1
        if self._planned_at.get(key) == math.inf:
            return  # one of its shape found no time: nor will it
        after = max(1, self.map.row_of(self._planned_at.get(key, -math.inf)))
        best: tuple[int, Placement] | None = None
        for choice in choices:  # the earliest row; on a tie, the first choice's
            found = earliest(choice, pin, order, self.map, self.cluster, after,
                             best[0] if best is not None else None, self._candidates)
            best = found or best
        if best is None:
            self._planned_at[key] = math.inf
            return
        row, placement = best
        planned_at = self._planned_at[key] = self.map.time_at(row)
        self.map.book(planned_at, job_limit(choices[0]), placement, self.cluster)
        if self._able is not None and planned_at < self._able[1] and not (
                self._able[0].isdisjoint(self.cluster.index(n) for n in placement.nodes)):
            self._able = None  # the plan takes GPUs the able job was to start on

    def _build_map(self) -> FreeMap:
        releases = [(r.limit_end, r.nodes, r.gpus) for r in self.running()]
        for job, placement in self.starts:  # started in this pass: not running yet
            nodes = tuple(self.cluster.index(n) for n in placement.nodes)
            releases.append((self.now + job_limit(job), nodes, placement.gpus))
        return FreeMap(self.now, self.free, releases)
