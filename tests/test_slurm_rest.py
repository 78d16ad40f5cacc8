"""RestSlurmClient against a fake slurmrestd on a unix socket (answers recorded from 22.05.8)."""

from __future__ import annotations

import json
import socketserver
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from slurm_rl.slurm.actuator import classify_error, per_job_errors
from slurm_rl.slurm.client import SlurmClient
from slurm_rl.slurm.errors import (
    SlurmCommandError,
    SlurmOutputError,
    SlurmTimeoutError,
    SlurmUnavailableError,
)
from slurm_rl.slurm.parse import parse_jobs, parse_nodes
from slurm_rl.slurm.rest import REST_FIELDS, RestSlurmClient, rest_body

FIXTURES = Path(__file__).parent / "fixtures" / "slurm" / "22.05"
META = {"plugin": {"type": "openapi/v0.0.38"}, "Slurm": {"release": "22.05.8"}}


def _doc(**content: object) -> str:
    return json.dumps({"meta": META, "errors": [], **content})


def _failed(number: int, error: str, description: str = "") -> str:
    entry = {"description": description, "error_number": number, "error": error}
    return json.dumps({"meta": META, "errors": [entry]})


# Recorded from slurmrestd 22.05.8 (run as alice, job 1 hers, job 2 bob's).
INVALID_JOB = _failed(
    2017, "Invalid job id specified", "job update from /x/slurm.sock->fd:8 failed"
)
ACCESS_DENIED = _failed(
    2002, "Access/permission denied", "job update from /x/slurm.sock->fd:8 failed"
)
PING = _doc(pings=[{"hostname": "vm", "ping": "UP", "status": 0, "mode": "primary"}])
JOB = _doc(
    jobs=[
        {
            "job_id": 7,
            "job_state": "PENDING",
            "state_reason": "BeginTime",
            "priority": 1,
            "user_name": "bob",
            "partition": "gpu",
            "required_nodes": "v100-[03-04]",
            "excluded_nodes": "a100-[01-02]",
            "nodes": "",
            "node_count": 2,
            "submit_time": 1795975898,
            "eligible_time": 1795976498,
            "start_time": 1795976498,
            "admin_comment": "",
            "tres_per_node": "gres:gpu:1",
            "tres_per_job": "",
            "flags": ["JOB_WAS_RUNNING"],
        }
    ]
)
NODES = _doc(
    nodes=[
        {
            "name": "a100-01",
            "state": "mixed",
            "state_flags": ["DRAIN"],
            "gres": "gpu:a100:8",
            "gres_used": "gpu:a100:2(IDX:0-1)",
            "partitions": ["gpu"],
        }
    ]
)


@dataclass
class FakeRest:
    """Routes (method, path) to (status, body); records every request it got."""

    routes: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    requests: list[tuple[str, str, object]] = field(default_factory=list)
    delay_s: float = 0.0

    def answer(self, method: str, path: str, body: object) -> tuple[int, str]:
        self.requests.append((method, path, body))
        time.sleep(self.delay_s)
        return self.routes.get((method, path), (404, "Unable to find path"))


