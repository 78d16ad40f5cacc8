"""What of the site config does not match the cluster Slurm shows: said at the daemon's
start and by ``slurm-rl selftest``, since each one silently changes what the daemon does.

* a managed partition no node is in: the daemon manages nothing there (a typo manages
  nothing at all, with no cycle line);
* a ``price_per_gpu_hour`` key that names no GPU type Slurm reports (case is ignored): those
  nodes cost 0, cheapest-gpu has nothing to rank by and every recorded fee is 0;
* a GPU type the performance model does not know (NVML's auto-detected names such as
  ``nvidia_a100-sxm4-80gb``): fastest-gpu ranks it last and the learned policies take it
  for a V100.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurm_rl.errors import UnknownNameError
from slurm_rl.simulator.perfmodel import PerformanceModel
from slurm_rl.slurm.gres import gpu_counts
from slurm_rl.slurm.records import SlurmNode


def site_problems(nodes: Sequence[SlurmNode], partitions: Sequence[str],
                  prices: Mapping[str, float]) -> list[str]:
    """One line for each mismatch between the site config and ``nodes`` (the GPU nodes)."""
    gpu_nodes = [node for node in nodes if sum(c.count for c in gpu_counts(node.gres)) > 0]
    shown = sorted({p for node in gpu_nodes for p in node.partitions})
    types: dict[str, str] = {}  # GPU type (lower case) -> a node that has it
    for node in gpu_nodes:
        for count in gpu_counts(node.gres):
            types.setdefault((count.gpu_type or "gpu").lower(), node.name)
    problems = [f"partitions: {p!r} is not a partition of this cluster's GPU nodes (Slurm "
                f"shows: {', '.join(shown) or 'none'}); the daemon manages no job there"
                for p in partitions if p not in shown]
    unpriced = sorted(key for key in prices if key.lower() not in types)
    if unpriced:
        problems.append(f"price_per_gpu_hour: {', '.join(unpriced)} match no GPU type Slurm "
                        f"reports ({', '.join(sorted(types))}); those prices are not used")
    problems += [f"GPU type {gpu_type!r} (node {node}) is unknown to the performance model: "
                 "fastest-gpu ranks it last and a learned policy takes it for a V100"
                 for gpu_type, node in sorted(types.items()) if not _known(gpu_type)]
    return problems


def _known(gpu_type: str) -> bool:
    try:
        PerformanceModel.default().canonical_gpu_type(gpu_type)
    except UnknownNameError:
        return False
    return True
