"""Fitting the statistics of the synthetic Philly-like workload (``data/philly_stats.json``).

Only September-November 2017 is fitted: December is the held-out evaluation window and must
not leak into anything trained or tuned. ``scripts/fit_philly_stats.py`` runs this on the real
trace and writes the JSON; :mod:`slurm_rl.traces.synthetic` samples from it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from slurm_rl.errors import InputError
from slurm_rl.traces.model import Trace, clock_to_datetime, philly_train_window, window
from slurm_rl.traces.philly import PHILLY_SOURCE

HOURS_PER_WEEK = 168
# 1970-01-01 was a Thursday: hour 0 of the clock is hour 72 of a Monday-based week.
_EPOCH_HOUR_OF_WEEK = 72

# Run-time distributions are fitted per job-size bucket: (fewest GPUs, most GPUs or None).
SIZE_BUCKETS: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 4), (5, 8), (9, None))
# Denser at the tails, where a few long jobs hold most of the GPU time.
QUANTILE_LEVELS: tuple[float, ...] = (
    (0.0, 0.001, 0.005, 0.01)
    + tuple(round(0.02 * step, 2) for step in range(1, 50))
    + (0.99, 0.995, 0.999, 1.0)
)

FIT_SOURCE = {
    "file": "philly_pollux_jobs.csv.gz (../shared/traces)",
    "upstream": PHILLY_SOURCE,
    "blob_sha256": "ebffb3dd1589bdf4e7bcd74496201c5ded1d557d498ee14f560463f37ec353da",
}


def hour_of_week(seconds: float) -> int:
    """0 = Monday 00:00-01:00 on the trace clock, 167 = Sunday 23:00-24:00."""
    return (int(seconds // 3600) + _EPOCH_HOUR_OF_WEEK) % HOURS_PER_WEEK


def size_bucket(num_gpus: int) -> int:
    """The index in :data:`SIZE_BUCKETS` of a job with ``num_gpus`` GPUs."""
    for index, (low, high) in enumerate(SIZE_BUCKETS):
        if num_gpus >= low and (high is None or num_gpus <= high):
            return index
    raise ValueError(f"no size bucket for {num_gpus} GPUs")


def fit_philly_stats(trace: Trace) -> dict[str, Any]:
    """The JSON-ready statistics of ``trace``'s September-November jobs."""
    start, end = philly_train_window()
    jobs = window(trace, start, end).jobs
    submits = np.array([job.submit_time for job in jobs])
    gpus = np.array([job.num_gpus for job in jobs])
    durations = np.array([job.oracle_duration or 0.0 for job in jobs])
    first_hour = float(np.floor(submits[0] / 3600) * 3600)
    return {
        "source": FIT_SOURCE,
        "fit_window": _fit_window(start, end, first_hour),
        "generated_by": "scripts/fit_philly_stats.py",
        "jobs": len(jobs),
        "jobs_per_hour": _round(len(jobs) / ((end - first_hour) / 3600), 6),
        "hour_of_week_weight": _hour_of_week_weights(submits, first_hour, end),
        "gpu_count": _distribution(gpus.tolist()),
        "duration_by_size": [_duration_bucket(durations, gpus, bucket) for bucket in SIZE_BUCKETS],
        "partition": _distribution([job.partition for job in jobs]),
    }


def _fit_window(start: float, end: float, first_hour: float) -> dict[str, str]:
    return {
        "start": clock_to_datetime(start).isoformat(),
        "end": clock_to_datetime(end).isoformat(),
        "first_hour_with_jobs": clock_to_datetime(first_hour).isoformat(),
        "clock": "Philly local time (US Pacific), read as UTC",
        "excluded": "December 2017 (held-out evaluation window)",
    }


def _hour_of_week_weights(submits: np.ndarray, first_hour: float, end: float) -> list[float]:
    """Arrival rate per hour-of-week slot over the mean rate (so the weights average 1)."""
    hours = np.arange(first_hour, end, 3600.0)
    observed = np.bincount([hour_of_week(h) for h in hours], minlength=HOURS_PER_WEEK)
    arrivals = np.bincount([hour_of_week(t) for t in submits], minlength=HOURS_PER_WEEK)
    rate = arrivals / observed
    return [_round(weight, 5) for weight in rate / rate.mean()]


def _distribution(values: Sequence[Any]) -> dict[str, list[Any]]:
    """Distinct values (most common first, ties by value) and their probabilities."""
    counts = sorted(Counter(values).items(), key=lambda item: (-item[1], item[0]))
    total = len(values)
    return {
        "values": [value for value, _ in counts],
        "probabilities": [_round(count / total, 8) for _, count in counts],
    }


def _duration_bucket(
    durations: np.ndarray, gpus: np.ndarray, bucket: tuple[int, int | None]
) -> dict[str, Any]:
    low, high = bucket
    selected = durations[(gpus >= low) & (gpus <= (high or np.iinfo(np.int64).max))]
    if selected.size == 0:
        raise InputError(f"no jobs with {low}..{high or 'more'} GPUs in the fit window to fit")
    log_quantiles = np.quantile(np.log(np.maximum(selected, 1.0)), QUANTILE_LEVELS)
    return {
        "min_gpus": low,
        "max_gpus": high,
        "jobs": int(selected.size),
        "median_s": _round(float(np.median(selected)), 6),
        "quantile_levels": list(QUANTILE_LEVELS),
        "log_duration_quantiles": [_round(value, 6) for value in log_quantiles],
    }


def _round(value: float, digits: int) -> float:
    return round(float(value), digits)
