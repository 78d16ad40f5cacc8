"""A user's ``--nice`` outlives the daemon's first ``Priority`` on the job. Slurm sets nice
to 0 on any update that sets a priority (a review measured it on 22.05.8: ``Nice=500``, then
the daemon's ``Priority=...``, then ``Nice=0``), and the ranking step (docs/fairness.md)
still weighs it: the source keeps each job's nice as last seen non-zero."""

from __future__ import annotations

import json

from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.source import SlurmSource
from tests.slurm.fakes import fixture_text, recorded_cluster

PENDING = "3"  # a pending job of the recorded 22.05 cluster


def _showing(runner: object, nice: int, priority: int | None = None) -> None:
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    for job in doc["jobs"]:
        if str(job["job_id"]) == PENDING:
            job["nice"] = nice
            if priority is not None:
                job["priority"] = priority
    runner.answer(("squeue", "--json"), json.dumps(doc))  # type: ignore[attr-defined]


def _nice(source: SlurmSource) -> int:
    return next(job.nice for job in source.snapshot().pending if job.job_id == PENDING)


def test_a_nice_slurm_erased_with_the_daemons_priority_still_counts() -> None:
    runner = recorded_cluster("22.05")
    source = SlurmSource(CliSlurmClient(runner=runner))
    _showing(runner, 500)
    assert _nice(source) == 500
    _showing(runner, 0, priority=1_049_576)  # after the daemon's Priority
    assert _nice(source) == 500
    _showing(runner, 300)  # the user's (or an admin's) new nice wins
    assert _nice(source) == 300


def test_a_job_never_niced_stays_at_zero() -> None:
    runner = recorded_cluster("22.05")
    source = SlurmSource(CliSlurmClient(runner=runner))
    _showing(runner, 0)
    assert _nice(source) == 0
