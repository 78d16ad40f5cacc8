"""A candidate bundle on the eight training points, judged by session 48's ship rule. A gate.

The points (docs/training-log/sessions-47.md): four Philly windows of the training months —
the validation week Sep 24 – Oct 1, Oct 1–15, Nov 1–15 and the month of September — each on
philly-hetero scaled to offered load 0.85 and 1.0, dispatch on, no pace readings (the
daemon's world), 5 machine-fluctuation replicas. Every point is built as ``slurm-rl simulate
--trace philly --window W --cluster philly-hetero --load L --dispatch`` builds it and every
policy replayed as ``slurm-rl evaluate`` replays it, so a bundle's figures here equal those
commands' to the digit. Training data only: the held-out sets are never read here.

The rule (pre-registered in docs/training-log/sessions-48.md), for a candidate against the
baseline (shortest-limit-first + fastest-GPU) and the incumbent (the shipped bundle), on the
means over the replicas:

* its avg JCT summed over the points is below the baseline's and the incumbent's;
* its fees are at or below the baseline's at every point;
* its p99 queue wait is at most 1.5× the baseline's, or at most 1 h above it (whichever is
  larger), at every point;
* it is at or below the baseline's avg JCT at no fewer points than the incumbent.

Figures are written as JSON (``--json``) and read back with ``--with`` so that the baseline
and the incumbent need not be replayed again for each candidate. Example::

    python scripts/training_points.py --policies sjf-limit+fastest-gpu \\
        --bundle shipped=policies/default --json /tmp/base.json
    python scripts/training_points.py --bundle cand=B --with /tmp/base.json \\
        --judge cand --baseline sjf-limit+fastest-gpu --incumbent shipped
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from slurm_rl.cli.main import simulate
from slurm_rl.cli.simulate import build_scenario, ranking_rules
from slurm_rl.errors import InputError
from slurm_rl.training.evaluate import PolicySpec
from slurm_rl.training.sweep import RunFigures, parse_loads, run_sweep

WINDOWS: tuple[tuple[str, str], ...] = (
    ("valweek", "2017-09-24:2017-10-01"), ("october", "2017-10-01:2017-10-15"),
    ("november", "2017-11-01:2017-11-15"), ("september", "2017-09-01:2017-10-01"))
WHOLE_TRACE = "all"  # a window name: the whole trace (a synthetic one in the tests)
LOADS = (0.85, 1.0)
WAIT_FACTOR, WAIT_FLOOR_H = 1.5, 1.0  # p99 wait: at most 1.5x the baseline's or 1 h above it

#: figures[point][policy] = one RunFigures per replica; a point is "window@load"
Figures = dict[str, dict[str, list[RunFigures]]]


@dataclass(frozen=True)
class Verdict:
    condition: str
    held: bool
    detail: str


def point_name(window: str, load: float) -> str:
    return f"{window}@{load:g}"


def replay_points(source: Sequence[str], windows: Sequence[tuple[str, str | None]],
                  loads: Sequence[float], specs: Sequence[PolicySpec], replicas: int,
                  workers: int, console: Console) -> Figures:
    """Every spec on every point, replicas as ``simulate``'s (seeds 2017, 2018, ...);
    ``source`` is simulate's arguments naming the trace and the cluster."""
    figures: Figures = {}
    for window, span in windows:
        argv = [*source, "--dispatch", *(["--window", span] if span else [])]
        options = simulate.make_context("simulate", argv).params
        rules = ranking_rules(options)
        ruled = [replace(spec, rules=rules) for spec in specs]
        sweep = run_sweep(build_scenario(options), loads, ruled, replicas, workers)
        for load, by_policy in sweep.runs.items():
            name = point_name(window, load)
            figures[name] = {label: list(runs) for label, runs in by_policy.items()}
            console.print(f"{name}: " + "  ".join(
                f"{label} {mean(runs, 'avg_jct_h'):.3f} h" for label, runs in by_policy.items()))
    return figures


def mean(runs: Sequence[RunFigures], metric: str) -> float:
    return float(np.mean([getattr(r, metric) for r in runs]))


def judge(figures: Figures, candidate: str, baseline: str, incumbent: str) -> list[Verdict]:
    """Session 48's rule, condition by condition (each needs every point to hold both)."""
    points = [p for p in figures if candidate in figures[p] and baseline in figures[p]]
    jct = {label: {p: mean(figures[p][label], "avg_jct_h") for p in points}
           for label in (candidate, baseline, incumbent)
           if all(label in figures[p] for p in points)}
    missing = {candidate, baseline, incumbent} - set(jct)
    if missing or not points:
        raise SystemExit(f"--judge: no figures for {', '.join(sorted(missing)) or 'any point'}"
                         " at every point (replay them or read them --with)")
    sums = {label: sum(by.values()) for label, by in jct.items()}
    below = {label: sum(jct[label][p] <= jct[baseline][p] for p in points)
             for label in (candidate, incumbent)}
    dearer = [p for p in points if mean(figures[p][candidate], "fees")
              > mean(figures[p][baseline], "fees")]
    waits = [p for p in points if mean(figures[p][candidate], "p99_wait_h") > max(
        WAIT_FACTOR * mean(figures[p][baseline], "p99_wait_h"),
        mean(figures[p][baseline], "p99_wait_h") + WAIT_FLOOR_H)]
    return [
        Verdict("summed avg JCT below the baseline's and the incumbent's",
                sums[candidate] < min(sums[baseline], sums[incumbent]),
                " / ".join(f"{label} {sums[label]:.3f}" for label in sums)),
        Verdict("fees at or below the baseline's at every point", not dearer,
                "dearer at " + ", ".join(dearer) if dearer else "everywhere"),
        Verdict("p99 wait within max(1.5x, +1 h) of the baseline's at every point", not waits,
                "over at " + ", ".join(waits) if waits else "everywhere"),
        Verdict("at or below the baseline at no fewer points than the incumbent",
                below[candidate] >= below[incumbent],
                f"{below[candidate]} against {below[incumbent]} of {len(points)}"),
    ]


