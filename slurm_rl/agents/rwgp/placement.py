r"""The RWGP placement agent: fluctuation-aware node-set choice for gang jobs.

Our reconstruction of the paper's placement agent (only its abstract is public); the design is
ours (docs/placement-agent.md).

Each candidate node set ``P`` (:mod:`.candidates`: consolidated first, then spread) is scored
by the cost the reward charges for running one unit of the job's work on it,

.. math::

    \text{score}(P) = \frac{1 + λ \cdot \text{price}(P)}{\text{pace}(P)}
                      \cdot \Bigl(1 + η\,\frac{\text{GPUs left free on }P}{\text{GPUs of }P}
                      + ζ\,[P \text{ takes part of an entirely free node}]\Bigr),
    \qquad
    \text{pace}(P) = \bigl(E[m_P] - κ\,\text{sd}[m_P]\bigr) \cdot \text{spread}(P)

where ``m_P = min_{i∈P} v_i f_i`` is the gang's bottleneck: ``f_i`` the RWGP's posterior
relative speed of machine ``i`` for the job's class and ``v_i`` the nominal speed of its GPU
type (a datasheet table, or a measured per-family table). ``E`` and ``sd`` of the min of the
members' Gaussians come from Clark's (1961) moment matching, taking members as independent.
``κ`` prices risk (the posterior std: fluctuation and what is not yet known), ``spread(P)`` is
the throughput of the shape relative to one node (a measured spread model if given, else
``(1 − p_s)^{|P|−1} (1 − p_g)^{[P spans host groups]}``), ``price`` is the set's GPU-hour
price (fees = runtime × price, so ``λ · price / pace`` is the fee per unit of work, with ``λ``
as in the reward ``−(JCT hours + λ · fees)``), and ``η``, ``ζ`` price fragmentation: the GPUs
a set leaves free on its nodes (best-fit packing) and breaking into a whole free node, which a
large job may need whole. Both are small (0.1): they order nodes of one type whose predicted
speeds differ by a few per cent of noise, and never outweigh a straggler or a faster type.
The lowest score wins.

The policy only ever returns a node set, so it works unchanged in the simulator's ``direct``
mode (the set starts at once) and ``slurm`` mode, and live, where the actuator turns it into
``ReqNodeList=<the set> NumNodes=N-N``.

**Exclusions.** A released job the agent could not place is kept off nodes far slower than
its best (Slurm's ``ExcNodeList``), and the agent never pins it there itself: which jobs and
which nodes are :mod:`.exclusions`' rules.

**Migrations.** GPUs left free after a decision's placements may be worth more to a job
already running: a checkpointable job on one node that has run ``migrate_after_s`` (4 h) is
requeued and restarted on a free node whose risk-adjusted pace is at least ``migrate_speedup``
(2×) its own node's and whose cost per unit of work ``(1 + λ · price) / pace`` is lower, oldest
job first. The agent cannot know how much work is left; elapsed time stands in for it, since
run times are heavy-tailed — a job that has run for hours is likely to run for hours more, and
the restart (the work since its last checkpoint) is small beside that. Gangs over several nodes
are not moved (a whole faster set seldom frees at once).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import torch
from numpy.typing import NDArray

from slurm_rl.agents.rwgp.candidates import FloatArray, Limits, NodeSet, NodeTable, candidate_sets
from slurm_rl.agents.rwgp.exclusions import ExclusionRules
from slurm_rl.agents.rwgp.model import Prediction, RwgpConfig, RwgpModel
from slurm_rl.agents.rwgp.runtimes import RuntimeReference
from slurm_rl.core import Cluster, ClusterSnapshot, Job, JobId, Placement, RunningJob

_MIN_PACE = 1e-3
log = logging.getLogger(__name__)


class SpreadModel(Protocol):
    """Measured throughput of a multi-node shape relative to one node (e.g. the simulator's
    :class:`~slurm_rl.simulator.perfmodel.PerformanceModel`, built from published data)."""

    def spread_factor(
        self, family: str, gpus_per_node: tuple[int, ...], same_host_group: bool = True
    ) -> float: ...


@dataclass(frozen=True)
class PlacementConfig:
    """Weights of the score (module docstring) and how the agent learns."""

    fee_weight: float = 0.0  # λ
    risk_aversion: float = 1.0  # κ
    # p_s per extra node and p_g across host groups, when no spread model is given: the
    # measured penalties (docs/performance-model.md §4) weighted by Philly's GPU time per family
    spread_penalty: float = 0.2
    cross_group_penalty: float = 0.25
    packing_weight: float = 0.1  # η
    whole_node_weight: float = 0.1  # ζ: taking part of a node that was entirely free
    limits: Limits = field(default_factory=Limits)
    exclusion_ratio: float = 0.25  # ρ: keep excluded jobs off nodes under ρ × best pace (0: off)
    exclusion_spanning: bool = True  # False: a gang that must span nodes is not excluded for it
    # the smallest job excluded from slow nodes; None: only gangs that must span nodes
    exclusion_min_gpus: int | None = 2
    # a smaller job pending this long means every GPU is taken: then gangs that fit one node
    # may take slow nodes too (module docstring); None: never
    exclusion_backlog_s: float | None = 300.0
    exclusion_backlog_memory_s: float = 86_400.0  # a backlog seen this recently still counts
    # a gang pending this long takes slow nodes too (None: it waits for a fast one for good)
    exclusion_patience_s: float | None = None
    # a job with a time limit this long is kept off slow nodes whatever its size (None: off)
    exclusion_min_limit_s: float | None = None
    # that rule holds only while the pending long jobs' GPU-hours are at most this many hours
    # of the whole cluster (None: always)
    exclusion_queue_h: float | None = None
    # and only while no shorter job has waited exclusion_backlog_s (nothing shorter is waiting
    # for the slow nodes the rule would open)
    exclusion_queue_lull: bool = False
    # "auto": learn from finished jobs' runtimes only while no measured speeds arrive (live)
    runtime_readings: Literal["auto", "always", "never"] = "auto"
    threads: int | None = 1  # torch threads; one is fastest when replays share the cores
    learn: bool = True  # False: score with the prior alone (an ablation of the GP)
    model_path: str | None = None  # hyperparameters saved by RwgpModel.save
    migrate_after_s: float | None = 14_400.0  # run this long before a move (None: never move)
    migrate_speedup: float = 2.0  # move only to a node this many times faster
    # outside a backlog, also move when elapsed × (1 − pace here / pace there) reaches this
    # (None: the two settings above alone)
    migrate_gain_s: float | None = None


@dataclass(frozen=True)
class CandidateFeatures:
    """One candidate node set and what the agents learn from: the RL placement head scores
    these, and the ordering agent's message summarises the best of them."""

    placement: Placement
    mean: float  # posterior mean of the bottleneck relative speed (1 = healthy)
    std: float  # its posterior std: the fluctuation risk
    pace: float  # risk-adjusted bottleneck × type speed × spread factor
    price: float  # currency per hour for the whole set
    spread: int  # nodes beyond the first
    cross_group: bool
    score: float  # expected cost per unit of work; lower is better

    @property
    def consolidated(self) -> bool:
        return self.spread == 0


