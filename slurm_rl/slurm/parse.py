"""Parse ``squeue --json`` and ``sinfo --json`` / ``scontrol show nodes --json`` output.

Two families of layouts are understood:

* **openapi/v0.0.38** (Slurm 22.05): plain numbers (``"submit_time": 1795970134``), job and
  node states as lower/upper-case strings plus ``state_flags``, meta under ``meta.Slurm``.
* **data_parser v0.0.39+** (23.02 .. 24.x): numbers wrapped as
  ``{"set": true, "infinite": false, "number": N}``, states as lists (``["PENDING"]``,
  ``["IDLE", "DRAIN"]``), meta under ``meta.slurm``, ``exit_code`` as an object, and the
  newer ``sinfo --json`` grouping (``{"sinfo": [{"nodes": {"nodes": [...]}, "gres":
  {"total": ..., "used": ...}, "node": {"state": [...]}}]}``).

Unknown extra keys are ignored (newer Slurm adds fields every release); a missing or
mistyped field we need, truncated JSON or a non-empty ``errors`` list raises
:class:`SlurmOutputError` naming the command, the record and the field.

A 22.05 document whose every record is well formed takes a fast path first (at the end of
this module: msgspec decodes only the fields read here, with 22.05's types, and skips the
other ~80 keys of each job record). A document it does not take whole is read by the
general path, so every message about bad input is worded by one code path.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Annotated, Any

import msgspec

from slurm_rl.slurm.errors import SlurmOutputError
from slurm_rl.slurm.gres import GresFormatError, gpu_counts
from slurm_rl.slurm.hostlist import HostlistError, expand
from slurm_rl.slurm.json_document import JsonObject, load_document, parse_meta
from slurm_rl.slurm.json_document import Where as _Where
from slurm_rl.slurm.records import (
    KNOWN_JOB_STATES,
    JobsReport,
    NodesReport,
    SlurmJob,
    SlurmMeta,
    SlurmNode,
    merge_partitions,
    new_job,
)

# Slurm's "no value" / "infinite" sentinels in the 22.05 plain-number layout.
_NO_VAL_32 = 0xFFFFFFFE



# -- scalar fields ------------------------------------------------------------------------


def _number(record: JsonObject, key: str, where: _Where) -> float | None:
    """A number, a no-value wrapper object, or absent/null; sentinels become None."""
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        raise where.error(f"expected a number, got {value!r}", key)
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:  # Slurm's numbers here are unsigned
            raise where.error(f"expected a finite number >= 0, got {value!r}", key)
        return None if value >= _NO_VAL_32 else float(value)
    if isinstance(value, dict) and "number" in value:
        if not value.get("set", True) or value.get("infinite", False):
            return None
        return _number(value, "number", where)
    raise where.error(f"expected a number, got {json.dumps(value)[:60]}", key)


def _int(record: JsonObject, key: str, where: _Where) -> int | None:
    value = _number(record, key, where)
    return None if value is None else int(value)


def _signed(record: JsonObject, key: str, where: _Where) -> int | None:
    """A number that may be negative (a job's nice: an admin may set it below 0). 22.05
    prints a negative nice as its 32-bit two's complement (``Nice=-100`` shows 4294967196,
    measured on the dev cluster): read back as the negative number it is."""
    value = record.get(key)
    if isinstance(value, dict) and "number" in value:
        if not value.get("set", True) or value.get("infinite", False):
            return None
        return _signed(value, "number", where)
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        if not math.isfinite(value):
            raise where.error(f"expected a finite number, got {value!r}", key)
        return int(value)
    return _as_int32(_int(record, key, where))


def _as_int32(value: int | None) -> int | None:
    return value - 2**32 if value is not None and value >= 2**31 else value


def _time(record: JsonObject, key: str, where: _Where) -> float | None:
    """A Unix time; 0 means "not set" in the 22.05 layout."""
    value = _number(record, key, where)
    return value if value else None


def _text(record: JsonObject, key: str, where: _Where) -> str:
    value = record.get(key)
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    raise where.error(f"expected text, got {json.dumps(value)[:60]}", key)


def _required(record: JsonObject, key: str, where: _Where) -> object:
    if key not in record:
        raise where.error("field missing", key)
    return record[key]


def _strings(record: JsonObject, key: str, where: _Where) -> tuple[str, ...]:
    """A list of strings, or one comma-separated string (22.05 CSV fields)."""
    value = record.get(key)
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        return tuple(part for part in value.split(",") if part)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise where.error(f"expected a list of names, got {json.dumps(value)[:60]}", key)


def _hostlist(text: str, where: _Where, key: str) -> tuple[str, ...]:
    if not text or text in ("(null)", "None"):
        return ()
    if "[" not in text:  # a plain comma list needs no hostlist expansion
        return tuple(p for p in text.split(",") if p)
    try:
        return expand(text)
    except HostlistError as exc:
        raise where.error(f"bad node list {text!r}: {exc}", key) from exc


def _states(value: object, flags: object, where: _Where, key: str) -> tuple[str, ...]:
    """Base state first, then flags, all upper case (``"idle"`` + ``["DRAIN"]`` or a list)."""
    if isinstance(value, str) and value:
        base: list[str] = [value.upper()]
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        base = [v.upper() for v in value]
    else:
        raise where.error(f"expected a state, got {json.dumps(value)[:60]}", key)
    extra = flags if isinstance(flags, list) else []
    return tuple(base + [str(f).upper() for f in extra if str(f).upper() not in base])


# -- jobs ---------------------------------------------------------------------------------


def _exit_code(record: JsonObject, where: _Where) -> int | None:
    """The process exit code: raw wait status (22.05) or a return_code object (24.x)."""
    value = record.get("exit_code")
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value >> 8 if value & 0x7F == 0 else 128 + (value & 0x7F)
    if isinstance(value, dict):
        code = _int(value, "return_code", where)
        signal = value.get("signal")
        sig = _int(signal, "id", where) if isinstance(signal, dict) else None
        return 128 + sig if sig else code
    raise where.error(f"expected an exit code, got {json.dumps(value)[:60]}", "exit_code")


def _job_state(record: JsonObject, where: _Where) -> tuple[str, tuple[str, ...]]:
    states = _states(_required(record, "job_state", where), None, where, "job_state")
    if states[0] not in KNOWN_JOB_STATES:
        raise where.error(f"unknown job state {states[0]!r}", "job_state")
    return states[0], states[1:]


def _job_id(record: JsonObject, where: _Where) -> str:
    value = _required(record, "job_id", where)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return str(value)
    raise where.error(f"bad job id {value!r}", "job_id")


def _check_gpu_text(text: str, where: _Where, key: str) -> str:
    try:
        gpu_counts(text)
    except GresFormatError as exc:
        raise where.error(str(exc), key) from exc
    return text


def _gpu_field(record: JsonObject, key: str, where: _Where) -> str:
    return _check_gpu_text(_text(record, key, where), where, key)


def _nodes_field(record: JsonObject, key: str, where: _Where) -> tuple[str, ...]:
    return _hostlist(_text(record, key, where), where, key)


def _flag(record: JsonObject, key: str, where: _Where) -> bool:
    value = record.get(key, False)
    if not isinstance(value, bool):
        raise where.error(f"expected true or false, got {json.dumps(value)[:60]}", key)
    return value


def _array_pending(record: JsonObject, where: _Where) -> bool:
    """A pending array meta-record stands for many not-yet-split tasks."""
    task_string = _text(record, "array_task_string", where)
    return bool(task_string) and _number(record, "array_task_id", where) is None


def parse_job(record: JsonObject, index: int, source: str) -> SlurmJob:
    where = _Where(source, f"job #{index}")
    job_id = _job_id(record, where)
    where.record = f"job {job_id}"
    state, flags = _job_state(record, where)
    limit = _number(record, "time_limit", where)
    return SlurmJob(
        job_id=job_id,
        name=_text(record, "name", where),
        user=_text(record, "user_name", where) or str(record.get("user_id", "")),
        partition=_text(record, "partition", where),
        state=state,
        state_flags=flags,
        reason=_text(record, "state_reason", where),
        priority=_int(record, "priority", where),
        submit_time=_time(record, "submit_time", where),
        eligible_time=_time(record, "eligible_time", where),
        start_time=_time(record, "start_time", where),
        end_time=_time(record, "end_time", where),
        time_limit_s=None if limit is None else limit * 60.0,
        node_count=_int(record, "node_count", where),
        tasks=_int(record, "tasks", where),
        nodes=_nodes_field(record, "nodes", where),
        required_nodes=_nodes_field(record, "required_nodes", where),
        excluded_nodes=_nodes_field(record, "excluded_nodes", where),
        features=_text(record, "features", where),
        reservation=_text(record, "resv_name", where),
        tres_per_node=_gpu_field(record, "tres_per_node", where),
        tres_per_job=_gpu_field(record, "tres_per_job", where),
        tres_per_task=_gpu_field(record, "tres_per_task", where),
        gres_detail=_strings(record, "gres_detail", where),
        admin_comment=_text(record, "admin_comment", where),
        comment=_text(record, "comment", where),
        requeue=_flag(record, "requeue", where),
        exit_code=_exit_code(record, where),
        array_pending=_array_pending(record, where),
        het_job=bool(_int(record, "het_job_id", where)),
        nice=_signed(record, "nice", where) or 0,  # 22.05 shows 0 as null
    )


def parse_jobs(text: str, source: str = "squeue --json") -> JobsReport:
    """Every job record of the document. One record that cannot be read (a GRES count that
    is no number, an oversized host list) is left out and named in ``unreadable``: failing
    the whole document would skip the cycle, let the heartbeat go stale and stop deferral for
    everyone because of one job. A document that is not squeue's at all still raises."""
    plain = _plain_jobs(text, source)
    return plain if plain is not None else general_jobs(text, source)


