"""A reservation for the first job the fairness guard brings forward that does not fit now.

Bringing an over-waiting user's jobs to the front of the ranking does nothing for a job too
big for the GPUs free now: the greedy walk gives those GPUs to the smaller jobs ranked after
it, and the GPUs that free later go the same way, so the big job — and its user's mean wait —
waits on. Slurm's backfill keeps a promise to its top job by planning when it will start and
letting a later job start only if it does not delay that; the scheduler makes the same promise
to one job (EASY backfill's one reservation), the guard's:

* its *start* ``s`` is the earliest end of a running job's time limit
  (:attr:`~slurm_rl.core.RunningJob.limit_end`) at which the placement policy finds the job
  a node set in the GPUs free by then — the GPUs free now plus those of every running job
  whose limit ends by ``s``;
* on each node ``n`` of that node set, which the job needs ``g_n`` GPUs of and where running
  jobs free ``r_n`` GPUs by ``s``, ``h_n = clamp(g_n − r_n, 0, free_n)`` of the GPUs free now
  are *held*: a job placed now may take them only when its own time limit ends before ``s``
  (it is gone before the reservation starts).

Time limits are what Slurm plans with too; jobs end earlier, and then the reserved job fits
sooner and the walk places it like any other. A running job without a limit never frees its
GPUs in this plan; a job whose node set cannot be found within the running jobs' limits gets
no reservation (the walk goes on as before).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slurm_rl.core import ClusterSnapshot, Job, JobId, Placement, RunningJob
from slurm_rl.policy import PlacementPolicy

# The placement policy is asked at most this many times per reservation (once per distinct
# limit end at which enough GPUs are free in total): a learned placement costs milliseconds a
# call, and a job that finds no node set by then is better served by the next decision.
MAX_PLACEMENT_TRIES = 32


@dataclass(frozen=True, slots=True)
class Reservation:
    """GPUs held at ``time`` (``held[i]`` on ``cluster.nodes[i]``) for ``job_id``, which
    can start by ``start`` on ``placement`` (module docstring)."""

    time: float
    job_id: JobId
    start: float
    placement: Placement
    held: tuple[int, ...]

    @property
    def held_gpus(self) -> int:
        return sum(self.held)

    def holding(self, index: int, gpus: int) -> Reservation:
        """This reservation holding ``gpus`` on node ``index`` instead."""
        held = list(self.held)
        held[index] = gpus
        return Reservation(self.time, self.job_id, self.start, self.placement, tuple(held))

    def allows(self, job: Job, now: float) -> bool:
        """Whether ``job`` may use the held GPUs: its time limit ends before the start."""
        return job.time_limit is not None and now + job.time_limit <= self.start


def reserve(job: Job, free: Sequence[int], snapshot: ClusterSnapshot,
            placement: PlacementPolicy) -> Reservation | None:
    """The reservation for ``job`` given the GPUs ``free`` now (module docstring), or None."""
    cluster = snapshot.cluster
    future = list(free)
    freed = [0] * len(future)
    tries = 0
    for end, runs in _by_limit_end(snapshot.running):
        for run in runs:
            for name, gpus in zip(run.placement.nodes, run.placement.gpus, strict=True):
                index = cluster.index(name)
                future[index] += gpus
                freed[index] += gpus
        if sum(future) < job.num_gpus:
            continue
        found = placement.place(job, list(future), snapshot)
        tries += 1
        if found is not None:
            held = _held(found, free, freed, snapshot)
            return Reservation(snapshot.time, job.job_id, end, found, held)
        if tries >= MAX_PLACEMENT_TRIES:
            return None
    return None


def _by_limit_end(running: Sequence[RunningJob]) -> list[tuple[float, list[RunningJob]]]:
    """The running jobs with a time limit, grouped by when it ends, earliest first."""
    groups: dict[float, list[RunningJob]] = {}
    for run in running:
        end = run.limit_end
        if end is not None:
            groups.setdefault(end, []).append(run)
    return sorted(groups.items(), key=lambda item: item[0])


def _held(found: Placement, free: Sequence[int], freed: Sequence[int],
          snapshot: ClusterSnapshot) -> tuple[int, ...]:
    """``h_n = clamp(g_n − r_n, 0, free_n)`` on each node of ``found``, 0 elsewhere."""
    held = [0] * len(free)
    for name, gpus in zip(found.nodes, found.gpus, strict=True):
        index = snapshot.cluster.index(name)
        held[index] = max(0, min(gpus - freed[index], free[index]))
    return tuple(held)
