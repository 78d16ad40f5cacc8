"""``SlurmSource``: a live :class:`~slurm_rl.core.ClusterSnapshot` from squeue and sinfo.

Only GPU jobs are ours: a job without a GPU request is ignored, and so is a node without
GPUs. With ``partitions`` set, only jobs and nodes in those partitions count. Finished jobs
come from squeue itself (slurmctld keeps them for ``MinJobAge`` seconds) and are reported
once each. Pending jobs that wait on something no decision changes (held, a dependency, a
user's ``--begin``, a reservation, a limit, a ``--nodelist`` slurm-rl did not set:
:mod:`slurm_rl.slurm.waiting`) are left out of the snapshot and listed in
:attr:`SlurmSource.set_aside`; a running job pinned by someone else is not checkpointable in
the snapshot, so no policy moves it. Which pins are slurm-rl's own, the source learns from
the pin ledger it is given (:mod:`slurm_rl.slurm.ownership`; the daemon gives the actuator
the same one). :meth:`SlurmSource.observe` hands the actuator, through the shared loop, the
raw state the snapshot was built from (:class:`SlurmState`, the loop's context). A node an
active reservation holds offers no free GPUs (:mod:`slurm_rl.slurm.reservations`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from slurm_rl.core import (
    Cluster,
    ClusterSnapshot,
    FinishedJob,
    FrozenDict,
    Job,
    Node,
    Placement,
    RunningJob,
)
from slurm_rl.loop import Observed
from slurm_rl.slurm.client import SlurmClient
from slurm_rl.slurm.gres import gpu_counts, single_request
from slurm_rl.slurm.ownership import Ledger, pin_ledger
from slurm_rl.slurm.records import JobsReport, NodesReport, SlurmJob, SlurmNode, numeric_id
from slurm_rl.slurm.reservations import SlurmReservation, reserved_nodes
from slurm_rl.slurm.site_check import site_problems
from slurm_rl.slurm.waiting import waits_on

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """Which partitions the daemon manages (empty = all) and how to describe nodes."""

    partitions: tuple[str, ...] = ()
    cluster_name: str = ""
    price_per_gpu_hour: Mapping[str, float] = field(default_factory=dict)
    # The daemon's defer_cap_s: a deferred job beginning later than its submission plus
    # this was given that begin by its user (slurm_rl/slurm/deferral.py, begin_is_ours).
    defer_cap_s: float = math.inf


@dataclass(frozen=True)
class SlurmState:
    """The raw reports behind one snapshot: the context the shared loop hands the actuator,
    which reads job details from here. ``cluster`` is the name snapshots (and so the store)
    give the cluster: the configured one, else Slurm's, else ``slurm``."""

    time: float
    jobs: JobsReport
    nodes: NodesReport
    managed: Mapping[str, SlurmJob]
    reservations: tuple[SlurmReservation, ...] = ()
    cluster: str = "slurm"

    def job(self, job_id: str) -> SlurmJob | None:
        return self.managed.get(job_id)


def in_partitions(job_partitions: Iterable[str], managed: tuple[str, ...]) -> bool:
    return not managed or any(p in managed for p in job_partitions)


# -- jobs ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuShape:
    """A job's GPU request: how many, which type, and the node shape it fixes (if any)."""

    num_gpus: int
    gpu_type: str | None
    num_nodes: int | None
    gpus_per_node: int | None


def gpu_shape(job: SlurmJob) -> GpuShape | None:
    """From ``--gpus`` (per job), ``--gres``/``--gpus-per-node`` or ``--gpus-per-task``.

    ``--gpus=N`` without ``-N`` lets Slurm spread the GPUs, so the node count is fixed only
    when the job asked for more than one node (22.05's JSON does not tell ``-N1`` apart).
    """
    nodes = job.node_count if job.node_count and job.node_count > 0 else None
    multi = nodes if nodes is not None and nodes > 1 else None
    per_job = single_request(job.tres_per_job)
    if per_job is not None and per_job.count > 0:
        return GpuShape(per_job.count, per_job.gpu_type, multi, None)
    per_node = single_request(job.tres_per_node)
    if per_node is not None and per_node.count > 0:
        width = nodes or 1
        return GpuShape(per_node.count * width, per_node.gpu_type, width, per_node.count)
    per_task = single_request(job.tres_per_task)
    if per_task is not None and per_task.count > 0:
        return GpuShape(per_task.count * (job.tasks or 1), per_task.gpu_type, multi, None)
    return None


