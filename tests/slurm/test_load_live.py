"""Issue 19's production-like load, short: 48 jobs of alice, bob and carol in 4 bursts (1–16
GPUs, typed and untyped, some multi-node, sleeping 2–6 s) on a private cluster with slurmdbd
and SlurmUser ``slurm``; the daemon (fifo+best-fit, enforce, as ``slurm``) is SIGKILLed in
the middle of a cycle once and restarted on the same store. About a minute.

The load and the checks are tests/slurm/load.py and tests/slurm/load_checks.py (whose
docstring states each rule); ``benchmarks/load_live.py`` runs the same with 300 jobs and with
the dual agent too. Each test below is one check, so one failing check does not hide others.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.slurm import load
from tests.slurm.live import LiveCluster
from tests.slurm.load_checks import CheckResult, Measured, measure

pytestmark = pytest.mark.slurm

JOBS, BURSTS, GAP_S, SLEEP_S = 48, 4, 8.0, (2, 6)
POLICY = "fifo+best-fit"


@pytest.fixture(scope="module")
def measured(slurm_cluster: LiveCluster, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Measured]:
    """One run of the load (its own cluster: the session's has no slurmdbd and runs as
    root), checked once; each test reads one verdict."""
    if slurm_cluster.kind != "native":
        pytest.skip("starts its own native cluster")
    reason = load.missing_tools()
    if reason is not None:
        pytest.skip(reason)
    plan = load.make_plan(JOBS, BURSTS, GAP_S, SLEEP_S, seed=19)
    scratch = tmp_path_factory.mktemp("load")
    yield measure(plan, POLICY, scratch, drain_timeout_s=240.0, keep=scratch / "logs")


def _verdict(measured: Measured, check: str) -> CheckResult:
    result = measured.results[check]
    print(result)  # the figures, with -s or on failure
    return result


def test_the_load_ran_as_planned(measured: Measured) -> None:
    run, evidence = measured.run, measured.evidence
    assert run.drained and run.exit_code == 0
    assert len(run.jobs) == JOBS and set(evidence.accounted) >= set(run.jobs)
    assert all(evidence.accounted[j].state == "COMPLETED" for j in run.jobs)
    assert {a.user for a in evidence.accounted.values()} == set(load.USERS)
    kinds = {spec.kind for spec in run.jobs.values()}
    assert kinds == {"typed", "untyped", "typed multi-node", "untyped multi-node"}
    assert len(run.kills) == 1, "no cycle pinned a job after the kill's burst"
    assert run.daemon.starts == 2


def test_every_pin_is_the_jobs_node_list_or_a_recorded_refusal(measured: Measured) -> None:
    result = _verdict(measured, "check_pins")
    assert result.passed, result
    assert result.figures["accepted"]


def test_no_decision_is_lost_across_a_kill_9_mid_cycle(measured: Measured) -> None:
    result = _verdict(measured, "check_nothing_lost")
    assert result.passed, result
    assert result.figures["pins Slurm took"]


def test_untyped_gangs_run_on_one_gpu_type(measured: Measured) -> None:
    """Measured before the one-type constraint (slurm_rl/slurm/onetype.py): 25 of 82 untyped
    gangs on a100 and v100 with fifo+best-fit, all on nodes Slurm chose."""
    result = _verdict(measured, "check_one_type_per_gang")
    assert result.passed, result


def test_priority_updates_stay_at_two_per_pending_job_hour(measured: Measured) -> None:
    result = _verdict(measured, "check_priority_rate")
    assert result.passed, result


def test_fairness_is_within_the_configured_bound(measured: Measured) -> None:
    result = _verdict(measured, "check_fairness")
    assert result.passed, result
    assert result.figures["bound"] == measured.evidence.config.fairness_max_wait_ratio
