"""RWGP placement against the heuristic placements, FIFO ordering, on one simulated scenario.

The same scenario as ``slurm-rl simulate`` (philly-hetero, fluctuation and stragglers on by
default), replayed with ``fifo+first-fit``, ``fifo+best-fit``, ``fifo+fastest-gpu``,
``fifo+cheapest-gpu`` and RWGP variants, in parallel processes; prints ``simulate``'s table
and a compact one. Until ``rwgp`` is registered in ``slurm_rl.agents.registry`` this script
builds its schedulers itself.

Variants (see :func:`rwgp`): ``rwgp`` (datasheet GPU speeds, like fastest-GPU; λ = 0),
``rwgp-measured`` (measured per-family speeds and spread penalties), and suffixes such as
``-fee0.2`` (λ per $, as in the reward −(JCT h + λ·fees)), ``-pack0.1``, ``-risk0.5``,
``-excl0.25`` (ρ, 0: no exclusions), ``-min1`` (the smallest job excluded from slow nodes),
``-backlog300-memory24`` (the backlog rule: seconds a single-GPU job waits before gangs that
fit one node may take slow nodes, hours that backlog is remembered), ``-move4-speedup2`` (hours a
checkpointable job runs before a move, the speed-up a move needs; ``-move0`` never moves) —
moves happen only with ``--checkpointable``.
Usage: python benchmarks/rwgp_simulate.py --window 2017-10-01:2017-10-15 [--mode slurm]
"""

from __future__ import annotations

import argparse
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context

from rich.console import Console

from slurm_rl.agents.ordering_baselines import Fifo
from slurm_rl.agents.registry import make_scheduler
from slurm_rl.agents.rwgp.placement import PlacementConfig, RwgpPlacement
from slurm_rl.cli.simulate import build_scenario
from slurm_rl.report import print_table
from slurm_rl.scenario import ReplayResult, Scenario, gpu_speed_table, replay
from slurm_rl.scheduler import Scheduler
from slurm_rl.simulator.perfmodel import PerformanceModel

BASELINES = ("fifo+first-fit", "fifo+best-fit", "fifo+fastest-gpu", "fifo+cheapest-gpu")
VARIANTS = ("fifo+rwgp", "fifo+rwgp-measured")


def rwgp(variant: str) -> RwgpPlacement:
    """``rwgp``: datasheet GPU speeds (as fastest-GPU has) and constant spread penalties;
    ``measured``: the measured per-family speed and spread tables (published data the
    simulator is built from too), ``family`` / ``spread``: one of them; ``fee<λ>``: λ in the
    score; ``pack<η>``: η; ``risk<κ>``: κ; ``nolearn``: the GP never sees a reading (ablation)."""
    speeds = gpu_speed_table()
    options: dict[str, float] = {}
    family, spread = None, None
    perf = PerformanceModel.default()
    for part in variant.split("-")[1:]:
        if part in ("measured", "family"):
            family = perf.speed_table()
        if part in ("measured", "spread"):
            spread = perf
        if part.startswith("fee"):
            options["fee_weight"] = float(part[3:])
        elif part.startswith("pack"):
            options["packing_weight"] = float(part[4:])
        elif part.startswith("whole"):
            options["whole_node_weight"] = float(part[5:])
        elif part.startswith("risk"):
            options["risk_aversion"] = float(part[4:])
        elif part.startswith("excl"):
            options["exclusion_ratio"] = float(part[4:])
        elif part.startswith("min"):
            options["exclusion_min_gpus"] = int(part[3:])
        elif part.startswith("memory"):
            options["exclusion_backlog_memory_s"] = float(part[6:]) * 3600
        elif part.startswith("backlog"):
            options["exclusion_backlog_s"] = float(part[7:])
        elif part.startswith("move"):
            hours = float(part[4:])
            options["migrate_after_s"] = hours * 3600 if hours > 0 else None
        elif part.startswith("speedup"):
            options["migrate_speedup"] = float(part[7:])
        elif part.startswith("gain"):  # outside a backlog: elapsed × (1 − here/there) ≥ gain h
            options["migrate_gain_s"] = float(part[4:]) * 3600
    config = PlacementConfig(**options, learn="nolearn" not in variant)  # type: ignore[arg-type]
    return RwgpPlacement(speeds, config, family_speed=family, spread_model=spread)