def general_jobs(text: str, source: str) -> JobsReport:
    """:func:`parse_jobs` without its fast path (which gives the same result, or none)."""
    doc = load_document(text, source)
    meta = parse_meta(doc, source)
    records = _list_of_objects(doc, "jobs", _Where(source))
    jobs: list[SlurmJob] = []
    unreadable: list[str] = []
    for index, record in enumerate(records):
        try:
            jobs.append(parse_job(record, index, source))
        except SlurmOutputError as exc:
            unreadable.append(str(exc))
    return JobsReport(meta, tuple(jobs), tuple(unreadable))


def _list_of_objects(doc: JsonObject, key: str, where: _Where) -> list[JsonObject]:
    items = doc.get(key)
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise where.error(f"missing '{key}' list", key)
    return items


# -- nodes --------------------------------------------------------------------------------


def _gres_text(value: object, where: _Where, key: str) -> str:
    if not isinstance(value, str):
        raise where.error(f"expected a GRES string, got {json.dumps(value)[:60]}", key)
    return _check_gpu_text(value, where, key)


def parse_flat_node(record: JsonObject, index: int, source: str) -> SlurmNode:
    """A node in the ``nodes`` list (22.05 sinfo/scontrol, 23.02+ scontrol --json)."""
    where = _Where(source, f"node #{index}")
    name = _required(record, "name", where)
    if not isinstance(name, str) or not name:
        raise where.error(f"bad node name {name!r}", "name")
    where.record = f"node {name}"
    states = _states(_required(record, "state", where), record.get("state_flags"), where, "state")
    return SlurmNode(
        name=name,
        states=states,
        gres=_gres_text(_required(record, "gres", where), where, "gres"),
        gres_used=_gres_text(record.get("gres_used") or "", where, "gres_used"),
        partitions=_strings(record, "partitions", where),
        features=_strings(record, "active_features", where) or _strings(record, "features", where),
    )


