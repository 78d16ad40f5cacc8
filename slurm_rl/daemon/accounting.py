"""Outcomes from Slurm's accounting (``sacct``, where slurmdbd runs), for jobs the daemon
decided but never saw end.

squeue keeps a finished job only for ``MinJobAge`` seconds, so a daemon that was down
longer would miss how those jobs ended (their outcome rows, which retraining learns from).
With ``accounting_outcomes`` on, every ``accounting_every_s`` the daemon looks for jobs it
stored a decision for, submitted in the last ``accounting_lookback_days``, that still have
no outcome and that squeue no longer shows (a job squeue shows gets its outcome from squeue),
and asks ``sacct`` about exactly those (``--jobs``, a few hundred a call): normally none, so
slurmdbd is not asked at all. Like the jobcomp log's, sacct's records carry no GPU counts,
so an outcome is made only for a job the store knows, with the request stored then
(daemon/jobcomp.py).

We read sacct's text form (``--parsable2``), not ``--json``: measured on Slurm 22.05.8,
``sacct --json`` gives ``exit_code.return_code`` 0 for a job whose script exited 3 (the text
form says ``3:0``, as squeue does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from slurm_rl.core import FinishedJob, Job
from slurm_rl.daemon.jobcomp import CompletedJob, core_job, exit_code_of, node_list, outcomes
from slurm_rl.slurm.actuator import slurm_time
from slurm_rl.slurm.errors import SlurmError, SlurmOutputError
from slurm_rl.slurm.proc import Runner
from slurm_rl.slurm.records import FINISHED_STATES
from slurm_rl.slurm.scontrol import parse_local_time
from slurm_rl.store.models import DecisionRow, JobRow, OutcomeRow
from slurm_rl.store.repository import Store

log = logging.getLogger("slurm_rl.daemon")
SOURCE = "sacct"
FIELDS = ("JobID", "State", "Start", "End", "NodeList", "ExitCode")
CHUNK = 200  # job ids per sacct call


def sacct_argv(job_ids: Sequence[str], since: float) -> tuple[str, ...]:
    """The allocations (no steps) of ``job_ids``, looked for from ``since`` until now."""
    return ("sacct", "--parsable2", "--noheader", "--allocations", "--allusers",
            f"--jobs={','.join(job_ids)}", "--starttime", slurm_time(since), "--endtime", "now",
            f"--format={','.join(FIELDS)}")


def parse_sacct(text: str, source: str = "sacct") -> list[CompletedJob]:
    """The finished jobs of sacct's ``--parsable2`` output (one record a line, ``|``-separated
    :data:`FIELDS`); jobs still running, or that never ran, are left out."""
    finished = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != len(FIELDS):
            raise SlurmOutputError(f"expected {len(FIELDS)} '|'-separated fields "
                                   f"({','.join(FIELDS)}), got {len(fields)}",
                                   path=source, line=number)
        job = _completed(fields)
        if job is not None:
            finished.append(job)
    return finished


def _completed(fields: Sequence[str]) -> CompletedJob | None:
    job_id, state_text, start_text, end_text, nodes_text, exit_text = fields
    state = (state_text.split() or ["UNKNOWN"])[0]  # "CANCELLED by 0"
    start, end = parse_local_time(start_text), parse_local_time(end_text)
    nodes = node_list(nodes_text)
    if state not in FINISHED_STATES or start is None or end is None or not nodes:
        return None
    return CompletedJob(job_id, state, start, end, nodes, exit_code_of(exit_text))


@dataclass
class AccountingReader:
    """Asks sacct, at most every ``every_s``, for the outcomes the store lacks."""

    runner: Runner
    timeout_s: float = 30.0
    every_s: float = 600.0
    lookback_s: float = 7 * 86400.0
    visible: Callable[[], Collection[str]] | None = None  # the job ids squeue shows now
    clock_due: float = float("-inf")  # when the next look is due
    warned: bool = False

    def read(self, store: Store, cluster: str, now: float) -> list[FinishedJob]:
        if now < self.clock_due:
            return []
        self.clock_due = now + self.every_s
        awaiting = awaiting_outcome(store, cluster, now - self.lookback_s)
        shown = set(self.visible()) if self.visible is not None else set()
        forgotten = sorted(job_id for job_id in awaiting if job_id not in shown)
        completed: list[CompletedJob] = []
        for i in range(0, len(forgotten), CHUNK):
            ids = forgotten[i : i + CHUNK]
            completed += self._ask(ids, min(awaiting[j].submit_time for j in ids))
        found = outcomes(completed, awaiting)
        if found:
            log.info("sacct: %d outcomes the daemon had missed", len(found))
        return found

    def _ask(self, job_ids: Sequence[str], since: float) -> list[CompletedJob]:
        try:
            result = self.runner(sacct_argv(job_ids, since), self.timeout_s)
            if not result.ok:
                said = " ".join(result.stderr.split()).removeprefix("sacct: error: ")
                raise SlurmOutputError(said or f"exit {result.returncode}", path="sacct")
            return parse_sacct(result.stdout)
        except (SlurmError, SlurmOutputError) as exc:  # no slurmdbd, a timeout, bad output
            level = logging.DEBUG if self.warned else logging.WARNING
            log.log(level, "outcomes from sacct not read (is slurmdbd running?): %s", exc)
            self.warned = True
            return []


def awaiting_outcome(store: Store, cluster: str, since: float) -> dict[str, Job]:
    """Jobs of ``cluster`` submitted after ``since`` that the daemon decided for and that
    have no outcome yet, by job id."""
    decided = exists().where(DecisionRow.job_key == JobRow.job_key)
    ended = exists().where(OutcomeRow.job_key == JobRow.job_key)
    query = select(JobRow).where(JobRow.cluster == cluster, JobRow.submit_time >= since,
                                 decided, ~ended)
    with Session(store.engine) as session:
        return {row.job_id: core_job(row) for row in session.scalars(query)}

