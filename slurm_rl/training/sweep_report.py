"""A load sweep's figures: mean and 95 % interval over replicas for every policy at every load,
the verdict per load, ``sweep.json`` and ``sweep.md`` (with the plots of
:mod:`slurm_rl.training.sweep_plots`).

The interval is Student's t interval of the mean over the replicas,
``mean ± t_{0.975, n−1} · sd / √n`` (replicas differ only in their machine-fluctuation and
simulator seeds); with one replica there is none (low = high = mean). ``sweep.json`` holds no
wall times, paths or dates: the same sweep gives the same file, byte for byte.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scipy import stats

from slurm_rl.agents.names import ordering_of, realisable_orderings, reference_orderings
from slurm_rl.core import Cluster
from slurm_rl.offered_load import node_groups
from slurm_rl.training.sweep import RunFigures, SweepRuns

#: (field of RunFigures, what the reports call it)
METRICS: tuple[tuple[str, str], ...] = (
    ("avg_jct_h", "avg JCT (h)"),
    ("jct_over_bound", "avg JCT / lower bound"),
    ("fees", "fees ($)"),
    ("p99_wait_h", "p99 queue wait (h)"),
)
AGENT = "dual-agent"
GAP_FROM_LOAD = 0.85  # the issue asks the agent to close half the gap to SJF-oracle from here
GAP_TARGET = 0.5
WAIT_FACTOR = 1.5


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float

    def as_dict(self, values: Sequence[float]) -> dict[str, Any]:
        return {"mean": self.mean, "low": self.low, "high": self.high,
                "per_replica": list(values)}


def interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """The mean of ``values`` and its two-sided Student-t interval (module docstring)."""
    if not values:
        raise ValueError("an interval needs at least one value")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean, mean, mean)
    t = float(stats.t.ppf(0.5 + confidence / 2, len(values) - 1))
    half = t * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean, mean - half, mean + half)


def figures(runs: Sequence[RunFigures]) -> dict[str, Interval]:
    return {name: interval([r.metric(name) for r in runs]) for name, _ in METRICS}


# ----- lines: each ordering with its best placement -----------------------------------------


def _mean_jct(runs: Sequence[RunFigures]) -> float:
    return statistics.fmean(r.avg_jct_h for r in runs)


def best_of(by_policy: Mapping[str, Sequence[RunFigures]], orderings: Sequence[str]) -> str | None:
    """The policy of those ``orderings`` (any placement) with the lowest mean avg JCT."""
    mine = [p for p in by_policy if ordering_of(p) in orderings]
    return min(mine, key=lambda p: (_mean_jct(by_policy[p]), p)) if mine else None


def line_names(runs: SweepRuns) -> list[str]:
    """What the plots draw: every ordering that was replayed (with its best placement at each
    load) and every policy that is no ordering+placement pair (the agents)."""
    orderings = [ordering_of(p) for p in runs.policies]
    named = list(dict.fromkeys(o for o in orderings if o is not None))
    return named + [p for p, o in zip(runs.policies, orderings, strict=True) if o is None]


def line_policy(by_policy: Mapping[str, Sequence[RunFigures]], line: str) -> str:
    """The policy a line shows at one load: an agent itself, an ordering's best placement."""
    if line in by_policy:
        return line
    best = best_of(by_policy, [line])
    assert best is not None, line
    return best


# ----- the verdict ------------------------------------------------------------------------


def load_verdict(by_policy: Mapping[str, Sequence[RunFigures]], target: float
                 ) -> dict[str, Any] | None:
    """The issue's criteria at one load, on means over replicas: the dual agent against the
    best realisable baseline (the realisable ordering+placement with the lowest mean JCT):
    JCT at or below it, from load 0.85 on ≥ 50 % of the gap to the best SJF-oracle policy
    closed, fees at or below, p99 queue wait at most 1.5×. None without the agent."""
    best = best_of(by_policy, realisable_orderings())
    oracle = best_of(by_policy, reference_orderings())
    if AGENT not in by_policy or best is None:
        return None
    agent, base = figures(by_policy[AGENT]), figures(by_policy[best])
    gap = None
    if oracle is not None:
        room = base["avg_jct_h"].mean - figures(by_policy[oracle])["avg_jct_h"].mean
        gap = (base["avg_jct_h"].mean - agent["avg_jct_h"].mean) / room if room > 0 else None
    checks = {
        "jct": agent["avg_jct_h"].mean <= base["avg_jct_h"].mean,
        "gap": target < GAP_FROM_LOAD or (gap is not None and gap >= GAP_TARGET),
        "fees": agent["fees"].mean <= base["fees"].mean,
        "p99_wait": agent["p99_wait_h"].mean <= WAIT_FACTOR * base["p99_wait_h"].mean,
    }
    return {"best_baseline": best, "oracle": oracle, "gap_closed": gap,
            "agent": {k: v.mean for k, v in agent.items()},
            "baseline": {k: v.mean for k, v in base.items()},
            "checks": checks, "held": all(checks.values())}


