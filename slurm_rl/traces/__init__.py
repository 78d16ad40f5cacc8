"""Job traces: readers for public GPU-cluster traces, our CSV schema, and a synthetic workload.

Every reader returns a :class:`Trace` of immutable :class:`slurm_rl.core.Job` s, sorted by
(submit_time, job_id). See docs/traces.md for formats, clocks and modelling choices.
"""

from __future__ import annotations

from slurm_rl.traces.families import (
    FAMILIES,
    KNOWN_GPU_TYPES,
    TIME_LIMIT_LADDER,
    TIME_LIMIT_SAFETY_FACTOR,
    canonical_gpu_type,
    family_for,
    time_limit_for,
)
from slurm_rl.traces.loader import FORMATS, detect_format, load_trace
from slurm_rl.traces.model import (
    PHILLY_HELDOUT_MONTH,
    PHILLY_MONTHS,
    PHILLY_TRAIN_MONTHS,
    Trace,
    clock_to_datetime,
    month_window,
    parse_window,
    philly_heldout_window,
    philly_month_windows,
    philly_train_window,
    window,
)
from slurm_rl.traces.synthetic import synthetic_philly

__all__ = [
    "FAMILIES",
    "FORMATS",
    "KNOWN_GPU_TYPES",
    "PHILLY_HELDOUT_MONTH",
    "PHILLY_MONTHS",
    "PHILLY_TRAIN_MONTHS",
    "TIME_LIMIT_LADDER",
    "TIME_LIMIT_SAFETY_FACTOR",
    "Trace",
    "canonical_gpu_type",
    "clock_to_datetime",
    "detect_format",
    "family_for",
    "load_trace",
    "month_window",
    "parse_window",
    "philly_heldout_window",
    "philly_month_windows",
    "philly_train_window",
    "synthetic_philly",
    "time_limit_for",
    "window",
]
