"""What Slurm does with the daemon's levers: one scheduling pass of slurmctld, emulated.

The simulator's ``slurm`` action mode gives a policy exactly the levers it has live
(priority order, required node lists, deferral) and lets this module start jobs the way
slurmctld 22.05 with ``sched/backfill`` would:

* eligible jobs are tried in priority order (ties: earlier submit first);
* a job pinned to a node list (``ReqNodeList`` with exactly its node count) starts only there;
  while it waits, its nodes are kept from lower-priority jobs, but the rest of the partition
  goes on (``job_scheduler.c``: "don't block the entire queue/partition");
* an unpinned job gets nodes by Slurm's own choice (first fit in node order), never one of
  the nodes it is excluded from (``ExcNodeList``);
* the first unpinned job that cannot start gets an EASY reservation: the earliest time its
  GPUs free up, planned with the running jobs' time limits. A lower-priority job may start
  now only if its time limit ends before that reservation, or if it avoids the reserved nodes.
  An excluded job's reservation is planned on the nodes it may use.

With ``sched/builtin`` (``scheduler="builtin"``) there is no backfill: the main scheduler
alone walks the queue in priority order, and the first job that cannot start and is not
pinned blocks the partition (``job_scheduler.c``, ``fail_by_part``): no lower-priority job
starts in that pass, pinned or not, however short. A pinned job that cannot start still
only masks its own nodes, as under backfill.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from slurm_rl.agents.nodesets import fixed_shape, place_in_order
from slurm_rl.core import Cluster, Job, JobId, Placement, placement_fits_shape
from slurm_rl.simulator.backfill import Candidates, PlannedPass

NO_LIMIT = float("inf")
SlurmScheduler = Literal["backfill", "builtin"]  # slurm.conf's SchedulerType=sched/<this>
SLURM_SCHEDULERS: tuple[SlurmScheduler, ...] = ("backfill", "builtin")
DEFAULT_RESERVATIONS = 100  # jobs a backfill pass plans at most (1: EASY backfill)
_NOT_EXCLUDED: frozenset[int] = frozenset()
_NO_CHOICES: tuple[Job, ...] = ()


@dataclass(frozen=True, slots=True)
class QueuedJob:
    job: Job
    priority: float
    pin: Placement | None = None
    excluded: frozenset[int] = frozenset()  # node indices (ExcNodeList); unpinned jobs only
    # Features=[a|b]: the job as it may run, one GPU type each, tried in this order; empty:
    # as it is (the daemon keeps an untyped gang Slurm places on one type, slurm/onetype.py)
    one_of: tuple[Job, ...] = ()
    # the fewest GPUs any of its choices asks for (a pass's bound on what can still start)
    fewest_gpus: int = field(init=False, compare=False)
    # what decides whether it can start now and where it is planned (its shape, limit,
    # exclusions, pin and the GPU types it may take): jobs alike in it start, or are
    # planned, alike (backfill.PlannedPass's no_start and planned_at)
    start_key: tuple[object, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        job = self.job
        object.__setattr__(self, "fewest_gpus", min(c.num_gpus for c in self.choices))
        limit = job.time_limit if job.time_limit is not None else NO_LIMIT
        object.__setattr__(self, "start_key", (
            job.num_gpus, job.num_nodes, job.gpus_per_node, job.gpu_type, self.excluded,
            limit, self.pin, tuple(c.gpu_type for c in self.choices)))

    @property
    def choices(self) -> tuple[Job, ...]:
        return self.one_of or (self.job,)


@dataclass(frozen=True, slots=True)
class RunningShape:
    """A running job as backfill sees it: when its limit ends and which GPUs it holds."""

    limit_end: float
    nodes: tuple[int, ...]
    gpus: tuple[int, ...]


@dataclass
class _Reservation:
    start: float
    gpus_by_node: dict[int, int]


def schedule_pass(
    now: float,
    queue: Iterable[QueuedJob],
    free_gpus: list[int],
    running: Callable[[], Sequence[RunningShape]],
    cluster: Cluster,
    depth: int = 500,
    scheduler: SlurmScheduler = "backfill",
    reservations: int = DEFAULT_RESERVATIONS,
    candidates: Candidates | None = None,
) -> list[tuple[Job, Placement]]:
    """Jobs to start now, in start order, walking ``queue`` (highest priority first).
    ``free_gpus`` is updated in place; ``running`` is asked for only if a reservation is needed.
    Like slurmctld (``bf_max_job_test``), a pass looks at no more than ``depth`` jobs.
    ``scheduler``: ``backfill`` or ``builtin`` (the first unpinned job that cannot start ends
    the pass). Under backfill, up to ``reservations`` jobs that cannot start now are planned
    (:mod:`slurm_rl.simulator.backfill`, Slurm's conservative backfill); 1 is EASY.
    ``candidates``: what the planned passes keep from pass to pass (the caller's)."""
    if scheduler == "backfill" and reservations > 1:
        planned = PlannedPass(now, free_gpus, running, cluster, reservations, candidates)
        planned.walk(list(itertools.islice(queue, depth)))
        return planned.starts
    state = _Pass(now, free_gpus, running, cluster, backfill=scheduler == "backfill")
    for item, _ in zip(queue, range(depth), strict=False):
        if state.exhausted:
            break  # not even one GPU is left outside the masks: nothing else can start
        state.consider(item)
    return state.starts


def completing_nodes(free_gpus: Sequence[int], completing: Mapping[int, float], now: float
                     ) -> tuple[list[int], list[RunningShape]]:
    """A node where a job ended is COMPLETING until its epilog reports back, and Slurm starts
    nothing there meanwhile, pinned jobs included (node_scheduler.c leaves
    ``cg_node_bitmap`` out of every selection; backfill plans such a job for ``now + 1``),
    although the node's GPUs already show free (``gres_used``) to the daemon, whose next
    snapshot may pin them. ``completing``: node index -> when its epilog ends. Returns the
    GPUs a pass may use now and the completing nodes' free GPUs as shapes that end with
    the epilog (the backfill plan has them from then)."""
    free = list(free_gpus)
    shapes = []
    for node, until in sorted(completing.items()):
        if until > now and free[node] > 0:
            shapes.append(RunningShape(until, (node,), (free[node],)))
            free[node] = 0
    return free, shapes


def _free_to_go_anywhere(job: Job) -> bool:
    return job.gpu_type is None and job.num_nodes is None and job.gpus_per_node is None


def _one_node_untyped(job: Job) -> bool:
    return job.gpu_type is None and job.gpus_per_node is None and job.num_nodes == 1


ShapeKey = tuple[int, int | None, int | None, str | None, frozenset[int]]


def _shape_key(item: QueuedJob) -> ShapeKey:
    """Jobs with the same key fit in the same places (exclusions included)."""
    job = item.job
    return (job.num_gpus, job.num_nodes, job.gpus_per_node, job.gpu_type, item.excluded)


class _Pass:
    """One pass over the queue. Free GPUs only shrink and masks only grow during a pass, so a
    request shape that found no nodes once will find none later in the same pass; and if a job
    free to go anywhere found no room for k GPUs, no job needing k or more GPUs will (a type
    constraint, fixed shape or pin only narrows the choice). Likewise, if an untyped one-node
    job of k GPUs found no node, no node outside the masks has k free GPUs, so no job whose
    largest per-node share is k or more can start. Remembering these and the free GPUs outside
    the masks keeps a pass over a long queue cheap."""

    def __init__(
        self,
        now: float,
        free_gpus: list[int],
        running: Callable[[], Sequence[RunningShape]],
        cluster: Cluster,
        *,
        backfill: bool = True,
    ) -> None:
        self.now, self.free, self.running, self.cluster = now, free_gpus, running, cluster
        self.backfill = backfill
        self.blocked = False  # builtin: an unpinned job could not start; the partition waits
        self.starts: list[tuple[Job, Placement]] = []
        self.masked: set[int] = set()
        self.reservation: _Reservation | None = None
        self.no_fit: set[ShapeKey] = set()
        self.no_detour: set[ShapeKey] = set()
        self.order = range(len(cluster.nodes))
        self.min_unfit = math.inf
        self.min_share_unfit = math.inf  # no unmasked node has this many GPUs free
        self.min_no_detour = math.inf
        self.free_total = sum(free_gpus)  # free GPUs outside the masks

    @property
    def exhausted(self) -> bool:
        return (self.blocked or self.min_unfit <= 1 or self.min_share_unfit <= 1
                or self.free_total <= 0)

    def consider(self, item: QueuedJob) -> None:
        job = item.job
        if job.num_gpus >= self.min_unfit:
            return
        if (self.reservation is not None and job.gpu_type is None and item.pin is None
                and _largest_share(job) >= self.min_share_unfit):
            return  # (with no reservation yet, this job may still be the one to get it)
        key = _shape_key(item)
        if item.pin is None and key in self.no_fit:
            return
        if self.reservation is not None and not self._ends_before_reservation(job):
            self._around_reservation(item, key)
            return
        placement = None
        if job.num_gpus <= self.free_total:
            placement = _try(item, self.free, self.masked, self.cluster, self.order)
        if placement is not None:
            self._start(job, placement)
        elif item.pin is not None:
            self._mask(item.pin)
        else:
            self._no_room(item, key)

    def _mask(self, pin: Placement) -> None:
        for name in pin.nodes:
            index = self.cluster.index(name)
            if index not in self.masked:
                self.masked.add(index)
                self.free_total -= self.free[index]

    def _ends_before_reservation(self, job: Job) -> bool:
        assert self.reservation is not None
        limit = job.time_limit if job.time_limit is not None else NO_LIMIT
        return self.now + limit <= self.reservation.start

    def _no_room(self, item: QueuedJob, key: ShapeKey) -> None:
        """The job fits nowhere now: remember it, and reserve for the first such job. (A job
        kept off some nodes proves nothing about jobs of its shape kept off fewer.)"""
        job = item.job
        if not self.backfill:
            self.blocked = True  # sched/builtin: fail_by_part, nothing after it starts
            return
        self.no_fit.add(key)
        if not item.excluded:
            if _free_to_go_anywhere(job):
                self.min_unfit = min(self.min_unfit, job.num_gpus)
            elif _one_node_untyped(job):
                self.min_share_unfit = min(self.min_share_unfit, job.num_gpus)
        if self.reservation is None:
            self.reservation = _reserve(self.now, job, self.free, self.running(), self.cluster,
                                        item.excluded)

    def _around_reservation(self, item: QueuedJob, key: ShapeKey) -> None:
        """A job that would outlast the reservation may start only away from its nodes."""
        assert self.reservation is not None
        if item.pin is not None:
            placement = _try(item, self.free, self.masked, self.cluster, self.order)
            if placement is not None and _respects(self.now, item.job, placement,
                                                   self.reservation, self.cluster):
                self._start(item.job, placement)
            else:
                self._mask(item.pin)
            return
        if key in self.no_detour or item.job.num_gpus >= self.min_no_detour:
            return
        placement = _avoid_reserved(item, self.free, self.masked, self.reservation, self.cluster)
        if placement is None:
            self.no_detour.add(key)
            if _free_to_go_anywhere(item.job) and not item.excluded:
                self.min_no_detour = min(self.min_no_detour, item.job.num_gpus)
        else:
            self._start(item.job, placement)

    def _start(self, job: Job, placement: Placement) -> None:
        _take(placement, self.free, self.cluster)
        self.free_total -= placement.num_gpus
        self.starts.append((job, placement))


def _largest_share(job: Job) -> int:
    if job.num_nodes is None and job.gpus_per_node is None:
        return 1  # a free shape can take one GPU per node: no bound from node sizes
    return fixed_shape(job)[0]


def _try(
    item: QueuedJob,
    free_gpus: Sequence[int],
    masked: set[int],
    cluster: Cluster,
    order: Sequence[int],
) -> Placement | None:
    if item.pin is not None:
        return _pinned_fits(item.pin, free_gpus, masked, cluster)
    if masked or item.excluded:
        order = [i for i in order if i not in masked and i not in item.excluded]
    for job in item.choices:
        placement = place_in_order(job, cluster, free_gpus, order)
        if placement is not None:
            return placement
    return None


def _pinned_fits(
    pin: Placement, free_gpus: Sequence[int], masked: set[int], cluster: Cluster
) -> Placement | None:
    for name, gpus in zip(pin.nodes, pin.gpus, strict=True):
        index = cluster.index(name)
        if index in masked or free_gpus[index] < gpus:
            return None
    return pin


def _respects(
    now: float, job: Job, placement: Placement, reservation: _Reservation | None, cluster: Cluster
) -> bool:
    """True when starting ``job`` on ``placement`` now cannot delay the reservation."""
    if reservation is None:
        return True
    limit = job.time_limit if job.time_limit is not None else NO_LIMIT
    if now + limit <= reservation.start:
        return True
    return not any(cluster.index(n) in reservation.gpus_by_node for n in placement.nodes)


def _avoid_reserved(
    item: QueuedJob,
    free_gpus: Sequence[int],
    masked: set[int],
    reservation: _Reservation,
    cluster: Cluster,
) -> Placement | None:
    """A placement outside the reserved nodes, for a job that would otherwise delay them."""
    if item.pin is not None:
        return None
    blocked = masked | set(reservation.gpus_by_node) | item.excluded
    order = [i for i in range(len(cluster.nodes)) if i not in blocked]
    return place_in_order(item.job, cluster, free_gpus, order)


def _reserve(
    now: float,
    job: Job,
    free_gpus: Sequence[int],
    running: Sequence[RunningShape],
    cluster: Cluster,
    excluded: frozenset[int] = frozenset(),
) -> _Reservation | None:
    """The earliest time the job fits, releasing running jobs in order of their limit ends."""
    future = list(free_gpus)
    order = [i for i in range(len(cluster.nodes)) if i not in excluded]
    share = _largest_share(job) if job.gpu_type is None else 1
    for shape in sorted(running, key=lambda r: r.limit_end):
        if shape.limit_end == NO_LIMIT:
            break
        for node, gpus in zip(shape.nodes, shape.gpus, strict=True):
            future[node] += gpus
        if max(future) < share or sum(future) < job.num_gpus:
            continue  # cheap necessary conditions first: most steps free too little
        placement = place_in_order(job, cluster, future, order)
        if placement is not None:
            pairs = zip(placement.nodes, placement.gpus, strict=True)
            nodes = {cluster.index(n): g for n, g in pairs}
            return _Reservation(start=max(now, shape.limit_end), gpus_by_node=nodes)
    return None


def _take(placement: Placement, free_gpus: list[int], cluster: Cluster) -> None:
    for name, gpus in zip(placement.nodes, placement.gpus, strict=True):
        free_gpus[cluster.index(name)] -= gpus


def one_type_sizes(cluster: Cluster, enabled: bool = True
                   ) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The GPU types the daemon's Features=[a|b] lists, each with its nodes' sizes (none on
    a one-type cluster, or when ``enabled`` is off: ``allow_mixed_gpu_types``)."""
    types = sorted({node.gpu_type for node in cluster.nodes})
    if not enabled or len(types) < 2:
        return ()
    return tuple((t, tuple(n.gpus for n in cluster.nodes if n.gpu_type == t)) for t in types)


def capacity_outside(job: Job, excluded: frozenset[int], cluster: Cluster) -> int:
    """GPUs of the job's type (any, if it names none) on nodes it is not excluded from."""
    wanted = job.gpu_type.lower() if job.gpu_type else None
    return sum(
        node.gpus
        for i, node in enumerate(cluster.nodes)
        if i not in excluded and (wanted is None or node.gpu_type.lower() == wanted)
    )


def _fits_sizes(job: Job, sizes: tuple[int, ...]) -> bool:
    """Whether nodes of these sizes (GPUs each) could ever hold the job's request."""
    if job.num_gpus > sum(sizes):
        return False
    if job.num_nodes is None and job.gpus_per_node is None:
        return True
    per_node = job.gpus_per_node or -(-job.num_gpus // (job.num_nodes or 1))
    return sum(size >= per_node for size in sizes) >= (job.num_nodes or 1)


def valid_pin(job: Job, pin: Placement, cluster: Cluster) -> bool:
    """A pin Slurm would accept: known nodes, the job's shape, its GPU type, within node size."""
    if not placement_fits_shape(job, pin) or not all(cluster.has_node(n) for n in pin.nodes):
        return False
    nodes = [cluster.nodes[cluster.index(n)] for n in pin.nodes]
    if any(g > node.gpus for g, node in zip(pin.gpus, nodes, strict=True)):
        return False
    wanted = job.gpu_type.lower() if job.gpu_type else None
    return wanted is None or all(node.gpu_type.lower() == wanted for node in nodes)


class PriorityHolder(Protocol):
    """The priority values the daemon's actuator leaves in Slurm, decision after decision,
    within its limits on changes (``slurm_rl.slurm.priority.HeldPriorities``). The simulator
    takes one from its caller so that it need not know the actuator."""

    @property
    def values(self) -> Mapping[str, int]: ...

    def apply(self, promoted: Sequence[str], now: float, alive: Collection[str],
              urgent: Collection[str] = ...) -> object: ...


@dataclass
class SlurmJobState:
    """The levers the daemon has set on pending jobs, as slurmctld remembers them.

    The daemon sets a priority only on the jobs it *promotes* (the ones its decision starts
    now or pins, and the ones the fairness guard brings forward), above every job that holds
    one of its priorities from before, in the decision's order with the pinned jobs first
    (``slurm_rl.slurm.plan.promoted_order``). Slurm orders its queue by those values, then
    every other eligible job by Slurm's own priority: here, with the dev cluster's zero
    multifactor weights, by submit time. A ``held`` holder plans the values as the actuator
    does, limits on changes included (a job they keep from moving stays where its value puts
    it); without one every change is taken as sent.
    """

    ranking: tuple[JobId, ...] = ()
    released: frozenset[JobId] = frozenset()
    pins: dict[JobId, Placement] = field(default_factory=dict)
    exclusions: Mapping[JobId, frozenset[int]] = field(default_factory=dict)
    eligible_at: dict[JobId, float] = field(default_factory=dict)
    # the GPU types a released untyped gang is kept to one of (Features=[a|b]), each with
    # its nodes' sizes; () = off
    one_type_of: tuple[tuple[str, tuple[int, ...]], ...] = ()
    held: PriorityHolder | None = None
    # without a holder: the jobs holding a priority of the daemon's, highest first
    valued: list[JobId] = field(default_factory=list)
    _one_of_cache: dict[JobId, tuple[Job, ...]] = field(default_factory=dict, init=False,
                                                        repr=False)
    # per job, the levers' version it was seen under and how the pass saw it (_queued)
    _entries: dict[JobId, tuple[int, QueuedJob]] = field(default_factory=dict, init=False,
                                                         repr=False)
    # set_levers' calls: the pins, exclusions and releases change there only (and a started
    # job's entry goes in forget); one who writes those fields directly must bump it too
    _levers_version: int = field(default=0, init=False, repr=False)
    # how long after a job's end slurmctld starts nothing on its nodes (SimConfig.end_lag_s)
    end_lag_s: float = 0.0
    completing: dict[int, float] = field(default_factory=dict)  # node -> when Slurm may use it

    def job_ended(self, nodes: Iterable[int], now: float) -> float | None:
        """A job left these nodes: Slurm starts nothing there for ``end_lag_s`` (their
        GPUs already show free to the daemon). Returns when its own pass is due, or None
        with no lag (the engine's pass now is that pass)."""
        if self.end_lag_s <= 0:
            return None
        until = now + self.end_lag_s
        for node in nodes:
            self.completing[node] = max(self.completing.get(node, 0.0), until)
        return until

    def usable(self, free_gpus: Sequence[int], now: float) -> tuple[list[int], list[RunningShape]]:
        """The GPUs a pass may use now, and the lagging nodes' free GPUs as shapes that
        free up when the lag ends (:func:`completing_nodes`); forgets lags that are over."""
        if not self.completing:
            return list(free_gpus), []
        self.completing = {node: t for node, t in self.completing.items() if t > now}
        return completing_nodes(free_gpus, self.completing, now)

    def set_levers(
        self,
        ranking: tuple[JobId, ...],
        pins: Mapping[JobId, Placement],
        exclusions: Mapping[JobId, frozenset[int]] | None = None,
        *,
        now: float = 0.0,
        pending: Collection[JobId] = (),
        urgent: Collection[JobId] = (),
        placed: Collection[JobId] = (),
    ) -> None:
        """The last decision's levers; an exclusion counts only for a job without a pin. A
        pin stays until the daemon pins the job elsewhere, as a ReqNodeList does live (the
        actuator never clears its own: a job it placed once and now ranks without nodes
        keeps waiting for them). ``placed``: the jobs the decision starts now (with or
        without a pin Slurm accepted); ``urgent``: the ones the guard brings forward."""
        self._levers_version += 1  # (pins, exclusions, releases change only here)
        self.ranking, self.released = ranking, frozenset(ranking)
        self.pins.update(pins)
        self.exclusions = {
            job_id: nodes for job_id, nodes in (exclusions or {}).items()
            if job_id not in self.pins
        }
        chosen = set(placed) | set(urgent)
        promoted = self._pinned_first([job_id for job_id in ranking if job_id in pending
                                       and (job_id in chosen or job_id in self.pins)])
        if self.held is not None:
            self.held.apply(promoted, now, pending, frozenset(urgent) | frozenset(placed))
            return
        lifted = set(promoted)
        self.valued = promoted + [job_id for job_id in self.valued
                                  if job_id in pending and job_id not in lifted]

    def _pinned_first(self, ranked: Sequence[JobId]) -> list[JobId]:
        pinned = [job_id for job_id in ranked if job_id in self.pins]
        if not pinned:
            return list(ranked)
        return pinned + [job_id for job_id in ranked if job_id not in self.pins]

    def forget(self, job_id: JobId) -> None:
        self.eligible_at.pop(job_id, None)
        self.pins.pop(job_id, None)
        self._one_of_cache.pop(job_id, None)
        self._entries.pop(job_id, None)

    def _one_of(self, job: Job) -> tuple[Job, ...]:
        """The daemon's Features=[a|b] on a released job Slurm places: untyped, two GPUs or
        more, not -N 1 (slurm_rl/slurm/onetype.py). Kept per job: every pass asks again."""
        if not self.one_type_of or job.gpu_type or job.num_gpus < 2 or job.num_nodes == 1:
            return ()
        fitting = self._one_of_cache.get(job.job_id)
        if fitting is None:
            fitting = tuple(replace(job, gpu_type=gpu_type)
                            for gpu_type, sizes in self.one_type_of if _fits_sizes(job, sizes))
            self._one_of_cache[job.job_id] = fitting
        return fitting  # () fits no one type: the job as it is (docs/slurm-emulation.md)

    def queue(self, pending: Mapping[JobId, Job], now: float) -> Iterator[QueuedJob]:
        """Eligible pending jobs, highest priority first: the daemon's values (class
        docstring), then the others by submit time (Slurm's tie-break, ``sort_job_queue2``).
        Eligible: released by the last decision, or its deferral over."""
        if self.held is not None:
            values = self.held.values
            top = sorted((job_id for job_id in values if job_id in pending),
                         key=lambda job_id: (-values[job_id], pending[job_id].submit_time))
        else:
            top = [job_id for job_id in self.valued if job_id in pending]
        ahead = set(top)
        released, eligible_at = self.released, self.eligible_at
        for rank, job_id in enumerate(top):
            if job_id in released or eligible_at.get(job_id, 0.0) <= now:
                yield self._queued(pending[job_id], -rank)
        for job_id, job in pending.items():  # submit order
            if job_id not in ahead and (job_id in released or eligible_at.get(job_id, 0.0) <= now):
                yield self._queued(job, -math.inf)

    def _queued(self, job: Job, priority: float) -> QueuedJob:
        """The job as the pass sees it; the one of the last pass while nothing in it
        changed (every pass asks for the whole queue again): its priority, and its pin,
        exclusions and choices, which only ``set_levers`` changes."""
        job_id = job.job_id
        version = self._levers_version
        seen = self._entries.get(job_id)
        if seen is not None:
            kept = seen[1]
            if seen[0] == version and kept.priority == priority and kept.job is job:
                return kept
        pin = self.pins.get(job_id)
        excluded, one_of = _NOT_EXCLUDED, _NO_CHOICES
        if job_id in self.released:
            excluded = self.exclusions.get(job_id, _NOT_EXCLUDED)
            one_of = self._one_of(job) if pin is None else ()
        if (seen is None or kept.job is not job or kept.priority != priority
                or kept.pin is not pin or kept.excluded is not excluded
                or kept.one_of is not one_of):
            kept = QueuedJob(job, priority, pin, excluded, one_of)
        self._entries[job_id] = (version, kept)
        return kept