# ----- sweep.json ---------------------------------------------------------------------------


def unequal_jobs(by_policy: Mapping[str, Sequence[RunFigures]]) -> dict[str, list[int]]:
    """Each policy's measured and unfinished jobs per replica, when the policies did not all
    finish the same jobs (else empty): their figures are then over different jobs, and a
    policy that left long jobs unfinished would look better."""
    counts = {p: [r.jobs for r in runs] for p, runs in by_policy.items()}
    unfinished = {p: [r.unfinished for r in runs] for p, runs in by_policy.items()}
    if len({tuple(c) for c in counts.values()}) <= 1 and not any(map(any, unfinished.values())):
        return {}
    return {p: [*counts[p], *unfinished[p]] for p in by_policy}


def sweep_payload(runs: SweepRuns, original_nodes: Mapping[str, int]) -> dict[str, Any]:
    scenario = runs.points[0].scenario
    points: list[dict[str, Any]] = []
    for point in runs.points:
        by_policy = runs.runs[point.target]
        points.append({
            "target_load": point.target, "achieved_load": point.achieved,
            "scale_factor": point.factor, "gpus": point.scenario.cluster.total_gpus,
            "node_groups": {p: [original_nodes[p], n] for p, n in point.node_counts.items()},
            "unschedulable_jobs": point.unschedulable_jobs,
            "measured_jobs": by_policy[runs.policies[0]][0].jobs,
            "unequal_jobs": unequal_jobs(by_policy),
            "lines": {line: line_policy(by_policy, line) for line in line_names(runs)},
            "verdict": load_verdict(by_policy, point.target),
            "policies": {p: {name: iv.as_dict([r.metric(name) for r in by_policy[p]])
                             for name, iv in figures(by_policy[p]).items()}
                         for p in runs.policies},
        })
    verdicts = [p["verdict"] for p in points]
    return {"scenario": scenario.trace.name, "cluster": scenario.cluster.name,
            "mode": scenario.sim.mode, "dispatch": runs.dispatch,
            "hold_cap_h": scenario.sim.hold_cap_s / 3600.0, "replicas": runs.replicas,
            "fluctuation_seeds": [scenario.spec.fluctuation.seed + k
                                  for k in range(runs.replicas)],
            "load": "offered load = GPU-time demand / (capacity in reference-GPU equivalents "
                    "x span of submissions); slurm_rl.offered_load.offered_load",
            "scaling": "node groups scaled by one factor, GPU-type mix kept; each count the "
                       "floor or ceiling of its exact share, whichever brings the capacity "
                       "nearest the target (largest remainder first), never below 1",
            "interval": "95 % Student-t interval of the mean over replicas",
            "points": points,
            "held_at_every_load": bool(verdicts) and all(v is not None and v["held"]
                                                         for v in verdicts)}


# ----- sweep.md -----------------------------------------------------------------------------


def _iv(value: Mapping[str, Any], digits: int) -> str:
    """The mean and its interval; the mean alone for one replica (it has no interval)."""
    mean = f"{value['mean']:,.{digits}f}"
    if len(value["per_replica"]) < 2:
        return mean
    return f"{mean} [{value['low']:,.{digits}f}, {value['high']:,.{digits}f}]"


_DIGITS = {"avg_jct_h": 2, "jct_over_bound": 2, "fees": 0, "p99_wait_h": 2}