@dataclass(frozen=True)
class _NodeLists:
    """The same per-node numbers as Python lists: scoring a few nodes reads scalars."""

    mean: list[float]
    std: list[float]
    speed: list[float]


@dataclass(frozen=True)
class _NodeView:
    """Per-node arrays for one job class at one belief: what scoring reads."""

    mean: FloatArray
    std: FloatArray
    speed: FloatArray  # nominal type speed
    pace: FloatArray  # speed × (mean − κ std), floored

    @cached_property
    def lists(self) -> _NodeLists:
        return _NodeLists(self.mean.tolist(), self.std.tolist(), self.speed.tolist())


@dataclass(frozen=True)
class _Nodes:
    """A cluster's static per-node facts, as arrays and as lists (scoring reads scalars)."""

    table: NodeTable
    price: FloatArray
    prices: list[float]
    groups: list[int]
    capacity: list[int]
    names: tuple[str, ...]

    @classmethod
    def from_cluster(cls, cluster: Cluster) -> _Nodes:
        table = NodeTable.from_cluster(cluster)
        price = np.array([n.price_per_gpu_hour for n in cluster.nodes], dtype=float)
        return cls(table, price, price.tolist(), table.group_id.tolist(), table.capacity.tolist(),
                   tuple(n.name for n in cluster.nodes))


