"""``slurm-rl simulate --replicas N``: every policy on N replicas of the scenario (other
machine-fluctuation and simulator seeds, :meth:`Scenario.replica`), and a table of means.

One replay is one draw of which machines straggle and how speeds drift; on a backlogged window
a single draw can move a policy's avg JCT by 15 %. The table gives each policy's mean over the
replicas with its spread, and in how many replicas it beat the policy with the best mean JCT
among the others, so that a difference can be told from luck.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from slurm_rl.report import as_json, scenario_title, write_report
from slurm_rl.scenario import ReplayResult, Scenario

HOUR = 3600.0


def _jct_h(result: ReplayResult) -> float:
    return result.metrics.avg_jct_s / HOUR


def _fees(result: ReplayResult) -> float:
    return result.metrics.total_fees


def by_policy(per_replica: Sequence[Sequence[ReplayResult]]) -> dict[str, list[ReplayResult]]:
    """Replica-major results regrouped by policy, replicas in order."""
    grouped: dict[str, list[ReplayResult]] = {}
    for results in per_replica:
        for result in results:
            grouped.setdefault(result.policy_id, []).append(result)
    return grouped


def _spread(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def _wins(mine: Sequence[ReplayResult], other: Sequence[ReplayResult]) -> str:
    """Replicas in which ``mine`` had the lower avg JCT, and the lower fees."""
    pairs = list(zip(mine, other, strict=True))
    jct = sum(_jct_h(a) < _jct_h(b) for a, b in pairs)
    fees = sum(_fees(a) < _fees(b) for a, b in pairs)
    return f"{jct}/{len(pairs)} · {fees}/{len(pairs)}"


def _rival(policy: str, grouped: dict[str, list[ReplayResult]]) -> str | None:
    """The other policy with the lowest mean avg JCT."""
    others = [p for p in grouped if p != policy]
    if not others:
        return None
    return min(others, key=lambda p: statistics.fmean(map(_jct_h, grouped[p])))


def print_means(per_replica: Sequence[Sequence[ReplayResult]], scenarios: Sequence[Scenario],
                console: Console) -> None:
    grouped = by_policy(per_replica)
    title = (f"{scenario_title(scenarios[0], per_replica[0])}; mean over {len(scenarios)} "
             "replicas (fluctuation seeds "
             f"{', '.join(str(s.spec.fluctuation.seed) for s in scenarios)})")
    table = Table(title=title, title_justify="left")
    for header in ("policy", "avg JCT h", "± sd", "min–max", "fees $", "± sd", "queue h",
                   "vs best other (JCT · fees wins)"):
        table.add_column(header, justify="left" if header == "policy" else "right")
    for policy, runs in grouped.items():
        jct, fees = [_jct_h(r) for r in runs], [_fees(r) for r in runs]
        queue = statistics.fmean(r.metrics.avg_queueing_s / HOUR for r in runs)
        rival = _rival(policy, grouped)
        versus = f"{rival}: {_wins(runs, grouped[rival])}" if rival else ""
        table.add_row(policy, f"{statistics.fmean(jct):.2f}", f"{_spread(jct):.2f}",
                      f"{min(jct):.2f}–{max(jct):.2f}", f"{statistics.fmean(fees):,.0f}",
                      f"{_spread(fees):,.0f}", f"{queue:.2f}", versus)
    console.print(table)


def replicas_json(per_replica: Sequence[Sequence[ReplayResult]],
                  scenarios: Sequence[Scenario]) -> str:
    payload = [
        {"fluctuation_seed": scenario.spec.fluctuation.seed, "sim_seed": scenario.sim.seed,
         **json.loads(as_json(results, scenario))}
        for results, scenario in zip(per_replica, scenarios, strict=True)
    ]
    means = {
        policy: {"avg_jct_h": statistics.fmean(map(_jct_h, runs)),
                 "total_fees": statistics.fmean(map(_fees, runs))}
        for policy, runs in by_policy(per_replica).items()
    }
    return json.dumps({"replicas": payload, "means": means}, indent=2)


def write_reports(per_replica: Sequence[Sequence[ReplayResult]], scenarios: Sequence[Scenario],
                  report_dir: Path) -> Path:
    """One report per replica under ``report_dir/replica-K``, and the means as JSON."""
    for k, (results, scenario) in enumerate(zip(per_replica, scenarios, strict=True)):
        write_report(results, scenario, report_dir / f"replica-{k}")
    path = report_dir / "replicas.json"
    path.write_text(replicas_json(per_replica, scenarios) + "\n")
    return path
