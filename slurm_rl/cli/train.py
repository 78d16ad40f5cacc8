"""``slurm-rl train`` and ``slurm-rl evaluate`` (register with ``main.add_command``);
``python -m slurm_rl.cli.train train|evaluate`` runs them without the entry point."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from slurm_rl.agents.dual.bundle import CHOOSERS, LONG_LIMIT_H, load_bundle
from slurm_rl.agents.dual.network import PRIORS
from slurm_rl.agents.starvation import STARVATION_H
from slurm_rl.cli.main import FriendlyGroup
from slurm_rl.cli.options import FiniteFloat, WritableDir, checkpoint_options, dispatch_options
from slurm_rl.errors import InputError
from slurm_rl.paths import default_bundle_path
from slurm_rl.training.actors import ORDERING_TEACHERS, PLACEMENT_TEACHERS
from slurm_rl.training.evaluate import PLACEMENTS
from slurm_rl.training.pool import BACKENDS, LOAD_BASES
from slurm_rl.training.validation import SELECTIONS

console = Console()

_DEFAULT_WINDOWS = {"philly": "2017-12"}


def _loads(ctx: click.Context, param: click.Parameter, value: str | None
           ) -> tuple[float, ...] | None:
    """``--loads``: :func:`~slurm_rl.training.sweep.parse_loads`'s rules, one clear line."""
    from slurm_rl.training.sweep import parse_loads

    if value is None:
        return None
    try:
        return parse_loads(value)
    except InputError as error:
        raise click.BadParameter(error.reason, ctx, param) from None


@click.command("train")
@click.option("--output", type=WritableDir(),
              default=Path("policies/default"), show_default=True,
              help="Bundle directory to write.")
@click.option("--seed", default=1, show_default=True, type=int)
@click.option("--fee-weight", "fee_weight", default=0.1, show_default=True,
              type=FiniteFloat(min=0.0), help="λ in the reward −(JCT hours + λ · fees).")
@click.option("--iterations", default=20, show_default=True, type=click.IntRange(min=0),
              help="PPO iterations.")
@click.option("--bc-iterations", "bc_iterations", default=2, show_default=True,
              type=click.IntRange(min=0), help="Behaviour-cloning iterations before PPO.")
@click.option("--episodes-per-iteration", "episodes_per_iteration", default=4,
              show_default=True, type=click.IntRange(min=1))
@click.option("--episode-days", "episode_days", default=0.5, show_default=True,
              type=FiniteFloat(min=0.01), help="The agent's part of an episode.")
@click.option("--warmup-days", "warmup_days", default=3.0, show_default=True,
              type=FiniteFloat(min=0.0), help="Heuristic warm-up before the agent acts.")
@click.option("--trace", default="philly", show_default=True)
@click.option("--cluster", default="philly-hetero", show_default=True)
@click.option("--train-window", "train_window", default="2017-10-01:2017-12-01",
              show_default=True, help="Episodes are drawn from here (never December).")
@click.option("--validation-window", "validation_window", default="2017-09", show_default=True,
              help="Checkpoint selection replays this window (tuning data).")
@click.option("--validate-every", "validate_every", default=5, show_default=True,
              type=click.IntRange(min=0), help="PPO iterations between validations.")
@click.option("--chooser", type=click.Choice(CHOOSERS), default="rwgp-excluding", show_default=True,
              help="Node-set chooser inside each GPU type.")
@click.option("--no-communication", "no_communication", is_flag=True,
              help="Train the ablation without the placement agent's message.")
@click.option("--loads", default=None, callback=_loads,
              help="Train across offered loads (e.g. 0.5,0.7,0.85,1.0): each episode runs on "
                   "the cluster scaled so that the training window offers one of them, drawn "
                   "at random; validation replays its window at each (docs/training.md).")
@click.option("--validation-loads", "validation_loads", default=None, callback=_loads,
              help="The loads validation replays its window at (default: --loads).")
@click.option("--load-basis", "load_basis", type=click.Choice(LOAD_BASES), default="window",
              show_default=True,
              help="Whose offered load scales an episode's cluster with --loads: the training "
                   "window's, or the episode's own days' (as the load sweep scales a held-out "
                   "window).")
@click.option("--selection", type=click.Choice(SELECTIONS), default="mean", show_default=True,
              help="Checkpoint selection: the mean cost over the validation loads, or "
                   "every-load (a checkpoint must also be no worse than the best so far, "
                   "within 1 %, at every load).")
@click.option("--dispatch", is_flag=True,
              help="Episodes and validation in dispatch mode (docs/daemon.md, \"Dispatch\"): "
                   "only the policy starts jobs; for a daemon run with dispatch = true.")
