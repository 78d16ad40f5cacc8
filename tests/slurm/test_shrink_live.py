"""A pin that reaches a job Slurm started since the daemon's snapshot, on a real Slurm.

The daemon decides on a snapshot; by the time its ``ReqNodeList`` arrives the job may be
running (its deferral ran out, or Slurm started it on its own). To Slurm a ``ReqNodeList``
on a running job means "resize the job to these nodes": without ``disable_job_shrink`` a
review measured on 22.05.8 a job sent its own node resized (``ResizeTime`` set, its
``StartTime`` reset) and a two-node job sent one of its nodes cut to that node. The dev
cluster sets ``SchedulerParameters=disable_job_shrink`` as slurm.conf.example asks: the
call changes nothing, and the outcome says the job was no longer the daemon's to place."""

from __future__ import annotations

import pytest

from slurm_rl.core import Decision, Placement
from slurm_rl.slurm.actuator import ActuatorConfig, Mode, SlurmActuator
from slurm_rl.slurm.source import SlurmSource
from tests.slurm.live import LiveCluster
from tests.slurm.test_live import SCHED_SLACK_S, _nodes

pytestmark = pytest.mark.slurm


def test_a_pin_reaching_a_job_that_started_meanwhile_leaves_it_running_as_it_was(
    live: LiveCluster,
) -> None:
    source = SlurmSource(live.client)
    a100 = _nodes(source.snapshot(), "a100")
    job_id = live.sbatch("alice", "--gres=gpu:a100:1", "-N", "2-2", "--ntasks-per-node=1",
                         "-t", "10")
    decided = source.state()  # the decision's snapshot: the job pending
    place = Decision("test", (job_id,), {job_id: Placement((a100[0], a100[1]), (1, 1))})
    first = SlurmActuator(live.client, ActuatorConfig(mode=Mode.ENFORCE), pins=source.pins)
    assert all(o.ok for o in first.apply(place, decided).outcomes)
    started = live.wait_state(job_id, "RUNNING", timeout_s=SCHED_SLACK_S)
    assert set(started.nodes) == {a100[0], a100[1]}

    # A later decision made on that same stale snapshot pins it to one of its two nodes.
    late = Decision("test", (job_id,), {job_id: Placement((a100[0],), (2,))})
    actuator = SlurmActuator(live.client, ActuatorConfig(mode=Mode.ENFORCE),
                             pins=source.pins)
    outcome = next(o for o in actuator.apply(late, decided).outcomes if o.job_id == job_id)
    assert outcome.sent and not outcome.ok, outcome
    after = live.job(job_id)
    assert after.state == "RUNNING" and set(after.nodes) == {a100[0], a100[1]}
    assert after.raw.get("StartTime") == started.raw.get("StartTime")
    assert after.raw.get("ResizeTime", "None") in ("None", "(null)", "Unknown")