def to_core_job(job: SlurmJob) -> Job | None:
    """The job's GPU request as a core :class:`Job`; None when it asks for no GPU."""
    shape = gpu_shape(job)
    if shape is None:
        return None
    return Job(
        job_id=job.job_id,
        submit_time=job.submit_time or 0.0,
        num_gpus=shape.num_gpus,
        user=job.user,
        partition=job.partition,
        num_nodes=shape.num_nodes,
        gpus_per_node=shape.gpus_per_node,
        gpu_type=shape.gpu_type,
        time_limit=job.time_limit_s,
        checkpointable=job.checkpointable,
        nice=job.nice,
    )


def core_key(job: SlurmJob) -> tuple[object, ...]:
    """Every field :func:`to_core_job` reads: while these hold, so does the Job it built (a
    pending job's request rarely changes; its priority and reason change, unread here)."""
    return (job.job_id, job.submit_time, job.user, job.partition, job.node_count, job.tasks,
            job.tres_per_job, job.tres_per_node, job.tres_per_task, job.time_limit_s,
            job.requeue, job.comment, job.nice)


_Kept = tuple[tuple[object, ...], Job | None]  # a core_key and the Job built from it


def placement_of(job: SlurmJob, core: Job) -> Placement | None:
    """Where a started job runs: per-node GPUs from gres_detail, else from its request."""
    if not job.nodes:
        return None
    detail = [sum(c.count for c in gpu_counts(d)) for d in job.gres_detail]
    if len(detail) == len(job.nodes):
        return Placement(job.nodes, tuple(detail))
    if core.gpus_per_node is not None:
        return Placement(job.nodes, (core.gpus_per_node,) * len(job.nodes))
    return Placement.even(job.nodes, core.num_gpus)


# -- nodes --------------------------------------------------------------------------------


def node_gpus(node: SlurmNode) -> tuple[str, int, int]:
    """(GPU type, GPUs configured, GPUs in use). A node with several types reports the
    first type and the sum of all (core.Node has one type per node)."""
    counts = gpu_counts(node.gres)
    types = [c.gpu_type for c in counts if c.gpu_type]
    total = sum(c.count for c in counts)
    used = sum(c.count for c in gpu_counts(node.gres_used))
    return (types[0] if types else "gpu"), total, min(used, total)


def free_gpus(node: SlurmNode, reserved: frozenset[str] = frozenset()) -> int:
    """How many GPUs ``node`` has free: none when it is drained or down, or when an active
    reservation holds it (slurm_rl/slurm/reservations.py)."""
    _, total, used = node_gpus(node)
    return total - used if node.usable and node.name not in reserved else 0


def _price(prices: Mapping[str, float], gpu_type: str) -> float:
    """The configured price of ``gpu_type``, its case ignored (A100 prices Slurm's a100)."""
    found = prices.get(gpu_type)
    if found is None:
        found = next((v for k, v in prices.items() if k.lower() == gpu_type.lower()), 0.0)
    return found


def build_cluster(
    nodes: Iterable[SlurmNode], name: str, config: SourceConfig,
    reserved: frozenset[str] = frozenset(),
) -> tuple[Cluster, tuple[int, ...]]:
    """The GPU nodes (in the managed partitions) and how many GPUs each has free
    (:func:`free_gpus`)."""
    members: list[Node] = []
    free: list[int] = []
    for node in nodes:
        gpu_type, total, _ = node_gpus(node)
        if total <= 0 or not in_partitions(node.partitions, config.partitions):
            continue
        price = _price(config.price_per_gpu_hour, gpu_type)
        members.append(Node(node.name, gpu_type, total, price_per_gpu_hour=price))
        free.append(free_gpus(node, reserved))
    return Cluster(name, tuple(members)), tuple(free)


# -- the source ---------------------------------------------------------------------------


