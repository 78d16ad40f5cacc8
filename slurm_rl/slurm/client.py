"""The Slurm client interface and its command-line implementation.

:class:`SlurmClient` is what the source and the actuator use; :class:`CliSlurmClient`
implements it with ``squeue``/``sinfo``/``scontrol`` (argv lists, a timeout on every call).
slurmrestd or pyslurm clients can implement the same protocol.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar, runtime_checkable

from slurm_rl.slurm.errors import (
    SlurmCommandError,
    SlurmOutputError,
    SlurmReportedError,
    SlurmTimeoutError,
    SlurmUnavailableError,
)
from slurm_rl.slurm.layouts import Layout, layout_for
from slurm_rl.slurm.parse import parse_jobs, parse_nodes
from slurm_rl.slurm.proc import CommandResult, Runner, check, make_runner, reports_unreachable
from slurm_rl.slurm.records import JobsReport, NodesReport
from slurm_rl.slurm.reservations import SlurmReservation, parse_reservations
from slurm_rl.slurm.scontrol import ScontrolJob, ScontrolNode, parse_jobs_text, parse_nodes_text

DEFAULT_TIMEOUT_S = 15.0
_Report = TypeVar("_Report", JobsReport, NodesReport)
_VERSION = re.compile(r"slurm[- ](?:wlm )?(\d+)\.(\d+)\.(\d+)")


@runtime_checkable
class SlurmClient(Protocol):
    """Reads Slurm's state and sends job updates. Reads raise typed errors; updates don't."""

    def jobs(self) -> JobsReport:
        """Every job slurmctld knows, finished ones included (``squeue --json``)."""
        ...

    def nodes(self) -> NodesReport:
        """Every node with its state and GRES (``sinfo --json``)."""
        ...

    def show_job(self, job_id: str) -> ScontrolJob | None:
        """One job as ``scontrol show job -o`` prints it; None once it is gone."""
        ...

    def show_nodes(self) -> list[ScontrolNode]:
        """``scontrol -d show node``: the text view, with GresUsed."""
        ...

    def reservations(self) -> list[SlurmReservation]:
        """Advance reservations (``scontrol show reservation -o``)."""
        ...

    def update_jobs(self, job_ids: Sequence[str], fields: Mapping[str, str]) -> CommandResult:
        """One ``scontrol update JobId=a,b,c K=V ...`` call; the result is returned, not raised."""
        ...

    def requeue_job(self, job_id: str) -> CommandResult:
        """``scontrol requeue <id>``: stop a running batch job and queue it again (it comes
        back pending, eligible ~2 minutes later); the result is returned, not raised."""
        ...


def update_argv(job_ids: Sequence[str], fields: Mapping[str, str]) -> tuple[str, ...]:
    """``scontrol update`` for several jobs that get the same change (one RPC per call)."""
    pairs = [f"{key}={value}" for key, value in fields.items()]
    return ("scontrol", "update", f"JobId={','.join(job_ids)}", *pairs)


def _reported_text(entry: Mapping[str, object]) -> str:
    """``slurm_load_jobs: Failed while looking for jobs``: where Slurm says it failed, and
    its words."""
    text = str(entry.get("description") or entry.get("error") or "no description")
    source = entry.get("source")
    return f"{source}: {text}" if source else text


def parse_version(text: str) -> tuple[int, int, int]:
    """``slurm 22.05.8`` (or ``slurm-wlm 22.05.8``) -> (22, 5, 8)."""
    match = _VERSION.search(text)
    if match is None:
        raise SlurmOutputError(f"cannot read a Slurm version from {text.strip()!r}", path="sinfo")
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


class CliSlurmClient:
    """:class:`SlurmClient` over the Slurm command-line tools.

    ``runner`` is the subprocess boundary (tests pass a fake); ``env`` is added to the
    environment of every command (e.g. ``SLURM_CONF`` of a dev cluster).
    """

    def __init__(
        self,
        *,
        runner: Runner | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._run = runner or make_runner(env)
        self.timeout_s = timeout_s
        self._version: tuple[int, int, int] | None = None

    def version(self) -> tuple[int, int, int]:
        if self._version is None:
            result = check(self._run(("sinfo", "--version"), self.timeout_s))
            self._version = parse_version(result.stdout)
        return self._version

    def layout(self) -> Layout:
        """How this Slurm's JSON is read (slurm_rl/slurm/layouts.py); an unknown release
        raises a one-line :class:`~slurm_rl.slurm.layouts.SlurmVersionError`, so no
        command of an unknown layout is ever parsed."""
        return layout_for(self.version())

    def jobs(self) -> JobsReport:
        # 23.02+ filters squeue's JSON by state as its text: --states=all keeps finished jobs.
        return self._read_json(self.layout().jobs_argv, parse_jobs)

    def nodes(self) -> NodesReport:
        # 23.02+ regroups sinfo's JSON by identical nodes; scontrol's is one record a node.
        return self._read_json(self.layout().nodes_argv, parse_nodes)

    def _read_json(self, argv: tuple[str, ...], parse: Callable[[str, str], _Report]) -> _Report:
        """Run a ``--json`` command and parse its document. A document whose ``errors`` say
        the query to slurmctld failed (the command still exits 0) is slurmctld unreachable,
        not bad output."""
        result = check(self._run(argv, self.timeout_s))
        try:
            return parse(result.stdout, " ".join(argv))
        except SlurmReportedError as exc:
            if not reports_unreachable(exc.entry):
                raise
            raise SlurmUnavailableError(argv, result.returncode, result.stderr,
                                        _reported_text(exc.entry)) from exc

    def show_job(self, job_id: str) -> ScontrolJob | None:
        result = self._run(("scontrol", "show", "job", "-o", job_id), self.timeout_s)
        if not result.ok and "Invalid job id" in result.stderr:
            return None
        jobs = parse_jobs_text(check(result).stdout)
        return jobs[0] if jobs else None

    def show_nodes(self) -> list[ScontrolNode]:
        result = check(self._run(("scontrol", "-d", "show", "node", "-o"), self.timeout_s))
        return parse_nodes_text(result.stdout)

    def update_jobs(self, job_ids: Sequence[str], fields: Mapping[str, str]) -> CommandResult:
        if not job_ids or not fields:
            raise ValueError("an update needs at least one job id and one field")
        return self._send(update_argv(job_ids, fields))

    def requeue_job(self, job_id: str) -> CommandResult:
        return self._send(("scontrol", "requeue", job_id))

    def release_job(self, job_id: str) -> CommandResult:
        """``scontrol release <id>``: a held job is released; on a pending job that is not
        held, a Priority set with ``scontrol update`` is dropped and the priority plugin
        computes it again (and the job's nice is zeroed). ``slurm-rl revert`` only."""
        return self._send(("scontrol", "release", job_id))

    def reservations(self) -> list[SlurmReservation]:
        result = check(self._run(("scontrol", "show", "reservation", "-o"), self.timeout_s))
        return parse_reservations(result.stdout)

    def _send(self, argv: tuple[str, ...]) -> CommandResult:
        try:
            return self._run(argv, self.timeout_s)
        except SlurmTimeoutError as exc:
            # 124 is what timeout(1) exits with; the audit trail keeps the message.
            return CommandResult(argv, 124, "", str(exc))
        except SlurmCommandError as exc:
            return CommandResult(argv, exc.returncode, "", exc.stderr)
