"""Heuristic ordering policies: FIFO, SJF with oracle durations, SJF on predicted durations,
SJF on time limits, QSSF (Helios), Slurm's multifactor priority, and any of them with the age
guard. Higher score = released first; docs/orderings.md gives each rule."""

from __future__ import annotations

import math
from collections import defaultdict, deque
from statistics import median

import numpy as np

from slurm_rl.agents.starvation import STARVATION_S, promote_starved
from slurm_rl.core import ClusterSnapshot, Job
from slurm_rl.policy import OrderingPolicy, Scores

#: The name of an ordering's age-guarded twin: ``<ordering>-aged``.
AGED_SUFFIX = "-aged"


class Fifo:
    """First come, first served."""

    name = "fifo"

    def observe(self, snapshot: ClusterSnapshot) -> None:
        return None

    def score(self, snapshot: ClusterSnapshot) -> Scores:
        return -snapshot.columns.submit_time


class SjfOracle:
    """Shortest job first using the true duration: an oracle no real cluster has, shown as the
    reference to approach. Ties go to the earlier submit."""

    name = "sjf-oracle"

    def observe(self, snapshot: ClusterSnapshot) -> None:
        return None

    def score(self, snapshot: ClusterSnapshot) -> Scores:
        durations = snapshot.columns.oracle_duration
        return -np.where(np.isnan(durations), math.inf, durations)


def account_of(job: Job) -> str:
    """The fair-share account: the user, or the partition (a Philly virtual cluster) when a
    trace has no users."""
    return job.user or job.partition or "-"


class DurationPredictor:
    """A job's run time predicted from the history of finished jobs, as Helios' QSSF does
    (Hu et al., SC '21): the median run time of the same account's last ``history`` finished
    jobs of the same GPU count, then of any size, then of the whole cluster's last
    ``10 · history``, then ``default_duration_s``. It learns only from the finished jobs in
    the snapshots, as a real cluster would."""

    def __init__(self, history: int = 20, default_duration_s: float = 3600.0) -> None:
        self._history = history
        self._default = default_duration_s
        self._by_key: dict[tuple[str, int], deque[float]] = defaultdict(self._new)
        self._by_account: dict[str, deque[float]] = defaultdict(self._new)
        self._all: deque[float] = deque(maxlen=history * 10)
        self._cache: dict[tuple[str, int], float] = {}

    def _new(self) -> deque[float]:
        return deque(maxlen=self._history)

    def observe(self, snapshot: ClusterSnapshot) -> None:
        for done in snapshot.finished:
            runtime = done.end_time - done.start_time
            account = account_of(done.job)
            self._by_key[(account, done.job.num_gpus)].append(runtime)
            self._by_account[account].append(runtime)
            self._all.append(runtime)
        if snapshot.finished:
            self._cache.clear()

    def predicted_duration(self, job: Job) -> float:
        key = (account_of(job), job.num_gpus)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._predict(key)
            self._cache[key] = cached
        return cached

    def _predict(self, key: tuple[str, int]) -> float:
        for history in (self._by_key.get(key), self._by_account.get(key[0]), self._all):
            if history:
                return float(median(history))
        return self._default


class Qssf:
    """Quasi-shortest-service-first (Hu et al., SC '21): priority by predicted GPU-time,
    score ``−gpus_j · d̂_j`` with ``d̂_j`` the :class:`DurationPredictor`'s run time."""

    name = "qssf"

    def __init__(self, history: int = 20, default_duration_s: float = 3600.0) -> None:
        self._predictor = DurationPredictor(history, default_duration_s)

    def observe(self, snapshot: ClusterSnapshot) -> None:
        self._predictor.observe(snapshot)

    def predicted_duration(self, job: Job) -> float:
        return self._predictor.predicted_duration(job)

    def score(self, snapshot: ClusterSnapshot) -> Scores:
        return [-job.num_gpus * self.predicted_duration(job) for job in snapshot.pending]


class SjfPredicted:
    """Shortest job first on the *predicted* run time: score ``−d̂_j``, the
    :class:`DurationPredictor`'s (QSSF's) prediction from the user's history, without QSSF's
    weighting by GPU count. Ties (every job of one account and size predicts alike) go to the
    earlier submit."""

    name = "sjf-predicted"

    def __init__(self, history: int = 20, default_duration_s: float = 3600.0) -> None:
        self._predictor = DurationPredictor(history, default_duration_s)

    def observe(self, snapshot: ClusterSnapshot) -> None:
        self._predictor.observe(snapshot)

    def score(self, snapshot: ClusterSnapshot) -> Scores:
        return [-self._predictor.predicted_duration(job) for job in snapshot.pending]