class SlurmSource:
    """Builds one :class:`ClusterSnapshot` per call from ``client.jobs()`` and ``nodes()``.

    ``pins``: the ``ReqNodeList`` values slurm-rl set itself (give the actuator the same
    ledger: it records there the pins it sets).
    """

    def __init__(
        self,
        client: SlurmClient,
        config: SourceConfig | None = None,
        clock: Callable[[], float] = time.time,
        pins: Ledger | None = None,
    ) -> None:
        self.client = client
        self.config = config or SourceConfig()
        self.clock = clock
        self.pins = pins if pins is not None else pin_ledger()
        self.last_state: SlurmState | None = None
        self._reported: set[str] = set()
        self._said: set[str] = set()  # site config problems logged (once a run each)
        self._checked: Cluster | None = None  # the cluster they were last checked on
        self._placements: dict[str, Placement] = {}
        self._runs: dict[str, tuple[tuple[object, ...], list[RunningJob]]] = {}  # _running
        # this query's jobs as core Jobs, by id, with their core_key: a Job is built again
        # only when its key changed (7,200 of them took 0.05 s a query)
        self._cores: dict[str, _Kept] = {}
        # Each job's --nice as last seen non-zero: Slurm sets nice to 0 when the daemon
        # sets a job's Priority (measured on 22.05.8), and the ranking step still weighs it.
        self._nice: dict[str, int] = {}
        self._cluster: Cluster | None = None  # the last snapshot's, reused while it is equal
        # pending jobs left out of the last snapshot, by id: what they wait on (waiting.py)
        self.set_aside: dict[str, str] = {}
        # job records squeue gave that could not be read (one line each), last query
        self.unreadable: frozenset[str] = frozenset()

    def state(self) -> SlurmState:
        """Query Slurm once (squeue, sinfo, the reservations) and keep the result as
        :attr:`last_state`."""
        now = self.clock()
        jobs = self.client.jobs()
        self._note_unreadable(jobs.unreadable)
        nodes = self.client.nodes()
        reservations = tuple(self.client.reservations())
        previous, self._cores = self._cores, {}
        self._nice = {j.job_id: j.nice or self._nice.get(j.job_id, 0) for j in jobs.jobs
                      if j.nice or j.job_id in self._nice}
        managed = {j.job_id: j for j in jobs.jobs if self._is_managed(j, previous)}
        cluster = self.config.cluster_name or nodes.meta.cluster or "slurm"
        self.last_state = SlurmState(now, jobs, nodes, FrozenDict(managed), reservations,
                                     cluster)
        return self.last_state

    def observe(self) -> Observed[SlurmState]:
        """One query: the snapshot, and the state it was built from for the actuator."""
        state = self.state()
        return Observed(self._snapshot_of(state), state)

    def snapshot(self) -> ClusterSnapshot:
        """One query's snapshot (:meth:`observe` without the state)."""
        return self.observe().snapshot

    def _snapshot_of(self, state: SlurmState) -> ClusterSnapshot:
        self.pins.sync(state.managed)
        reserved = reserved_nodes(state.reservations, state.time)
        cluster, free = build_cluster(state.nodes.nodes, state.cluster, self.config,
                                      reserved)
        pending, running, finished = self._split(state.managed.values(), state.time)
        stable = self._stable(cluster)
        if stable is not self._checked:  # the nodes changed: check the site config again
            self._checked = stable
            self._say_site_problems(state.nodes.nodes)
        return ClusterSnapshot(state.time, stable, free, pending, running, finished)

    def _say_site_problems(self, nodes: Sequence[SlurmNode]) -> None:
        """Each mismatch of the site config with the cluster, once a run (site_check.py)."""
        config = self.config
        for problem in site_problems(nodes, config.partitions, config.price_per_gpu_hour):
            if problem not in self._said:
                self._said.add(problem)
                log.warning("site config: %s", problem)

    def _stable(self, cluster: Cluster) -> Cluster:
        """The previous snapshot's cluster object while the nodes are unchanged. Policies key
        what they learned on the cluster object (the RWGP's belief about each machine, the
        candidate tables), as the simulator hands them one object throughout; an equal new
        object every query would reset that learning every cycle."""
        previous = self._cluster
        if previous is not None and previous == cluster:
            return previous
        self._cluster = cluster
        return cluster

    def _is_managed(self, job: SlurmJob, previous: Mapping[str, _Kept]) -> bool:
        if job.array_pending or job.het_job:
            return False
        if self.config.partitions and not in_partitions(job.partition.split(","),
                                                        self.config.partitions):
            return False
        nice = self._nice.get(job.job_id, 0)
        key = (*core_key(job), nice)
        kept = previous.get(job.job_id)
        if kept is None or kept[0] != key:
            core = to_core_job(job)
            kept = (key, dataclasses.replace(core, nice=nice) if core is not None else None)
        self._cores[job.job_id] = kept
        return kept[1] is not None

    def _core(self, job: SlurmJob) -> Job | None:
        kept = self._cores.get(job.job_id)
        return kept[1] if kept is not None else to_core_job(job)

    def _split(
        self, jobs: Iterable[SlurmJob], now: float
    ) -> tuple[tuple[Job, ...], tuple[RunningJob, ...], tuple[FinishedJob, ...]]:
        pending: list[Job] = []
        set_aside: dict[str, str] = {}
        running: list[RunningJob] = []
        finished: list[FinishedJob] = []
        seen: set[str] = set()
        for job in jobs:
            seen.add(job.job_id)
            core = self._core(job)
            if core is None:
                continue
            if job.is_pending:
                self._reported.discard(job.job_id)  # a requeued job may finish again
                waits = waits_on(job, now, self.pins.owns, self.config.defer_cap_s)
                if waits is None:
                    pending.append(core)
                else:
                    set_aside[job.job_id] = waits
            elif job.is_active:
                self._reported.discard(job.job_id)
                running.extend(self._running(job, core))
            elif job.is_finished:
                finished.extend(self._finished(job, core))
        self._forget_missing(seen)
        self._note_set_aside(set_aside)
        pending.sort(key=lambda j: (j.submit_time, numeric_id(j.job_id)))
        return tuple(pending), tuple(running), tuple(finished)

    def _note_unreadable(self, unreadable: tuple[str, ...]) -> None:
        """Say once which job records are left out (Slurm starts those jobs by itself)."""
        for line in unreadable:
            if line not in self.unreadable:
                log.warning("job record left out, Slurm schedules it alone: %s", line)
        self.unreadable = frozenset(unreadable)

    def _note_set_aside(self, set_aside: dict[str, str]) -> None:
        for job_id, waits in sorted(set_aside.items()):
            if self.set_aside.get(job_id) != waits:
                log.info("job %s left to Slurm while it waits (%s)", job_id, waits)
        self.set_aside = set_aside

    def _running(self, job: SlurmJob, core: Job) -> list[RunningJob]:
        """The running job, built again only when what it is built from changed (as the
        core Jobs: 2,000 running jobs took 0.02 s a query)."""
        # A move would overwrite someone else's --nodelist: offer it to no policy.
        movable = core.checkpointable and self.pins.owns(job)
        key = (core, movable, job.start_time, job.nodes, job.gres_detail)
        kept = self._runs.get(job.job_id)
        if kept is None or kept[0] != key:
            if core.checkpointable and not movable:
                core = dataclasses.replace(core, checkpointable=False)
            kept = self._runs[job.job_id] = (key, self._run(job, core))
        return kept[1]

    def _run(self, job: SlurmJob, core: Job) -> list[RunningJob]:
        placement = placement_of(job, core)
        if placement is None or job.start_time is None:
            return []
        self._placements[job.job_id] = placement
        return [RunningJob(core, job.start_time, placement)]

    def _finished(self, job: SlurmJob, core: Job) -> list[FinishedJob]:
        """A job that ran, reported once; jobs cancelled while pending never ran."""
        if job.job_id in self._reported:
            return []
        self._reported.add(job.job_id)
        placement = self._placements.get(job.job_id) or placement_of(job, core)
        if placement is None or job.start_time is None or job.end_time is None:
            return []
        return [
            FinishedJob(core, job.start_time, job.end_time, placement, job.state, job.exit_code)
        ]

    def _forget_missing(self, seen: set[str]) -> None:
        # Jobs past MinJobAge leave squeue for good: drop what we kept about them.
        self._reported &= seen
        for kept in (self._placements, self._runs):
            for job_id in [job_id for job_id in kept if job_id not in seen]:
                del kept[job_id]