class RwgpPlacement:
    """Placement by RWGP-predicted bottleneck speed, spread, risk and price."""

    name = "rwgp"

    def __init__(
        self,
        gpu_speed: Mapping[str, float] | None = None,
        config: PlacementConfig | None = None,
        model_config: RwgpConfig | None = None,
        family_speed: Mapping[str, Mapping[str, float]] | None = None,
        spread_model: SpreadModel | None = None,
        hyperparameters: Mapping[str, Any] | None = None,
    ) -> None:
        self.config = config or PlacementConfig()
        self._hyperparameters = hyperparameters  # a retrained bundle's refit prior
        self._model_config = model_config
        self._gpu_speed = {k.lower(): v for k, v in (gpu_speed or {}).items()}
        self._family_speed = {
            f: {k.lower(): v for k, v in row.items()} for f, row in (family_speed or {}).items()
        }
        self.model: RwgpModel | None = None
        self._spread_model = spread_model
        self._shapes: dict[tuple[str, tuple[int, ...], bool], float] = {}
        self._nodes: _Nodes | None = None
        self._speeds: dict[str, FloatArray] = {}
        self._views: dict[str, tuple[Prediction, _NodeView]] = {}
        self._runtimes = RuntimeReference()
        self.exclusion_rules = ExclusionRules(self.config)
        self._measured = False

    # ----- learning --------------------------------------------------------------------

    def observe(self, snapshot: ClusterSnapshot) -> None:
        model = self._model_for(snapshot.cluster)
        if not self.config.learn:
            return
        if snapshot.observations:
            self._measured = True
            model.observe(snapshot.observations)
        mode = self.config.runtime_readings
        if snapshot.finished and (mode == "always" or (mode == "auto" and not self._measured)):
            readings, variances = self._runtimes.readings(snapshot.finished, snapshot.cluster)
            if readings:
                model.observe(readings, variances)
        model.advance(snapshot.time)

    def _model_for(self, cluster: Cluster) -> RwgpModel:
        if self.model is not None and self.model.cluster is cluster:
            return self.model
        if self.config.threads:
            torch.set_num_threads(self.config.threads)
        self.model = self._carried(cluster) if self.model is not None else self._fresh(cluster)
        self._nodes = _Nodes.from_cluster(cluster)
        self.exclusion_rules.use_cluster(self._nodes.table, self._nodes.names)
        self._speeds.clear()
        self._views.clear()
        return self.model

    def _fresh(self, cluster: Cluster) -> RwgpModel:
        path = self.config.model_path
        model = (
            RwgpModel.load(Path(path), cluster, self._model_config)
            if path
            else RwgpModel(cluster, self._model_config)
        )
        if self._hyperparameters is not None:
            self._use_hyperparameters(model, self._hyperparameters)
        return model

    def _carried(self, cluster: Cluster) -> RwgpModel:
        """The belief so far on the changed cluster (live: a node joined, left or changed
        price); a cluster with none of the old nodes starts afresh."""
        assert self.model is not None
        old = self.model
        if not any(cluster.has_node(node.name) for node in old.cluster.nodes):
            return self._fresh(cluster)
        model = old.carried_to(cluster)
        log.info("cluster changed (%d -> %d nodes): the speed belief keeps %d of %d readings",
                 len(old.cluster.nodes), len(cluster.nodes), len(model.window), len(old.window))
        return model

    @staticmethod
    def _use_hyperparameters(model: RwgpModel, values: Mapping[str, Any]) -> None:
        try:
            model.use_hyperparameters(values)
        except (ValueError, TypeError, RuntimeError, KeyError) as exc:
            log.warning("the bundle's RWGP hyperparameters do not fit this RWGP (%s): "
                        "starting from the default prior", exc)

    # ----- deciding --------------------------------------------------------------------

    def place(
        self, job: Job, free_gpus: Sequence[int], snapshot: ClusterSnapshot
    ) -> Placement | None:
        scored = self._scored(job, free_gpus, snapshot)
        if not scored:
            return None
        best, _ = min(scored, key=lambda pair: pair[1].score)
        return self._placement(best, snapshot.cluster)

    def exclusions(self, job: Job, snapshot: ClusterSnapshot) -> tuple[str, ...]:
        """Nodes Slurm must keep ``job`` off if it starts it (:mod:`.exclusions`)."""
        return self._too_slow_names(job, snapshot)

    def barred_nodes(self, job: Job, snapshot: ClusterSnapshot) -> tuple[str, ...]:
        """Nodes never placed on for ``job``: the same (their node costs are infinite)."""
        return self._too_slow_names(job, snapshot)

    def _too_slow_names(self, job: Job, snapshot: ClusterSnapshot) -> tuple[str, ...]:
        view = self._view(self._model_for(snapshot.cluster), job.model_family)
        slow = self.exclusion_rules.too_slow(job, view, snapshot)
        return () if slow is None else slow.names

    def exclusion_key(self, job: Job, snapshot: ClusterSnapshot) -> tuple[bool, bool]:
        """What besides its request shape decides which nodes are too slow for ``job``."""
        return self.exclusion_rules.key(job, snapshot)

    def migrations(
        self, snapshot: ClusterSnapshot, free_gpus: Sequence[int]
    ) -> dict[JobId, Placement]:
        """Running jobs to move to nodes left free, and where (module docstring)."""
        never = self.config.migrate_after_s is None and self.config.migrate_gain_s is None
        if never or not any(_movable(run) for run in snapshot.running):
            return {}
        model = self._model_for(snapshot.cluster)
        free = np.asarray(free_gpus, dtype=np.int64).copy()
        calm = (self.config.migrate_gain_s is not None
                and not self.exclusion_rules.backlog(snapshot))
        moves: dict[JobId, Placement] = {}
        for run in sorted(snapshot.running, key=lambda r: r.start_time):
            needed = self._needed_speedup(snapshot.time - run.start_time, calm)
            if not _movable(run) or math.isinf(needed):
                continue
            target = self._faster_node(run, free, model, snapshot, needed)
            if target is not None:
                assert self._nodes is not None
                moves[run.job.job_id] = Placement((self._nodes.names[target],), run.placement.gpus)
                free[target] -= run.placement.gpus[0]
        return moves

    def _needed_speedup(self, elapsed: float, calm: bool) -> float:
        """How much faster a node must be to move a job there after ``elapsed`` on its own
        (``inf``: not yet); outside a backlog the gain threshold, if set, may allow more."""
        gain, after = self.config.migrate_gain_s, self.config.migrate_after_s
        plain = math.inf
        if after is not None and elapsed >= after:
            plain = self.config.migrate_speedup
        if gain is None or not calm or elapsed <= gain:
            return plain
        return min(plain, 1.0 / (1.0 - gain / elapsed))

    def _faster_node(
        self, run: RunningJob, free: NDArray[np.int64], model: RwgpModel,
        snapshot: ClusterSnapshot, needed: float,
    ) -> int | None:
        """The free node to move ``run`` to: ``migrate_speedup`` × faster, cheaper per unit of
        work, and the best by the placement score; None when there is none."""
        assert self._nodes is not None
        job, gpus = run.job, run.placement.gpus[0]
        view = self._view(model, job.model_family)
        here = snapshot.cluster.index(run.placement.nodes[0])
        per_work = (1.0 + self.config.fee_weight * gpus * self._nodes.price) / view.pace
        better = (view.pace >= needed * view.pace[here]) & (
            per_work < per_work[here]) & (free >= gpus)
        if not better.any():
            return None
        cost = np.where(better, self._node_cost(job, free, view, snapshot), np.inf)
        best = int(np.argmin(cost))
        return best if math.isfinite(cost[best]) else None

    def candidates(
        self, job: Job, free_gpus: Sequence[int], snapshot: ClusterSnapshot
    ) -> list[CandidateFeatures]:
        """Every candidate node set for ``job`` in ``free_gpus``, consolidated first, each
        with its features (module docstring)."""
        return [
            CandidateFeatures(self._placement(node_set, snapshot.cluster), s.mean, s.std, s.pace,
                              s.price, len(node_set.nodes) - 1, s.cross_group, s.score)
            for node_set, s in self._scored(job, free_gpus, snapshot)
        ]

    def node_belief(self, job: Job, snapshot: ClusterSnapshot) -> dict[str, tuple[float, float]]:
        """The GP's posterior (mean, std) of each node's relative speed for ``job``'s class,
        by node name (for ``slurm-rl explain``)."""
        view = self._view(self._model_for(snapshot.cluster), job.model_family)
        names = [node.name for node in snapshot.cluster.nodes]
        return {n: (float(m), float(s)) for n, m, s in zip(names, view.mean, view.std,
                                                          strict=True)}

    def _scored(
        self, job: Job, free_gpus: Sequence[int], snapshot: ClusterSnapshot
    ) -> list[tuple[NodeSet, _Score]]:
        model = self._model_for(snapshot.cluster)
        assert self._nodes is not None
        free = np.asarray(free_gpus, dtype=np.int64)
        view = self._view(model, job.model_family)
        cost = self._node_cost(job, free, view, snapshot)
        sets = candidate_sets(job, self._nodes.table, free, cost, self.config.limits)
        free_list = free.tolist()
        family = job.model_family
        return [(node_set, self._score(node_set, free_list, view, family)) for node_set in sets]

    @staticmethod
    def _placement(node_set: NodeSet, cluster: Cluster) -> Placement:
        return Placement(tuple(cluster.nodes[i].name for i in node_set.nodes), node_set.gpus)

    def _view(self, model: RwgpModel, family: str) -> _NodeView:
        prediction = model.predict(family)
        cached = self._views.get(family)
        if cached is not None and cached[0] is prediction:
            return cached[1]
        speed = self._type_speed(family)
        risky = prediction.mean - self.config.risk_aversion * prediction.std
        pace = speed * np.maximum(risky, _MIN_PACE)
        view = _NodeView(prediction.mean, prediction.std, speed, pace)
        self._views[family] = (prediction, view)
        return view

    def _type_speed(self, family: str) -> FloatArray:
        """Nominal per-GPU speed of each node's type for this family (1 when unknown)."""
        known = self._speeds.get(family)
        if known is not None:
            return known
        assert self._nodes is not None
        row = self._family_speed.get(family) or self._gpu_speed
        by_type = [row.get(name, 1.0) for name in self._nodes.table.type_names]
        speed = np.array(by_type, dtype=float)[self._nodes.table.type_id]
        self._speeds[family] = speed
        return speed

    def _node_cost(
        self, job: Job, free: NDArray[np.int64], view: _NodeView, snapshot: ClusterSnapshot
    ) -> FloatArray:
        """The score of running the whole job on each node alone (``inf`` where it may not
        run): the order in which candidate sets take nodes."""
        assert self._nodes is not None
        config, capacity = self.config, self._nodes.table.capacity
        g = job.num_gpus
        fill = 1.0 + config.packing_weight * np.maximum(free - g, 0) / capacity
        fill += config.whole_node_weight * ((free == capacity) & (free > g))
        cost = (1.0 + config.fee_weight * g * self._nodes.price) / view.pace * fill
        if job.gpu_type:
            wanted = job.gpu_type.lower()
            allowed = np.array([name == wanted for name in self._nodes.table.type_names])
            cost = np.where(allowed[self._nodes.table.type_id], cost, np.inf)
        slow = self.exclusion_rules.too_slow(job, view, snapshot)
        if slow is not None:
            cost = np.where(slow.mask, np.inf, cost)  # it waits for a faster node instead
        return cost

    def _shape(self, family: str, gpus: tuple[int, ...], cross: bool) -> float:
        """Throughput of this shape relative to one node: the spread model's, else
        ``(1 − p_s)^{nodes−1} (1 − p_g)^{[cross]}``."""
        if len(gpus) == 1:
            return 1.0
        if self._spread_model is not None:
            key = (family, gpus, cross)
            known = self._shapes.get(key)
            if known is None:
                known = self._spread_model.spread_factor(family, gpus, same_host_group=not cross)
                self._shapes[key] = known
            return known
        shape = (1.0 - self.config.spread_penalty) ** (len(gpus) - 1)
        return shape * (1.0 - self.config.cross_group_penalty) if cross else shape

    def _score(
        self, node_set: NodeSet, free: list[int], view: _NodeView, family: str
    ) -> _Score:
        """The module docstring's score, in plain floats (this runs for every candidate of
        every pending job)."""
        assert self._nodes is not None
        nodes, gpus, config = node_set.nodes, node_set.gpus, self.config
        health, pace = _bottleneck(nodes, view.lists, config.risk_aversion)
        cross = len({self._nodes.groups[i] for i in nodes}) > 1
        pace *= self._shape(family, gpus, cross)
        price = sum(g * self._nodes.prices[i] for i, g in zip(nodes, gpus, strict=True))
        capacity = [self._nodes.capacity[i] for i in nodes]
        left = sum(free[i] for i in nodes) - sum(gpus)
        broken = any(free[i] == c and free[i] > g for i, c, g in zip(nodes, capacity, gpus,
                                                                      strict=True))
        fill = 1.0 + config.packing_weight * left / sum(capacity)
        fill += config.whole_node_weight * broken
        score = (1.0 + config.fee_weight * price) / pace * fill
        return _Score(score, health[0], health[1], pace, price, cross)


