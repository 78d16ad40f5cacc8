"""Schedule quality metrics over a replay's job outcomes.

* JCT (job completion time) = end − submit; reported as mean, p50, p95, p99.
* queueing delay = start − submit (mean).
* bounded slowdown = max(1, JCT / max(runtime, τ)), τ = 10 s (mean).
* makespan = last end − first submit.
* GPU utilisation = busy GPUs / total GPUs, averaged over the submit window (first to last
  submit of the measured jobs) when a timeline is given — the cluster's load while work was
  arriving; otherwise the measured jobs' GPU-seconds / (total GPUs × makespan).
* fees = Σ GPUs × run time × price of the GPU type per hour.
* JCT lower bound = mean over jobs of the run time on the fastest GPUs the job can use,
  alone, consolidated, on healthy machines, starting at submit: no schedule can beat it.
* migrations = how many times running jobs were requeued and restarted elsewhere.
* fairness between users (slurm_rl/fairness.py): each user's mean queueing delay over the
  measured jobs, then Jain's index J = (Σx)² / (n·Σx²) and the wait ratio max(x) / mean(x)
  over those means (1 and 1 when even, for one user, or when nobody waited; a trace without
  user names is one user). ``users`` counts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from slurm_rl.fairness import outcome_fairness
from slurm_rl.simulator.outcomes import JobOutcome, Timeline

BOUNDED_SLOWDOWN_TAU_S = 10.0


@dataclass(frozen=True)
class ScheduleMetrics:
    jobs: int
    avg_jct_s: float
    p50_jct_s: float
    p95_jct_s: float
    p99_jct_s: float
    avg_queueing_s: float
    avg_bounded_slowdown: float
    makespan_s: float
    gpu_utilisation: float
    total_fees: float
    gpu_hours: float
    jct_lower_bound_s: float
    migrations: int = 0
    users: int = 1
    fairness_jain_index: float = 1.0
    fairness_wait_ratio: float = 1.0

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def compute_metrics(
    outcomes: Sequence[JobOutcome], total_gpus: int, timeline: Timeline | None = None
) -> ScheduleMetrics:
    if not outcomes:
        raise ValueError("no finished jobs to measure")
    jct = np.array([o.jct for o in outcomes])
    runtime = np.array([o.runtime for o in outcomes])
    queueing = np.array([o.queueing_delay for o in outcomes])
    slowdown = np.maximum(1.0, jct / np.maximum(runtime, BOUNDED_SLOWDOWN_TAU_S))
    gpu_seconds = sum(sum(o.gpu_seconds.values()) for o in outcomes)
    first_submit = min(o.job.submit_time for o in outcomes)
    makespan = max(o.end for o in outcomes) - first_submit
    fairness = outcome_fairness((o.job.user, o.queueing_delay) for o in outcomes)
    return ScheduleMetrics(
        jobs=len(outcomes),
        avg_jct_s=float(jct.mean()),
        p50_jct_s=float(np.percentile(jct, 50)),
        p95_jct_s=float(np.percentile(jct, 95)),
        p99_jct_s=float(np.percentile(jct, 99)),
        avg_queueing_s=float(queueing.mean()),
        avg_bounded_slowdown=float(slowdown.mean()),
        makespan_s=float(makespan),
        gpu_utilisation=_utilisation(outcomes, total_gpus, gpu_seconds, makespan, timeline),
        total_fees=float(sum(o.fee for o in outcomes)),
        gpu_hours=float(gpu_seconds / 3600.0),
        jct_lower_bound_s=float(np.mean([o.best_runtime for o in outcomes])),
        migrations=sum(o.restarts for o in outcomes),
        users=fairness.users,
        fairness_jain_index=fairness.jain_index,
        fairness_wait_ratio=fairness.wait_ratio,
    )


def _utilisation(
    outcomes: Sequence[JobOutcome],
    total_gpus: int,
    gpu_seconds: float,
    makespan: float,
    timeline: Timeline | None,
) -> float:
    submits = [o.job.submit_time for o in outcomes]
    start, end = min(submits), max(submits)
    if timeline is None or not timeline.times or end <= start:
        return gpu_seconds / (total_gpus * makespan) if makespan > 0 else 0.0
    return busy_share(timeline, start, end, total_gpus)


def busy_share(timeline: Timeline, start: float, end: float, total_gpus: int) -> float:
    """Time-average of busy GPUs / total over [start, end] from a step-wise timeline."""
    times = np.asarray(timeline.times)
    busy = np.asarray(timeline.busy_gpus, dtype=float)
    edges = np.clip(np.append(times, end), start, end)
    return float(np.sum(busy * np.diff(edges)) / ((end - start) * total_gpus))


def fees_by_gpu_type(outcomes: Sequence[JobOutcome], prices: dict[str, float]) -> dict[str, float]:
    """Fees per GPU type, from the GPU-seconds each job spent on each type."""
    fees: dict[str, float] = {}
    for outcome in outcomes:
        for gpu_type, seconds in outcome.gpu_seconds.items():
            fees[gpu_type] = fees.get(gpu_type, 0.0) + seconds * prices[gpu_type] / 3600.0
    return fees