def sweep_markdown(payload: Mapping[str, Any], command: str, wall_s: float,
                   plots: Sequence[str], code: str = "") -> str:
    points = payload["points"]
    lines = [f"# Load sweep: {payload['scenario']} on {payload['cluster']}, "
             f"{payload['mode']} mode", "",
             f"Command (run in {wall_s / 60:.1f} min here{', code ' + code if code else ''}):",
             "", "```", command, "```", "",
             "**Offered load** ρ = D / (C · T): D the trace's GPU-time demand in reference-GPU "
             "seconds (Σ GPUs × recorded run time), C the cluster's capacity in reference-GPU "
             "equivalents (each GPU type worth the harmonic mean of its speeds over the "
             "trace's job-family mix), T the span from the first to the last submission "
             "(`offered_load`, slurm_rl/training/sweep.py, gives the maths). It counts no "
             "queueing, spreading or fluctuation, so a cluster fills up below ρ = 1.", "",
             "**How each load was reached**: by scaling every node group of the cluster by "
             "one factor (original load / target), the GPU-type mix kept: each group's node "
             "count the floor or the ceiling of its exact share, whichever brings the capacity "
             "nearest the target (largest remainder first), never below 1 (`scaled_counts`); "
             "the trace and its arrival times are as recorded. Rounding makes the achieved "
             "load differ a little from the target: both are below.", "",
             f"**Figures**: {_replicas(payload)}. **Lower bound** of the avg JCT: "
             "every job starting at submit on the fastest GPUs it can use, alone, on healthy "
             "machines (no queueing, capacity ignored; `ScheduleMetrics.jct_lower_bound_s`). "
             "An ordering's line takes its best placement (lowest mean JCT) at each load.", "",
             "| target load | achieved | scale | GPUs | nodes per group (original → scaled) | "
             "jobs measured | jobs that no longer fit |", "|---|---|---|---|---|---|---|"]
    for p in points:
        groups = ", ".join(f"{k} {a}→{b}" for k, (a, b) in p["node_groups"].items())
        lines.append(f"| {p['target_load']:g} | {p['achieved_load']:.3f} | "
                     f"{p['scale_factor']:.3f} | {p['gpus']} | {groups} | "
                     f"{p['measured_jobs']:,} | {p['unschedulable_jobs']:,} |")
    for p in points:
        if p.get("unequal_jobs"):
            lines += ["", f"**Not comparable at ρ {p['target_load']:g}**: the policies did not "
                      "all finish the same jobs (measured per replica, then unfinished): "
                      + "; ".join(f"{k} {v}" for k, v in p["unequal_jobs"].items())]
    lines += ["", *_verdict_table(points), ""]
    lines += [f"![{name}]({name})" for name in plots] + [""]
    for metric, title in METRICS:
        lines += [f"## {title}", "", "| policy | " + " | ".join(
            f"ρ {p['target_load']:g}" for p in points) + " |",
            "|---|" + "---|" * len(points)]
        for line in points[0]["lines"]:
            cells = [f"{_iv(p['policies'][p['lines'][line]][metric], _DIGITS[metric])}"
                     f"{_placement(line, p['lines'][line])}" for p in points]
            lines.append(f"| {line} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Every policy at every load", "",
              "Avg JCT h and p99 queue wait h, mean [95 % interval]; sorted by the mean JCT "
              "at each load.", ""]
    for p in points:
        lines += [f"### ρ {p['target_load']:g} (achieved {p['achieved_load']:.3f})", "",
                  "| policy | avg JCT h | JCT / bound | fees | p99 wait h |",
                  "|---|---|---|---|---|"]
        for name, row in sorted(p["policies"].items(),
                                key=lambda kv: (kv[1]["avg_jct_h"]["mean"], kv[0])):
            lines.append(f"| {name} | " + " | ".join(
                _iv(row[m], _DIGITS[m]) for m, _ in METRICS) + " |")
        lines.append("")
    return "\n".join(lines)


def _replicas(payload: Mapping[str, Any]) -> str:
    seeds = ", ".join(map(str, payload["fluctuation_seeds"]))
    if payload["replicas"] < 2:
        return f"one replica (machine-fluctuation seed {seeds}): no interval"
    return (f"means over {payload['replicas']} replicas (machine-fluctuation seeds {seeds}) "
            "with the 95 % Student-t interval of the mean in brackets")


def _placement(line: str, policy: str) -> str:
    return f" ({policy.split('+', 1)[1]})" if policy != line and "+" in policy else ""


