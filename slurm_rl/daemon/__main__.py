"""``python -m slurm_rl.daemon``: the same command as ``slurm-rl daemon``."""

from __future__ import annotations

from slurm_rl.daemon.cli import daemon_command

if __name__ == "__main__":
    daemon_command(prog_name="slurm-rl daemon")
