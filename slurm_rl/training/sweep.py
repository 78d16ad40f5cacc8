"""The load sweep (``slurm-rl evaluate --loads``): one held-out scenario replayed at several
offered loads, every policy on every load and replica.

Each load is the scenario on its cluster scaled to offer it (:mod:`slurm_rl.offered_load`:
the node groups scaled, the GPU-type mix kept; the definition of the offered load); the
figures a sweep reports (mean and 95 % interval over replicas, the verdict per load) are
:mod:`slurm_rl.training.sweep_report`'s, the plots :mod:`slurm_rl.training.sweep_plots`'.
"""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slurm_rl.errors import InputError
from slurm_rl.offered_load import LoadPoint, load_points
from slurm_rl.replay_pool import pool_map
from slurm_rl.scenario import Scenario
from slurm_rl.training.evaluate import PolicySpec, replay_spec

HOUR = 3600.0
#: A load above this is no cluster anyone runs (the queue grows for ever): a typo, refused.
MAX_LOAD = 10.0


def parse_loads(text: str) -> tuple[float, ...]:
    """``--loads 0.5,0.7,0.85,1.0``: finite numbers above 0 (and at most :data:`MAX_LOAD`),
    comma-separated, none twice; in the order given. Anything else is one
    :class:`InputError` naming the bad entry (the command line puts the option's name
    before it)."""
    entries = [part.strip() for part in text.split(",")]
    if not any(entries):
        raise InputError("no load given (give e.g. 0.5,0.7,0.85,1.0)")
    loads: list[float] = []
    for entry in entries:
        try:
            load = float(entry)
        except ValueError:
            raise InputError(f"{entry!r} is not a number (give e.g. 0.5,0.7,0.85,1.0)"
                             ) from None
        if not math.isfinite(load) or not 0.0 < load <= MAX_LOAD:
            raise InputError(f"{entry!r} is not a load: each must be above 0 and at "
                             f"most {MAX_LOAD:g} (1.0: demand equals capacity)")
        if load in loads:
            raise InputError(f"{entry!r} is given twice")
        loads.append(load)
    return tuple(loads)


# ----- replaying ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RunFigures:
    """What a sweep keeps of one replay (a replay's outcomes and timeline are too large to
    keep for thousands of replays): the figures of every metric the sweep reports, and its
    wall time (for the report's account of where the time went)."""

    policy_id: str
    avg_jct_h: float
    jct_lower_bound_h: float
    fees: float
    avg_wait_h: float
    p99_wait_h: float
    jobs: int
    # jobs still unfinished when the replay ended: not measured, so a policy that strands
    # long jobs would look better (the report says so when any policy has some)
    unfinished: int = 0
    # how long the replay took, in wall time and in its process's CPU time (on a shared
    # machine the CPU time is what another machine would need): reported, never in sweep.json
    wall_s: float = 0.0
    cpu_s: float = 0.0


    @property
    def jct_over_bound(self) -> float:
        return self.avg_jct_h / self.jct_lower_bound_h if self.jct_lower_bound_h > 0 else math.inf

    def metric(self, name: str) -> float:
        value: float = getattr(self, name)
        return value


def measure(scenario: Scenario, spec: PolicySpec) -> RunFigures:
    """One replay reduced to its figures (in the worker, so only these travel back)."""
    started = time.process_time()
    result = replay_spec(scenario, spec)
    cpu_s = time.process_time() - started
    waits = [o.queueing_delay for o in result.outcomes]
    metrics = result.metrics
    return RunFigures(spec.label, metrics.avg_jct_s / HOUR, metrics.jct_lower_bound_s / HOUR,
                      metrics.total_fees, metrics.avg_queueing_s / HOUR,
                      float(np.percentile(waits, 99)) / HOUR, metrics.jobs,
                      result.unfinished_jobs, result.wall_s, cpu_s)


@dataclass(frozen=True)
class SweepRuns:
    """Every replay of a sweep: ``runs[load][policy]`` is that policy's figures on each
    replica, in replica order (the same seeds at every load)."""

    points: tuple[LoadPoint, ...]
    replicas: int
    policies: tuple[str, ...]
    runs: Mapping[float, Mapping[str, tuple[RunFigures, ...]]]
    dispatch: bool = False  # the policies ran in dispatch mode (RankingRules.dispatch)


def run_sweep(scenario: Scenario, loads: Sequence[float], specs: Sequence[PolicySpec],
              replicas: int, workers: int, *, progress: bool = False) -> SweepRuns:
    """Every policy on every replica of every load, all in one pool (the slowest replays then
    overlap with the rest)."""
    points = load_points(scenario, loads)
    tasks = [(point.scenario.replica(k), spec)
             for point in points for k in range(replicas) for spec in specs]
    flat = iter(pool_map(measure, tasks, workers, progress=progress))
    runs: dict[float, dict[str, list[RunFigures]]] = {}
    for point in points:
        by_policy = runs.setdefault(point.target, {spec.label: [] for spec in specs})
        for _ in range(replicas):
            for spec in specs:
                by_policy[spec.label].append(next(flat))
    frozen = {load: {p: tuple(r) for p, r in by.items()} for load, by in runs.items()}
    dispatch = any(spec.rules is not None and spec.rules.dispatch for spec in specs)
    return SweepRuns(tuple(points), replicas, tuple(spec.label for spec in specs), frozen,
                     dispatch)


def code_version() -> str:
    """The checkout's commit, and whether ``slurm_rl`` had uncommitted changes: a sweep's
    figures belong to the code it ran (read when the sweep starts, as its workers do)."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True, timeout=30)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--",
                                "slurm_rl"], capture_output=True, text=True, check=True,
                               timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    changed = " with uncommitted changes to slurm_rl" if dirty.stdout.strip() else ""
    return f"{head.stdout.strip()}{changed}"
