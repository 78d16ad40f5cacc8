"""The :class:`Trace` type, its clock, and selecting a time window of it.

Clock: a trace's times are seconds on the trace's own clock. Traces that record naive local
wall-clock times (Philly: US Pacific; Helios: UTC+8) are read *as if they were UTC*, so that
``datetime.fromtimestamp(t, UTC)`` shows the cluster's local hour and weekday — what matters for
arrival patterns — and so that calendar windows such as "2017-12" mean the cluster's December.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from slurm_rl.core import FrozenDict, Job
from slurm_rl.errors import InputError

TimePoint = float | int | datetime

_EPOCH = datetime(1970, 1, 1)
_DAY = 86400.0

# Plausibility bounds on trace values, the one place they are set. A value beyond them is a
# typo or corrupt data (a duration of 1e15 s, the year 9999), and it is not harmless: the
# replay steps through the time it spans, so one such row hangs the simulator. They are
# generous: the real traces lie in 1993-2020, and their longest job ran 146 days.
EARLIEST_WALL_CLOCK = datetime(1970, 1, 1)
LATEST_WALL_CLOCK = datetime(2100, 1, 1)
# Times given as numbers may count from the trace's start rather than from 1970, so they may be
# negative; either way no trace spans more than the 130 years from 1970 to 2100.
MAX_CLOCK_SECONDS = (LATEST_WALL_CLOCK - _EPOCH).total_seconds()
MAX_DURATION_SECONDS = 10 * 365 * _DAY  # 10 years; Slurm sites cap jobs at days or weeks
# The largest GPU clusters built hold some 100,000 GPUs; a job of more than ten times that is
# corrupt data. Unbounded, a count of 1e30 (or past int64) reached the replay, which overflowed
# or ran out of memory laying the job out over nodes. Node counts and GPUs per node are bounded
# by it too: a job has no more nodes, and no more GPUs on one node, than GPUs.
MAX_JOB_GPUS = 1_000_000
# Real UTC offsets lie between -12 h and +14 h; a shift of more than a day is not a time zone.
MAX_UTC_OFFSET_SECONDS = _DAY

PHILLY_MONTHS: tuple[str, ...] = ("2017-09", "2017-10", "2017-11", "2017-12")
# Train and tune on September-November; December is held out for evaluation (docs/training.md,
# "Data: what is used for what").
PHILLY_TRAIN_MONTHS: tuple[str, ...] = ("2017-09", "2017-10", "2017-11")
PHILLY_HELDOUT_MONTH = "2017-12"


@dataclass(frozen=True)
class Trace:
    """A job trace: jobs sorted by (submit_time, job_id), on one clock.

    ``reference_gpu`` is the GPU type on which the jobs' ``oracle_duration`` was measured (or is
    taken to have been); ``skipped`` counts the rows left out, by reason.
    """

    name: str
    jobs: tuple[Job, ...]
    reference_gpu: str
    source: str
    synthetic: bool = False
    skipped: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "skipped", FrozenDict(self.skipped))
        keys = [(job.submit_time, job.job_id) for job in self.jobs]
        if any(later < earlier for earlier, later in zip(keys, keys[1:], strict=False)):
            raise ValueError(f"trace {self.name!r}: jobs are not sorted by (submit_time, job_id)")
        if len({job.job_id for job in self.jobs}) != len(self.jobs):
            raise ValueError(f"trace {self.name!r}: job ids are not unique")

    def __len__(self) -> int:
        return len(self.jobs)

    @property
    def total_skipped(self) -> int:
        return sum(self.skipped.values())


def sorted_jobs(jobs: list[Job]) -> tuple[Job, ...]:
    return tuple(sorted(jobs, key=lambda job: (job.submit_time, job.job_id)))


def naive_to_clock(moment: datetime) -> float:
    """Seconds on the trace clock: a naive datetime is read as UTC, an aware one converted."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return (moment - _EPOCH).total_seconds()


def clock_to_datetime(seconds: float) -> datetime:
    """The naive datetime (the cluster's local wall clock) for a trace-clock time."""
    return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)


def in_clock_range(seconds: float) -> bool:
    """True for a finite trace-clock time at most :data:`MAX_CLOCK_SECONDS` from 0."""
    return math.isfinite(seconds) and abs(seconds) <= MAX_CLOCK_SECONDS


def to_clock(point: TimePoint) -> float:
    if isinstance(point, datetime):
        return naive_to_clock(point)
    return float(point)


