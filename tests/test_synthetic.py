"""The synthetic Philly-like workload: reproducible, labelled, and true to the committed stats."""

from __future__ import annotations

import json
import math
from collections import Counter
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from slurm_rl.core import Job
from slurm_rl.errors import InputError
from slurm_rl.paths import shared_traces_dir
from slurm_rl.traces import FAMILIES, Trace, load_trace, synthetic_philly
from slurm_rl.traces.families import time_limit_for
from slurm_rl.traces.model import naive_to_clock
from slurm_rl.traces.philly import PHILLY_REFERENCE_GPU
from slurm_rl.traces.philly_fit import (
    HOURS_PER_WEEK,
    SIZE_BUCKETS,
    fit_philly_stats,
    hour_of_week,
    size_bucket,
)
from slurm_rl.traces.synthetic import PHILLY_STATS_PATH, SYNTHETIC_START

DAYS = 56


@pytest.fixture(scope="module")
def stats() -> dict[str, object]:
    loaded: dict[str, object] = json.loads(PHILLY_STATS_PATH.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def eight_weeks() -> Trace:
    return synthetic_philly(days=DAYS, seed=3)


def test_same_seed_same_trace_other_seed_other_trace() -> None:
    assert synthetic_philly(days=2, seed=11) == synthetic_philly(days=2, seed=11)
    assert synthetic_philly(days=2, seed=11).jobs != synthetic_philly(days=2, seed=12).jobs


def test_labelled_synthetic() -> None:
    trace = synthetic_philly(days=1)
    assert trace.synthetic
    assert "synthetic" in trace.name and "SYNTHETIC" in trace.source
    assert "2017-09-01" in trace.source and "2017-12-01" in trace.source
    assert trace.reference_gpu == PHILLY_REFERENCE_GPU


def test_works_without_shared(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLURM_RL_SHARED", str(tmp_path / "nothing-here"))
    assert not shared_traces_dir().exists()
    assert len(synthetic_philly(days=1, seed=0)) > 0


def test_jobs_are_well_formed(eight_weeks: Trace) -> None:
    end = SYNTHETIC_START + DAYS * 86400
    for job in eight_weeks.jobs:
        assert SYNTHETIC_START <= job.submit_time < end
        assert job.submit_time == math.floor(job.submit_time)
        assert job.oracle_duration is not None and job.oracle_duration >= 1
        assert job.model_family in FAMILIES
        assert job.time_limit == time_limit_for(job.oracle_duration)


def test_job_count_follows_the_fitted_rate(eight_weeks: Trace, stats: dict[str, object]) -> None:
    expected = float(stats["jobs_per_hour"]) * 24 * DAYS  # type: ignore[arg-type]
    # Poisson: the count is within 4 standard deviations of its mean
    assert abs(len(eight_weeks) - expected) < 4 * math.sqrt(expected)
    doubled = synthetic_philly(days=7, seed=3, load_scale=2.0)
    single = synthetic_philly(days=7, seed=3)
    assert 1.8 < len(doubled) / len(single) < 2.2


def test_gpu_counts_follow_the_fitted_distribution(
    eight_weeks: Trace, stats: dict[str, object]
) -> None:
    fitted = stats["gpu_count"]
    assert isinstance(fitted, dict)
    counts = Counter(job.num_gpus for job in eight_weeks.jobs)
    assert set(counts) <= set(fitted["values"])
    for value, probability in zip(fitted["values"], fitted["probabilities"], strict=True):
        observed = counts[value] / len(eight_weeks)
        standard_error = math.sqrt(probability * (1 - probability) / len(eight_weeks))
        assert abs(observed - probability) < 4 * standard_error + 1e-4, value


def test_durations_follow_each_size_buckets_quantiles(
    eight_weeks: Trace, stats: dict[str, object]
) -> None:
    buckets = stats["duration_by_size"]
    assert isinstance(buckets, list) and len(buckets) == len(SIZE_BUCKETS)
    by_bucket: dict[int, list[float]] = {}
    for job in eight_weeks.jobs:
        by_bucket.setdefault(size_bucket(job.num_gpus), []).append(job.oracle_duration or 0.0)
    for index in (0, 1, 2):  # the 9+ GPU bucket is too rare for a sample of this size
        fitted = buckets[index]
        log_durations = np.log(by_bucket[index])
        for level in (0.25, 0.5, 0.75):
            expected = np.interp(level, fitted["quantile_levels"], fitted["log_duration_quantiles"])
            observed = np.quantile(log_durations, level)
            assert abs(observed - expected) < 0.35, (index, level)  # within ~30 %


def test_arrivals_follow_the_hour_of_week_profile(
    eight_weeks: Trace, stats: dict[str, object]
) -> None:
    weights = np.array(stats["hour_of_week_weight"])
    assert weights.shape == (HOURS_PER_WEEK,) and abs(weights.mean() - 1) < 1e-3
    counts = np.bincount(
        [hour_of_week(job.submit_time) for job in eight_weeks.jobs], minlength=HOURS_PER_WEEK
    )
    assert np.corrcoef(counts, weights)[0, 1] > 0.95


def test_synthetic_start_is_a_monday_midnight() -> None:
    assert hour_of_week(SYNTHETIC_START) == 0


def test_bad_arguments_are_one_line_errors() -> None:
    for days, scale in ((0, 1.0), (-1, 1.0), (math.nan, 1.0), (1, 0.0), (1, math.inf)):
        with pytest.raises(InputError, match="synthetic workload"):
            synthetic_philly(days=days, load_scale=scale)


# --- the committed statistics -------------------------------------------------------------------


def test_stats_cite_their_source_and_exclude_december(stats: dict[str, object]) -> None:
    source, fitted = stats["source"], stats["fit_window"]
    assert isinstance(source, dict) and isinstance(fitted, dict)
    assert source["file"].startswith("philly_pollux_jobs.csv.gz")
    assert "ATC '19" in source["upstream"] and "osdi21-artifact" in source["upstream"]
    assert (fitted["start"], fitted["end"]) == ("2017-09-01T00:00:00", "2017-12-01T00:00:00")
    assert stats["jobs"] == 5_657 + 47_192 + 21_318  # README: Sep + Oct + Nov


def test_fit_ignores_december() -> None:
    def job(job_id: str, month: int, gpus: int) -> Job:
        submit = naive_to_clock(datetime(2017, month, 5, 10))
        return Job(job_id, submit, gpus, oracle_duration=100.0, partition="vc")

    autumn = (job("a", 9, 1), job("b", 10, 2), job("c", 11, 8), job("d", 11, 16))
    december = (job("e", 12, 128), job("f", 12, 1))
    fitted = fit_philly_stats(Trace("t", autumn + december, "V100", "test"))
    assert fitted["jobs"] == 4
    assert fitted["gpu_count"]["values"] == [1, 2, 8, 16]
    with pytest.raises(InputError, match="no jobs with 9..more GPUs"):
        fit_philly_stats(Trace("t", autumn[:3] + december, "V100", "test"))


def test_committed_stats_are_a_fresh_fit_of_the_trace(stats: dict[str, object]) -> None:
    path = shared_traces_dir() / "philly_pollux_jobs.csv.gz"
    if not path.is_file():
        pytest.skip(f"{path} is not here (../shared is absent)")
    refit = json.loads(json.dumps(fit_philly_stats(load_trace(path, "philly"))))
    assert refit == stats
