"""The load sweep's plots: each metric of :data:`~.sweep_report.METRICS` against the achieved
offered load, one line per policy (an ordering with its best placement at each load, each
agent as itself) and its 95 % interval as a band. PNGs beside ``sweep.md``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

from slurm_rl.agents.names import reference_orderings  # noqa: E402
from slurm_rl.agents.ordering_baselines import AGED_SUFFIX  # noqa: E402
from slurm_rl.training.sweep_report import AGENT, METRICS  # noqa: E402

FILES = {"avg_jct_h": "sweep_avg_jct.png", "jct_over_bound": "sweep_jct_over_bound.png",
         "fees": "sweep_fees.png", "p99_wait_h": "sweep_p99_wait.png"}


def _style(line: str) -> dict[str, Any]:
    """Agents bold and solid, SJF-oracle black and dotted, an aged ordering dashed in its
    base ordering's colour, the other orderings thin and solid."""
    if line == AGENT:
        return {"color": "crimson", "linewidth": 2.6, "linestyle": "-", "zorder": 5}
    if line in reference_orderings():
        return {"color": "black", "linewidth": 1.6, "linestyle": ":", "zorder": 4}
    if "+" not in line and line.endswith(AGED_SUFFIX):
        return {"linewidth": 1.2, "linestyle": "--"}
    return {"linewidth": 1.2, "linestyle": "-"}


# tab10 without its red (the dual agent's crimson) and its grey, then Dark2's.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
           "#17becf", "#1b9e77", "#d95f02", "#7570b3", "#66a61e", "#e6ab02", "#a6761d")


def _colours(lines: Sequence[str]) -> dict[str, str]:
    """One colour per base ordering (shared with its aged twin) and per other agent."""
    bases = list(dict.fromkeys(line.removesuffix(AGED_SUFFIX) for line in lines))
    return {base: PALETTE[i % len(PALETTE)] for i, base in enumerate(bases)}


def _draw(axes: Axes, points: Sequence[Mapping[str, Any]], metric: str) -> None:
    lines = list(points[0]["lines"])
    colours = _colours(lines)
    loads = [p["achieved_load"] for p in points]
    for line in lines:
        rows = [p["policies"][p["lines"][line]][metric] for p in points]
        style = {"color": colours[line.removesuffix(AGED_SUFFIX)], **_style(line)}
        axes.plot(loads, [r["mean"] for r in rows], marker="o", markersize=3, label=line,
                  **style)
        axes.fill_between(loads, [r["low"] for r in rows], [r["high"] for r in rows],
                          color=style["color"], alpha=0.12, linewidth=0)


def write_plots(payload: Mapping[str, Any], directory: Path) -> list[str]:
    """One PNG per metric in ``directory``; their file names."""
    points = payload["points"]
    names = []
    for metric, title in METRICS:
        figure, axes = plt.subplots(figsize=(8.0, 4.8))
        _draw(axes, points, metric)
        axes.set_xlabel("offered load (achieved)")
        axes.set_ylabel(title)
        replicas = payload["replicas"]
        band = "95 % interval" if replicas > 1 else "no interval"
        axes.set_title(f"{title}: {payload['scenario']} on {payload['cluster']}, "
                       f"{replicas} replica{'s' if replicas > 1 else ''}, {band}", fontsize=9)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        figure.savefig(directory / FILES[metric], dpi=110, bbox_inches="tight")
        plt.close(figure)
        names.append(FILES[metric])
    return names
