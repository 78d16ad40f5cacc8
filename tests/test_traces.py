"""Trace readers on the real files in ../shared (skipped when absent) and on small fixtures."""

from __future__ import annotations

import gzip
import statistics
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from slurm_rl.errors import InputError, UnknownNameError
from slurm_rl.paths import shared_traces_dir
from slurm_rl.traces import (
    FAMILIES,
    TIME_LIMIT_LADDER,
    Trace,
    clock_to_datetime,
    detect_format,
    family_for,
    load_trace,
    parse_window,
    philly_heldout_window,
    philly_month_windows,
    philly_train_window,
    time_limit_for,
    window,
)
from slurm_rl.traces.families import canonical_gpu_type

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
PHILLY_FILE = "philly_pollux_jobs.csv.gz"
VENUS_FILE = "helios_venus_2vc_sept_slice.csv.gz"
PAI_FILE = "alibaba_gpu_v2023_openb_pod_list_default.csv.gz"
SWF_FILE = "pwa_NASA-iPSC-1993-3.1-cln.swf.gz"


def shared_file(name: str) -> Path:
    path = shared_traces_dir() / name
    if not path.is_file():
        pytest.skip(f"{path} is not here (../shared is absent)")
    return path


@pytest.fixture(scope="module")
def philly() -> Trace:
    return load_trace(shared_file(PHILLY_FILE))


def is_sorted(trace: Trace) -> bool:
    keys = [(job.submit_time, job.job_id) for job in trace.jobs]
    return keys == sorted(keys)


# --- Philly -------------------------------------------------------------------------------------


def test_philly_has_every_job_of_the_readme(philly: Trace) -> None:
    assert len(philly) == 82_247
    assert philly.skipped == {}
    assert philly.reference_gpu == "V100"
    assert not philly.synthetic
    assert "ATC '19" in philly.source and "osdi21-artifact" in philly.source
    assert is_sorted(philly)


def test_philly_gpu_counts_and_durations_match_the_readme(philly: Trace) -> None:
    gpus = Counter(job.num_gpus for job in philly.jobs)
    assert gpus[1] == 76_627 and gpus[2] == 1_818 and gpus[4] == 1_870 and gpus[8] == 1_643
    assert gpus[16] == 199 and gpus[32] == 67 and gpus[64] == 6 and gpus[128] == 3
    assert gpus[12] == 7 and gpus[24] == 7
    durations = [job.oracle_duration for job in philly.jobs]
    assert statistics.median(d for d in durations if d is not None) == 1_144
    assert max(d for d in durations if d is not None) == pytest.approx(4.63e6, rel=1e-2)
    assert len({job.partition for job in philly.jobs}) == 15


def test_philly_months_match_the_readme(philly: Trace) -> None:
    counts = {
        month: len(window(philly, *bounds)) for month, bounds in philly_month_windows().items()
    }
    assert counts == {"2017-09": 5_657, "2017-10": 47_192, "2017-11": 21_318, "2017-12": 8_080}
    assert len(window(philly, *philly_train_window())) == 5_657 + 47_192 + 21_318
    assert len(window(philly, *philly_heldout_window())) == 8_080


def test_philly_row_of_the_upstream_example_job(philly: Trace) -> None:
    # README: "2017-10-07 01:11:39,193256.0,8,1546048.0,ee9e8c" (application_1506638472019_14199)
    submit = datetime(2017, 10, 7, 1, 11, 39)
    matches = [job for job in philly.jobs if clock_to_datetime(job.submit_time) == submit]
    example = [job for job in matches if job.oracle_duration == 193_256.0]
    assert len(example) == 1
    job = example[0]
    assert job.num_gpus == 8 and job.partition == "ee9e8c"
    assert job.job_id.startswith("philly-")
    assert job.model_family == "imagenet"  # 429 GPU-hours
    assert job.time_limit == 7 * 86400  # 1.5 x 2.24 days -> 7 days


def test_philly_job_ids_are_line_numbers(philly: Trace) -> None:
    lines = sorted(int(job.job_id.removeprefix("philly-")) for job in philly.jobs)
    assert lines == list(range(2, 82_249))


