"""``slurm-rl selftest`` asks enforce for ``disable_job_shrink``: a pin that reaches a job
Slurm started since the snapshot would resize it otherwise (slurm.conf.example)."""

from __future__ import annotations

from slurm_rl.config import DaemonConfig
from slurm_rl.ops.selftest import check_shrink
from slurm_rl.slurm.plan import Mode
from tests.slurm.fakes import FakeRunner

SHOW_CONFIG = ("scontrol", "show", "config")


def _runner(parameters: str) -> FakeRunner:
    runner = FakeRunner()
    runner.answer(SHOW_CONFIG, f"SlurmUser               = slurm(64030)\n"
                               f"SchedulerParameters     = {parameters}\n")
    return runner


def test_enforce_without_disable_job_shrink_fails_with_the_fix() -> None:
    check = check_shrink(_runner("sched_interval=10,bf_interval=30"),
                         DaemonConfig(mode=Mode.ENFORCE))
    assert not check.ok and "fix: add disable_job_shrink to SchedulerParameters" in check.detail
    check = check_shrink(_runner("(null)"), DaemonConfig(mode=Mode.ENFORCE))
    assert not check.ok


def test_enforce_with_it_passes_and_the_modes_that_pin_nothing_need_it_not() -> None:
    assert check_shrink(_runner("disable_job_shrink,bf_interval=30"),
                        DaemonConfig(mode=Mode.ENFORCE)).ok
    shadow = check_shrink(FakeRunner(), DaemonConfig(mode=Mode.SHADOW))
    assert shadow.ok and shadow.detail == "not needed: mode shadow pins no job"
