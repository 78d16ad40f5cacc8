r"""Which jobs the RWGP placement agent keeps off slow nodes, and which nodes are slow for them.

A released job the agent could not place (no GPUs free at the decision) is started by Slurm's
own choice when GPUs free between decisions. For a gang (or, with the long-job rule below, a
long job of any size) the agent names the nodes Slurm must keep it off (``ExcNodeList``):
those whose risk-adjusted pace ``v_i (E[f_i] − κ sd[f_i])`` is below ``ρ`` times the best such
pace among the nodes the job may use, and it never pins such a job there itself (its node
costs are infinite there, so no candidate set holds them). A spanning gang runs at its slowest
member's pace, so one K80 (a seventh of an A100) or one straggler in a 16-GPU set slows all 16
and holds the fast members hostage; waiting for a faster node costs less. Which jobs:

* a gang that must span nodes (more GPUs than the largest node, or two nodes or more asked
  for): always (unless ``exclusion_spanning`` is off, an ablation);
* a gang of ``exclusion_min_gpus`` (2) or more that fits one node: unless the cluster is in a
  **backlog** — a job too small to be excluded has waited ``exclusion_backlog_s`` (5 min)
  within the last ``exclusion_backlog_memory_s`` (a day). Such a job could start on any free
  GPU, so every GPU was taken, slow ones included: the slow nodes will be used anyway, and a
  gang slowed on one of them delays one job where the same GPU-hours slow many single-GPU
  jobs. While queues are short, the gang waits a little for a fast node instead of running
  5–8× slower (measured: docs/placement-agent.md §6);
* single-GPU jobs: not for their size (measured worse: in a backlog it leaves the slowest
  GPUs idle);
* with ``exclusion_min_limit_s``: any job whose time limit is that long, backlog or not. A run
  of days on a GPU a quarter as fast costs days more (``(1/ρ − 1)`` times the run at least),
  where one GPU of a fast type frees within hours even in a burst. Without the rule, gang
  exclusions leave the slow nodes free for whichever job arrives next, and a month-long
  single-GPU run lands there (session 40: Philly September at offered load 0.85);
* with ``exclusion_patience_s``: no gang that has waited that long (a deep queue the backlog
  signal misses: under shortest-limit-first the single-GPU jobs it watches start at once);
* with ``exclusion_queue_h``: the long-job rule holds only while the long jobs' queue is
  shallow: their pending GPU-hours, by their time limits, ``Σ g_j L_j`` over pending jobs with
  ``L_j`` at least ``exclusion_min_limit_s``, at most ``exclusion_queue_h`` hours of the whole
  cluster's GPUs. Past it a long job may take slow nodes too. One job's own trade never pays
  for a slow node (it loses ``(1/ρ − 1)`` times its run there, days), but every long job that
  leaves the fast nodes' queue starts the ones behind it sooner (session 48: Philly October at
  offered load 1.0, day-long gangs kept off K80 nodes waited 63 h against 28 h);
* with ``exclusion_queue_lull`` as well: it lets go only while no shorter job (one the rule
  does not cover) has waited ``exclusion_backlog_s``: a slow node is given to a long job only
  when nothing shorter is waiting for it. Released at once, long jobs took the slow nodes the
  short jobs would have started on, and the short jobs paid what the long ones gained
  (session 48); shortest-limit-first gives a long gang a slow node only in such a lull.

A job that asked for a GPU type by name is judged against the best node of that type; no job
is excluded when the nodes left could never hold it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from slurm_rl.agents.rwgp.candidates import FloatArray, NodeTable
from slurm_rl.core import ClusterSnapshot, Job


class ExclusionSettings(Protocol):
    """The rules' knobs (:class:`~slurm_rl.agents.rwgp.placement.PlacementConfig` has them)."""

    @property
    def exclusion_ratio(self) -> float: ...  # ρ (0: no exclusions at all)
    @property
    def exclusion_spanning(self) -> bool: ...
    @property
    def exclusion_min_gpus(self) -> int | None: ...
    @property
    def exclusion_backlog_s(self) -> float | None: ...
    @property
    def exclusion_backlog_memory_s(self) -> float: ...
    @property
    def exclusion_patience_s(self) -> float | None: ...
    @property
    def exclusion_min_limit_s(self) -> float | None: ...
    @property
    def exclusion_queue_h(self) -> float | None: ...
    @property
    def exclusion_queue_lull(self) -> bool: ...


class PaceView(Protocol):
    """One job class's per-node risk-adjusted pace at one belief (a new belief: a new view)."""

    @property
    def pace(self) -> FloatArray: ...


@dataclass(frozen=True)
class SlowNodes:
    """Nodes too slow for a job class: as a mask, by name, and the GPUs left outside them."""

    mask: NDArray[np.bool_]
    names: tuple[str, ...]
    capacity_left: int


