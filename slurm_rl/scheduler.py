"""The scheduler: an ordering policy and a placement policy composed into one decision.

The ordering policy scores every pending job; jobs are released highest score first. Walking
that ranking, the placement policy proposes a node set for each job that fits in the GPUs still
free in this decision. ``walk="strict"`` stops at the first job that does not fit (a job never
starts before a higher-ranked one); ``walk="greedy"`` carries on down the ranking. A placement
that can also exclude nodes (:class:`~slurm_rl.policy.ExcludingPlacement`) is asked, for
each released job it did not place, which nodes Slurm must keep that job off. One that can
move running jobs (:class:`~slurm_rl.policy.MigratingPlacement`) is then offered the GPUs
no placement took — also when nothing is pending, since that is when fast nodes sit idle.

Between the ordering and the walk sits the ranking step every policy shares
(:mod:`slurm_rl.fairness`, ``rules``): the fairness guard re-ranks when the waiting users'
mean waits are too uneven, and each job's ``--nice`` moves it down (or, negative, up). It runs
the same in every world and for every policy, and the policy never sees it.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import replace
from operator import attrgetter
from typing import Literal, cast

import numpy as np

from slurm_rl.core import ClusterSnapshot, Decision, Job, JobId, Placement
from slurm_rl.fairness import (
    RankingRules,
    Reranking,
    StartedWaits,
    needs_reranking,
    rerank,
    unchanged,
    waiting_fairness,
)
from slurm_rl.policy import (
    BarringPlacement,
    ExcludingPlacement,
    MigratingPlacement,
    OrderingPolicy,
    PlacementPolicy,
)
from slurm_rl.reservation import Reservation, reserve
from slurm_rl.room import Room

Walk = Literal["strict", "greedy"]
_job_id = attrgetter("job_id")


class Scheduler:
    """``max_ranked`` bounds how many jobs one decision releases, like Slurm's own queue depth
    (``default_queue_depth``, ``bf_max_job_test``): the rest wait for a later cycle, or for
    Slurm once their deferral ends. It keeps a cycle's cost independent of the queue length;
    the ranking step, when it changes the order, orders every pending job before the cut (a
    user the policy ranks below the cut must still be able to come forward).

    ``rules`` are the ranking step's (:class:`~slurm_rl.fairness.RankingRules`; the default
    is the daemon's default, so a replay ranks as the daemon would). ``last_reranking`` says
    what the step did in the last decision: the users' wait figures, and which jobs moved."""

    def __init__(
        self,
        ordering: OrderingPolicy,
        placement: PlacementPolicy,
        *,
        walk: Walk = "greedy",
        max_ranked: int = 500,
        rules: RankingRules | None = None,
    ) -> None:
        self.ordering = ordering
        self.placement = placement
        self.walk = walk
        self.max_ranked = max_ranked
        self.rules = rules or RankingRules()
        self.last_reranking: Reranking | None = None
        self.last_reservation: Reservation | None = None
        self.started = StartedWaits(self.rules.window_s)
        self._abilities: tuple[PlacementPolicy | None, bool, bool, bool] = (
            None, False, False, False)

    @property
    def policy_id(self) -> str:
        return f"{self.ordering.name}+{self.placement.name}"

    def observe(self, snapshot: ClusterSnapshot) -> None:
        """Take in ``snapshot`` without deciding (a decision does this first): the policies'
        histories and the started jobs' waits the ranking step reads. A rollout's agent
        observes the warm-up this way while a heuristic decides."""
        self.ordering.observe(snapshot)
        self.placement.observe(snapshot)
        self.started.observe(snapshot)

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        self.observe(snapshot)
        free = list(snapshot.free_gpus)
        if not snapshot.pending:
            self.last_reranking = unchanged(snapshot, waiting_fairness(snapshot), self.rules)
            self.last_reservation = None
            return Decision(self.policy_id, ranking=(), migrations=self._moves(snapshot, free))
        if self.rules.dispatch and _too_few_free(snapshot, free):
            idle = self._idle(snapshot, free)
            if idle is not None:
                return idle
        scores = np.asarray(self.ordering.score(snapshot), dtype=float)
        order = self._rank(snapshot, scores)
        jobs = [snapshot.pending[i] for i in order]
        ranking = tuple(map(_job_id, jobs))
        placements = self._place(snapshot, jobs, free)
        forward_users = self.last_reranking.brought_forward if self.last_reranking else ()
        forward = tuple(j.job_id for j in jobs if j.user in forward_users)
        # Dispatch keeps exclusions only for released jobs, and of those only the ones brought
        # forward go without a node set: asking for the others' would be thrown away (it was
        # most of a learned agent's replay, every pending job every cycle).
        excludable = [j for j in jobs if j.job_id in forward] if self.rules.dispatch else jobs
        exclusions = self._exclusions(snapshot, excludable, placements)
        decision = Decision(self.policy_id, ranking, placements, tuple(scores[order].tolist()),
                            exclusions=exclusions, migrations=self._moves(snapshot, free),
                            forward=forward)
        return dispatched(decision, snapshot) if self.rules.dispatch else decision

    def _idle(self, snapshot: ClusterSnapshot, free: list[int]) -> Decision | None:
        """Dispatch's decision when no pending job fits in the free GPUs and the ranking
        step moves nobody: every pending job held, in queue order, and the policy not asked
        for scores (None when the step would bring someone forward). Nothing can start, and
        dispatch releases only the jobs it starts or brings forward, so the scores could
        change nothing but the order of the holds, which neither Slurm nor the simulator
        reads. At load this is most cycles (Philly Nov 22-24 at load 1.0: 7,223 of 11,453),
        and scoring was most of a learned agent's replay."""
        fairness = waiting_fairness(snapshot, self.rules.window_s, self.started)
        if needs_reranking(snapshot, fairness, self.rules):
            return None
        self.last_reranking = unchanged(snapshot, fairness, self.rules)
        self.last_reservation = None
        return Decision(self.policy_id, ranking=(), migrations=self._moves(snapshot, free),
                        holds=tuple(map(_job_id, snapshot.pending)))

    def _rank(self, snapshot: ClusterSnapshot, scores: np.ndarray) -> list[int]:
        """The pending jobs to release (indices), best first: the policy's order after the
        shared ranking step, cut at ``max_ranked``."""
        fairness = waiting_fairness(snapshot, self.rules.window_s, self.started)
        if not needs_reranking(snapshot, fairness, self.rules):
            self.last_reranking = unchanged(snapshot, fairness, self.rules)
            return top_k_order(scores, self.max_ranked)
        policy_order = top_k_order(scores, len(scores))
        order, self.last_reranking = rerank(snapshot, policy_order, fairness, self.rules,
                                            self.max_ranked)
        return order[:self.max_ranked]

    def _moves(self, snapshot: ClusterSnapshot, free: list[int]) -> dict[JobId, Placement]:
        """Running jobs the placement moves into the GPUs left in ``free``."""
        if not self._moves_jobs() or not any(free):
            return {}
        return cast(MigratingPlacement, self.placement).migrations(snapshot, free)

    def _place(
        self, snapshot: ClusterSnapshot, jobs: list[Job], free: list[int]
    ) -> dict[JobId, Placement]:
        """Node sets for ``jobs`` in ranking order; takes their GPUs from ``free``. The first
        job of a user the guard brought forward that does not fit gets a reservation
        (:mod:`slurm_rl.reservation`; one try a decision): the later jobs keep off the GPUs
        it holds unless they end before it starts."""
        available = sum(free)
        placements: dict[JobId, Placement] = {}
        forward = set(self.last_reranking.brought_forward) if self.last_reranking else set()
        self.last_reservation = None
        unheld: list[int] = []  # free less the held GPUs, while a reservation holds some
        # Whether a job's shape could fit at all (most jobs a loaded walk meets cannot): in
        # free, and in unheld once a reservation holds GPUs
        room_in_free = room_in_unheld = Room(snapshot.cluster, free)
        for job in jobs:
            if available == 0:
                break
            held: Reservation | None = self.last_reservation
            usable, room, room_test = free, available, room_in_free
            if held is not None and not held.allows(job, snapshot.time):
                usable, room, room_test = unheld, available - held.held_gpus, room_in_unheld
            placement = None
            if job.num_gpus <= room and self._could_fit(job, room_test, snapshot):
                placement = self.placement.place(job, usable, snapshot)
            if placement is None:
                if self.walk == "strict":
                    break
                if forward and job.user in forward:
                    forward = set()  # one reservation a decision, and one try at it
                    self.last_reservation = reserve(job, free, snapshot, self.placement)
                    if self.last_reservation is not None:
                        unheld = [f - h for f, h in
                                  zip(free, self.last_reservation.held, strict=True)]
                        room_in_unheld = Room(snapshot.cluster, unheld)
                continue
            placements[job.job_id] = placement
            self._take(snapshot, placement, free, unheld)
            room_in_free.changed()
            room_in_unheld.changed()
            available -= placement.num_gpus
        return placements

    def _could_fit(self, job: Job, room: Room, snapshot: ClusterSnapshot) -> bool:
        """Whether ``job``'s shape fits ``room`` at all, off the nodes the placement would
        never use for it (:class:`~slurm_rl.policy.BarringPlacement`): asked in that order, as
        the first test is the cheaper and refuses most jobs of a loaded walk."""
        if not room.could_fit(job):
            return False
        if not self._bars_nodes():
            return True
        barred = cast(BarringPlacement, self.placement).barred_nodes(job, snapshot)
        return not barred or room.could_fit(job, barred)

    def _take(self, snapshot: ClusterSnapshot, placement: Placement, free: list[int],
              unheld: list[int]) -> None:
        """Take ``placement``'s GPUs from ``free`` (and ``unheld``, kept as ``free`` less the
        held GPUs); held GPUs taken (by a job that ends before the reservation starts) are
        held no more."""
        for name, gpus in zip(placement.nodes, placement.gpus, strict=True):
            index = snapshot.cluster.index(name)
            free[index] -= gpus
            held = self.last_reservation
            if held is None:
                continue
            if held.held[index] > free[index]:
                held = self.last_reservation = held.holding(index, free[index])
            unheld[index] = free[index] - held.held[index]

    def _moves_jobs(self) -> bool:
        """Whether the placement can move running jobs (:meth:`_abilities_of_placement`)."""
        return self._abilities_of_placement()[0]

    def _keeps_jobs_off_nodes(self) -> bool:
        """Whether the placement can keep jobs off nodes (:meth:`_abilities_of_placement`)."""
        return self._abilities_of_placement()[1]

    def _bars_nodes(self) -> bool:
        """Whether the placement names nodes it never uses (:meth:`_abilities_of_placement`)."""
        return self._abilities_of_placement()[2]

    def _abilities_of_placement(self) -> tuple[bool, bool, bool]:
        """(moves jobs, keeps jobs off nodes, names nodes it never uses), asked once per
        placement object: a check against a runtime protocol costs tens of µs, and every
        decision asks them."""
        if self._abilities[0] is not self.placement:
            placement = self.placement
            self._abilities = (placement, isinstance(placement, MigratingPlacement),
                               isinstance(placement, ExcludingPlacement),
                               isinstance(placement, BarringPlacement))
        return self._abilities[1], self._abilities[2], self._abilities[3]

    def _exclusions(
        self, snapshot: ClusterSnapshot, jobs: list[Job], placements: dict[JobId, Placement]
    ) -> dict[JobId, tuple[str, ...]]:
        """For released jobs left without a node set, the nodes Slurm must keep them off."""
        if not self._keeps_jobs_off_nodes():
            return {}
        placement = cast(ExcludingPlacement, self.placement)
        found: dict[JobId, tuple[str, ...]] = {}
        for job in jobs:
            if job.job_id not in placements:
                nodes = placement.exclusions(job, snapshot)
                if nodes:
                    found[job.job_id] = nodes
        return found


