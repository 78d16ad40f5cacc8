"""Bad trace input: one clear line naming file, line and column; or counted when skipping."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from slurm_rl.errors import InputError
from slurm_rl.traces import FORMATS, Trace, load_trace, parse_window, window
from tests.timebox import time_limit

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster"
GOOD_PHILLY_ROW = "2017-10-09 07:01:55,66.0,1,66.0,11cb48"
SCHEMA_HEADER = "job_id,submit_time,num_gpus,duration"
VENUS_HEADER = (
    "job_id,user,tenant,class,submit_time,num_chips,chip_type,num_nodes,duration_s,"
    "walltime_limit_s,final_status"
)
HELIOS_HEADER = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"
)
SWF_ROW = "1 0 -1 10 4 -1 -1 -1 -1 -1 -1 1 1 -1 -1 -1 -1 -1"


def write(tmp_path: Path, name: str, *lines: str) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def expect_error(
    path: Path, line: int | None, column: str | None, text: str, fmt: str | None = None
) -> InputError:
    with pytest.raises(InputError) as caught:
        load_trace(path, fmt)
    error = caught.value
    message = str(error)
    assert "\n" not in message
    assert (error.path, error.line, error.column) == (str(path), line, column), message
    where = f"{path}:{line}" if line is not None else f"{path}"
    assert message.startswith(where), message
    assert text in message, message
    return error


def philly(tmp_path: Path, *rows: str) -> Path:
    return write(tmp_path, "philly.csv", PHILLY_HEADER, GOOD_PHILLY_ROW, *rows)


# --- one error per kind -------------------------------------------------------------------------


@pytest.mark.parametrize("kept", [0.5, 0.99])
def test_truncated_gzip(tmp_path: Path, kept: float) -> None:
    rows = [f"2017-10-{1 + i % 28:02d} 07:{i % 60:02d}:55,{i}.0,1,{i}.0,c{i}" for i in range(4000)]
    packed = gzip.compress(("\n".join([PHILLY_HEADER, *rows]) + "\n").encode())
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(packed[: int(len(packed) * kept)])
    with pytest.raises(InputError) as caught:
        load_trace(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}:")
    assert message.endswith("the compressed data ends early (truncated gzip file)")
    # the line being read when the data ran out: past the header, before the end
    assert caught.value.line is not None and 1 < caught.value.line < 4002


def test_gzip_without_its_trailer(tmp_path: Path) -> None:
    packed = gzip.compress(("\n".join([PHILLY_HEADER, GOOD_PHILLY_ROW]) + "\n").encode())
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(packed[:-4])
    expect_error(path, 3, None, "truncated gzip file")


def test_corrupt_gzip(tmp_path: Path) -> None:
    packed = bytearray(gzip.compress(("\n".join([PHILLY_HEADER, GOOD_PHILLY_ROW]) + "\n").encode()))
    packed[-8] ^= 0xFF  # the CRC
    path = tmp_path / "bad.csv.gz"
    path.write_bytes(bytes(packed))
    with pytest.raises(InputError, match=r"corrupt gzip data"):
        load_trace(path, "philly")


def test_truncated_last_row(tmp_path: Path) -> None:
    path = philly(tmp_path, "2017-10-09 07:01:55,66.0")
    expect_error(path, 3, "num_gpus", "row has 2 of 5 fields (truncated row?)")


def test_missing_column(tmp_path: Path) -> None:
    path = write(
        tmp_path, "p.csv", "timestamp,num_gpus,gpu_time,cluster", "2017-10-09 07:01:55,1,6,c"
    )
    expect_error(path, 1, "duration", "missing column 'duration'")


def test_missing_column_with_explicit_format(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", "name,num_gpu,creation_time,deletion_time", "a,1,0,5")
    expect_error(path, 1, "scheduled_time", "missing column 'scheduled_time'", "pai2023")


def test_column_named_twice(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", f"{SCHEMA_HEADER},duration", "a,0,1,5,6")
    expect_error(path, 1, "duration", "column 'duration' appears more than once")


def test_negative_duration(tmp_path: Path) -> None:
    expect_error(
        philly(tmp_path, "2017-10-09 07:01:55,-5,1,-5,c"), 3, "duration", "negative duration"
    )


def test_non_numeric_duration(tmp_path: Path) -> None:
    path = philly(tmp_path, "2017-10-09 07:01:55,nan,1,1,c")
    expect_error(path, 3, "duration", "duration is not finite")


def test_non_numeric_gpu_count(tmp_path: Path) -> None:
    path = philly(tmp_path, "2017-10-09 07:01:55,5,one,5,c")
    expect_error(path, 3, "num_gpus", "GPU count is not a number: 'one'")


def test_fractional_gpu_count(tmp_path: Path) -> None:
    path = philly(tmp_path, "2017-10-09 07:01:55,5,1.5,5,c")
    expect_error(path, 3, "num_gpus", "not a whole number")


@pytest.mark.parametrize("count", ["0", "-2"])
def test_gpu_count_not_positive(tmp_path: Path, count: str) -> None:
    path = philly(tmp_path, f"2017-10-09 07:01:55,5,{count},5,c")
    expect_error(path, 3, "num_gpus", f"GPU count must be at least 1, got {count}")


def test_unparsable_timestamp(tmp_path: Path) -> None:
    path = philly(tmp_path, "2017-10-09 7h,5,1,5,c")
    expect_error(path, 3, "timestamp", "unparsable timestamp '2017-10-09 7h'")


def test_unparsable_timestamp_in_our_schema(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", SCHEMA_HEADER, "a,yesterday,1,5")
    expect_error(path, 2, "submit_time", "unparsable timestamp 'yesterday'")


def test_empty_trace_header_only(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PHILLY_HEADER, "")
    expect_error(path, None, None, "the trace has no jobs")


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "void.csv"
    path.write_bytes(b"")
    expect_error(path, 1, None, "the file is empty")


def test_unknown_gpu_type(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", f"{SCHEMA_HEADER},gpu_type", "a,0,1,5,A100", "b,0,1,5,Z100")
    expect_error(path, 3, "gpu_type", "unknown GPU type 'Z100' (known: K80")


def test_unknown_column_in_our_schema(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", f"{SCHEMA_HEADER},time_limt", "a,0,1,5,60")
    expect_error(path, 1, "time_limt", "unknown column 'time_limt'")


def test_unknown_reference_gpu(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "# reference_gpu: GTX9000", SCHEMA_HEADER, "a,0,1,5")
    expect_error(path, 1, None, "unknown reference GPU type 'GTX9000'")


def test_unknown_model_family(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", f"{SCHEMA_HEADER},model_family", "a,0,1,5,resnet")
    expect_error(path, 2, "model_family", "unknown model family 'resnet'")


def test_inconsistent_shape(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", f"{SCHEMA_HEADER},num_nodes,gpus_per_node", "a,0,8,5,2,2")
    expect_error(path, 2, "gpus_per_node", "num_nodes x gpus_per_node = 4, but num_gpus = 8")


def test_duplicate_job_id(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", SCHEMA_HEADER, "a,0,1,5", "b,0,1,5", "a,9,1,5")
    expect_error(path, 4, "job_id", "duplicate job id 'a' (first on line 2)")


def test_extra_fields(tmp_path: Path) -> None:
    expect_error(philly(tmp_path, f"{GOOD_PHILLY_ROW},surplus"), 3, None, "row has 6 fields")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_bytes(
        f"{PHILLY_HEADER}\n{GOOD_PHILLY_ROW}\n".encode() + b"2017-10-09 07:01:55,1,1,1,\xff\n"
    )
    expect_error(path, 3, None, "not UTF-8 text")


def test_no_such_file_and_unknown_layout(tmp_path: Path) -> None:
    expect_error(tmp_path / "absent.csv", None, None, "no such file")
    expect_error(
        write(tmp_path, "x.csv", "foo,bar", "1,2"), 1, None, "cannot tell the trace format"
    )


# --- other formats report the same way ----------------------------------------------------------


def test_pai_negative_residence(tmp_path: Path) -> None:
    header = "name,num_gpu,gpu_milli,pod_phase,creation_time,deletion_time,scheduled_time"
    path = write(tmp_path, "pods.csv", header, "p1,1,1000,Running,0,10,5", "p2,1,1000,Failed,0,3,5")
    expect_error(path, 3, "deletion_time", "negative duration")


def test_swf_truncated_row(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "log.swf",
        "; UnixStartTime: 0",
        "1 0 -1 10 4 -1 -1 -1 -1 -1 -1 1 1 -1 -1 -1 -1 -1",
        "2 5 -1 10 4 -1 -1 -1",
    )
    expect_error(path, 3, "requested_time", "row has 8 of 18 fields")


def test_swf_unknown_run_time(tmp_path: Path) -> None:
    path = write(tmp_path, "log.swf", "; x", "1 0 -1 -1 4 -1 -1 -1 -1 -1 -1 1 1 -1 -1 -1 -1 -1")
    expect_error(path, 2, "run_time", "run time is unknown (-1)")


def test_helios_non_numeric_gpu_count(tmp_path: Path) -> None:
    row = "1,u,vc,x,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 18:42:01,60,0"
    path = write(tmp_path, "log.csv", HELIOS_HEADER, row)
    expect_error(path, 2, "gpu_num", "GPU count is not a number")


def test_venus_slice_bad_submit_time(tmp_path: Path) -> None:
    rows = (
        "1,u,vcA,finetune,5000000,8,,1,60,60,COMPLETED",
        "2,u,vcA,finetune,soon,8,,1,60,60,FAILED",
    )
    path = write(tmp_path, "slice.csv", "# a comment", VENUS_HEADER, *rows)
    expect_error(path, 4, "submit_time", "unparsable timestamp 'soon'")


# --- skipping bad rows ----------------------------------------------------------------------------


def test_skip_bad_rows_counts_each_reason(tmp_path: Path) -> None:
    path = philly(
        tmp_path,
        "2017-10-09 07:01:55,-5,1,-5,c",
        "2017-10-09 07:01:55,5,one,5,c",
        "2017-10-09 07:01:55,5,0,5,c",
        "2017-10-09 07:01:55,5,-1,5,c",
        "2017-10-09 7h,5,1,5,c",
        GOOD_PHILLY_ROW,
        "2017-10-09 07:01:55,66.0",
    )
    trace = load_trace(path, skip_bad_rows=True)
    assert [job.job_id for job in trace.jobs] == ["philly-2", "philly-8"]
    assert trace.skipped == {
        "negative duration": 1,
        "non-numeric GPU count": 1,
        "GPU count <= 0": 2,
        "unparsable timestamp": 1,
        "missing fields": 1,
    }
    assert trace.total_skipped == 6


def test_skip_bad_rows_still_refuses_an_empty_result(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PHILLY_HEADER, "2017-10-09 07:01:55,-5,1,-5,c")
    with pytest.raises(InputError) as caught:
        load_trace(path, skip_bad_rows=True)
    assert str(caught.value) == (
        f"{path}: the trace has no jobs: all 1 rows were skipped (negative duration: 1)"
    )


def test_skip_bad_rows_does_not_hide_file_level_errors(tmp_path: Path) -> None:
    path = write(
        tmp_path, "p.csv", "timestamp,num_gpus,gpu_time,cluster", "2017-10-09 07:01:55,1,6,c"
    )
    with pytest.raises(InputError, match="missing column 'duration'"):
        load_trace(path, skip_bad_rows=True)


def test_skip_bad_rows_counts_duplicates(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", SCHEMA_HEADER, "a,0,1,5", "a,1,1,5", "b,0,1,5")
    trace = load_trace(path, skip_bad_rows=True)
    assert [job.job_id for job in trace.jobs] == ["a", "b"]
    assert trace.skipped == {"duplicate job id": 1}


# --- a record is one line: csv would otherwise read on to the next quote, losing rows -----------


def test_unterminated_quote_is_not_a_record_spanning_lines(tmp_path: Path) -> None:
    path = philly(
        tmp_path, '2017-10-09 06:13:03,2951.0,1,2951.0,"unterminated', GOOD_PHILLY_ROW, "x,1,1,1,c"
    )
    expect_error(path, 3, None, "unterminated quote: a quoted field runs past the end of its line")
    with pytest.raises(InputError, match="unterminated quote"):
        load_trace(path, skip_bad_rows=True)  # the rows it swallowed cannot be told apart


def test_quoted_field_closed_lines_later_names_the_line_it_opened_on(tmp_path: Path) -> None:
    path = philly(tmp_path, '2017-10-09 06:13:03,1,1,1,"c', "# note", "", 'd"', GOOD_PHILLY_ROW)
    expect_error(path, 3, None, "unterminated quote")


@pytest.mark.parametrize("end", ["", "\n"])
def test_unterminated_quote_at_end_of_file(tmp_path: Path, end: str) -> None:
    path = tmp_path / "p.csv"
    path.write_text(f'{PHILLY_HEADER}\n{GOOD_PHILLY_ROW}\n2017-10-09 06:13:03,1,1,1,"c{end}')
    expect_error(path, 3, None, "unterminated quote")


def test_quoted_field_on_one_line_is_read(tmp_path: Path) -> None:
    trace = load_trace(philly(tmp_path, '2017-10-09 06:13:03,1,1,1,"c,d"'))
    assert sorted(job.partition for job in trace.jobs) == ["11cb48", "c,d"]


# --- implausible values: they would hang a replay -----------------------------------------------


@pytest.mark.parametrize("duration", ["1e15", "1e300", "315360001"])
def test_duration_longer_than_ten_years(tmp_path: Path, duration: str) -> None:
    path = philly(tmp_path, f"2017-10-09 06:13:03,{duration},1,1,c")
    expect_error(path, 3, "duration", "s is longer than 315360000 s (10 years)")


def test_duration_of_ten_years_is_kept(tmp_path: Path) -> None:
    trace = load_trace(philly(tmp_path, "2017-10-09 06:13:03,315360000,1,1,c"))
    assert max(job.oracle_duration for job in trace.jobs) == 315360000


@pytest.mark.parametrize(
    "stamp",
    ["9999-12-31 23:59:59", "0001-01-01 00:00:00", "1969-12-31 23:59:59", "2100-01-01 00:00:00"],
)
def test_wall_clock_time_out_of_range(tmp_path: Path, stamp: str) -> None:
    path = philly(tmp_path, f"{stamp},1,1,1,c")
    expect_error(path, 3, "timestamp", f"timestamp {stamp!r} is outside 1970-01-01 .. 2100-01-01")


@pytest.mark.parametrize("submit", ["-1e12", "1e12", "4102444801", "9999-12-31T23:59:59-05:00"])
def test_schema_submit_time_out_of_range(tmp_path: Path, submit: str) -> None:
    path = write(tmp_path, "t.csv", SCHEMA_HEADER, "a,0,1,5", f"b,{submit},1,5")
    expect_error(path, 3, "submit_time", f"timestamp {submit!r} is")


def test_schema_relative_times_within_the_bound_are_kept(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", SCHEMA_HEADER, "a,-4102444800,1,5", "b,4102444800,1,5")
    assert [job.submit_time for job in load_trace(path).jobs] == [-4102444800, 4102444800]


def test_pai_residence_longer_than_ten_years(tmp_path: Path) -> None:
    header = "name,num_gpu,creation_time,deletion_time,scheduled_time"
    path = write(tmp_path, "pods.csv", header, "p1,1,0,10,5", "p2,1,0,4000000000,-4000000000")
    expect_error(path, 3, "deletion_time", "longer than 315360000 s")


def test_helios_run_longer_than_ten_years(tmp_path: Path) -> None:
    row = "1,u,vc,8,1,1,COMPLETED,1971-01-01 00:00:00,1971-01-01 00:00:00,2099-01-01 00:00:00,,0"
    expect_error(write(tmp_path, "log.csv", HELIOS_HEADER, row), 2, "end_time", "10 years")


def test_venus_slice_submit_time_out_of_range(tmp_path: Path) -> None:
    path = write(tmp_path, "slice.csv", VENUS_HEADER, "1,u,vcA,finetune,1e20,8,,1,60,60,FAILED")
    expect_error(path, 2, "submit_time", "is 1e+14 s from its origin; at most ±4102444800 s")


def test_skip_bad_rows_counts_implausible_values(tmp_path: Path) -> None:
    path = philly(tmp_path, "2017-10-09 06:13:03,1e15,1,1,c", "9999-12-31 23:59:59,1,1,1,c")
    trace = load_trace(path, skip_bad_rows=True)
    assert trace.skipped == {"duration too long": 1, "timestamp out of range": 1}


# --- SWF header values ----------------------------------------------------------------------------


def swf_log(tmp_path: Path, *header: str, row: str = SWF_ROW) -> Path:
    return write(tmp_path, "log.swf", "; Version: 2.2", *header, row)


@pytest.mark.parametrize(
    ("header", "text"),
    [
        (("; UnixStartTime: nan",), "UnixStartTime is not a number: 'nan'"),
        (("; UnixStartTime: inf",), "UnixStartTime is not a number: 'inf'"),
        (("; UnixStartTime: 1e20",), "UnixStartTime is out of range: 1e20 (not in 0 .. 41024"),
        (("; UnixStartTime: -1e15",), "UnixStartTime is out of range: -1e15"),
        (("; TimeZone: nan", "; TimeZoneString:"), "TimeZone is not a number: 'nan'"),
        (("; TimeZone: 1e9",), "TimeZone is out of range: 1e9 (not in -86400 .. 86400)"),
        (("; TimeZoneString: Mars/Olympus",), "TimeZoneString is not a known time zone"),
        (("; TimeZoneString: America",), "TimeZoneString is not a known time zone: 'America'"),
    ],
)
def test_swf_bad_header_value(tmp_path: Path, header: tuple[str, ...], text: str) -> None:
    expect_error(swf_log(tmp_path, *header), 2, None, f"SWF header field {text}")


def test_swf_time_zone_is_used(tmp_path: Path) -> None:
    path = swf_log(tmp_path, "; UnixStartTime: 0", "; TimeZoneString: US/Pacific")
    assert [job.submit_time for job in load_trace(path).jobs] == [-8 * 3600]


@pytest.mark.parametrize(("offset", "text"), [("1e300", "at most ±"), ("nan", "unparsable")])
def test_swf_submit_offset_out_of_range(tmp_path: Path, offset: str, text: str) -> None:
    path = swf_log(tmp_path, "; UnixStartTime: 0", row=SWF_ROW.replace(" 0 ", f" {offset} ", 1))
    expect_error(path, 3, "submit_time", text)


# --- time windows ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec", ["0:1e20", "0:nan", "0..inf", "-inf:0", "0001-01-01:2017-10-02", "2017-10-01..9e9"]
)
def test_window_bound_out_of_range(spec: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_window(spec)
    assert str(caught.value) == (
        f"time window bound is not a finite time within ±4102444800 s (before 2100): {spec!r}"
    )


@pytest.mark.parametrize("month", ["9999-12", "1969-12"])
def test_window_month_out_of_range(month: str) -> None:
    with pytest.raises(InputError, match=r"^month out of range \(1970-01 \.\. 2099-12\): "):
        parse_window(month)


def test_window_of_a_trace_refuses_unbounded_ends(tmp_path: Path) -> None:
    trace: Trace = load_trace(philly(tmp_path))
    with pytest.raises(InputError, match="time window bound is not a finite time"):
        window(trace, 0, 1e20)


# --- names and shapes the rest of the program cannot use ------------------------------------------


@pytest.mark.parametrize("gpu", ["H100", "H200", "L4", "L40S", "A30", "A40"])
def test_reference_gpu_the_performance_model_does_not_know(tmp_path: Path, gpu: str) -> None:
    comments = ("# made by hand", f"# reference_gpu: {gpu}")
    path = write(tmp_path, "t.csv", *comments, SCHEMA_HEADER, "a,0,1,5")
    error = expect_error(path, 2, None, f"unknown reference GPU type {gpu!r}")
    known = str(error).partition("(known: ")[2].rstrip(")").split(", ")
    assert "V100" in known and "A100" in known and gpu not in known


def test_venus_slice_more_nodes_than_gpus(tmp_path: Path) -> None:
    rows = ("1,u,vcA,finetune,0,16,,2,60,60,COMPLETED", "2,u,vcA,finetune,0,16,,32,60,60,FAILED")
    path = write(tmp_path, "slice.csv", VENUS_HEADER, *rows)
    expect_error(path, 3, "num_nodes", "node count 32 is more than the job's 16 GPUs")


def test_helios_more_nodes_than_gpus(tmp_path: Path) -> None:
    row = "1,u,vc,2,1,4,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 18:42:01,60,0"
    path = write(tmp_path, "log.csv", HELIOS_HEADER, row)
    expect_error(path, 2, "node_num", "node count 4 is more than the job's 2 GPUs")


def test_schema_more_nodes_than_gpus(tmp_path: Path) -> None:
    """Without gpus_per_node, 3 nodes for 2 GPUs would leave a node with no GPU of the job."""
    path = write(tmp_path, "t.csv", f"{SCHEMA_HEADER},num_nodes", "a,0,2,5,3")
    expect_error(path, 2, "num_nodes", "node count 3 is more than the job's 2 GPUs")


def test_schema_gpus_per_node_that_does_not_divide_the_gpus(tmp_path: Path) -> None:
    """3 GPUs at 2 per node would be replayed as 2 nodes x 2 = 4 GPUs."""
    path = write(tmp_path, "t.csv", f"{SCHEMA_HEADER},gpus_per_node", "a,0,3,5,2")
    expect_error(path, 2, "gpus_per_node", "2 GPUs per node do not divide the job's 3 GPUs")


# --- files that are not regular files, and counts no cluster has --------------------------------


@pytest.mark.parametrize("fmt", [None, *FORMATS])
def test_a_fifo_is_refused_not_waited_on(tmp_path: Path, fmt: str | None) -> None:
    """open() of a FIFO blocks until a writer comes: the trace reader would hang for ever."""
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    with time_limit(10, "reading a FIFO"):
        expect_error(fifo, None, None, "not a regular file (a FIFO)", fmt)


def test_a_character_device_is_refused(tmp_path: Path) -> None:
    """/dev/zero never ends and has no line break: one endless line, read into memory."""
    with time_limit(10, "reading /dev/zero"):
        expect_error(Path("/dev/zero"), None, None, "not a regular file (a character device)")


HUGE_COUNTS = ["1e30", "99999999999999999999999", "9223372036854775808", "1000001"]


@pytest.mark.parametrize("count", HUGE_COUNTS)
def test_gpu_counts_beyond_any_cluster(tmp_path: Path, count: str) -> None:
    """A GPU count of 1e30 (or past int64) reached the replay, which overflowed or ran out of
    memory making the job's node shape; it is refused on its line."""
    reason = "is more than 1000000, the most GPUs a job may ask for"
    expect_error(philly(tmp_path, f"2017-10-09 07:01:55,5,{count},5,c"), 3, "num_gpus", reason)
    expect_error(write(tmp_path, "t.csv", SCHEMA_HEADER, f"a,0,{count},5"), 2, "num_gpus", reason)
    row = f"1,u,vc,{count},1,1,COMPLETED,2020-06-09 18:41:01,,,60,0"
    expect_error(write(tmp_path, "log.csv", HELIOS_HEADER, row), 2, "gpu_num", reason)
    venus = f"1,u,vcA,finetune,0,{count},,1,60,60,COMPLETED"
    expect_error(write(tmp_path, "slice.csv", VENUS_HEADER, venus), 2, "num_chips", reason)
    pai = write(tmp_path, "pods.csv", "name,num_gpu,creation_time,deletion_time,scheduled_time",
                f"p1,{count},0,10,5")
    expect_error(pai, 2, "num_gpu", reason)
    swf = write(tmp_path, "log.swf", SWF_ROW.replace(" 4 ", f" {count} ", 1))
    expect_error(swf, 1, "allocated_processors", reason)


