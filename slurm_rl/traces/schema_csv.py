"""slurm-rl's own CSV trace schema (documented in docs/traces.md).

Required columns ``job_id,submit_time,num_gpus,duration``; optional ``user,partition,num_nodes,
gpus_per_node,gpu_type,time_limit,model_family``, in any order. Any other column is an error
(a misspelt optional column would otherwise be ignored silently). An empty optional field
means "not given": ``time_limit`` and ``model_family`` are then modelled
(:mod:`slurm_rl.traces.families`). A comment line ``# reference_gpu: A100`` before the header
names the GPU the durations were measured on (default V100).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from slurm_rl.core import Job
from slurm_rl.errors import InputError, UnknownNameError
from slurm_rl.simulator.perfmodel import PerformanceModel
from slurm_rl.traces._rows import (
    Comment,
    CsvTable,
    RowError,
    bounded_duration,
    collect_rows,
    parse_duration,
    parse_gpu_count,
    parse_gpu_type,
    parse_number,
    parse_positive_count,
    parse_time_or_epoch,
    trace_name,
)
from slurm_rl.traces.families import FAMILIES, KNOWN_GPU_TYPES, canonical_gpu_type, trace_job
from slurm_rl.traces.model import Trace

REQUIRED_COLUMNS = ("job_id", "submit_time", "num_gpus", "duration")
OPTIONAL_COLUMNS = (
    "user",
    "partition",
    "num_nodes",
    "gpus_per_node",
    "gpu_type",
    "time_limit",
    "model_family",
)
DEFAULT_REFERENCE_GPU = "V100"
_REFERENCE_GPU_KEY = "reference_gpu"


def read_schema_csv(path: str | Path, *, skip_bad_rows: bool = False) -> Trace:
    with CsvTable(path) as table:
        columns = table.require(REQUIRED_COLUMNS)
        columns.update({name: table.column(name) for name in OPTIONAL_COLUMNS})
        _reject_unknown_columns(table)
        reference_gpu = _reference_gpu(table)
        builder = collect_rows(table, partial(_schema_job, columns), skip_bad_rows)
    source = f"slurm-rl CSV trace {table.path}"
    return builder.finish(trace_name(table.path), reference_gpu, source)


def _reject_unknown_columns(table: CsvTable) -> None:
    known = REQUIRED_COLUMNS + OPTIONAL_COLUMNS
    for name in table.header:
        if name not in known:
            message = f"unknown column {name!r} (known: {', '.join(known)})"
            raise InputError(message, path=table.path, line=table.header_line, column=name)


def _reference_gpu(table: CsvTable) -> str:
    for comment in table.comments:
        key, colon, value = comment.text.partition(":")
        if colon and key.strip() == _REFERENCE_GPU_KEY:
            return _modelled_gpu(value, comment, table)
    return DEFAULT_REFERENCE_GPU


def _modelled_gpu(value: str, comment: Comment, table: CsvTable) -> str:
    """``value`` as a GPU type that the performance model has speeds for.

    Every job's speed is relative to the reference GPU, so a type the model does not know
    would only fail later, inside a replay.
    """
    name = canonical_gpu_type(value)
    if name is not None and _is_modelled(name):
        return name
    known = ", ".join(gpu for gpu in KNOWN_GPU_TYPES if _is_modelled(gpu))
    message = f"unknown reference GPU type {value.strip()!r} in '# reference_gpu:' (known: {known})"
    raise InputError(message, path=table.path, line=comment.line)


def _is_modelled(gpu_type: str) -> bool:
    try:
        PerformanceModel.default().canonical_gpu_type(gpu_type)
    except UnknownNameError:
        return False
    return True


def _schema_job(columns: dict[str, int], fields: list[str], line: int) -> Job:
    def optional(name: str) -> str:
        index = columns[name]
        return fields[index].strip() if index >= 0 else ""

    job_id = fields[columns["job_id"]].strip()
    if not job_id:
        raise RowError("empty job id", "empty job id", "job_id")
    num_gpus = parse_gpu_count(fields[columns["num_gpus"]], "num_gpus")
    num_nodes, gpus_per_node = _shape(num_gpus, optional("num_nodes"), optional("gpus_per_node"))
    return trace_job(
        job_id=job_id,
        submit_time=parse_time_or_epoch(fields[columns["submit_time"]].strip(), "submit_time"),
        num_gpus=num_gpus,
        duration=parse_duration(fields[columns["duration"]], "duration"),
        user=optional("user"),
        partition=optional("partition"),
        num_nodes=num_nodes,
        gpus_per_node=gpus_per_node,
        gpu_type=parse_gpu_type(optional("gpu_type"), "gpu_type") if optional("gpu_type") else None,
        time_limit=_time_limit(optional("time_limit")),
        model_family=_model_family(optional("model_family")),
    )


def _shape(num_gpus: int, nodes_text: str, per_node_text: str) -> tuple[int | None, int | None]:
    """The node shape the row fixes, if any: every node holds GPUs of the job, all nodes
    alike when ``gpus_per_node`` is given."""
    nodes = parse_positive_count(nodes_text, "num_nodes", "node count") if nodes_text else None
    per_node = (
        parse_positive_count(per_node_text, "gpus_per_node", "GPUs per node")
        if per_node_text
        else None
    )
    if nodes is not None and nodes > num_gpus:
        message = f"node count {nodes_text} is more than the job's {num_gpus} GPUs"
        raise RowError("inconsistent shape", message, "num_nodes")
    if per_node is not None and per_node > num_gpus:
        message = f"GPUs per node {per_node_text} is more than the job's {num_gpus} GPUs"
        raise RowError("inconsistent shape", message, "gpus_per_node")
    if nodes is not None and per_node is not None and nodes * per_node != num_gpus:
        message = f"num_nodes x gpus_per_node = {nodes * per_node}, but num_gpus = {num_gpus}"
        raise RowError("inconsistent shape", message, "gpus_per_node")
    if per_node is not None and num_gpus % per_node:
        message = f"{per_node} GPUs per node do not divide the job's {num_gpus} GPUs"
        raise RowError("inconsistent shape", message, "gpus_per_node")
    return nodes, per_node


def _time_limit(text: str) -> float | None:
    if not text:
        return None
    value = parse_number(text, "time_limit", "time limit")
    if value <= 0:
        raise RowError("time limit <= 0", f"time limit must be positive, got {text}", "time_limit")
    return bounded_duration(value, "time_limit", "time limit")


def _model_family(text: str) -> str:
    if text and text not in FAMILIES:
        message = f"unknown model family {text!r} (known: {', '.join(FAMILIES)})"
        raise RowError("unknown model family", message, "model_family")
    return text