@click.option("--hidden", default=64, show_default=True, type=click.IntRange(min=4))
@click.option("--pace-sharpness", "pace_sharpness", default=4.0, show_default=True,
              type=FiniteFloat(min=0.0),
              help="Sharpness β of the placement head's prior: the head starts as its "
                   "chooser's rule and learns a residual (0: no prior).")
@click.option("--prior", type=click.Choice(PRIORS), default="cost", show_default=True,
              help="The head's prior: the pace, or (cost) the chooser's cost per unit of work, "
                   "which prices fees at the bundle's λ.")
@click.option("--placement-teacher", "placement_teacher", type=click.Choice(PLACEMENT_TEACHERS),
              default="fastest", show_default=True,
              help="What the warm start's placement clones: the fastest candidate, or the best "
                   "under the head's prior (the cheapest per unit of work with --prior cost).")
@click.option("--ordering-sharpness", "ordering_sharpness", default=0.0, show_default=True,
              type=FiniteFloat(min=0.0),
              help="Sharpness of the ordering's prior, shortest time limit first: the "
                   "ordering starts as sjf-limit and learns a residual (0: no prior).")
@click.option("--ordering-teacher", "ordering_teacher", type=click.Choice(ORDERING_TEACHERS),
              default="qssf", show_default=True,
              help="What the warm start's ranking clones: QSSF's predicted GPU-hours, or the "
                   "time limit (sjf-limit, the ordering prior's rule).")
@click.option("--starvation-h", "starvation_h", default=STARVATION_H, show_default=True,
              type=FiniteFloat(min=0.0),
              help="The age guard the rollouts and validation rank under and the bundle ships "
                   "with (its starvation_h): hours pending before a job goes first; 0: off.")
@click.option("--long-limit-h", "long_limit_h", default=LONG_LIMIT_H, show_default=True,
              type=FiniteFloat(min=0.0, min_open=True),
              help="The time limit (hours) from which the chooser keeps a job off slow nodes "
                   "(choosers with the long-job rule), in rollouts and validation; the bundle "
                   "ships with it (its long_limit_h).")
@click.option("--learning-rate", "learning_rate", default=1e-3, show_default=True,
              type=FiniteFloat(min=0.0, min_open=True))
@click.option("--update-epochs", "update_epochs", default=8, show_default=True,
              type=click.IntRange(min=1), help="PPO epochs over each iteration's decisions.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(min=1),
              help="Rollout and validation processes.")
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
              help="Rollout workers: local processes or Ray actors (auto: Ray when installed).")
