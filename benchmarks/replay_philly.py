"""Benchmark: replay the full Philly trace (82,247 jobs) on philly-hetero with FIFO + first-fit.

Prints wall time (trace load + replay), jobs/s and peak memory. Target: ≤ 60 s, ≤ 2 GiB on
2 cores. Usage: python benchmarks/replay_philly.py [--mode direct|slurm] [--trace PATH]
"""

from __future__ import annotations

import argparse
import resource
import time

from slurm_rl.agents.registry import make_scheduler
from slurm_rl.scenario import Scenario, replay
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.simulator.perfmodel import datasheet_gpu_speeds as gpu_speed_table
from slurm_rl.simulator.sim_config import SimConfig
from slurm_rl.workloads import open_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=["direct", "slurm"], default="direct")
    parser.add_argument("--trace", default="philly")
    parser.add_argument("--cluster", default="philly-hetero")
    parser.add_argument("--policy", default="fifo+first-fit")
    parser.add_argument("--days", type=float, default=None,
                        help="replay only this many days of the trace [all of it]")
    args = parser.parse_args()

    started = time.perf_counter()
    trace = open_workload(args.trace) if args.days is None else \
        open_workload(args.trace, days=args.days)
    loaded = time.perf_counter()
    scenario = Scenario(load_cluster_spec(args.cluster), trace, SimConfig(mode=args.mode))
    result = replay(scenario, make_scheduler(args.policy, gpu_speed_table()), policy_id=args.policy)
    finished = time.perf_counter()

    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    wall = finished - started
    print(f"trace: {trace.name}, {len(trace.jobs):,} jobs; cluster {args.cluster}; "
          f"{args.policy}, {args.mode} mode")
    print(f"load {loaded - started:.2f} s, replay {finished - loaded:.2f} s, "
          f"total {wall:.2f} s ({result.metrics.jobs / wall:,.0f} jobs/s)")
    print(f"decision cycles {result.cycles:,}; finished jobs {result.metrics.jobs:,}; "
          f"unschedulable {result.unschedulable_jobs}; unfinished {result.unfinished_jobs}")
    print(f"avg JCT {result.metrics.avg_jct_s / 3600:.2f} h (lower bound "
          f"{result.metrics.jct_lower_bound_s / 3600:.2f} h)")
    print(f"peak memory {peak_mib:,.0f} MiB")


if __name__ == "__main__":
    main()
