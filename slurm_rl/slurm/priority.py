"""Slurm priorities that reproduce a ranking while changing as few jobs as possible.

Every ``scontrol update`` costs an RPC (~6 ms), and a stable queue should cost none. Walking
the ranking from the bottom, a job keeps the priority it has when that is already above the
job ranked below it (and at least ``floor``, i.e. one we set); otherwise it gets one more
than that job. Values only grow, so they are renumbered from ``floor`` when they near the
top of Slurm's 32-bit range.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# Slurm priorities are uint32 and 0xFFFFFFFE/0xFFFFFFFF are sentinels; stay well below.
PRIORITY_CEILING = 2**31


def assign_priorities(
    ranking: Sequence[str],
    current: Mapping[str, int | None],
    floor: int,
    ceiling: int = PRIORITY_CEILING,
) -> dict[str, int]:
    """Strictly decreasing priorities along ``ranking`` (first = highest), all >= ``floor``."""
    wanted: dict[str, int] = {}
    below = floor - 1
    for job_id in reversed(ranking):
        have = current.get(job_id)
        keep = have is not None and below < have < ceiling and have >= floor
        value = have if keep and have is not None else below + 1
        wanted[job_id] = value
        below = value
    if below >= ceiling:
        return renumber(ranking, floor)
    return wanted


def renumber(ranking: Sequence[str], floor: int) -> dict[str, int]:
    size = len(ranking)
    return {job_id: floor + size - 1 - i for i, job_id in enumerate(ranking)}
