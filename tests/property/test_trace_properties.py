"""Generated and mutated traces through the real readers (``load_trace``), every format.

Whatever the file holds, a reader either refuses it with one :class:`InputError` line that
names the file (and the line, when there is one), or returns a trace whose every value is
in range: GPU counts from 1 to MAX_JOB_GPUS, finite times on the trace clock, durations and
time limits finite and bounded, node shapes that add up. Never another exception, never a
hang (each read is bounded by an alarm).
"""

from __future__ import annotations

import gzip
import math
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from slurm_rl.errors import InputError
from slurm_rl.traces import FAMILIES, KNOWN_GPU_TYPES, Trace, load_trace
from slurm_rl.traces.model import MAX_DURATION_SECONDS, MAX_JOB_GPUS, in_clock_range
from tests.property._support import (
    NASTY_WORDS,
    assert_one_line,
    budget,
    nasty_text,
    outcome,
    within,
)

FIXTURE = Path(__file__).parent.parent / "fixtures" / "traces" / "helios_cluster_log.csv"


@dataclass(frozen=True)
class Base:
    """A valid trace of one format, as rows of fields (header first for CSV formats)."""

    fmt: str
    comments: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    separator: str = ","


def _csv(fmt: str, text: str, *comments: str) -> Base:
    rows = tuple(tuple(line.split(",")) for line in text.strip().splitlines())
    return Base(fmt, comments, rows)


def _split_rows(*lines: str) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(line.split()) for line in lines)


BASES = (
    _csv("philly", """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 07:02:10,3600,8,28800,2bc77e
2017-10-10 11:00:00,12.5,2,25,11cb48"""),
    Base("helios", (), tuple(tuple(line.split(",")) for line in
                             FIXTURE.read_text().strip().splitlines())),
    _csv("helios-venus-slice", """job_id,user,tenant,class,submit_time,num_chips,chip_type,num_nodes,duration_s,walltime_limit_s,final_status
1,u1,vcA,finetune,0,16,,2,60,60,COMPLETED
2,u2,vcB,train,5000000,1,,1,3600,3600,FAILED
3,u1,vcA,train,9000000,0,,1,10,10,COMPLETED""", "# Venus slice", "# two VCs"),  # noqa: E501
    _csv("pai2023", """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p1,1000,2048,1,1000,V100M32,LS,Running,0,100,5
p2,1000,2048,2,1000,,BE,Succeeded,10,500,20
p3,1000,2048,0,0,,BE,Succeeded,10,500,20
p4,1000,2048,1,500,A10|T4,LS,Pending,30,40,"""),  # noqa: E501
    Base("swf", ("; UnixStartTime: 1000000000", "; TimeZoneString: America/New_York",
                 "; Computer: test"),
         _split_rows("1 0 -1 10 4 -1 -1 -1 7200 -1 1 3 1 -1 1 1 -1 -1",
                     "2 20 -1 100 -1 -1 -1 2 -1 -1 1 4 1 -1 1 2 -1 -1",
                     "3 30 5 50 8 -1 -1 8 600 -1 0 3 1 -1 1 1 -1 -1"), " "),
    _csv("csv", """job_id,submit_time,num_gpus,duration,user,partition,num_nodes,gpus_per_node,gpu_type,time_limit,model_family
a,0,1,60,alice,p1,,,,,
b,2017-10-01T00:00:10,8,3600,bob,p2,2,4,V100,7200,imagenet
c,100,2,5,,,1,,A100,,bert""", "# reference_gpu: V100"),  # noqa: E501
)


