"""Fairness between users and the user's ``--nice``: the ranking step every policy shares.

The :class:`~slurm_rl.scheduler.Scheduler` applies it after the ordering policy has ranked the
pending jobs and before the placement walk, in the simulator, in training's evaluation and
live alike, whatever the policy (docs/fairness.md).

**Which waits count.** At a decision at time ``t`` a user ``u`` is *waiting* when at least
one of ``u``'s jobs is pending. The waits counted for ``u`` are

* ``t − submit`` of each of ``u``'s pending jobs, and
* ``start − submit`` of each of ``u``'s jobs that started within the window
  (``start ≥ t − window_s``), running or finished since: a user whose jobs were just started
  shows their short waits, while the waits of jobs started long ago are old news and drop
  out. A snapshot shows a finished job once, so the scheduler remembers the starts it saw
  (:class:`StartedWaits`); without that memory (a one-off figure) only running jobs count.

A wait below 0 (a submit time ahead of the clock) counts as 0. ``x_u`` is the mean of
``u``'s counted waits. Users are told apart by ``Job.user`` (Slurm's user name; a trace
without users is one user, ``""``). Jobs carry no account, so there is no per-account
figure yet.

**The figures**, over the waiting users' mean waits ``x_1 … x_n``:

* Jain's index ``J = (Σ x_u)² / (n · Σ x_u²)``: 1 when every user waits as long, down to
  ``1/n`` when one user does all the waiting;
* the wait ratio ``R = max_u x_u / mean_u x_u``: from 1 (even) up to ``n``.

With no user, one user, or every ``x_u = 0``, nobody waits longer than anybody: ``J = R = 1``.

**The guard.** The admin bounds ``R`` by ``b`` (``max_wait_ratio``; None or 0 = off). The
guard acts half-way there, at ``a = 1 + (b − 1) / 2`` (``act_at``): the figure it watches
leads the finished jobs' figure the bound is judged on by the length of a wait, and a guard
that waited for ``b`` itself left the outcome at or just past ``b`` (1.20 of 1.2 on the
300-job load, simulated; 1.03–1.13 acting at ``a``, the mean wait unchanged). When ``R > a``,
at least two users wait and the most-waiting user's mean wait is at least ``min_wait_s``,
the users who wait too long — ``x_u > a · mean_v x_v``, never empty then — have their jobs
brought forward: first those users' jobs, merged round-robin (each round
takes each such user's best remaining job, the most-waiting user first), then every other
job in the policy's order. Each user's own jobs keep the policy's relative order; among the
users left in place the policy's order stands too, so the guard overrides the policy only as
far as it must. Bringing the over-waiting users' oldest jobs to the front is what lowers
their mean wait; a plain round-robin over all users shares the places evenly, works an
earlier backlog off more slowly and re-ranks about three times as often
(tests/test_fairness.py measures both). The first of
their jobs that does not fit now gets a reservation (:mod:`slurm_rl.reservation`), or else
a big job would stay behind the smaller ones ranked after it however far forward it came.

**--nice.** Slurm subtracts a job's nice from the priority it computes, but the daemon sets
the priority itself, so the ranking must carry it. After the guard, a job at place ``p`` (0 =
first) moves to ``p + trunc(nice / nice_per_rank)`` (negative nice, which only admins may
set, moves it up), then the jobs are sorted by place. One nice job alone passes exactly that
many jobs (clamped at either end); ``|nice| < nice_per_rank`` moves nothing. The guard
comes first so that a job's own nice wins over its user's fair place.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from slurm_rl.core import ClusterSnapshot, FrozenDict, Job, JobId

T = TypeVar("T")

# The guard re-ranks once the most-waiting user waits 20 % longer than the users' average
# (with two users: 1.5 times as long as the other). The live case that asked for it, 184 s
# against 112 s (1.64 times, R = 1.24), is past it; see docs/daemon.md for the trade-off.
DEFAULT_MAX_WAIT_RATIO = 1.2
# Started jobs' waits count this long: long enough to remember who was served in the last
# burst, short enough that a morning's backlog does not favour its user all afternoon.
DEFAULT_WINDOW_S = 3600.0
# Below a minute the users' waits differ by a few cycles (5 s) and deferral windows (10 s):
# jitter, not unfairness, and not worth overriding the policy's order for.
DEFAULT_MIN_WAIT_S = 60.0
# The longest a job may be held back after its submission (the daemon's defer_cap_s bound);
# replays and training in dispatch mode hold up to it, so that holds outlast the waits.
LONGEST_HOLD_S = 30 * 86400.0
# 100 nice points per place: --nice=10000 sends a job 100 places down, to the bottom of a
# typical queue; the small nice values users set for politeness (≤ 99) move nothing.
DEFAULT_NICE_PER_RANK = 100


@dataclass(frozen=True, slots=True)
class RankingRules:
    """The admin's rules for the shared ranking step (module docstring), and what a ranking
    releases: with ``dispatch``, only the jobs the decision starts now and those the guard
    brings forward; every other pending job is held back, so Slurm starts none of them on its
    own (:func:`slurm_rl.scheduler.dispatched`; docs/daemon.md, "Dispatch")."""

    max_wait_ratio: float | None = DEFAULT_MAX_WAIT_RATIO  # None or 0: no fairness guard
    window_s: float = DEFAULT_WINDOW_S
    min_wait_s: float = DEFAULT_MIN_WAIT_S
    nice_per_rank: int | None = DEFAULT_NICE_PER_RANK  # None or 0: --nice is not weighed
    dispatch: bool = False

    def __post_init__(self) -> None:
        ratio = self.max_wait_ratio
        if ratio and not (math.isfinite(ratio) and ratio >= 1):
            raise ValueError(f"max_wait_ratio must be 0 (off) or a finite number ≥ 1 (the "
                             f"ratio is never below 1), got {ratio}")
        for name in ("window_s", "min_wait_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number ≥ 0, got {value}")
        if self.nice_per_rank is not None and self.nice_per_rank < 0:
            raise ValueError(f"nice_per_rank must be 0 (off) or more, got {self.nice_per_rank}")

    @property
    def guard_on(self) -> bool:
        return bool(self.max_wait_ratio)

    @property
    def act_at(self) -> float | None:
        """The ratio past which the guard re-ranks: half-way from even to the bound."""
        if not self.max_wait_ratio:
            return None
        return 1.0 + (self.max_wait_ratio - 1.0) / 2.0


#: Neither the guard nor --nice: the policy's order as it ranked (a test's or a study's).
POLICY_ORDER_ONLY = RankingRules(max_wait_ratio=None, nice_per_rank=None)


# ----- the figures ----------------------------------------------------------------------------


def jain_index(values: Sequence[float]) -> float:
    """``(Σx)² / (n·Σx²)``; 1 for no value, one value, or all zero."""
    squares = math.fsum(x * x for x in values)
    if len(values) < 2 or squares == 0:
        return 1.0
    return min(1.0, math.fsum(values) ** 2 / (len(values) * squares))


def wait_ratio(values: Sequence[float]) -> float:
    """``max(x) / mean(x)``; 1 for no value, one value, or all zero."""
    total = math.fsum(values)
    if len(values) < 2 or total == 0:
        return 1.0
    return max(1.0, max(values) * len(values) / total)


def mean_wait_by_user(waits: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Each user's mean of the ``(user, wait)`` pairs given (a wait below 0 counts as 0)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for user, wait in waits:
        sums[user] = sums.get(user, 0.0) + max(0.0, wait)
        counts[user] = counts.get(user, 0) + 1
    return {user: sums[user] / counts[user] for user in sums}


@dataclass(frozen=True)
class WaitFairness:
    """The users' mean waits and the two figures over them (module docstring)."""

    mean_wait_s: Mapping[str, float]
    jain_index: float
    wait_ratio: float

    @classmethod
    def of(cls, mean_wait_s: Mapping[str, float]) -> WaitFairness:
        values = list(mean_wait_s.values())
        return cls(FrozenDict(mean_wait_s), jain_index(values), wait_ratio(values))

    @property
    def users(self) -> int:
        return len(self.mean_wait_s)

    @property
    def longest_mean_wait_s(self) -> float:
        return max(self.mean_wait_s.values(), default=0.0)