def _verdict_table(points: Sequence[Mapping[str, Any]]) -> list[str]:
    if all(p["verdict"] is None for p in points):
        return ["No dual agent in this sweep: no verdict."]
    rows = ["The issue's criteria, means over replicas: the dual agent against the best "
            "realisable baseline (any realisable ordering with any placement: the lowest mean "
            "JCT among those this sweep replayed, which `--orderings` and `--placements` may "
            "have cut short); gap closed = (baseline − agent) / (baseline − best SJF-oracle "
            "policy), "
            f"needed ≥ {GAP_TARGET:.0%} from load {GAP_FROM_LOAD:g}; p99 wait at most "
            f"{WAIT_FACTOR:g}× the baseline's.", "",
            "| load | best realisable baseline | its JCT h | dual JCT h | SJF-oracle JCT h | "
            "gap closed | fees (baseline / dual) | p99 wait h (baseline / dual) | held |",
            "|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        v = p["verdict"]
        if v is None:
            rows.append(f"| {p['target_load']:g} | — | | | | | | | no agent |")
            continue
        # "—": no SJF-oracle policy was replayed (--orderings left it out)
        oracle = (f'{p["policies"][v["oracle"]]["avg_jct_h"]["mean"]:.2f}' if v["oracle"]
                  else "—")
        gap = "—" if v["gap_closed"] is None else f"{100 * v['gap_closed']:.0f} %"
        failed = [k for k, ok in v["checks"].items() if not ok]
        held = "yes" if v["held"] else "no (" + ", ".join(failed) + ")"
        a, b = v["agent"], v["baseline"]
        rows.append(f"| {p['target_load']:g} | {v['best_baseline']} | {b['avg_jct_h']:.2f} | "
                    f"{a['avg_jct_h']:.2f} | {oracle} | {gap} | {b['fees']:,.0f} / "
                    f"{a['fees']:,.0f} | {b['p99_wait_h']:.2f} / {a['p99_wait_h']:.2f} | "
                    f"{held} |")
    return rows


def write_sweep(runs: SweepRuns, original: Cluster, directory: Path, command: str,
                wall_s: float, code: str = "") -> Path:
    """``sweep.json``, the plots and ``sweep.md`` in ``directory``; the markdown's path."""
    from slurm_rl.training.sweep_plots import write_plots

    counts = {prefix: len(nodes) for prefix, nodes in node_groups(original).items()}
    payload = sweep_payload(runs, counts)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sweep.json").write_text(json.dumps(payload, indent=2) + "\n")
    plots = write_plots(payload, directory)
    path = directory / "sweep.md"
    path.write_text(sweep_markdown(payload, command, wall_s, plots, code) + "\n"
                    + timing_markdown(runs, wall_s))
    return path


def timing_markdown(runs: SweepRuns, wall_s: float) -> str:
    """Where the time went: each replay's CPU time (one process each) by load and by policy;
    on a shared machine CPU time, not wall time, says what a dedicated one would need."""
    flat = [(load, p, r) for load, by in runs.runs.items() for p, rs in by.items() for r in rs]
    cpu = max(sum(r.cpu_s for _, _, r in flat), 1e-9)
    by_load = {load: sum(r.cpu_s for lo, _, r in flat if lo == load) for load in runs.runs}
    by_policy = {p: sum(r.cpu_s for _, q, r in flat if q == p) for p in runs.policies}
    lines = ["## Time", "",
             f"{len(flat)} replays: {cpu / 60:.1f} CPU-minutes in all (each replay in one "
             f"process; {sum(r.wall_s for _, _, r in flat) / 60:.1f} replay-minutes of wall "
             f"time), {wall_s / 60:.1f} min of wall time for the command. Measured on whatever "
             "else the machine ran meanwhile.", "",
             "| load | CPU-minutes | share |", "|---|---|---|"]
    lines += [f"| {load:g} | {s / 60:.2f} | {s / cpu:.0%} |" for load, s in by_load.items()]
    lines += ["", "| policy | CPU-minutes over all loads and replicas | share |",
              "|---|---|---|"]
    lines += [f"| {p} | {s / 60:.2f} | {s / cpu:.0%} |"
              for p, s in sorted(by_policy.items(), key=lambda kv: (-kv[1], kv[0]))]
    return "\n".join([*lines, ""])
