"""Moved to :mod:`slurm_rl.config`, the site config's one home (issue 20: ops, retrain and the
store commands read it too, and importing it from the daemon made the packages import each
other).

Kept only for importers outside ``slurm_rl/`` that other engineers were editing when it moved
(``tests/slurm/load_checks.py``, ``tests/slurm/replay.py``, ``tests/slurm/load.py``,
``benchmarks/daemon_cycle.py``); delete this file once they import :mod:`slurm_rl.config`.
"""

from slurm_rl.config import STORE_FILE, DaemonConfig, load_config

__all__ = ["STORE_FILE", "DaemonConfig", "load_config"]