def waiting_fairness(snapshot: ClusterSnapshot, window_s: float = DEFAULT_WINDOW_S,
                     started: StartedWaits | None = None) -> WaitFairness:
    """The figures of the users waiting at ``snapshot`` (module docstring): pending jobs'
    waits so far, and the waits of those users' jobs that started in the last ``window_s``
    — those ``started`` remembers, or (without it) those still running. Array maths where it
    can: it runs every decision."""
    if not snapshot.pending:
        return WaitFairness.of({})
    users = [job.user for job in snapshot.pending]
    code = {user: i for i, user in enumerate(dict.fromkeys(users))}
    # fmax: a wait below 0 (submit ahead of the clock) counts as 0, an unknown one (NaN) too
    waits = np.fmax(0.0, snapshot.time - snapshot.columns.submit_time)
    since = snapshot.time - window_s
    if started is not None:
        starts = started.waits(since)
    else:
        starts = [(run.job.user, max(0.0, run.start_time - run.job.submit_time))
                  for run in snapshot.running if run.start_time >= since]
    if len(code) == 1:  # a trace without user names, or a one-user queue: nothing to map
        (only,) = code
        mine = [wait for user, wait in starts if user == only]
        total = float(waits.sum()) + math.fsum(mine)
        return WaitFairness.of({only: total / (len(waits) + len(mine))})
    codes = np.array([code[user] for user in users], dtype=np.intp)
    recent = [(code[user], wait) for user, wait in starts if user in code]
    if recent:
        extra = np.array(recent, dtype=float)
        codes = np.concatenate([codes, extra[:, 0].astype(np.intp)])
        waits = np.concatenate([waits, np.fmax(0.0, extra[:, 1])])
    sums = np.bincount(codes, weights=waits, minlength=len(code))
    counts = np.bincount(codes, minlength=len(code))
    return WaitFairness.of({user: float(sums[i] / counts[i]) for user, i in code.items()})


