"""``slurm-rl revert [--since T]``: undo what the daemon changed in Slurm, from the audit trail.

Every decision row the daemon sent successfully (``slurm_rc == 0``) carries, in
``details["before"]``, what Slurm showed for each field before the call. For each job that
is still pending, revert restores the value from before the daemon's *first* change since
``T``: the node list (an empty one is cleared) and node count, the excluded nodes
(``ExcNodeList``; an empty one is cleared), the begin time (a deferral is lifted,
``StartTime=now``, unless the original begin time is still in the future), and the priority.

The priority is handed back to Slurm, not set to its old number: a Priority set with
``scontrol update`` stays fixed (slurmctld's ``direct_set_prio``: no aging, no fair-share,
and a later ``Nice`` is ignored), so writing the old number back would freeze the job there.
``scontrol release`` on a pending job that is not held clears that flag and has the priority
plugin compute it again (job_mgr.c, the priority ``INFINITE`` branch); it also zeroes the
nice, as the daemon's own Priority did, so the job's ``--nice`` from before is then sent
back. This is done only while the job still holds the Priority the daemon last set: one
someone changed since, or a held job (priority 0), is left as it is. Jobs that started or
ended keep what happened; they are listed as such. A job the job_submit plugin
deferred (because the daemon's heartbeat was fresh) and that the daemon never touched is
released too, since the deferral exists only because the daemon ran.

A running daemon would redo its decisions at its next cycle, so revert refuses while the
heartbeat is fresh (``--force`` to go on anyway). What revert sends is stored as ``revert``
decisions (policy and mode ``revert``), which a later revert does not count as the daemon's.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import click
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from slurm_rl.config import DaemonConfig
from slurm_rl.errors import InputError, SlurmRLError
from slurm_rl.ops.common import load, open_store, reading
from slurm_rl.ops.safe_text import error_line
from slurm_rl.ops.safe_text import terminal_text as safe
from slurm_rl.slurm.actuator import before_values, slurm_time
from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.deferral import deferred_until
from slurm_rl.slurm.proc import CommandResult, make_runner
from slurm_rl.slurm.records import SlurmJob
from slurm_rl.slurm.source import to_core_job
from slurm_rl.store.models import CycleRow, DecisionRow
from slurm_rl.store.repository import ActionRecord, Store

REVERT = "revert"  # policy, mode and action of the rows revert stores about itself
SLURMS_OWN = "(Slurm's own)"  # restore_fields' Priority: `scontrol release`, then the nice


@dataclass
class Change:
    """What the daemon changed for one job: each field's value before its first change."""

    job_id: str
    before: dict[str, str] = field(default_factory=dict)
    rows: int = 0
    cluster: str = ""  # the cluster its rows were stored under
    priority_set: str = ""  # the Priority the daemon's latest change set ("" if none did)


def parse_since(text: str | None) -> datetime | None:
    """``2026-11-29T18:00``, ``2026-11-29 18:00:00`` (UTC unless an offset is given) or a
    Unix time."""
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = None
    if seconds is not None and not math.isnan(seconds):
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):  # inf, past year 9999, before year 1
            raise InputError(f"{text!r} is out of range (a Unix time from year 1 to 9999)",
                             path="--since") from None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InputError(f"not a time: {text!r} (use ISO 8601 or Unix seconds)",
                         path="--since") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def changes(store: Store, cluster: str | None, since: datetime | None) -> dict[str, Change]:
    """Per job id, the fields the daemon changed since ``since`` and their first before."""
    query = (select(DecisionRow, CycleRow).join(CycleRow, DecisionRow.cycle_id == CycleRow.id)
             .where(DecisionRow.slurm_rc == 0, DecisionRow.argv.is_not(None),
                    DecisionRow.action != REVERT)
             .order_by(DecisionRow.id))
    if cluster:
        query = query.where(CycleRow.cluster == cluster)
    found: dict[str, Change] = {}
    with store.session() as session:
        for row, cycle in session.execute(query):
            if since is not None and _aware(cycle.recorded_at) < since:
                continue
            job_id = row.job_key.rpartition(":")[2]
            change = found.setdefault(job_id, Change(job_id, cluster=cycle.cluster))
            change.rows += 1
            change.priority_set = _priority_in(row.argv) or change.priority_set
            before = (row.details or {}).get("before") or {}
            if not isinstance(before, dict):
                continue
            for name, value in before.items():
                change.before.setdefault(str(name), str(value))
    return found