def _nested(record: JsonObject, path: str, where: _Where) -> object:
    value: object = record
    for part in path.split("/"):
        if not isinstance(value, dict) or part not in value:
            raise where.error("field missing", path)
        value = value[part]
    return value


def parse_grouped_nodes(record: JsonObject, index: int, source: str) -> list[SlurmNode]:
    """One ``sinfo`` record (23.11+): several nodes that sinfo grouped as identical."""
    where = _Where(source, f"sinfo record #{index}")
    names = _nested(record, "nodes/nodes", where)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise where.error("expected a list of node names", "nodes/nodes")
    states = _states(_nested(record, "node/state", where), None, where, "node/state")
    gres = _gres_text(_nested(record, "gres/total", where), where, "gres/total")
    used = _gres_text(_nested(record, "gres/used", where), where, "gres/used")
    partition = record.get("partition")
    part_name = partition.get("name") if isinstance(partition, dict) else None
    parts = (part_name,) if isinstance(part_name, str) and part_name else ()
    return [SlurmNode(n, states, gres, used, parts) for n in _expand_names(names, where)]


def _expand_names(names: list[str], where: _Where) -> list[str]:
    expanded: list[str] = []
    for name in names:
        expanded.extend(_hostlist(name, where, "nodes/nodes"))
    return expanded


