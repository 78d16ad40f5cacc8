"""``slurm-rl export``: the store's audit trail since a time, one file per table, for
analysis (pandas, DuckDB, a spreadsheet).

CSV always works; Parquet needs pyarrow (``pip install 'slurm-rl[export]'``). Rows are read
in batches through the same short read transactions the retrain uses, so exporting from a
live store never blocks the daemon.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from sqlalchemy import Select, select
from sqlalchemy.engine import Engine

from slurm_rl.cli_options import WritableDir
from slurm_rl.errors import InputError
from slurm_rl.store.models import CycleRow, DecisionRow, JobRow, OutcomeRow

TABLES: dict[str, Any] = {"cycles": CycleRow, "jobs": JobRow, "decisions": DecisionRow,
                          "outcomes": OutcomeRow}
BATCH = 10_000


def parse_since(text: str) -> float:
    """Epoch seconds, an ISO date/time (naive = UTC), or ``<N>d`` / ``<N>h`` ago."""
    text = text.strip()
    try:
        if text[-1:] in ("d", "h") and text[:-1].replace(".", "", 1).isdigit():
            unit = 86400.0 if text.endswith("d") else 3600.0
            return datetime.now(UTC).timestamp() - float(text[:-1]) * unit
        if text.replace(".", "", 1).isdigit():
            return float(text)
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None:
        raise InputError(f"--since: not a time: {text!r} (e.g. 2026-11-01, 7d, 12h, epoch)")
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


def _rows(engine: Engine, table: str, since: float) -> Iterator[dict[str, Any]]:
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
    output.mkdir(parents=True, exist_ok=True)
    counts = {}
    for table in tables:
        columns = [c.key for c in TABLES[table].__table__.columns]
        rows = _rows(engine, table, since)
        path = output / f"{table}.{fmt}"
        counts[table] = _write_csv(path, columns, rows) if fmt == "csv" else \
            _write_parquet(path, columns, rows)
    return counts


def _write_csv(path: Path, columns: list[str], rows: Iterator[dict[str, Any]]) -> int:
    count = 0
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
            count += 1
    return count


def _write_parquet(path: Path, columns: list[str], rows: Iterator[dict[str, Any]]) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = list(rows)
    table = pa.Table.from_pylist(data) if data else pa.table({c: [] for c in columns})
    pq.write_table(table, path)
    return len(data)


@click.command("export")
@click.option("--config", "config_path", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="The daemon's TOML file (its store) "
                   "[$SLURM_RL_CONFIG, else /etc/slurm-rl/slurm-rl.toml when there].")
@click.option("--store", "store_url", default=None, help="SQLAlchemy URL of the store.")
@click.option("--since", required=True,
              help="From this time: 2026-11-01, 2026-11-01T12:00, 7d, 12h, or epoch seconds.")
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]), default="csv",
              show_default=True, help="parquet needs pyarrow (pip install 'slurm-rl[export]').")
@click.option("--output", type=WritableDir(), required=True,
              help="Directory for <table>.<format> files.")
@click.option("--tables", default=",".join(TABLES), show_default=True)
def export_command(config_path: Path | None, store_url: str | None, since: str, fmt: str,
                   output: Path, tables: str) -> None:
    """Export cycles, jobs, decisions and outcomes since a time to CSV or Parquet."""
    from slurm_rl.daemon.config import store_command_config
    from slurm_rl.store.repository import make_engine, require_store

    chosen = [t.strip() for t in tables.split(",") if t.strip()]
    unknown = [t for t in chosen if t not in TABLES]
    if unknown or not chosen:
        raise InputError(f"--tables: unknown {', '.join(unknown) or 'none given'} "
                         f"(known: {', '.join(TABLES)})")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise InputError("--format parquet needs pyarrow: pip install 'slurm-rl[export]' "
                             "(or use --format csv)") from None
    config = store_command_config(config_path, store_url)
    require_store(config.store)
    engine = make_engine(config.store)
    try:
        counts = export(engine, parse_since(since), output, fmt, chosen)
    finally:
        engine.dispose()
    click.echo(", ".join(f"{t}: {n} rows" for t, n in counts.items()) + f" -> {output}")
