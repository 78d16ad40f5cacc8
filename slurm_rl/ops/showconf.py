"""``slurm-rl show-conf``: the daemon's effective config and where each value came from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from slurm_rl.config import DaemonConfig, config_path, env_name, load_with_sources
from slurm_rl.store.repository import shown_url


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def rows(config: DaemonConfig, sources: dict[str, str]) -> list[tuple[str, Any, str]]:
    out = []
    for name in DaemonConfig.model_fields:
        source = sources[name]
        if source == "environment":
            source = f"environment ({env_name(name)})"
        value = _plain(getattr(config, name))
        if name == "store_url" and value is not None:
            value = shown_url(value)  # never the password
        out.append((name, value, source))
    # Derived values an operator looks for (where the store and heartbeat really are).
    out.append(("store (effective)", shown_url(config.store), "derived"))
    out.append(("heartbeat (effective)", str(config.heartbeat), "derived"))
    return out


@click.command("show-conf")
@click.option("--config", "config_file", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="TOML file [default: $SLURM_RL_CONFIG, else /etc/slurm-rl/slurm-rl.toml].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def show_conf_command(config_file: Path | None, as_json: bool) -> None:
    """Print the daemon's effective config with each value's source (default, file,
    environment or command line), as `slurm-rl daemon` would load it."""
    path = config_path(config_file)
    config, sources = load_with_sources(path)
    table = rows(config, sources)
    if as_json:
        click.echo(json.dumps({"file": str(path) if path else None,
                               "settings": {k: {"value": v, "source": s} for k, v, s in table}},
                              indent=2, default=str))
        return
    click.echo(f"# config file: {path if path else '(none)'}")
    for name, value, source in table:
        click.echo(f"{name} = {json.dumps(value, default=str)}  # {source}")