def test_philly_first_row_is_line_2(philly: Trace) -> None:
    job = next(job for job in philly.jobs if job.job_id == "philly-2")
    assert clock_to_datetime(job.submit_time) == datetime(2017, 10, 9, 7, 1, 55)
    assert job.oracle_duration == 66.0 and job.num_gpus == 1 and job.partition == "11cb48"


# --- Helios -------------------------------------------------------------------------------------


def test_venus_slice() -> None:
    trace = load_trace(shared_file(VENUS_FILE))
    assert len(trace) == 1_867
    assert Counter(job.partition for job in trace.jobs) == {"vcvGl": 1_452, "vcvlY": 415}
    assert len({job.user for job in trace.jobs}) == 12
    assert clock_to_datetime(trace.jobs[0].submit_time) == datetime(2020, 9, 1, 1, 37, 15)
    assert clock_to_datetime(trace.jobs[-1].submit_time).strftime("%m-%d %H:%M") == "09-26 17:17"
    assert trace.reference_gpu == "V100"
    first = trace.jobs[0]
    assert (first.job_id, first.num_gpus, first.num_nodes, first.gpus_per_node) == (
        "765563",
        128,
        16,
        8,
    )
    # walltime_limit_s is a copy of the duration, not a limit: the limit is modelled instead
    assert all(job.time_limit in TIME_LIMIT_LADDER for job in trace.jobs)
    assert first.time_limit == 3600.0


def test_helios_cluster_log_fixture() -> None:
    path = FIXTURES / "helios_cluster_log.csv"
    assert detect_format(path) == "helios"
    trace = load_trace(path)
    assert [job.job_id for job in trace.jobs] == [
        "1425517",
        "1425511",
        "1425512",
        "1425513",
        "1425515",
    ]
    assert trace.skipped == {"no GPU": 1, "never started": 1}
    jobs = {job.job_id: job for job in trace.jobs}
    assert jobs["1425511"].oracle_duration == 36_848
    assert clock_to_datetime(jobs["1425511"].submit_time) == datetime(2020, 6, 9, 18, 41, 1)
    assert (jobs["1425511"].user, jobs["1425511"].partition) == ("uXBbc", "vcJkd")
    # no duration: end_time - start_time
    assert jobs["1425515"].oracle_duration == 7_200
    assert (jobs["1425515"].num_nodes, jobs["1425515"].gpus_per_node) == (2, 8)


def test_helios_layout_with_a_jobname_column(tmp_path: Path) -> None:
    path = tmp_path / "cluster_log.csv"
    path.write_text(
        "job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,"
        "end_time,duration,queue\n"
        "7,uA,vcA,train_x,2,8,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:05,"
        "2020-04-01 01:00:05,3600,5\n"
    )
    trace = load_trace(path)
    assert [(job.job_id, job.num_gpus, job.oracle_duration) for job in trace.jobs] == [
        ("7", 2, 3600)
    ]


# --- Alibaba PAI 2023 ---------------------------------------------------------------------------


def test_pai_gpu_pods() -> None:
    trace = load_trace(shared_file(PAI_FILE))
    # 8,152 pods: 1,088 CPU-only; of the 897 Pending (never scheduled) 861 ask for GPUs
    assert trace.skipped == {"no GPU": 1_088, "never scheduled": 861}
    assert len(trace) == 8_152 - 1_088 - 861
    assert Counter(job.num_gpus for job in trace.jobs) == {1: 6_129, 8: 44, 2: 15, 4: 15}
    assert trace.reference_gpu == "T4"
    assert all(job.gpu_type is None for job in trace.jobs)
    first = trace.jobs[0]
    assert (first.job_id, first.submit_time, first.oracle_duration) == (
        "openb-pod-0000",
        0.0,
        12_537_496.0,
    )


# --- SWF ----------------------------------------------------------------------------------------


