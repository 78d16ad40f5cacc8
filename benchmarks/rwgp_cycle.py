"""Benchmark: one RWGP update + placement cycle at 1,000 machines and 500 pending jobs.

A synthetic cluster with philly-hetero's node mix scaled to ``--machines`` nodes (K80/P100/T4/
V100/A100, 2-8 GPUs per node, racks of 8 or 16) is warmed up with ``--warmup-hours`` of hourly
speed readings from six job classes (so the belief holds a slot per class, as in a real run,
and the hyperparameter refits on the way have happened). Then each timed cycle is what the
scheduler does per decision: ``Scheduler.decide`` on a snapshot with ``--pending`` jobs, about
a third of the GPUs free, and new readings, i.e. the GP update (``observe``) plus one ``place``
per pending job that could fit. Two kinds of cycle are timed:

* ``typical``: the readings of ``--finished`` jobs that just completed (a 10 s cycle);
* ``fluctuation step``: a reading from every running job at once (what the simulator emits
  when machine speeds change, once per hour of simulated time).

Prints the state size, per kind the median and max over ``--repeat`` cycles, split into
update and placement (cycles in which a scheduled hyperparameter refit fell are listed apart),
and the time of one refit. Target: a cycle <= 0.5 s on 2 cores.
Usage: python benchmarks/rwgp_cycle.py [--machines 1000] [--pending 500] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from slurm_rl.agents.ordering_baselines import Fifo
from slurm_rl.agents.rwgp.placement import PlacementConfig, RwgpPlacement
from slurm_rl.core import Cluster, ClusterSnapshot, Job, Node, SpeedObservation
from slurm_rl.scheduler import Scheduler

FAMILIES = ("imagenet", "yolov3", "bert", "ncf", "cifar10", "deepspeech2")
# (prefix, GPU type, GPUs per node, rack size, price, share of nodes): philly-hetero's mix
MIX = (("k80", "K80", 8, 8, 0.45, 8), ("p100", "P100", 4, 8, 1.46, 16),
       ("p100-2g", "P100", 2, 16, 1.46, 16), ("t4", "T4", 4, 8, 0.35, 16),
       ("v100", "V100", 8, 8, 2.48, 40), ("a100", "A100", 8, 8, 2.934, 8))
SPEED = {"K80": 0.21, "P100": 0.74, "T4": 0.60, "V100": 1.0, "A100": 1.57}
SIZES = (1, 1, 1, 1, 2, 2, 4, 8, 16)
T0 = 1.5e9


def build_cluster(machines: int) -> Cluster:
    total = sum(m[-1] for m in MIX)
    nodes: list[Node] = []
    for prefix, gpu_type, gpus, rack, price, share in MIX:
        count = round(machines * share / total)
        nodes += [Node(f"{prefix}-{i:04d}", gpu_type, gpus, f"{prefix}-r{i // rack}", price)
                  for i in range(count)]
    return Cluster(f"bench-{len(nodes)}", tuple(nodes))


def readings(cluster: Cluster, nodes: list[np.ndarray], time_s: float,
             rng: np.random.Generator) -> tuple[SpeedObservation, ...]:
    """One reading per entry of ``nodes`` (arrays of node indices: one job each)."""
    return tuple(
        SpeedObservation(time_s, tuple(cluster.nodes[i].name for i in row),
                         FAMILIES[int(rng.integers(len(FAMILIES)))],
                         float(min(1.0, rng.normal(0.97, 0.04))))
        for row in nodes
    )


def running_jobs(cluster: Cluster, rng: np.random.Generator) -> list[np.ndarray]:
    """The node sets of the jobs running: ~2 jobs per node, 10 % of them two-node gangs."""
    count = len(cluster.nodes)
    jobs = [np.array([i]) for i in range(count) for _ in range(2)]
    gangs = [rng.choice(count, 2, replace=False) for _ in range(count // 5)]
    return jobs + gangs


def snapshot(cluster: Cluster, pending: int, observations: tuple[SpeedObservation, ...],
             time_s: float, rng: np.random.Generator) -> ClusterSnapshot:
    free = tuple(int(rng.integers(0, n.gpus + 1)) if rng.random() < 0.5 else 0
                 for n in cluster.nodes)
    jobs = tuple(
        Job(f"p{i}", time_s - 10.0 * (pending - i), int(rng.choice(SIZES)),
            model_family=FAMILIES[i % len(FAMILIES)])
        for i in range(pending)
    )
    return ClusterSnapshot(time_s, cluster, free, jobs, observations=observations)


def _ignore(snapshot: ClusterSnapshot) -> None:
    """Stands in for ``observe`` while the decision is timed (it was timed on its own)."""


def timed_cycle(scheduler: Scheduler, view: ClusterSnapshot) -> tuple[float, float, float]:
    """Wall seconds of the update and of the placement, and CPU seconds of both (all
    threads): on a shared machine the CPU time is what a dedicated one would take."""
    placement = scheduler.placement
    cpu = time.process_time()
    start = time.perf_counter()
    placement.observe(view)
    middle = time.perf_counter()
    original = placement.observe
    placement.observe = _ignore  # type: ignore[method-assign]
    try:
        scheduler.decide(view)
    finally:
        placement.observe = original  # type: ignore[method-assign]
    return middle - start, time.perf_counter() - middle, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--machines", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (one is fastest: the matrices are small and a second"
                        " thread only pays off on an otherwise idle machine)")
    parser.add_argument("--finished", type=int, default=20)
    parser.add_argument("--warmup-hours", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    cluster = build_cluster(args.machines)
    policy = RwgpPlacement(SPEED, PlacementConfig(threads=args.threads))
    scheduler = Scheduler(Fifo(), policy)
    jobs = running_jobs(cluster, rng)
    started = time.perf_counter()
    for hour in range(args.warmup_hours):
        policy.observe(snapshot(cluster, 0, readings(cluster, jobs, T0 + 3600.0 * hour, rng),
                                T0 + 3600.0 * hour, rng))
        assert policy.model is not None
        policy.model.flush()
    warmup = time.perf_counter() - started
    model = policy.model
    assert model is not None
    print(f"cluster: {len(cluster.nodes)} machines, {cluster.total_gpus} GPUs, "
          f"{model.graph.num_cells} cells; {args.pending} pending jobs; "
          f"torch threads {torch.get_num_threads()}")
    print(f"belief state: {model.belief.size} (2 x machines + classes x cells); warm-up "
          f"{args.warmup_hours} h of readings ({model.readings_seen:,} merged, {model.fits} "
          f"refits) took {warmup:.1f} s")

    now = T0 + 3600.0 * args.warmup_hours
    def finished() -> list[np.ndarray]:
        return [jobs[int(i)] for i in rng.choice(len(jobs), args.finished)]

    def every_running() -> list[np.ndarray]:
        return jobs

    kinds: dict[str, Callable[[], list[np.ndarray]]] = {
        "typical": finished, "fluctuation step": every_running,
    }
    for kind, chosen in kinds.items():
        updates: list[float] = []
        places: list[float] = []
        cpus: list[float] = []
        refits: list[float] = []
        for _ in range(args.repeat):
            now += 10.0
            nodes = chosen()
            view = snapshot(cluster, args.pending, readings(cluster, nodes, now, rng), now, rng)
            fits = model.fits
            update, place, cpu = timed_cycle(scheduler, view)
            if model.fits > fits:
                refits.append(update + place)
                continue
            updates.append(update)
            places.append(place)
            cpus.append(cpu)
        waiting = model.waiting
        model.flush()
        totals = [u + p for u, p in zip(updates, places, strict=True)]
        print(f"{kind:>16}: {len(nodes):5d} readings | cycle median "
              f"{statistics.median(totals):.3f} s"
              f" (max {max(totals):.3f}) = update {statistics.median(updates):.3f} s"
              f" + placement {statistics.median(places):.3f} s; CPU time median"
              f" {statistics.median(cpus):.3f} s; {waiting} readings left for"
              f" later cycles" + (f"; {len(refits)} cycle(s) with a refit: "
                                  f"{', '.join(f'{r:.1f}' for r in refits)} s" if refits else ""))
    started = time.perf_counter()
    model.fit()
    print(f"one hyperparameter refit + rebuild from the window ({len(model.window)} readings): "
          f"{time.perf_counter() - started:.1f} s (at {model.config.first_fit} readings and then "
          f"every x{model.config.fit_growth:g}: O(log N) times in a run)")


if __name__ == "__main__":
    main()
