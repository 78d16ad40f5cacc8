"""``slurm-rl explain JOBID``: why a job got its rank and its nodes, from the store alone.

It prints the job's request, each decision stored for it (policy, mode, action, rank and
score with the neighbouring jobs, the chosen nodes with the GP's mean and std of each, the
best alternatives and why they lost, the exact scontrol argv and Slurm's answer) and the
outcome. The reasons were worked out in the cycle that decided (slurm_rl/ops/reasons.py).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from sqlalchemy import select

from slurm_rl.errors import SlurmRLError
from slurm_rl.ops.common import load, open_store, reading
from slurm_rl.ops.safe_text import terminal_text as safe
from slurm_rl.store.models import CycleRow, DecisionRow, JobRow, OutcomeRow
from slurm_rl.store.repository import Store


def find_job(store: Store, job_id: str, cluster: str | None) -> JobRow:
    with store.session() as session:
        query = select(JobRow).where(JobRow.job_id == job_id)
        if cluster:
            query = query.where(JobRow.cluster == cluster)
        found = list(session.scalars(query))
    if not found:
        where = f" of cluster {safe(repr(cluster))}" if cluster else ""
        raise SlurmRLError(
            f"job {safe(job_id)}{where} is not in the store (the daemon stores a job when it "
            "decides for it; one left to Slurm while held, waiting on a dependency, a begin "
            "time or a reservation, or blocked by a limit has a 'left to Slurm' log line)")
    if len(found) > 1:
        names = safe(", ".join(sorted(row.cluster for row in found)))
        raise SlurmRLError(f"job {safe(job_id)} is stored for several clusters ({names}): "
                           "pass --cluster")
    return found[0]


def explanation(store: Store, job: JobRow) -> dict[str, Any]:
    """Everything explain prints, as one JSON-able object."""
    with store.session() as session:
        pairs = session.execute(
            select(DecisionRow, CycleRow).join(CycleRow, DecisionRow.cycle_id == CycleRow.id)
            .where(DecisionRow.job_key == job.job_key).order_by(DecisionRow.id)
        ).all()
        outcome = session.get(OutcomeRow, job.job_key)
    return {
        "job": {"id": job.job_id, "cluster": job.cluster, "user": job.user,
                "partition": job.partition, "gpus": job.num_gpus, "nodes": job.num_nodes,
                "gpu_type": job.gpu_type, "submit_time": job.submit_time},
        "decisions": [_decision(d, c) for d, c in pairs],
        "outcome": None if outcome is None else {
            "state": outcome.state, "exit_code": outcome.exit_code, "nodes": outcome.nodes,
            "start_time": outcome.start_time, "end_time": outcome.end_time,
            "source": outcome.source},
    }


def _decision(row: DecisionRow, cycle: CycleRow) -> dict[str, Any]:
    details = row.details or {}
    at = cycle.recorded_at.strftime("%Y-%m-%d %H:%M:%S UTC")  # stored in UTC
    return {"cycle": cycle.id, "at": at, "mode": cycle.actuator_mode,
            # ranks are 1-based wherever a person reads them (the store keeps 0-based)
            "policy": row.policy_id, "action": row.action,
            "rank": None if row.rank is None else row.rank + 1, "score": row.score,
            "nodes": row.nodes, "argv": row.argv, "rc": row.slurm_rc, "answer": row.slurm_answer,
            "why": details.get("why"), "before": details.get("before"),
            "recovered": details.get("recovered"), "waiting": details.get("waiting")}


def _when(epoch: float | None) -> str:
    if not epoch:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) else "-"


def render(data: dict[str, Any]) -> list[str]:
    job = data["job"]
    kind = f", {job['gpu_type']}" if job["gpu_type"] else ""
    lines = [f"job {job['id']} (cluster {job['cluster']}): user "
             f"{job['user']}, partition {job['partition']}, {job['gpus']} GPUs on "
             f"{job['nodes'] or '?'} node(s){kind}; submitted {_when(job['submit_time'])}"]
    if not data["decisions"]:
        lines.append("no decision stored: the daemon never acted on it (Slurm decided alone; "
                     "see the daemon's 'left to Slurm' log line, if any)")
    for d in data["decisions"]:
        lines.extend(_render_decision(d))
    lines.append(_render_outcome(data["outcome"]))
    # Every value above is stored data (Slurm's text, its users' names): each line is shown
    # with control, bidi and format characters escaped, whatever it was built from.
    return [safe(line) for line in lines]


def _render_decision(d: dict[str, Any]) -> list[str]:
    lines = [f"cycle {d['cycle']} at {d['at']} ({d['mode']}): {d['policy']} "
             f"-> {d['action']}"]
    why = d["why"] or {}
    if d["rank"] is not None:
        text = f"  rank {d['rank']} of {why.get('ranked', '?')} ranked " \
               f"({why.get('pending', '?')} pending), score {_num(d['score'])}"
        for side in ("above", "below"):
            if side in why:
                text += f"; {side}: job {why[side]['job']} ({_num(why[side]['score'])})"
        lines.append(text)
    elif d["recovered"]:
        lines.append(_render_recovered(d["recovered"]))
    else:
        lines.append("  not ranked this cycle (held back or no longer pending)")
    if d["waiting"]:
        lines.append(_render_waiting(d["waiting"]))
    lines.extend(_render_ranking_step(why))
    lines.extend(_render_placement(why.get("placement"), d["nodes"]))
    if "guard" in why:
        lines.append(f"  the guard dropped the policy's nodes: {why['guard']}")
    if d["argv"]:
        answer = f" ({d['answer']})" if d["answer"] else ""
        rc = "not sent" if d["rc"] is None else f"exit {d['rc']}"
        lines.append(f"  sent: {' '.join(d['argv'])} -> {rc}{answer}")
    return lines


def _render_ranking_step(why: dict[str, Any]) -> list[str]:
    """What the shared ranking step (fairness guard, --nice) did to the job, and the GPUs
    held for it."""
    lines = []
    fairness = why.get("fairness")
    if fairness:
        moved = f" (the policy ranked it {why['policy_rank'] + 1})" if "policy_rank" in why \
            else ""
        lines.append(f"  fairness guard{moved}: {fairness.get('guard')}; {fairness.get('user')}'s "
                     f"mean wait {_num(fairness.get('user_mean_wait_s'))} s, wait ratio "
                     f"{_num(fairness.get('wait_ratio'))} (bound {_num(fairness.get('bound'))})")
    nice = why.get("nice")
    if nice:
        places = int(nice.get("places", 0))
        lines.append(f"  its --nice {nice.get('nice')} moved it {abs(places)} place(s) "
                     f"{'down' if places > 0 else 'up'}")
    held = why.get("reservation")
    if held:
        gpus = ", ".join(f"{node} {count}" for node, count in (held.get("held") or {}).items())
        lines.append(f"  reserved: to start by {_when(held.get('start'))} on "
                     f"{','.join(held.get('nodes') or [])}; GPUs held for it now: "
                     f"{gpus or 'none'}")
    return lines


def _render_recovered(recovered: dict[str, Any]) -> str:
    return (f"  recorded after a restart (or a failed record) from the daemon's journal: "
            f"the call went out at {_when(recovered.get('sent_at'))}; checked against Slurm: "
            f"{recovered.get('state', '?')}")


def _render_waiting(waiting: dict[str, Any]) -> str:
    return (f"  pinned {_num(waiting.get('pinned_s'))} s ago and not started yet "
            f"(Slurm's reason: {waiting.get('reason') or 'none given'})")


def _render_placement(placement: dict[str, Any] | None, nodes: str | None) -> list[str]:
    if placement is None:
        return [f"  nodes: {nodes}"] if nodes else ["  nodes: left to Slurm"]
    parts = []
    for node in placement["nodes"]:
        gp = ""
        if "gp_mean" in node:
            gp = f", GP mean {_num(node['gp_mean'])} std {_num(node['gp_std'])}"
        parts.append(f"{node['node']} ({node['gpus']} of {node['free_gpus']} free GPUs{gp})")
    lines = [f"  nodes by {placement['policy']}: " + ", ".join(parts)]
    chosen = placement.get("chosen")
    if chosen and "score" in chosen:
        lines.append(f"    chosen set: cost {_num(chosen['score'])}, pace {_num(chosen['pace'])}, "
                     f"GP mean {_num(chosen['gp_mean'])} std {_num(chosen['gp_std'])}, "
                     f"{_num(chosen['price_per_hour'])}/h")
    lines.extend(_alternatives(placement, "no other node set had room"))
    head = placement.get("head")
    if head:
        probability = (head.get("chosen") or {}).get("probability")
        if probability is not None:
            lines.append(f"    learned head: chosen set with probability {_num(probability)}")
        lines.extend(_alternatives(head, "", prefix="learned head's alternative"))
    return lines


def _alternatives(block: dict[str, Any], fallback: str, prefix: str = "alternative") -> list[str]:
    lines = []
    for alt in block.get("alternatives", []):
        where = ",".join(alt["nodes"]) if "nodes" in alt else alt.get("node", "?")
        gp = ""
        if "gp_mean" in alt:
            gp = f" (GP mean {_num(alt['gp_mean'])} std {_num(alt['gp_std'])})"
        lines.append(f"    {prefix} {where}{gp}: {alt.get('lost', '')}")
    note = block.get("note", fallback)
    if not lines and note:
        lines.append(f"    {prefix}s: none ({note})")
    return lines


def _render_outcome(outcome: dict[str, Any] | None) -> str:
    if outcome is None:
        return "outcome: none stored yet (pending, running, or ended unseen)"
    took = outcome["end_time"] - outcome["start_time"]
    return (f"outcome: {outcome['state']} (exit {outcome['exit_code']}) on "
            f"{outcome['nodes']}, started {_when(outcome['start_time'])}, ran {took:.0f} s "
            f"(from {outcome['source']})")


@click.command("explain")
@click.argument("job_id")
@click.option("--config", "config_file", default=None,
              type=click.Path(dir_okay=False, path_type=Path), help="The daemon's TOML file.")
@click.option("--store", "store_url", default=None, help="SQLAlchemy URL of the store.")
@click.option("--cluster", default=None, help="Cluster name the job is stored under.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def explain_command(job_id: str, config_file: Path | None, store_url: str | None,
                    cluster: str | None, as_json: bool) -> None:
    """Why JOBID got its rank and its nodes: scores, GP mean and std of the chosen nodes,
    the best alternatives and why they lost, what was sent and how the job ended."""
    config = load(config_file, store_url)
    store = open_store(config)
    with reading(config):
        try:
            data = explanation(store, find_job(store, job_id,
                                               cluster or config.cluster_name or None))
        finally:
            store.engine.dispose()
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for line in render(data):
        click.echo(line)