def parse_nodes(text: str, source: str = "sinfo --json") -> NodesReport:
    plain = _plain_nodes(text, source)
    return plain if plain is not None else general_nodes(text, source)


def general_nodes(text: str, source: str) -> NodesReport:
    """:func:`parse_nodes` without its fast path (which gives the same result, or none)."""
    doc = load_document(text, source)
    meta = parse_meta(doc, source)
    where = _Where(source)
    if "nodes" in doc:
        records = _list_of_objects(doc, "nodes", where)
        nodes = [parse_flat_node(r, i, source) for i, r in enumerate(records)]
    elif "sinfo" in doc:
        groups = _list_of_objects(doc, "sinfo", where)
        nodes = [n for i, r in enumerate(groups) for n in parse_grouped_nodes(r, i, source)]
    else:
        raise where.error("neither a 'nodes' nor a 'sinfo' list")
    return NodesReport(meta, merge_partitions(nodes))


# -- the fast path: a well-formed 22.05 document ------------------------------------------
# msgspec decodes only the fields parse_job and parse_flat_node read, typed as 22.05 writes
# them (openapi/v0.0.38); the ~80 other keys of a job record are skipped unbuilt. Nothing
# here is an error: a document it does not take whole (another layout, a mistyped or
# out-of-range value, one unreadable record, bad JSON) returns None and goes to the general
# path above, which reads it as before and words every message. So a value is only let
# through here when the general path would read it to the same result.

_Unsigned = Annotated[int, msgspec.Meta(ge=0)] | None  # _number refuses negative numbers
_Text = str | None  # _text: null reads as ""
_Names = list[str] | str | None  # _strings


class _PlainJob(msgspec.Struct):
    job_id: Annotated[int, msgspec.Meta(gt=0)]
    job_state: str
    name: _Text = None
    user_name: _Text = None
    user_id: Any = ""  # only ever read as str(value)
    partition: _Text = None
    state_reason: _Text = None
    priority: _Unsigned = None
    submit_time: _Unsigned = None
    eligible_time: _Unsigned = None
    start_time: _Unsigned = None
    end_time: _Unsigned = None
    time_limit: _Unsigned = None
    node_count: _Unsigned = None
    tasks: _Unsigned = None
    nodes: _Text = None
    required_nodes: _Text = None
    excluded_nodes: _Text = None
    features: _Text = None
    resv_name: _Text = None
    tres_per_node: _Text = None
    tres_per_job: _Text = None
    tres_per_task: _Text = None
    gres_detail: _Names = None
    admin_comment: _Text = None
    comment: _Text = None
    requeue: bool = False
    exit_code: int | None = None
    array_task_string: _Text = None
    array_task_id: _Unsigned = None
    het_job_id: _Unsigned = None
    nice: int | None = None  # an admin may set it below 0


class _PlainNode(msgspec.Struct):
    name: str
    state: str
    gres: str
    state_flags: list[str] | None = None
    gres_used: _Text = None
    partitions: _Names = None
    active_features: _Names = None
    features: _Names = None


class _PlainJobs(msgspec.Struct):
    jobs: list[_PlainJob]
    meta: Any = None
    errors: Any = None


class _PlainNodes(msgspec.Struct):
    nodes: list[_PlainNode]
    meta: Any = None
    errors: Any = None


