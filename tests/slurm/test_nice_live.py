"""A user's ``--nice`` and an admin's negative one, as the daemon reads them from a real
Slurm: the daemon's ``Priority`` sets Slurm's nice to 0 (a review measured it on 22.05.8),
and the source keeps the nice the ranking step weighs (docs/fairness.md); a negative nice
is read, not the job dropped as unreadable."""

from __future__ import annotations

import pytest

from slurm_rl.core import Decision
from slurm_rl.ops.revert import Change, revert
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


def test_revert_hands_the_daemons_priority_back_to_slurm_and_the_nice_is_taken_again(
    live: LiveCluster,
) -> None:
    """What ``slurm-rl revert`` sends for a job that still holds the daemon's Priority
    (docs/operations.md): ``scontrol release``, which drops a Priority set with scontrol so
    the priority plugin computes it again, then the nice from before. Every a100 is busy,
    so the job stays pending through the daemon's release and the revert; on every Slurm
    version the suite runs, its nice is back, its priority is no longer the daemon's, and
    a later nice is taken (a Priority set with scontrol would have kept it ignored)."""
    source = SlurmSource(live.client)
    blocker = live.sbatch("bob", "-N4", "--gres=gpu:a100:8", "-t", "10")
    assert live.run("scontrol", "update", f"JobId={blocker}", "StartTime=now").ok
    live.wait_state(blocker, "RUNNING", timeout_s=30)
    niced = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", "--nice=500",
                        keep_deferred=True)
    actuator = SlurmActuator(live.client, ActuatorConfig(mode=Mode.ADVISE), pins=source.pins)
    report = actuator.apply(Decision("test", (niced,), {}, forward=(niced,)), source.state())
    outcome = next(o for o in report.outcomes if o.job_id == niced)
    assert outcome.ok and outcome.kind == "release", outcome
    assert dict(outcome.before).get("Nice") == "500", outcome.before
    daemons = [arg.partition("=")[2] for arg in outcome.argv if arg.startswith("Priority=")]
    assert daemons and str(live.job(niced).priority) == daemons[-1]

    change = Change(niced, before=dict(outcome.before), priority_set=daemons[-1])
    steps = revert(live.client, {niced: change}, dry_run=False)
    assert [(step.job_id, step.result) for step in steps if step.job_id == niced] == [
        (niced, "ok")], steps
    sent = [result.argv[:2] for step in steps for result in step.sent]
    assert sent[0] == ("scontrol", "release"), sent
    after = live.job(niced)
    assert after.state == "PENDING" and after.priority not in (None, 0), after.raw
    assert str(after.priority) != daemons[-1], after.raw
    assert live.nice(niced) == 500
    assert live.run("scontrol", "update", f"JobId={niced}", "Nice=600").ok
    assert live.nice(niced) == 600