def _priority_in(argv: Sequence[str] | None) -> str:
    """The ``Priority=`` value an ``scontrol update`` argv sets ("" if none)."""
    values = [arg.partition("=")[2] for arg in argv or () if arg.startswith("Priority=")]
    return values[-1] if values else ""


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def restore_fields(job: SlurmJob, before: Mapping[str, str], now: float,
                   priority_set: str = "") -> dict[str, str]:
    """The scontrol fields that put ``job`` back as it was before the daemon; ``Priority``
    is :data:`SLURMS_OWN` when the job still holds the daemon's (``priority_set``): it is
    released to the priority plugin, and its ``Nice`` from before sent after that."""
    fields: dict[str, str] = {}
    if "ReqNodeList" in before and ",".join(job.required_nodes) != before["ReqNodeList"]:
        fields["ReqNodeList"] = before["ReqNodeList"]  # empty clears the pin
        count = before.get("NumNodes", "")
        if count.isdigit():
            fields["NumNodes"] = count
    if "ExcNodeList" in before and _node_set(job.excluded_nodes) != _node_set(
        before["ExcNodeList"].split(",")
    ):
        fields["ExcNodeList"] = before["ExcNodeList"]  # empty clears it
    if "Features" in before and job.features != before["Features"]:
        fields["Features"] = before["Features"]  # empty clears the one-type constraint
    if "Priority" in before and priority_set and job.priority and \
            str(job.priority) == priority_set:
        fields["Priority"] = SLURMS_OWN
        nice = before.get("Nice", "")
        if nice.lstrip("-").isdigit() and nice != "0":  # release zeroes it
            fields["Nice"] = nice
    fields.update(_start_time(job, before, now))
    return fields


def _node_set(names: Sequence[str]) -> set[str]:
    return {name for name in names if name}


def _start_time(job: SlurmJob, before: Mapping[str, str], now: float) -> dict[str, str]:
    deferred = job.eligible_time is not None and job.eligible_time > now
    plugin = deferred_until(job.admin_comment) is not None
    if "StartTime" not in before and not plugin:
        return {}
    original = before.get("StartTime", "")
    if original.isdigit() and float(original) > now + 1:
        target = float(original)
        if job.eligible_time is None or abs(job.eligible_time - target) > 1:
            return {"StartTime": slurm_time(target)}
        return {}
    return {"StartTime": "now"} if deferred else {}


@dataclass(frozen=True)
class Step:
    job_id: str
    state: str
    fields: dict[str, str]
    result: str
    job: SlurmJob | None = None
    sent: tuple[CommandResult, ...] = ()  # the scontrol calls run: release, then update


def revert(client: CliSlurmClient, found: Mapping[str, Change], *, dry_run: bool,
           now: float | None = None) -> list[Step]:
    """Restore every pending job of ``found`` (plus plugin-deferred ones); one step each."""
    now = time.time() if now is None else now
    jobs = {job.job_id: job for job in client.jobs().jobs}
    wanted = dict(found)
    for job in jobs.values():
        if job.is_pending and deferred_until(job.admin_comment) is not None:
            wanted.setdefault(job.job_id, Change(job.job_id))
    steps = []
    for job_id in sorted(wanted, key=_numeric):
        found_job = jobs.get(job_id)
        if found_job is None or not found_job.is_pending:
            state = found_job.state if found_job is not None else "gone"
            steps.append(Step(job_id, state, {}, "not pending: nothing to undo"))
            continue
        job = found_job
        change = wanted[job_id]
        fields = restore_fields(job, change.before, now, change.priority_set)
        if not fields:
            steps.append(Step(job_id, job.state, {}, "already as before"))
            continue
        if dry_run:
            steps.append(Step(job_id, job.state, fields, "would send"))
            continue
        sent = _send(client, job_id, fields)
        failed = next((result for result in sent if not result.ok), None)
        answer = "ok" if failed is None else f"failed (exit {failed.returncode}): " \
                                              f"{' '.join(failed.stderr.split())}"
        steps.append(Step(job_id, job.state, fields, answer, job, sent))
    return steps


def _send(client: CliSlurmClient, job_id: str, fields: Mapping[str, str]
          ) -> tuple[CommandResult, ...]:
    """``scontrol release`` first when the priority goes back to Slurm (it zeroes the nice,
    and a nice sent while the daemon's Priority holds is ignored), then one update."""
    rest = {name: value for name, value in fields.items() if value != SLURMS_OWN}
    sent: list[CommandResult] = []
    if len(rest) < len(fields):
        sent.append(client.release_job(job_id))
        if not sent[-1].ok:
            return tuple(sent)
    if rest:
        sent.append(client.update_jobs([job_id], rest))
    return tuple(sent)


def record(store: Store, steps: Sequence[Step], found: Mapping[str, Change],
           default_cluster: str, now: float) -> int:
    """Store the updates revert sent, per cluster one cycle of policy and mode ``revert``,
    each row with what Slurm showed before (``details.before``); returns the rows stored."""
    by_cluster: dict[str, list[Step]] = {}
    for step in steps:
        if step.sent and step.job is not None:
            change = found.get(step.job_id)
            cluster = (change.cluster if change else "") or default_cluster
            by_cluster.setdefault(cluster, []).append(step)
    for cluster, sent in by_cluster.items():
        jobs = [core for core in (to_core_job(s.job) for s in sent if s.job) if core]
        actions = [action for step in sent for action in _actions(step)]
        store.record_actions(cluster, now, REVERT, REVERT, jobs, actions)
    return sum(len(step.sent) for sent in by_cluster.values() for step in sent)