def render(figures: Figures, console: Console) -> None:
    table = Table(title="mean over replicas: avg JCT h / fees $ / p99 wait h")
    labels = list(dict.fromkeys(label for by in figures.values() for label in by))
    for column in ("point", *labels):
        table.add_column(column)
    for point, by in figures.items():
        table.add_row(point, *(
            f"{mean(by[label], 'avg_jct_h'):.3f} / {mean(by[label], 'fees'):,.0f} / "
            f"{mean(by[label], 'p99_wait_h'):.2f}" if label in by else "" for label in labels))
    sums = [f"{sum(mean(figures[p][label], 'avg_jct_h') for p in figures):.3f}"
            if all(label in figures[p] for p in figures) else "" for label in labels]
    table.add_row("sum of avg JCT", *sums)
    console.print(table)


def read_figures(path: Path) -> Figures:
    try:
        raw = json.loads(path.read_text())
        return {point: {label: [RunFigures(**run) for run in runs] for label, runs in by.items()}
                for point, by in raw.items()}
    except (OSError, ValueError, TypeError, AttributeError) as err:
        raise SystemExit(f"--with {path}: not a figures file written by --json ({err})"
                         ) from None


def merge(into: Figures, more: Mapping[str, Mapping[str, list[RunFigures]]]) -> None:
    for point, by in more.items():
        into.setdefault(point, {}).update(by)


def _specs(policies: str, bundles: Sequence[str]) -> list[PolicySpec]:
    specs = [PolicySpec(name, baseline=name) for name in policies.split(",") if name]
    for entry in bundles:
        label, sep, path = entry.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"--bundle {entry!r}: give LABEL=PATH (e.g. cand=/tmp/bundle)")
        specs.append(PolicySpec(label, bundle=path))
    return specs


def main(argv: Sequence[str] | None = None) -> Figures:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policies", default="", help="baselines, as simulate's --policies")
    parser.add_argument("--bundle", action="append", default=[], metavar="LABEL=PATH",
                        help="a policy bundle replayed as the dual agent (repeatable)")
    parser.add_argument("--with", dest="earlier", action="append", default=[], type=Path,
                        help="figures an earlier --json wrote (repeatable)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--windows", default=",".join(w for w, _ in WINDOWS))
    parser.add_argument("--loads", default=",".join(f"{load:g}" for load in LOADS))
    parser.add_argument("--trace", default="philly")
    parser.add_argument("--cluster", default="philly-hetero")
    parser.add_argument("--days", type=float, help="as simulate's --days (a synthetic trace)")
    parser.add_argument("--replicas", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--judge", metavar="LABEL")
    parser.add_argument("--baseline", default="sjf-limit+fastest-gpu")
    parser.add_argument("--incumbent", default="shipped")
    args = parser.parse_args(argv)
    console = Console(width=160)
    known: dict[str, str | None] = {**dict(WINDOWS), WHOLE_TRACE: None}
    names = [w for w in args.windows.split(",") if w]
    if not names or any(w not in known for w in names):
        raise SystemExit(f"--windows: each one of {', '.join(known)}")
    windows = [(w, known[w]) for w in names]
    source = ["--trace", args.trace, "--cluster", args.cluster,
              *(["--days", str(args.days)] if args.days is not None else [])]
    try:
        loads = parse_loads(args.loads)
    except InputError as err:
        raise SystemExit(f"--loads: {err}") from None
    figures: Figures = {}
    for path in args.earlier:
        merge(figures, read_figures(path))
    specs = _specs(args.policies, args.bundle)
    if specs:
        merge(figures, replay_points(source, windows, loads, specs, args.replicas,
                                     args.workers, console))
    if args.json:
        args.json.write_text(json.dumps({p: {label: [asdict(r) for r in runs]
                                             for label, runs in by.items()}
                                         for p, by in figures.items()}, indent=1))
    render(figures, console)
    if args.judge:
        verdicts = judge(figures, args.judge, args.baseline, args.incumbent)
        for v in verdicts:
            console.print(f"{'held' if v.held else 'FAILED'}: {v.condition} ({v.detail})")
        console.print(f"{args.judge}: {'passes' if all(v.held for v in verdicts) else 'fails'}"
                      " session 48's rule")
    return figures


if __name__ == "__main__":
    main()
