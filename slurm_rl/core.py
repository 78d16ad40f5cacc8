"""Core types shared by the simulator and the live daemon.

Every type here is immutable. A :class:`ClusterSnapshot` is what a policy sees; a
:class:`Decision` is what it returns. The simulator (``TraceSource``/``SimActuator``) and the
daemon (``SlurmSource``/``SlurmActuator``) produce and consume exactly these types, so a policy
cannot tell which world it runs in.

Units: times are seconds (float) on one clock per world (trace epoch seconds in the simulator,
Unix time live); durations are seconds; prices are per GPU-hour.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NoReturn, TypeVar

import numpy as np

JobId = str
# The largest price per GPU-hour a cluster spec or the daemon's config accepts: generous for
# any currency or internal unit, far below where fees overflow to inf (a retrain writes the
# daemon's prices into a cluster spec, so both check against this one number).
MAX_PRICE_PER_GPU_HOUR = 1e9
K = TypeVar("K")
V = TypeVar("V")


class FrozenDict(dict[K, V]):
    """A read-only dict that still pickles (the simulator replays in worker processes)."""

    def _readonly(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("FrozenDict is read-only")

    __setitem__ = __delitem__ = _readonly
    clear = pop = popitem = setdefault = update = _readonly
    __ior__ = _readonly

    def __reduce__(self) -> tuple[type[FrozenDict[K, V]], tuple[dict[K, V]]]:
        return (type(self), (dict(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


@dataclass(frozen=True, slots=True)
class Node:
    """A machine: its GPU type and count, the host group it sits in, and its price."""

    name: str
    gpu_type: str
    gpus: int
    host_group: str = ""
    price_per_gpu_hour: float = 0.0


@dataclass(frozen=True)
class Cluster:
    """The static description of a cluster: its nodes, in a fixed order."""

    name: str
    nodes: tuple[Node, ...]
    _index: Mapping[str, int] = field(init=False, repr=False, compare=False)
    _of_type: Mapping[str, frozenset[int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index = {node.name: i for i, node in enumerate(self.nodes)}
        if len(index) != len(self.nodes):
            raise ValueError(f"cluster {self.name!r} has duplicate node names")
        object.__setattr__(self, "_index", FrozenDict(index))
        # Placement asks "which nodes have this type?" for every job of every cycle.
        of_type: dict[str, set[int]] = {}
        for i, node in enumerate(self.nodes):
            of_type.setdefault(node.gpu_type.lower(), set()).add(i)
        object.__setattr__(self, "_of_type",
                           FrozenDict({t: frozenset(ix) for t, ix in of_type.items()}))

    def nodes_of_type(self, gpu_type: str) -> frozenset[int]:
        """Indices of the nodes whose GPU type is ``gpu_type`` (case-insensitive)."""
        return self._of_type.get(gpu_type.lower(), frozenset())

    def index(self, node_name: str) -> int:
        return self._index[node_name]

    def has_node(self, node_name: str) -> bool:
        return node_name in self._index

    @property
    def total_gpus(self) -> int:
        return sum(node.gpus for node in self.nodes)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({node.gpu_type for node in self.nodes}))


@dataclass(frozen=True, slots=True)
class Job:
    """A GPU job as submitted: a gang of ``num_gpus`` GPUs that must all start together.

    ``num_nodes`` and ``gpus_per_node`` are the shape the user asked for (``None`` = any
    shape, as with Slurm's ``--gpus=N``). ``oracle_duration`` is the run time on the trace's
    reference hardware; only the simulator knows it, and a policy that reads it is an oracle.
    ``model_family`` is the job class the performance model uses (empty when unknown, live).
    ``checkpointable``: the job saves checkpoints and agreed to be requeued, so a scheduler may
    move it while it runs (:attr:`Decision.migrations`); live it opts in, in a replay the
    scenario says.
    """

    job_id: JobId
    submit_time: float
    num_gpus: int
    user: str = ""
    partition: str = ""
    num_nodes: int | None = None
    gpus_per_node: int | None = None
    gpu_type: str | None = None
    time_limit: float | None = None
    model_family: str = ""
    oracle_duration: float | None = None
    checkpointable: bool = False
    nice: int = 0  # the user's --nice: positive asks to run later (a policy may weigh it)


@dataclass(frozen=True, slots=True)
class Placement:
    """A gang placement: ``gpus[i]`` GPUs on node ``nodes[i]`` (node names, no repeats)."""

    nodes: tuple[str, ...]
    gpus: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.nodes) != len(self.gpus):
            raise ValueError("placement nodes and gpus differ in length")
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"placement repeats a node: {self.nodes}")

    @classmethod
    def even(cls, nodes: tuple[str, ...], total: int) -> Placement:
        """``total`` GPUs over ``nodes`` as evenly as possible (the first nodes get more):
        where a job ran when Slurm does not say how many GPUs it had on each node."""
        base, extra = divmod(total, len(nodes))
        return cls(nodes, tuple(base + (1 if i < extra else 0) for i in range(len(nodes))))

    @property
    def num_gpus(self) -> int:
        return sum(self.gpus)

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)


def placement_fits_shape(job: Job, placement: Placement) -> bool:
    """True when ``placement`` gives ``job`` exactly the GPUs and shape it asked for."""
    if placement.num_gpus != job.num_gpus:
        return False
    if job.num_nodes is not None and placement.num_nodes != job.num_nodes:
        return False
    if job.gpus_per_node is not None:
        return all(g == job.gpus_per_node for g in placement.gpus)
    return all(g > 0 for g in placement.gpus)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A started job; ``start_time`` is when it started on ``placement`` (after a migration,
    when it restarted there)."""

    job: Job
    start_time: float
    placement: Placement

    @property
    def limit_end(self) -> float | None:
        """When the job's time limit runs out (what Slurm's backfill plans with)."""
        if self.job.time_limit is None:
            return None
        return self.start_time + self.job.time_limit


@dataclass(frozen=True, slots=True)
class FinishedJob:
    job: Job
    start_time: float
    end_time: float
    placement: Placement
    state: str = "COMPLETED"
    exit_code: int | None = None


@dataclass(frozen=True, slots=True)
class SpeedObservation:
    """A measured speed of a job class on a set of machines.

    ``relative_speed`` is the observed throughput divided by the nominal throughput of that
    job class on that GPU type (1.0 = as fast as the type should be; a straggler is < 1).
    For a multi-node job it is the pace of the slowest member.
    """

    time: float
    nodes: tuple[str, ...]
    job_class: str
    relative_speed: float


@dataclass(frozen=True)
class PendingColumns:
    """Numeric columns of the pending jobs, aligned with ``ClusterSnapshot.pending``, so that
    policies can score long queues with array operations (NaN where a value is unknown)."""

    submit_time: np.ndarray
    num_gpus: np.ndarray
    time_limit: np.ndarray
    oracle_duration: np.ndarray

    @classmethod
    def from_jobs(cls, jobs: Sequence[Job]) -> PendingColumns:
        def column(values: Iterable[float | None]) -> np.ndarray:
            array = np.array([math.nan if v is None else v for v in values], dtype=float)
            array.setflags(write=False)
            return array

        return cls(
            submit_time=column(j.submit_time for j in jobs),
            num_gpus=column(j.num_gpus for j in jobs),
            time_limit=column(j.time_limit for j in jobs),
            oracle_duration=column(j.oracle_duration for j in jobs),
        )


@dataclass(frozen=True)
class ClusterSnapshot:
    """What a policy sees at one decision point.

    ``free_gpus[i]`` is the number of idle, usable GPUs on ``cluster.nodes[i]`` (0 for a node
    that is down or drained). ``pending`` is in submit order. ``finished`` and
    ``observations`` hold what happened since the previous snapshot.
    """

    time: float
    cluster: Cluster
    free_gpus: tuple[int, ...]
    pending: tuple[Job, ...]
    running: tuple[RunningJob, ...] = ()
    finished: tuple[FinishedJob, ...] = ()
    observations: tuple[SpeedObservation, ...] = ()
    precomputed_columns: PendingColumns | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.free_gpus) != len(self.cluster.nodes):
            raise ValueError("free_gpus does not match the cluster's nodes")

    @cached_property
    def columns(self) -> PendingColumns:
        """The pending jobs' numeric columns (supplied by the source, or built on first use)."""
        return self.precomputed_columns or PendingColumns.from_jobs(self.pending)


