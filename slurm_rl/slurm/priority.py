"""Slurm priorities that reproduce a ranking while changing as few jobs as possible.

Every ``scontrol update`` costs an RPC (~6 ms), and a stable queue should cost none. Walking
the ranking from the bottom, a job keeps the priority it has when that is already above the
job ranked below it (and at least ``floor``, i.e. one we set); otherwise it gets one more
than that job. Values only grow, so they are renumbered from ``floor`` when they near the
top of Slurm's 32-bit range.

A policy whose ranking moves a little every cycle (a learned one scores waiting time) would
still send a stream of updates, so :func:`plan_priorities` holds some changes back
(:class:`PriorityLimits`):

* **tolerance**: a job that already holds a priority of ours keeps it while its place in
  the order Slurm holds is at most ``tolerance_ranks`` places from its rank;
* **rate**: a job the caller says may not change (it had ``updates_per_job_hour`` changes in
  the last hour) keeps its priority;
* **cap**: at most ``per_cycle`` jobs change in one call, the highest-ranked first.

A job held back is left out of the walk: the jobs around it are ordered among themselves,
and the held job sits where its old value puts it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

# Slurm priorities are uint32 and 0xFFFFFFFE/0xFFFFFFFF are sentinels; stay well below.
PRIORITY_CEILING = 2**31
TOLERANCE, RATE, CAP = "tolerance", "rate", "cap"


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
    return renumber(ranking, floor) if top >= ceiling else wanted


def plan_priorities(
    ranking: Sequence[str],
    current: Mapping[str, int | None],
    floor: int,
    limits: PriorityLimits,
    may_change: Callable[[str], bool] = lambda _job: True,
    ceiling: int = PRIORITY_CEILING,
) -> PriorityPlan:
    """The priorities to hold, with ``limits`` applied (module docstring)."""
    wanted, top = _walk(ranking, current, floor, ceiling, frozenset())
    if top >= ceiling:  # renumbering is rare and must be whole: no limit applies
        return PriorityPlan(renumber(ranking, floor))
    withheld = {job: RATE for job in _changes(ranking, wanted, current) if not may_change(job)}
    withheld.update({job: TOLERANCE for job in _tolerated(ranking, current, wanted, floor,
                                                          ceiling, limits.tolerance_ranks)
                     if job not in withheld})
    for _ in range(len(ranking) + 1):  # each pass only holds more jobs back
        wanted, _top = _walk(ranking, current, floor, ceiling, frozenset(withheld))
        changes = _changes(ranking, wanted, current)
        if limits.per_cycle is None or len(changes) <= limits.per_cycle:
            break
        withheld.update({job: CAP for job in changes[limits.per_cycle:]})
    kept = {job: value for job, value in wanted.items() if job not in withheld}
    return PriorityPlan(kept, withheld)


def _is_ours(value: int | None, floor: int, ceiling: int) -> bool:
    return value is not None and floor <= value < ceiling


def _walk(
    ranking: Sequence[str],
    current: Mapping[str, int | None],
    floor: int,
    ceiling: int,
    held: Collection[str],
) -> tuple[dict[str, int], int]:
    """From the bottom of ``ranking``, each job not ``held`` keeps its priority when it is
    above the job below it, else gets one more; returns the values and the highest one."""
    wanted: dict[str, int] = {}
    below = floor - 1
    for job_id in reversed(ranking):
        if job_id in held:
            continue
        have = current.get(job_id)
        keep = have is not None and have > below and _is_ours(have, floor, ceiling)
        value = have if keep and have is not None else below + 1
        wanted[job_id] = value
        below = value
    return wanted, below


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


def renumber(ranking: Sequence[str], floor: int) -> dict[str, int]:
    size = len(ranking)
    return {job_id: floor + size - 1 - i for i, job_id in enumerate(ranking)}
