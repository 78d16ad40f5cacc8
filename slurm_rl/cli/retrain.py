"""``slurm-rl retrain``: one retrain, for cron, a systemd timer, or ``sbatch --wrap``.
``python -m slurm_rl.cli.retrain`` (what the daemon's scheduled job runs) is the same command,
with errors as one line and exit code 2.

Exit status: 0 when the run ended as planned (promoted, rejected by the gate, or skipped
because the logs are not ready), 1 when it failed, 2 for bad arguments or config.
"""

from __future__ import annotations

import logging
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from slurm_rl.cli.options import F, FiniteFloat
from slurm_rl.config import DaemonConfig, store_command_config
from slurm_rl.errors import InputError, SlurmRLError
from slurm_rl.live_policy import make_policy
from slurm_rl.retrain.gate import GateSettings
from slurm_rl.retrain.live_world import LiveWorld
from slurm_rl.store.repository import require_store

if TYPE_CHECKING:
    from slurm_rl.retrain.run import RetrainSettings

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


#: The daemon's settings that make the world a policy is fine-tuned and judged in (its
#: ranking rules, dispatch, hold cap, limits on priority changes and moves), by DaemonConfig
#: field: the scheduled retrain passes them on its command line
#: (:func:`slurm_rl.retrain.schedule.retrain_argv`).
WORLD_FIELDS = ("dispatch", "defer_cap_s", "fairness_max_wait_ratio", "fairness_window_s",
                "fairness_min_wait_s", "nice_per_rank", "allow_mixed_gpu_types",
                "priority_tolerance_ranks", "priority_updates_per_job_hour",
                "priority_updates_per_cycle", "priority_floor", "migrate",
                "max_migrations_per_cycle")


def world_options(command: F) -> F:
    """The daemon's world (:data:`WORLD_FIELDS`) as options; each defaults to the config's."""
    for flag, name, kind, about in reversed((
            ("--defer-cap", "defer_cap_s", FiniteFloat(min=0.0), "defer_cap_s (s)"),
            ("--fairness-max-wait-ratio", "fairness_max_wait_ratio", FiniteFloat(min=0.0),
             "fairness_max_wait_ratio (0: off)"),
            ("--fairness-window", "fairness_window_s", FiniteFloat(min=0.0),
             "fairness_window_s"),
            ("--fairness-min-wait", "fairness_min_wait_s", FiniteFloat(min=0.0),
             "fairness_min_wait_s"),
            ("--nice-per-rank", "nice_per_rank", click.IntRange(min=0),
             "nice_per_rank (0: off)"),
            ("--priority-tolerance-ranks", "priority_tolerance_ranks", click.IntRange(min=0),
             "priority_tolerance_ranks"),
            ("--priority-updates-per-job-hour", "priority_updates_per_job_hour",
             click.IntRange(min=1), "priority_updates_per_job_hour"),
            ("--priority-updates-per-cycle", "priority_updates_per_cycle",
             click.IntRange(min=1), "priority_updates_per_cycle"),
            ("--priority-floor", "priority_floor", click.IntRange(min=1), "priority_floor"),
            ("--max-migrations-per-cycle", "max_migrations_per_cycle", click.IntRange(min=1),
             "max_migrations_per_cycle"))):
        command = click.option(flag, name, default=None, type=kind,
                               help=f"The daemon's {about} [the config's].")(command)
    command = click.option(
        "--migrate/--no-migrate", "migrate", default=None,
        help="The daemon's migrate: its policy's moves of running jobs are sent (or not) "
             "[the config's].")(command)
    command = click.option(
        "--allow-mixed-gpu-types/--one-gpu-type", "allow_mixed_gpu_types", default=None,
        help="The daemon's allow_mixed_gpu_types: an untyped gang may span GPU types (or "
             "stays on one) [the config's].")(command)
    return click.option(
        "--dispatch/--no-dispatch", "dispatch", default=None,
        help="Fine-tune and judge as a daemon with dispatch = true (or false) runs [the "
             "config's].")(command)


