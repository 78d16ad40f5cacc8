"""How long a job will probably run, learnt from the jobs that finished before it.

Helios (Hu et al., SC '21) predicts a job's duration from the history of similar jobs; ours is
the median run time of the same account's last ``history`` finished jobs of the same GPU count,
then of any size, then of the whole cluster, then ``default_duration_s``. It learns only from
finished jobs in the snapshots, as a real cluster would: no policy here reads the simulator's
true durations.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from statistics import median

from slurm_rl.core import FinishedJob, Job


def account_of(job: Job) -> str:
    """The fair-share account: the user, or the partition (a Philly virtual cluster) when a
    trace has no users."""
    return job.user or job.partition or "-"


class DurationHistory:
    """Median recent run times by account and GPU count (module docstring)."""

    def __init__(self, history: int = 20, default_duration_s: float = 3600.0) -> None:
        self._history = history
        self._default = default_duration_s
        self._by_key: dict[tuple[str, int], deque[float]] = defaultdict(self._new)
        self._by_account: dict[str, deque[float]] = defaultdict(self._new)
        self._all: deque[float] = deque(maxlen=history * 10)
        self._cache: dict[tuple[str, int], float] = {}

    def _new(self) -> deque[float]:
        return deque(maxlen=self._history)

    def observe(self, finished: Sequence[FinishedJob]) -> None:
        for done in finished:
            runtime = done.end_time - done.start_time
            account = account_of(done.job)
            self._by_key[(account, done.job.num_gpus)].append(runtime)
            self._by_account[account].append(runtime)
            self._all.append(runtime)
        if finished:
            self._cache.clear()

    def predicted(self, job: Job) -> float:
        """The job's predicted run time in seconds."""
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