class SjfLimit:
    """Shortest job first on the user's own time limit (``--time``): score ``−limit_j``; a job
    without a limit scores −∞ (after every job with one). Limits are a few round values (an
    hour, a day, a week), so ties are many: they go to the earlier submit."""

    name = "sjf-limit"

    def observe(self, snapshot: ClusterSnapshot) -> None:
        return None

    def score(self, snapshot: ClusterSnapshot) -> Scores:
        limits = snapshot.columns.time_limit
        return -np.where(np.isfinite(limits) & (limits > 0), limits, math.inf)


class AgeGuarded:
    """An ordering with the dual agent's age guard (:mod:`slurm_rl.agents.starvation`): every
    job pending for ``limit_s`` or longer first, the longest-waiting first, then the others in
    the ordering's own order. Named ``<ordering>-aged``."""

    def __init__(self, ordering: OrderingPolicy, limit_s: float | None = STARVATION_S) -> None:
        self._ordering = ordering
        self._limit_s = limit_s
        self.name = f"{ordering.name}{AGED_SUFFIX}"

    def observe(self, snapshot: ClusterSnapshot) -> None:
        self._ordering.observe(snapshot)

    def score(self, snapshot: ClusterSnapshot) -> Scores:
        scores = np.asarray(self._ordering.score(snapshot), dtype=float)
        waits = snapshot.time - snapshot.columns.submit_time
        return promote_starved(scores, waits, self._limit_s)


class Multifactor:
    """Slurm's priority/multifactor: weighted age, job size and fair-share factors.

    * age = min(1, wait / max_age)  (PriorityMaxAge)
    * size = 1 − gpus / total_gpus when favouring small jobs (PriorityFavorSmall), else
      gpus / total_gpus
    * fair-share = 2^(−U/S): U the account's share of the decayed GPU-seconds used (half-life
      ``half_life_s``, PriorityDecayHalfLife), S its share of the cluster (equal shares)
    """

    name = "multifactor"

    def __init__(
        self,
        weight_age: float = 1000.0,
        weight_size: float = 1000.0,
        weight_fairshare: float = 1000.0,
        max_age_s: float = 7 * 86400.0,
        half_life_s: float = 7 * 86400.0,
        favor_small: bool = True,
    ) -> None:
        self._weights = (weight_age, weight_size, weight_fairshare)
        self._max_age = max_age_s
        self._half_life = half_life_s
        self._favor_small = favor_small
        self._usage: dict[str, float] = defaultdict(float)
        self._last_time: float | None = None

    def observe(self, snapshot: ClusterSnapshot) -> None:
        if self._last_time is not None:
            self._accrue(snapshot, snapshot.time - self._last_time)
        self._last_time = snapshot.time

    def _accrue(self, snapshot: ClusterSnapshot, elapsed: float) -> None:
        decay = 0.5 ** (elapsed / self._half_life)
        for account in self._usage:
            self._usage[account] *= decay
        for running in snapshot.running:
            self._usage[account_of(running.job)] += running.job.num_gpus * elapsed

    def score(self, snapshot: ClusterSnapshot) -> Scores:
        total_gpus = max(1, snapshot.cluster.total_gpus)
        accounts = {account_of(job) for job in snapshot.pending} | set(self._usage)
        fairshare = self._fairshare(accounts)
        w_age, w_size, w_fair = self._weights
        now = snapshot.time
        return [
            w_age * min(1.0, (now - job.submit_time) / self._max_age)
            + w_size * self._size(job.num_gpus / total_gpus)
            + w_fair * fairshare[account_of(job)]
            for job in snapshot.pending
        ]

    def _size(self, share: float) -> float:
        return 1.0 - share if self._favor_small else share

    def _fairshare(self, accounts: set[str]) -> dict[str, float]:
        total = sum(self._usage.values())
        share = 1.0 / max(1, len(accounts))
        return {
            a: 2.0 ** (-(self._usage.get(a, 0.0) / total) / share) if total > 0 else 1.0
            for a in accounts
        }
