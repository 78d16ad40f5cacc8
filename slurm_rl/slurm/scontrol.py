"""Parse ``scontrol show job -o`` and ``scontrol -d show node`` text (22.05 has no --json).

Both print ``Key=Value`` pairs separated by spaces; a value may itself contain ``=`` (as in
``TRES=cpu=2,mem=125G``) or, rarely, spaces, so a new pair starts only where a space is
followed by a key and ``=``. Keys may contain ``:``, ``/`` and ``_`` (``AllocNode:Sid``,
``CPUs/Task``, ``MCS_label``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from slurm_rl.slurm.errors import SlurmOutputError
from slurm_rl.slurm.hostlist import HostlistError, expand

_PAIR_START = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/.]*)=")
_UNSET = {"", "(null)", "None", "N/A", "Unknown", "UNLIMITED", "INFINITE"}


class Pairs(dict[str, str]):
    """A record's pairs, and the keys that occurred more than once in it (``repeated``): a
    user's own fields (job name, work dir, StdOut path, comment) may hold ``Key=`` text, so
    a key read from a record must occur once in it to be believed."""

    repeated: set[str]

    def __init__(self) -> None:
        super().__init__()
        self.repeated = set()

    def add(self, key: str, value: str) -> None:
        if key in self:
            self.repeated.add(key)
        self[key] = value


def parse_pairs(line: str) -> Pairs:
    """``Key=Value Key2=Value two`` -> ``{"Key": "Value", "Key2": "Value two"}``."""
    starts = list(_PAIR_START.finditer(line))
    pairs = Pairs()
    for i, match in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(line)
        pairs.add(match.group(1), line[match.end() : end].strip())
    return pairs


def parse_records(text: str, first_key: str) -> list[Pairs]:
    """Records that each begin with ``first_key=`` (one per line with ``-o``, or blocks)."""
    records: list[Pairs] = []
    for line in text.splitlines():
        pairs = parse_pairs(line)
        if not pairs:
            continue
        if first_key in pairs or not records:
            records.append(pairs)
        else:
            for key, value in pairs.items():
                records[-1].add(key, value)
            records[-1].repeated |= pairs.repeated
    return records


def parse_local_time(value: str) -> float | None:
    """Slurm's text outputs (scontrol, jobcomp/filetxt) print local time as
    ``2026-11-29T16:35:28``; unset or unparsable values give None."""
    if value in _UNSET:
        return None
    try:
        return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def hostlist(value: str, where: str, key: str) -> tuple[str, ...]:
    if value in _UNSET:
        return ()
    try:
        return expand(value)
    except HostlistError as exc:
        message = f"bad node list {value!r}: {exc}"
        raise SlurmOutputError(message, path=where, column=key) from exc


def _node_range(value: str) -> tuple[int | None, int | None]:
    """``NumNodes=2-2`` / ``2`` / ``1-1`` -> (min, max); max None when open-ended; (None,
    None) for a range that is none (min above max)."""
    low, _, high = value.partition("-")
    lo = _int(low)
    hi = _int(high) if high else lo
    if lo is not None and hi is not None and lo > hi:
        return None, None
    return lo, hi


_MAX_INT = 2**32  # Slurm's counts and priorities here are 32-bit unsigned


def _int(value: str) -> int | None:
    """A count or priority; None for anything else (negative, "²", beyond 32 bits)."""
    if not (value.isascii() and value.isdigit()) or len(value) > 10:
        return None
    number = int(value)
    return number if number < _MAX_INT else None


@dataclass(frozen=True, slots=True)
class ScontrolJob:
    """The fields of ``scontrol show job -o`` that the actuator and the tests read back."""

    job_id: str
    state: str
    reason: str
    priority: int | None
    user: str
    partition: str
    required_nodes: tuple[str, ...]
    excluded_nodes: tuple[str, ...]
    nodes: tuple[str, ...]
    min_nodes: int | None
    max_nodes: int | None
    submit_time: float | None
    eligible_time: float | None
    start_time: float | None
    admin_comment: str
    tres_per_node: str
    tres_per_job: str
    raw: Mapping[str, str]


# What job_from_pairs reads: each must occur once in a record (see Pairs).
JOB_KEYS = ("JobId", "JobState", "Reason", "Priority", "UserId", "Partition", "ReqNodeList",
            "ExcNodeList", "NodeList", "NumNodes", "SubmitTime", "EligibleTime", "StartTime",
            "AdminComment", "TresPerNode", "TresPerJob")


def job_from_pairs(pairs: Mapping[str, str], where: str) -> ScontrolJob:
    if "JobId" not in pairs or "JobState" not in pairs:
        raise SlurmOutputError("record without JobId/JobState", path=where)
    repeated = sorted(set(JOB_KEYS) & getattr(pairs, "repeated", set()))
    if repeated:
        job = "a job" if "JobId" in repeated else f"job {pairs['JobId']}"
        raise SlurmOutputError(f"{job}: {', '.join(repeated)} more than once in its record (a "
                               "user's own field holds the text); the record is not read",
                               path=where)
    lo, hi = _node_range(pairs.get("NumNodes", ""))
    return ScontrolJob(
        job_id=pairs["JobId"],
        state=pairs["JobState"],
        reason=pairs.get("Reason", ""),
        priority=_int(pairs.get("Priority", "")),
        user=pairs.get("UserId", "").split("(")[0],
        partition=pairs.get("Partition", ""),
        required_nodes=hostlist(pairs.get("ReqNodeList", ""), where, "ReqNodeList"),
        excluded_nodes=hostlist(pairs.get("ExcNodeList", ""), where, "ExcNodeList"),
        nodes=hostlist(pairs.get("NodeList", ""), where, "NodeList"),
        min_nodes=lo,
        max_nodes=hi,
        submit_time=parse_local_time(pairs.get("SubmitTime", "")),
        eligible_time=parse_local_time(pairs.get("EligibleTime", "")),
        start_time=parse_local_time(pairs.get("StartTime", "")),
        admin_comment=_unset_empty(pairs.get("AdminComment", "")),
        tres_per_node=pairs.get("TresPerNode", ""),
        tres_per_job=pairs.get("TresPerJob", ""),
        raw=dict(pairs),
    )


def _unset_empty(value: str) -> str:
    return "" if value in ("(null)",) else value


def parse_jobs_text(text: str, where: str = "scontrol show job -o") -> list[ScontrolJob]:
    return [job_from_pairs(r, where) for r in parse_records(text, "JobId")]


@dataclass(frozen=True, slots=True)
class ScontrolNode:
    """A node from ``scontrol -d show node``: state, GRES and what is used of it."""

    name: str
    state: str
    gres: str
    gres_used: str
    partitions: tuple[str, ...]
    raw: Mapping[str, str]

    @property
    def states(self) -> tuple[str, ...]:
        # "MIXED+DRAIN", "IDLE*", "DOWN+NOT_RESPONDING" -> ("MIXED", "DRAIN") ...
        return tuple(part.rstrip("*~#!%$@^-") for part in self.state.upper().split("+"))


def node_from_pairs(pairs: Mapping[str, str], where: str) -> ScontrolNode:
    if "NodeName" not in pairs or "State" not in pairs:
        raise SlurmOutputError("record without NodeName/State", path=where)
    if "Gres" not in pairs:
        raise SlurmOutputError(f"node {pairs['NodeName']}: no Gres field", path=where)
    partitions = pairs.get("Partitions", "")
    return ScontrolNode(
        name=pairs["NodeName"],
        state=pairs["State"],
        gres=_unset_empty(pairs["Gres"]),
        gres_used=pairs.get("GresUsed", ""),
        partitions=tuple(p for p in partitions.split(",") if p and p not in _UNSET),
        raw=dict(pairs),
    )


def parse_nodes_text(text: str, where: str = "scontrol -d show node") -> list[ScontrolNode]:
    return [node_from_pairs(r, where) for r in parse_records(text, "NodeName")]
