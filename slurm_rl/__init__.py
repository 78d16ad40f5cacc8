"""slurm-rl: a dual-agent (ordering + placement) scheduler for GPU jobs on Slurm."""

__version__ = "0.1.0"
