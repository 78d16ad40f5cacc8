"""Whether Slurm could ever run a job on a set of nodes: its partitions and its constraint.

A pin (``ReqNodeList``) that names a node outside the job's partitions, or one without a
feature the job's ``--constraint`` asks for, is accepted by ``scontrol update`` (exit 0);
Slurm's scheduler then finds the job can never run there and keeps it pending with
``Reason=BadConstraints`` and priority 0 for good (measured on Slurm 22.05.8, for a pending
job's pin and for a requeued job's). The policies know neither partitions nor features, so
the actuator checks every node set it would pin a job to, pending or moved, against what
Slurm shows now.

Constraints are read in the forms jobs use for GPU types: one feature, ``a&b`` (every
node has all), ``a|b`` (every node has one of them) and Slurm's matching OR ``[a|b]``
(every node has the same one: what :mod:`slurm_rl.slurm.onetype` writes). Anything else
(counts, parentheses, ``,``) is not read and counts as not met: a pin must never strand a
job, and without one Slurm chooses the nodes itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from slurm_rl.slurm.ownership import fold
from slurm_rl.slurm.records import SlurmJob, SlurmNode

_NAME = r"[\w.-]+"
_ALL = re.compile(rf"{_NAME}(&{_NAME})*")
_ANY = re.compile(rf"{_NAME}(\|{_NAME})+")
_MATCHING = re.compile(rf"\[{_NAME}(\|{_NAME})*\]")


def satisfies(constraint: str, features: Sequence[str]) -> bool:
    """Whether one node with ``features`` meets ``constraint`` (:func:`constraint_met` for a
    node set)."""
    return constraint_met(constraint, [features])


def constraint_met(constraint: str, nodes_features: Sequence[Sequence[str]]) -> bool:
    """Whether nodes with these features together meet a ``--constraint`` (the forms read
    are in the module's docstring; any other counts as not met)."""
    have = [set(features) for features in nodes_features]
    if _ALL.fullmatch(constraint):
        wanted = set(constraint.split("&"))
        return all(wanted <= node for node in have)
    if _ANY.fullmatch(constraint):
        options = set(constraint.split("|"))
        return all(options & node for node in have)
    if _MATCHING.fullmatch(constraint):
        return any(all(option in node for node in have)
                   for option in constraint[1:-1].split("|"))
    return False


def node_conflict(job: SlurmJob, nodes: Sequence[str],
                  known: Mapping[str, SlurmNode]) -> str | None:
    """Why Slurm would never run ``job`` on ``nodes`` (None: it could): a node outside its
    partitions, or nodes its constraint does not hold on, as Slurm shows them (``known``,
    by name). A node Slurm does not show counts as outside every partition."""
    partitions = {p for p in job.partition.split(",") if p}
    if partitions:
        outside = [n for n in nodes if n not in known
                   or not partitions & set(known[n].partitions)]
        if outside:
            return f"{fold(outside)} not in its partition {job.partition}"
    if job.features and not constraint_met(
            job.features, [known[n].features if n in known else () for n in nodes]):
        return f"--constraint={job.features} does not hold on {fold(nodes)} " \
            "(or cannot be checked)"
    return None
