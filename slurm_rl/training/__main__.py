"""``python -m slurm_rl.training train|evaluate``: the two commands, until ``slurm-rl`` itself
registers them (``slurm_rl/cli.py``)."""

from __future__ import annotations

import click

from slurm_rl.cli import FriendlyGroup
from slurm_rl.training.cli import evaluate_command, train_command


@click.group(cls=FriendlyGroup)
def main() -> None:
    """Train and evaluate the dual agent."""


main.add_command(train_command)
main.add_command(evaluate_command)

if __name__ == "__main__":
    main()
