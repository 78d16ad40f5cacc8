"""Benchmark: ordering-agent inference for a queue of 5,000 pending jobs on philly-hetero.

Times one full ``observe`` + ``score`` of the learned ordering agent — features (with the
runtime history of 2,000 finished jobs), the placement agent's messages (candidates per request
shape and the placement head's choice for every job) and the network — on a fresh snapshot each
repetition (so no cache carries over), on one torch thread. Prints the median and the 90th
percentile; the target is ≤ 50 ms. Jobs come from the seeded synthetic Philly-like workload, so
no shared data is needed.

Usage: python benchmarks/ordering_inference.py [--jobs 5000] [--chooser rwgp-excluding|...]
       [--bundle policies/default] [--repeat 30]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

import torch

from slurm_rl.agents.dual.agent import build_scheduler, network_config
from slurm_rl.agents.dual.bundle import CHOOSERS, Bundle, load_bundle
from slurm_rl.agents.dual.network import DualNetwork
from slurm_rl.core import ClusterSnapshot, FinishedJob, Placement
from slurm_rl.scenario import gpu_speed_table
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.traces import synthetic_philly


def queue_snapshot(jobs: int, finished: int) -> tuple[ClusterSnapshot, ClusterSnapshot]:
    """A snapshot of history (finished jobs) and one with ``jobs`` pending and half the
    cluster's GPUs free."""
    cluster = load_cluster_spec("philly-hetero").cluster
    workload = synthetic_philly(days=60.0, seed=0).jobs
    pending, done = workload[:jobs], workload[jobs : jobs + finished]
    now = max(j.submit_time for j in pending) + 60.0
    node = cluster.nodes[0].name
    history = tuple(
        FinishedJob(j, now - 2 * (j.oracle_duration or 60.0), now - (j.oracle_duration or 60.0),
                    Placement((node,), (1,)))
        for j in done
    )
    free = tuple(n.gpus if i % 2 else 0 for i, n in enumerate(cluster.nodes))
    first = ClusterSnapshot(now - 1.0, cluster, free, (), finished=history)
    return first, ClusterSnapshot(now, cluster, free, tuple(pending))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--chooser", choices=list(CHOOSERS), default=CHOOSERS[0])
    parser.add_argument("--bundle", type=Path, default=None,
                        help="a policy bundle (default: an untrained network of the same size)")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    torch.manual_seed(0)
    bundle = (load_bundle(args.bundle) if args.bundle else
              Bundle(Path("-"), DualNetwork(network_config()), {"chooser": args.chooser}))
    scheduler = build_scheduler(bundle, gpu_speed_table(), threads=1)
    ordering, placement = scheduler.ordering, scheduler.placement
    history, snapshot = queue_snapshot(args.jobs, 2000)
    ordering.observe(history)
    placement.observe(history)
    timings = []
    for _ in range(args.repeat + 3):
        fresh = dataclasses.replace(snapshot)
        started = time.perf_counter()
        ordering.observe(fresh)
        placement.observe(fresh)
        scores = ordering.score(fresh)
        timings.append(time.perf_counter() - started)
    timings = sorted(timings[3:])
    shapes = len({(j.num_gpus, j.num_nodes, j.gpus_per_node, j.gpu_type) for j in snapshot.pending})
    print(f"ordering inference, {len(scores):,} pending jobs ({shapes} request shapes), "
          f"chooser {bundle.chooser}, torch threads {torch.get_num_threads()}")
    print(f"median {1000 * statistics.median(timings):.1f} ms, "
          f"p90 {1000 * timings[int(0.9 * (len(timings) - 1))]:.1f} ms "
          f"over {len(timings)} runs (target <= 50 ms)")


if __name__ == "__main__":
    main()
