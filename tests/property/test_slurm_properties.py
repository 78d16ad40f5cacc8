"""Mutated Slurm output through the real parsers: ``squeue --json`` / ``sinfo --json`` /
``scontrol show nodes --json`` (slurm_rl/slurm/parse.py) and ``scontrol show job -o`` /
``scontrol -d show node`` text (slurm_rl/slurm/scontrol.py), then on to the core types the
daemon schedules with (slurm_rl/slurm/source.py).

Whatever Slurm printed, a parser either refuses it with one :class:`SlurmOutputError` line
naming the command, leaves an unreadable job record out (naming it in one line), or returns
records of the right types. Never another exception, never a hang.

The inputs these properties found breaking the parsers are pinned at the end (each fixed).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from slurm_rl.slurm.errors import SlurmOutputError
from slurm_rl.slurm.hostlist import MAX_HOSTS
from slurm_rl.slurm.parse import parse_jobs, parse_nodes
from slurm_rl.slurm.records import KNOWN_JOB_STATES, JobsReport, NodesReport
from slurm_rl.slurm.scontrol import parse_jobs_text, parse_nodes_text, parse_records
from slurm_rl.slurm.source import SourceConfig, build_cluster, node_gpus, to_core_job
from slurm_rl.traces.model import MAX_JOB_GPUS
from tests.property._support import assert_one_line, budget, nasty_text, outcome, within

FIXTURES = Path(__file__).parent.parent / "fixtures" / "slurm"
JOB_DOCS = ("22.05/squeue.json", "22.05/squeue_waiting.json", "24.11/squeue.json",
            "26.05/squeue.json")
NODE_DOCS = ("22.05/sinfo.json", "24.11/sinfo.json", "24.11/scontrol_show_nodes.json",
             "26.05/scontrol_show_nodes.json")
_DOCS = {name: json.loads((FIXTURES / name).read_text()) for name in JOB_DOCS + NODE_DOCS}
SQUEUE, SINFO = "squeue --json", "sinfo --json"

# The fields the parsers read: most mutations land on one of them.
READ_KEYS = frozenset({
    "meta", "Slurm", "slurm", "version", "major", "minor", "micro", "plugin", "errors", "jobs",
    "job_id", "job_state", "name", "user_name", "user_id", "partition", "state_reason",
    "priority", "submit_time", "eligible_time", "start_time", "end_time", "time_limit",
    "node_count", "tasks", "nodes", "required_nodes", "excluded_nodes", "features", "resv_name",
    "tres_per_node", "tres_per_job", "tres_per_task", "gres_detail", "admin_comment", "comment",
    "requeue", "exit_code", "return_code", "signal", "id", "array_task_string",
    "array_task_id", "het_job_id", "set", "infinite", "number", "sinfo", "node", "state",
    "state_flags", "gres", "gres_used", "total", "used", "partitions", "active_features",
})

NON_FINITE = (math.nan, math.inf, -math.inf)

JSON_VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 2**31, 0xFFFFFFFE, 2**64, 10**30, -(10**30), 1.5, -0.0, 1e308,
    "", "x", "PENDING", "RUNNING", "COMPLETED", "BOGUS", "gpu:a100:4", "gres/gpu=2",
    "gres:gpu:a100:x", "gpu:(null):0(IDX:N/A)", "n[1-3]", "n[1-99999999]", "n[", "(null)",
    "\x00", "a" * 10_000, "é\U0001f600", "\n", [], ["PENDING"], ["IDLE", "DRAIN"], [1], [[]],
    {}, {"set": True, "number": 5}, {"set": False, "number": 5}, {"infinite": True, "number": 1},
    {"number": "5"}, {"set": True, "number": -3}, {"return_code": 3, "signal": {"id": 9}},
    {"number": {"number": 1}},
]


_JSON = st.one_of(st.sampled_from(JSON_VALUES), st.sampled_from(NON_FINITE), nasty_text(),
                  st.integers(), st.floats())


@dataclass(frozen=True)
class Mutation:
    """Set (or delete: value ``DELETE``) the value at ``path`` of a fixture document."""

    path: tuple[str | int, ...]
    value: Any


DELETE = object()


def _paths(doc: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    found = [path] if path else []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) \
        if isinstance(doc, list) else ()
    for key, child in items:
        found.extend(_paths(child, (*path, key)))
    return found


_PATHS = {name: _paths(doc) for name, doc in _DOCS.items()}
_READ_PATHS = {name: [p for p in paths if any(k in READ_KEYS for k in p[-1:])]
               for name, paths in _PATHS.items()}


def apply(name: str, mutations: list[Mutation]) -> Any:
    doc = json.loads(json.dumps(_DOCS[name]))
    for mutation in mutations:
        *head, last = mutation.path
        container = doc
        try:
            for key in head:
                container = container[key]
            if mutation.value is DELETE:
                del container[last]
            else:
                container[last] = mutation.value
        except (KeyError, IndexError, TypeError):  # an earlier mutation removed the way there
            pass
    return doc


@st.composite
def mutations(draw: st.DrawFn, name: str, values: st.SearchStrategy[Any]) -> list[Mutation]:
    found = []
    for _ in range(draw(st.integers(1, 3))):
        paths = _READ_PATHS[name] if draw(st.integers(0, 3)) else _PATHS[name]
        value = DELETE if draw(st.integers(0, 5)) == 0 else draw(values)
        found.append(Mutation(draw(st.sampled_from(paths)), value))
    return found


def _text_of(doc: Any, cut: int | None) -> str:
    text = json.dumps(doc)
    return text if cut is None else text[: cut % (len(text) + 1)]


# ----- what a parser may answer --------------------------------------------------------------


def check_jobs(text: str) -> JobsReport | None:
    try:
        report = within(lambda: parse_jobs(text), "parse_jobs")
    except SlurmOutputError as error:
        assert_one_line(str(error), SQUEUE)
        outcome("refused")
        return None
    outcome("some jobs left out" if report.unreadable else "read")
    for line in report.unreadable:
        assert_one_line(line, SQUEUE)
    for job in report.jobs:
        assert isinstance(job.job_id, str) and job.job_id, job
        assert job.state in KNOWN_JOB_STATES, job
        for value in (job.submit_time, job.eligible_time, job.start_time, job.end_time,
                      job.time_limit_s):
            assert value is None or isinstance(value, float), job
        for count in (job.priority, job.node_count, job.tasks, job.exit_code):
            assert count is None or isinstance(count, int), job
        for names in (job.nodes, job.required_nodes, job.excluded_nodes):
            assert len(names) <= MAX_HOSTS and all(isinstance(n, str) and n for n in names)
        core = to_core_job(job)
        assert core is None or (isinstance(core.num_gpus, int) and core.num_gpus >= 1), core
    return report


def check_nodes(text: str) -> NodesReport | None:
    try:
        report = within(lambda: parse_nodes(text), "parse_nodes")
    except SlurmOutputError as error:
        assert_one_line(str(error), SINFO)
        outcome("refused")
        return None
    outcome("read")
    for node in report.nodes:
        assert isinstance(node.name, str) and node.name, node
        assert node.states and all(isinstance(s, str) and s for s in node.states), node
        gpu_type, total, used = node_gpus(node)
        assert isinstance(gpu_type, str) and total >= 0 and 0 <= used <= total, node
    build_cluster(report.nodes, "c", SourceConfig())
    return report


def in_range_jobs(report: JobsReport | None) -> None:
    """What the daemon schedules with: times and limits finite, not negative; GPU counts
    within what any job may ask for."""
    for job in report.jobs if report else ():
        for value in (job.submit_time, job.eligible_time, job.start_time, job.end_time,
                      job.time_limit_s):
            assert value is None or (math.isfinite(value) and value >= 0), job
        core = to_core_job(job)
        assert core is None or core.num_gpus <= MAX_JOB_GPUS, core


def in_range_nodes(report: NodesReport | None) -> None:
    for node in report.nodes if report else ():
        assert node_gpus(node)[1] <= MAX_JOB_GPUS, node


# ----- the properties ------------------------------------------------------------------------


@budget(400)
@given(data=st.data())
def test_mutated_squeue_json_is_refused_in_one_line_or_read(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(JOB_DOCS), label="fixture")
    doc = apply(name, data.draw(mutations(name, _JSON), label="mutations"))
    check_jobs(_text_of(doc, data.draw(st.none() | st.integers(0), label="cut at")))


@budget(300)
@given(data=st.data())
def test_mutated_sinfo_json_is_refused_in_one_line_or_read(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(NODE_DOCS), label="fixture")
    doc = apply(name, data.draw(mutations(name, _JSON), label="mutations"))
    check_nodes(_text_of(doc, data.draw(st.none() | st.integers(0), label="cut at")))


_ANY_JSON = st.one_of(_JSON, st.sampled_from(
    ["gres:gpu:99999999999999999999999", "gpu:a100:" + "9" * 30]))


@budget(60)
@example(name=JOB_DOCS[0], changes=[
    Mutation(("jobs", 0, "tres_per_job"), "gres:gpu:99999999999999999999999")])
@given(name=st.sampled_from(JOB_DOCS), changes=st.data())
def test_squeue_json_values_are_in_range(name: str, changes: Any) -> None:
    if not isinstance(changes, list):
        changes = changes.draw(mutations(name, _ANY_JSON))
    in_range_jobs(check_jobs(json.dumps(apply(name, changes))))


@budget(40)
@example(name=NODE_DOCS[0], changes=[Mutation(("nodes", 0, "gres"), "gpu:a100:" + "9" * 20)])
@given(name=st.sampled_from(NODE_DOCS), changes=st.data())
def test_sinfo_json_values_are_in_range(name: str, changes: Any) -> None:
    if not isinstance(changes, list):
        changes = changes.draw(mutations(name, _ANY_JSON))
    in_range_nodes(check_nodes(json.dumps(apply(name, changes))))


# ----- scontrol text -------------------------------------------------------------------------

def _records(name: str, first_key: str) -> list[list[tuple[str, str]]]:
    text = (FIXTURES / name).read_text()
    return [list(record.items()) for record in parse_records(text, first_key)]


SCONTROL = {
    "JobId": _records("22.05/scontrol_show_job.txt", "JobId"),
    "NodeName": _records("22.05/scontrol_show_node_oneline.txt", "NodeName")
    + _records("22.05/scontrol_show_node.txt", "NodeName"),
}
_SCONTROL_VALUES = st.one_of(nasty_text(), st.sampled_from([
    "RUNNING", "PENDING", "MIXED+DRAIN", "IDLE*", "1-1", "2-", "-3", "5-2", "n[1-3]",
    "n[1-99999999]", "gpu:a100:8", "gpu:a100:4(IDX:0-3)", "gres/gpu=2", "2026-11-29T16:41:45",
    "9999-12-31T23:59:59", "0000-01-01T00:00:00", "x=y", "JobId=7", "NodeName=z"]))


@st.composite
def scontrol_text(draw: st.DrawFn, first_key: str) -> str:
    records = [list(r) for r in draw(st.lists(st.sampled_from(SCONTROL[first_key]),
                                              min_size=1, max_size=3))]
    for _ in range(draw(st.integers(1, 4))):
        record = draw(st.sampled_from(records))
        at = draw(st.integers(0, len(record) - 1))
        op = draw(st.sampled_from(["replace", "replace", "delete", "repeat", "insert"]))
        key, _ = record[at]
        if op == "replace":
            record[at] = (key, draw(_SCONTROL_VALUES))
        elif op == "delete":
            del record[at]
        elif op == "repeat":
            record.insert(at, record[at])
        else:
            new_key = draw(st.from_regex(r"[A-Za-z][A-Za-z0-9_:/.]{0,8}", fullmatch=True))
            record.insert(at, (new_key, draw(_SCONTROL_VALUES)))
    lines = [" ".join(f"{k}={v}" for k, v in record) for record in records if record]
    return "\n".join(lines) + "\n"


@budget(300)
@given(text=scontrol_text("JobId"))
def test_mutated_scontrol_jobs_are_refused_in_one_line_or_read(text: str) -> None:
    where = "scontrol show job -o"
    try:
        jobs = within(lambda: parse_jobs_text(text, where), "parse_jobs_text")
    except SlurmOutputError as error:
        assert_one_line(str(error), where)
        outcome("refused")
        return
    outcome("read")
    for job in jobs:
        assert isinstance(job.job_id, str) and isinstance(job.state, str), job
        assert job.priority is None or isinstance(job.priority, int), job
        for count in (job.min_nodes, job.max_nodes):
            assert count is None or (isinstance(count, int) and count >= 0), job
        for value in (job.submit_time, job.eligible_time, job.start_time):
            assert value is None or math.isfinite(value), job
        for names in (job.nodes, job.required_nodes, job.excluded_nodes):
            assert len(names) <= MAX_HOSTS and all(isinstance(n, str) and n for n in names)


@budget(200)
@given(text=scontrol_text("NodeName"))
def test_mutated_scontrol_nodes_are_refused_in_one_line_or_read(text: str) -> None:
    where = "scontrol -d show node"
    try:
        nodes = within(lambda: parse_nodes_text(text, where), "parse_nodes_text")
    except SlurmOutputError as error:
        assert_one_line(str(error), where)
        outcome("refused")
        return
    outcome("read")
    for node in nodes:
        assert isinstance(node.name, str) and node.states, node
        assert all(isinstance(p, str) and p for p in node.partitions), node


# ----- inputs these properties found breaking them (slurm_rl/slurm/, another change's) --------
# Each was fixed in slurm_rl/slurm/ (parse.py, gres.py, hostlist.py, scontrol.py).


def _jobs_doc(**fields: Any) -> str:
    doc = json.loads(json.dumps(_DOCS[JOB_DOCS[0]]))
    doc["jobs"][0].update(fields)
    return json.dumps(doc)


def _nodes_doc(**fields: Any) -> str:
    doc = json.loads(json.dumps(_DOCS[NODE_DOCS[0]]))
    doc["nodes"][0].update(fields)
    return json.dumps(doc)


@pytest.mark.parametrize("text", [
    pytest.param(_jobs_doc(priority=math.nan), id="priority NaN"),
    pytest.param(_jobs_doc(priority=-math.inf), id="priority -Infinity"),
    pytest.param(_jobs_doc(priority={"set": True, "infinite": False, "number": math.nan}),
                 id="priority wrapped NaN"),
    pytest.param(_jobs_doc(tres_per_job="gres:gpu:²"), id="GRES count '²'"),
    pytest.param(_jobs_doc(nodes="n[1-²]"), id="host range '²'"),
    pytest.param('{"meta": {"Slurm": {"version": {"major": "²", "minor": 5, "micro": 8}}},'
                 ' "jobs": []}', id="version '²'"),
    pytest.param("[" * 100_000 + "]" * 100_000, id="deeply nested JSON"),
])
def test_squeue_json_that_raised_another_exception(text: str) -> None:
    check_jobs(text)


@pytest.mark.parametrize("text", [
    pytest.param(_jobs_doc(submit_time=math.nan), id="submit_time NaN"),
    pytest.param(_jobs_doc(submit_time=-5), id="submit_time -5"),
    pytest.param(_jobs_doc(time_limit=-5), id="time_limit -5"),
    pytest.param(_jobs_doc(tres_per_job="gres:gpu:99999999999999999999999"),
                 id="1e23 GPUs"),
])
def test_squeue_json_values_out_of_range(text: str) -> None:
    in_range_jobs(check_jobs(text))


def test_sinfo_node_gpus_out_of_range() -> None:
    in_range_nodes(check_nodes(_nodes_doc(gres="gpu:a100:99999999999999999999")))


def test_a_host_range_with_spaces_is_bounded_too() -> None:
    report = check_jobs(_jobs_doc(nodes="n[1 - 200000]"))
    assert report is not None and report.unreadable, "the job should be left out"


@pytest.mark.parametrize(("line", "check"), [
    pytest.param("JobId=1 JobState=RUNNING Priority=²", "no exception", id="Priority '²'"),
    pytest.param("JobId=1 JobState=RUNNING NumNodes=²", "no exception", id="NumNodes '²'"),
    pytest.param("JobId=1 JobState=RUNNING NumNodes=99999999999999999999999-5", "nodes",
                 id="NumNodes min > max"),
    pytest.param("JobId=1 JobState=RUNNING Priority=-7", "priority", id="Priority -7"),
])
def test_scontrol_job_records_that_break_the_properties(line: str, check: str) -> None:
    try:
        jobs = parse_jobs_text(line)
    except SlurmOutputError as error:
        assert_one_line(str(error), "scontrol")
        return
    for job in jobs:
        if check == "nodes":
            assert job.min_nodes is None or job.max_nodes is None \
                or job.min_nodes <= job.max_nodes
        if check == "priority":
            assert job.priority is None or job.priority >= 0
