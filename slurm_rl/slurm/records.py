"""Version-neutral records of what Slurm reports about jobs and nodes.

The JSON layouts differ between Slurm releases (openapi/v0.0.38 in 22.05; data_parser
v0.0.39+ in 23.02 and later); :mod:`slurm_rl.slurm.parse` turns each into these records so
nothing above it knows which version answered.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, cast

# Base job states in which a job holds no resources and will not run again.
FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
# States in which a job occupies its nodes.
ACTIVE_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STAGE_OUT"})
PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
KNOWN_JOB_STATES = (
    FINISHED_STATES
    | ACTIVE_STATES
    | PENDING_STATES
    | {
        "RESIZING",
        "REVOKED",
        "SIGNALING",
        "SPECIAL_EXIT",
        "RESV_DEL_HOLD",
        "STOPPED",
        "UPDATE_DB",
        "LAUNCH_FAILED",
        "RECONFIG_FAIL",
        "POWER_UP_NODE",
    }
)

# A job opts in to being moved (requeued, restarted from its checkpoint elsewhere) with this
# word in its --comment, on top of being requeueable (--requeue or JobRequeue=1).
CHECKPOINT_TAG = "slurm-rl:checkpoint"

# Node states (base or flag, upper case) in which no new job can start on the node.
UNUSABLE_NODE_STATES = frozenset(
    {
        "DOWN",
        "DRAIN",
        "DRAINED",
        "DRAINING",
        "FAIL",
        "FAILING",
        "ERROR",
        "FUTURE",
        "INVAL",
        "INVALID",
        "INVALID_REG",
        "MAINTENANCE",
        "MAINT",
        "NOT_RESPONDING",
        "NO_RESPOND",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "POWER_DOWN",
        "POWERING_UP",
        "REBOOT_ISSUED",
        "REBOOT_REQUESTED",
        "RESERVED",
        "UNKNOWN",
    }
)


@dataclass(frozen=True, slots=True)
class SlurmMeta:
    """Which Slurm answered and with which JSON layout (e.g. ``openapi/v0.0.38``)."""

    version: tuple[int, int, int]
    data_format: str
    cluster: str = ""

    @property
    def release(self) -> str:
        major, minor, micro = self.version
        return f"{major:02d}.{minor:02d}.{micro}"


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job as squeue reports it. Times are Unix seconds; None = not set."""

    job_id: str
    name: str
    user: str
    partition: str
    state: str
    state_flags: tuple[str, ...] = ()
    reason: str = ""
    priority: int | None = None
    submit_time: float | None = None
    eligible_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    time_limit_s: float | None = None
    node_count: int | None = None
    tasks: int | None = None
    nodes: tuple[str, ...] = ()
    required_nodes: tuple[str, ...] = ()
    # ExcNodeList: nodes the job must not get (a user's --exclude, or the actuator's).
    excluded_nodes: tuple[str, ...] = ()
    features: str = ""  # the job's --constraint expression, as Slurm shows it
    reservation: str = ""  # --reservation (squeue's resv_name)
    tres_per_node: str = ""
    tres_per_job: str = ""
    tres_per_task: str = ""
    gres_detail: tuple[str, ...] = ()
    admin_comment: str = ""
    comment: str = ""
    requeue: bool = False
    exit_code: int | None = None
    array_pending: bool = False
    het_job: bool = False
    # The user's --nice (Slurm subtracts it from the job's priority; admins may set it < 0).
    nice: int = 0

    @property
    def is_pending(self) -> bool:
        return self.state in PENDING_STATES

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES or "COMPLETING" in self.state_flags

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED_STATES and not self.is_active

    @property
    def checkpointable(self) -> bool:
        """Requeueable and tagged :data:`CHECKPOINT_TAG` in its comment: it may be moved."""
        return self.requeue and CHECKPOINT_TAG in self.comment.replace(",", " ").split()


def _unfrozen_twin(cls: type) -> type:
    """A dataclass with ``cls``'s fields, slots (so the same memory layout) and __init__,
    but not frozen: its __init__ stores each field directly."""
    fields = [(f.name, f.type, dataclasses.field(default=f.default,
                                                 default_factory=f.default_factory))
              for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(f"_Unfrozen{cls.__name__}", fields, slots=True,
                                      eq=False, repr=False, match_args=False)


_UnfrozenSlurmJob = _unfrozen_twin(SlurmJob)


def new_job(*values: Any) -> SlurmJob:
    """``SlurmJob(*values)`` in a sixth of the time (fields by position, in their order). A
    frozen dataclass's __init__ sets each of its 31 fields through ``object.__setattr__``
    (8 us a job on a slow core: 0.06 s of a 7,200-job daemon cycle); the unfrozen twin
    stores them as plain slots, then the object becomes the SlurmJob it is laid out as,
    frozen like any other."""
    job = _UnfrozenSlurmJob(*values)
    job.__class__ = SlurmJob
    return cast(SlurmJob, job)


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """One node: its states (upper case, base first), GRES strings and partitions."""

    name: str
    states: tuple[str, ...]
    gres: str
    gres_used: str
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        return not any(state in UNUSABLE_NODE_STATES for state in self.states)


def merge_partitions(nodes: list[SlurmNode]) -> tuple[SlurmNode, ...]:
    """sinfo lists a node once per partition; keep one record with all its partitions."""
    merged: dict[str, SlurmNode] = {}
    for node in nodes:
        seen = merged.get(node.name)
        if seen is None:
            merged[node.name] = node
            continue
        parts = seen.partitions + tuple(p for p in node.partitions if p not in seen.partitions)
        merged[node.name] = dataclasses.replace(seen, partitions=parts)
    return tuple(merged.values())


@dataclass(frozen=True, slots=True)
class JobsReport:
    meta: SlurmMeta
    jobs: tuple[SlurmJob, ...]
    # Records left out because a field could not be read: one line each, naming the job.
    unreadable: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodesReport:
    meta: SlurmMeta
    nodes: tuple[SlurmNode, ...]


def numeric_id(job_id: str) -> int:
    """Sort key for job ids (``123``, ``123_4``): by the number, not as text."""
    head = job_id.split("_")[0]
    return int(head) if head.isdigit() else 0
