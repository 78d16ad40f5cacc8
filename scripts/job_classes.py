"""Where a policy wins or loses avg JCT against another, job class by job class. An analysis.

Replays the named policies on one window (as ``slurm-rl simulate`` builds it: the same
``--window``, ``--cluster``, ``--load`` and ``--dispatch``; each replica under its own machine-
fluctuation seed) and splits every policy's avg JCT by the jobs' GPU count and time limit:
per class, jobs per replica, mean queue wait, mean run time, the class's **contribution** (its
summed JCT over all jobs measured, so the classes of a policy add up to its avg JCT) and the
share of the class's jobs that started on each GPU type. Training data only (September–
November); the held-out sets are read once per shipped candidate, never to analyse.
docs/training-log/sessions-48.md has the tables it was written for. Example::

    python scripts/job_classes.py --window 2017-10-01:2017-10-15 --load 1.0 --dispatch \\
        --policies sjf-limit+fastest-gpu,rl+rl

A learned name (``rl+rl``) runs ``policies/default``; ``--bundle B`` runs bundle B as
``dual`` instead.
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from rich.console import Console
from rich.table import Table

from slurm_rl.cli.main import simulate
from slurm_rl.cli.simulate import build_scenario, ranking_rules
from slurm_rl.core import Cluster
from slurm_rl.fairness import RankingRules
from slurm_rl.offered_load import load_points
from slurm_rl.simulator.outcomes import JobOutcome
from slurm_rl.training.evaluate import PolicySpec, replay_replicas

HOUR = 3600.0
GPU_CLASSES: tuple[tuple[int, int | None, str], ...] = (
    (1, 1, "1"), (2, 4, "2-4"), (5, 8, "5-8"), (9, None, ">8"))
LIMIT_CLASSES: tuple[tuple[float, float | None, str], ...] = (
    (0.0, 4.0, "<4 h"), (4.0, 24.0, "4-24 h"), (24.0, None, ">=24 h"))
ALL_LIMITS = "any"


@dataclass(frozen=True)
class ClassFigures:
    """One policy's jobs of one class, over every replica."""

    policy: str
    gpus: str
    limit: str
    jobs_per_replica: float
    wait_h: float
    run_h: float
    contribution_h: float
    gpu_types: tuple[tuple[str, float], ...]  # (type, share of the class's jobs), largest first


def gpu_class(gpus: int) -> str:
    return next(label for low, high, label in GPU_CLASSES if gpus >= low and
                (high is None or gpus <= high))


def limit_class(limit_s: float | None) -> str:
    """A job without a limit counts as ``>=24 h``."""
    hours = float("inf") if limit_s is None else limit_s / HOUR
    return next(label for low, high, label in LIMIT_CLASSES if hours >= low and
                (high is None or hours < high))


def job_class(outcome: JobOutcome, by_limit: bool = True) -> tuple[str, str]:
    limit = limit_class(outcome.job.time_limit) if by_limit else ALL_LIMITS
    return gpu_class(outcome.job.num_gpus), limit


def class_figures(policy: str, runs: Sequence[Iterable[JobOutcome]], cluster: Cluster,
                  by_limit: bool = True) -> list[ClassFigures]:
    """``runs``: the policy's outcomes, one collection per replica; without ``by_limit``
    by GPU count alone."""
    node_type = {node.name: node.gpu_type for node in cluster.nodes}
    groups: dict[tuple[str, str], list[JobOutcome]] = collections.defaultdict(list)
    total = 0
    for outcomes in runs:
        for outcome in outcomes:
            groups[job_class(outcome, by_limit)].append(outcome)
            total += 1
    figures = []
    limits = [label for _, _, label in LIMIT_CLASSES] if by_limit else [ALL_LIMITS]
    order = [(g, lim) for _, _, g in GPU_CLASSES for lim in limits]
    for key in (k for k in order if k in groups):
        members = groups[key]
        types = collections.Counter(node_type.get(o.nodes[0], "?") if o.nodes else "?"
                                    for o in members)
        figures.append(ClassFigures(
            policy, key[0], key[1], len(members) / max(len(runs), 1),
            float(np.mean([o.queueing_delay for o in members])) / HOUR,
            float(np.mean([o.runtime for o in members])) / HOUR,
            sum(o.jct for o in members) / total / HOUR,
            tuple((t, n / len(members)) for t, n in types.most_common())))
    return figures