@click.command("retrain")
@click.option("--config", "config_path", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="The daemon's TOML file: store, policy and retrain_* settings from [daemon] "
                   "[$SLURM_RL_CONFIG, else /etc/slurm-rl/slurm-rl.toml when there].")
@click.option("--store", "store_url", default=None, envvar="SLURM_RL_STORE",
              help="SQLAlchemy URL of the store [$SLURM_RL_STORE: the daemon's scheduled "
                   "retrain passes it so, off the command line any user can read].")
@click.option("--cluster", default=None, help="Cluster name in the store [default: busiest].")
@click.option("--policy", default=None, help="Current policy when no version is active.")
@click.option("--policy-bundle", "policy_bundle", default=None,
              type=click.Path(file_okay=False, path_type=Path))
@click.option("--window-days", "window_days", default=None, type=FiniteFloat(min=0.0,
              min_open=True), help="Learn from jobs that ended this many days back [7].")
@click.option("--margin", default=None, type=FiniteFloat(0.0, 1.0, max_open=True),
              help="Promote only if mean JCT is lower by this fraction [0.02].")
@click.option("--fee-tolerance", "fee_tolerance", default=None, type=FiniteFloat(min=0.0),
              help="Promote only if the candidate's fees are at most this fraction above the "
                   "current policy's [default: retrain_fee_tolerance, 0.05].")
@click.option("--wait-tolerance", "wait_tolerance", default=None,
              type=FiniteFloat(min=0.0),
              help="Promote only if the candidate's 99th-percentile queue wait is at most this "
                   "fraction (plus an hour) above the current policy's [default: "
                   "retrain_wait_tolerance, 0.5].")
@click.option("--iterations", default=None, type=click.IntRange(min=0),
              help="PPO fine-tuning iterations [10].")
@click.option("--episodes", default=None, type=click.IntRange(min=1),
              help="Episodes per iteration [4].")
@click.option("--gate-seeds", "gate_seeds", default=None, type=click.IntRange(min=1),
              help="Replays per policy in the gate [3].")
@click.option("--repeats", default=8, show_default=True, type=click.IntRange(min=1),
              help="Spans of the logged window in the training scenario.")
@click.option("--cycle", "cycle_s", default=None, type=FiniteFloat(min=0.0),
              help="Decision interval in the replays [the daemon's interval].")
@click.option("--defer-window", "defer_window_s", default=None, type=FiniteFloat(min=0.0))
@click.option("--base", "base_bundle", default=None,
              type=click.Path(file_okay=False, path_type=Path),
              help="Fine-tune from this bundle [the current policy's, else the shipped one].")
@click.option("--candidate", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="Judge this bundle instead of fine-tuning one.")
@click.option("--no-promote", "no_promote", is_flag=True,
              help="Register and judge the candidate, never activate it.")
@click.option("--cache-dir", "cache_dir", default=None,
              type=click.Path(file_okay=False, path_type=Path),
              help="Where registry versions are unpacked [<state_dir>/models].")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--seed", default=0, show_default=True, type=int)
@world_options
def retrain_command(config_path: Path | None, store_url: str | None, **options: object) -> None:
    """Retrain the agents on the store's logged window; promote the result only if the gate
    finds it better than the current policy by the margin."""
    from slurm_rl.retrain.run import retrain  # lazy: fine-tuning imports torch

    if not logging.getLogger().handlers:  # progress and problems on stderr
        logging.basicConfig(stream=sys.stderr, format=LOG_FORMAT, level=logging.WARNING)
    config, settings = command_settings(config_path, store_url, options)
    check_usable(settings)
    require_store(config.store)
    _stop_on_sigterm()
    # The outcome is the command's one line of output (stdout), not a log line as well.
    result = retrain(config.store, settings, say=lambda r: click.echo(r.message))
    sys.exit(1 if result.status == "failed" else 0)


