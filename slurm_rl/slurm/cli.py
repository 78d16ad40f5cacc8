"""``slurm-rl devcluster up|down|status|env``: the native development Slurm cluster.

Exported as :data:`devcluster_group`; the main CLI registers it. Errors reach the user as
one line (``SlurmRLError``), never a traceback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import click

from slurm_rl.cli_options import FiniteFloat
from slurm_rl.errors import SlurmRLError
from slurm_rl.slurm.devcluster import DevCluster, DevClusterStatus
from slurm_rl.slurm.devconf import DEFAULT_BASE_PORT, DEFAULT_ROOT, DevClusterConfig

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
    """Print the shell line that points Slurm clients at this cluster."""
    cluster = _cluster(root, base_port)
    click.echo(f"export SLURM_CONF={cluster.slurm_conf}")