def render(figures: Sequence[ClassFigures], console: Console) -> None:
    table = Table(title="avg JCT by job class (contribution: the class's summed JCT / all jobs)")
    for column in ("policy", "GPUs", "limit", "jobs/replica", "wait h", "run h",
                   "contribution h", "started on"):
        table.add_column(column)
    for f in figures:
        shares = " ".join(f"{t} {s:.0%}" for t, s in f.gpu_types[:4])
        table.add_row(f.policy, f.gpus, f.limit, f"{f.jobs_per_replica:,.0f}", f"{f.wait_h:.2f}",
                      f"{f.run_h:.2f}", f"{f.contribution_h:.3f}", shares)
    console.print(table)


def _specs(policies: Sequence[str], bundle: str | None,
           rules: RankingRules | None) -> list[PolicySpec]:
    specs = [PolicySpec(name, baseline=name, rules=rules) for name in policies]
    if bundle is not None:
        specs.append(PolicySpec("dual", bundle=bundle, rules=rules))
    return specs


def main(argv: Sequence[str] | None = None) -> Mapping[str, list[ClassFigures]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trace", default="philly")
    parser.add_argument("--window", help="as simulate's --window (default: the trace's)")
    parser.add_argument("--days", type=float, help="as simulate's --days")
    parser.add_argument("--cluster", default="philly-hetero")
    parser.add_argument("--load", type=float)
    parser.add_argument("--dispatch", action="store_true")
    parser.add_argument("--policies", default="sjf-limit+fastest-gpu,rl+rl")
    parser.add_argument("--bundle", help="a policy bundle, replayed as 'dual'")
    parser.add_argument("--replicas", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--by-gpus-only", action="store_true",
                        help="split by GPU count alone, not also by time limit")
    args = parser.parse_args(argv)
    sim_argv = ["--trace", args.trace, "--cluster", args.cluster]
    sim_argv += ["--window", args.window] if args.window else []
    sim_argv += ["--days", str(args.days)] if args.days is not None else []
    sim_argv += ["--dispatch"] if args.dispatch else []
    options = simulate.make_context("simulate", sim_argv).params
    console = Console(width=150)  # one line a row, also in a log file
    scenario = build_scenario(options)
    if args.load is not None:  # the cluster scaled as simulate's --load scales it
        point = load_points(scenario, [args.load])[0]
        scenario = point.scenario
        console.print(f"offered load {point.achieved:.2f} (asked {args.load:g}): "
                      f"{len(scenario.cluster.nodes)} nodes")
    names = [name for name in args.policies.split(",") if name]
    specs = _specs(names, args.bundle, ranking_rules(options))
    replicas = [scenario.replica(k) for k in range(args.replicas)]
    runs = replay_replicas(replicas, specs, args.workers)
    figures: dict[str, list[ClassFigures]] = {}
    for i, spec in enumerate(specs):
        per_replica = [runs[k][i].outcomes for k in range(len(replicas))]
        figures[spec.label] = class_figures(spec.label, per_replica, scenario.cluster,
                                            by_limit=not args.by_gpus_only)
        jct = np.mean([runs[k][i].metrics.avg_jct_s for k in range(len(replicas))]) / HOUR
        console.print(f"{spec.label}: avg JCT {jct:.3f} h over {len(replicas)} replicas")
    render([f for label in figures for f in figures[label]], console)
    return figures


if __name__ == "__main__":
    main()
