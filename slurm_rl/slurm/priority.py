"""Slurm priorities that reproduce a ranking while changing as few jobs as possible.

Every ``scontrol update`` costs an RPC (~6 ms), and a stable queue should cost none. The
longest run of ranked jobs whose priorities of ours (at least ``floor``) already decrease
along the ranking keeps them: that is the fewest jobs that must change. Every other job gets
a value in the gap between its kept neighbours; fresh values are ``STEP`` apart, so a job
that arrives later (FIFO: at the bottom) or moves between two others fits in without moving
them. A gap with no room gives up its kept neighbour (which moves too). Values are renumbered
from ``floor`` when they near the top of Slurm's 32-bit range (unless a job whose value is
not to be sent holds the top: the others then go just below it).

A policy whose ranking moves a little every cycle (a learned one scores waiting time) would
still send a stream of updates, so :func:`plan_priorities` holds some changes back
(:class:`PriorityLimits`):

* **tolerance**: a job that already holds a priority of ours keeps it while its place in
  the order Slurm holds is at most ``tolerance_ranks`` places from its rank (unless the
  caller exempts it: a job placed now);
* **rate**: a job the caller says may not change (it had ``updates_per_job_hour`` changes in
  the last hour) keeps its priority;
* **cap**: at most ``per_cycle`` jobs change in one call, the highest-ranked first.

A job held back is left out of the walk: the jobs around it are ordered among themselves,
and the held job sits where its old value puts it. A job whose value is context only (the
caller sends none for it: ``fixed``) is always kept, and the others are planned around it.

The hourly count is :class:`PriorityBudget`'s; :class:`HeldPriorities` is the two together
as slurmctld ends up holding them, for the simulator's emulation of Slurm (the live actuator
plans against the values Slurm shows instead).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

# Slurm priorities are uint32 and 0xFFFFFFFE/0xFFFFFFFF are sentinels; stay well below.
PRIORITY_CEILING = 2**31
# The room left between fresh values: a job later ranked between two others fits in between.
STEP = 100
# Where a fresh numbering puts its lowest job above the floor: room for ~10,000 later jobs
# ranked below every other (FIFO's arrivals) before a gap runs out and a neighbour moves.
BOTTOM_ROOM = 2**20
TOLERANCE, RATE, CAP = "tolerance", "rate", "cap"
HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class PriorityLimits:
    tolerance_ranks: int = 0
    updates_per_job_hour: int | None = None  # None: no rate limit
    per_cycle: int | None = None  # None: no cap


@dataclass(frozen=True, slots=True)
class PriorityPlan:
    """``wanted``: the priority each ranked job should hold (absent: leave it as it is);
    ``withheld``: the jobs whose change was held back, and by which limit."""

    wanted: dict[str, int]
    withheld: dict[str, str] = field(default_factory=dict)


def assign_priorities(
    ranking: Sequence[str],
    current: Mapping[str, int | None],
    floor: int,
    ceiling: int = PRIORITY_CEILING,
) -> dict[str, int]:
    """Strictly decreasing priorities along ``ranking`` (first = highest), all >= ``floor``."""
    wanted, top = _walk(ranking, current, floor, ceiling, frozenset())
    return renumber(ranking, floor, ceiling) if top >= ceiling else wanted


def plan_priorities(
    ranking: Sequence[str],
    current: Mapping[str, int | None],
    floor: int,
    limits: PriorityLimits,
    may_change: Callable[[str], bool] = lambda _job: True,
    ceiling: int = PRIORITY_CEILING,
    fixed: Collection[str] = frozenset(),
    exempt: Collection[str] = frozenset(),
) -> PriorityPlan:
    """The priorities to hold, with ``limits`` applied (module docstring). ``fixed``: jobs
    of ``ranking`` whose values are context, never sent (:func:`above_the_held`): they keep
    theirs and the others are planned around them. ``exempt``: jobs the tolerance never
    holds back (the ones placed now or brought forward: a placed job left a place or two
    below a job that cannot start would wait for that job's reservation)."""
    ranking, wanted = _below_the_unbeatable(ranking, current, floor, ceiling, fixed)
    if wanted is None:  # renumbering is rare and must be whole: no limit applies
        return PriorityPlan(renumber(ranking, floor, ceiling))
    withheld = {job: TOLERANCE for job in _tolerated(ranking, current, wanted, floor, ceiling,
                                                     limits.tolerance_ranks)
                if job not in exempt}
    # Holding a job back reshapes the run the others keep, which may change jobs the last
    # pass did not: every pass checks the rate and the cap again (each holds more back).
    for _ in range(len(ranking) + 1):
        wanted, _top = _walk(ranking, current, floor, ceiling, frozenset(withheld), fixed)
        changes = _changes(ranking, wanted, current)
        over_rate = [job for job in changes if not may_change(job)]
        if over_rate:
            withheld.update(dict.fromkeys(over_rate, RATE))
        elif limits.per_cycle is not None and len(changes) > limits.per_cycle:
            withheld.update(dict.fromkeys(changes[limits.per_cycle:], CAP))
        else:
            break
    kept = {job: value for job, value in wanted.items() if job not in withheld}
    return PriorityPlan(kept, withheld)


def _below_the_unbeatable(
    ranking: Sequence[str], current: Mapping[str, int | None], floor: int, ceiling: int,
    fixed: Collection[str],
) -> tuple[list[str], dict[str, int] | None]:
    """``ranking`` and the walk's values for it; None when only a renumbering fits. A fixed
    job whose value leaves no room above it below ``ceiling`` (an admin's 2**31 - 1) cannot
    be passed, as its value is not sent: it is ranked above the jobs that would pass it,
    and the walk tried again, before the whole ranking is renumbered."""
    order = list(ranking)
    while True:
        wanted, top = _walk(order, current, floor, ceiling, frozenset(), fixed)
        if top < ceiling:
            return order, wanted
        # the first fixed job some other job is ranked above (above_the_held: the highest)
        first_free = next((i for i, job in enumerate(order) if job not in fixed), len(order))
        passed = next((i for i in range(first_free, len(order)) if order[i] in fixed), None)
        if passed is None:
            return order, None
        order.insert(first_free, order.pop(passed))


def _is_ours(value: int | None, floor: int, ceiling: int) -> bool:
    return value is not None and floor <= value < ceiling


def _walk(
    ranking: Sequence[str],
    current: Mapping[str, int | None],
    floor: int,
    ceiling: int,
    held: Collection[str],
    fixed: Collection[str] = frozenset(),
) -> tuple[dict[str, int], int]:
    """Values for the jobs of ``ranking`` not ``held``: the longest run of jobs whose
    priorities of ours already decrease along the ranking keeps them (the fewest changes),
    and every other job gets a value in the gap between its kept neighbours; returns the
    values and the highest one (``ceiling`` or more: renumber). The ``fixed`` jobs holding
    a value of ours are always kept: a run may take another job only between them."""
    active = [job for job in ranking if job not in held]
    ours = {job: value for job in active
            if (value := current.get(job)) is not None and _is_ours(value, floor, ceiling)}
    anchors = frozenset(job for job in fixed if job in ours)
    kept = _longest_decreasing_around(active, ours, anchors)
    while True:
        wanted = _fill_gaps(active, ours, kept, floor, ceiling, anchors)
        if isinstance(wanted, dict):
            return wanted, max(wanted.values(), default=floor - 1)
        kept.discard(wanted)  # that gap is too narrow: its kept neighbour moves too


def _longest_decreasing_around(active: Sequence[str], ours: Mapping[str, int],
                               anchors: Collection[str]) -> set[str]:
    """The longest decreasing run that keeps every job of ``anchors``: between two
    anchors (or the ends), the longest run of the jobs whose values lie strictly between
    theirs. Without anchors, :func:`_longest_decreasing` of the whole ranking."""
    if not anchors:
        return _longest_decreasing(active, ours)
    kept: set[str] = set(anchors)
    for above, segment, below in _gaps(active, anchors):
        hi, lo = _bounds(ours, above, below)
        inside = {j: v for j in segment if (v := ours.get(j)) is not None
                  and (hi is None or v < hi) and (lo is None or v > lo)}
        kept |= _longest_decreasing(segment, inside)
    return kept


def _gaps(active: Sequence[str], kept: Collection[str]
          ) -> Iterator[tuple[str | None, list[str], str | None]]:
    """Each run of ``active`` jobs not ``kept``, with its kept neighbours above and below
    (None: the top or the bottom of the ranking)."""
    segment: list[str] = []
    above: str | None = None
    for job in [*active, None]:
        if job is not None and job not in kept:
            segment.append(job)
            continue
        if segment:
            yield above, segment, job
            segment = []
        above = job


def _bounds(ours: Mapping[str, int], above: str | None, below: str | None
            ) -> tuple[int | None, int | None]:
    """The values a gap lies between: (its upper neighbour's, its lower one's)."""
    return (ours[above] if above is not None else None,
            ours[below] if below is not None else None)


def _longest_decreasing(active: Sequence[str], ours: Mapping[str, int]) -> set[str]:
    """The longest subsequence of ``active`` (ranking order) whose values strictly
    decrease (patience sorting on the negated values, O(n log n))."""
    tails: list[int] = []  # tails[k]: smallest last -value of a run of length k+1
    tail_jobs: list[str] = []
    parent: dict[str, str | None] = {}
    for job in active:
        if job not in ours:
            continue
        key = -ours[job]
        at = bisect.bisect_left(tails, key)
        parent[job] = tail_jobs[at - 1] if at else None
        if at == len(tails):
            tails.append(key)
            tail_jobs.append(job)
        else:
            tails[at], tail_jobs[at] = key, job
    run: set[str] = set()
    job_at = tail_jobs[-1] if tail_jobs else None
    while job_at is not None:
        run.add(job_at)
        job_at = parent[job_at]
    return run


def _fill_gaps(active: Sequence[str], ours: Mapping[str, int], kept: set[str], floor: int,
               ceiling: int, anchors: Collection[str] = frozenset()) -> dict[str, int] | str:
    """Values for the jobs between kept ones; or the kept job to give up when a gap has
    no room (a segment's upper neighbour, else its lower one; never one of ``anchors``)."""
    wanted = {job: ours[job] for job in kept}
    for above, segment, below in _gaps(active, kept):
        hi, lo = _bounds(ours, above, below)
        values = _segment_values(len(segment), lo, hi, floor, ceiling)
        if values is None:
            movable = [j for j in (above, below) if j is not None and j not in anchors]
            if not movable:  # nothing to give up and still no room: renumber
                return {j: ceiling for j in active}
            return movable[0]
        wanted.update(zip(segment, values, strict=True))
    return wanted


def _segment_values(k: int, lo: int | None, hi: int | None, floor: int,
                    ceiling: int) -> list[int] | None:
    """``k`` strictly decreasing values strictly between ``lo`` and ``hi`` (None: the
    bottom, i.e. from ``floor``, or the top, i.e. up to ``ceiling``), ``STEP`` apart where
    there is room, so that later jobs fit in between without moving these."""
    if hi is None:  # the top of the ranking: as far up as needed
        base = floor + BOTTOM_ROOM - STEP if lo is None else lo
        values = [base + STEP * (k - i) for i in range(k)]
        if values[0] < ceiling:
            return values
        hi = ceiling
    bottom = floor - 1 if lo is None else lo
    if hi - bottom - 1 < k:
        return None
    if lo is None and hi - STEP * k >= floor:  # the bottom: STEP below the lowest kept
        return [hi - STEP * (i + 1) for i in range(k)]
    span = hi - bottom
    return [bottom + (span * (k - i)) // (k + 1) for i in range(k)]


def _changes(ranking: Sequence[str], wanted: Mapping[str, int],
             current: Mapping[str, int | None]) -> list[str]:
    """The jobs whose wanted priority differs from what Slurm holds, in ranking order."""
    return [job for job in ranking if job in wanted and wanted[job] != current.get(job)]


def _tolerated(
    ranking: Sequence[str],
    current: Mapping[str, int | None],
    wanted: Mapping[str, int],
    floor: int,
    ceiling: int,
    tolerance: int,
) -> list[str]:
    """Jobs that would change although they hold a priority of ours that puts them at most
    ``tolerance`` places from their rank in the order Slurm holds now."""
    if tolerance <= 0:
        return []
    rank = {job: i for i, job in enumerate(ranking)}
    ours = {job for job in ranking if _is_ours(current.get(job), floor, ceiling)}
    # Slurm's order: ours by value, highest first (ties by rank), then everyone else.
    held_order = sorted(ours, key=lambda job: (-(current.get(job) or 0), rank[job]))
    held_order += [job for job in ranking if job not in ours]
    place = {job: i for i, job in enumerate(held_order)}
    return [job for job in _changes(ranking, wanted, current)
            if job in ours and abs(place[job] - rank[job]) <= tolerance]


def renumber(ranking: Sequence[str], floor: int, ceiling: int = PRIORITY_CEILING
             ) -> dict[str, int]:
    """Every job afresh from ``floor``, ``STEP`` apart (1 apart if that does not fit)."""
    size = len(ranking)
    step = STEP if floor + STEP * size < ceiling else 1
    return {job_id: floor + step * (size - 1 - i) for i, job_id in enumerate(ranking)}


def above_the_held(promoted: Sequence[str], held: Mapping[str, int]) -> list[str]:
    """The ranking the walk plans when only ``promoted`` jobs are to move: those, highest
    first, then every other job ``held`` gives a value of ours, by that value (highest
    first; ties in ``held``'s order) as context the walk keeps, so that the promoted jobs go
    above it (slurm_rl/slurm/plan.py, HeldPriorities)."""
    chosen = set(promoted)
    context = sorted((job for job in held if job not in chosen), key=lambda job: -held[job])
    return [*promoted, *context]


class PriorityBudget:
    """When each job's accepted priority changes were sent, and whether it may have another
    within ``limit`` an hour (None: no limit).

    With two or more an hour, the last is kept for an *urgent* job: one the fairness guard
    brings forward, or one placed now (its priority must go above the unplaced jobs, see
    :func:`slurm_rl.slurm.plan.placed_first`). A policy that reorders its queue every cycle
    would otherwise spend every job's changes within seconds of its release, and Slurm would
    keep a starved job where it was."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.sent: dict[str, list[float]] = {}

    def note(self, job_id: str, at: float) -> None:
        self.sent.setdefault(job_id, []).append(at)

    def add_earlier(self, earlier: Mapping[str, Sequence[float]]) -> None:
        """Changes an earlier run sent (after a restart), ahead of this run's own."""
        for job_id, times in earlier.items():
            known = self.sent.setdefault(job_id, [])
            known[:0] = [t for t in times if t not in known]

    def may_change(self, now: float, alive: Collection[str],
                   urgent: Collection[str] = frozenset()) -> Callable[[str], bool]:
        """Forget the jobs not ``alive`` and the changes older than an hour; then whether each
        job is under its hourly number (``urgent`` jobs: under the whole of it)."""
        since = now - HOUR_S
        self.sent = {job: kept for job, times in self.sent.items()
                     if job in alive and (kept := [t for t in times if t > since])}
        limit = self.limit
        if limit is None:
            return lambda _job: True
        reordering = limit - 1 if limit >= 2 else limit
        return lambda job: len(self.sent.get(job, ())) < (
            limit if job in urgent else reordering)


class HeldPriorities:
    """The priorities of ours Slurm holds for each job after the daemon's decisions, each
    decision planned as the live actuator plans it (``slurm_rl.slurm.plan.promoted_order``:
    the promoted jobs above the others holding a value; :func:`plan_priorities` within
    ``limits``; the hourly count in a :class:`PriorityBudget`): the simulator's Slurm
    emulation orders its queue by these."""

    def __init__(self, limits: PriorityLimits, floor: int = 1000) -> None:
        self.limits, self.floor = limits, floor
        self._values: dict[str, int] = {}
        self.budget = PriorityBudget(limits.updates_per_job_hour)

    @property
    def values(self) -> Mapping[str, int]:
        return self._values

    def apply(self, promoted: Sequence[str], now: float, alive: Collection[str],
              urgent: Collection[str] = frozenset()) -> PriorityPlan:
        """Plan the ``promoted`` jobs (highest first) above the other values held, and hold
        the result for the promoted ones; the others keep theirs."""
        values = {job: v for job, v in self._values.items() if job in alive}
        may_change = self.budget.may_change(now, alive, urgent)
        order = above_the_held(promoted, values)
        planned = plan_priorities(order, values, self.floor, self.limits, may_change,
                                  fixed=order[len(promoted):], exempt=frozenset(urgent))
        for job in promoted:
            value = planned.wanted.get(job)
            if value is not None and values.get(job) != value:
                values[job] = value
                self.budget.note(job, now)
        self._values = values
        return planned
