"""A :class:`~slurm_rl.slurm.client.SlurmClient` over slurmrestd on a unix socket.

Standard library only: :class:`UnixHTTPConnection` is an ``http.client.HTTPConnection``
that connects an ``AF_UNIX`` socket. slurmrestd must listen there with ``rest_auth/local``
(``slurmrestd -s openapi/v0.0.38 -a rest_auth/local unix:/path/slurm.sock``, run as a
non-root user; it refuses root). A root client may connect to it, but every request runs
with the identity of the slurmrestd process, so raising priorities needs slurmrestd to run
as SlurmUser (an admin). The v0.0.38 job and node objects are those ``squeue --json`` and
``sinfo --json`` print in 22.05, so the JSON parsers of :mod:`slurm_rl.slurm.parse` are reused.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_rl.slurm.errors import (
    SlurmCommandError,
    SlurmError,
    SlurmOutputError,
    SlurmTimeoutError,
    SlurmUnavailableError,
)
from slurm_rl.slurm.hostlist import HostlistError, expand
from slurm_rl.slurm.json_document import load_document
from slurm_rl.slurm.parse import parse_jobs, parse_nodes
from slurm_rl.slurm.proc import CommandResult, is_unreachable
from slurm_rl.slurm.records import JobsReport, NodesReport
from slurm_rl.slurm.reservations import SlurmReservation
from slurm_rl.slurm.scontrol import ScontrolJob, ScontrolNode

DEFAULT_API = "v0.0.38"
DEFAULT_TIMEOUT_S = 15.0

# scontrol-style update fields -> the sbatch-style names of the v0.0.38 job update body.
# Each was checked against slurmrestd 22.05.8 (see docs/slurm.md, "slurmrestd client").
REST_FIELDS: Mapping[str, str] = {
    "ReqNodeList": "nodelist",  # "v100-[03-04]"
    "ExcNodeList": "exclude_nodes",
    "NumNodes": "nodes",  # "2-2" or "2", as sbatch -N
    "StartTime": "begin_time",  # "now" or "2026-11-29T18:45:00", as sbatch --begin
    "Priority": "priority",  # sent as a string
    "Nice": "nice",
    "Comment": "comment",
    "Features": "constraints",
}
# slurmrestd answers an unknown job id like this (HTTP 500, error_number 2017).
_INVALID_JOB_ID = 2017


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a unix stream socket; the host name is only sent in the Host header."""

    def __init__(self, socket_path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.socket_path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


@dataclass(frozen=True, slots=True)
class RestAnswer:
    """One HTTP exchange: what was asked (as an argv-like tuple) and what came back."""

    argv: tuple[str, ...]
    status: int
    body: str
    duration_s: float = 0.0


@dataclass(frozen=True, slots=True)
class RestError:
    """One entry of an answer's ``errors`` list."""

    message: str
    number: int | None


class RestSlurmClient:
    """:class:`SlurmClient` over slurmrestd's openapi/v0.0.38 on a unix socket.

    Reads raise the CLI client's typed errors: :class:`SlurmTimeoutError` when slurmrestd
    does not answer in ``timeout_s``, :class:`SlurmUnavailableError` when its socket cannot
    be connected (or it says slurmctld is unreachable), :class:`SlurmCommandError` for any
    other failed request and :class:`SlurmOutputError` for an answer we cannot parse.
    """

    def __init__(
        self, socket_path: Path, *, api: str = DEFAULT_API, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.socket_path = Path(socket_path)
        self.api = api
        self.timeout_s = timeout_s

    # -- transport -----------------------------------------------------------------------

    def url(self, endpoint: str) -> str:
        return f"/slurm/{self.api}/{endpoint}"

    def request(
        self, method: str, endpoint: str, body: Mapping[str, Any] | None = None
    ) -> RestAnswer:
        """One request on a fresh connection (slurmrestd closes it after each answer)."""
        path = self.url(endpoint)
        payload = None if body is None else json.dumps(body, sort_keys=True)
        argv = ("slurmrestd", method, path, *(() if payload is None else (payload,)))
        headers = {} if payload is None else {"Content-Type": "application/json"}
        connection = UnixHTTPConnection(self.socket_path, self.timeout_s)
        started = time.monotonic()
        try:
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            text = response.read().decode("utf-8", errors="replace")
        except TimeoutError as exc:
            raise SlurmTimeoutError(argv, self.timeout_s) from exc
        except (OSError, http.client.HTTPException) as exc:
            reason = f"cannot talk to slurmrestd at {self.socket_path}: {exc}"
            raise SlurmUnavailableError(argv, 1, reason) from exc
        finally:
            connection.close()
        return RestAnswer(argv, response.status, text, time.monotonic() - started)

    def get(self, endpoint: str) -> RestAnswer:
        """GET ``endpoint``; anything but a clean HTTP 200 raises a typed error."""
        answer = self.request("GET", endpoint)
        errors = answer_errors(answer)
        if answer.status != http.client.OK or errors:
            raise _read_error(answer, errors)
        return answer

    # -- SlurmClient ----------------------------------------------------------------------

    def ping(self) -> list[dict[str, Any]]:
        """slurmrestd's ``/ping``: one entry per controller (``{"ping": "UP", ...}``)."""
        answer = self.get("ping")
        pings = load_document(answer.body, _source(answer)).get("pings")
        if not isinstance(pings, list):
            raise SlurmOutputError("no pings list", path=_source(answer), column="pings")
        return [p for p in pings if isinstance(p, dict)]

    def jobs(self) -> JobsReport:
        answer = self.get("jobs")
        return parse_jobs(answer.body, _source(answer))

    def nodes(self) -> NodesReport:
        answer = self.get("nodes")
        return parse_nodes(answer.body, _source(answer))

    def show_job(self, job_id: str) -> ScontrolJob | None:
        """``GET /job/{id}`` mapped onto :class:`ScontrolJob`; None once Slurm forgot it.

        The v0.0.38 job has ``node_count`` but no node range, so ``min_nodes`` is that count
        and ``max_nodes`` is None. ``raw`` holds the record's scalar fields as text.
        """
        answer = self.request("GET", f"job/{job_id}")
        errors = answer_errors(answer)
        if any(e.number == _INVALID_JOB_ID for e in errors):
            return None
        if answer.status != http.client.OK or errors:
            raise _read_error(answer, errors)
        records = _records(answer, "jobs")
        return job_from_rest(records[0]) if records else None

    def reservations(self) -> list[SlurmReservation]:
        """``GET /reservations``: v0.0.38 gives no state, so the window decides which hold."""
        answer = self.get("reservations")
        return [reservation_from_rest(record) for record in _records(answer, "reservations")]

    def show_nodes(self) -> list[ScontrolNode]:
        """``GET /nodes`` mapped onto :class:`ScontrolNode` (state, gres, gres_used)."""
        answer = self.get("nodes")
        return [node_from_rest(record) for record in _records(answer, "nodes")]

    def update_jobs(self, job_ids: Sequence[str], fields: Mapping[str, str]) -> CommandResult:
        """One ``POST /job/{id}`` per job; the combined result is returned, never raised.

        Fields are scontrol's names, translated with :data:`REST_FIELDS`. Anything else
        (``AdminComment``, ``TimeLimit``, ``Partition``, ``QOS``, ``Dependency`` ... have no
        v0.0.38 update name we have verified) fails the whole call before any request is
        sent, with a non-zero result whose stderr names the field; nothing is dropped. A
        job's failure is an ``<error> for job <id>`` line in stderr (what the actuator reads
        from scontrol); the exit status is 0 only if every job's update succeeded.
        """
        if not job_ids or not fields:
            raise ValueError("an update needs at least one job id and one field")
        unknown = [name for name in fields if name not in REST_FIELDS]
        if unknown:
            return _unsupported(job_ids, fields, unknown)
        body = rest_body(fields)
        results = [self._update_one(job_id, body) for job_id in job_ids]
        return results[0] if len(results) == 1 else _combine(_call_argv(job_ids, fields), results)

    def requeue_job(self, job_id: str) -> CommandResult:
        """Not sent: v0.0.38 has no requeue we have verified. A non-zero result naming the
        job, as for an update field it cannot send (the daemon moves no job through REST)."""
        argv = ("slurmrestd", "requeue", job_id)
        message = f"no slurmrestd v0.0.38 requeue; nothing was sent for job {job_id}\n"
        return CommandResult(argv, 2, "", message)

    def _update_one(self, job_id: str, body: Mapping[str, str]) -> CommandResult:
        try:
            answer = self.request("POST", f"job/{job_id}", body)
        except SlurmTimeoutError as exc:
            return CommandResult(exc.argv, 124, "", f"{exc} for job {job_id}")
        except SlurmError as exc:
            argv = getattr(exc, "argv", ("slurmrestd", "POST", self.url(f"job/{job_id}")))
            return CommandResult(tuple(argv), 1, "", f"{_one_line(str(exc))} for job {job_id}")
        return _update_result(job_id, answer)


# -- answers -------------------------------------------------------------------------------


def _source(answer: RestAnswer) -> str:
    return " ".join(answer.argv[:3])


def _one_line(text: str) -> str:
    return " ".join(text.split())


def answer_errors(answer: RestAnswer) -> list[RestError]:
    """The ``errors`` list of a JSON answer; a non-JSON error body becomes one entry."""
    try:
        doc = json.loads(answer.body)
    except json.JSONDecodeError:
        if answer.status == http.client.OK:
            return []  # the parser reports the broken document with its context
        return [RestError(f"HTTP {answer.status}: {_one_line(answer.body) or 'no body'}", None)]
    raw = doc.get("errors") if isinstance(doc, dict) else None
    errors = [_rest_error(entry) for entry in raw] if isinstance(raw, list) else []
    if not errors and answer.status != http.client.OK:
        errors.append(RestError(f"HTTP {answer.status}", None))
    return errors


def _rest_error(entry: object) -> RestError:
    if not isinstance(entry, dict):
        return RestError(str(entry), None)
    message = entry.get("error") or entry.get("description") or json.dumps(entry)
    detail = entry.get("description")
    # "job update from <socket>->fd:8 failed" only repeats which request it was.
    if detail and detail != message and entry.get("error") and "->fd:" not in str(detail):
        message = f"{message} ({detail})"
    number = entry.get("error_number", entry.get("error_code"))
    return RestError(str(message), number if isinstance(number, int) else None)


def _read_error(answer: RestAnswer, errors: list[RestError]) -> SlurmCommandError:
    text = "; ".join(e.message for e in errors) or f"HTTP {answer.status}"
    if is_unreachable(text):
        return SlurmUnavailableError(answer.argv[:3], answer.status, text)
    return SlurmCommandError(answer.argv[:3], answer.status, text)


def _records(answer: RestAnswer, key: str) -> list[dict[str, Any]]:
    doc = load_document(answer.body, _source(answer))
    records = doc.get(key)
    if not isinstance(records, list):
        raise SlurmOutputError(f"no {key} list", path=_source(answer), column=key)
    return [r for r in records if isinstance(r, dict)]


def _update_result(job_id: str, answer: RestAnswer) -> CommandResult:
    errors = answer_errors(answer)
    if answer.status == http.client.OK and not errors:
        return CommandResult(answer.argv, 0, f"job {job_id}: updated\n", "", answer.duration_s)
    lines = [f"{e.message} for job {job_id}" for e in errors]
    code = answer.status if answer.status != http.client.OK else 1
    return CommandResult(answer.argv, code, "", "\n".join(lines) + "\n", answer.duration_s)


def _call_argv(job_ids: Sequence[str], fields: Mapping[str, str]) -> tuple[str, ...]:
    """The whole call written like scontrol's argv, for the audit trail."""
    pairs = tuple(f"{key}={value}" for key, value in fields.items())
    return ("slurmrestd", "POST", f"JobId={','.join(job_ids)}", *pairs)


def _combine(argv: tuple[str, ...], results: list[CommandResult]) -> CommandResult:
    """Several per-job results as one: the first failure's exit status, all the output."""
    failed = [r.returncode for r in results if not r.ok]
    return CommandResult(
        argv,
        failed[0] if failed else 0,
        "".join(r.stdout for r in results),
        "".join(r.stderr for r in results),
        sum(r.duration_s for r in results),
    )


def _unsupported(
    job_ids: Sequence[str], fields: Mapping[str, str], unknown: list[str]
) -> CommandResult:
    argv = _call_argv(job_ids, fields)
    names = ", ".join(unknown)
    message = f"no slurmrestd v0.0.38 update field for {names}; nothing was sent"
    return CommandResult(argv, 2, "", "".join(f"{message} for job {j}\n" for j in job_ids))


def rest_body(fields: Mapping[str, str]) -> dict[str, str]:
    """scontrol-style fields -> the v0.0.38 update body (every value a string)."""
    return {REST_FIELDS[key]: value for key, value in fields.items()}


# -- scontrol-style views ------------------------------------------------------------------


def _text(record: Mapping[str, Any], key: str) -> str:
    value = record.get(key)
    return "" if value is None else str(value)


def _hosts(record: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = record.get(key)
    text = "" if value is None else str(value)
    if not text or text in ("(null)", "None"):
        return ()
    try:
        return expand(text)
    except HostlistError as exc:
        raise SlurmOutputError(f"bad host list {text!r}", path="slurmrestd", column=key) from exc


def _epoch(record: Mapping[str, Any], key: str) -> float | None:
    value = record.get(key)
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _count(record: Mapping[str, Any], key: str) -> int | None:
    value = record.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _scalars(record: Mapping[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in record.items() if isinstance(v, str | int | float)}


def job_from_rest(record: Mapping[str, Any]) -> ScontrolJob:
    """A v0.0.38 job object as :class:`ScontrolJob` (the fields the tests read back)."""
    if "job_id" not in record or "job_state" not in record:
        raise SlurmOutputError("job record without job_id/job_state", path="slurmrestd")
    count = _count(record, "node_count")
    return ScontrolJob(
        job_id=_text(record, "job_id"),
        state=_text(record, "job_state").upper(),
        reason=_text(record, "state_reason"),
        priority=_count(record, "priority"),
        user=_text(record, "user_name"),
        partition=_text(record, "partition"),
        required_nodes=_hosts(record, "required_nodes"),
        excluded_nodes=_hosts(record, "excluded_nodes"),
        nodes=_hosts(record, "nodes"),
        min_nodes=count,
        max_nodes=None,
        submit_time=_epoch(record, "submit_time"),
        eligible_time=_epoch(record, "eligible_time"),
        start_time=_epoch(record, "start_time"),
        admin_comment=_text(record, "admin_comment"),
        tres_per_node=_text(record, "tres_per_node"),
        tres_per_job=_text(record, "tres_per_job"),
        raw=_scalars(record),
    )


def reservation_from_rest(record: Mapping[str, Any]) -> SlurmReservation:
    flags = record.get("flags")
    return SlurmReservation(
        name=_text(record, "name"), nodes=_hosts(record, "node_list"),
        start_time=_epoch(record, "start_time"), end_time=_epoch(record, "end_time"),
        state="", flags=tuple(str(f) for f in flags) if isinstance(flags, list) else ())


def node_from_rest(record: Mapping[str, Any]) -> ScontrolNode:
    """A v0.0.38 node object as :class:`ScontrolNode`; state ``idle`` + flags -> IDLE+DRAIN."""
    if "name" not in record or "state" not in record:
        raise SlurmOutputError("node record without name/state", path="slurmrestd")
    flags = [str(f).upper() for f in record.get("state_flags") or []]
    partitions = record.get("partitions") or []
    return ScontrolNode(
        name=_text(record, "name"),
        state="+".join([_text(record, "state").upper(), *flags]),
        gres=_text(record, "gres"),
        gres_used=_text(record, "gres_used"),
        partitions=tuple(str(p) for p in partitions),
        raw=_scalars(record),
    )
