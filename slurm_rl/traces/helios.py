"""SenseTime Helios (SC '21): the original ``cluster_log.csv`` layout and the Venus slice.

Original layout (S-Lab-System-Group/HeliosData, README): ``job_id,user,vc,gpu_num,cpu_num,
node_num,state,submit_time,start_time,end_time,duration,queue``; some derived copies add a
``jobname`` column. Times are ``YYYY-MM-DD HH:MM:SS`` in Helios local time (UTC+8), read as UTC
like every naive trace time. CPU-only jobs (``gpu_num`` 0, about half of Helios) are skipped
with the reason "no GPU"; a job with no duration and no start time never ran ("never started").

Venus slice (a third party's re-formatting, see ../shared/traces/README.md section 5a):
``#`` comment lines, then ``job_id,user,tenant,class,submit_time,num_chips,chip_type,num_nodes,
duration_s,walltime_limit_s,final_status``. ``submit_time`` is microseconds since the window
start 2020-09-01 00:00:00 (Helios local time). ``walltime_limit_s`` is a copy of the duration
made by the converter, not a limit, so it is ignored and the time limit is modelled.
"""

from __future__ import annotations

from datetime import datetime
from functools import partial
from pathlib import Path

from slurm_rl.core import Job
from slurm_rl.traces._rows import (
    CsvTable,
    RowError,
    SkipRow,
    bounded_duration,
    bounded_gpus,
    bounded_seconds,
    collect_rows,
    parse_clock_time,
    parse_count,
    parse_duration,
    parse_positive_count,
    parse_seconds,
    trace_name,
)
from slurm_rl.traces.families import trace_job
from slurm_rl.traces.model import Trace, naive_to_clock

# Venus is a Volta cluster (SC '21); HeliosArtifact's environment dump of a Helios datacenter
# node (enviornment/env_datacenter_node.txt) shows 8 x Tesla V100-SXM2 32 GB.
HELIOS_REFERENCE_GPU = "V100"
HELIOS_SOURCE = (
    "SenseTime Helios trace (Hu et al., 'Characterization and Prediction of Deep Learning "
    "Workloads in Large-Scale GPU Datacenters', SC '21; S-Lab-System-Group/HeliosData, "
    "CC-BY-4.0)"
)
VENUS_SLICE_SOURCE = (
    f"{HELIOS_SOURCE}, cluster Venus, two-VC September 2020 slice re-formatted by "
    "felivalencia3/mini-compute-simulator (tests/validation_traces/helios_venus_2vc_sept.csv)"
)
VENUS_SLICE_EPOCH = naive_to_clock(datetime(2020, 9, 1))

HELIOS_COLUMNS = ("job_id", "user", "vc", "gpu_num", "submit_time")
VENUS_SLICE_COLUMNS = (
    "job_id",
    "user",
    "tenant",
    "submit_time",
    "num_chips",
    "num_nodes",
    "duration_s",
)

_NO_GPU = "no GPU"


def read_helios(path: str | Path, *, skip_bad_rows: bool = False) -> Trace:
    """The original HeliosData ``cluster_log.csv`` layout."""
    with CsvTable(path) as table:
        columns = table.require(HELIOS_COLUMNS)
        for optional in ("node_num", "duration", "start_time", "end_time"):
            columns[optional] = table.column(optional)
        builder = collect_rows(table, partial(_helios_job, columns), skip_bad_rows)
    source = f"{HELIOS_SOURCE}, cluster_log.csv; read from {table.path}"
    return builder.finish(trace_name(table.path), HELIOS_REFERENCE_GPU, source)


def read_venus_slice(path: str | Path, *, skip_bad_rows: bool = False) -> Trace:
    """The re-formatted two-VC Venus slice (microsecond submit times, ``#`` comments)."""
    with CsvTable(path) as table:
        columns = table.require(VENUS_SLICE_COLUMNS)
        builder = collect_rows(table, partial(_venus_slice_job, columns), skip_bad_rows)
    source = f"{VENUS_SLICE_SOURCE}; read from {table.path}"
    return builder.finish(trace_name(table.path), HELIOS_REFERENCE_GPU, source)