# ----- mutations --------------------------------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn, base: Base) -> bytes:
    """``base`` with a few of its fields, rows or header columns replaced, removed or
    repeated, then perhaps cut short, with stray bytes, and gzip-compressed."""
    rows = [list(row) for row in base.rows]
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["replace", "replace", "replace", "drop field", "repeat field",
                                   "drop row", "repeat row", "raw line"]))
        r = draw(st.integers(0, len(rows) - 1)) if rows else 0
        if op == "drop row" and rows:
            del rows[r]
        elif op == "repeat row" and rows:
            rows.insert(r, list(rows[r]))
        elif op == "raw line":
            rows.insert(r, [draw(nasty_text())])
        elif rows and rows[r]:
            f = draw(st.integers(0, len(rows[r]) - 1))
            if op == "replace":
                rows[r][f] = draw(nasty_text())
            elif op == "drop field":
                del rows[r][f]
            else:
                rows[r].insert(f, rows[r][f])
    lines = [*base.comments, *(base.separator.join(row) for row in rows)]
    data = ("\n".join(lines) + draw(st.sampled_from(["\n", "", "\r\n"]))).encode("utf-8", "replace")
    if draw(st.booleans()):  # stray bytes: invalid UTF-8, NULs, a BOM
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(max_size=8)) + data[at:]
    compress = draw(st.booleans())
    if compress:
        data = gzip.compress(data, mtime=0)
    if draw(st.integers(0, 4)) == 0:  # a truncated file (or truncated gzip stream)
        data = data[: draw(st.integers(0, len(data)))]
    return data


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# ----- what a reader may answer -------------------------------------------------------------------


def check_read(path: Path, fmt: str | None, skip_bad_rows: bool) -> Trace | None:
    """Read ``path``; a refusal must be one line naming the file, a trace must be in range."""
    try:
        trace = within(lambda: load_trace(path, fmt, skip_bad_rows=skip_bad_rows),
                       f"load_trace({fmt})")
    except InputError as error:
        assert_one_line(str(error), str(path))
        assert str(error).startswith(str(path)), str(error)
        if error.line is not None:
            assert error.line >= 1 and str(error).startswith(f"{path}:{error.line}")
        outcome("refused")
        return None
    outcome("read, some rows skipped" if trace.skipped else "read")
    check_trace(trace, skip_bad_rows)
    return trace


def check_trace(trace: Trace, skip_bad_rows: bool) -> None:
    assert trace.jobs, "a trace without jobs must be refused"
    for job in trace.jobs:
        assert isinstance(job.job_id, str) and job.job_id.strip(), job
        assert isinstance(job.num_gpus, int) and 1 <= job.num_gpus <= MAX_JOB_GPUS, job
        assert in_clock_range(job.submit_time), job
        duration = job.oracle_duration
        assert duration is not None and math.isfinite(duration), job
        assert 0 <= duration <= MAX_DURATION_SECONDS, job
        limit = job.time_limit
        assert limit is not None and math.isfinite(limit) and limit > 0, job
        nodes, per_node = job.num_nodes, job.gpus_per_node
        assert nodes is None or 1 <= nodes <= job.num_gpus, job
        assert per_node is None or (1 <= per_node <= job.num_gpus
                                    and job.num_gpus % per_node == 0), job
        if nodes is not None and per_node is not None:
            assert nodes * per_node == job.num_gpus, job
        assert job.gpu_type is None or job.gpu_type in KNOWN_GPU_TYPES, job
        assert job.model_family in FAMILIES, job
    assert all(isinstance(n, int) and n > 0 for n in trace.skipped.values())
    if not skip_bad_rows:  # only rows that are valid but no GPU job may be left out
        assert set(trace.skipped) <= {"no GPU", "never started", "never scheduled"}


def test_every_base_trace_is_valid(tmp_path: Path) -> None:
    for base in BASES:
        data = "\n".join([*base.comments, *(base.separator.join(r) for r in base.rows)]) + "\n"
        path = _write(tmp_path, f"base-{base.fmt}", data.encode())
        trace = check_read(path, None, False)
        assert trace is not None and len(trace) >= 2, base.fmt
        assert check_read(path, base.fmt, False) == trace