def scheduler(name: str) -> Scheduler:
    ordering, _, placement = name.partition("+")
    if placement.startswith("rwgp"):
        assert ordering == "fifo"
        return Scheduler(Fifo(), rwgp(placement))
    return make_scheduler(name, gpu_speed_table())


def run(scenario: Scenario, name: str) -> ReplayResult:
    return replay(scenario, scheduler(name), policy_id=name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cluster", default="philly-hetero")
    parser.add_argument("--trace", default="philly")
    parser.add_argument("--window", default="2017-10-01:2017-10-15")
    parser.add_argument("--days", type=float, default=7.0, help="measured days of the window")
    parser.add_argument("--mode", choices=["direct", "slurm"], default="slurm")
    parser.add_argument("--cycle", type=float, default=10.0)
    parser.add_argument("--policies", default=",".join(BASELINES + VARIANTS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpointable", type=float, nargs="?", const=1.0, default=0.0,
                        help="every job (or this share) checkpoints: placements may move "
                        "running jobs")
    parser.add_argument("--replicas", type=int, default=1,
                        help="Scenario.replica(0..N-1), as `slurm-rl simulate --replicas`")
    parser.add_argument("--fluctuation-seeds", default="",
                        help="comma-separated machine-fluctuation seeds: one replica of the "
                        "scenario each (which machines straggle, how speeds drift); default: "
                        "the cluster spec's")
    args = parser.parse_args()
    scenario = build_scenario({
        "cluster": args.cluster, "trace_name": args.trace, "window_spec": args.window,
        "days": args.days, "seed": args.seed, "trace_format": None, "skip_bad_rows": False,
        "warmup_days": None, "mode": args.mode, "cycle_s": args.cycle, "no_fluctuation": False,
        "checkpointable": args.checkpointable,
    })
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    seeds = [int(s) for s in args.fluctuation_seeds.split(",") if s.strip()]
    replicas = [replica(scenario, s) for s in seeds] or [scenario]
    if args.replicas > 1:  # as `slurm-rl simulate --replicas`: Scenario.replica(0..N-1)
        replicas = [scenario.replica(k) for k in range(args.replicas)]
    runs = [(r, n) for r in replicas for n in names]
    with ProcessPoolExecutor(args.workers, get_context("fork")) as pool:
        results = list(pool.map(run, *zip(*runs, strict=True)))
    if len(replicas) == 1:
        print_table(results, scenario, Console(width=200))
    print(f"{'policy':<28} {'seed':>6} {'avg JCT h':>10} {'fees $':>12} {'wall s':>8} "
          f"{'moves':>6}")
    for (rep, _), r in zip(runs, results, strict=True):
        jct, fees = r.metrics.avg_jct_s / 3600, r.metrics.total_fees
        print(f"{r.policy_id:<28} {rep.spec.fluctuation.seed:>6} {jct:>10.2f} {fees:>12,.0f} "
              f"{r.wall_s:>8.0f} {r.metrics.migrations:>6}")
    if len(replicas) > 1:
        print_means(names, results, len(names))


def replica(scenario: Scenario, seed: int) -> Scenario:
    spec = replace(scenario.spec, fluctuation=replace(scenario.spec.fluctuation, seed=seed))
    return replace(scenario, spec=spec)


def print_means(names: list[str], results: list[ReplayResult], per_replica: int) -> None:
    print(f"{'mean over replicas':<28} {'':>6} {'avg JCT h':>10} {'fees $':>12}")
    for k, name in enumerate(names):
        mine = results[k::per_replica]
        jct = statistics.fmean(r.metrics.avg_jct_s / 3600 for r in mine)
        fees = statistics.fmean(r.metrics.total_fees for r in mine)
        print(f"{name:<28} {'':>6} {jct:>10.2f} {fees:>12,.0f}")


if __name__ == "__main__":
    main()