def window(trace: Trace, start: TimePoint, end: TimePoint) -> Trace:
    """The jobs of ``trace`` submitted in ``[start, end)`` (datetimes or trace-clock seconds)."""
    low, high = to_clock(start), to_clock(end)
    _check_bounds(low, high, f"{low:g}:{high:g}")
    if high < low:
        raise ValueError(f"window ends ({high}) before it starts ({low})")
    submits = [job.submit_time for job in trace.jobs]
    first, stop = bisect.bisect_left(submits, low), bisect.bisect_left(submits, high)
    label = f"{clock_to_datetime(low).isoformat()}..{clock_to_datetime(high).isoformat()}"
    return replace(trace, name=f"{trace.name}[{label}]", jobs=trace.jobs[first:stop])


def month_window(month: str) -> tuple[float, float]:
    """``"YYYY-MM"`` -> the trace-clock seconds of that month's first instant and the next's."""
    try:
        first = datetime.strptime(month, "%Y-%m")
    except ValueError:
        raise InputError(f"not a month (YYYY-MM): {month!r}") from None
    if not EARLIEST_WALL_CLOCK.year <= first.year < LATEST_WALL_CLOCK.year:
        raise InputError(f"month out of range (1970-01 .. 2099-12): {month!r}")
    following = first.replace(year=first.year + first.month // 12, month=first.month % 12 + 1)
    return naive_to_clock(first), naive_to_clock(following)


def philly_month_windows() -> dict[str, tuple[float, float]]:
    """The four Philly months, "2017-09" ... "2017-12", as [start, end) trace-clock seconds."""
    return {month: month_window(month) for month in PHILLY_MONTHS}


def philly_train_window() -> tuple[float, float]:
    """September 1 to December 1, 2017: the window to train and tune on."""
    return month_window(PHILLY_TRAIN_MONTHS[0])[0], month_window(PHILLY_HELDOUT_MONTH)[0]


def philly_heldout_window() -> tuple[float, float]:
    """December 2017: the held-out evaluation window."""
    return month_window(PHILLY_HELDOUT_MONTH)


def parse_time_point(text: str) -> float:
    """Trace-clock seconds from epoch seconds or an ISO 8601 date/datetime."""
    seconds = _time_point(text)
    if seconds is None:
        raise InputError(f"not a time (ISO 8601 or epoch seconds): {text.strip()!r}")
    return seconds


def _time_point(text: str) -> float | None:
    """Like :func:`parse_time_point`; None for text that is not a time (infinite: too far)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return naive_to_clock(datetime.fromisoformat(text))
    except ValueError:
        return None
    except OverflowError:  # an aware time of year 1 or 9999 that UTC cannot hold
        return math.inf


def parse_window(spec: str) -> tuple[float, float]:
    """``"START:END"`` or ``"START..END"`` (ISO 8601 or epoch seconds), or a month ``"YYYY-MM"``.

    ISO datetimes contain colons themselves, so the first split at which both halves parse wins.
    """
    spec = spec.strip()
    if ".." in spec:
        start_text, _, end_text = spec.partition("..")
        return _checked_window(parse_time_point(start_text), parse_time_point(end_text), spec)
    for index, char in enumerate(spec):
        if char == ":":
            bounds = _try_window(spec[:index], spec[index + 1 :])
            if bounds is not None:
                return _checked_window(*bounds, spec)
    if len(spec) == 7:
        return month_window(spec)
    raise InputError(f"not a time window (START:END or YYYY-MM): {spec!r}")


def _try_window(start_text: str, end_text: str) -> tuple[float, float] | None:
    start, end = _time_point(start_text), _time_point(end_text)
    return None if start is None or end is None else (start, end)


def _checked_window(start: float, end: float, spec: str) -> tuple[float, float]:
    _check_bounds(start, end, spec)
    if end < start:
        raise InputError(f"time window ends before it starts: {spec!r}")
    return start, end


def _check_bounds(start: float, end: float, spec: str) -> None:
    """Both ends on the trace clock: nan or 1e20 s would crash or hang whatever uses them."""
    if not (in_clock_range(start) and in_clock_range(end)):
        limit = f"{MAX_CLOCK_SECONDS:.0f}"
        message = f"time window bound is not a finite time within ±{limit} s (before 2100)"
        raise InputError(f"{message}: {spec!r}")
