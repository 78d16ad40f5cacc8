"""Alibaba PAI GPU cluster trace 2023 (FGD, USENIX ATC '23): the ``openb`` pod list.

Columns ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time``; times are seconds from the trace start (the trace has no
calendar date, so the clock starts at 0). A pod is a job: submit = ``creation_time``, duration
= ``deletion_time - scheduled_time`` (its residence time; for pods still Running at the end of
the trace it is cut off there). Skipped, not errors: CPU-only pods ("no GPU") and pods never
bound to a node (``scheduled_time`` empty, "never scheduled").

GPU-sharing pods (``num_gpu`` 1 with ``gpu_milli`` < 1000) are replayed as whole-GPU jobs: our
Job has no fractional GPUs, so their demand is rounded up to 1 GPU. ``gpu_spec`` becomes the
job's GPU type when it names one known type; a list of alternatives (``A|B``) cannot be
expressed by a Job and leaves the type open.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from slurm_rl.core import Job
from slurm_rl.traces._rows import (
    CsvTable,
    RowError,
    SkipRow,
    bounded_duration,
    bounded_gpus,
    collect_rows,
    parse_count,
    parse_gpu_type,
    parse_seconds,
    trace_name,
)
from slurm_rl.traces.families import trace_job
from slurm_rl.traces.model import Trace

# The pods do not record the GPU they ran on. Of the cluster's 6,212 GPUs, 4,392 are "G2", an
# undisclosed internal model; T4 is the most common disclosed one (842). Residence times are
# not speed-bound work, so the choice matters little; docs/traces.md says so.
PAI_REFERENCE_GPU = "T4"
PAI_SOURCE = (
    "Alibaba PAI GPU cluster trace 2023 (Weng et al., 'Beware of Fragmentation: Scheduling "
    "GPU-Sharing Workloads with Fragmentation Gradient Descent', USENIX ATC '23; "
    "alibaba/clusterdata cluster-trace-gpu-v2023/csv/openb_pod_list_default.csv, research use)"
)
PAI_COLUMNS = ("name", "num_gpu", "creation_time", "deletion_time", "scheduled_time")


def read_pai2023(path: str | Path, *, skip_bad_rows: bool = False) -> Trace:
    with CsvTable(path) as table:
        columns = table.require(PAI_COLUMNS)
        columns["gpu_spec"] = table.column("gpu_spec")
        builder = collect_rows(table, partial(_pai_job, columns), skip_bad_rows)
    source = f"{PAI_SOURCE}; read from {table.path}"
    return builder.finish(trace_name(table.path), PAI_REFERENCE_GPU, source)


def _pai_job(columns: dict[str, int], fields: list[str], line: int) -> Job:
    gpus_text = fields[columns["num_gpu"]]
    gpus = parse_count(gpus_text, "num_gpu", "GPU count")
    if gpus == 0:
        raise SkipRow("no GPU")
    if gpus < 0:
        raise RowError("GPU count <= 0", f"GPU count must not be negative, got {gpus}", "num_gpu")
    bounded_gpus(gpus, gpus_text, "num_gpu")
    scheduled = fields[columns["scheduled_time"]]
    if not scheduled.strip():
        raise SkipRow("never scheduled")
    return trace_job(
        job_id=_pod_name(fields[columns["name"]]),
        submit_time=parse_seconds(fields[columns["creation_time"]], "creation_time"),
        num_gpus=gpus,
        duration=_residence(fields[columns["deletion_time"]], scheduled),
        gpu_type=_gpu_type(fields, columns["gpu_spec"]),
    )


def _pod_name(text: str) -> str:
    name = text.strip()
    if not name:
        raise RowError("empty job id", "empty pod name", "name")
    return name


def _residence(deletion_text: str, scheduled_text: str) -> float:
    deleted = parse_seconds(deletion_text, "deletion_time")
    scheduled = parse_seconds(scheduled_text, "scheduled_time")
    if deleted < scheduled:
        message = f"negative duration: deletion_time {deletion_text} < {scheduled_text}"
        raise RowError("negative duration", message, "deletion_time")
    return bounded_duration(deleted - scheduled, "deletion_time")


def _gpu_type(fields: list[str], index: int) -> str | None:
    spec = fields[index].strip() if index >= 0 else ""
    if not spec or "|" in spec:
        return None
    return parse_gpu_type(spec, "gpu_spec")
