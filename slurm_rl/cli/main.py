"""The ``slurm-rl`` command line."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape

from slurm_rl import __version__
from slurm_rl.agents.names import names_help
from slurm_rl.cli.options import (
    FiniteFloat,
    WritableDir,
    checkpoint_options,
    dispatch_options,
    fairness_option,
    world_options,
)
from slurm_rl.errors import SlurmRLError

F = TypeVar("F", bound=Callable[..., Any])
# Reports are read in terminals and in CI logs alike: never squeeze a table below 132 columns.
console = Console(width=max(132, Console().width))
err_console = Console(stderr=True)


# Subcommands in their own modules beside this one, imported only when used: torch and friends
# cost seconds to import, and `slurm-rl simulate` should not pay for them.
LAZY_COMMANDS = {
    "bundle": "slurm_rl.cli.bundle:bundle_group",
    "daemon": "slurm_rl.cli.daemon:daemon_command",
    "devcluster": "slurm_rl.cli.devcluster:devcluster_group",
    "evaluate": "slurm_rl.cli.train:evaluate_command",
    "export": "slurm_rl.cli.export:export_command",
    "models": "slurm_rl.cli.models:models_group",
    "retrain": "slurm_rl.cli.retrain:retrain_command",
    "explain": "slurm_rl.ops.explain:explain_command",
    "revert": "slurm_rl.ops.revert:revert_command",
    "selftest": "slurm_rl.ops.selftest:selftest_command",
    "show-conf": "slurm_rl.ops.showconf:show_conf_command",
    "train": "slurm_rl.cli.train:train_command",
}


class FriendlyGroup(click.Group):
    """Turns every expected error into one line on stderr and exit code 2 (never a traceback),
    and loads subsystem commands on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            module, attribute = LAZY_COMMANDS[name].split(":")
            command: click.Command = getattr(importlib.import_module(module), attribute)
            return command
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SlurmRLError as error:
            # The message is data (a key like "[daemon]", a job name): never rich markup.
            err_console.print(f"[red]error:[/red] {escape(str(error))}", highlight=False,
                              soft_wrap=True)
            sys.exit(2)


@click.group(cls=FriendlyGroup)
@click.version_option(__version__, prog_name="slurm-rl")
def main() -> None:
    """slurm-rl: a learned ordering + placement scheduler for GPU jobs on Slurm."""


@main.command()
@click.option("--cluster", default="philly-hetero", show_default=True,
              help="Cluster spec: a name under sim/clusters/ or a TOML path.")
@click.option("--trace", "trace_name", default="synthetic", show_default=True,
              help="'synthetic', a shared trace (philly, venus, pai2023, nasa) or a file path.")
@click.option("--format", "trace_format", default=None,
              help="Trace format when it cannot be detected (philly, helios, "
                   "helios-venus-slice, pai2023, swf, csv).")
@click.option("--window", "window_spec", default=None,
              help="Submit-time window, e.g. 2017-10-01:2017-10-15 or 2017-10.")
# At most ten years: a typo of 1e20 days would generate or replay for ever.
@click.option("--days", default=7.0, show_default=True, type=FiniteFloat(min=0.01, max=3650),
              help="Length of the synthetic workload.")
@click.option("--warmup-days", default=None, type=FiniteFloat(min=0.0, max=3650),
              help="Replay this many days before the window too, unmeasured, so the cluster is "
                   "busy when measuring starts [default: 3 for synthetic, else 0].")
@click.option("--policies", default=None,
              help=f"Comma-separated <ordering>+<placement> names ({names_help()}); default: "
                   "all baselines.")
@click.option("--mode", type=click.Choice(["direct", "slurm"]), default="slurm",
              show_default=True, help="direct: the policy starts jobs; slurm: only Slurm's levers.")
@click.option("--load", "offered_load", default=None, type=FiniteFloat(min=0.05, max=5.0),
              help="Scale the cluster's node groups (GPU-type mix kept) so that the replayed "
                   "jobs offer this load: GPU-time demand over capacity, in reference-GPU "
                   "units (docs/sweep.md) [default: the cluster as its spec has it].")
@click.option("--cycle", "cycle_s", default=10.0, show_default=True,
              type=FiniteFloat(min=0.0), help="Seconds between decisions.")
@click.option("--no-fluctuation", is_flag=True, help="Machines keep their nominal speed.")
@world_options
@checkpoint_options
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--fee-weight", "fee_weight", default=None, type=FiniteFloat(min=0.0),
              help="λ per $ in the reward −(JCT h + λ·fees), for placements that take one "
                   "(rwgp) [default: theirs]; learned rl policies keep their bundle's.")
@click.option("--skip-bad-rows", is_flag=True, help="Skip (and count) bad trace rows.")
@click.option("--report", "report_dir", type=WritableDir(),
              default=None, help="Write report.md, plots and results.json here.")
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")
@click.option("--workers", default=None, type=click.IntRange(min=1),
              help="Parallel replays (default: number of cores).")
@click.option("--replicas", default=1, show_default=True, type=click.IntRange(min=1),
              help="Replay every policy under N machine-fluctuation seeds (the spec's, +1, …) "
                   "and print means over them; --report writes one report per replica.")
@fairness_option
@dispatch_options
def simulate(**options: Any) -> None:
    """Replay a trace on a simulated cluster with several policies and compare them."""
    # lazy: the simulator and matplotlib (reports), which the other subcommands do not need
    from slurm_rl.cli.simulate import run_simulate

    run_simulate(console, **options)


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
