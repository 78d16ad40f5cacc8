"""Comparison tables and reports (Markdown + PNG plots) for replays of one scenario."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from slurm_rl.metrics import fees_by_gpu_type  # noqa: E402
from slurm_rl.scenario import ReplayResult, Scenario  # noqa: E402

HOUR = 3600.0
COLUMNS = (
    ("policy", "policy"),
    ("avg JCT h", "avg_jct_s"),
    ("p50 h", "p50_jct_s"),
    ("p95 h", "p95_jct_s"),
    ("p99 h", "p99_jct_s"),
    ("queue h", "avg_queueing_s"),
    ("slow-down", "avg_bounded_slowdown"),
    ("makespan h", "makespan_s"),
    ("GPU util", "gpu_utilisation"),
    ("fees $", "total_fees"),
    ("JCT/LB", "lb_ratio"),
    ("moves", "migrations"),
)


def result_rows(results: Sequence[ReplayResult]) -> list[dict[str, str]]:
    return [_row(r) for r in results]


def _hours(seconds: float) -> str:
    return f"{seconds / HOUR:.2f}"


def _ratio(value: float, bound: float) -> str:
    """JCT over its lower bound; "–" when the bound is 0 (every job ran for no time), where
    the ratio measures nothing and a division would crash the report."""
    return f"{value / bound:.2f}" if bound > 0 else "–"


def _row(result: ReplayResult) -> dict[str, str]:
    m = result.metrics
    return {
        "policy": result.policy_id,
        "avg_jct_s": _hours(m.avg_jct_s),
        "p50_jct_s": _hours(m.p50_jct_s),
        "p95_jct_s": _hours(m.p95_jct_s),
        "p99_jct_s": _hours(m.p99_jct_s),
        "avg_queueing_s": _hours(m.avg_queueing_s),
        "avg_bounded_slowdown": f"{m.avg_bounded_slowdown:.2f}",
        "makespan_s": _hours(m.makespan_s),
        "gpu_utilisation": f"{m.gpu_utilisation:.1%}",
        "total_fees": f"{m.total_fees:,.0f}",
        "lb_ratio": _ratio(m.avg_jct_s, m.jct_lower_bound_s),
        "migrations": f"{m.migrations:,}",
    }


CONSOLE_COLUMNS = tuple(c for c in COLUMNS if c[1] != "makespan_s")


def print_table(results: Sequence[ReplayResult], scenario: Scenario, console: Console) -> None:
    table = Table(title=scenario_title(scenario, results), title_justify="left")
    for header, _ in CONSOLE_COLUMNS:
        if header == "policy":
            table.add_column(header, no_wrap=True)
        else:
            table.add_column(header, justify="right", max_width=9)
    for row in result_rows(results):
        table.add_row(*(row[key] for _, key in CONSOLE_COLUMNS))
    console.print(table)
    lower_bound = results[0].metrics.jct_lower_bound_s / HOUR if results else 0.0
    console.print(f"avg JCT lower bound: {lower_bound:.2f} h (every job starts at submit on the "
                  "fastest GPUs it can use)")


def scenario_title(scenario: Scenario, results: Sequence[ReplayResult]) -> str:
    jobs = results[0].metrics.jobs if results else 0
    label = " (synthetic)" if scenario.trace.synthetic else ""
    share = scenario.checkpointable
    moves = f", {share:.0%} of jobs checkpointable (may be moved)" if share else ""
    left_out = results[0].unschedulable_jobs if results else 0
    # Said in the title, not only in the JSON: a reader must not take N of M jobs for all.
    dropped = (f" ({left_out} more can never fit {scenario.cluster.name} and are left out)"
               if left_out else "")
    return (f"{scenario.trace.name}{label} on {scenario.cluster.name}: {jobs} jobs{dropped}, "
            f"{scenario.sim.mode} mode{moves}")


def as_json(results: Sequence[ReplayResult], scenario: Scenario) -> str:
    payload = {
        "scenario": {
            "trace": scenario.trace.name,
            "synthetic": scenario.trace.synthetic,
            "trace_source": scenario.trace.source,
            "cluster": scenario.cluster.name,
            "mode": scenario.sim.mode,
            "slurm_scheduler": scenario.sim.slurm_scheduler,
            "performance": scenario.performance,
            "fluctuation": scenario.fluctuation,
            "checkpointable": scenario.checkpointable,
            "restart_overhead_s": scenario.sim.restart_overhead_s,
        },
        "results": [
            {"policy": r.policy_id, **r.metrics.as_dict(), "wall_s": r.wall_s,
             "cycles": r.cycles, "unschedulable_jobs": r.unschedulable_jobs,
             "rejected_actions": r.rejected_actions, "unfinished_jobs": r.unfinished_jobs}
            for r in results
        ],
    }
    return json.dumps(payload, indent=2)


def write_report(results: Sequence[ReplayResult], scenario: Scenario, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    plots = {
        "jct_cdf.png": _plot_jct_cdf,
        "queue_length.png": _plot_queue,
        "gpu_utilisation.png": _plot_utilisation,
        "fees_by_gpu_type.png": _plot_fees,
    }
    for filename, plot in plots.items():
        figure = plot(results, scenario)
        figure.savefig(directory / filename, dpi=110, bbox_inches="tight")
        plt.close(figure)
    (directory / "results.json").write_text(as_json(results, scenario) + "\n")
    path = directory / "report.md"
    path.write_text(_markdown(results, scenario, list(plots)))
    return path


def _markdown(results: Sequence[ReplayResult], scenario: Scenario, plots: list[str]) -> str:
    lines = [f"# {scenario_title(scenario, results)}", "", f"Trace: {scenario.trace.source}", ""]
    lines += ["| " + " | ".join(h for h, _ in COLUMNS) + " |",
              "|" + "---|" * len(COLUMNS)]
    for row in result_rows(results):
        lines.append("| " + " | ".join(row[key] for _, key in COLUMNS) + " |")
    lower_bound = results[0].metrics.jct_lower_bound_s / HOUR if results else 0.0
    lines += ["", f"avg JCT lower bound: **{lower_bound:.2f} h** — every job starting at submit "
              "on the fastest GPUs it can use, alone, consolidated, on healthy machines. "
              "JCT/LB is each policy's avg JCT over it.", ""]
    lines += [f"![{name}]({name})" for name in plots]
    return "\n".join(lines) + "\n"


def _plot_jct_cdf(results: Sequence[ReplayResult], scenario: Scenario) -> Figure:
    figure, axis = plt.subplots(figsize=(7, 4.5))
    longest = 0.0
    for result in results:
        jct = np.sort([o.jct / HOUR for o in result.outcomes])
        axis.plot(jct, np.arange(1, len(jct) + 1) / len(jct), label=result.policy_id)
        longest = max(longest, float(jct[-1]) if len(jct) else 0.0)
    # A log axis has no place for JCTs that are all 0 (a trace of zero durations): linear then
    scale = "log" if longest > 0 else "linear"
    axis.set(xscale=scale, xlabel="JCT (hours)", ylabel="fraction of jobs", title="JCT CDF")
    axis.legend(fontsize=7)
    return figure


def _plot_queue(results: Sequence[ReplayResult], scenario: Scenario) -> Figure:
    figure, axis = plt.subplots(figsize=(8, 4))
    for result in results:
        t = _days(result.timeline.times)
        axis.step(t, result.timeline.queue_length, where="post", label=result.policy_id, lw=0.8)
    axis.set(xlabel="days", ylabel="pending jobs", title="Queue length")
    axis.legend(fontsize=7)
    return figure


def _plot_utilisation(results: Sequence[ReplayResult], scenario: Scenario) -> Figure:
    figure, axis = plt.subplots(figsize=(8, 4))
    total = scenario.cluster.total_gpus
    for result in results:
        t = _days(result.timeline.times)
        busy = np.asarray(result.timeline.busy_gpus) / total
        axis.step(t, busy, where="post", label=result.policy_id, lw=0.8)
    axis.set(xlabel="days", ylabel="busy GPUs (share)", title="GPU utilisation", ylim=(0, 1.05))
    axis.legend(fontsize=7)
    return figure


def _plot_fees(results: Sequence[ReplayResult], scenario: Scenario) -> Figure:
    prices = {n.gpu_type: n.price_per_gpu_hour for n in scenario.cluster.nodes}
    types = sorted(prices)
    figure, axis = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(1, len(results))
    for k, result in enumerate(results):
        fees = fees_by_gpu_type(result.outcomes, prices)
        xs = np.arange(len(types)) + k * width
        axis.bar(xs, [fees.get(t, 0.0) for t in types], width, label=result.policy_id)
    axis.set_xticks(np.arange(len(types)) + 0.4 - width / 2, types)
    axis.set(ylabel="fees ($)", title="Fees by GPU type")
    axis.legend(fontsize=7)
    return figure


def _days(times: Sequence[float]) -> np.ndarray:
    array = np.asarray(times, dtype=float)
    return (array - array[0]) / 86400.0 if len(array) else array
