"""Microsoft Philly, as the per-job extract of the Pollux (OSDI '21) artifact.

Columns ``timestamp,duration,num_gpus,gpu_time,cluster``: submit time (Philly local time, US
Pacific, no zone; read as UTC, see :mod:`slurm_rl.traces.model`), run time summed over the job's
attempts (s), GPUs, GPU-seconds (redundant: duration x num_gpus, not read) and virtual cluster.
The file has no job ids; a job's id is ``philly-<line number>``, stable for the published file.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from slurm_rl.core import Job
from slurm_rl.traces._rows import (
    CsvTable,
    collect_rows,
    parse_clock_time,
    parse_duration,
    parse_gpu_count,
    trace_name,
)
from slurm_rl.traces.families import trace_job
from slurm_rl.traces.model import Trace

# Philly's GPU models are not published (ATC '19 gives 12 GB and 24 GB GPUs, 2 or 8 per
# server). Like Gavel (OSDI '20), which turns Philly-like run times into steps with V100
# throughputs, we take the durations as V100 time. docs/traces.md explains the choice.
PHILLY_REFERENCE_GPU = "V100"
PHILLY_SOURCE = (
    "Microsoft Philly trace (Jeon et al., 'Analysis of Large-Scale Multi-Tenant GPU Clusters "
    "for DNN Training Workloads', USENIX ATC '19; msr-fiddle/philly-traces cluster_job_log, "
    "CC-BY-4.0), per-job extract from the Pollux artifact (petuum/adaptdl, branch "
    "osdi21-artifact, simulator/traces/philly.csv, Apache-2.0)"
)
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")


def read_philly(path: str | Path, *, skip_bad_rows: bool = False) -> Trace:
    with CsvTable(path) as table:
        columns = table.require(PHILLY_COLUMNS)
        builder = collect_rows(table, partial(_philly_job, columns), skip_bad_rows)
    source = f"{PHILLY_SOURCE}; read from {table.path}"
    return builder.finish(trace_name(table.path), PHILLY_REFERENCE_GPU, source)


def _philly_job(columns: dict[str, int], fields: list[str], line: int) -> Job:
    return trace_job(
        job_id=f"philly-{line}",
        submit_time=parse_clock_time(fields[columns["timestamp"]], "timestamp"),
        num_gpus=parse_gpu_count(fields[columns["num_gpus"]], "num_gpus"),
        duration=parse_duration(fields[columns["duration"]], "duration"),
        partition=fields[columns["cluster"]],
    )
