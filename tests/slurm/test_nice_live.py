"""A user's ``--nice`` and an admin's negative one, as the daemon reads them from a real
Slurm: the daemon's ``Priority`` sets Slurm's nice to 0 (a review measured it on 22.05.8),
and the source keeps the nice the ranking step weighs (docs/fairness.md); a negative nice
is read, not the job dropped as unreadable."""

from __future__ import annotations

import pytest

from slurm_rl.core import Decision
from slurm_rl.slurm.actuator import ActuatorConfig, Mode, SlurmActuator
from slurm_rl.slurm.source import SlurmSource
from tests.slurm.live import LiveCluster

pytestmark = pytest.mark.slurm


def _nice(source: SlurmSource, job_id: str) -> int:
    snapshot = source.snapshot()
    jobs = [*snapshot.pending, *(run.job for run in snapshot.running)]
    return next(job.nice for job in jobs if job.job_id == job_id)


def test_the_nice_the_daemons_priority_erased_still_counts_and_a_negative_one_is_read(
    live: LiveCluster,
) -> None:
    source = SlurmSource(live.client)
    niced = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", "--nice=500",
                        keep_deferred=True)
    assert _nice(source, niced) == 500
    # advise, the job brought forward (a promoted job gets the daemon's Priority); keep its
    # deferral so that it is still pending when read again
    actuator = SlurmActuator(live.client, ActuatorConfig(mode=Mode.ADVISE), pins=source.pins)
    decision = Decision("test", (niced,), {}, forward=(niced,))
    state = source.state()
    report = actuator.apply(decision, state)
    assert any(o.job_id == niced and o.ok for o in report.outcomes), report.outcomes
    shown = live.job(niced)
    if live.client.version() < (23, 0, 0):  # measured there; newer ones may keep it
        assert shown.raw["Nice"] == "0", shown.raw  # Slurm erased it with the priority
    assert _nice(source, niced) == 500

    admin = live.sbatch("bob", "--gres=gpu:a100:1", "-t", "10", keep_deferred=True)
    assert live.run("scontrol", "update", f"JobId={admin}", "Nice=-100").ok
    assert _nice(source, admin) == -100
    assert source.unreadable == frozenset()