class StartedWaits:
    """The waits of the jobs that started in the last ``window_s``, whether they still run or
    finished since: the guard's memory between decisions. Short jobs finish between two
    snapshots; forgetting them would let a user's long waits drop out of the figure as soon as
    those jobs end, and the guard would judge only the jobs still queued."""

    def __init__(self, window_s: float = DEFAULT_WINDOW_S) -> None:
        self.window_s = window_s
        self._started: dict[JobId, tuple[str, float, float]] = {}  # job: user, start, wait

    def observe(self, snapshot: ClusterSnapshot) -> None:
        """Note the starts ``snapshot`` shows and forget those older than the window. A job
        seen again keeps its latest start (a requeued job waited again). A start before the
        window is not noted: it would be forgotten at once (and a job's starts only grow,
        so an older one it replaced would be too): most running jobs cost one comparison."""
        since = snapshot.time - self.window_s
        for run in snapshot.running:
            if run.start_time >= since:
                self._note(run.job, run.start_time)
        for done in snapshot.finished:
            if done.start_time >= since:
                self._note(done.job, done.start_time)
        for job_id in [j for j, (_, start, _) in self._started.items() if start < since]:
            del self._started[job_id]

    def _note(self, job: Job, start: float) -> None:
        kept = self._started.get(job.job_id)
        if kept is None or kept[1] != start:
            self._started[job.job_id] = (job.user, start, max(0.0, start - job.submit_time))

    def waits(self, since: float) -> list[tuple[str, float]]:
        """``(user, wait)`` of each remembered job that started at ``since`` or later."""
        return [(user, wait) for user, start, wait in self._started.values() if start >= since]


def outcome_fairness(waits: Iterable[tuple[str, float]]) -> WaitFairness:
    """The figures over finished jobs' ``(user, start − submit)``: a replay's report."""
    return WaitFairness.of(mean_wait_by_user(waits))


# ----- the re-ranking -------------------------------------------------------------------------


def guard_applies(fairness: WaitFairness, rules: RankingRules) -> bool:
    """Whether the users' waits are uneven enough for the guard to re-rank."""
    act_at = rules.act_at
    if act_at is None or fairness.users < 2:
        return False
    return fairness.wait_ratio > act_at and fairness.longest_mean_wait_s >= rules.min_wait_s


def over_waiting(fairness: WaitFairness, bound: float) -> tuple[str, ...]:
    """The users whose mean wait exceeds ``bound`` × the users' average, most-waiting first
    (the guard applies exactly when there is one: ``R > bound`` says the first is)."""
    if fairness.users == 0:
        return ()
    average = math.fsum(fairness.mean_wait_s.values()) / fairness.users
    over = [user for user, wait in fairness.mean_wait_s.items() if wait > bound * average]
    return tuple(sorted(over, key=lambda user: -fairness.mean_wait_s[user]))


def bring_forward(order: Sequence[int], jobs: Sequence[Job], users: Sequence[str]
                  ) -> list[int]:
    """``order`` (indices into ``jobs``) with the jobs of ``users`` first, merged round-robin
    in the order ``users`` are given, then everyone else's in ``order``'s order. Each user's
    jobs keep their order in ``order``."""
    first = {user: rank for rank, user in enumerate(users)}
    queues: dict[str, list[int]] = {user: [] for user in users}
    rest: list[int] = []
    for index in order:
        user = jobs[index].user
        (queues[user] if user in first else rest).append(index)
    # a user's k-th job goes in round k; within a round, users in the order given
    rounds = sorted((k, first[user], index) for user, queue in queues.items()
                    for k, index in enumerate(queue))
    return [index for _, _, index in rounds] + rest