class ExclusionRules:
    """The module's rules for one placement agent; :meth:`use_cluster` on each new cluster."""

    def __init__(self, settings: ExclusionSettings) -> None:
        self.settings = settings
        self._table: NodeTable | None = None
        self._names: tuple[str, ...] = ()
        self._largest = 0
        self._slow: dict[tuple[str, str | None], tuple[PaceView, SlowNodes]] = {}
        self._backlog_of: ClusterSnapshot | None = None
        self._backlog_seen = -math.inf
        self._queue_of: ClusterSnapshot | None = None
        self._queue_deep = False
        self._shorter_of: ClusterSnapshot | None = None
        self._shorter_waiting = False

    def use_cluster(self, table: NodeTable, names: tuple[str, ...]) -> None:
        self._table, self._names = table, names
        self._largest = int(table.capacity.max(initial=0))
        self._slow.clear()

    def too_slow(self, job: Job, view: PaceView, snapshot: ClusterSnapshot) -> SlowNodes | None:
        """The nodes too slow for ``job`` at ``view``; None when it is neither a gang nor long
        (or, in a backlog, a gang that fits a node), none is, or the rest could never hold
        it."""
        if self.settings.exclusion_ratio <= 0 or not self._excludable(job, snapshot):
            return None
        if self.past_patience(job, snapshot):
            return None
        key = (job.model_family, job.gpu_type)
        cached = self._slow.get(key)
        if cached is None or cached[0] is not view:
            cached = (view, self._slow_nodes(view.pace, job.gpu_type))
            self._slow[key] = cached
        slow = cached[1]
        return slow if slow.names and slow.capacity_left >= job.num_gpus else None

    def key(self, job: Job, snapshot: ClusterSnapshot) -> tuple[bool, bool]:
        """What besides its request shape decides which nodes are too slow for ``job``: whether
        it has waited out its patience, and whether it is long (what a memo must key on)."""
        return self.past_patience(job, snapshot), self.long(job)

    def past_patience(self, job: Job, snapshot: ClusterSnapshot) -> bool:
        """Whether ``job`` has waited ``exclusion_patience_s``: then nothing is too slow for it."""
        patience = self.settings.exclusion_patience_s
        return patience is not None and snapshot.time - job.submit_time >= patience

    def long(self, job: Job) -> bool:
        """Whether ``job``'s time limit reaches ``exclusion_min_limit_s``: then it is kept off
        slow nodes whatever its size, backlog or not."""
        least = self.settings.exclusion_min_limit_s
        return least is not None and job.time_limit is not None and job.time_limit >= least

    def long_queue_deep(self, snapshot: ClusterSnapshot) -> bool:
        """Whether the pending long jobs hold more GPU-hours, by their limits, than the whole
        cluster's GPUs run in ``exclusion_queue_h`` hours: then the long-job rule lets go
        (with ``exclusion_queue_lull``, only while no shorter job waits)."""
        hours, least = self.settings.exclusion_queue_h, self.settings.exclusion_min_limit_s
        if hours is None or least is None or self._table is None:
            return False
        if self._queue_of is not snapshot:
            columns = snapshot.columns
            long_jobs = columns.time_limit >= least  # an unknown limit (NaN) is not long
            demand_s = float((columns.num_gpus[long_jobs] * columns.time_limit[long_jobs]).sum())
            capacity = float(self._table.capacity.sum())
            self._queue_deep = demand_s > hours * 3600.0 * capacity
            self._queue_of = snapshot
        return self._queue_deep and not (self.settings.exclusion_queue_lull
                                         and self.shorter_jobs_waiting(snapshot))

    def shorter_jobs_waiting(self, snapshot: ClusterSnapshot) -> bool:
        """Whether a job the long-job rule does not cover has waited ``exclusion_backlog_s``
        now (no memory, unlike :meth:`backlog`): a slow node freed now would be its."""
        wait, least = self.settings.exclusion_backlog_s, self.settings.exclusion_min_limit_s
        if wait is None or least is None:
            return False
        if self._shorter_of is not snapshot:
            columns = snapshot.columns
            waited = snapshot.time - columns.submit_time > wait
            self._shorter_waiting = bool((waited & ~(columns.time_limit >= least)).any())
            self._shorter_of = snapshot
        return self._shorter_waiting

    def backlog(self, snapshot: ClusterSnapshot) -> bool:
        """Whether, within ``exclusion_backlog_memory_s``, a job too small to be excluded has
        waited ``exclusion_backlog_s``: it could start on any free GPU, so every GPU, slow
        ones included, was taken (a long job waits for a fast GPU, so it says nothing)."""
        settings = self.settings
        wait, minimum = settings.exclusion_backlog_s, settings.exclusion_min_gpus
        if wait is None or minimum is None:
            return False
        if self._backlog_of is not snapshot:
            columns = snapshot.columns
            waited = (snapshot.time - columns.submit_time > wait) & (columns.num_gpus < minimum)
            least = settings.exclusion_min_limit_s
            if least is not None:
                waited &= ~(columns.time_limit >= least)  # an unknown limit (NaN) is not long
            if waited.any():
                self._backlog_seen = snapshot.time
            self._backlog_of = snapshot
        return snapshot.time - self._backlog_seen <= settings.exclusion_backlog_memory_s

    def _excludable(self, job: Job, snapshot: ClusterSnapshot) -> bool:
        if self.long(job) and not self.long_queue_deep(snapshot):
            return True
        if self.settings.exclusion_spanning and self._must_span(job):
            return True
        minimum = self.settings.exclusion_min_gpus
        return minimum is not None and job.num_gpus >= minimum and not self.backlog(snapshot)

    def _must_span(self, job: Job) -> bool:
        return (job.num_nodes or 1) > 1 or job.num_gpus > self._largest

    def _slow_nodes(self, pace: FloatArray, gpu_type: str | None) -> SlowNodes:
        table = self._table
        assert table is not None, "use_cluster first"
        usable = np.ones(len(pace), dtype=bool)
        if gpu_type:
            wanted = np.array([name == gpu_type.lower() for name in table.type_names])
            usable = wanted[table.type_id]
        if not usable.any():
            return SlowNodes(usable, (), 0)
        slow = usable & (pace < self.settings.exclusion_ratio * pace[usable].max())
        names = tuple(self._names[i] for i in np.flatnonzero(slow))
        return SlowNodes(slow, names, int(table.capacity[usable & ~slow].sum()))
