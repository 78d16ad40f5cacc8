"""``--slurm-scheduler builtin|backfill`` and ``--performance fixed`` on a trace small enough
to work out by hand (docs/slurm-emulation.md).

Two nodes of 4 T4 GPUs; the trace's durations are V100 seconds, so the measured model would
run them slower on T4 and ``fixed`` is what keeps them exact. ``fifo+best-fit`` decides at
t = 0 and then only every 300 s, so j2 and j3 are left to Slurm when their 30 s deferral
ends (the daemon pins a job that fits now and gives it the top priority, which would hide
the schedulers' difference):

==== ====== ===== ===== =====================================================
job  submit GPUs  run   what happens
==== ====== ===== ===== =====================================================
j1   0      4     100   fits: pinned to t4-001 at 0, ends at 100
j2   10     8     50    eligible at 40, needs both nodes: waits for j1
j3   20     4     30    eligible at 50, after j2 in priority; t4-002 is free
==== ====== ===== ===== =====================================================

* ``backfill``: j2 is planned at 100 (j1's limit) on both nodes; j3 ends at 80, before
  it, so it starts at 50 on t4-002. j2 runs 100-150. JCTs 100, 140, 60: mean 100.
* ``builtin``: j2 cannot start and blocks the partition; j3 waits although t4-002 is
  free. j2 runs 100-150, then j3 150-180 on t4-001 (first fit). JCTs 100, 140, 160: mean
  133.3.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_rl.agents.registry import make_scheduler
from slurm_rl.cli.main import main
from slurm_rl.scenario import Scenario, gpu_speed_table, replay
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.simulator.sim_config import SimConfig
from slurm_rl.simulator.slurm_emulation import SlurmScheduler
from slurm_rl.traces.schema_csv import read_schema_csv

CLUSTER = """name = "two-t4"
description = "two nodes of 4 T4"

[[node_groups]]
prefix = "t4"
gpu_type = "T4"
count = 2
gpus_per_node = 4
host_groups = ["rack-01"]
price_per_gpu_hour = 0.35
price_source = "test"
"""
TRACE = """job_id,submit_time,num_gpus,duration,time_limit,num_nodes,gpus_per_node
j1,0,4,100,100,1,4
j2,10,8,50,50,2,4
j3,20,4,30,30,1,4
"""
BY_HAND: dict[str, dict[str, tuple[float, float, tuple[str, ...]]]] = {
    "backfill": {"j1": (0, 100, ("t4-001",)), "j2": (100, 150, ("t4-001", "t4-002")),
                 "j3": (50, 80, ("t4-002",))},
    "builtin": {"j1": (0, 100, ("t4-001",)), "j2": (100, 150, ("t4-001", "t4-002")),
                "j3": (150, 180, ("t4-001",))},
}
MEAN_JCT = {"backfill": 100.0, "builtin": 400.0 / 3}
CYCLE_S = 300.0


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    cluster, trace = tmp_path / "two-t4.toml", tmp_path / "hand.csv"
    cluster.write_text(CLUSTER)
    trace.write_text(TRACE)
    return cluster, trace


@pytest.mark.parametrize("scheduler", ["backfill", "builtin"])
def test_the_schedule_is_the_one_worked_out_by_hand(
    files: tuple[Path, Path], scheduler: SlurmScheduler
) -> None:
    cluster, trace = files
    scenario = Scenario(spec=load_cluster_spec(str(cluster)), trace=read_schema_csv(trace),
                        sim=SimConfig(mode="slurm", cycle_s=CYCLE_S, slurm_scheduler=scheduler),
                        performance="fixed")
    policy = make_scheduler("fifo+best-fit", gpu_speed_table(), seed=0)
    result = replay(scenario, policy, policy_id="fifo+best-fit")
    got = {o.job.job_id: (o.start, o.end, o.nodes) for o in result.outcomes}
    assert got == BY_HAND[scheduler]


def test_measured_performance_runs_the_v100_durations_slower_on_t4(
    files: tuple[Path, Path]
) -> None:
    cluster, trace = files
    scenario = Scenario(spec=load_cluster_spec(str(cluster)), trace=read_schema_csv(trace),
                        sim=SimConfig(mode="slurm", cycle_s=10.0), fluctuation=False)
    policy = make_scheduler("fifo+best-fit", gpu_speed_table(), seed=0)
    first = min(replay(scenario, policy, policy_id="p").outcomes, key=lambda o: o.start)
    assert first.end - first.start > 100.0


@pytest.mark.parametrize("scheduler", ["backfill", "builtin"])
def test_the_command_line_gives_the_same_schedule(
    files: tuple[Path, Path], scheduler: str
) -> None:
    cluster, trace = files
    result = CliRunner().invoke(main, [
        "simulate", "--cluster", str(cluster), "--trace", str(trace), "--policies",
        "fifo+best-fit", "--performance", "fixed", "--slurm-scheduler", scheduler,
        "--mode", "slurm", "--cycle", str(CYCLE_S), "--workers", "1", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["scenario"]["slurm_scheduler"] == scheduler
    assert payload["scenario"]["performance"] == "fixed"
    (row,) = payload["results"]
    assert row["avg_jct_s"] == pytest.approx(MEAN_JCT[scheduler])


def test_a_slurm_scheduler_without_slurm_mode_is_one_clear_error(
    files: tuple[Path, Path]
) -> None:
    cluster, trace = files
    result = CliRunner().invoke(main, [
        "simulate", "--cluster", str(cluster), "--trace", str(trace), "--mode", "direct",
        "--slurm-scheduler", "builtin", "--workers", "1"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "needs --mode slurm" in lines[0], result.output
