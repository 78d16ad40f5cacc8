"""``slurm-rl daemon``: run the scheduling daemon beside slurmctld.

Exported as :data:`daemon_command`; the main CLI registers it. ``python -m slurm_rl.cli.daemon``
runs the same command. Errors reach the user as one line, never a traceback.
"""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path

import click

from slurm_rl.agents.names import naming_help
from slurm_rl.cli.options import FiniteFloat
from slurm_rl.config import DaemonConfig, config_path, load_config
from slurm_rl.daemon.runner import Daemon
from slurm_rl.errors import SlurmRLError

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The actuator logs every scontrol call at INFO; the daemon's one line per cycle sums them up.
CHATTY_LOGGERS = ("slurm_rl.slurm.actuator",)


DECISIONS_LOGGER = "slurm_rl.decisions"


def configure_logging(config: DaemonConfig) -> None:
    """Log to stdout at the config's level (called again after every reload); decisions go
    to stdout as bare JSON lines (one per stored decision) when ``log_json`` is on."""
    level = getattr(logging, config.log_level.upper())
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(stream=sys.stdout, format=LOG_FORMAT)
    root.setLevel(level)
    decisions = logging.getLogger(DECISIONS_LOGGER)
    if not decisions.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        decisions.addHandler(handler)
        decisions.propagate = False
    decisions.setLevel(logging.INFO if config.log_json else logging.WARNING)
    chatty = logging.DEBUG if level <= logging.DEBUG else logging.WARNING
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(chatty)


@click.command("daemon")
@click.option("--config", "config_file", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="TOML file; the daemon reads its [daemon] table (re-read on SIGHUP) "
                   "[default: $SLURM_RL_CONFIG, else /etc/slurm-rl/slurm-rl.toml if it exists].")
@click.option("--policy", default=None, help=f"{naming_help(live=True)}.")
@click.option("--mode", type=click.Choice(["shadow", "advise", "enforce"]), default=None,
              help="shadow: change nothing; advise: order only; enforce: order and place.")
@click.option("--once", is_flag=True, help="Run one cycle and exit (1 if it was skipped).")
@click.option("--dry-run", is_flag=True, default=None,
              help="Plan as the mode would, send nothing to Slurm (the shadow actuator).")
@click.option("--store", "store_url", default=None,
              help="SQLAlchemy URL of the store [default: SQLite under the state dir].")
@click.option("--interval", "interval_s", type=FiniteFloat(min=0.01, min_open=False),
              default=None, help="Seconds from one cycle to the next [default: 5].")
def daemon_command(
    config_file: Path | None,
    policy: str | None,
    mode: str | None,
    once: bool,
    dry_run: bool | None,
    store_url: str | None,
    interval_s: float | None,
) -> None:
    """Order and place pending GPU jobs on this Slurm cluster, and record everything.

    Settings come from the defaults, then the config file, then SLURM_RL_* variables, then
    these options. SIGTERM finishes
    the running cycle and exits; SIGHUP reloads the config and the policy.
    """
    overrides = {"policy": policy, "mode": mode, "dry_run": dry_run,
                 "store_url": store_url, "interval_s": interval_s}
    path = config_path(config_file)
    # Lines logged while the daemon is built (a policy fallback) get the usual format too.
    logging.basicConfig(stream=sys.stdout, format=LOG_FORMAT, level=logging.INFO)
    try:
        daemon = Daemon(lambda: load_config(path, overrides), on_config=configure_logging)
    except SlurmRLError as exc:
        raise click.ClickException(str(exc)) from exc
    # Modules, policy weights and the like live as long as the process: keep the collector
    # from walking them on every collection (they move to the permanent generation).
    gc.collect()
    gc.freeze()
    if once:
        result = daemon.run_once()
        daemon.close(retire=False)  # one cycle of a series (cron, tests): keep the beat
        sys.exit(0 if result.ok else 1)
    try:
        sys.exit(daemon.run())
    except SlurmRLError as exc:  # a Slurm release it cannot read: one line, no traceback
        raise click.ClickException(str(exc)) from exc


if __name__ == "__main__":
    daemon_command(prog_name="slurm-rl daemon")
