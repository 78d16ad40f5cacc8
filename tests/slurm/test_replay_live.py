"""Sim-to-real, short (issue 22; the full table is benchmarks/replay_live.py): one mini-trace
of 8 jobs run by a real slurmctld under sched/backfill and sched/builtin with the daemon
(fifo+best-fit) steering it, with and without dispatch, and by the simulator's emulation of
each; the two schedules must agree on where jobs ran and in which order they started.

Start-time errors are printed, not asserted (timings are the benchmark's); order and node
sets are asserted with some slack, since a loaded host may shift a start by a cycle and
with it a tie between two free nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_rl.sim2real import job_lines, summary_line
from slurm_rl.simulator.slurm_emulation import SlurmScheduler
from tests.slurm.live import LiveCluster
from tests.slurm.replay import make_trace, replay_cluster, run_live

pytestmark = pytest.mark.slurm


@pytest.mark.parametrize("dispatch", [False, True], ids=["levers", "dispatch"])
@pytest.mark.parametrize("scheduler", ["backfill", "builtin"])
def test_the_emulation_schedules_a_mini_trace_as_slurm_does(
    slurm_cluster: LiveCluster, tmp_path: Path, scheduler: SlurmScheduler, dispatch: bool
) -> None:
    if slurm_cluster.kind != "native":
        pytest.skip("starts its own native cluster (its SchedulerType is the point)")
    trace = make_trace(8, seed=1)
    with replay_cluster(scheduler) as cluster:
        run = run_live(cluster, trace, "fifo+best-fit", scheduler, tmp_path / "state",
                       drain_timeout_s=300.0, dispatch=dispatch)
    comparison = run.comparison
    print(summary_line(f"{scheduler} fifo+best-fit{' dispatch' if dispatch else ''}",
                       comparison))
    print("\n".join(job_lines(comparison, only_disagreements=False)))
    assert len(run.real) == len(trace), "a job of the trace did not complete in Slurm"
    assert not comparison.unmatched, f"the simulator did not finish {comparison.unmatched}"
    assert comparison.same_nodes >= 0.75, "\n".join(job_lines(comparison))
    assert comparison.tau >= 0.8, "\n".join(job_lines(comparison))