def _actions(step: Step) -> list[ActionRecord]:
    """One row per scontrol call, each with what Slurm showed before it."""
    assert step.job is not None
    # before_values adds the Nice beside the Priority (a Nice is sent only with one)
    before = dict(before_values(step.job, [name for name in step.fields if name != "Nice"]))
    rows = []
    for result in step.sent:
        answer = None if result.ok else \
            " ".join(result.stderr.split()) or f"exit {result.returncode}"
        released = result.argv[:2] == ("scontrol", "release")
        names = ("Priority", "Nice") if released else \
            [name for name in step.fields if step.fields[name] != SLURMS_OWN]
        rows.append(ActionRecord(step.job_id, REVERT, tuple(result.argv), result.returncode,
                                 answer, {"before": {n: before[n] for n in names if n in before}}))
    return rows


def _numeric(job_id: str) -> tuple[int, str]:
    head = job_id.split("_")[0]
    return (int(head) if head.isdigit() else 0, job_id)


def heartbeat_age(config: DaemonConfig, now: float) -> float | None:
    try:
        return now - float(config.heartbeat.read_text().strip())
    except (OSError, ValueError):
        return None


def _client(config: DaemonConfig) -> CliSlurmClient:
    env = {"SLURM_CONF": str(config.slurm_conf)} if config.slurm_conf else None
    return CliSlurmClient(runner=make_runner(env), timeout_s=config.slurm_timeout_s)


def _describe(step: Step) -> str:
    sent = " ".join(f"{k}={v}" if v else f"{k}=(cleared)" for k, v in step.fields.items())
    middle = f" {sent}:" if sent else ""
    return safe(f"job {step.job_id} ({step.state}):{middle} {step.result}")


@click.command("revert")
@click.option("--since", default=None,
              help="Only changes recorded at or after this time (ISO 8601, UTC by default, or "
                   "Unix seconds) [default: all].")
@click.option("--config", "config_file", default=None,
              type=click.Path(dir_okay=False, path_type=Path), help="The daemon's TOML file.")
@click.option("--store", "store_url", default=None, help="SQLAlchemy URL of the store.")
@click.option("--cluster", default=None, help="Only decisions stored under this cluster name.")
@click.option("--dry-run", is_flag=True, help="Print what would be sent, send nothing.")
@click.option("--force", is_flag=True, help="Go on although the daemon's heartbeat is fresh.")
def revert_command(since: str | None, config_file: Path | None, store_url: str | None,
                   cluster: str | None, dry_run: bool, force: bool) -> None:
    """Undo every change the daemon made in Slurm (node lists, excluded nodes, deferrals,
    priorities) for jobs still pending, using the audit trail in the store."""
    config = load(config_file, store_url)
    moment = parse_since(since)
    now = time.time()
    age = heartbeat_age(config, now)
    if age is not None and age < config.heartbeat_max_age_s and not force and not dry_run:
        raise SlurmRLError(f"the daemon looks alive (heartbeat {config.heartbeat} is {age:.0f} s "
                           "old) and would redo its decisions: stop it first, or pass --force")
    store = open_store(config)
    with reading(config):
        try:
            found = changes(store, cluster or config.cluster_name or None, moment)
        finally:
            store.engine.dispose()
    steps = revert(_client(config), found, dry_run=dry_run, now=now)
    for step in steps:
        click.echo(_describe(step))
    failed = [s for s in steps if s.result.startswith("failed")]
    done = sum(1 for s in steps if s.result == "ok")
    click.echo(f"{len(found)} jobs changed by the daemon; {done} restored, {len(failed)} failed")
    unrecorded = _record(config, steps, found, cluster, now)
    if failed or unrecorded:
        raise SystemExit(1)


def _record(config: DaemonConfig, steps: Sequence[Step], found: Mapping[str, Change],
            cluster: str | None, now: float) -> bool:
    """Put what revert sent into the audit trail; True (and one line) when that failed."""
    if not any(step.sent for step in steps):
        return False
    clusters = Counter(change.cluster for change in found.values() if change.cluster)
    default = cluster or config.cluster_name or next(iter(clusters.most_common(1)),
                                                     ("slurm", 0))[0]
    try:
        store = open_store(config)
        try:
            rows = record(store, steps, found, default, now)
        finally:
            store.engine.dispose()
    except (SlurmRLError, SQLAlchemyError) as exc:
        click.echo(f"the changes above are NOT in the audit trail: {error_line(exc)}", err=True)
        return True
    click.echo(f"{rows} scontrol calls recorded in the store as {REVERT!r} decisions")
    return False
