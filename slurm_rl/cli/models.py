"""``slurm-rl models list|promote|rollback``: the model registry in the store.

A running daemon (``models_follow = true``, the default) picks a change up at its next
cycle; SIGHUP also re-reads it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import click
from sqlalchemy.exc import SQLAlchemyError

from slurm_rl.config import store_command_config
from slurm_rl.errors import InputError, SlurmRLError
from slurm_rl.ops.safe_text import error_line, terminal_text
from slurm_rl.retrain.window import RetrainSkipped, check_schema
from slurm_rl.store.registry import ModelRegistry
from slurm_rl.store.repository import make_engine, require_store, shown_url

# Version numbers are the store's INTEGER key: 32 bits in PostgreSQL.
MAX_VERSION = 2**31 - 1

_store = click.option("--store", "store_url", default=None,
                      help="SQLAlchemy URL of the store [the --config file's].")
_config = click.option("--config", "config_path", default=None,
                       type=click.Path(dir_okay=False, path_type=Path),
                       help="The daemon's TOML file (its [daemon] store settings) "
                       "[$SLURM_RL_CONFIG, else /etc/slurm-rl/slurm-rl.toml when there].")


def _registry(config_path: Path | None, store_url: str | None) -> tuple[ModelRegistry, str]:
    """The registry of the store, and that store's URL as it may be shown (password ***)."""
    config = store_command_config(config_path, store_url)
    require_store(config.store)
    shown = shown_url(config.store)
    engine = make_engine(config.store)
    try:
        check_schema(engine)
    except RetrainSkipped as exc:
        raise InputError(f"store {shown}: {terminal_text(exc)}") from None
    return ModelRegistry(engine), shown


@contextlib.contextmanager
def _using(shown: str, doing: str) -> Iterator[None]:
    """A store error (locked, read-only, gone) as one line naming the store."""
    try:
        yield
    except SQLAlchemyError as exc:
        raise SlurmRLError(f"store {shown}: cannot {doing}: {error_line(exc)}") from None


@click.group("models")
def models_group() -> None:
    """Policy versions in the store: list them, promote one, roll back."""


@models_group.command("list")
@_config
@_store
@click.option("--json", "as_json", is_flag=True, help="One JSON object per version.")
def list_command(config_path: Path | None, store_url: str | None, as_json: bool) -> None:
    """Every version: number, active flag, status, policy, data window, gate figures."""
    registry, shown = _registry(config_path, store_url)
    with _using(shown, "read the model registry"):
        versions = registry.versions()
    if not versions:
        click.echo("no model versions (the daemon runs its configured policy)")
        return
    for v in versions:
        gate = v.metrics.get("gate") if isinstance(v.metrics, dict) else None
        if as_json:
            click.echo(json.dumps({
                "version": v.version, "active": v.active, "status": v.status,
                "policy": v.policy, "source": v.source, "base_version": v.base_version,
                "created_at": v.created_at.isoformat(), "window_start": v.window_start,
                "window_end": v.window_end, "window_jobs": v.window_jobs, "gate": gate,
                "note": v.note}))
            continue
        mark = "*" if v.active else " "
        figures = ""
        if isinstance(gate, dict):
            figures = (f" JCT {gate['candidate_jct_s']:.1f} s vs {gate['current_jct_s']:.1f} s"
                       f" ({gate['improvement']:+.1%})")
        window = f" {v.window_jobs} jobs" if v.window_jobs is not None else ""
        click.echo(terminal_text(f"{mark} v{v.version:<4} {v.status:<11} {v.policy:<20} "
                                 f"{v.source:<8} {v.created_at:%Y-%m-%d %H:%M}{window}{figures}"))


@models_group.command("promote")
@_config
@_store
@click.argument("version", type=click.IntRange(min=1, max=MAX_VERSION))
def promote_command(config_path: Path | None, store_url: str | None, version: int) -> None:
    """Make VERSION the active one (whatever the gate said)."""
    registry, shown = _registry(config_path, store_url)
    with _using(shown, "change the model registry"):
        previous = registry.promote(version, note="promoted by an admin")
    click.echo(f"v{version} active (was {f'v{previous}' if previous else 'none'})")


@models_group.command("rollback")
@_config
@_store
def rollback_command(config_path: Path | None, store_url: str | None) -> None:
    """Re-activate the version that was active before the current one."""
    registry, shown = _registry(config_path, store_url)
    with _using(shown, "change the model registry"):
        restored, replaced = registry.rollback(note="rolled back by an admin")
    now = f"v{restored}" if restored else "none (the daemon's configured policy)"
    click.echo(f"rolled back v{replaced}; active: {now}")
