"""The Standard Workload Format (SWF v2.2) of the Parallel Workloads Archive.

``;`` header comments (``UnixStartTime``, ``TimeZoneString``, ...), then 18 whitespace-separated
numeric fields per job, -1 meaning unknown: 1 job number, 2 submit time (s after
UnixStartTime), 3 wait, 4 run time, 5 allocated processors, 6 CPU time, 7 memory,
8 requested processors, 9 requested time, 10 requested memory, 11 status, 12 user, 13 group,
14 executable, 15 queue, 16 partition, 17 preceding job, 18 think time.

SWF logs come from CPU machines; we replay each processor as one GPU (allocated processors,
else requested ones) and the run time as the duration on the reference GPU. Field 9 becomes the
time limit when it is positive, otherwise the limit is modelled. Submit times are converted to
the log's local wall clock (``TimeZoneString``, else the fixed ``TimeZone`` shift), read as UTC
like every trace clock here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from slurm_rl.core import Job
from slurm_rl.errors import InputError
from slurm_rl.traces._rows import (
    Comment,
    NumberedLines,
    RowError,
    TraceBuilder,
    bounded_duration,
    bounded_gpus,
    bounded_seconds,
    check_width,
    content_lines,
    parse_count,
    parse_duration,
    parse_number,
    trace_name,
)
from slurm_rl.traces.families import trace_job
from slurm_rl.traces.model import MAX_CLOCK_SECONDS, MAX_UTC_OFFSET_SECONDS, Trace

# SWF logs are CPU logs: there is no measured GPU. We take Philly's reference so that an SWF
# log replays on the same speed scale as the Philly trace; docs/traces.md says it is arbitrary.
SWF_REFERENCE_GPU = "V100"
SWF_SOURCE = "Parallel Workloads Archive (D. Feitelson), SWF log"
SWF_FIELDS = (
    "job_number",
    "submit_time",
    "wait_time",
    "run_time",
    "allocated_processors",
    "average_cpu_time",
    "used_memory",
    "requested_processors",
    "requested_time",
    "requested_memory",
    "status",
    "user_id",
    "group_id",
    "executable_id",
    "queue",
    "partition",
    "preceding_job",
    "think_time",
)
_FIELD = {name: index for index, name in enumerate(SWF_FIELDS)}
# UnixStartTime is a wall-clock time: from 1970 to 2100, the range every trace clock lies in.
_START_RANGE = (0.0, MAX_CLOCK_SECONDS)
_SHIFT_RANGE = (-MAX_UTC_OFFSET_SECONDS, MAX_UTC_OFFSET_SECONDS)

Clock = Callable[[float], float]


def read_swf(path: str | Path, *, skip_bad_rows: bool = False) -> Trace:
    lines = NumberedLines(path)
    comments: list[Comment] = []
    builder = TraceBuilder(lines.path, skip_bad_rows)
    with closing(_numbered_rows(lines, comments)) as rows:
        first = next(rows, None)  # reading the first row has read the whole ';' header
        header = _header_fields(comments)
        _collect(_chain(first, rows), _local_clock(header, lines.path), builder)
    return builder.finish(trace_name(lines.path), SWF_REFERENCE_GPU, _source(header, lines.path))


def _numbered_rows(
    lines: NumberedLines, comments: list[Comment]
) -> Generator[tuple[int, list[str]], None, None]:
    for text in content_lines(lines, comments, ";"):
        yield lines.line, text.split()


def _collect(rows: Iterator[tuple[int, list[str]]], clock: Clock, builder: TraceBuilder) -> None:
    for line, fields in rows:
        try:
            job = _swf_job(fields, clock)
        except RowError as error:
            builder.bad_row(error, line)
        else:
            builder.add(job, line)


def _chain(
    first: tuple[int, list[str]] | None, rest: Iterator[tuple[int, list[str]]]
) -> Iterator[tuple[int, list[str]]]:
    if first is not None:
        yield first
        yield from rest


def _header_fields(comments: list[Comment]) -> dict[str, Comment]:
    """``Key: value`` pairs of the ``;`` header (the first occurrence of each key)."""
    header: dict[str, Comment] = {}
    for comment in comments:
        key, colon, value = comment.text.partition(":")
        if colon and key.strip() and " " not in key.strip():
            header.setdefault(key.strip(), Comment(comment.line, value.strip()))
    return header


def _source(header: dict[str, Comment], path: Path) -> str:
    machine = ", ".join(header[key].text for key in ("Computer", "Installation") if key in header)
    described = f"{SWF_SOURCE} ({machine})" if machine else SWF_SOURCE
    return f"{described}; read from {path}"


def _local_clock(header: dict[str, Comment], path: Path) -> Clock:
    """Maps submit offsets to the local wall clock (read as UTC) of the log's machine."""
    start = _header_number(header, "UnixStartTime", path, _START_RANGE)
    zone = _zone(header, path)
    if zone is not None:
        return lambda offset: _in_zone(start + offset, zone)
    shift = _header_number(header, "TimeZone", path, _SHIFT_RANGE)
    return lambda offset: start + shift + offset