def test_swf_nasa_ipsc() -> None:
    trace = load_trace(shared_file(SWF_FILE))
    assert len(trace) == 18_239
    assert trace.skipped == {}
    durations = [job.oracle_duration or 0.0 for job in trace.jobs]
    assert statistics.median(durations) == 86 and max(durations) == 62_643
    assert {job.num_gpus for job in trace.jobs} <= {1, 2, 4, 8, 16, 32, 64, 128}
    assert len({job.user for job in trace.jobs}) == 69
    # local wall clock: the header's StartTime is Fri Oct 01 00:00:03 PDT 1993
    assert clock_to_datetime(trace.jobs[0].submit_time) == datetime(1993, 10, 1, 0, 0, 3)
    assert trace.jobs[0].time_limit in TIME_LIMIT_LADDER  # requested time is -1: modelled
    assert "iPSC/860" in trace.source


def test_swf_requested_time_becomes_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "tiny.swf"
    path.write_text(
        "; UnixStartTime: 0\n"
        "1 10 -1 100 4 -1 -1 4 7200 -1 1 3 1 -1 -1 2 -1 -1\n"
        "2 20 -1 50 -1 -1 -1 2 -1 -1 1 -1 1 -1 -1 -1 -1 -1\n"
    )
    jobs = load_trace(path).jobs
    assert [(j.job_id, j.submit_time, j.num_gpus, j.time_limit) for j in jobs] == [
        ("swf-1", 10.0, 4, 7200.0),
        ("swf-2", 20.0, 2, 3600.0),
    ]
    assert (jobs[0].user, jobs[0].partition, jobs[1].user) == ("u3", "2", "")


# --- our CSV schema ------------------------------------------------------------------------------


SCHEMA_TEXT = (
    "# reference_gpu: a100\n"
    "job_id,submit_time,num_gpus,duration,user,partition,num_nodes,gpus_per_node,gpu_type,"
    "time_limit,model_family\n"
    "a,2024-01-01T00:00:00,8,3600,alice,gpu,2,4,v100m32,7200,bert\n"
    "b,1704067200,1,60,,,,,,,\n"
    "c,2024-01-01T01:00:00+01:00,2,10.5,bob,,,,T4,,\n"
)


def test_schema_csv_reads_every_column(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(SCHEMA_TEXT)
    trace = load_trace(path)
    assert trace.reference_gpu == "A100" and trace.name == "mine"
    jobs = {job.job_id: job for job in trace.jobs}
    a = jobs["a"]
    assert (a.submit_time, a.num_gpus, a.user, a.partition) == (1_704_067_200.0, 8, "alice", "gpu")
    assert (a.num_nodes, a.gpus_per_node, a.gpu_type) == (2, 4, "V100M32")
    assert (a.time_limit, a.model_family, a.oracle_duration) == (7200.0, "bert", 3600.0)
    b = jobs["b"]
    assert b.submit_time == 1_704_067_200.0
    assert (b.time_limit, b.model_family) == (3600.0, family_for("b", 60.0))
    assert (b.num_nodes, b.gpu_type, b.user) == (None, None, "")
    assert jobs["c"].submit_time == 1_704_067_200.0  # 01:00 at UTC+1
    assert [job.job_id for job in trace.jobs] == ["a", "b", "c"]  # tie on time: by id


def test_gzip_and_plain_read_the_same(tmp_path: Path) -> None:
    plain, packed = tmp_path / "t.csv", tmp_path / "t.csv.gz"
    plain.write_text(SCHEMA_TEXT)
    packed.write_bytes(gzip.compress(SCHEMA_TEXT.encode()))
    assert load_trace(plain).jobs == load_trace(packed).jobs
    # told apart by content, not by name
    disguised = tmp_path / "really_gzip.csv"
    disguised.write_bytes(gzip.compress(SCHEMA_TEXT.encode()))
    assert load_trace(disguised).jobs == load_trace(plain).jobs


# --- formats --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        (PHILLY_FILE, "philly"),
        (VENUS_FILE, "helios-venus-slice"),
        (PAI_FILE, "pai2023"),
        (SWF_FILE, "swf"),
    ],
)
def test_format_is_detected_from_the_header(name: str, fmt: str) -> None:
    assert detect_format(shared_file(name)) == fmt


