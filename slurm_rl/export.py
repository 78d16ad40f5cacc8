"""The store's audit trail since a time, one file per table, for
analysis (pandas, DuckDB, a spreadsheet); the ``slurm-rl export`` command is
:mod:`slurm_rl.cli.export`.

CSV always works; Parquet needs pyarrow (``pip install 'slurm-rl[export]'``). Rows are read
in batches through the same short read transactions the retrain uses, so exporting from a
live store never blocks the daemon. The files are replaced all at once, and only when every
one is written: a failed export leaves an earlier one as it was. A CSV cell never starts a
formula nor carries an escape sequence (``ops/safe_text.py``); Parquet keeps the text as is.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import math
import os
import secrets
from collections.abc import Generator, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Select, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from slurm_rl.errors import InputError, SlurmRLError
from slurm_rl.ops.safe_text import csv_cell, error_line
from slurm_rl.store.models import CycleRow, DecisionRow, JobRow, OutcomeRow
from slurm_rl.store.repository import make_engine, require_store, shown_url

TABLES: dict[str, Any] = {"cycles": CycleRow, "jobs": JobRow, "decisions": DecisionRow,
                          "outcomes": OutcomeRow}
BATCH = 10_000


def parse_since(text: str) -> float:
    """Epoch seconds, an ISO date/time (naive = UTC), or ``<N>d`` / ``<N>h`` ago."""
    text = text.strip()
    moment = _since(text)
    if moment is None or not math.isfinite(moment):  # 400 digits are inf seconds
        raise InputError(f"--since: not a time: {text!r} (e.g. 2026-11-01, 7d, 12h, epoch)")
    return moment


def _since(text: str) -> float | None:
    try:
        if text[-1:] in ("d", "h") and text[:-1].replace(".", "", 1).isdigit():
            unit = 86400.0 if text.endswith("d") else 3600.0
            return datetime.now(UTC).timestamp() - float(text[:-1]) * unit
        if text.replace(".", "", 1).isdigit():
            return float(text)
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _query(table: str, since: float) -> Select[Any]:
    model = TABLES[table]
    if table == "cycles":
        return select(model).where(CycleRow.snapshot_time >= since).order_by(CycleRow.id)
    if table == "decisions":
        return (select(DecisionRow).join(CycleRow, DecisionRow.cycle_id == CycleRow.id)
                .where(CycleRow.snapshot_time >= since).order_by(DecisionRow.id))
    if table == "jobs":
        return select(JobRow).where(JobRow.first_seen >= since).order_by(JobRow.job_key)
    return select(OutcomeRow).where(OutcomeRow.end_time >= since).order_by(OutcomeRow.job_key)


def _rows(engine: Engine, table: str, since: float) -> Generator[dict[str, Any], None, None]:
    columns = [c.key for c in TABLES[table].__table__.columns]
    with engine.connect() as connection:
        result = connection.execution_options(yield_per=BATCH).execute(_query(table, since))
        for row in result:
            yield {name: _cell(getattr(row, name)) for name in columns}


def _cell(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


def export(engine: Engine, since: float, output: Path, fmt: str,
           tables: Sequence[str]) -> dict[str, int]:
    """Write ``<table>.<fmt>`` for each table, all or none: each file is written beside its
    final name and renamed over it only once every table is written, so a failure (a
    store error, a full disk) leaves an earlier export there as it was."""
    counts: dict[str, int] = {}
    written: list[tuple[Path, Path]] = []
    path = output
    try:
        output.mkdir(parents=True, exist_ok=True)
        for table in tables:
            columns = [c.key for c in TABLES[table].__table__.columns]
            path = output / f"{table}.{fmt}"
            written.append((_staging_file(path), path))
            with contextlib.closing(_rows(engine, table, since)) as rows:  # its read ends here
                counts[table] = _write(written[-1][0], fmt, columns, rows)
        for staging, path in written:
            os.replace(staging, path)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc} (an earlier export "
                         "there is left as it was)", path="--output") from None
    finally:
        for staging, _ in written:
            staging.unlink(missing_ok=True)
    return counts


def _staging_file(path: Path) -> Path:
    """A new, empty file beside ``path`` (made as ``open(path, "w")`` would: umask applies),
    hidden while it is written. A directory in the way is found before anything is written."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    for _ in range(100):
        staging = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return staging
    raise FileExistsError(f"no free temporary name beside {path}")


def _write(path: Path, fmt: str, columns: list[str], rows: Iterator[dict[str, Any]]) -> int:
    if fmt == "csv":
        with path.open("w", encoding="utf-8", newline="") as handle:
            count = _write_csv(handle, columns, rows)
    else:
        count = _write_parquet(path, columns, rows)
    _fsync(path)  # on disk before it replaces the earlier file
    return count


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write_csv(handle: IO[str], columns: list[str], rows: Iterator[dict[str, Any]]) -> int:
    """Cells a spreadsheet shows as text: no formula, no escape sequence (safe_text)."""
    count = 0
    writer = csv.DictWriter(handle, columns)
    writer.writeheader()
    for row in rows:
        writer.writerow({name: csv_cell(value) for name, value in row.items()})
        count += 1
    return count


def _write_parquet(path: Path, columns: list[str], rows: Iterator[dict[str, Any]]) -> int:
    # lazy: pyarrow is optional (the 'export' extra) and only --format parquet needs it
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = list(rows)
    table = pa.Table.from_pylist(data) if data else pa.table({c: [] for c in columns})
    pq.write_table(table, str(path))
    return len(data)


def run_export(url: str, since: float, output: Path, fmt: str,
               tables: Sequence[str]) -> dict[str, int]:
    """:func:`export` from the store at ``url``; a store that cannot be read is one line
    naming it (its password as ***)."""
    require_store(url)
    engine = make_engine(url)
    try:
        return export(engine, since, output, fmt, tables)
    except SQLAlchemyError as exc:
        raise SlurmRLError(f"cannot read the store {shown_url(url)}: "
                           f"{error_line(exc)}") from None
    finally:
        engine.dispose()
