"""``load_trace``: one entry point for every trace format, told apart by the header."""

from __future__ import annotations

import csv
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from slurm_rl.errors import InputError, UnknownNameError
from slurm_rl.traces._rows import NumberedLines
from slurm_rl.traces.helios import (
    HELIOS_COLUMNS,
    VENUS_SLICE_COLUMNS,
    read_helios,
    read_venus_slice,
)
from slurm_rl.traces.model import Trace
from slurm_rl.traces.pai import PAI_COLUMNS, read_pai2023
from slurm_rl.traces.philly import PHILLY_COLUMNS, read_philly
from slurm_rl.traces.schema_csv import REQUIRED_COLUMNS, read_schema_csv
from slurm_rl.traces.swf import SWF_FIELDS, read_swf

Reader = Callable[..., Trace]

READERS: dict[str, Reader] = {
    "philly": read_philly,
    "helios": read_helios,
    "helios-venus-slice": read_venus_slice,
    "pai2023": read_pai2023,
    "swf": read_swf,
    "csv": read_schema_csv,
}
FORMATS: tuple[str, ...] = tuple(READERS)

# Checked in order: the first format whose columns are all in the header wins. The Venus slice
# comes before Helios and our schema because its header also has job_id and submit_time.
_SIGNATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("philly", PHILLY_COLUMNS),
    ("helios-venus-slice", VENUS_SLICE_COLUMNS),
    ("helios", HELIOS_COLUMNS),
    ("pai2023", PAI_COLUMNS),
    ("csv", REQUIRED_COLUMNS),
)
# A header sharing at least this fraction of a format's columns is taken to be that format.
_MIN_SHARE_TO_GUESS = 0.5


def load_trace(path: str | Path, fmt: str | None = None, *, skip_bad_rows: bool = False) -> Trace:
    """Read a trace file (gzip or plain) of format ``fmt``, or of the format its header shows.

    Bad input raises :class:`InputError` naming file, line and column; with ``skip_bad_rows``
    bad rows are counted in ``Trace.skipped`` instead.
    """
    if fmt is None:
        fmt = detect_format(path)
    reader = READERS.get(fmt)
    if reader is None:
        raise UnknownNameError("trace format", fmt, FORMATS)
    return reader(path, skip_bad_rows=skip_bad_rows)


def detect_format(path: str | Path) -> str:
    """The format whose header the file starts with (``;`` comments mean SWF)."""
    lines = NumberedLines(path)
    with closing(lines.texts()) as texts:
        for text in texts:
            if not text.strip() or text.startswith("#"):
                continue
            fmt = _format_of(text)
            if fmt is None:
                break
            return fmt
    if lines.line == 0:
        raise InputError("the file is empty (no header line)", path=lines.path, line=1)
    message = f"cannot tell the trace format from this line; pass a format: {', '.join(FORMATS)}"
    raise InputError(message, path=lines.path, line=lines.line)


def _format_of(first_line: str) -> str | None:
    """The format whose columns the header has; failing that, the one it shares most with.

    The second choice lets a header with a misspelt or missing column be read by its reader,
    which then names the missing column instead of failing to recognise the file.
    """
    if first_line.startswith(";") or _looks_like_swf_row(first_line):
        return "swf"
    try:
        names = next(csv.reader([first_line]))
    except csv.Error:  # a stray carriage return: the reader names the malformed line
        names = first_line.split(",")
    header = {name.strip().lstrip("\ufeff") for name in names}
    shares = [
        (len(header.intersection(columns)) / len(columns), fmt) for fmt, columns in _SIGNATURES
    ]
    best_share = max(share for share, _ in shares)
    if best_share < _MIN_SHARE_TO_GUESS:
        return None
    return next(fmt for share, fmt in shares if share == best_share)


def _looks_like_swf_row(text: str) -> bool:
    fields = text.split()
    if len(fields) != len(SWF_FIELDS):
        return False
    try:
        [float(field) for field in fields]
    except ValueError:
        return False
    return True