@budget(600)
@given(data=st.data())
def test_mutated_traces_fail_in_one_line_or_read_in_range(
    tmp_path: Path, data: st.DataObject
) -> None:
    base = data.draw(st.sampled_from(BASES), label="format")
    path = _write(tmp_path, "trace", data.draw(mutated(base), label="file"))
    skip = data.draw(st.booleans(), label="skip_bad_rows")
    check_read(path, base.fmt, skip)
    if data.draw(st.booleans(), label="also detect the format"):
        check_read(path, None, skip)


@budget(100)
@given(data=st.data(), junk=st.binary(max_size=300))
def test_arbitrary_bytes_fail_in_one_line(tmp_path: Path, data: st.DataObject,
                                          junk: bytes) -> None:
    path = _write(tmp_path, "junk", junk)
    check_read(path, data.draw(st.sampled_from([None, *(b.fmt for b in BASES)])), False)


# ----- generated valid traces read back exactly -------------------------------------------------

_NAME = st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=12)


@st.composite
def schema_jobs(draw: st.DrawFn) -> list[dict[str, object]]:
    ids = draw(st.lists(_NAME, min_size=1, max_size=8, unique=True))
    jobs = []
    for job_id in ids:
        gpus = draw(st.integers(1, MAX_JOB_GPUS))
        per_node = draw(st.one_of(st.none(), st.sampled_from(
            [d for d in (1, 2, 4, 8, gpus) if gpus % d == 0])))
        jobs.append({
            "job_id": job_id,
            "submit_time": draw(st.floats(-4e9, 4e9, allow_nan=False)),
            "num_gpus": gpus,
            "duration": draw(st.floats(0, MAX_DURATION_SECONDS, allow_nan=False)),
            "gpus_per_node": per_node,
            "gpu_type": draw(st.one_of(st.none(), st.sampled_from(KNOWN_GPU_TYPES))),
            "time_limit": draw(st.one_of(st.none(), st.floats(1e-3, MAX_DURATION_SECONDS))),
            "model_family": draw(st.sampled_from(["", *FAMILIES])),
        })
    return jobs


@budget(150)
@given(jobs=schema_jobs(), compress=st.booleans())
def test_generated_schema_traces_read_back_exactly(
    tmp_path: Path, jobs: list[dict[str, object]], compress: bool
) -> None:
    columns = list(jobs[0])
    lines = [",".join(columns)] + [
        ",".join("" if job[c] is None else repr(job[c]) if isinstance(job[c], float)
                 else str(job[c]) for c in columns) for job in jobs]
    data = ("\n".join(lines) + "\n").encode()
    path = _write(tmp_path, "jobs.csv", gzip.compress(data) if compress else data)
    trace = check_read(path, None, False)
    assert trace is not None
    read = {job.job_id: job for job in trace.jobs}
    assert len(read) == len(jobs)
    for job in jobs:
        got = read[str(job["job_id"])]
        assert (got.submit_time, got.num_gpus, got.oracle_duration, got.gpus_per_node,
                got.gpu_type) == (job["submit_time"], job["num_gpus"], job["duration"],
                                  job["gpus_per_node"], job["gpu_type"])
        if job["time_limit"] is not None:
            assert got.time_limit == job["time_limit"]
        if job["model_family"]:
            assert got.model_family == job["model_family"]


def test_the_nasty_words_are_each_refused_or_read_in_range(tmp_path: Path) -> None:
    """Every nasty word in every field of every format, one at a time (no draw needed)."""
    for base in BASES:
        row = 0 if base.fmt == "swf" else 1  # the first job's row
        if True:
            for field in range(len(base.rows[row])):
                for word in NASTY_WORDS:
                    rows = [list(r) for r in base.rows]
                    rows[row][field] = word
                    text = "\n".join([*base.comments,
                                      *(base.separator.join(r) for r in rows)]) + "\n"
                    path = _write(tmp_path, "one", text.encode("utf-8", "replace"))
                    check_read(path, base.fmt, False)
