"""Outcomes from Slurm's ``jobcomp/filetxt`` log, for jobs squeue no longer shows.

slurmctld appends one ``Key=Value`` line per finished job to ``JobCompLoc``. squeue keeps a
finished job only for ``MinJobAge`` seconds, so a daemon that was down longer would miss how
those jobs ended; the log still has them. The daemon reads the lines added since its last
read and keeps its place (inode and offset) in the state directory across restarts; a
first start begins at the end of the log (older jobs were never the daemon's). A rotated or
truncated log is read from its start.

The lines carry no GPU counts, so an outcome is made only for a job the store already knows
(it saw the job pending), with the request stored then. A job that never ran (``NodeList``
empty: cancelled while pending) has no outcome, as with squeue.

**The log is not trusted blindly.** slurmctld writes a job's name and work directory into
its line as they are, so a user controls part of every line of theirs: a name holding
`` JobId=7`` or a newline followed by a whole forged line. A line is used only when it
starts as slurmctld starts one (``JobId=<n> UserId=<name>(<uid>) ``) and each field read
from it occurs exactly once; a line that does not start so is the rest of the line before
it, split by a newline in a user's field, and both are dropped. An outcome is made only for
a job of the user the line names, never for a job squeue still shows queued or running, and
only from the first line for a job. A user can still garble their *own* job's line (its
outcome is then missing, or, through a crafted name, misstated when squeue no longer shows
the job); sacct (``accounting_outcomes``) has no such field and is the source to prefer
where slurmdbd runs.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from slurm_rl.core import FinishedJob, Job, Placement
from slurm_rl.errors import InputError
from slurm_rl.input_files import open_regular
from slurm_rl.safefile import write_atomic
from slurm_rl.slurm.hostlist import HostlistError, expand
from slurm_rl.slurm.scontrol import parse_local_time, parse_pairs
from slurm_rl.store.models import JobRow
from slurm_rl.store.repository import Store, job_key

log = logging.getLogger("slurm_rl.daemon")
SOURCE = "jobcomp"
_UNSET = {"", "(null)", "None", "Unknown", "None assigned"}
_LOOKUP_CHUNK = 500  # job keys per SQL IN (...) query


@dataclass(frozen=True, slots=True)
class CompletedJob:
    """One line of the log: where and when a job ran, and how it ended."""

    job_id: str
    state: str
    start_time: float
    end_time: float
    nodes: tuple[str, ...]
    exit_code: int | None
    user: str | None = None  # the line's user (jobcomp); None where the source has none


def exit_code_of(value: str) -> int | None:
    """``3:0`` -> 3; ``0:9`` (killed by signal 9) -> 137, as squeue's outcomes count it."""
    code, _, signal = value.partition(":")
    if not code.isdigit():
        return None
    return 128 + int(signal) if signal.isdigit() and int(signal) else int(code)


def node_list(value: str) -> tuple[str, ...]:
    if value in _UNSET:
        return ()
    try:
        return expand(value)
    except HostlistError:
        return ()


# How slurmctld starts every line (jobcomp_filetxt.c: "JobId=%lu UserId=%s(%lu) ...").
_LINE_START = re.compile(r"JobId=(\d+) UserId=([^\s()]*)\(\d+\) ")
# The fields read from a line; each must occur exactly once in it.
_READ_FIELDS = ("JobId", "UserId", "JobState", "StartTime", "EndTime", "NodeList", "ExitCode")
_FIELD_START = re.compile(r"(?:^|\s)(" + "|".join(_READ_FIELDS) + r")=")  # as parse_pairs


class _Garbled:
    """A line that is not one whole record slurmctld wrote (see the module docstring)."""


GARBLED = _Garbled()


def parse_line(line: str) -> CompletedJob | None:
    """The job a log line describes; None for a job that never ran or a line we cannot use."""
    parsed = _parse(line)
    return parsed if isinstance(parsed, CompletedJob) else None


def _parse(line: str) -> CompletedJob | _Garbled | None:
    text = line.strip()
    start_match = _LINE_START.match(text)
    counts = Counter(_FIELD_START.findall(text))
    if start_match is None or any(counts[field] != 1 for field in _READ_FIELDS):
        return GARBLED
    pairs = parse_pairs(text)
    start = parse_local_time(pairs.get("StartTime", ""))
    end = parse_local_time(pairs.get("EndTime", ""))
    nodes = node_list(pairs.get("NodeList", ""))
    if start is None or end is None or not nodes:
        return None
    state = (pairs.get("JobState", "").split() or ["UNKNOWN"])[0]
    return CompletedJob(start_match.group(1), state, start, end, nodes,
                        exit_code_of(pairs.get("ExitCode", "")), user=start_match.group(2))