def _helios_job(columns: dict[str, int], fields: list[str], line: int) -> Job:
    gpus = _gpus_or_skip(fields[columns["gpu_num"]], "gpu_num")
    job_id = _job_id(fields[columns["job_id"]])
    nodes = _optional_nodes(fields, columns["node_num"], "node_num")
    _check_nodes(gpus, nodes, "node_num")
    return trace_job(
        job_id=job_id,
        submit_time=parse_clock_time(fields[columns["submit_time"]], "submit_time"),
        num_gpus=gpus,
        duration=_helios_duration(fields, columns),
        user=fields[columns["user"]],
        partition=fields[columns["vc"]],
        num_nodes=nodes,
        gpus_per_node=_even_share(gpus, nodes),
    )


def _venus_slice_job(columns: dict[str, int], fields: list[str], line: int) -> Job:
    gpus = _gpus_or_skip(fields[columns["num_chips"]], "num_chips")
    text = fields[columns["submit_time"]]
    offset = parse_seconds(text, "submit_time", per_second=1e6)
    nodes = parse_positive_count(fields[columns["num_nodes"]], "num_nodes", "node count")
    _check_nodes(gpus, nodes, "num_nodes")
    return trace_job(
        job_id=_job_id(fields[columns["job_id"]]),
        submit_time=bounded_seconds(VENUS_SLICE_EPOCH + offset, text, "submit_time"),
        num_gpus=gpus,
        duration=parse_duration(fields[columns["duration_s"]], "duration_s"),
        user=fields[columns["user"]],
        partition=fields[columns["tenant"]],
        num_nodes=nodes,
        gpus_per_node=_even_share(gpus, nodes),
    )


def _gpus_or_skip(text: str, column: str) -> int:
    """Helios logs CPU jobs too: 0 GPUs is a valid row that is not ours to replay."""
    gpus = parse_count(text, column, "GPU count")
    if gpus == 0:
        raise SkipRow(_NO_GPU)
    if gpus < 0:
        raise RowError("GPU count <= 0", f"GPU count must not be negative, got {text}", column)
    return bounded_gpus(gpus, text, column)


def _job_id(text: str) -> str:
    job_id = text.strip()
    if not job_id:
        raise RowError("empty job id", "empty job id", "job_id")
    return job_id


def _optional_nodes(fields: list[str], index: int, column: str) -> int | None:
    if index < 0 or not fields[index].strip():
        return None
    return parse_positive_count(fields[index], column, "node count")


def _check_nodes(gpus: int, nodes: int | None, column: str) -> None:
    """Every node of a GPU job holds at least one of its GPUs, so nodes <= GPUs."""
    if nodes is not None and nodes > gpus:
        message = f"node count {nodes} is more than the job's {gpus} GPUs"
        raise RowError("inconsistent shape", message, column)


def _even_share(gpus: int, nodes: int | None) -> int | None:
    """GPUs per node when the job's GPUs split evenly over its nodes (Slurm gave it that)."""
    if nodes is None or gpus % nodes:
        return None
    return gpus // nodes


def _helios_duration(fields: list[str], columns: dict[str, int]) -> float:
    """``duration``; else ``end_time - start_time``; a job with neither never ran."""
    index = columns["duration"]
    if index >= 0 and fields[index].strip():
        return parse_duration(fields[index], "duration")
    start, end = columns["start_time"], columns["end_time"]
    if start < 0 or end < 0 or not fields[start].strip():
        raise SkipRow("never started")
    started = parse_clock_time(fields[start], "start_time")
    ended = parse_clock_time(fields[end], "end_time")
    if ended < started:
        raise RowError("negative duration", "end_time is before start_time", "end_time")
    return bounded_duration(ended - started, "end_time")
