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
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ClusterShell.NodeSet import NodeSet, NodeSetException
from sqlalchemy import select
from sqlalchemy.orm import Session

from slurm_rl.core import FinishedJob, Job, Placement
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
        return tuple(NodeSet(value))
    except NodeSetException:
        return ()


def parse_line(line: str) -> CompletedJob | None:
    """The job a log line describes; None for a job that never ran or a line we cannot use."""
    pairs = parse_pairs(line.strip())
    start = parse_local_time(pairs.get("StartTime", ""))
    end = parse_local_time(pairs.get("EndTime", ""))
    nodes = node_list(pairs.get("NodeList", ""))
    job_id = pairs.get("JobId", "")
    if not job_id or start is None or end is None or not nodes:
        return None
    state = (pairs.get("JobState", "").split() or ["UNKNOWN"])[0]
    return CompletedJob(job_id, state, start, end, nodes, exit_code_of(pairs.get("ExitCode", "")))


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
        try:
            stat = self.path.stat()
            start = self._start(stat.st_ino, stat.st_size)
            with self.path.open("rb") as handle:
                handle.seek(start)
                data = handle.read()
        except OSError as exc:
            log.warning("jobcomp log %s not read: %s", self.path, exc.strerror)
            return []
        whole = data[: data.rfind(b"\n") + 1]  # a line still being written waits
        self._read_to = _Position(stat.st_ino, start + len(whole))
        lines = whole.decode(errors="replace").splitlines()
        return [job for job in map(parse_line, lines) if job is not None]

    def commit(self) -> None:
        """Remember how far the log was read (in memory and in the position file)."""
        if self._read_to is None or self._read_to == self._position:
            return
        self._position = self._read_to
        tmp = self.position_file.with_name(f".{self.position_file.name}.tmp")
        try:
            tmp.write_text(f"{self._position.inode} {self._position.offset}\n")
            os.replace(tmp, self.position_file)
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


def outcomes(completed: Iterable[CompletedJob], known: Mapping[str, Job]) -> list[FinishedJob]:
    """Finished jobs for the completed jobs the store knows (GPUs spread over the nodes)."""
    finished = []
    for done in completed:
        job = known.get(done.job_id)
        if job is None:
            continue
        placement = Placement.even(done.nodes, job.num_gpus)
        finished.append(FinishedJob(job, done.start_time, done.end_time, placement, done.state,
                                    done.exit_code))
    return finished
