"""Compiled scans of the backfill map (:class:`slurm_rl.simulator.backfill.FreeMap`).

The backfill plan asks, for every job it plans, for the first row of the map from which
enough nodes stay free enough for the job's whole time limit. In numpy that question costs
some thirty array operations on a map of a few hundred rows by the cluster's nodes, each a
few microseconds of call overhead, while the answer lies a median two rows on (measured on
Philly, October 2017). Compiled with numba, the scan walks rows forward and stops at the
first that passes, and each node's run of rows is read at most once per call.

The answer is exact, the same row the numpy screen found: integer comparisons, and each
window's end found the way ``np.searchsorted(times, times[k] + limit, side="left")`` finds
it, with the same float addition (``tests/test_backfill_screen.py`` checks it against a
row-by-row walk; the golden schedules on replays).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from typing import Any

import numpy as np
from numba import njit

_log = logging.getLogger(__name__)


def compiled(function: Any) -> Any:
    """``function`` compiled by numba, kept in numba's on-disk cache (beside this module,
    in ``NUMBA_CACHE_DIR`` or in the user's cache folder) where numba finds one it may
    write; else compiled anew in each process (a daemon whose package and home are read
    only must still run: numba refuses to cache with nowhere to write). numba's compiled
    functions carry no types mypy can read: the wrappers below give them."""
    try:
        dispatcher = njit(cache=True, nogil=True)(function)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return njit(nogil=True)(function)
    _tolerate_failed_saves(dispatcher)
    return dispatcher


def _tolerate_failed_saves(dispatcher: Any) -> None:
    """A cache folder numba found writable may still fail: at the first save (a full disk, a
    folder removed since), or at a load of an index or a data file left truncated or
    corrupt (a crash, another numba's format). numba raises that out of the first call,
    which would end a replay, and again in every later process while the file is there.
    The function is then compiled for this process only, with one warning."""
    cache: Any = getattr(dispatcher, "_cache", None)
    save = getattr(cache, "save_overload", None)
    load = getattr(cache, "load_overload", None)
    if save is None or load is None:  # a numba without this cache API: its own behaviour
        return
    name = getattr(dispatcher, "__name__", "a scan")

    def save_or_warn(signature: Any, data: Any) -> None:
        try:
            save(signature, data)
        except Exception as error:  # any failure: run uncached
            _log.warning("numba could not cache %s (%s): compiled for this process only",
                         name, error)

    def load_or_compile(signature: Any, target_context: Any) -> Any:
        try:
            return load(signature, target_context)
        except Exception as error:  # any failure: compile anew
            _log.warning("numba could not read its cache of %s (%s): compiled anew, and the "
                         "cache's index written again", name, error or type(error).__name__)
            _forget_index(cache)
            return None

    cache.save_overload = save_or_warn
    cache.load_overload = load_or_compile


def _forget_index(cache: Any) -> None:
    """Remove the function's cache index that could not be read, so that the save after
    this compilation writes a good one (numba's save reads the index first, and would fail
    on it in every process); its data files are named in the index and are left as they
    are (numba overwrites them by number)."""
    index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
    if isinstance(index, str):
        with contextlib.suppress(OSError):
            os.remove(index)


@compiled
def _first_at_or_after(times: np.ndarray, low: int, high: int, when: float) -> int:
    """The first row in ``[low, high)`` that starts at or after ``when`` (``high`` if
    none): a binary search, ``times`` ascending."""
    while low < high:
        middle = (low + high) // 2
        if times[middle] < when:
            low = middle + 1
        else:
            high = middle
    return low


@compiled
def _window_end(times: np.ndarray, used: int, k: int, limit: float) -> int:
    """The first row at or after which the window from row ``k`` for ``limit`` seconds has
    ended (rows ``[k, end)`` start before ``times[k] + limit``); at least ``k + 1``. An
    unlimited (or NaN) limit ends past the last row, as ``np.searchsorted`` has it."""
    if limit == math.inf or math.isnan(limit):
        return used
    found: int = _first_at_or_after(times, k + 1, used, times[k] + limit)
    return found


@compiled
def _next_passing(rows: np.ndarray, times: np.ndarray, used: int, start: int, stop: int,
                  limit: float, columns: np.ndarray, group_starts: np.ndarray,
                  least: np.ndarray, needed: np.ndarray, drops: np.ndarray) -> int:
    """The first passing row in ``[start, stop)``, or -1. ``drops``: per entry of
    ``columns``, the first row from some earlier ``k`` on where its column holds fewer than
    its group's ``least`` (-1: none known yet), kept across calls with rising ``start``."""
    for k in range(start, stop):
        end = _window_end(times, used, k, limit)
        passes = True
        for group in range(len(needed)):
            lasting = 0
            for entry in range(group_starts[group], group_starts[group + 1]):
                drop = drops[entry]
                if drop < k:  # not known from k on: walk the column's run from k
                    column, floor = columns[entry], least[group]
                    drop = k
                    while drop < used and rows[drop, column] >= floor:
                        drop += 1
                    drops[entry] = drop
                if drop >= end:
                    lasting += 1
                    if lasting == needed[group]:
                        break
            if lasting < needed[group]:
                passes = False
                break
        if passes:
            return k
    return -1


@compiled
def _first_row(rows: np.ndarray, times: np.ndarray, used: int, start: int, stop: int,
               limit: float, columns: np.ndarray, group_starts: np.ndarray,
               least: np.ndarray, needed: np.ndarray) -> int:
    drops = np.full(len(columns), -1, dtype=np.int64)
    found: int = _next_passing(rows, times, used, start, stop, limit, columns, group_starts,
                               least, needed, drops)
    return found


@compiled
def _fill(rows: np.ndarray, k: int, end: int, order: np.ndarray, shares: np.ndarray,
          chosen: np.ndarray) -> bool:
    """Slurm's first fit into ``chosen`` (one column per share); whether it found all
    (never, with no shares: no job asks for none)."""
    if len(shares) == 0:
        return False
    taken = 0
    for column in order:
        least = rows[k, column]
        for row in range(k + 1, end):
            if rows[row, column] < least:
                least = rows[row, column]
        share = shares[taken]
        if least > 0 and least >= share:
            chosen[taken] = column
            taken += 1
            if taken == len(shares):
                return True
    return False


@compiled
def _first_placed(rows: np.ndarray, times: np.ndarray, used: int, start: int, stop: int,
                  limit: float, columns: np.ndarray, group_starts: np.ndarray,
                  least: np.ndarray, needed: np.ndarray, order: np.ndarray,
                  shares: np.ndarray, chosen: np.ndarray) -> int:
    drops = np.full(len(columns), -1, dtype=np.int64)
    k = start
    while k < stop:
        k = int(_next_passing(rows, times, used, k, stop, limit, columns, group_starts,
                              least, needed, drops))
        if k < 0:
            return -1
        if _fill(rows, k, _window_end(times, used, k, limit), order, shares, chosen):
            return k
        k += 1
    return -1


@compiled
def _split_at(rows: np.ndarray, times: np.ndarray, used: int, when: float) -> tuple[int, int]:
    """The row that starts at ``when``, split off the one holding it if need be (the rows
    below shift down one); and the rows now in use."""
    low, high = 0, used
    while low < high:  # the first row that starts after ``when``
        middle = (low + high) // 2
        if times[middle] <= when:
            low = middle + 1
        else:
            high = middle
    k = low - 1
    if times[k] == when:
        return k, used
    for row in range(used, k + 1, -1):
        rows[row, :] = rows[row - 1, :]
        times[row] = times[row - 1]
    rows[k + 1, :] = rows[k, :]
    times[k + 1] = when
    return k + 1, used + 1


@compiled
def _book(rows: np.ndarray, times: np.ndarray, used: int, start: float, limit: float,
          columns: np.ndarray, gpus: np.ndarray) -> int:
    first, used = _split_at(rows, times, used, start)
    last = used  # (to the map's end unless the limit is finite, as before)
    if math.isfinite(limit):
        last, used = _split_at(rows, times, used, start + limit)
    for entry in range(len(columns)):
        for row in range(first, last):
            rows[row, columns[entry]] -= gpus[entry]
    return used


class Needs:
    """What a job needs of the map's columns, in groups: in group ``g``, at least
    ``needed[g]`` of its columns must hold ``least[g]`` GPUs free throughout the window.
    A share size over the job's candidate nodes is one group; a pin is one group per node."""

    __slots__ = ("columns", "group_starts", "least", "needed")

    def __init__(self, groups: list[tuple[int, int, list[int]]]) -> None:
        """``groups``: (least GPUs, how many columns, the columns) each."""
        columns: list[int] = []
        starts = [0]
        for _, _, members in groups:
            columns.extend(members)
            starts.append(len(columns))
        self.columns = np.asarray(columns, dtype=np.int64)
        self.group_starts = np.asarray(starts, dtype=np.int64)
        self.least = np.asarray([least for least, _, _ in groups], dtype=np.int64)
        self.needed = np.asarray([count for _, count, _ in groups], dtype=np.int64)


def first_passing_row(rows: np.ndarray, times: np.ndarray, used: int, start: int,
                      limit: float, needs: Needs, stop: int | None = None) -> int | None:
    """The first row ``k`` in ``[start, stop)`` (``stop``: ``used``, the map's rows, if
    None) whose window ``[k, end)`` — the rows that start before ``times[k] + limit`` —
    meets every group of ``needs``; None if none does. ``rows``: free GPUs, a row per
    time, a column per node (int64)."""
    stop = used if stop is None else min(stop, used)
    if start >= stop:
        return None
    found = int(_first_row(rows, times, used, start, stop, float(limit), needs.columns,
                           needs.group_starts, needs.least, needs.needed))
    return found if found >= 0 else None


def window_end(times: np.ndarray, used: int, k: int, limit: float) -> int:
    """The row after the last that starts before ``times[k] + limit`` (at least ``k + 1``)."""
    return int(_window_end(times, used, k, float(limit)))


class Shape:
    """A fixed shape's needs (:class:`Needs`) with the order its first fit walks (the job's
    candidate columns) and its shares, largest first, as the compiled scans take them."""

    __slots__ = ("needs", "order", "shares", "share_array", "chosen")

    def __init__(self, needs: Needs, order: list[int], shares: tuple[int, ...]) -> None:
        self.needs, self.shares = needs, shares
        self.order = np.asarray(order, dtype=np.int64)
        self.share_array = np.asarray(shares, dtype=np.int64)
        self.chosen = np.empty(len(shares), dtype=np.int64)  # the scans' output, reused


def first_placement(rows: np.ndarray, times: np.ndarray, used: int, start: int, stop: int,
                    limit: float, shape: Shape) -> tuple[int, tuple[int, ...]] | None:
    """The first row in ``[start, stop)`` that passes ``shape.needs`` (as
    :func:`first_passing_row`) and where the first fit (as :func:`first_fit`) places the
    shape, with the columns chosen; None if there is none."""
    if start >= min(stop, used):
        return None
    needs = shape.needs
    row = int(_first_placed(rows, times, used, start, min(stop, used), float(limit),
                            needs.columns, needs.group_starts, needs.least, needs.needed,
                            shape.order, shape.share_array, shape.chosen))
    return (row, tuple(shape.chosen.tolist())) if row >= 0 else None


def first_fit(rows: np.ndarray, k: int, end: int, shape: Shape) -> tuple[int, ...] | None:
    """Slurm's first fit of ``shape`` over its order, on the fewest GPUs each column holds
    in rows ``[k, end)``: a column takes the next share if it holds that many GPUs and at
    least one (as ``nodesets.place_in_order``). The chosen columns, one per share, or None."""
    if not _fill(rows, k, end, shape.order, shape.share_array, shape.chosen):
        return None
    return tuple(shape.chosen.tolist())


def book(rows: np.ndarray, times: np.ndarray, used: int, start: float, limit: float,
         columns: list[int], gpus: tuple[int, ...]) -> int:
    """Take ``gpus[i]`` from column ``columns[i]`` from ``start`` for ``limit`` seconds,
    splitting the rows where the booking starts and ends if need be (``rows`` and
    ``times``: buffers with room for two more rows than the ``used`` ones; ``start`` at or
    after the first row's time). Returns the rows now in use."""
    booked: int = _book(rows, times, used, float(start), float(limit),
                        np.asarray(columns, dtype=np.int64), np.asarray(gpus, dtype=np.int64))
    return booked


def first_at_or_after(times: np.ndarray, used: int, when: float) -> int:
    """The first of the ``used`` rows that starts at or after ``when`` (``used`` if none):
    ``np.searchsorted(times[:used], when, side="left")``."""
    first: int = _first_at_or_after(times, 0, used, float(when))
    return first
