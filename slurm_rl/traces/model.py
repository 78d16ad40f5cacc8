"""The :class:`Trace` type, its clock, and selecting a time window of it.

Clock: a trace's times are seconds on the trace's own clock. Traces that record naive local
wall-clock times (Philly: US Pacific; Helios: UTC+8) are read *as if they were UTC*, so that
``datetime.fromtimestamp(t, UTC)`` shows the cluster's local hour and weekday — what matters for
arrival patterns — and so that calendar windows such as "2017-12" mean the cluster's December.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from slurm_rl.core import FrozenDict, Job
from slurm_rl.errors import InputError

TimePoint = float | int | datetime

_EPOCH = datetime(1970, 1, 1)

PHILLY_MONTHS: tuple[str, ...] = ("2017-09", "2017-10", "2017-11", "2017-12")
# Train and tune on September-November; December is held out for evaluation (DESIGN.md).
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


def to_clock(point: TimePoint) -> float:
    if isinstance(point, datetime):
        return naive_to_clock(point)
    return float(point)


def window(trace: Trace, start: TimePoint, end: TimePoint) -> Trace:
    """The jobs of ``trace`` submitted in ``[start, end)`` (datetimes or trace-clock seconds)."""
    low, high = to_clock(start), to_clock(end)
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
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return naive_to_clock(datetime.fromisoformat(text))
    except ValueError:
        raise InputError(f"not a time (ISO 8601 or epoch seconds): {text!r}") from None


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
    try:
        return parse_time_point(start_text), parse_time_point(end_text)
    except InputError:
        return None


def _checked_window(start: float, end: float, spec: str) -> tuple[float, float]:
    if end < start:
        raise InputError(f"time window ends before it starts: {spec!r}")
    return start, end
