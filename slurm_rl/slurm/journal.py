"""Checking journal entries against Slurm (the types and the story: slurm_rl/journal.py)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from slurm_rl.journal import APPLIED, NOT_APPLIED, REFUSED, UNANSWERED, UNKNOWN, Entry, Settlement
from slurm_rl.slurm.ownership import node_set
from slurm_rl.slurm.records import SlurmJob

# How far a StartTime Slurm shows may sit from the one sent (scontrol takes whole seconds).
START_SLACK_S = 1.0


def state_for(ok: bool, error_kind: str) -> str:
    """The journal state of a call Slurm answered (or did not)."""
    if ok:
        return APPLIED
    return UNANSWERED if error_kind in ("timeout", "unreachable") else REFUSED


def verdict(entry: Entry, shown: Mapping[str, SlurmJob]) -> Settlement:
    """Whether Slurm holds what an unsettled call sent, from what squeue ``shown`` now."""
    job = shown.get(entry.job_id)
    if job is None:
        return Settlement(entry.entry_id, UNKNOWN, None,
                          "the job left the queue before the daemon could check the call")
    differs = [f"{name}={_shown_value(job, name)}" for name, value in entry.intent.fields
               if not holds(job, name, value, entry.time)]
    if differs:
        return Settlement(entry.entry_id, NOT_APPLIED, None,
                          "Slurm shows " + " ".join(differs))
    return Settlement(entry.entry_id, APPLIED, 0, "")


def holds(job: SlurmJob, name: str, value: str, sent_at: float) -> bool:
    """Whether ``job`` shows the value ``name=value`` set (a started job holds its pin when
    it runs on exactly those nodes)."""
    if name == "ReqNodeList":
        nodes = job.required_nodes if job.is_pending else job.nodes
        return frozenset(nodes) == node_set(value)
    if name == "ExcNodeList":
        return frozenset(job.excluded_nodes) == node_set(value)
    if name == "NumNodes":
        wanted = value.split("-")[0]
        return not job.is_pending or job.node_count is None or str(job.node_count) == wanted
    if name == "Priority":
        return not job.is_pending or str(job.priority) == value
    if name == "StartTime":
        return _holds_start(job, value, sent_at)
    return False  # a field the journal cannot check: say so rather than guess


def _holds_start(job: SlurmJob, value: str, sent_at: float) -> bool:
    eligible = job.eligible_time
    if value == "now":
        return not job.is_pending or eligible is None or eligible <= sent_at + START_SLACK_S
    try:
        wanted = time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return False
    return eligible is not None and math.isclose(eligible, wanted, abs_tol=START_SLACK_S)


def _shown_value(job: SlurmJob, name: str) -> str:
    if name == "ReqNodeList":
        return ",".join(job.required_nodes if job.is_pending else job.nodes) or '""'
    if name == "ExcNodeList":
        return ",".join(job.excluded_nodes) or '""'
    if name == "Priority":
        return str(job.priority)
    if name == "StartTime":
        return f"{job.eligible_time:.0f}" if job.eligible_time else '""'
    if name == "NumNodes":
        return str(job.node_count)
    return "?"
