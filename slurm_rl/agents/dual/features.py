r"""What the learned agents see of a snapshot: per-job and cluster features, schema-versioned.

Every feature is something a live cluster has: the job's request (GPUs, nodes, GPU type, time
limit), how long it has waited, statistics of its account's past jobs that the agent learned in
``observe()`` from finished jobs, and the cluster's free capacity. Never ``oracle_duration`` (the
simulator's ground truth) and never ``model_family`` (in the simulator it is derived from the
true GPU time, so it would leak the answer; live it is empty).

Runtime history (per account = user, else partition, as :func:`account_of`): the last
``window`` runtimes of the same account and GPU count give the predicted runtime

.. math::

    \hat r_j = \operatorname{median}(\text{history}(a_j, g_j))
    \;\text{else}\; \operatorname{median}(\text{history}(a_j))
    \;\text{else}\; \operatorname{median}(\text{all}) \;\text{else}\; r_0 ,

the same estimator as the QSSF baseline (a strong, realisable teacher for warm starts). Per
account we also keep running moments of :math:`\log r` (its spread) and of
:math:`\log(r / \text{limit})` (how much of their time limit its jobs use).

Any change to a feature's meaning, order or scaling must bump :data:`FEATURE_SCHEMA_VERSION`:
bundles trained on another version are refused (``agent.load_bundle``).
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from statistics import median
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from slurm_rl.agents.ordering_baselines import account_of
from slurm_rl.core import Cluster, ClusterSnapshot, FinishedJob, Job, JobId
from slurm_rl.stats import RunningMoments

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

FEATURE_SCHEMA_VERSION = 1

JOB_FEATURES: tuple[str, ...] = (
    "log_gpus",  # log1p(GPUs)
    "log_nodes",  # log1p(requested nodes), 0 = any shape
    "fixed_shape",  # 1 when nodes or GPUs per node are fixed
    "typed",  # 1 when a GPU type is required
    "has_limit",
    "log_limit_h",  # log1p(time limit in hours), 0 without one
    "log_wait_h",  # log1p(hours waited so far)
    "log_pred_h",  # log1p(predicted runtime, hours) from the account's history
    "log_pred_gpu_h",  # log1p(GPUs x predicted runtime, hours): QSSF's key
    "log_history",  # log1p(finished jobs of the account seen so far)
    "runtime_spread",  # std of the account's log runtimes (0 when < 2 seen)
    "limit_use",  # mean log(runtime / limit) of the account's jobs, clipped to [-6, 1]
    "demand_share",  # GPUs / free GPUs, clipped to [0, 4]
)

CLUSTER_FEATURES: tuple[str, ...] = (
    "free_share",  # free GPUs / all GPUs
    "free_speed_share",  # the same, weighted by each type's nominal speed
    "log_free",  # log1p(free GPUs)
    "log_max_free_node",  # log1p(most free GPUs on one node)
    "log_pending",  # log1p(pending jobs)
    "log_pending_gpus",  # log1p(GPUs the pending jobs ask for)
    "backlog_h",  # log1p(predicted pending GPU-hours / all GPUs)
    "log_running",  # log1p(running jobs)
    "log_limit_left_h",  # log1p(mean hours left of the running jobs' limits)
    "log_median_runtime_h",  # log1p(median runtime of recent jobs, hours)
)

_WAIT_CAP_H = 24.0 * 60.0
_K = TypeVar("_K")


def log1p_hours(seconds: FloatArray | float) -> FloatArray:
    hours: FloatArray = np.maximum(np.asarray(seconds, dtype=float), 0.0) / 3600.0
    return np.log1p(hours)


@dataclass
class RuntimeHistory:
    """Runtime statistics of finished jobs, per account (see the module docstring)."""

    window: int = 20
    default_runtime_s: float = 3600.0
    _by_key: dict[tuple[str, int], deque[float]] = field(default_factory=dict)
    _by_account: dict[str, deque[float]] = field(default_factory=dict)
    _all: deque[float] = field(default_factory=lambda: deque(maxlen=200))
    _log_runtime: dict[str, RunningMoments] = field(default_factory=dict)
    _limit_use: dict[str, RunningMoments] = field(default_factory=dict)
    _cache: dict[tuple[str, int], float] = field(default_factory=dict)

    def add(self, done: FinishedJob) -> None:
        runtime = max(done.end_time - done.start_time, 1.0)
        account = account_of(done.job)
        self._recent(self._by_key, (account, done.job.num_gpus)).append(runtime)
        self._recent(self._by_account, account).append(runtime)
        self._all.append(runtime)
        self._log_runtime.setdefault(account, RunningMoments()).add(math.log(runtime))
        if done.job.time_limit:
            self._limit_use.setdefault(account, RunningMoments()).add(
                math.log(runtime / done.job.time_limit)
            )
        self._cache.clear()

    def _recent(self, table: dict[_K, deque[float]], key: _K) -> deque[float]:
        found = table.get(key)
        if found is None:
            found = table[key] = deque(maxlen=self.window)
        return found

    def predicted(self, account: str, gpus: int) -> float:
        key = (account, gpus)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = self._predict(key)
        return cached

    def _predict(self, key: tuple[str, int]) -> float:
        for history in (self._by_key.get(key), self._by_account.get(key[0]), self._all):
            if history:
                return float(median(history))
        return self.default_runtime_s

    def account_row(self, account: str) -> tuple[float, float, float]:
        """(log1p(count), runtime spread, limit use) of one account."""
        moments = self._log_runtime.get(account)
        use = self._limit_use.get(account)
        count = moments.count if moments else 0
        spread = moments.std if moments else 0.0
        limit_use = min(max(use.mean, -6.0), 1.0) if use and use.count else 0.0
        return math.log1p(count), spread, limit_use

    def median_runtime(self) -> float:
        return float(median(self._all)) if self._all else self.default_runtime_s


ShapeKey = tuple[int, int | None, int | None, str | None]


def shape_key(job: Job) -> ShapeKey:
    """Jobs with the same key fit in exactly the same free GPUs."""
    return (job.num_gpus, job.num_nodes, job.gpus_per_node, job.gpu_type)


@dataclass(frozen=True)
class QueueGroups:
    """The pending jobs grouped by (account, request shape): jobs of one group differ only in
    their wait, so history and request features are computed once per group, and placement
    candidates once per shape. ``group_of[j]`` indexes ``groups``; ``shape_of[j]`` indexes
    ``shapes`` (one representative job each)."""

    group_of: IntArray
    groups: tuple[Job, ...]
    shape_of: IntArray
    shapes: tuple[Job, ...]

    @classmethod
    def of(cls, pending: Sequence[Job]) -> QueueGroups:
        index: dict[tuple[str, ShapeKey], int] = {}
        groups: list[Job] = []
        group_of = np.empty(len(pending), dtype=np.int64)
        for j, job in enumerate(pending):
            key = (job.user or job.partition or "-", shape_key(job))
            found = index.get(key)
            if found is None:
                found = index[key] = len(groups)
                groups.append(job)
            group_of[j] = found
        shape_index: dict[ShapeKey, int] = {}
        shapes: list[Job] = []
        group_shape = np.empty(len(groups), dtype=np.int64)
        for g, job in enumerate(groups):
            group_shape[g] = shape_index.setdefault(shape_key(job), len(shape_index))
            if group_shape[g] == len(shapes):
                shapes.append(job)
        return cls(group_of, tuple(groups), group_shape[group_of], tuple(shapes))


@dataclass(frozen=True)
class Encoded:
    """One snapshot as the networks see it: job rows aligned with ``snapshot.pending``."""

    snapshot: ClusterSnapshot
    groups: QueueGroups
    jobs: FloatArray
    cluster: FloatArray

    @cached_property
    def index(self) -> dict[JobId, int]:
        return {job.job_id: j for j, job in enumerate(self.snapshot.pending)}


class FeatureBuilder:
    """Learns runtime history from snapshots and turns one snapshot into feature arrays.

    ``observe`` is idempotent per snapshot, so the ordering and placement agents can share one
    builder (and one history) while each still sees every snapshot.
    """

    def __init__(self, gpu_speed: Mapping[str, float] | None = None, window: int = 20) -> None:
        self.history = RuntimeHistory(window=window)
        self.gpu_speed: dict[str, float] = {k.lower(): v for k, v in (gpu_speed or {}).items()}
        self._last: ClusterSnapshot | None = None
        self._node_speed: tuple[object, FloatArray] | None = None
        self._encoded: Encoded | None = None

    def observe(self, snapshot: ClusterSnapshot) -> None:
        if snapshot is self._last:
            return
        self._last = snapshot
        for done in snapshot.finished:
            self.history.add(done)

    def encode(self, snapshot: ClusterSnapshot) -> Encoded:
        """The snapshot's features (cached: both agents ask for the same snapshot)."""
        if self._encoded is None or self._encoded.snapshot is not snapshot:
            groups = QueueGroups.of(snapshot.pending)
            jobs = self.job_features(snapshot, groups)
            cluster = self.cluster_features(snapshot, jobs)
            self._encoded = Encoded(snapshot, groups, jobs, cluster)
        return self._encoded

    def job_row(self, job: Job, snapshot: ClusterSnapshot) -> FloatArray:
        """One job's features in this snapshot (it need not be pending in it)."""
        encoded = self.encode(snapshot)
        found = encoded.index.get(job.job_id)
        if found is None:
            alone = dataclasses.replace(snapshot, pending=(job,), precomputed_columns=None)
            single: FloatArray = self.job_features(alone, QueueGroups.of((job,)))[0].copy()
            return single
        row: FloatArray = encoded.jobs[found]
        return row

    def node_speed_of(self, cluster: Cluster) -> FloatArray:
        """Nominal per-GPU speed of each node's type, scaled so the fastest type is 1."""
        if self._node_speed is None or self._node_speed[0] is not cluster:
            raw = np.array([self.gpu_speed.get(n.gpu_type.lower(), 1.0) for n in cluster.nodes])
            self._node_speed = (cluster, raw / max(float(raw.max(initial=0.0)), 1e-9))
        return self._node_speed[1]

    def job_features(self, snapshot: ClusterSnapshot, groups: QueueGroups) -> FloatArray:
        """``[len(pending), len(JOB_FEATURES)]``, rows aligned with ``snapshot.pending``."""
        columns = snapshot.columns
        gpus = columns.num_gpus
        limit = columns.time_limit
        has_limit = np.isfinite(limit) & (limit > 0)
        per_group = self._group_rows(groups.groups)[groups.group_of]
        predicted = per_group[:, 0]
        free = max(sum(snapshot.free_gpus), 1)
        out = np.empty((len(gpus), len(JOB_FEATURES)))
        out[:, 0] = np.log1p(gpus)
        out[:, 1:4] = per_group[:, 1:4]
        out[:, 4] = has_limit
        out[:, 5] = np.where(has_limit, log1p_hours(np.nan_to_num(limit)), 0.0)
        wait_h = np.clip((snapshot.time - columns.submit_time) / 3600.0, 0.0, _WAIT_CAP_H)
        out[:, 6] = np.log1p(wait_h)
        out[:, 7] = log1p_hours(predicted)
        out[:, 8] = log1p_hours(predicted * gpus)
        out[:, 9:12] = per_group[:, 4:7]
        out[:, 12] = np.minimum(gpus / free, 4.0)
        return out

    def _group_rows(self, groups: Sequence[Job]) -> FloatArray:
        """Per group: predicted runtime (s), the request columns (log1p nodes, fixed shape,
        typed) and the account's history row."""
        rows = np.empty((len(groups), 7))
        for g, job in enumerate(groups):
            account = account_of(job)
            rows[g, 0] = self.history.predicted(account, job.num_gpus)
            rows[g, 1] = math.log1p(job.num_nodes or 0)
            rows[g, 2] = float(job.num_nodes is not None or job.gpus_per_node is not None)
            rows[g, 3] = float(bool(job.gpu_type))
            rows[g, 4:7] = self.history.account_row(account)
        return rows

    def cluster_features(self, snapshot: ClusterSnapshot, job_rows: FloatArray) -> FloatArray:
        """``[len(CLUSTER_FEATURES)]``; ``job_rows`` are this snapshot's job features."""
        capacity = np.array([n.gpus for n in snapshot.cluster.nodes], dtype=float)
        free = np.asarray(snapshot.free_gpus, dtype=float)
        speed = self.node_speed_of(snapshot.cluster)
        total = max(float(capacity.sum()), 1.0)
        gpu_hours = np.expm1(job_rows[:, 8]).sum() if len(job_rows) else 0.0
        return np.array([
            free.sum() / total,
            float((free * speed).sum() / max((capacity * speed).sum(), 1e-9)),
            math.log1p(free.sum()),
            math.log1p(free.max(initial=0.0)),
            math.log1p(len(snapshot.pending)),
            math.log1p(float(snapshot.columns.num_gpus.sum())),
            math.log1p(gpu_hours / total),
            math.log1p(len(snapshot.running)),
            float(log1p_hours(self._mean_limit_left(snapshot))),
            float(log1p_hours(self.history.median_runtime())),
        ])

    @staticmethod
    def _mean_limit_left(snapshot: ClusterSnapshot) -> float:
        left = [
            end - snapshot.time
            for end in (r.limit_end for r in snapshot.running)
            if end is not None
        ]
        return float(np.mean(left)) if left else 0.0
