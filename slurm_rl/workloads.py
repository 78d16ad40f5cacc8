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
    """The trace to replay: ``synthetic`` (seeded, Philly-like), a named shared trace, or a file;
    cut to ``window_spec`` (e.g. ``2017-10-01:2017-10-15`` or ``2017-10``) when given."""
    if name_or_path == SYNTHETIC:
        trace = synthetic_philly(days=days, seed=seed)
    else:
        path = trace_path(name_or_path)
        if not path.exists():
            raise InputError("no such trace file", path=path)
        trace = load_trace(path, fmt, skip_bad_rows=skip_bad_rows)
    if window_spec:
        start, end = parse_window(window_spec)
        trace = window(trace, start, end)
        if not trace.jobs:
            raise InputError(f"window {window_spec} holds no jobs of trace {trace.name!r}")
    return trace
