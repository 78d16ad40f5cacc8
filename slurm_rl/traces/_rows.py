"""Reading trace files row by row, with every problem reported as one ``file:line`` message.

Files are read as UTF-8, gzip-compressed or plain (told apart by the gzip magic bytes, not by
the name). Blank lines are not rows. Field parsers raise :class:`RowError`; a
:class:`TraceBuilder` turns it into an :class:`InputError` naming file, line and column, or —
with ``skip_bad_rows`` — counts the row as skipped under the error's reason.
"""

from __future__ import annotations

import csv
import gzip
import math
import zlib
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, NamedTuple, cast

from slurm_rl.core import Job
from slurm_rl.errors import InputError
from slurm_rl.input_files import open_regular
from slurm_rl.traces.families import KNOWN_GPU_TYPES, canonical_gpu_type
from slurm_rl.traces.model import (
    EARLIEST_WALL_CLOCK,
    LATEST_WALL_CLOCK,
    MAX_CLOCK_SECONDS,
    MAX_DURATION_SECONDS,
    MAX_JOB_GPUS,
    Trace,
    in_clock_range,
    naive_to_clock,
    sorted_jobs,
)

_GZIP_MAGIC = b"\x1f\x8b"
_WALL_CLOCK_RANGE = (naive_to_clock(EARLIEST_WALL_CLOCK), naive_to_clock(LATEST_WALL_CLOCK))
_WALL_CLOCK_SPAN = f"{EARLIEST_WALL_CLOCK:%Y-%m-%d} .. {LATEST_WALL_CLOCK:%Y-%m-%d}"
# What csv's strict mode says when the file ends inside a quoted field.
_CSV_END_IN_QUOTES = "unexpected end of data"


