"""Pending jobs that Slurm will not start whatever a scheduler decides: they are set aside.

A job held by its user or an admin, one waiting on a dependency, one whose user asked for a
later ``--begin``, one that asks for a reservation (slurm_rl/slurm/reservations.py), or one
blocked by an association/QOS limit or by its partition's state is
not the agents' to order or place: a placement given to it would hold GPUs in the decision
that no job uses, and a pin set on it now (Slurm 22.05.8 accepts ``ReqNodeList`` and
``StartTime`` on a held job, rc 0) would tie it to nodes chosen long before it can run. The
snapshot leaves such jobs out; Slurm starts them by its own rules once what they wait on is
gone, or, for a deferred job, the next cycle sees it pending for resources and orders it.
Nor is a job whose ``ReqNodeList`` slurm-rl did not set (``nodelist``: the user's
``--nodelist``, slurm_rl/slurm/ownership.py): a pin would overwrite the user's choice, so
Slurm starts it on those nodes by its own rules (a deferred one when its window ends).

Measured on Slurm 22.05.8 (``squeue --json``): a job submitted with ``--dependency`` shows
``state_reason`` ``Dependency`` at once, also while the plugin's deferral window runs
(``DependencyNeverSatisfied`` once the parent failed); ``--hold`` gives ``priority`` 0 and
``JobHeldUser`` (also with a dependency); a user's future ``--begin`` shows ``BeginTime``
with no deferral tag in ``admin_comment``. Jobs pending for nodes that went down
(``ReqNodeNotAvail``) stay in when the pin is the daemon's own: it set that pin and is the
one to change it. A pin that can never hold (``BadConstraints``) also makes Slurm set the
job's priority to 0, so such a job is set aside as held, even under the daemon's own pin;
the actuator never sends such a pin (slurm_rl/slurm/eligibility.py), so only a change to
the nodes' partitions or features after the pin leaves one, and the actuator then clears
its own pin (``unpin``, slurm_rl/slurm/plan.py ``stranded_pins``): the next cycle sees the
job pending again.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from slurm_rl.slurm.deferral import begin_is_ours
from slurm_rl.slurm.records import SlurmJob

HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})
BAD_CONSTRAINTS = "BadConstraints"  # a pin that can never hold: priority 0, for good
DEPENDENCY_REASONS = frozenset({"Dependency", "DependencyNeverSatisfied"})
# The job's request does not fit its partition, account or QOS as configured now.
CONFIG_REASONS = frozenset({
    "PartitionDown", "PartitionInactive", "PartitionConfig", "PartitionNodeLimit",
    "PartitionTimeLimit", "AccountNotAllowed", "InvalidAccount", "Reservation",
    "AccountingPolicy",
})
# Association and QOS limits (AssocGrpGRES, QOSMaxGRESPerUser, ...), per-account QOS limits.
LIMIT_PREFIXES = ("Assoc", "QOS")
LIMIT_SUFFIX = "PerAccount"

WAIT_KINDS = ("held", "dependency", "begin_time", "reservation", "limit", "configuration",
              "nodelist")


def waits_on(job: SlurmJob, now: float,
             pin_is_ours: Callable[[SlurmJob], bool] | None = None,
             defer_cap_s: float = math.inf) -> str | None:
    """What a pending job waits on that no scheduling decision can change (one of
    :data:`WAIT_KINDS`), or None when it is the scheduler's to start. ``pin_is_ours`` tells
    whether the job's ``ReqNodeList`` is one slurm-rl set; without it, none is.
    ``defer_cap_s``: the daemon never defers a job past its submission plus this, so a
    later begin on a deferred job is its user's (:func:`begin_is_ours`)."""
    reason = job.reason
    if job.priority == 0 or reason in HELD_REASONS:
        return "held"
    if reason in DEPENDENCY_REASONS:
        return "dependency"
    if _users_begin_time(job, now, defer_cap_s):
        return "begin_time"
    if job.reservation:  # only its reservation's nodes, which no agent offers
        return "reservation"
    if reason.startswith(LIMIT_PREFIXES) or (reason.startswith("Max")
                                              and reason.endswith(LIMIT_SUFFIX)):
        return "limit"
    if reason in CONFIG_REASONS:
        return "configuration"
    if job.required_nodes and not (pin_is_ours is not None and pin_is_ours(job)):
        return "nodelist"
    return None


def _users_begin_time(job: SlurmJob, now: float, defer_cap_s: float) -> bool:
    """A begin time in the future that neither the plugin nor the daemon set: the user's."""
    if job.eligible_time is None or job.eligible_time <= now:
        return False
    return job.reason == "BeginTime" and not begin_is_ours(job, defer_cap_s)