def nice_places(nice: int, nice_per_rank: int | None) -> int:
    """Places ``nice`` moves a job down (negative: up), rounded toward zero."""
    if not nice_per_rank or not nice:
        return 0
    places = abs(nice) // nice_per_rank
    return places if nice > 0 else -places


def shift_by_nice(order: Sequence[int], jobs: Sequence[Job], nice_per_rank: int | None
                  ) -> tuple[list[int], dict[int, int]]:
    """``order`` with each job moved by :func:`nice_places` of its nice (stable otherwise),
    and the places each moved job's nice moved it, by its index in ``jobs``."""
    places = [nice_places(jobs[index].nice, nice_per_rank) for index in order]
    if not any(places):
        return list(order), {}
    moved = np.asarray(places, dtype=float)
    # past the job already at the target place (±½), so that it passes exactly `moved` jobs
    target = np.arange(len(order)) + moved + 0.5 * np.sign(moved)
    shifted = [order[p] for p in np.argsort(target, kind="stable").tolist()]
    return shifted, {index: k for index, k in zip(order, places, strict=True) if k}


@dataclass(frozen=True)
class Reranking:
    """What the shared ranking step did in one decision, for metrics and explanations.

    ``brought_forward`` names the users whose jobs the guard put first (none: it did not
    re-rank); ``policy_rank`` holds, for each job the step moved, its place in the policy's
    own order; ``nice_places`` the places its nice moved it (jobs whose nice moved them only).
    """

    time: float
    fairness: WaitFairness
    max_wait_ratio: float | None
    brought_forward: tuple[str, ...] = ()
    policy_rank: Mapping[JobId, int] = FrozenDict()
    nice_places: Mapping[JobId, int] = FrozenDict()

    @property
    def guard_applied(self) -> bool:
        return bool(self.brought_forward)


def needs_reranking(snapshot: ClusterSnapshot, fairness: WaitFairness,
                    rules: RankingRules) -> bool:
    """Whether the step changes anything at ``snapshot`` (else the policy's order stands)."""
    if guard_applies(fairness, rules):
        return True
    per_rank = rules.nice_per_rank
    if not per_rank:
        return False
    nices = [job.nice for job in snapshot.pending]
    return max(nices) >= per_rank or min(nices) <= -per_rank


def rerank(snapshot: ClusterSnapshot, policy_order: Sequence[int], fairness: WaitFairness,
           rules: RankingRules, released: int | None = None) -> tuple[list[int], Reranking]:
    """``policy_order`` (every pending job's index, best first) after the guard, then --nice,
    and what was done to the first ``released`` jobs of the result (None: all of them). The
    result is a permutation of ``policy_order``, always."""
    jobs = snapshot.pending
    applied = guard_applies(fairness, rules)
    forward = over_waiting(fairness, rules.act_at or 0.0) if applied else ()
    order, niced = shift_by_nice(bring_forward(policy_order, jobs, forward), jobs,
                                 rules.nice_per_rank)
    shown = order[:released]
    rank_in_policy = np.empty(len(order), dtype=np.intp)
    rank_in_policy[np.asarray(policy_order, dtype=np.intp)] = np.arange(len(order))
    was = rank_in_policy[np.asarray(shown, dtype=np.intp)].tolist()
    moved = {jobs[i].job_id: was[rank] for rank, i in enumerate(shown) if was[rank] != rank}
    nice = {jobs[i].job_id: niced[i] for i in shown if i in niced}
    return order, Reranking(snapshot.time, fairness, rules.max_wait_ratio, forward,
                            FrozenDict(moved), FrozenDict(nice))


def unchanged(snapshot: ClusterSnapshot, fairness: WaitFairness, rules: RankingRules
              ) -> Reranking:
    """The record of a decision the step left in the policy's order."""
    return Reranking(snapshot.time, fairness, rules.max_wait_ratio)


def find_reranking(decider: object) -> Reranking | None:
    """The last :class:`Reranking` of ``decider``: a scheduler, or a wrapper (the daemon's
    guard, its history priming) whose ``inner`` chain leads to one."""
    return find_on_chain(decider, "last_reranking", Reranking)


def find_on_chain(decider: object, attribute: str, kind: type[T]) -> T | None:
    """The ``attribute`` of type ``kind`` of ``decider`` or of the first decider down its
    ``inner`` chain that has one (None: none has)."""
    for _ in range(8):  # wrappers nest two deep today; the bound only stops a cycle
        found = getattr(decider, attribute, None)
        if isinstance(found, kind):
            return found
        decider = getattr(decider, "inner", None)
        if decider is None:
            return None
    return None