def _too_few_free(snapshot: ClusterSnapshot, free: list[int]) -> bool:
    """Whether even the smallest pending request asks for more GPUs than are free in all."""
    return int(snapshot.columns.num_gpus.min()) > sum(free)


def top_k_order(scores: np.ndarray, k: int) -> list[int]:
    """Indices of the ``k`` highest scores, highest first; ties keep queue (submit) order."""
    if len(scores) > k:
        candidates = np.argpartition(-scores, k - 1)[:k]
        candidates.sort()  # queue order, so the stable sort below breaks ties by it
        ranked = candidates[np.argsort(-scores[candidates], kind="stable")]
        return ranked.tolist()  # type: ignore[no-any-return]
    return np.argsort(-scores, kind="stable").tolist()  # type: ignore[no-any-return]


def dispatched(decision: Decision, snapshot: ClusterSnapshot) -> Decision:
    """``decision`` as dispatch mode applies it (``RankingRules.dispatch``): released are only
    the jobs it starts now and those the fairness guard brought forward (:attr:`Decision.
    promoted`), in ranking order; every other pending job is held, the ranked ones first in
    ranking order, then the rest in queue order. Slurm then starts no job the scheduler did not
    choose, whatever its own priorities; a GPU freed between two cycles waits for the next
    (seconds, against jobs of hours). Exclusions are kept for released jobs only (a held job
    has none to keep)."""
    released = decision.promoted
    ranked = set(decision.ranking)
    unranked = tuple(job.job_id for job in snapshot.pending if job.job_id not in ranked)
    decision = replace(decision, exclusions={
        job_id: nodes for job_id, nodes in decision.exclusions.items() if job_id in released})
    return held_back(decision, ranked - released, unranked)


def held_back(decision: Decision, jobs: Set[JobId], then: tuple[JobId, ...]) -> Decision:
    """``decision`` with the ranked ``jobs`` taken out of its ranking (with their scores and
    exclusions) and held, in ranking order, followed by the holds ``then``. Dispatch mode
    holds this way, and so does the daemon's guard a job whose placement it refuses."""
    kept = [index for index, job_id in enumerate(decision.ranking) if job_id not in jobs]
    return replace(
        decision,
        ranking=tuple(decision.ranking[index] for index in kept),
        scores=tuple(decision.scores[index] for index in kept) if decision.scores else (),
        holds=(*(job_id for job_id in decision.ranking if job_id in jobs), *then),
        exclusions={job_id: nodes for job_id, nodes in decision.exclusions.items()
                    if job_id not in jobs},
    )
