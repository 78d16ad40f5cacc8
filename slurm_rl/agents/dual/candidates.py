r"""Placement candidates: one node set per GPU type, proposed by a node-set chooser.

The learned placement head (:class:`~slurm_rl.agents.dual.agent.LearnedPlacement`) does not
pick machines itself: a *chooser* (the RWGP placement agent, or a heuristic) proposes the best
node set inside each GPU type that has room — the chooser sees only that type's free GPUs — and
the head picks among those few candidates. Which *type* a job gets (fast and dear, or slow and
cheap) is the decision that moves JCT and fees most on a heterogeneous cluster; which machines
inside a type is what the RWGP is good at. A job that fits in no single type gets the chooser's
mixed-type set as its only candidate.

Candidate features (all scaled to be comparable across clusters):

* ``pace`` — predicted bottleneck speed of the set relative to the cluster's fastest GPU type.
  From the RWGP: its risk-adjusted pace :math:`(E[m_P] - κ\,sd[m_P])\,v\,(1-p_s)^{|P|-1}`
  (docs of :mod:`slurm_rl.agents.rwgp.placement`); from a heuristic chooser: the slowest member's
  nominal type speed times :math:`(1-p_s)^{|P|-1}`.
* ``health``/``risk`` — the RWGP posterior mean and std of the bottleneck's relative speed
  (1 and 0 for a heuristic chooser).
* ``price`` — the set's price per GPU-hour over the cluster's highest; ``cost_per_work`` =
  price / pace: what a unit of the job's work costs there.
* ``spread`` (log1p of the extra nodes), ``cross_group``, ``type_free_share`` (free share of the
  set's GPU types before placing) and ``fills_type`` (job GPUs / free GPUs of those types).

Jobs are passed to the chooser without ``model_family`` (it is derived from the true duration in
the simulator, so a family-aware chooser would leak it into the learned agents' inputs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slurm_rl.agents.dual.features import FeatureBuilder, FloatArray, IntArray, ShapeKey, shape_key
from slurm_rl.agents.rwgp.placement import CandidateFeatures, RwgpPlacement
from slurm_rl.core import Cluster, ClusterSnapshot, Job, Placement
from slurm_rl.policy import PlacementPolicy

CANDIDATE_FEATURES: tuple[str, ...] = (
    "pace",
    "health",
    "risk",
    "price",
    "cost_per_work",
    "spread",
    "cross_group",
    "type_free_share",
    "fills_type",
)

_MIN_PACE = 0.05
_MAX_COST = 20.0


@dataclass(frozen=True)
class CandidateSet:
    """Candidate placements for one job, their features (``[len(placements), F]``) and the
    chooser's log cost per unit of the job's work on each (``[len(placements)]``: the RWGP's
    score, which prices fees at its λ; −log pace for a heuristic chooser)."""

    placements: tuple[Placement, ...]
    features: FloatArray
    log_cost: FloatArray

    @classmethod
    def empty(cls) -> CandidateSet:
        return cls((), np.zeros((0, len(CANDIDATE_FEATURES))), np.zeros(0))

    def __len__(self) -> int:
        return len(self.placements)


@dataclass(frozen=True)
class _ClusterTables:
    """Per-node arrays of one cluster that scoring reads."""

    cluster: Cluster
    type_of: IntArray
    type_names: tuple[str, ...]
    capacity: FloatArray
    price: FloatArray  # per GPU-hour, over the cluster's highest
    group_of: IntArray
    raw_speed_max: float

    @classmethod
    def of(cls, cluster: Cluster, raw_speed: dict[str, float]) -> _ClusterTables:
        names = tuple(sorted({n.gpu_type.lower() for n in cluster.nodes}))
        prices = np.array([n.price_per_gpu_hour for n in cluster.nodes], dtype=float)
        groups: dict[str, int] = {}
        return cls(
            cluster=cluster,
            type_of=np.array([names.index(n.gpu_type.lower()) for n in cluster.nodes]),
            type_names=names,
            capacity=np.array([n.gpus for n in cluster.nodes], dtype=float),
            price=prices / max(float(prices.max(initial=0.0)), 1e-9),
            group_of=np.array([
                groups.setdefault(n.host_group or f"\0{i}", len(groups))
                for i, n in enumerate(cluster.nodes)
            ]),
            raw_speed_max=max([raw_speed.get(t, 1.0) for t in names], default=1.0),
        )


class CandidateGenerator:
    """Proposes one candidate per GPU type with room (module docstring)."""

    def __init__(
        self,
        chooser: PlacementPolicy,
        builder: FeatureBuilder,
        *,
        per_type: bool = True,
        spread_penalty: float = 0.05,
    ) -> None:
        """``per_type=False``: the chooser's own choice over all free GPUs is the only
        candidate (how a heuristic placement policy describes its placement in a message)."""
        self.chooser = chooser
        self.per_type = per_type
        self._builder = builder
        self._spread_penalty = spread_penalty
        self._raw_speed = {k.lower(): v for k, v in builder.gpu_speed.items()}
        self._tables: _ClusterTables | None = None
        # The RWGP's sets and scores depend on a job only through its request shape (its model
        # family is dropped here) and its exclusion key (patience, long job), so within one
        # snapshot a shape and key in the same free GPUs get the same candidates: the dual
        # agent asks for them once per shape for the messages and again for each job it
        # places, most often in unchanged free GPUs. A heuristic chooser may read more of the
        # job (a random one its draws), so it is never memoised.
        self._memo_chooser = chooser if isinstance(chooser, RwgpPlacement) else None
        self._memo: dict[tuple[ShapeKey, bytes, tuple[bool, bool]], CandidateSet] = {}
        self._memo_of: ClusterSnapshot | None = None

    def tables(self, cluster: Cluster) -> _ClusterTables:
        if self._tables is None or self._tables.cluster is not cluster:
            self._tables = _ClusterTables.of(cluster, self._raw_speed)
        return self._tables

    def candidates(
        self, job: Job, free_gpus: Sequence[int], snapshot: ClusterSnapshot
    ) -> CandidateSet:
        free = np.asarray(free_gpus, dtype=np.int64)
        if self._memo_chooser is None:
            return self._propose(job, free, snapshot)
        if self._memo_of is not snapshot:
            self._memo_of, self._memo = snapshot, {}
        # besides its shape, the RWGP's candidates depend on whether the job's wait ended its
        # exclusions (``rwgp-patient``) and whether its limit makes it long
        key = (shape_key(job), free.tobytes(), self._memo_chooser.exclusion_key(job, snapshot))
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._propose(job, free, snapshot)
        return found

    def _propose(self, job: Job, free: IntArray, snapshot: ClusterSnapshot) -> CandidateSet:
        tables = self.tables(snapshot.cluster)
        job = dataclasses.replace(job, model_family="") if job.model_family else job
        found: list[tuple[Placement, list[float], float | None]] = []
        for t in self._types_with_room(job, free, tables) if self.per_type else ():
            masked = np.where(tables.type_of == t, free, 0)
            chosen = self._choose(job, masked, snapshot)
            if chosen is not None:
                found.append(chosen)
        if not found and int(free.sum()) >= job.num_gpus:
            chosen = self._choose(job, free, snapshot)  # all types (or no single one has room)
            if chosen is not None:
                found.append(chosen)
        if not found:
            return CandidateSet.empty()
        rows = np.array([self._row(p, known, free, tables) for p, known, _ in found], dtype=float)
        log_cost = [-np.log(max(pace, _MIN_PACE)) if score is None else np.log(max(score, 1e-9))
                    for (_, _, score), pace in zip(found, rows[:, 0], strict=True)]
        return CandidateSet(tuple(p for p, _, _ in found), rows, np.array(log_cost, dtype=float))

    @staticmethod
    def _types_with_room(job: Job, free: IntArray, tables: _ClusterTables) -> list[int]:
        per_type = np.bincount(tables.type_of, weights=free, minlength=len(tables.type_names))
        wanted = job.gpu_type.lower() if job.gpu_type else None
        return [
            t
            for t, name in enumerate(tables.type_names)
            if per_type[t] >= job.num_gpus and (wanted is None or name == wanted)
        ]

    def _choose(
        self, job: Job, free: IntArray, snapshot: ClusterSnapshot
    ) -> tuple[Placement, list[float], float | None] | None:
        """The chooser's best set in ``free``, its (pace, health, risk) and score (cost per
        unit of work) when it knows them."""
        if isinstance(self.chooser, RwgpPlacement):
            options = self.chooser.candidates(job, free.tolist(), snapshot)
            if not options:
                return None
            best: CandidateFeatures = min(options, key=lambda c: c.score)
            pace = best.pace / self.tables(snapshot.cluster).raw_speed_max
            return best.placement, [pace, best.mean, best.std], best.score
        placement = self.chooser.place(job, free.tolist(), snapshot)
        return None if placement is None else (placement, [], None)

    def _row(
        self, placement: Placement, known: list[float], free: IntArray, tables: _ClusterTables
    ) -> list[float]:
        cluster = tables.cluster
        idx = np.array([cluster.index(n) for n in placement.nodes])
        gpus = np.array(placement.gpus, dtype=float)
        spread = len(idx) - 1
        if known:
            pace, health, risk = known
        else:
            speed = self._builder.node_speed_of(cluster)
            pace = float(speed[idx].min()) * (1.0 - self._spread_penalty) ** spread
            health, risk = 1.0, 0.0
        price = float((gpus * tables.price[idx]).sum() / gpus.sum())
        types = np.isin(tables.type_of, tables.type_of[idx])
        type_free = float(free[types].sum())
        return [
            pace,
            health,
            risk,
            price,
            min(price / max(pace, _MIN_PACE), _MAX_COST),
            float(np.log1p(spread)),
            float(len(set(tables.group_of[idx].tolist())) > 1),
            type_free / max(float(tables.capacity[types].sum()), 1.0),
            float(gpus.sum()) / max(type_free, 1.0),
        ]