@click.option("--run-dir", "run_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("reports/runs"), show_default=True,
              help="Curves and logs go here.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def train_command(**options: Any) -> None:
    """Train the dual agent (behaviour cloning, then PPO) and write a policy bundle."""
    from slurm_rl.training.ppo import Args, train

    known = {f.name for f in fields(Args)}
    values = {k: v for k, v in options.items() if k in known}
    values["communicate"] = not options["no_communication"]
    values["progress"] = not options["quiet"]
    values["exp_name"] = options["output"].name
    values["loads"] = options["loads"] or ()
    values["validation_loads"] = options["validation_loads"] or ()
    path = train(Args(**values))
    meta = load_bundle(path).meta
    console.print(f"bundle: {path} (checkpoint {meta['metrics']['checkpoint']}, "
                  f"{meta['metrics']['wall_s']:.0f} s)", highlight=False)


def _names(text: str | None, option: str) -> list[str] | None:
    """A comma-separated option's names; None when not given; naming none is an error."""
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise InputError(f"{option} names nothing")
    return names


@click.command("evaluate")
@click.option("--bundle", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Policy bundle (default: the shipped policies/default).")
@click.option("--trace", default="philly", show_default=True)
@click.option("--cluster", default="philly-hetero", show_default=True)
@click.option("--window", "window_spec", default=None,
              help="Window to replay (default for philly: 2017-12, the held-out month).")
@click.option("--mode", type=click.Choice(["direct", "slurm"]), default="slurm",
              show_default=True)
@click.option("--placements", default=",".join(PLACEMENTS), show_default=True,
              help="Heuristic placements each baseline ordering is tried with.")
@click.option("--orderings", default=None,
              help="Only these baseline orderings (comma-separated; default: every one).")
@click.option("--no-ablations", "no_ablations", is_flag=True, help="Only the dual agent.")
@click.option("--no-comm-bundle", "no_comm_bundle", default=None,
              type=click.Path(file_okay=False, path_type=Path),
              help="A bundle trained without communication, for that ablation.")
@click.option("--report", "report_dir", type=WritableDir(),
              default=Path("reports/evaluation"), show_default=True)
@click.option("--workers", default=None, type=click.IntRange(min=1),
              help="Parallel replays (default: number of cores).")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--replicas", default=1, show_default=True, type=click.IntRange(min=1),
              help="Replay each policy under this many machine-fluctuation seeds (the "
                   "cluster's, then +1, +2, ...); the verdict compares the means.")
@click.option("--loads", default=None, callback=_loads,
              help="A load sweep: replay at each of these offered loads (e.g. "
                   "0.5,0.7,0.85,1.0) by scaling the cluster's node groups; writes sweep.md, "
                   "sweep.json and plots (docs/sweep.md).")
@checkpoint_options
@dispatch_options
def evaluate_command(**options: Any) -> None:
    """Replay held-out windows with the dual agent, its ablations and every baseline."""
    import os

    from slurm_rl.cli.simulate import build_scenario, ranking_rules
    from slurm_rl.training.evaluate import evaluation_specs, replay_replicas, write_evaluation

    bundle = options["bundle"] or default_bundle_path()
    meta = load_bundle(bundle).meta  # fail early, with one line, on a bad bundle
    window_spec = options["window_spec"] or _DEFAULT_WINDOWS.get(options["trace"])
    scenario = build_scenario({
        "cluster": options["cluster"], "trace_name": options["trace"],
        "window_spec": window_spec, "days": 7.0, "seed": options["seed"],
        "trace_format": None, "skip_bad_rows": False, "mode": options["mode"],
        "cycle_s": 10.0, "no_fluctuation": False,
        "checkpointable": options["checkpointable"],
        "restart_overhead_s": options["restart_overhead_s"],
        "dispatch": options["dispatch"], "hold_cap_h": options["hold_cap_h"],
    })
    placements = _names(options["placements"], "--placements")
    assert placements is not None
    specs = evaluation_specs(str(bundle), placements=placements,
                             ablations=not options["no_ablations"],
                             no_comm_bundle=str(options["no_comm_bundle"] or "") or None,
                             orderings=_names(options["orderings"], "--orderings"),
                             rules=ranking_rules(options))
    workers = options["workers"] or os.cpu_count() or 1
    if options["loads"] is not None:
        _sweep(scenario, specs, workers, options)
        return
    scenarios = [scenario.replica(k) for k in range(options["replicas"])]
    results = replay_replicas(scenarios, specs, workers, progress=True)
    path = write_evaluation(results, scenarios, options["report_dir"], meta,
                            options["dispatch"])
    verdict = json.loads((options["report_dir"] / "evaluation.json").read_text())
    console.print(path.read_text(), highlight=False)
    console.print(f"criteria {'met' if verdict['met'] else 'not met'}; report: {path}",
                  highlight=False)


def _sweep(scenario: Any, specs: Any, workers: int, options: dict[str, Any]) -> None:
    import time

    from slurm_rl.training.sweep import code_version, run_sweep
    from slurm_rl.training.sweep_report import write_sweep

    started, code = time.perf_counter(), code_version()
    runs = run_sweep(scenario, options["loads"], specs, options["replicas"], workers,
                     progress=True)
    path = write_sweep(runs, scenario.cluster, options["report_dir"], _sweep_command(options),
                       time.perf_counter() - started, code)
    console.print(f"sweep: {len(runs.points)} loads x {runs.replicas} replicas x "
                  f"{len(runs.policies)} policies in {time.perf_counter() - started:.0f} s; "
                  f"report: {path}", highlight=False)


def _sweep_command(options: dict[str, Any]) -> str:
    """The command that reproduces this sweep, every option that shapes it spelled out."""
    import shlex

    words = ["slurm-rl", "evaluate", "--trace", options["trace"], "--cluster",
             options["cluster"]]
    if options["window_spec"]:
        words += ["--window", options["window_spec"]]
    if options["orderings"]:
        words += ["--orderings", options["orderings"]]
    words += ["--mode", options["mode"], "--placements", options["placements"],
              "--loads", ",".join(f"{load:g}" for load in options["loads"]),
              "--replicas", str(options["replicas"]), "--seed", str(options["seed"])]
    if options["bundle"]:
        words += ["--bundle", str(options["bundle"])]
    if options["no_ablations"]:
        words.append("--no-ablations")
    if options["no_comm_bundle"]:
        words += ["--no-comm-bundle", str(options["no_comm_bundle"])]
    if options["checkpointable"]:
        words += [f"--checkpointable={options['checkpointable']:g}",
                  "--restart-overhead", f"{options['restart_overhead_s']:g}"]
    if options["dispatch"]:
        words.append("--dispatch")
    if options["hold_cap_h"] is not None:
        words += ["--hold-cap-h", f"{options['hold_cap_h']:g}"]
    if options["workers"]:
        words += ["--workers", str(options["workers"])]
    return shlex.join([*words, "--report", str(options["report_dir"])])


@click.group(cls=FriendlyGroup)
def main() -> None:
    """Train and evaluate the dual agent."""


main.add_command(train_command)
main.add_command(evaluate_command)

if __name__ == "__main__":
    main()