def parse_lines(lines: Iterable[str], source: str = "jobcomp log") -> list[CompletedJob]:
    """The usable records of consecutive log lines: garbled ones are dropped with the line
    before them (a newline in a user's field split that one), and a job's later lines after
    its first (see the module docstring)."""
    parsed: list[CompletedJob | _Garbled | None] = [_parse(line) for line in lines if line.strip()]
    usable: dict[str, CompletedJob] = {}
    for index, record in enumerate(parsed):
        following = parsed[index + 1] if index + 1 < len(parsed) else None
        if isinstance(record, _Garbled):
            log.warning("%s: a line that slurmctld did not write as one record is ignored "
                        "(a newline or a field name in a job's name or work directory)", source)
        elif isinstance(record, CompletedJob) and not isinstance(following, _Garbled):
            usable.setdefault(record.job_id, record)
    return list(usable.values())


@dataclass(frozen=True, slots=True)
class _Position:
    inode: int
    offset: int


class JobcompLog:
    """New lines of one jobcomp/filetxt log; :meth:`commit` once their outcomes are stored."""

    def __init__(self, path: Path, position_file: Path) -> None:
        self.path = path
        self.position_file = position_file
        self._position = self._load_position()
        self._read_to: _Position | None = None

    def read_new(self) -> list[CompletedJob]:
        try:  # open_regular: a FIFO there would block the daemon's cycle for good
            with open_regular(self.path, "jobcomp log") as handle:
                stat = os.fstat(handle.fileno())
                start = self._start(stat.st_ino, stat.st_size)
                handle.seek(start)
                data = handle.read()
        except InputError as exc:
            log.warning("jobcomp log not read: %s", exc)
            return []
        except OSError as exc:
            log.warning("jobcomp log %s not read: %s", self.path, exc.strerror)
            return []
        whole = data[: data.rfind(b"\n") + 1]  # a line still being written waits
        self._read_to = _Position(stat.st_ino, start + len(whole))
        return parse_lines(whole.decode(errors="replace").split("\n"), str(self.path))

    def commit(self) -> None:
        """Remember how far the log was read (in memory and in the position file)."""
        if self._read_to is None or self._read_to == self._position:
            return
        self._position = self._read_to
        try:
            write_atomic(self.position_file, f"{self._position.inode} {self._position.offset}\n")
        except OSError as exc:  # a restart then re-reads a little; the store skips repeats
            log.warning("jobcomp position not saved in %s: %s", self.position_file, exc.strerror)

    def _start(self, inode: int, size: int) -> int:
        if self._position is None:
            self._position = _Position(inode, size)  # first start: only what comes next
        if self._position.inode != inode or self._position.offset > size:
            return 0  # rotated or truncated: the new log from its start
        return self._position.offset

    def _load_position(self) -> _Position | None:
        try:
            inode, offset = self.position_file.read_text().split()
            return _Position(int(inode), int(offset))
        except (OSError, ValueError):
            return None


def known_jobs(store: Store, cluster: str, job_ids: Iterable[str]) -> dict[str, Job]:
    """The stored requests of those jobs the store has seen pending, by job id."""
    keys = [job_key(cluster, job_id) for job_id in job_ids]
    found: dict[str, Job] = {}
    with Session(store.engine) as session:
        for i in range(0, len(keys), _LOOKUP_CHUNK):
            query = select(JobRow).where(JobRow.job_key.in_(keys[i : i + _LOOKUP_CHUNK]))
            for row in session.scalars(query):
                found[row.job_id] = core_job(row)
    return found


def core_job(row: JobRow) -> Job:
    return Job(
        job_id=row.job_id, submit_time=row.submit_time, num_gpus=row.num_gpus, user=row.user,
        partition=row.partition, num_nodes=row.num_nodes, gpu_type=row.gpu_type,
        time_limit=row.time_limit_s,
    )


def outcomes(completed: Iterable[CompletedJob], known: Mapping[str, Job],
             active: Collection[str] = ()) -> list[FinishedJob]:
    """Finished jobs for the completed jobs the store knows (GPUs spread over the nodes): not
    for a job squeue shows ``active`` (queued or running: the record cannot be its own), nor
    for a record that names another user than the one who submitted the job."""
    finished = []
    for done in completed:
        job = known.get(done.job_id)
        if job is None or done.job_id in active:
            continue
        if done.user is not None and job.user and done.user != job.user:
            log.warning("outcome of job %s ignored: its record names user %s, the job is %s's",
                        done.job_id, done.user, job.user)
            continue
        placement = Placement.even(done.nodes, job.num_gpus)
        finished.append(FinishedJob(job, done.start_time, done.end_time, placement, done.state,
                                    done.exit_code))
    return finished