def test_explicit_format_and_unknown_format(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(SCHEMA_TEXT)
    assert load_trace(path, "csv").jobs == load_trace(path).jobs
    with pytest.raises(UnknownNameError, match="unknown trace format 'parquet'"):
        load_trace(path, "parquet")


# --- windows --------------------------------------------------------------------------------------


def test_window_accepts_datetimes_and_seconds(philly: Trace) -> None:
    start, end = datetime(2017, 10, 1), datetime(2017, 10, 15)
    by_datetime = window(philly, start, end)
    by_seconds = window(philly, *parse_window("2017-10-01:2017-10-15"))
    assert by_datetime.jobs == by_seconds.jobs and len(by_datetime) > 0
    assert all(start <= clock_to_datetime(job.submit_time) < end for job in by_datetime.jobs)
    before, after = window(philly, 0, start), window(philly, end, 2e9)
    assert len(before) + len(by_datetime) + len(after) == len(philly)
    assert by_datetime.reference_gpu == philly.reference_gpu


def test_parse_window_forms() -> None:
    october = parse_window("2017-10")
    assert october == philly_month_windows()["2017-10"]
    assert parse_window("2017-10-01T00:00:00:2017-11-01T00:00:00") == october
    assert parse_window("2017-10-01..2017-11-01") == october
    assert parse_window(f"{october[0]:.0f}:{october[1]:.0f}") == october
    for bad in ("october", "2017-11-01:2017-10-01", "2017-13"):
        with pytest.raises(InputError):
            parse_window(bad)


def test_window_of_nothing_is_empty() -> None:
    trace = load_trace(FIXTURES / "helios_cluster_log.csv")
    assert window(trace, 0, 1).jobs == ()


# --- family and time limit -----------------------------------------------------------------------


def test_family_buckets_follow_pollux() -> None:
    hour = 3600.0
    assert family_for("x", 0.5 * hour) in ("cifar10", "ncf")
    assert family_for("x", 5 * hour) in ("deepspeech2", "bert")
    assert family_for("x", 50 * hour) == "yolov3"
    assert family_for("x", 500 * hour) == "imagenet"
    assert family_for("x", 1.0 * hour) in ("deepspeech2", "bert")  # bounds are exclusive above
    small = {family_for(f"job-{i}", 60.0) for i in range(50)}
    assert small == {"cifar10", "ncf"}
    assert set(FAMILIES) == {"cifar10", "ncf", "deepspeech2", "yolov3", "imagenet", "bert"}


def test_family_is_a_stable_function_of_the_job_id() -> None:
    # Pinned (CRC-32 of the id, parity picks inside the bucket): a change here silently
    # re-labels every trace job, and trained policies with them.
    short = [family_for(f"philly-{n}", 66.0) for n in range(2, 8)]
    assert short == ["cifar10", "cifar10", "ncf", "ncf", "ncf", "ncf"]
    medium = [family_for(f"philly-{n}", 4 * 3600.0) for n in range(2, 8)]
    assert medium == ["deepspeech2", "deepspeech2", "bert", "bert", "bert", "bert"]


def test_time_limit_ladder() -> None:
    assert time_limit_for(0) == 3600
    assert time_limit_for(2400) == 3600  # 1.5 x 40 min = 1 h
    assert time_limit_for(2401) == 2 * 3600
    assert time_limit_for(3 * 86400) == 7 * 86400
    assert time_limit_for(40 * 86400) == 60 * 86400
    assert time_limit_for(53.6 * 86400) == 90 * 86400  # beyond the ladder: 30-day steps
    assert all(time_limit_for(d) >= d for d in (1, 59, 3600, 86400, 4.63e6))


def test_trace_job_fields_are_modelled_consistently(philly: Trace) -> None:
    for job in philly.jobs[:2000]:
        assert job.oracle_duration is not None
        assert job.time_limit == time_limit_for(job.oracle_duration)
        assert job.model_family == family_for(job.job_id, job.oracle_duration * job.num_gpus)


def test_gpu_type_names_are_case_insensitive() -> None:
    assert canonical_gpu_type("v100m32") == "V100M32"
    assert canonical_gpu_type(" a100 ") == "A100"
    assert canonical_gpu_type("v100-sxm2") == "V100-SXM2"
    assert canonical_gpu_type("V100 SXM2") is None
    assert canonical_gpu_type("GTX1080") is None
