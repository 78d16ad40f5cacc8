"""Which held jobs' deferrals a decision extends, without walking every held job.

The daemon keeps a held job deferred by moving its begin time to two review periods ahead
(never past the hold cap) once under 1.5 periods are left (docs/daemon.md, "Dispatch"); the
simulator does the same. Under dispatch every pending job is held every cycle, and a job is
due a renewal only every half period, so walking them all each cycle (hundreds of jobs,
thousands of cycles) was most of a heuristic's replay at load. :class:`DeferralBook` keeps
every deferral end in a heap, earliest first, and :func:`extensions` looks only at the ones
ending before the renewal threshold: the same extensions as the walk (the order of the
deferral events they raise is immaterial: each only marks Slurm's queue as changed).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from slurm_rl.core import Job, JobId


@dataclass
class DeferralBook:
    """Each pending job's deferral end (``eligible_at``, shared with Slurm's job state), and
    a heap of every end set, earliest first. A heap entry goes stale when its job starts
    (``eligible_at`` loses the job) or is deferred again; stale entries are dropped lazily."""

    eligible_at: dict[JobId, float]
    _heap: list[tuple[float, JobId]] = field(default_factory=list)

    def set(self, job_id: JobId, until: float) -> None:
        self.eligible_at[job_id] = until
        heapq.heappush(self._heap, (until, job_id))

    def ending_before(self, threshold: float) -> list[tuple[float, JobId]]:
        """Take out the live entries ending before ``threshold`` (give back with :meth:`keep`
        the ones still to watch)."""
        heap, eligible = self._heap, self.eligible_at
        taken: list[tuple[float, JobId]] = []
        while heap and heap[0][0] < threshold:
            until, job_id = heapq.heappop(heap)
            if eligible.get(job_id) == until:
                taken.append((until, job_id))
        return taken

    def keep(self, until: float, job_id: JobId) -> None:
        heapq.heappush(self._heap, (until, job_id))


@dataclass(frozen=True)
class HoldTimes:
    """The thresholds of one decision's holds at ``now``: a held job whose deferral ends
    before ``renew`` is deferred to ``ahead``, or to ``cap_s`` after its submission if that
    is sooner; past that it is held no more."""

    now: float
    renew: float
    ahead: float
    cap_s: float

    def end_of(self, job: Job) -> float:
        return job.submit_time + self.cap_s


def extensions(book: DeferralBook, holds: Sequence[JobId], pending: Mapping[JobId, Job],
               released: Collection[JobId], times: HoldTimes) -> tuple[list[tuple[JobId, float]],
                                                                        bool]:
    """The deferrals to set (job, new end) for ``holds``, and whether any job is held at
    all (pending, not released, not past its cap): exactly what walking every held job
    finds. Entries taken from the book and not extended go back to it, unless their job
    can never be extended again (deferred to its cap)."""
    now = times.now
    held = any(job_id not in released and now < times.end_of(job)
               for job_id in holds if (job := pending.get(job_id)) is not None)
    if not held:
        return [], False
    due = book.ending_before(times.renew)
    wanted = set(holds) if due else set()
    out: list[tuple[JobId, float]] = []
    for until, job_id in due:
        job = pending.get(job_id)
        if job is None:
            continue  # not pending (a started job's entry is gone already)
        end = times.end_of(job)
        if until >= end or now >= end:
            continue  # deferred to its cap, or past it: never extended again
        if job_id in wanted and job_id not in released:
            out.append((job_id, min(end, times.ahead)))
        else:
            book.keep(until, job_id)
    return out, True
