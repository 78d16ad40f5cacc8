"""``slurm-rl bundle``: how a trained policy bundle acts, shown and changed without retraining
(:func:`slurm_rl.agents.dual.bundle.change_settings`)."""

from __future__ import annotations

from pathlib import Path

import click

from slurm_rl.agents.dual.bundle import (
    CHOOSERS,
    SETTINGS_CHANGED,
    SettingsChange,
    change_settings,
    load_bundle,
)
from slurm_rl.cli.options import FiniteFloat

_BUNDLE = click.argument("directory", type=click.Path(file_okay=False, path_type=Path))


@click.group("bundle")
def bundle_group() -> None:
    """Show or change a policy bundle's settings (chooser, age guard, ordering prior)."""


@bundle_group.command("show")
@_BUNDLE
def show_command(directory: Path) -> None:
    """The settings the bundle acts with, and how they were changed since training."""
    _show(directory)


def _show(directory: Path) -> None:
    bundle = load_bundle(directory)
    config = bundle.network.config
    guard_s = bundle.starvation_s
    click.echo(f"{directory}: chooser {bundle.chooser}, fee weight λ {bundle.fee_weight:g}, "
               f"age guard {'off' if guard_s is None else f'{guard_s / 3600:g} h'}, "
               f"ordering sharpness {config.ordering_sharpness:g}, "
               f"long jobs from {bundle.long_limit_s / 3600:g} h, "
               f"communicate {str(bundle.meta.get('communicate', True)).lower()}")
    for change in bundle.meta.get(SETTINGS_CHANGED, []):
        click.echo(f"  changed {change.get('key')}: {change.get('from')!r} -> "
                   f"{change.get('to')!r} ({change.get('reason')})")


@bundle_group.command("set")
@_BUNDLE
@click.option("--chooser", type=click.Choice(CHOOSERS), default=None,
              help="The node-set chooser inside the placement agent.")
@click.option("--starvation-h", "starvation_h", type=FiniteFloat(min=0.0), default=None,
              help="The age guard: hours pending before a job goes first; 0: off.")
@click.option("--ordering-sharpness", "ordering_sharpness", default=None,
              type=FiniteFloat(min=0.0, max=100.0),
              help="β_o: the weight of the shortest-limit-first prior beside the residual.")
@click.option("--long-limit-h", "long_limit_h", type=FiniteFloat(min=0.0), default=None,
              help="The time limit (hours, above 0) from which the -long choosers keep a job "
                   "off slow nodes; set it above the partitions' DefaultTime.")
@click.option("--reason", required=True,
              help="Why (kept in meta.json's settings_changed record with the old value).")
def set_command(directory: Path, chooser: str | None, starvation_h: float | None,
                ordering_sharpness: float | None, long_limit_h: float | None,
                reason: str) -> None:
    """Change how the bundle acts, its weights untouched; each change is recorded."""
    if not reason.strip():
        raise click.BadParameter("say why the setting changes", param_hint="'--reason'")
    change_settings(directory, SettingsChange(chooser, starvation_h, ordering_sharpness,
                                              long_limit_h), reason)
    _show(directory)
