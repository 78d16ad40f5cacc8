"""Command-line options shared by several commands (``simulate``, ``evaluate``)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from slurm_rl.fairness import DEFAULT_MAX_WAIT_RATIO
from slurm_rl.scenario import PERFORMANCE_MODES
from slurm_rl.simulator.slurm_emulation import SLURM_SCHEDULERS

F = TypeVar("F", bound=Callable[..., object])


class FiniteFloat(click.FloatRange):
    """A float range that refuses nan and ±inf: every comparison with nan is false, so a
    plain range lets it through, and it would reach the simulator as a silently absurd
    number (a cycle of inf seconds never decides)."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


class WritableDir(click.Path):
    """A directory the command writes into, made when the option is read: a path that cannot
    be made fails before the work (a replay or a training run of minutes), not after it."""

    def __init__(self) -> None:
        super().__init__(file_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        path = Path(os.fsdecode(super().convert(value, param, ctx)))
        if ctx is not None and ctx.resilient_parsing:  # shell completion: make nothing
            return path
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.fail(f"cannot create {str(value)!r}: {exc.strerror}.", param, ctx)
        if not os.access(path, os.W_OK | os.X_OK):
            self.fail(f"{str(value)!r} is not writable.", param, ctx)
        return path


def checkpoint_options(command: F) -> F:
    """``--checkpointable [SHARE]`` and ``--restart-overhead``: whether replayed jobs may be
    moved while they run (``Scenario.checkpointable``, ``SimConfig.restart_overhead_s``)."""
    command = click.option(
        "--restart-overhead", "restart_overhead_s", default=300.0, show_default=True,
        type=FiniteFloat(min=0.0),
        help="Seconds of work a migrated job loses (since its checkpoint, and reloading).",
    )(command)
    return click.option(
        "--checkpointable", type=FiniteFloat(0.0, 1.0), is_flag=False, flag_value=1.0,
        default=0.0, metavar="[SHARE]",
        help="Every job (or this share of them, e.g. =0.5) checkpoints and may be requeued: "
             "placements that move running jobs (rwgp, the dual agent) may migrate them to "
             "faster nodes; the heuristic placements never move one.",
    )(command)


def fairness_option(command: F) -> F:
    """``--fairness-max-wait-ratio``: the fairness guard's bound in a replay
    (docs/fairness.md); by default the daemon's, so a replay ranks as the daemon would."""
    return click.option(
        "--fairness-max-wait-ratio", "fairness_max_wait_ratio", default=None,
        type=FiniteFloat(min=0.0, max=1_000_000.0),
        help="Re-rank users round-robin, the most-waiting first, when the most-waiting "
             "user's mean wait exceeds this multiple of the users' average; 0 = off "
             f"[default: {DEFAULT_MAX_WAIT_RATIO:g}, the daemon's].",
    )(command)


def dispatch_options(command: F) -> F:
    """``--dispatch`` and ``--hold-cap-h``: the daemon's ``dispatch`` and ``defer_cap_s`` in a
    replay (``RankingRules.dispatch``, ``SimConfig.hold_cap_s``; docs/daemon.md, "Dispatch")."""
    command = click.option(
        "--hold-cap-h", "hold_cap_h", default=None, type=FiniteFloat(min=0.0, max=720.0),
        help="The longest a job is held back after its submission, in hours (the daemon's "
             "defer_cap_s); past it Slurm may start the job by its own priority [default: 1, "
             "or 720 with --dispatch].",
    )(command)
    return click.option(
        "--dispatch", is_flag=True,
        help="Slurm starts only the jobs the policy starts: every other pending job is held "
             "(the daemon's dispatch = true). Without it, released jobs also start by "
             "Slurm's own priority whenever GPUs free up between decisions.",
    )(command)


def world_options(command: F) -> F:
    """``--performance`` and ``--slurm-scheduler``: how fast replayed jobs run
    (``Scenario.performance``) and which slurmctld scheduler ``slurm`` mode emulates
    (``SimConfig.slurm_scheduler``); see docs/slurm-emulation.md."""
    command = click.option(
        "--slurm-scheduler", "slurm_scheduler", type=click.Choice(SLURM_SCHEDULERS),
        default=None,
        help="The SchedulerType --mode slurm emulates: backfill (sched/backfill, EASY) or "
             "builtin (sched/builtin: strict priority order, no backfill) [default: backfill].",
    )(command)
    return click.option(
        "--performance", type=click.Choice(PERFORMANCE_MODES), default="measured",
        show_default=True,
        help="measured: GPU-type speeds, spread and co-location from measured data, machine "
             "fluctuation; fixed: every job runs exactly its trace duration.",
    )(command)
