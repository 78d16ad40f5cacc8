"""Named workloads: the synthetic default and the real traces in the shared data folder."""

from __future__ import annotations

from pathlib import Path

from slurm_rl.errors import InputError
from slurm_rl.paths import shared_traces_dir
from slurm_rl.traces import (
    Trace,
    clock_to_datetime,
    load_trace,
    parse_window,
    synthetic_philly,
    window,
)
from slurm_rl.traces.synthetic import SYNTHETIC_START

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
        _check_synthetic_options(fmt, skip_bad_rows)
        trace = synthetic_philly(days=days + warmup_days, seed=seed)
        if window_spec:
            return _synthetic_window(trace, window_spec, days, warmup_days)
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
    start, end = window_bounds(trace, window_spec, "--window")
    return window(trace, start - warmup, end), (start if warmup else None)


def _check_synthetic_options(fmt: str | None, skip_bad_rows: bool) -> None:
    """The options that say how a trace file is read mean nothing to the synthetic workload:
    refused, not silently ignored."""
    if fmt:
        raise InputError("--format applies to trace files; the synthetic workload has none")
    if skip_bad_rows:
        raise InputError("--skip-bad-rows applies to trace files; the synthetic workload has "
                         "no rows to skip")


def _synthetic_window(trace: Trace, window_spec: str, days: float,
                      warmup_days: float) -> tuple[Trace, float | None]:
    """The synthetic workload cut to ``window_spec`` as a trace file is (training cuts it by
    its windows too; it was once ignored here, and a week replayed for the 2 hours asked). It
    starts on SYNTHETIC_START and lasts ``days`` plus the warm-up: a window that ends later
    would measure fewer days than it names, so it is refused."""
    start, end = window_bounds(trace, window_spec, "--window")
    if end > SYNTHETIC_START + (days + warmup_days) * 86400.0:
        raise InputError(f"--window {window_spec} ends after the synthetic workload ("
                         f"{_span(trace)}: --days {days:g} and {warmup_days:g} warm-up days); "
                         "give a larger --days")
    return window(trace, start - warmup_days * 86400.0, end), (start if warmup_days else None)


def window_bounds(trace: Trace, window_spec: str, option: str) -> tuple[float, float]:
    """The bounds of ``window_spec``, which must hold some of ``trace``'s jobs; ``option``
    (``--window``, ``--train-window``, ...) names the window in an error. Every command that
    cuts a trace to a window checks it here, before any replay or training starts."""
    try:
        start, end = parse_window(window_spec)
    except InputError as exc:  # the parser serves several options: say which one this is
        raise InputError(f"{option}: {exc}") from None
    if not window(trace, start, end).jobs:
        raise InputError(f"{option} {window_spec} holds no jobs of trace {trace.name!r} "
                         f"({_span(trace)})")
    return start, end


def _span(trace: Trace) -> str:
    """When the trace's jobs were submitted, to show where a window that missed should go."""
    if not trace.jobs:
        return "it has no jobs"
    first = clock_to_datetime(trace.jobs[0].submit_time)
    last = clock_to_datetime(trace.jobs[-1].submit_time)
    if first.date() == last.date():  # a day's trace: its hours say more than one date twice
        return f"its jobs span {first.isoformat(timespec='minutes')}..{last:%H:%M}"
    return f"its jobs span {first.date().isoformat()}..{last.date().isoformat()}"
