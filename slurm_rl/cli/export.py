"""``slurm-rl export``: the store's audit trail since a time, one file per table
(:mod:`slurm_rl.export`)."""

from __future__ import annotations

from pathlib import Path

import click

from slurm_rl.cli.options import WritableDir
from slurm_rl.config import store_command_config
from slurm_rl.errors import InputError
from slurm_rl.export import TABLES, parse_since, run_export


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
    chosen = [t.strip() for t in tables.split(",") if t.strip()]
    unknown = [t for t in chosen if t not in TABLES]
    if unknown or not chosen:
        raise InputError(f"--tables: unknown {', '.join(unknown) or 'none given'} "
                         f"(known: {', '.join(TABLES)})")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401  # lazy: optional; is it installed?
        except ImportError:
            raise InputError("--format parquet needs pyarrow: pip install 'slurm-rl[export]' "
                             "(or use --format csv)") from None
    config = store_command_config(config_path, store_url)
    counts = run_export(config.store, parse_since(since), output, fmt, chosen)
    click.echo(", ".join(f"{t}: {n} rows" for t, n in counts.items()) + f" -> {output}")
