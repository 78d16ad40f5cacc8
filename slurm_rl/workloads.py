"""Named workloads: the synthetic default and the real traces in the shared data folder."""

from __future__ import annotations

from pathlib import Path

from slurm_rl.errors import InputError
from slurm_rl.paths import shared_traces_dir
from slurm_rl.traces import Trace, load_trace, parse_window, synthetic_philly, window

SHARED_TRACES = {
    "philly": "philly_pollux_jobs.csv.gz",
    "venus": "helios_venus_2vc_sept_slice.csv.gz",
    "pai2023": "alibaba_gpu_v2023_openb_pod_list_default.csv.gz",
    "nasa": "pwa_NASA-iPSC-1993-3.1-cln.swf.gz",
}
SYNTHETIC = "synthetic"


def trace_path(name_or_path: str) -> Path:
    """A named shared trace's file, or the path as given."""
    if name_or_path in SHARED_TRACES:
        path = shared_traces_dir() / SHARED_TRACES[name_or_path]
        if not path.exists():
            raise InputError(
                f"trace {name_or_path!r} needs the shared data folder; set SLURM_RL_SHARED "
                "or pass the file's path",
                path=path,
            )
        return path
    return Path(name_or_path)


def open_workload(
    name_or_path: str,
    *,
    window_spec: str | None = None,
    days: float = 7.0,
    seed: int = 0,
    fmt: str | None = None,
    skip_bad_rows: bool = False,
) -> Trace:
    """The trace to replay: ``synthetic``, a named shared trace, or a file, cut to a window."""
    trace, _ = open_measured_workload(
        name_or_path, window_spec=window_spec, days=days, seed=seed, fmt=fmt,
        skip_bad_rows=skip_bad_rows,
    )
    return trace


def open_measured_workload(
    name_or_path: str,
    *,
    window_spec: str | None = None,
    days: float = 7.0,
    seed: int = 0,
    fmt: str | None = None,
    skip_bad_rows: bool = False,
    warmup_days: float = 0.0,
) -> tuple[Trace, float | None]:
    """The trace to replay and the time from which jobs are measured.

    ``synthetic`` (seeded, Philly-like), a named shared trace, or a file; cut to
    ``window_spec`` (e.g. ``2017-10-01:2017-10-15`` or ``2017-10``) when given. With
    ``warmup_days``, jobs submitted that long before the window (or before the synthetic
    week) are replayed too, so the cluster is busy when measuring starts, but not measured.
    """
    warmup = warmup_days * 86400.0
    if name_or_path == SYNTHETIC:
        trace = synthetic_philly(days=days + warmup_days, seed=seed)
        return trace, (trace.jobs[0].submit_time + warmup if warmup and trace.jobs else None)
    path = trace_path(name_or_path)
    try:
        missing = not path.exists()
    except OSError:  # a name too long for the file system: opening it says so
        missing = False
    if missing:
        raise InputError("no such trace file", path=path)
    trace = load_trace(path, fmt, skip_bad_rows=skip_bad_rows)
    if not window_spec:
        return trace, (trace.jobs[0].submit_time + warmup if warmup and trace.jobs else None)
    try:
        start, end = parse_window(window_spec)
    except InputError as exc:  # the parser serves several options: say which one this is
        raise InputError(f"--window: {exc}") from None
    measured = window(trace, start, end)
    if not measured.jobs:
        raise InputError(f"window {window_spec} holds no jobs of trace {trace.name!r}")
    return window(trace, start - warmup, end), (start if warmup else None)