def _movable(run: RunningJob) -> bool:
    """A checkpointable job on one node."""
    return run.job.checkpointable and run.placement.num_nodes == 1


def _bottleneck(
    nodes: tuple[int, ...], lists: _NodeLists, risk_aversion: float
) -> tuple[tuple[float, float], float]:
    """The gang's health ``min_i f_i`` (mean, sd) and its risk-adjusted pace
    ``E[min_i v_i f_i] − κ sd[…]`` (floored), by :func:`gaussian_min`."""
    mean = [lists.mean[i] for i in nodes]
    std = [lists.std[i] for i in nodes]
    speed = [lists.speed[i] for i in nodes]
    paced = gaussian_min([v * m for v, m in zip(speed, mean, strict=True)],
                         [v * s for v, s in zip(speed, std, strict=True)])
    pace = max(paced[0] - risk_aversion * paced[1], _MIN_PACE * max(speed))
    return gaussian_min(mean, std), pace


@dataclass(frozen=True, slots=True)
class _Score:
    score: float
    mean: float
    std: float
    pace: float
    price: float
    cross_group: bool


def gaussian_min(mean: Sequence[float], std: Sequence[float]) -> tuple[float, float]:
    r"""Mean and std of ``min_i X_i`` for independent ``X_i ~ N(mean_i, std_i²)``, by Clark's
    (1961) moment matching, folding members in one at a time. For two,
    with ``θ = sqrt(σ₁² + σ₂²)`` and ``α = (μ₂ − μ₁)/θ``:
    ``E[min] = μ₁Φ(α) + μ₂Φ(−α) − θφ(α)`` and
    ``E[min²] = (μ₁² + σ₁²)Φ(α) + (μ₂² + σ₂²)Φ(−α) − (μ₁ + μ₂)θφ(α)``."""
    m, s = float(mean[0]), float(std[0])
    for m2, s2 in zip(mean[1:], std[1:], strict=True):
        theta = math.hypot(s, s2)
        if theta < 1e-12:
            m, s = min(m, m2), 0.0
            continue
        alpha = (m2 - m) / theta
        cdf = 0.5 * math.erfc(-alpha / math.sqrt(2.0))
        pdf = math.exp(-0.5 * alpha * alpha) / math.sqrt(2.0 * math.pi)
        first = m * cdf + m2 * (1.0 - cdf) - theta * pdf
        second = (m * m + s * s) * cdf + (m2 * m2 + s2 * s2) * (1.0 - cdf) - (m + m2) * theta * pdf
        m, s = first, math.sqrt(max(second - first * first, 0.0))
    return m, s