@dataclass(frozen=True)
class Decision:
    """What a scheduler wants, applied by exactly one actuator.

    ``ranking`` lists the pending jobs released to start, best first. Of these only the
    *promoted* ones (:attr:`promoted`: the ones it starts now, ``placements``, and the ones
    the fairness guard brought forward, ``forward``) get Slurm priorities, above every other
    job's, in ranking order; every other released job starts by Slurm's own priority (the
    site's multifactor, ties by submit time) whenever Slurm finds it room (docs/fairness.md,
    "Which jobs get a priority").
    ``placements`` pins jobs to node sets, listed in the order the jobs should start (a
    placement for a job that is not ranked is ignored by every actuator). ``holds`` lists
    further jobs to keep deferred. A pending job in neither list is left to the resource
    manager: it starts by Slurm's own priority once its deferral window runs out. ``scores``
    holds the score behind each ranked job, aligned with ``ranking``, for the audit trail
    (empty when there are none). ``exclusions`` names, for a released job *without* a
    placement, nodes the resource manager must not give it (Slurm's ``ExcNodeList``): Slurm's
    own choice of nodes then stays off nodes the placement judged far too slow for it.
    Actuators ignore it for a placed job. ``migrations`` moves running, checkpointable jobs:
    each is requeued (it restarts from its last checkpoint) and pinned to the given node set,
    which must be free now and not given to a placement of this decision. ``forward`` lists
    the ranked jobs the fairness guard brought forward (slurm_rl/fairness.py): an actuator
    that rations priority changes keeps the last one of a job for them.
    """

    policy_id: str
    ranking: tuple[JobId, ...]
    placements: Mapping[JobId, Placement] = field(default_factory=dict)
    scores: tuple[float, ...] = ()
    holds: tuple[JobId, ...] = ()
    exclusions: Mapping[JobId, tuple[str, ...]] = field(default_factory=dict)
    migrations: Mapping[JobId, Placement] = field(default_factory=dict)
    forward: tuple[JobId, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "placements", FrozenDict(self.placements))
        object.__setattr__(self, "exclusions", FrozenDict(self.exclusions))
        object.__setattr__(self, "migrations", FrozenDict(self.migrations))
        if self.scores and len(self.scores) != len(self.ranking):
            raise ValueError("scores must be empty or aligned with ranking")

    @property
    def promoted(self) -> frozenset[JobId]:
        """The jobs this decision starts now or brings forward (class docstring)."""
        return frozenset(self.placements) | frozenset(self.forward)

    def nodes_for(self, job_id: JobId) -> Placement | None:
        """Where the decision sends ``job_id``: its placement, or the node set it moves to."""
        return self.placements.get(job_id) or self.migrations.get(job_id)