_JOBS = msgspec.json.Decoder(_PlainJobs)
_NODES = msgspec.json.Decoder(_PlainNodes)
# SlurmJob's fields in the order _plain_job gives them: it builds each job positionally (by
# keyword took 5 us more a job). A SlurmJob with other fields turns the fast path off (and
# tests/test_slurm_parse.py fails) until _plain_job gives them too.
_JOB_FIELDS = (
    "job_id", "name", "user", "partition", "state", "state_flags", "reason", "priority",
    "submit_time", "eligible_time", "start_time", "end_time", "time_limit_s", "node_count",
    "tasks", "nodes", "required_nodes", "excluded_nodes", "features", "reservation",
    "tres_per_node", "tres_per_job", "tres_per_task", "gres_detail", "admin_comment",
    "comment", "requeue", "exit_code", "array_pending", "het_job", "nice",
)
FAST_JOBS = tuple(f.name for f in dataclasses.fields(SlurmJob)) == _JOB_FIELDS


class _NotPlain(Exception):
    """A value the general path is to judge."""


def _plain_meta(doc: _PlainJobs | _PlainNodes, source: str) -> SlurmMeta:
    if isinstance(doc.errors, list) and doc.errors:
        raise _NotPlain
    return parse_meta({"meta": doc.meta}, source)


def _plain_jobs(text: str, source: str) -> JobsReport | None:
    if not FAST_JOBS:
        return None
    try:
        doc = _JOBS.decode(text)
        meta = _plain_meta(doc, source)
        where = _Where(source)
        return JobsReport(meta, tuple([_plain_job(r, where) for r in doc.jobs]))
    except (msgspec.DecodeError, RecursionError, SlurmOutputError, GresFormatError, _NotPlain):
        return None


def _plain_nodes(text: str, source: str) -> NodesReport | None:
    try:
        doc = _NODES.decode(text)
        meta = _plain_meta(doc, source)
        where = _Where(source)
        return NodesReport(meta, merge_partitions([_plain_node(r, where) for r in doc.nodes]))
    except (msgspec.DecodeError, RecursionError, SlurmOutputError, _NotPlain):
        return None


def _plain_job(r: _PlainJob, where: _Where) -> SlurmJob:
    state = r.job_state.upper()
    if state not in KNOWN_JOB_STATES:
        raise _NotPlain
    for text in (r.tres_per_node, r.tres_per_job, r.tres_per_task):
        if text:
            gpu_counts(text)  # GresFormatError: the general path names the field
    limit, code = _plain_int(r.time_limit), r.exit_code
    return new_job(
        str(r.job_id), r.name or "", r.user_name or str(r.user_id), r.partition or "", state,
        (), r.state_reason or "", _plain_int(r.priority), _plain_time(r.submit_time),
        _plain_time(r.eligible_time), _plain_time(r.start_time), _plain_time(r.end_time),
        None if limit is None else limit * 60.0, _plain_int(r.node_count),
        _plain_int(r.tasks), _hostlist(r.nodes, where, "") if r.nodes else (),
        _hostlist(r.required_nodes, where, "") if r.required_nodes else (),
        _hostlist(r.excluded_nodes, where, "") if r.excluded_nodes else (),
        r.features or "", r.resv_name or "", r.tres_per_node or "", r.tres_per_job or "",
        r.tres_per_task or "", _plain_names(r.gres_detail), r.admin_comment or "",
        r.comment or "", r.requeue,
        None if code is None else (code >> 8 if code & 0x7F == 0 else 128 + (code & 0x7F)),
        bool(r.array_task_string) and _plain_int(r.array_task_id) is None,
        bool(_plain_int(r.het_job_id)), _as_int32(_plain_int(r.nice)) or 0,
    )


def _plain_int(value: int | None) -> int | None:
    return None if value is None or value >= _NO_VAL_32 else value


def _plain_time(value: int | None) -> float | None:
    """As _time: 0 and the sentinels are "not set"."""
    return float(value) if value and value < _NO_VAL_32 else None


def _plain_names(value: list[str] | str | None) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(value)
    return tuple(part for part in value.split(",") if part) if value else ()


def _plain_node(r: _PlainNode, where: _Where) -> SlurmNode:
    if not r.name:
        raise _NotPlain
    return SlurmNode(
        name=r.name,
        states=_states(r.state, r.state_flags, where, "state"),
        gres=_check_gpu_text(r.gres, where, "gres"),
        gres_used=_check_gpu_text(r.gres_used or "", where, "gres_used"),
        partitions=_plain_names(r.partitions),
        features=_plain_names(r.active_features) or _plain_names(r.features),
    )
