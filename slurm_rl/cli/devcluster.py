"""``slurm-rl devcluster up|down|status|env``: the native development Slurm cluster.

Exported as :data:`devcluster_group`; the main CLI registers it. Errors reach the user as
one line (``SlurmRLError``), never a traceback.
"""

from __future__ import annotations

import pwd
import shlex
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import click

from slurm_rl.cli.options import FiniteFloat
from slurm_rl.devcluster.cluster import DevCluster, DevClusterStatus
from slurm_rl.devcluster.config import DEFAULT_BASE_PORT, DEFAULT_ROOT, DevClusterConfig
from slurm_rl.errors import SlurmRLError
from slurm_rl.slurm import deferral

F = TypeVar("F", bound=Callable[..., object])


def _cluster_options(func: F) -> F:
    options = [
        click.option(
            "--root",
            type=click.Path(file_okay=False, path_type=Path),
            default=DEFAULT_ROOT,
            show_default=True,
            help="Directory holding the cluster's configs, state, logs and sockets.",
        ),
        click.option(
            "--base-port",
            type=click.IntRange(1024, 65000),
            default=DEFAULT_BASE_PORT,
            show_default=True,
            help="slurmctld port; node i listens on base+1+i.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _cluster(root: Path, base_port: int, window: int | None = None) -> DevCluster:
    config = DevClusterConfig(root=root.resolve(), base_port=base_port)
    if window is not None:
        config = replace(config, deferral_window_s=window)
    return DevCluster(config)


def _echo_status(cluster: DevCluster, status: DevClusterStatus) -> None:
    click.echo(f"root: {status.root}")
    for daemon in status.daemons:
        click.echo(f"  {daemon.name:<16} {'pid ' + str(daemon.pid) if daemon.alive else 'stopped'}")
    for name, state in status.node_states:
        click.echo(f"  node {name:<11} {state}")
    if status.running:
        click.echo(f"export SLURM_CONF={cluster.slurm_conf}")


def _run(action: Callable[[], None]) -> None:
    try:
        action()
    except SlurmRLError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group("devcluster")
def devcluster_group() -> None:
    """A real Slurm 22.05 cluster on this machine (needs root): 4 x a100:8 + 4 x v100:4."""


@devcluster_group.command("up")
@_cluster_options
@click.option(
    "--window",
    type=click.IntRange(1, 3600),
    default=None,
    help="Deferral window (s) of the job_submit plugin [default: 10].",
)
@click.option("--timeout", type=FiniteFloat(min=0.0, min_open=True), default=60.0,
              show_default=True)
def up(root: Path, base_port: int, window: int | None, timeout: float) -> None:
    """Install Slurm if needed and start munged, slurmctld and the slurmds."""
    cluster = _cluster(root, base_port, window)

    def action() -> None:
        started = time.monotonic()
        status = cluster.up(timeout_s=timeout)
        _echo_status(cluster, status)
        click.echo(f"up in {time.monotonic() - started:.2f} s")
        _warn_if_untrusted(cluster)

    _run(action)


@devcluster_group.command("down")
@_cluster_options
def down(root: Path, base_port: int) -> None:
    """Cancel all jobs and stop every daemon of the cluster."""
    cluster = _cluster(root, base_port)

    def action() -> None:
        started = time.monotonic()
        cluster.down()
        click.echo(f"stopped in {time.monotonic() - started:.2f} s")

    _run(action)


@devcluster_group.command("status")
@_cluster_options
def status(root: Path, base_port: int) -> None:
    """Show which daemons run and the state of each node."""
    cluster = _cluster(root, base_port)
    _run(lambda: _echo_status(cluster, cluster.status()))


@devcluster_group.command("env")
@_cluster_options
def env(root: Path, base_port: int) -> None:
    """Print the shell lines that point Slurm's commands, and a daemon, at this cluster:
    SLURM_CONF and, once `up` has written the job_submit plugin's config, the heartbeat,
    window and partitions the plugin reads."""
    cluster = _cluster(root, base_port)
    for name, value in daemon_env(cluster).items():
        click.echo(f"export {name}={shlex.quote(value)}")
    _warn_if_untrusted(cluster)


# The daemon's settings (SLURM_RL_<FIELD>, docs/operations.md) for the plugin's keys.
_PLUGIN_KEYS = {"heartbeat_path": "SLURM_RL_HEARTBEAT_PATH",
                "heartbeat_max_age": "SLURM_RL_HEARTBEAT_MAX_AGE_S",
                "window": "SLURM_RL_DEFER_WINDOW_S", "partitions": "SLURM_RL_PARTITIONS"}


def daemon_env(cluster: DevCluster) -> dict[str, str]:
    """SLURM_CONF, and the daemon's settings that must agree with what the cluster's plugin
    reads: a daemon left at its defaults beats ``<state_dir>/heartbeat``, which the plugin
    never looks at, so it defers nothing. Read from the plugin's config file (``up
    --window`` is in it); before the first ``up`` there is none, and nothing to agree with."""
    conf = cluster.slurm_conf.parent / deferral.CONF_NAME
    if not conf.is_file():  # is_file also keeps a FIFO someone put there from blocking us
        return cluster.env()
    view = deferral.plugin_view(conf)
    found = {name: view[key] for key, name in _PLUGIN_KEYS.items()}
    if found["SLURM_RL_PARTITIONS"] == "*":
        found["SLURM_RL_PARTITIONS"] = ""  # empty is ignored: the daemon's default, all of them
    return {**cluster.env(), **found}


def _warn_if_untrusted(cluster: DevCluster) -> None:
    """The plugin reads its config and the heartbeat only below directories of root or
    SlurmUser (docs/operations.md, "Trust model"); a root under a user's home directory
    fails that, and the cluster then defers no job. Said on stderr: ``eval "$(... env)"``
    reads stdout only."""
    trusted = frozenset({0, pwd.getpwnam(cluster.config.slurm_user).pw_uid})
    conf = cluster.slurm_conf.parent / deferral.CONF_NAME
    refusal = deferral.plugin_refuses(conf, trusted)
    if refusal is not None:
        click.echo(f"warning: the cluster's job_submit plugin will not read {conf}: {refusal}, "
                   "so it defers no job; fix: a --root whose every directory above belongs "
                   "to root, e.g. /var/tmp/slurm-rl-dev", err=True)