@pytest.mark.parametrize("count", HUGE_COUNTS)
def test_node_counts_beyond_any_cluster(tmp_path: Path, count: str) -> None:
    header = f"{SCHEMA_HEADER},num_nodes,gpus_per_node"
    path = write(tmp_path, "t.csv", header, f"a,0,8,5,{count},")
    expect_error(path, 2, "num_nodes", "is more than")
    path = write(tmp_path, "t.csv", header, f"a,0,8,5,,{count}")
    expect_error(path, 2, "gpus_per_node", "is more than")


def test_skip_bad_rows_counts_huge_gpu_counts(tmp_path: Path) -> None:
    trace = load_trace(philly(tmp_path, "2017-10-09 07:01:55,5,1e30,5,c"), skip_bad_rows=True)
    assert len(trace) == 1 and dict(trace.skipped) == {"GPU count too large": 1}


@pytest.mark.parametrize("limit", ["1e30", "inf", "nan", "4e8"])
def test_time_limits_are_bounded_like_durations(tmp_path: Path, limit: str) -> None:
    path = write(tmp_path, "t.csv", f"{SCHEMA_HEADER},time_limit", f"a,0,1,5,{limit}")
    expect_error(path, 2, "time_limit", "time limit")
    fields = SWF_ROW.split()
    fields[8] = limit  # requested_time
    swf = write(tmp_path, "log.swf", " ".join(fields))
    expect_error(swf, 1, "requested_time", "requested time")


