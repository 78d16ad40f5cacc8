"""The deferral book finds exactly the extensions that walking every held job finds, over
successive decisions (deferrals set, jobs started, released and held again)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_rl.core import Job, JobId
from slurm_rl.simulator.holds import DeferralBook, HoldTimes, extensions
from tests.sim_doubles import job

REVIEW_S, CAP_S = 600.0, 5000.0


def walked(holds: list[JobId], pending: dict[JobId, Job], released: set[JobId],
           eligible_at: dict[JobId, float], times: HoldTimes) -> tuple[set[tuple[JobId, float]],
                                                                        bool]:
    """What the simulator did before the book: look at every held job."""
    out, held = set(), False
    for job_id in holds:
        found = pending.get(job_id)
        if found is None or job_id in released or times.now >= (end := times.end_of(found)):
            continue
        until = min(end, times.ahead)
        if eligible_at.get(job_id, 0.0) < min(until, times.renew):
            out.add((job_id, until))
        held = True
    return out, held


step = st.tuples(
    st.floats(0.0, 900.0),  # time to the next decision
    st.lists(st.booleans(), min_size=12, max_size=12),  # held (else released) per job
    st.lists(st.booleans(), min_size=12, max_size=12),  # starts now per job
)


@settings(max_examples=200, deadline=None)
@given(submits=st.lists(st.floats(0.0, 3000.0), min_size=12, max_size=12),
       steps=st.lists(step, min_size=1, max_size=12))
def test_the_book_extends_what_walking_every_held_job_extends(
    submits: list[float], steps: list[tuple[float, list[bool], list[bool]]]
) -> None:
    jobs = {f"j{i}": job(f"j{i}", submit, 1, 100.0) for i, submit in enumerate(submits)}
    book = DeferralBook({})
    for job_id, found in jobs.items():
        book.set(job_id, found.submit_time + 30.0)  # the plugin's window at submission
    pending, now = dict(jobs), max(submits)
    for wait, held_flags, starts in steps:
        now += wait
        for (job_id, _), start in zip(list(jobs.items()), starts, strict=True):
            if start and job_id in pending and len(pending) > 1:
                del pending[job_id]
                book.eligible_at.pop(job_id)  # Slurm's state forgets a started job
        order = list(pending)
        holds = [j for j, flag in zip(order, held_flags, strict=False) if flag]
        released = set(order) - set(holds)
        times = HoldTimes(now, now + 1.5 * REVIEW_S, now + 2 * REVIEW_S, CAP_S)
        expected = walked(holds, pending, released, dict(book.eligible_at), times)
        found, held = extensions(book, holds, pending, released, times)
        assert (set(found), held) == expected
        assert len(found) == len(set(found))
        for job_id, until in found:
            book.set(job_id, until)