class RowError(Exception):
    """One bad field: ``reason`` is the short key it is counted under when rows are skipped."""

    def __init__(self, reason: str, message: str, column: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.column = column


class Comment(NamedTuple):
    """A comment line's text (without its mark) and its line number, to name it in errors."""

    line: int
    text: str


class SkipRow(Exception):
    """A row that is valid but is not a GPU job to replay (e.g. a CPU-only pod)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _open_binary(path: Path) -> BinaryIO:
    """The file's bytes, uncompressed when it starts with the gzip magic bytes.

    Closing the result closes the file too (a GzipFile given a file object does not).
    """
    handle = open_regular(path, "trace file")
    try:
        compressed = handle.read(2) == _GZIP_MAGIC
        handle.seek(0)
    except OSError as error:
        handle.close()
        raise InputError(f"cannot read: {error.strerror or error}", path=path) from None
    if not compressed:
        return handle
    return cast(BinaryIO, _OwningGzipFile(handle))  # GzipFile reads bytes like any BinaryIO


class _OwningGzipFile(gzip.GzipFile):
    """A GzipFile that closes the file it reads from when it is closed."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


class NumberedLines:
    """The text lines of a trace file; ``line`` is the number of the line last read (1-based)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.line = 0

    def __iter__(self) -> Iterator[str]:
        return self.texts()

    def texts(self) -> Generator[str, None, None]:
        with _open_binary(self.path) as handle:
            yield from self._decoded(handle)

    def _decoded(self, handle: BinaryIO) -> Iterator[str]:
        try:
            for raw in handle:
                self.line += 1
                yield self._decode(raw)
        except EOFError:
            raise self.error("the compressed data ends early (truncated gzip file)") from None
        except (gzip.BadGzipFile, zlib.error) as error:
            raise self.error(f"corrupt gzip data ({error})") from None

    def _decode(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise self.error(f"not UTF-8 text (byte {error.start + 1})", line=self.line) from None

    def error(self, message: str, line: int | None = None) -> InputError:
        return InputError(message, path=self.path, line=line if line else self.line + 1)


def content_lines(
    lines: NumberedLines, comments: list[Comment], comment_mark: str
) -> Generator[str, None, None]:
    """The lines that are neither blank nor comments; comments are appended to ``comments``."""
    for text in lines:
        if text.startswith(comment_mark):
            comments.append(Comment(lines.line, text[len(comment_mark) :].strip()))
        elif text and not text.isspace():
            yield text


class CsvTable:
    """A CSV trace file: ``#`` comment lines, a header line, then rows.

    Use it in a ``with`` block: leaving it closes the file even when a row was bad.
    """

    def __init__(self, path: str | Path) -> None:
        self.lines = NumberedLines(path)
        self.path = self.lines.path
        self.comments: list[Comment] = []
        self._record_start = 0
        self._source = self._record_lines()
        # strict: a file that ends inside a quoted field is an error, not a short last row
        self._reader = csv.reader(self._source, strict=True)
        try:
            self.header = self._read_header()
        except InputError:
            self.close()
            raise
        self.header_line = self.lines.line

    def __enter__(self) -> CsvTable:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._source.close()

    def _read_header(self) -> list[str]:
        header = self._next_row()
        if header is None:
            raise InputError("the file is empty (no header line)", path=self.path, line=1)
        names = [name.strip().lstrip("\ufeff") for name in header]
        for name in names:
            if names.count(name) > 1:
                message = f"column {name!r} appears more than once in the header"
                raise InputError(message, path=self.path, line=self.lines.line, column=name)
        return names

    def _record_lines(self) -> Generator[str, None, None]:
        """The content lines, noting the line on which each CSV record starts."""
        with closing(content_lines(self.lines, self.comments, "#")) as source:
            for text in source:
                if not self._record_start:
                    self._record_start = self.lines.line
                yield text

    def _next_row(self) -> list[str] | None:
        self._record_start = 0
        lines_before = self._reader.line_num
        try:
            row = next(self._reader)
        except StopIteration:
            return None
        except csv.Error as error:
            raise self._malformed(error, lines_before) from None
        if self._spans_lines(lines_before):
            raise self._unterminated_quote()
        return row

    def _spans_lines(self, lines_before: int) -> bool:
        # csv reads on past a line end inside quotes: the lines up to the next quote would
        # become one field and their rows would be lost, so a record must be one line.
        return self._reader.line_num > lines_before + 1

    def _malformed(self, error: csv.Error, lines_before: int) -> InputError:
        if self._spans_lines(lines_before) or str(error) == _CSV_END_IN_QUOTES:
            return self._unterminated_quote()
        return InputError(f"malformed CSV ({error})", path=self.path, line=self.lines.line)

    def _unterminated_quote(self) -> InputError:
        message = "unterminated quote: a quoted field runs past the end of its line"
        return InputError(message, path=self.path, line=self._record_start)

    def require(self, names: Iterable[str]) -> dict[str, int]:
        """The index of each named column; a missing one is an error on the header line."""
        return {name: self.column(name, required=True) for name in names}

    def column(self, name: str, *, required: bool = False) -> int:
        """The index of column ``name``, or -1 when the file has no such (optional) column."""
        if name in self.header:
            return self.header.index(name)
        if not required:
            return -1
        raise InputError(
            f"missing column {name!r} (the header has: {', '.join(self.header)})",
            path=self.path,
            line=self.header_line,
            column=name,
        )

    def rows(self) -> Iterator[tuple[int, list[str]]]:
        """(line number, fields) for each row after the header."""
        while (fields := self._next_row()) is not None:
            yield self.lines.line, fields


class TraceBuilder:
    """Collects the jobs of one file and the rows skipped, by reason."""

    def __init__(self, path: Path, skip_bad_rows: bool) -> None:
        self.path = path
        self.skip_bad_rows = skip_bad_rows
        self.jobs: list[Job] = []
        self.skipped: Counter[str] = Counter()
        self._line_of: dict[str, int] = {}

    def add(self, job: Job, line: int) -> None:
        first = self._line_of.setdefault(job.job_id, line)
        if first != line:
            message = f"duplicate job id {job.job_id!r} (first on line {first})"
            self.bad_row(RowError("duplicate job id", message, "job_id"), line)
            return
        self.jobs.append(job)

    def bad_row(self, error: RowError, line: int) -> None:
        if not self.skip_bad_rows:
            raise InputError(error.message, path=self.path, line=line, column=error.column)
        self.skipped[error.reason] += 1

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    def finish(self, name: str, reference_gpu: str, source: str) -> Trace:
        if not self.jobs:
            raise InputError(self._why_empty(), path=self.path)
        jobs = sorted_jobs(self.jobs)
        return Trace(name, jobs, reference_gpu, source, skipped=dict(self.skipped))

    def _why_empty(self) -> str:
        if not self.skipped:
            return "the trace has no jobs (no rows after the header)"
        reasons = ", ".join(f"{reason}: {count}" for reason, count in sorted(self.skipped.items()))
        return f"the trace has no jobs: all {self.skipped.total()} rows were skipped ({reasons})"


JobMaker = Callable[[list[str], int], Job]
"""Makes the job of one row from its fields and line number; raises RowError or SkipRow."""


def collect_rows(table: CsvTable, make_job: JobMaker, skip_bad_rows: bool) -> TraceBuilder:
    """Every row of ``table`` as a job, a bad row or a skipped row."""
    builder = TraceBuilder(table.path, skip_bad_rows)
    width = len(table.header)
    for line, fields in table.rows():
        try:
            if len(fields) != width:
                check_width(fields, table.header)
            job = make_job(fields, line)
        except RowError as error:
            builder.bad_row(error, line)
        except SkipRow as skip:
            builder.skip(skip.reason)
        else:
            builder.add(job, line)
    return builder


def check_width(fields: Sequence[str], header: Sequence[str]) -> None:
    """A row must have as many fields as the header; a short last row is a truncated file."""
    if len(fields) < len(header):
        missing = header[len(fields)]
        message = f"row has {len(fields)} of {len(header)} fields (truncated row?)"
        raise RowError("missing fields", message, missing)
    if len(fields) > len(header):
        message = f"row has {len(fields)} fields but the header has {len(header)}"
        raise RowError("extra fields", message, None)


def parse_number(text: str, column: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise RowError(f"non-numeric {what}", f"{what} is not a number: {text!r}", column) from None
    if not math.isfinite(value):
        raise RowError(f"non-numeric {what}", f"{what} is not finite: {text!r}", column)
    return value


def parse_duration(text: str, column: str) -> float:
    value = parse_number(text, column, "duration")
    if value < 0:
        raise RowError("negative duration", f"negative duration: {text}", column)
    return bounded_duration(value, column)


def bounded_duration(seconds: float, column: str, what: str = "duration") -> float:
    """``seconds``, unless it is longer than any job runs (see MAX_DURATION_SECONDS)."""
    if seconds > MAX_DURATION_SECONDS:
        message = (
            f"{what} {seconds:g} s is longer than {MAX_DURATION_SECONDS:.0f} s (10 years), "
            "the most accepted"
        )
        raise RowError(f"{what} too long", message, column)
    return seconds


def parse_count(text: str, column: str, what: str) -> int:
    """A whole number such as ``8`` or ``8.0``."""
    try:
        return int(text)
    except ValueError:
        pass
    value = parse_number(text, column, what)
    if not value.is_integer():
        raise RowError(f"non-numeric {what}", f"{what} is not a whole number: {text!r}", column)
    return int(value)


def parse_gpu_count(text: str, column: str) -> int:
    """A GPU count of a GPU job: a whole number from 1 to :data:`MAX_JOB_GPUS`."""
    count = parse_count(text, column, "GPU count")
    if count <= 0:
        raise RowError("GPU count <= 0", f"GPU count must be at least 1, got {text}", column)
    return bounded_gpus(count, text, column)


def bounded_gpus(count: int, text: str, column: str) -> int:
    """``count`` (read from ``text``), unless more GPUs than any job asks for."""
    if count > MAX_JOB_GPUS:
        message = (
            f"GPU count {text.strip()} is more than {MAX_JOB_GPUS}, the most GPUs a job may "
            "ask for"
        )
        raise RowError("GPU count too large", message, column)
    return count


def parse_positive_count(text: str, column: str, what: str) -> int:
    count = parse_count(text, column, what)
    if count <= 0:
        raise RowError(f"{what} <= 0", f"{what} must be at least 1, got {text}", column)
    return count


def parse_clock_time(text: str, column: str) -> float:
    """A ``YYYY-MM-DD HH:MM:SS`` (ISO 8601) time: naive means the trace clock (read as UTC)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        message = f"unparsable timestamp {text!r} (expected YYYY-MM-DD HH:MM:SS)"
        raise RowError("unparsable timestamp", message, column) from None
    try:
        seconds = naive_to_clock(moment)
    except OverflowError:  # an aware time of year 1 or 9999 that UTC cannot hold
        seconds = math.inf
    if not _WALL_CLOCK_RANGE[0] <= seconds < _WALL_CLOCK_RANGE[1]:
        message = f"timestamp {text!r} is outside {_WALL_CLOCK_SPAN}, the times accepted"
        raise RowError("timestamp out of range", message, column)
    return seconds


def parse_seconds(text: str, column: str, per_second: float = 1.0) -> float:
    """A time given as a number of seconds (from the epoch or from the trace start).

    ``per_second`` reads other units: 1e6 for microseconds.
    """
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        message = f"unparsable timestamp {text!r} (expected a number of seconds)"
        raise RowError("unparsable timestamp", message, column)
    return bounded_seconds(value / per_second, text, column)


def bounded_seconds(seconds: float, text: str, column: str) -> float:
    """``seconds`` (read from ``text``), unless beyond any trace's clock (MAX_CLOCK_SECONDS)."""
    if not in_clock_range(seconds):
        message = (
            f"timestamp {text!r} is {seconds:g} s from its origin; at most "
            f"±{MAX_CLOCK_SECONDS:.0f} s (1970 to 2100) is accepted"
        )
        raise RowError("timestamp out of range", message, column)
    return seconds


def parse_time_or_epoch(text: str, column: str) -> float:
    """Epoch seconds, or an ISO 8601 time (naive = trace clock, with an offset = converted)."""
    try:
        float(text)
    except ValueError:
        return parse_clock_time(text, column)
    return parse_seconds(text, column)


def parse_gpu_type(text: str, column: str) -> str:
    name = canonical_gpu_type(text)
    if name is None:
        known = ", ".join(KNOWN_GPU_TYPES)
        raise RowError("unknown GPU type", f"unknown GPU type {text!r} (known: {known})", column)
    return name


def trace_name(path: Path) -> str:
    """The file name without ``.gz`` and a data extension: ``philly_pollux_jobs``."""
    name = path.name
    for suffix in (".gz", ".csv", ".swf", ".txt"):
        name = name.removesuffix(suffix)
    return name