def test_absolute_times_past_2100_are_refused(tmp_path: Path) -> None:
    """An offset within the bound still lands past 2100 when added to the trace's start."""
    venus = write(tmp_path, "slice.csv", VENUS_HEADER,
                  "1,u,vcA,finetune,4000000000000000,16,,2,60,60,COMPLETED")
    expect_error(venus, 2, "submit_time", "timestamp '4000000000000000' is 5.59892e+09 s")
    swf = write(tmp_path, "log.swf", "; UnixStartTime: 4000000000",
                SWF_ROW.replace(" 0 ", " 4000000000 ", 1))
    expect_error(swf, 2, "submit_time", "timestamp '4000000000' is 8e+09 s from its origin")


def test_detecting_the_format_of_a_header_with_a_carriage_return(tmp_path: Path) -> None:
    """csv.reader raised csv.Error (a traceback) on a stray CR in the first line."""
    path = tmp_path / "p.csv"
    path.write_bytes(f"\r,{PHILLY_HEADER[10:]}\n{GOOD_PHILLY_ROW}\n".encode())
    expect_error(path, 1, None, "malformed CSV")


def test_a_line_break_character_in_a_quoted_value_is_shown_escaped(tmp_path: Path) -> None:
    """str.splitlines() also breaks at \\x1e, \\x85, \\u2028...: the header quoted in the
    message made the one-line error two lines."""
    path = write(tmp_path, "p.csv", PHILLY_HEADER.replace("timestamp", "0\x1e0\u2028"),
                 GOOD_PHILLY_ROW)
    error = expect_error(path, 1, "timestamp", "missing column 'timestamp'", "philly")
    assert len(str(error).splitlines()) == 1 and "0\\x1e0" in str(error)
