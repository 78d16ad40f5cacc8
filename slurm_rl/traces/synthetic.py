"""A seeded synthetic workload that follows Philly's September-November 2017 statistics.

The default workload on a machine without ../shared. Its parameters are the committed
``slurm_rl/data/philly_stats.json`` (fitted by ``scripts/fit_philly_stats.py``), so it needs no
trace file. The model, all of it sampled from the JSON:

* arrivals: a Poisson process whose rate in each hour is the fitted mean rate x the fitted
  weight of that hour of the week x ``load_scale`` (times uniform within the hour);
* job size: the fitted distribution of GPU counts;
* run time: given the size bucket, the fitted empirical quantile function of log run time,
  interpolated linearly between the stored quantiles;
* virtual cluster (partition): the fitted distribution, independent of size.

Family and time limit are filled as for trace jobs (:mod:`slurm_rl.traces.families`).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from slurm_rl.core import Job
from slurm_rl.errors import InputError
from slurm_rl.paths import DATA_DIR
from slurm_rl.traces.families import trace_job
from slurm_rl.traces.model import Trace, naive_to_clock
from slurm_rl.traces.philly import PHILLY_REFERENCE_GPU
from slurm_rl.traces.philly_fit import HOURS_PER_WEEK, hour_of_week, size_bucket

PHILLY_STATS_PATH = DATA_DIR / "philly_stats.json"
# A Monday 00:00, so the first hour of a synthetic trace is the first hour of a week.
SYNTHETIC_START = naive_to_clock(datetime(2017, 9, 4))


@dataclass(frozen=True)
class DurationQuantiles:
    min_gpus: int
    max_gpus: int | None
    levels: tuple[float, ...]
    log_durations: tuple[float, ...]


@dataclass(frozen=True)
class PhillyStats:
    """The fitted parameters (see :func:`slurm_rl.traces.philly_fit.fit_philly_stats`)."""

    source: str
    jobs_per_hour: float
    hour_of_week_weight: tuple[float, ...]
    gpu_counts: tuple[int, ...]
    gpu_count_probabilities: tuple[float, ...]
    durations: tuple[DurationQuantiles, ...]
    partitions: tuple[str, ...]
    partition_probabilities: tuple[float, ...]


@functools.cache
def load_philly_stats(path: Path = PHILLY_STATS_PATH) -> PhillyStats:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return _parse_stats(raw)
    except OSError as error:
        message = f"cannot read the synthetic workload's statistics: {error.strerror or error}"
        raise InputError(message, path=path) from None
    except (ValueError, KeyError, TypeError) as error:
        message = f"malformed synthetic workload statistics ({error!r})"
        raise InputError(message, path=path) from None


def _parse_stats(raw: dict[str, Any]) -> PhillyStats:
    weights = tuple(float(w) for w in raw["hour_of_week_weight"])
    if len(weights) != HOURS_PER_WEEK:
        raise ValueError(f"hour_of_week_weight has {len(weights)} entries, not {HOURS_PER_WEEK}")
    source, fitted = raw["source"], raw["fit_window"]
    return PhillyStats(
        source=(
            f"Philly {fitted['start']}..{fitted['end']} "
            f"(file {source['file']}; {source['upstream']})"
        ),
        jobs_per_hour=float(raw["jobs_per_hour"]),
        hour_of_week_weight=weights,
        gpu_counts=tuple(int(v) for v in raw["gpu_count"]["values"]),
        gpu_count_probabilities=tuple(float(p) for p in raw["gpu_count"]["probabilities"]),
        durations=tuple(_parse_quantiles(bucket) for bucket in raw["duration_by_size"]),
        partitions=tuple(str(v) for v in raw["partition"]["values"]),
        partition_probabilities=tuple(float(p) for p in raw["partition"]["probabilities"]),
    )


def _parse_quantiles(raw: dict[str, Any]) -> DurationQuantiles:
    max_gpus = raw["max_gpus"]
    return DurationQuantiles(
        min_gpus=int(raw["min_gpus"]),
        max_gpus=None if max_gpus is None else int(max_gpus),
        levels=tuple(float(v) for v in raw["quantile_levels"]),
        log_durations=tuple(float(v) for v in raw["log_duration_quantiles"]),
    )


def synthetic_philly(
    days: float = 7, seed: int = 0, load_scale: float = 1.0, *, start: float = SYNTHETIC_START
) -> Trace:
    """``days`` of a synthetic Philly-like workload, reproducible from ``seed``.

    ``load_scale`` multiplies the arrival rate (2.0 = twice as many jobs). ``start`` is the
    trace-clock time of the first instant (default: Monday 2017-09-04 00:00).
    """
    _check_arguments(days, load_scale)
    stats = load_philly_stats()
    rng = np.random.default_rng(seed)
    submits = _arrival_times(rng, stats, start, days * 86400.0, load_scale)
    gpus = _sample(rng, stats.gpu_counts, stats.gpu_count_probabilities, submits.size)
    durations = _durations(rng, stats, gpus)
    partitions = _sample(rng, stats.partitions, stats.partition_probabilities, submits.size)
    jobs = _jobs(submits, gpus, durations, partitions)
    name = f"synthetic-philly(days={days:g},seed={seed},load_scale={load_scale:g})"
    source = f"SYNTHETIC workload (seed {seed}) with statistics fitted to {stats.source}"
    return Trace(name, jobs, PHILLY_REFERENCE_GPU, source, synthetic=True)


def _check_arguments(days: float, load_scale: float) -> None:
    if not (math.isfinite(days) and days > 0):
        raise InputError(f"synthetic workload: days must be a positive number, got {days}")
    if not (math.isfinite(load_scale) and load_scale > 0):
        raise InputError(f"synthetic workload: load_scale must be positive, got {load_scale}")


def _arrival_times(
    rng: np.random.Generator, stats: PhillyStats, start: float, span: float, load_scale: float
) -> np.ndarray:
    """Whole-second submit times of a Poisson process with an hour-of-week rate, sorted."""
    hour_starts = start + 3600.0 * np.arange(math.ceil(span / 3600.0))
    weights = np.array(stats.hour_of_week_weight)[[hour_of_week(t) for t in hour_starts]]
    counts = rng.poisson(stats.jobs_per_hour * load_scale * weights)
    times = np.repeat(hour_starts, counts) + rng.uniform(0.0, 3600.0, counts.sum())
    times = np.floor(np.sort(times))
    within: np.ndarray = times[times < start + span]
    return within


def _sample(
    rng: np.random.Generator, values: tuple[Any, ...], probabilities: tuple[float, ...], size: int
) -> np.ndarray:
    p = np.array(probabilities)
    indices = rng.choice(len(values), size=size, p=p / p.sum())
    return np.array(values, dtype=object)[indices]


def _durations(rng: np.random.Generator, stats: PhillyStats, gpus: np.ndarray) -> np.ndarray:
    """Run times from each size bucket's quantile function, interpolated in log space."""
    levels = rng.uniform(0.0, 1.0, gpus.size)
    log_durations = np.empty(gpus.size)
    buckets = np.array([size_bucket(int(count)) for count in gpus], dtype=int)
    for index, quantiles in enumerate(stats.durations):
        mask = buckets == index
        log_durations[mask] = np.interp(levels[mask], quantiles.levels, quantiles.log_durations)
    durations: np.ndarray = np.maximum(np.round(np.exp(log_durations)), 1.0)
    return durations


def _jobs(
    submits: np.ndarray, gpus: np.ndarray, durations: np.ndarray, partitions: np.ndarray
) -> tuple[Job, ...]:
    width = max(6, len(str(submits.size)))
    return tuple(
        trace_job(
            job_id=f"synthetic-{index:0{width}d}",
            submit_time=float(submit),
            num_gpus=int(count),
            duration=float(duration),
            partition=str(partition),
        )
        for index, (submit, count, duration, partition) in enumerate(
            zip(submits, gpus, durations, partitions, strict=True)
        )
    )
