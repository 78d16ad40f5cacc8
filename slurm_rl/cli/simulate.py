"""``slurm-rl simulate``: one scenario, several policies, a comparison table and a report."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from slurm_rl.agents.registry import baseline_names, is_learned, make_scheduler, takes_fee_weight
from slurm_rl.errors import InputError
from slurm_rl.fairness import LONGEST_HOLD_S, RankingRules
from slurm_rl.offered_load import load_points
from slurm_rl.replay_pool import decision_tick, fresh_replay_state, pool_map
from slurm_rl.replicas import print_means, replicas_json, write_reports
from slurm_rl.report import as_json, print_table, write_report
from slurm_rl.scenario import (
    ReplayResult,
    Scenario,
    check_something_to_measure,
    gpu_speed_table,
    replay,
)
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.simulator.sim_config import SimConfig
from slurm_rl.simulator.slurm_emulation import SlurmScheduler
from slurm_rl.workloads import open_measured_workload


@dataclass(frozen=True)
class PolicyRun:
    name: str
    seed: int
    fee_weight: float | None = None  # λ for placements that take one; None: their default
    rules: RankingRules | None = None  # the fairness guard and --nice; None: the defaults


DEFAULT_SYNTHETIC_WARMUP_DAYS = 3.0
DEFAULT_HOLD_CAP_H, DISPATCH_HOLD_CAP_H = 1.0, LONGEST_HOLD_S / 3600  # SimConfig's; the longest
# Each replica replays every policy once more: 100 already puts the standard error of a mean
# at a tenth of one replay's spread, and 1e25 (a typo click's IntRange lets through) built a
# list of 1e25 scenarios until memory ran out.
MAX_REPLICAS = 100


def build_scenario(options: dict[str, Any]) -> Scenario:
    if options["seed"] < 0:  # numpy's generators take none; the synthetic trace failed late
        raise InputError(f"--seed must be 0 or more, got {options['seed']}")
    spec = load_cluster_spec(options["cluster"])
    if options.get("warmup_days") is None:
        synthetic = options["trace_name"] == "synthetic"
        options["warmup_days"] = DEFAULT_SYNTHETIC_WARMUP_DAYS if synthetic else 0.0
    trace, measure_from = open_measured_workload(
        options["trace_name"],
        window_spec=options["window_spec"],
        days=options["days"],
        seed=options["seed"],
        fmt=options["trace_format"],
        skip_bad_rows=options["skip_bad_rows"],
        warmup_days=options["warmup_days"],
    )
    config = SimConfig(mode=options["mode"], cycle_s=options["cycle_s"], seed=options["seed"],
                       restart_overhead_s=options.get("restart_overhead_s") or 300.0,
                       slurm_scheduler=_slurm_scheduler(options),
                       hold_cap_s=hold_cap_s(options))
    scenario = Scenario(spec=spec, trace=trace, sim=config,
                        fluctuation=not options["no_fluctuation"], measure_from=measure_from,
                        checkpointable=options.get("checkpointable") or 0.0,
                        performance=options.get("performance") or "measured")
    check_something_to_measure(scenario)
    return scenario


def _slurm_scheduler(options: dict[str, Any]) -> SlurmScheduler:
    """``--slurm-scheduler``: only ``--mode slurm`` has a Slurm scheduler to emulate."""
    chosen: SlurmScheduler | None = options.get("slurm_scheduler")
    if chosen is not None and options["mode"] != "slurm":
        raise InputError(f"--slurm-scheduler {chosen} needs --mode slurm (in direct mode the "
                         "policy starts jobs itself; no Slurm scheduler is emulated)")
    return chosen or "backfill"


def policy_names(text: str | None) -> list[str]:
    if text is None:
        return baseline_names()
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise InputError("--policies names no policy")
    return names


def ranking_rules(options: dict[str, Any]) -> RankingRules | None:
    """The ranking step's rules from ``--fairness-max-wait-ratio`` and ``--dispatch`` (None:
    neither given)."""
    ratio, dispatch = options.get("fairness_max_wait_ratio"), bool(options.get("dispatch"))
    if ratio is None:
        return RankingRules(dispatch=True) if dispatch else None
    if 0 < ratio < 1:  # the ratio is never below 1: such a bound would re-rank every cycle
        raise InputError(f"--fairness-max-wait-ratio must be 0 (off) or at least 1, got {ratio:g}")
    return RankingRules(max_wait_ratio=ratio or None, dispatch=dispatch)


def hold_cap_s(options: dict[str, Any]) -> float:
    """``--hold-cap-h`` in seconds; by default 1 h, or the daemon's longest cap (30 days) with
    ``--dispatch``, whose holds would otherwise end while jobs still queue."""
    hours = options.get("hold_cap_h")
    if hours is None:
        hours = DISPATCH_HOLD_CAP_H if options.get("dispatch") else DEFAULT_HOLD_CAP_H
    if options.get("dispatch") and options["mode"] != "slurm":
        raise InputError("--dispatch needs --mode slurm (in direct mode the policy starts "
                         "every job itself; Slurm starts none on its own)")
    return float(hours) * 3600.0


def run_simulate(console: Console, **options: Any) -> list[ReplayResult]:
    replicas = options.get("replicas") or 1
    if replicas > MAX_REPLICAS:
        raise InputError(f"--replicas must be at most {MAX_REPLICAS}, got {replicas}")
    scenario = build_scenario(options)
    if options.get("offered_load") is not None:
        scenario = _at_load(console, scenario, options["offered_load"], options["as_json"])
    names = policy_names(options["policies"])
    speeds = gpu_speed_table()
    fee_weight: float | None = options.get("fee_weight")
    for name in names:  # fail on a bad name before spending any time
        make_scheduler(name, speeds, seed=options["seed"], fee_weight=fee_weight)
    if fee_weight is not None and not options.get("as_json"):
        _note_fee_weight(console, names, fee_weight)
    if scenario.trace.skipped:
        skipped = ", ".join(f"{n} {reason}" for reason, n in scenario.trace.skipped.items())
        console.print(f"skipped trace rows: {skipped}", highlight=False)
    rules = ranking_rules(options)
    runs = [PolicyRun(name, options["seed"], fee_weight, rules) for name in names]
    if replicas > 1:
        return _simulate_replicas(console, scenario, runs, replicas, options)
    results = replay_all(scenario, runs, options["workers"], quiet=options["as_json"])
    _emit(console, results, scenario, options)
    return results


def _at_load(console: Console, scenario: Scenario, load: float, quiet: bool) -> Scenario:
    """``--load``: the scenario on its cluster scaled to offer ``load`` (the load sweep's
    scaling, :func:`~slurm_rl.offered_load.load_points`), said in one line."""
    point = load_points(scenario, [load])[0]
    if not quiet:
        counts = ", ".join(f"{prefix} {n}" for prefix, n in point.node_counts.items())
        console.print(f"offered load {point.achieved:.2f} (asked {load:g}; the spec's cluster: "
                      f"{point.factor * point.target:.2f}): {len(point.scenario.cluster.nodes)} "
                      f"nodes ({counts})", highlight=False)
    if point.unschedulable_jobs > scenario.runnable_jobs()[1]:
        raise InputError(f"--load {load:g}: the scaled cluster cannot fit "
                         f"{point.unschedulable_jobs} of the jobs; ask a lower load")
    return point.scenario


def _simulate_replicas(console: Console, scenario: Scenario, runs: list[PolicyRun],
                       replicas: int, options: dict[str, Any]) -> list[ReplayResult]:
    scenarios = [scenario.replica(k) for k in range(replicas)]
    tasks = [(s, run) for s in scenarios for run in runs]
    flat = replay_tasks(tasks, options["workers"], quiet=options["as_json"])
    per_replica = [flat[k * len(runs):(k + 1) * len(runs)] for k in range(replicas)]
    if options["as_json"]:
        print(replicas_json(per_replica, scenarios))
    else:
        print_means(per_replica, scenarios, console)
    if options["report_dir"] is not None:
        path = write_reports(per_replica, scenarios, options["report_dir"])
        if not options["as_json"]:
            console.print(f"reports: {path.parent}")
    return flat


def _note_fee_weight(console: Console, names: list[str], fee_weight: float) -> None:
    """Say which policies --fee-weight reaches: a heuristic has no λ, and a learned policy
    keeps the one its bundle was trained with."""
    taking = [n for n in names if takes_fee_weight(n)]
    learned = [n for n in names if is_learned(n)]
    reach = ", ".join(taking) if taking else "no policy named"
    console.print(f"fee weight λ = {fee_weight:g} per $: {reach}", highlight=False)
    if learned:
        console.print(f"  {', '.join(learned)}: the bundle's own λ (trained with it)",
                      highlight=False)


def _emit(console: Console, results: list[ReplayResult], scenario: Scenario,
          options: dict[str, Any]) -> None:
    if options["as_json"]:
        print(as_json(results, scenario))
    else:
        print_table(results, scenario, console)
    report_dir: Path | None = options["report_dir"]
    if report_dir is not None:
        path = write_report(results, scenario, report_dir)
        if not options["as_json"]:
            console.print(f"report: {path}")


def replay_all(
    scenario: Scenario, runs: Sequence[PolicyRun], workers: int | None, *, quiet: bool = False
) -> list[ReplayResult]:
    """Replays in parallel processes, with one progress bar over all decision cycles."""
    return replay_tasks([(scenario, run) for run in runs], workers, quiet=quiet)


def replay_tasks(
    tasks: Sequence[tuple[Scenario, PolicyRun]], workers: int | None, *, quiet: bool = False
) -> list[ReplayResult]:
    """Each (scenario, policy) pair replayed side by side (:mod:`slurm_rl.replay_pool`),
    results in order."""
    return pool_map(_replay_one, tasks, workers or os.cpu_count() or 1, progress=not quiet)


def _replay_one(scenario: Scenario, run: PolicyRun) -> ReplayResult:
    fresh_replay_state()  # the same figures whichever worker ran what before
    scheduler = make_scheduler(run.name, gpu_speed_table(), seed=run.seed,
                               fee_weight=run.fee_weight, rules=run.rules)
    return replay(scenario, scheduler, policy_id=run.name, on_cycle=decision_tick)
