"""Command-line options shared by several commands (``simulate``, ``evaluate``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

F = TypeVar("F", bound=Callable[..., object])


def checkpoint_options(command: F) -> F:
    """``--checkpointable [SHARE]`` and ``--restart-overhead``: whether replayed jobs may be
    moved while they run (``Scenario.checkpointable``, ``SimConfig.restart_overhead_s``)."""
    command = click.option(
        "--restart-overhead", "restart_overhead_s", default=300.0, show_default=True,
        type=click.FloatRange(min=0.0),
        help="Seconds of work a migrated job loses (since its checkpoint, and reloading).",
    )(command)
    return click.option(
        "--checkpointable", type=click.FloatRange(0.0, 1.0), is_flag=False, flag_value=1.0,
        default=0.0, metavar="[SHARE]",
        help="Every job (or this share of them, e.g. =0.5) checkpoints and may be requeued: "
             "placements that move running jobs (rwgp, the dual agent) may migrate them to "
             "faster nodes; the heuristic placements never move one.",
    )(command)
