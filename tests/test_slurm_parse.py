"""Golden-file tests: Slurm's JSON and text output -> records -> ClusterSnapshot.

Every file is recorded from a real Slurm: 22.05 by tests/fixtures/slurm/record_22_05.py,
24.11 and 26.05 by record_compose.py (their own tests: tests/test_slurm_layouts.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from slurm_rl.config import DaemonConfig
from slurm_rl.core import Placement
from slurm_rl.daemon.runner import Daemon
from slurm_rl.errors import SlurmRLError
from slurm_rl.ops.prometheus import error_kind
from slurm_rl.slurm import parse
from slurm_rl.slurm.client import CliSlurmClient, parse_version
from slurm_rl.slurm.errors import (
    SlurmCommandError,
    SlurmOutputError,
    SlurmTimeoutError,
    SlurmUnavailableError,
)
from slurm_rl.slurm.gres import GpuCount, GresFormatError, gpu_counts, single_request, total_gpus
from slurm_rl.slurm.ownership import Ledger, pin_ledger
from slurm_rl.slurm.parse import parse_jobs, parse_nodes
from slurm_rl.slurm.records import SlurmJob, new_job
from slurm_rl.slurm.scontrol import parse_jobs_text, parse_nodes_text, parse_pairs
from slurm_rl.slurm.source import SlurmSource, SourceConfig, core_key, to_core_job
from tests.slurm.fakes import FakeRunner, fixture_text, recorded_answer, recorded_cluster

# -- GRES / TRES strings ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:a100:8", [GpuCount("a100", 8)]),
        ("gpu:a100:8(S:0-1)", [GpuCount("a100", 8)]),
        ("gpu:8", [GpuCount(None, 8)]),
        ("gres:gpu:a100:4", [GpuCount("a100", 4)]),
        ("gres/gpu:a100:4", [GpuCount("a100", 4)]),
        ("gres/gpu=4", [GpuCount(None, 4)]),
        ("gres/gpu:a100=2", [GpuCount("a100", 2)]),
        ("gres:gpu:1", [GpuCount(None, 1)]),
        ("gpu:v100", [GpuCount("v100", 1)]),
        ("gpu", [GpuCount(None, 1)]),
        ("gpu:a100:4(IDX:0,2-3),gpu:v100:2(IDX:0-1)", [GpuCount("a100", 4), GpuCount("v100", 2)]),
        ("tmpsize:7T,gpu:l40s:4(S:0-1)", [GpuCount("l40s", 4)]),
        ("gpu:(null):0(IDX:N/A)", [GpuCount(None, 0)]),
        ("gres:shard:2", []),
        ("(null)", []),
        ("N/A", []),
        ("", []),
    ],
)
def test_gpu_counts(text: str, expected: list[GpuCount]) -> None:
    assert list(gpu_counts(text)) == expected


def test_gpu_count_that_is_not_a_number_is_an_error() -> None:
    with pytest.raises(GresFormatError, match="'x'"):
        gpu_counts("gpu:a100:x")
    with pytest.raises(GresFormatError):
        gpu_counts("gres/gpu=four")


def test_requests_merge_types_and_counts() -> None:
    assert total_gpus("gpu:a100:4(IDX:0-3),gpu:v100:2") == 6
    assert single_request("gres/gpu:a100:2,gres/gpu:v100:1") == GpuCount("a100", 3)
    assert single_request("gres:shard:1") is None


# -- 22.05 (recorded) ---------------------------------------------------------------------


def _jobs_2205() -> dict[str, str]:
    roles: dict[str, str] = json.loads(fixture_text("22.05", "jobs.json"))
    return roles


def test_2205_squeue_fields() -> None:
    report = parse_jobs(fixture_text("22.05", "squeue.json"))
    roles = _jobs_2205()
    jobs = {j.job_id: j for j in report.jobs}
    assert report.meta.version == (22, 5, 8)
    assert report.meta.data_format == "openapi/v0.0.38"
    running = jobs[roles["running_multinode"]]
    assert (running.state, running.user, running.partition) == ("RUNNING", "alice", "gpu")
    assert running.nodes == ("a100-01", "a100-02")
    assert running.required_nodes == ("a100-01", "a100-02")
    assert running.gres_detail == ("gpu:a100:4(IDX:0-3)", "gpu:a100:4(IDX:0-3)")
    assert running.time_limit_s == 30 * 60
    prio = jobs[roles["pending_prio"]]
    assert (prio.state, prio.reason, prio.priority) == ("PENDING", "BeginTime", 5000)
    assert prio.admin_comment.startswith("slurm-rl:deferred:")
    assert prio.eligible_time is not None and prio.submit_time is not None
    assert prio.eligible_time - prio.submit_time == 3600
    assert jobs[roles["user_begin"]].admin_comment == ""
    assert jobs[roles["pending_unlimited"]].time_limit_s is None
    assert jobs[roles["failed"]].exit_code == 3
    assert jobs[roles["failed"]].is_finished
    assert jobs[roles["pending_pinned"]].required_nodes == ("v100-03",)


def test_a_users_nice_is_read_in_every_layout() -> None:
    """22.05 shows a nice of 0 as null (measured on the dev cluster: ``--nice=150`` gives
    150, no --nice gives null); the newer layouts give the number."""
    for version in ("22.05", "24.11", "26.05"):
        doc = json.loads(fixture_text(version, "squeue.json"))
        doc["jobs"][0]["nice"] = 150
        doc["jobs"][1]["nice"] = None
        jobs = parse_jobs(json.dumps(doc)).jobs
        assert (jobs[0].nice, jobs[1].nice) == (150, 0), version

def test_an_admins_negative_nice_is_read_not_the_job_dropped() -> None:
    """``scontrol update Nice=-100`` (an admin's; docs/fairness.md: it moves the job up):
    as a negative number it made the whole job record unreadable (the job left the
    snapshot), and as 22.05 prints it, 4294967196, it sent the job to the bottom."""
    for version in ("22.05", "24.11", "26.05"):
        doc = json.loads(fixture_text(version, "squeue.json"))
        doc["jobs"][0]["nice"] = -100
        report = parse_jobs(json.dumps(doc))
        assert report.unreadable == () and report.jobs[0].nice == -100, version
    # 22.05 prints it as its 32-bit two's complement (measured: tests/slurm/test_nice_live.py)
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    doc["jobs"][0]["nice"] = 2**32 - 100
    assert parse_jobs(json.dumps(doc)).jobs[0].nice == -100


def test_2205_sinfo_states_and_gres() -> None:
    report = parse_nodes(fixture_text("22.05", "sinfo.json"))
    nodes = {n.name: n for n in report.nodes}
    assert len(nodes) == 8
    assert nodes["a100-01"].states == ("MIXED",)
    assert nodes["a100-01"].gres_used == "gpu:a100:4(IDX:0-3)"
    assert nodes["a100-04"].states == ("DOWN",) and not nodes["a100-04"].usable
    assert nodes["v100-04"].states == ("IDLE", "DRAIN") and not nodes["v100-04"].usable
    assert nodes["v100-02"].usable and nodes["v100-02"].partitions == ("gpu",)


def _recorded_pins(version: str) -> Ledger:
    """The recordings' pins, set as the daemon sets them (record_22_05.py): this source's
    own, so the pinned pending job is in the snapshot (a user's: tests/test_slurm_nodelist.py)."""
    pins = pin_ledger()
    for job in parse_jobs(fixture_text(version, "squeue.json")).jobs:
        pins.remember(job.job_id, ",".join(job.required_nodes))
    return pins


def _snapshot(version: str, config: SourceConfig | None = None) -> SlurmSource:
    client = CliSlurmClient(runner=recorded_cluster(version))
    return SlurmSource(client, config, clock=lambda: 1_800_000_000.0,
                       pins=_recorded_pins(version))


def test_2205_snapshot() -> None:
    roles = _jobs_2205()
    source = _snapshot("22.05")
    snap = source.snapshot()
    assert snap.time == 1_800_000_000.0
    assert [n.name for n in snap.cluster.nodes] == [
        "a100-01", "a100-02", "a100-03", "a100-04", "v100-01", "v100-02", "v100-03", "v100-04",
    ]  # fmt: skip
    assert snap.cluster.gpu_types == ("a100", "v100")
    # a100-04 is DOWN and v100-04 DRAINED: no free GPUs there, whatever gres_used says.
    assert snap.free_gpus == (4, 4, 8, 0, 1, 4, 4, 0)
    pending = {j.job_id: j for j in snap.pending}
    assert list(pending) == [
        roles[k] for k in ("pending_prio", "pending_pinned", "user_begin", "pending_unlimited")
    ]
    big = pending[roles["pending_prio"]]
    assert (big.num_gpus, big.gpu_type, big.num_nodes, big.gpus_per_node) == (8, "a100", 1, 8)
    assert big.time_limit == 3600 and big.user == "alice"
    per_task = pending[roles["pending_pinned"]]
    assert (per_task.num_gpus, per_task.num_nodes, per_task.gpus_per_node) == (2, None, None)
    spread = pending[roles["pending_unlimited"]]
    assert (spread.num_gpus, spread.num_nodes, spread.gpus_per_node) == (4, 2, None)
    assert spread.time_limit is None
    running = {r.job.job_id: r for r in snap.running}
    assert set(running) == {roles["running_multinode"], roles["running_gpus"]}  # not cpu_only
    assert running[roles["running_multinode"]].placement == Placement(
        ("a100-01", "a100-02"), (4, 4)
    )
    assert running[roles["running_gpus"]].placement == Placement(("v100-01",), (3,))
    finished = {f.job.job_id: f for f in snap.finished}
    assert set(finished) == {roles["failed"], roles["completed"]}  # cancelled one never ran
    assert (finished[roles["failed"]].state, finished[roles["failed"]].exit_code) == ("FAILED", 3)
    assert finished[roles["completed"]].exit_code == 0
    assert finished[roles["completed"]].placement == Placement(("a100-01",), (2,))


def test_snapshots_share_the_cluster_object_while_the_nodes_are_unchanged() -> None:
    # Policies key what they learned on the cluster object (the RWGP's belief): an equal new
    # object each query would reset it every cycle.
    source = _snapshot("22.05")
    first, second = source.snapshot().cluster, source.snapshot().cluster
    assert first is second
    source.config = SourceConfig(price_per_gpu_hour={"a100": 2.9})  # a price changed
    third = source.snapshot().cluster
    assert third is not first and third.nodes[0].price_per_gpu_hour == 2.9
    assert source.snapshot().cluster is third


def test_finished_jobs_are_reported_once() -> None:
    source = _snapshot("22.05")
    assert len(source.snapshot().finished) == 2
    assert source.snapshot().finished == ()


def test_partition_filter_excludes_everything_elsewhere() -> None:
    snap = _snapshot("22.05", SourceConfig(partitions=("other",))).snapshot()
    assert snap.cluster.nodes == () and snap.pending == () and snap.running == ()


def test_prices_come_from_the_config() -> None:
    config = SourceConfig(price_per_gpu_hour={"a100": 3.0})
    nodes = _snapshot("22.05", config).snapshot().cluster.nodes
    assert {n.gpu_type: n.price_per_gpu_hour for n in nodes} == {"a100": 3.0, "v100": 0.0}


@pytest.mark.parametrize(
    ("text", "version"),
    [("slurm-wlm 22.05.8\n", (22, 5, 8)), ("slurm 24.11.3\n", (24, 11, 3))],
)
def test_parse_version(text: str, version: tuple[int, int, int]) -> None:
    assert parse_version(text) == version


# -- bad output ---------------------------------------------------------------------------


def _mutated(mutate: object) -> str:
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    assert callable(mutate)
    mutate(doc)
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("mutate", "index", "message"),
    [
        (lambda d: d["jobs"][0].__setitem__("job_state", {"x": 1}), 0, "job 1: expected a state"),
        (lambda d: d["jobs"][0].__setitem__("job_state", "WEIRD"), 0,
         "unknown job state 'WEIRD'"),
        (lambda d: d["jobs"][0].pop("job_id"), 0, "job #0: field missing"),
        (lambda d: d["jobs"][1].__setitem__("nodes", "a100-[01-"), 1, "bad node list"),
        (
            lambda d: d["jobs"][1].__setitem__("excluded_nodes", "v100-[02-"), 1,
            "column 'excluded_nodes': job 2: bad node list",
        ),
        (lambda d: d["jobs"][1].__setitem__("excluded_nodes", 7), 1, "expected text"),
        (lambda d: d["jobs"][1].__setitem__("required_nodes", "x[1-100000000]"), 1,
         "more than 100,000 hosts"),
        (lambda d: d["jobs"][2].__setitem__("tres_per_node", "gres:gpu:a100:x:y"), 2,
         "not a number"),
        (lambda d: d["jobs"][2].__setitem__("submit_time", "yesterday"), 2, "expected a number"),
    ],
)
def test_an_unreadable_job_record_is_left_out_and_named(
    mutate: object, index: int, message: str
) -> None:
    """Issue 18 (7): one bad record failed the whole document, so the cycle was skipped,
    the heartbeat went stale and deferral stopped for every job."""
    whole = parse_jobs(fixture_text("22.05", "squeue.json"))
    report = parse_jobs(_mutated(mutate))
    (line,) = report.unreadable
    assert message in line and line.startswith("squeue --json") and "\n" not in line
    assert [j.job_id for j in report.jobs] == \
        [j.job_id for i, j in enumerate(whole.jobs) if i != index]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("meta"), "missing 'meta'"),
        (lambda d: d.pop("jobs"), "missing 'jobs' list"),
        (lambda d: d["errors"].append({"error": "Zero Bytes", "errno": 1}), "Zero Bytes"),
    ],
)
def test_bad_squeue_output_is_one_clear_error(mutate: object, message: str) -> None:
    with pytest.raises(SlurmOutputError) as caught:
        parse_jobs(_mutated(mutate))
    text = str(caught.value)
    assert message in text and text.startswith("squeue --json")
    assert "\n" not in text


