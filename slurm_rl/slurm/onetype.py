"""Keeping a request that names no GPU type on one type when Slurm picks its nodes.

A job the daemon releases without a pin (the policy placed it nowhere this cycle, or the
placement guard refused a node set) is placed by Slurm, which spreads an untyped
``--gpus=N`` over any nodes with room: the issue-19 load test measured 25 of 82 untyped
multi-node gangs on a100 and v100 at once, running at the slower type's pace. Slurm's
matching-OR constraint ``Features=[a100|v100]`` makes it take every node of the job from
one feature of the list (measured on Slurm 22.05.8: ``scontrol update`` sets it on a pending
job, squeue's JSON shows it as ``features``, ``Features=`` clears it). The daemon sets it,
unless ``allow_mixed_gpu_types``, on a released job that

* names no GPU type, asks for at least two GPUs and may span nodes (not ``-N 1``);
* has no constraint of its user's (a ``--constraint`` is never overwritten);
* can use nodes of more than one GPU type, each of which carries its GPU type as a node
  feature (``Feature=a100`` in slurm.conf); where one does not, the constraint cannot be
  written and the job is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from slurm_rl.slurm.records import SlurmJob, SlurmNode
from slurm_rl.slurm.source import in_partitions, node_gpus, to_core_job

FEATURES = "Features"


class OneType:
    """The constraint of each partition, worked out once per plan (a cycle may release
    hundreds of jobs on thousands of nodes)."""

    def __init__(self, nodes: Sequence[SlurmNode]) -> None:
        self.nodes = nodes
        self._by_partitions: dict[str, str | None] = {}

    def constraint(self, job: SlurmJob) -> str | None:
        """The ``Features`` value that keeps ``job`` on one GPU type (its current one, when
        the daemon set it already), or None when it needs none or none can be written."""
        core = to_core_job(job)
        if core is None or core.gpu_type or core.num_gpus < 2 or core.num_nodes == 1:
            return None
        if job.partition not in self._by_partitions:
            self._by_partitions[job.partition] = _constraint(job.partition, self.nodes)
        value = self._by_partitions[job.partition]
        if value is None or (job.features and job.features != value):
            return None  # a constraint of the user's stays as it is
        return value


def _constraint(partition: str, nodes: Iterable[SlurmNode]) -> str | None:
    partitions = tuple(partition.split(","))
    types: set[str] = set()
    for node in nodes:
        gpu_type, total, _ = node_gpus(node)
        if total <= 0 or not in_partitions(node.partitions, partitions):
            continue
        if gpu_type.lower() not in {feature.lower() for feature in node.features}:
            return None  # Slurm could not tell this node's type from its features
        types.add(gpu_type)
    return "[" + "|".join(sorted(types)) + "]" if len(types) > 1 else None