def _handler(fake: FakeRest) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            status, text = fake.answer(self.command, self.path, body)
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "Close")
            self.end_headers()
            self.wfile.write(data)

        do_GET = _serve
        do_POST = _serve

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

        def address_string(self) -> str:
            return "unix"

    return Handler


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        # The timeout test's client hangs up before the slow answer: a broken pipe there is
        # the point of the test, not noise for the test log.
        if not isinstance(sys.exc_info()[1], BrokenPipeError | ConnectionResetError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[tuple[FakeRest, RestSlurmClient]]:
    state = FakeRest()
    sock = tmp_path / "slurm.sock"
    server = _Server(str(sock), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, RestSlurmClient(sock, timeout_s=2.0)
    finally:
        server.shutdown()
        server.server_close()


URL = "/slurm/v0.0.38"


def test_is_a_slurm_client(tmp_path: Path) -> None:
    assert isinstance(RestSlurmClient(tmp_path / "s.sock"), SlurmClient)


def test_ping(fake: tuple[FakeRest, RestSlurmClient]) -> None:
    server, client = fake
    server.routes[("GET", f"{URL}/ping")] = (200, PING)
    assert client.ping()[0]["ping"] == "UP"


def test_jobs_and_nodes_use_the_cli_parsers(fake: tuple[FakeRest, RestSlurmClient]) -> None:
    server, client = fake
    squeue = (FIXTURES / "squeue.json").read_text()
    sinfo = (FIXTURES / "sinfo.json").read_text()
    server.routes[("GET", f"{URL}/jobs")] = (200, squeue)
    server.routes[("GET", f"{URL}/nodes")] = (200, sinfo)
    assert client.jobs().jobs == parse_jobs(squeue).jobs
    assert client.nodes().nodes == parse_nodes(sinfo).nodes


def test_other_api_version_in_the_path(fake: tuple[FakeRest, RestSlurmClient]) -> None:
    server, client = fake
    other = RestSlurmClient(client.socket_path, api="v0.0.37")
    server.routes[("GET", "/slurm/v0.0.37/ping")] = (200, PING)
    assert other.ping()[0]["hostname"] == "vm"


def test_reported_errors_raise_typed(fake: tuple[FakeRest, RestSlurmClient]) -> None:
    server, client = fake
    server.routes[("GET", f"{URL}/jobs")] = (500, _failed(1, "Unable to contact slurm controller"))
    with pytest.raises(SlurmUnavailableError):
        client.jobs()
    server.routes[("GET", f"{URL}/nodes")] = (401, "Authentication failure")
    with pytest.raises(SlurmCommandError, match="HTTP 401: Authentication failure"):
        client.nodes()


def test_truncated_answer_is_an_output_error(fake: tuple[FakeRest, RestSlurmClient]) -> None:
    server, client = fake
    server.routes[("GET", f"{URL}/jobs")] = (200, '{"meta": {}, "jobs": [')
    with pytest.raises(SlurmOutputError, match="truncated"):
        client.jobs()


def test_no_socket_is_unavailable(tmp_path: Path) -> None:
    client = RestSlurmClient(tmp_path / "missing.sock")
    with pytest.raises(SlurmUnavailableError, match="cannot talk to slurmrestd"):
        client.jobs()
    result = client.update_jobs(["5"], {"Comment": "x"})
    assert not result.ok and "cannot talk to slurmrestd" in per_job_errors(result)["5"]


def test_slow_answer_times_out(fake: tuple[FakeRest, RestSlurmClient]) -> None:
    server, client = fake
    server.delay_s = 0.5
    server.routes[("GET", f"{URL}/jobs")] = (200, _doc(jobs=[]))
    slow = RestSlurmClient(client.socket_path, timeout_s=0.1)
    with pytest.raises(SlurmTimeoutError):
        slow.jobs()
    result = slow.update_jobs(["5"], {"Comment": "x"})
    assert result.returncode == 124 and "did not answer" in result.stderr


def test_show_job_and_show_nodes(fake: tuple[FakeRest, RestSlurmClient]) -> None:
    server, client = fake
    server.routes[("GET", f"{URL}/job/7")] = (200, JOB)
    server.routes[("GET", f"{URL}/job/8")] = (500, INVALID_JOB)
    server.routes[("GET", f"{URL}/nodes")] = (200, NODES)
    job = client.show_job("7")
    assert job is not None
    assert (job.job_id, job.state, job.user, job.priority) == ("7", "PENDING", "bob", 1)
    assert job.required_nodes == ("v100-03", "v100-04") and job.min_nodes == 2
    assert job.excluded_nodes == ("a100-01", "a100-02")
    assert job.start_time == 1795976498.0 and job.raw["state_reason"] == "BeginTime"
    assert client.show_job("8") is None
    (node,) = client.show_nodes()
    assert (node.name, node.state, node.states) == ("a100-01", "MIXED+DRAIN", ("MIXED", "DRAIN"))
    assert (node.gres_used, node.partitions) == ("gpu:a100:2(IDX:0-1)", ("gpu",))


def test_update_maps_fields_one_post_per_job(fake: tuple[FakeRest, RestSlurmClient]) -> None:
    server, client = fake
    for job in ("11", "12"):
        server.routes[("POST", f"{URL}/job/{job}")] = (200, _doc())
    fields = {"ReqNodeList": "v100-[03-04]", "NumNodes": "2-2", "Priority": "4321"}
    result = client.update_jobs(["11", "12"], {**fields, "StartTime": "now"})
    assert result.ok, result.stderr
    body = {"nodelist": "v100-[03-04]", "nodes": "2-2", "priority": "4321", "begin_time": "now"}
    assert server.requests == [
        ("POST", f"{URL}/job/11", body),
        ("POST", f"{URL}/job/12", body),
    ]
    assert result.argv[:3] == ("slurmrestd", "POST", "JobId=11,12")


def test_update_failures_are_recorded_per_job(fake: tuple[FakeRest, RestSlurmClient]) -> None:
    server, client = fake
    server.routes[("POST", f"{URL}/job/1")] = (200, _doc())
    server.routes[("POST", f"{URL}/job/2")] = (500, ACCESS_DENIED)
    server.routes[("POST", f"{URL}/job/3")] = (500, INVALID_JOB)
    result = client.update_jobs(["1", "2", "3"], {"Priority": "9"})
    assert not result.ok and result.returncode == 500
    errors = per_job_errors(result)
    assert set(errors) == {"2", "3"}
    assert classify_error(errors["2"]) == "permission"
    assert classify_error(errors["3"]) == "vanished"
    assert "->fd:" not in result.stderr


def test_update_with_an_unmapped_field_sends_nothing(
    fake: tuple[FakeRest, RestSlurmClient],
) -> None:
    server, client = fake
    result = client.update_jobs(["1", "2"], {"Priority": "9", "AdminComment": "x"})
    assert result.returncode == 2 and server.requests == []
    assert per_job_errors(result) == {
        j: "no slurmrestd v0.0.38 update field for AdminComment; nothing was sent" for j in "12"
    }


def test_update_needs_jobs_and_fields(tmp_path: Path) -> None:
    client = RestSlurmClient(tmp_path / "s.sock")
    with pytest.raises(ValueError):
        client.update_jobs([], {"Priority": "1"})
    with pytest.raises(ValueError):
        client.update_jobs(["1"], {})


def test_rest_body_names() -> None:
    assert rest_body({"ReqNodeList": "a", "ExcNodeList": "b", "Features": "c"}) == {
        "nodelist": "a",
        "exclude_nodes": "b",
        "constraints": "c",
    }
    assert set(REST_FIELDS) >= {"ReqNodeList", "NumNodes", "StartTime", "Priority", "Comment"}


def test_a_bad_exclude_list_from_slurmrestd_names_the_field(
    fake: tuple[FakeRest, RestSlurmClient],
) -> None:
    server, client = fake
    record = json.loads(JOB)["jobs"][0]
    server.routes[("GET", f"{URL}/job/7")] = (200, _doc(jobs=[{**record, "excluded_nodes": "a["}]))
    with pytest.raises(SlurmOutputError, match="column 'excluded_nodes': bad host list"):
        client.show_job("7")


def test_an_exclusion_and_its_clearing_become_exclude_nodes() -> None:
    # Both were checked against slurmrestd 22.05.8: "" clears the job's ExcNodeList.
    assert rest_body({"ExcNodeList": "a100-[01-02]"}) == {"exclude_nodes": "a100-[01-02]"}
    assert rest_body({"ExcNodeList": ""}) == {"exclude_nodes": ""}
