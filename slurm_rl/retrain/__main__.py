"""``python -m slurm_rl.retrain``: the same command as ``slurm-rl retrain`` (what the
daemon's scheduled job runs), with errors as one line and exit code 2."""

from __future__ import annotations

import sys

import click

from slurm_rl.errors import SlurmRLError
from slurm_rl.retrain.cli import retrain_command


def main() -> None:
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