def _header_number(
    header: dict[str, Comment], key: str, path: Path, bounds: tuple[float, float]
) -> float:
    """The header's number ``key`` (0 when absent or empty), within ``bounds``."""
    entry = header.get(key)
    if entry is None or not entry.text:
        return 0.0
    value = _finite(entry.text)
    if value is None:
        message = f"SWF header field {key} is not a number: {entry.text!r}"
        raise InputError(message, path=path, line=entry.line)
    if not bounds[0] <= value <= bounds[1]:
        span = f"{bounds[0]:.0f} .. {bounds[1]:.0f}"
        message = f"SWF header field {key} is out of range: {entry.text} (not in {span})"
        raise InputError(message, path=path, line=entry.line)
    return value


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _zone(header: dict[str, Comment], path: Path) -> ZoneInfo | None:
    """The ``TimeZoneString`` zone; None when there is none (the ``TimeZone`` shift is used)."""
    entry = header.get("TimeZoneString")
    if entry is None or not entry.text:
        return None
    try:
        return ZoneInfo(entry.text)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # Falling back to the fixed TimeZone shift would be wrong by the summer-time hour.
        message = f"SWF header field TimeZoneString is not a known time zone: {entry.text!r}"
        raise InputError(message, path=path, line=entry.line) from None


def _in_zone(unix_time: float, zone: ZoneInfo) -> float:
    offset = datetime.fromtimestamp(unix_time, UTC).astimezone(zone).utcoffset()
    return unix_time + (offset.total_seconds() if offset is not None else 0.0)


def _swf_job(fields: list[str], clock: Clock) -> Job:
    check_width(fields, SWF_FIELDS)
    job_number = parse_count(fields[_FIELD["job_number"]], "job_number", "job number")
    return trace_job(
        job_id=f"swf-{job_number}",
        submit_time=_submit_time(fields[_FIELD["submit_time"]], clock),
        num_gpus=_processors(fields),
        duration=_run_time(fields[_FIELD["run_time"]]),
        user=_known_id(fields[_FIELD["user_id"]], "user_id", "u"),
        partition=_known_id(fields[_FIELD["partition"]], "partition", ""),
        time_limit=_requested_time(fields[_FIELD["requested_time"]]),
    )


def _submit_time(text: str, clock: Clock) -> float:
    """The local wall-clock time of a submit offset, within the trace clock's range too."""
    return bounded_seconds(clock(_submit_offset(text)), text, "submit_time")


def _submit_offset(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also nan
        message = f"unparsable timestamp {text!r} (expected seconds >= 0)"
        raise RowError("unparsable timestamp", message, "submit_time")
    return bounded_seconds(value, text, "submit_time")


def _run_time(text: str) -> float:
    if text.strip() == "-1":
        raise RowError("unknown duration", "run time is unknown (-1)", "run_time")
    return parse_duration(text, "run_time")


def _processors(fields: list[str]) -> int:
    column = "allocated_processors"
    text = fields[_FIELD[column]]
    count = parse_count(text, column, "GPU count")
    if count == -1:
        column = "requested_processors"
        text = fields[_FIELD[column]]
        count = parse_count(text, column, "GPU count")
    if count == -1:
        raise RowError("unknown GPU count", "processor count is unknown (-1)", column)
    if count <= 0:
        raise RowError("GPU count <= 0", f"processor count must be at least 1, got {count}", column)
    return bounded_gpus(count, text, column)


def _requested_time(text: str) -> float | None:
    value = parse_number(text, "requested_time", "requested time")
    return bounded_duration(value, "requested_time", "requested time") if value > 0 else None


def _known_id(text: str, column: str, prefix: str) -> str:
    value = parse_count(text, column, column.replace("_", " "))
    return f"{prefix}{value}" if value >= 0 else ""
