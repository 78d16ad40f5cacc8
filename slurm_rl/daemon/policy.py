"""Moved to :mod:`slurm_rl.live_policy` (issue 20: ops and retrain build the live policy too,
and importing it from the daemon made the packages import each other).

Kept only for importers outside ``slurm_rl/`` that other engineers were editing when it moved
(``tests/slurm/replay.py``, ``tests/slurm/load.py``, ``benchmarks/daemon_cycle.py``); delete
this file once they import :mod:`slurm_rl.live_policy`.
"""

from slurm_rl.live_policy import (
    FALLBACK_POLICY,
    PolicyBundleError,
    check_name,
    gpu_speeds,
    is_learned,
    make_policy,
)

__all__ = ["FALLBACK_POLICY", "PolicyBundleError", "check_name", "gpu_speeds", "is_learned",
           "make_policy"]