def _stop_on_sigterm() -> None:
    """SIGTERM (the daemon stopping, systemd) ends the run as ``failed``, its row marked by
    itself: the default action killed it with its ``retrain_runs`` row left running."""
    from slurm_rl.retrain.run import RetrainStopped

    def stop(signum: int, _frame: object) -> None:
        raise RetrainStopped(f"stopped by {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, stop)


def check_usable(settings: RetrainSettings) -> None:
    """The policy and the bundles build before the store is read: a bad argument is one
    line and exit 2, not hidden behind "retrain skipped" while the logs are thin."""
    from slurm_rl.agents.dual.bundle import BundleError, load_bundle  # lazy: torch

    try:
        make_policy(settings.policy, bundle=settings.policy_bundle)
    except SlurmRLError as exc:
        raise InputError(f"--policy {settings.policy}: {exc}") from None
    for option, path in (("--candidate", settings.candidate), ("--base", settings.base_bundle)):
        try:
            if path is not None:
                load_bundle(path)
        except BundleError as exc:
            raise InputError(f"{option}: {exc}") from None


def command_settings(config_path: Path | None, store_url: str | None,
                     options: dict[str, object]) -> tuple[DaemonConfig, RetrainSettings]:
    """The site config the command acts on (its world options laid over it) and the
    retrain's settings."""
    world = {name: options.get(name) for name in WORLD_FIELDS}
    if world["dispatch"]:
        # the daemon's mode may come from its own command line, not the environment this
        # inherits (SLURM_RL_MODE=advise would refuse dispatch); a retrain never acts
        world["mode"] = "shadow"
    config = store_command_config(config_path, store_url, world)
    return config, settings_from(config, options)


def settings_from(config: DaemonConfig, options: dict[str, object]) -> RetrainSettings:
    # lazy: fine-tuning (finetune, run) imports torch
    from slurm_rl.retrain.finetune import FinetuneSettings
    from slurm_rl.retrain.run import RetrainSettings

    def pick(name: str, default: object) -> object:
        value = options.get(name)
        return default if value is None else value

    for name in ("candidate", "base_bundle", "policy_bundle"):
        path = options.get(name)
        if isinstance(path, Path) and not path.is_dir():
            raise InputError(f"--{name.replace('_', '-')}: no such bundle directory {path}")
    world = LiveWorld.of(config, float(str(pick("cycle_s", config.interval_s))),
                         float(str(pick("defer_window_s", config.defer_window_s))))
    finetune = FinetuneSettings(
        iterations=int(str(pick("iterations", config.retrain_iterations))),
        episodes_per_iteration=int(str(pick("episodes", config.retrain_episodes))),
        workers=int(str(options["workers"])), seed=int(str(options["seed"])), world=world)
    gate = GateSettings(
        margin=float(str(pick("margin", config.retrain_margin))),
        fee_tolerance=float(str(pick("fee_tolerance", config.retrain_fee_tolerance))),
        wait_tolerance=float(str(pick("wait_tolerance", config.retrain_wait_tolerance))),
        seeds=int(str(pick("gate_seeds", config.retrain_gate_seeds))), world=world)
    return replace(
        RetrainSettings(),
        window_days=float(str(pick("window_days", config.retrain_window_days))),
        cluster=options.get("cluster") or config.cluster_name or None,  # type: ignore[arg-type]
        repeats=int(str(options["repeats"])), finetune=finetune, gate=gate,
        policy=str(pick("policy", config.policy)),
        policy_bundle=pick("policy_bundle", config.policy_bundle),  # type: ignore[arg-type]
        base_bundle=pick("base_bundle", config.retrain_base_bundle),  # type: ignore[arg-type]
        candidate=options.get("candidate"),  # type: ignore[arg-type]
        cache_dir=pick("cache_dir", config.models_cache),  # type: ignore[arg-type]
        promote=not options.get("no_promote"),
    )


def main() -> None:
    """``python -m slurm_rl.cli.retrain``: :data:`retrain_command`, errors as one line."""
    try:
        retrain_command.main(standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except SlurmRLError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
