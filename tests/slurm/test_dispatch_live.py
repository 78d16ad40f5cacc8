"""Dispatch mode against a real slurmctld (docs/daemon.md, "Dispatch"): the deployed scheduler
and the enforce actuator in the shared loop, plain ``sbatch`` jobs. GPUs freed between two
cycles go to the job the policy chose, not to the one Slurm's own priority puts first."""

from __future__ import annotations

import time

import pytest

from slurm_rl.agents.registry import make_scheduler
from slurm_rl.fairness import RankingRules
from slurm_rl.loop import run_cycle
from slurm_rl.scenario import gpu_speed_table
from slurm_rl.slurm.actuator import ActuatorConfig, Mode, SlurmActuator
from slurm_rl.slurm.source import SlurmSource
from tests.slurm.live import LiveCluster

pytestmark = pytest.mark.slurm


def test_dispatch_holds_slurms_first_job_and_starts_the_policys(live: LiveCluster) -> None:
    source = SlurmSource(live.client)
    a100 = [n.name for n in source.snapshot().cluster.nodes if n.gpu_type == "a100"]
    # One whole-node job per A100 node (the shortest limits: SJF starts them first), then a
    # long job and a short one: Slurm's priority (age, then submit order) puts the long one
    # first; SJF on time limits the short one.
    blockers = [live.sbatch("alice", "--gres=gpu:a100:8", "-t", "3") for _ in a100]
    long = live.sbatch("bob", "--gres=gpu:a100:8", "-t", "60")
    short = live.sbatch("alice", "--gres=gpu:a100:8", "-t", "5")
    scheduler = make_scheduler("sjf-limit+first-fit", gpu_speed_table(),
                               rules=RankingRules(dispatch=True))
    actuator = SlurmActuator(live.client, ActuatorConfig(mode=Mode.ENFORCE, defer_cap_s=3600),
                             pins=source.pins)

    def cycle() -> None:
        live.beat()
        run_cycle(source, scheduler, actuator)

    def running(job_id: str) -> bool:
        cycle()
        return live.job(job_id).state == "RUNNING"

    for job_id in blockers:
        live.wait_for(lambda j=job_id: running(j), f"blocker {job_id} running", timeout_s=60)
    cycle()
    now = time.time()
    for job_id in (long, short):  # held: deferred past now, though their windows are over
        job = live.job(job_id)
        assert job.state == "PENDING"
        assert job.eligible_time is not None and job.eligible_time > now, job_id
    live.run("scancel", blockers[0])  # GPUs free between two cycles
    live.wait_for(lambda: running(short), "the short job running", timeout_s=60)
    assert live.job(long).state == "PENDING"