def test_a_huge_host_list_is_refused_without_expanding_it() -> None:
    from slurm_rl.slurm.hostlist import HostlistError, expand, size_bound

    assert size_bound("a100-[01-04],v100-[1-3,7]") == 8
    assert size_bound("r[1-10]n[1-100]") == 1000
    assert expand("a100-[01-02],v100-01") == ("a100-01", "a100-02", "v100-01")
    with pytest.raises(HostlistError, match="more than 100,000 hosts"):
        expand("x[1-100000000]")  # took 46 s
    with pytest.raises(HostlistError, match="more than 100,000 hosts"):
        expand("r[1-1000]n[1-1000]")


def test_truncated_json_is_an_error() -> None:
    text = fixture_text("22.05", "squeue.json")
    with pytest.raises(SlurmOutputError, match="invalid or truncated JSON"):
        parse_jobs(text[: len(text) // 2])
    with pytest.raises(SlurmOutputError, match="empty output"):
        parse_jobs("")


def test_node_without_gres_field_is_an_error() -> None:
    doc = json.loads(fixture_text("22.05", "sinfo.json"))
    del doc["nodes"][3]["gres"]
    with pytest.raises(SlurmOutputError, match=r"column 'gres': node a100-04: field missing"):
        parse_nodes(json.dumps(doc))


def test_client_errors_are_typed() -> None:
    runner = recorded_cluster("22.05")
    runner.answer(
        ("squeue", "--json"),
        rc=1,
        stderr="squeue: error: Unable to contact slurm controller (connect failure)\n",
    )
    runner.fail(("sinfo", "--json"), SlurmTimeoutError(("sinfo", "--json"), 15.0))
    client = CliSlurmClient(runner=runner)
    with pytest.raises(SlurmUnavailableError, match="slurmctld is not reachable"):
        client.jobs()
    with pytest.raises(SlurmTimeoutError, match="did not answer within 15 s"):
        client.nodes()
    runner.answer(("squeue", "--json"), rc=1, stderr="squeue: error: something else\n")
    with pytest.raises(SlurmCommandError, match="something else") as caught:
        client.jobs()
    assert isinstance(caught.value, SlurmRLError)
    runner.answer(("squeue", "--json"), _mutated(lambda d: d["errors"].append({"errno": 1})))
    with pytest.raises(SlurmOutputError, match="reported an error") as other:
        client.jobs()  # an error Slurm reports that is not slurmctld unreachable (below)
    assert error_kind(other.value) == "output"


# -- slurmctld down: what 22.05 prints (recorded, tests/fixtures/slurm/22.05) ------------

SQUEUE_DOWN = "`squeue --json` reported: slurm_load_jobs: Failed while looking for jobs"
_MUNGE = "error: slurm_send_node_msg: auth_g_create: REQUEST_{}_INFO has authentication error"


def _down(name: str) -> FakeRunner:
    runner, answer = recorded_cluster("22.05"), recorded_answer("22.05", name)
    runner.answers[answer.argv] = answer
    return runner


@pytest.mark.parametrize(("name", "read", "message"), [
    ("squeue_unreachable.json", "jobs", SQUEUE_DOWN),
    ("sinfo_unreachable.json", "nodes", "`sinfo --json` reported: Unspecified error"),
    ("squeue_munge_down.json", "jobs", f"{SQUEUE_DOWN} (squeue: {_MUNGE.format('JOB')})"),
    ("sinfo_munge_down.json", "nodes",
     f"`sinfo --json` reported: Unspecified error (sinfo: {_MUNGE.format('NODE')})"),
])
def test_slurmctld_down_is_unreachable_not_bad_output(name: str, read: str, message: str) -> None:
    """Issue 19: 22.05's squeue/sinfo --json exit 0 with slurmctld (or munged) down, the
    failure only in the JSON's errors; that was counted as bad output (kind "output")."""
    with pytest.raises(SlurmUnavailableError) as caught:
        getattr(CliSlurmClient(runner=_down(name)), read)()
    assert str(caught.value) == f"slurmctld is not reachable: {message}"
    assert error_kind(caught.value) == "unreachable"


def test_the_cycle_says_slurmctld_is_down(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = DaemonConfig(mode="shadow", state_dir=tmp_path)
    daemon = Daemon(lambda: config, runner=_down("squeue_unreachable.json"), clock=time.time)
    with caplog.at_level(logging.WARNING):
        result = daemon.run_once()
    daemon.close()
    line = f"cycle skipped: slurmctld is not reachable: {SQUEUE_DOWN}"
    assert result.error == line and line in caplog.messages
    count = daemon.metrics.registry.get_sample_value
    assert [count("slurm_rl_slurm_errors_total", {"kind": k}) for k in ("unreachable", "output")
            ] == [1.0, None]  # the metric's kind


# -- the fast path: a well-formed 22.05 document, read as the general path reads it -------

_ODD = [None, "", 0, -1, 2.5, math.nan, True, "x", "(null)", "n[1-2]", "gpu:a100:2", "idle",
        ["a", "b"], [1], {"set": True, "infinite": False, "number": 5}, 0xFFFFFFFE, 2**70]


Reader = Callable[[str, str], object]


def _outcome(read: Reader, text: str) -> object:
    try:
        return read(text, "squeue --json")
    except SlurmOutputError as exc:
        return str(exc)


@pytest.mark.parametrize(("name", "key", "struct", "plain", "general"), [
    ("squeue.json", "jobs", parse._PlainJob, parse._plain_jobs, parse.general_jobs),
    ("sinfo.json", "nodes", parse._PlainNode, parse._plain_nodes, parse.general_nodes),
])
def test_the_fast_path_reads_no_value_otherwise(name: str, key: str, struct: type,
                                               plain: Reader, general: Reader) -> None:
    doc = json.loads(fixture_text("22.05", name))
    read = parse_jobs if key == "jobs" else parse_nodes
    assert plain(json.dumps(doc), "x") == general(json.dumps(doc), "x") is not None
    for field in struct.__struct_fields__:
        for value in [*_ODD, "(missing)"]:
            record = {k: v for k, v in doc[key][1].items() if k != field}
            if value != "(missing)":
                record[field] = value
            text = json.dumps({**doc, key: [doc[key][0], record]})
            assert _outcome(read, text) == _outcome(general, text), (field, value)


class _Reads(dict):  # type: ignore[type-arg]
    """A record that notes in ``read`` the keys asked for (get, and ``in`` before [])."""

    def get(self, key: str, default: object = None) -> object:
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.read.add(key)
        return super().__contains__(key)


def test_the_fast_path_decodes_every_field_the_general_path_reads() -> None:
    assert parse.FAST_JOBS, "SlurmJob has fields _plain_job does not give: the fast path is off"
    for name, key, struct, read in (("squeue.json", "jobs", parse._PlainJob, parse.parse_job), (
            "sinfo.json", "nodes", parse._PlainNode, parse.parse_flat_node)):
        for record in json.loads(fixture_text("22.05", name))[key]:
            reads = _Reads(record)
            reads.read = set()
            read(reads, 0, name)
            assert reads.read <= set(struct.__struct_fields__), reads.read
    job = parse_jobs(fixture_text("22.05", "squeue.json")).jobs[0]
    made = new_job(*(getattr(job, f.name) for f in dataclasses.fields(SlurmJob)))
    assert type(made) is SlurmJob and made == job and hash(made) == hash(job)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.name = "x"  # type: ignore[misc]


def _other(value: object) -> object:
    if isinstance(value, bool | int | float):
        return not value if isinstance(value, bool) else value + 1
    return (*value, "x") if isinstance(value, tuple) else f"{value}x"


def test_a_core_job_is_built_again_when_a_field_it_reads_changed() -> None:
    for job in parse_jobs(fixture_text("22.05", "squeue.json")).jobs:
        for field in dataclasses.fields(SlurmJob):
            changed = dataclasses.replace(job, **{field.name: _other(getattr(job, field.name))})
            if core_key(changed) == core_key(job):  # the source keeps the Job it built
                assert to_core_job(changed) == to_core_job(job), field.name
    runner, prio = recorded_cluster("22.05"), _jobs_2205()["pending_prio"]
    source = SlurmSource(CliSlurmClient(runner=runner), pins=_recorded_pins("22.05"))
    assert [j.num_gpus for j in source.snapshot().pending if j.job_id == prio] == [8]
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    for record in (r for r in doc["jobs"] if str(r["job_id"]) == prio):
        record["tres_per_node"] = "gres:gpu:a100:2"
    runner.answer(("squeue", "--json"), json.dumps(doc))
    assert [j.num_gpus for j in source.snapshot().pending if j.job_id == prio] == [2]


# -- scontrol text ------------------------------------------------------------------------


def test_parse_pairs_keeps_equals_and_spaces_in_values() -> None:
    pairs = parse_pairs(
        "JobId=5 TRES=cpu=2,mem=125G OS=Linux 6.1 #1 SMP CPUs/Task=1 ReqB:S:C:T=0:0:*:*"
    )
    assert pairs["TRES"] == "cpu=2,mem=125G"
    assert pairs["OS"] == "Linux 6.1 #1 SMP"
    assert pairs["CPUs/Task"] == "1" and pairs["ReqB:S:C:T"] == "0:0:*:*"


def test_2205_scontrol_show_job() -> None:
    roles = _jobs_2205()
    jobs = {j.job_id: j for j in parse_jobs_text(fixture_text("22.05", "scontrol_show_job.txt"))}
    running = jobs[roles["running_multinode"]]
    assert running.required_nodes == ("a100-01", "a100-02")
    assert (running.min_nodes, running.max_nodes) == (2, 2)
    assert running.tres_per_node == "gres:gpu:a100:4" and running.user == "alice"
    prio = jobs[roles["pending_prio"]]
    assert (prio.state, prio.priority) == ("PENDING", 5000)
    squeue = {j.job_id: j for j in parse_jobs(fixture_text("22.05", "squeue.json")).jobs}
    # Text (local time, whole seconds) and JSON agree on the deferral's end.
    assert prio.eligible_time == squeue[prio.job_id].eligible_time
    assert prio.admin_comment == squeue[prio.job_id].admin_comment
    assert jobs[roles["user_begin"]].tres_per_node == "gres:gpu:1"


def test_2205_scontrol_show_node_multiline_equals_oneline() -> None:
    multi = parse_nodes_text(fixture_text("22.05", "scontrol_show_node.txt"))
    one = parse_nodes_text(fixture_text("22.05", "scontrol_show_node_oneline.txt"))
    assert [(n.name, n.state, n.gres, n.gres_used) for n in multi] == [
        (n.name, n.state, n.gres, n.gres_used) for n in one
    ]
    nodes = {n.name: n for n in one}
    assert nodes["v100-04"].states == ("IDLE", "DRAIN")
    assert nodes["v100-01"].gres_used == "gpu:v100:3(IDX:0-2)"
    assert nodes["a100-01"].partitions == ("gpu",)
    assert nodes["a100-01"].raw["OS"].startswith("Linux")


def test_scontrol_times_are_local_time() -> None:
    jobs = parse_jobs_text(
        "JobId=7 JobState=PENDING SubmitTime=2026-11-29T16:41:45 StartTime=Unknown"
    )
    assert jobs[0].submit_time == time.mktime((2026, 11, 29, 16, 41, 45, 0, 0, -1))
    assert jobs[0].start_time is None


def test_scontrol_record_without_job_id_is_an_error() -> None:
    with pytest.raises(SlurmOutputError, match="without JobId"):
        parse_jobs_text("Priority=5 JobState=PENDING")
    with pytest.raises(SlurmOutputError, match="no Gres field"):
        parse_nodes_text("NodeName=x State=IDLE")


@pytest.mark.parametrize("field", ["StdOut", "JobName", "WorkDir", "Comment"])
def test_a_field_a_user_wrote_twice_makes_the_record_unreadable(field: str) -> None:
    """Issue 18 (3): a user's StdOut path holding `` AdminComment=...`` was read as the job's
    admin comment (later pairs won), and selftest wrote it back as SlurmUser."""
    line = fixture_text("22.05", "scontrol_show_job.txt").splitlines()[0]
    forged = re.sub(rf"(^| ){field}=(\S*)", rf"\1{field}=\2 AdminComment=mine", line, count=1)
    if forged == line:  # a field this record lacks (Comment): a user can add it
        forged = line + f" {field}=x AdminComment=mine"
    with pytest.raises(SlurmOutputError, match="AdminComment more than once in its record"):
        parse_jobs_text(forged)
    with pytest.raises(SlurmOutputError, match="a job: JobId more than once"):
        parse_jobs_text(line.replace("JobName=mn", "JobName=x JobId=9"))
    assert parse_jobs_text(line)[0].admin_comment.startswith("slurm-rl:deferred:")


def test_excluded_nodes_are_read_from_json_and_text() -> None:
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    doc["jobs"][1]["excluded_nodes"] = "a100-[01-02],v100-04"
    jobs = parse_jobs(json.dumps(doc)).jobs
    assert jobs[1].excluded_nodes == ("a100-01", "a100-02", "v100-04")
    assert all(job.excluded_nodes == () for i, job in enumerate(jobs) if i != 1)
    for version in ("24.11", "26.05"):  # later layouts name the field the same
        later = parse_jobs(fixture_text(version, "squeue.json")).jobs
        assert all(j.excluded_nodes == () for j in later)
    (text_job,) = parse_jobs_text("JobId=7 JobState=PENDING ExcNodeList=a100-[03-04]")
    assert text_job.excluded_nodes == ("a100-03", "a100-04")
    recorded = parse_jobs_text(fixture_text("22.05", "scontrol_show_job.txt"))
    assert {j.excluded_nodes for j in recorded} == {()}  # ExcNodeList=(null)


def test_a_bad_exclude_list_in_scontrol_text_names_the_field() -> None:
    with pytest.raises(SlurmOutputError) as caught:
        parse_jobs_text("JobId=7 JobState=PENDING ExcNodeList=a100-[03-")
    text = str(caught.value)
    assert "column 'ExcNodeList'" in text and "bad node list" in text and "\n" not in text
