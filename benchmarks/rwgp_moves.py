"""Benchmark: what RWGP's moves (``RwgpPlacement.migrations``) add to a decision.

The cluster of ``rwgp_cycle.py`` (philly-hetero's node mix at ``--machines`` nodes), warmed up
with hourly speed readings, then ``--running`` checkpointable one-GPU jobs spread over the
nodes, all past the 4 h a move needs, and about a third of the GPUs free: every running job is
a candidate, the worst case of one decision. Prints the median and max wall time of
``migrations`` over ``--repeat`` calls and how many moves it proposed.
Usage: python benchmarks/rwgp_moves.py [--machines 1000] [--running 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from rwgp_cycle import SPEED, T0, build_cluster, readings, running_jobs

from slurm_rl.agents.rwgp.placement import PlacementConfig, RwgpPlacement
from slurm_rl.core import Cluster, ClusterSnapshot, Job, Placement, RunningJob


def running(cluster: Cluster, count: int, now: float) -> tuple[RunningJob, ...]:
    """``count`` one-GPU checkpointable jobs, round robin over the nodes, started 5 h ago."""
    nodes = cluster.nodes
    return tuple(
        RunningJob(Job(f"r{i}", now - 6 * 3600.0, 1, checkpointable=True), now - 5 * 3600.0,
                   Placement((nodes[i % len(nodes)].name,), (1,)))
        for i in range(count)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--machines", type=int, default=1000)
    parser.add_argument("--running", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    cluster = build_cluster(args.machines)
    policy = RwgpPlacement(SPEED, PlacementConfig(threads=1))
    for hour in range(4):
        at = T0 + 3600.0 * hour
        policy.observe(ClusterSnapshot(at, cluster, tuple(0 for _ in cluster.nodes), (),
                                       observations=readings(cluster, running_jobs(cluster, rng),
                                                             at, rng)))
    now = T0 + 4 * 3600.0
    free = tuple(int(rng.integers(0, n.gpus + 1)) if rng.random() < 0.33 else 0
                 for n in cluster.nodes)
    view = ClusterSnapshot(now, cluster, free, (), running(cluster, args.running, now))
    policy.observe(view)
    times, moves = [], 0
    for _ in range(args.repeat):
        started = time.perf_counter()
        moves = len(policy.migrations(view, free))
        times.append(time.perf_counter() - started)
    print(f"{len(cluster.nodes)} machines, {args.running} movable running jobs, "
          f"{sum(free)} GPUs free: {moves} moves proposed")
    print(f"migrations(): median {statistics.median(times):.3f} s, max {max(times):.3f} s")


if __name__ == "__main__":
    main()
