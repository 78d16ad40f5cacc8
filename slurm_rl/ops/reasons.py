"""Why each job got its rank and its nodes, worked out in the cycle that decided it and
stored with the decision (``DecisionRow.details["why"]``) for ``slurm-rl explain``.

For ranks: the job's score, its rank among the pending jobs and its neighbours' scores; where
the shared ranking step (slurm_rl/fairness.py) moved it, the rank the policy gave it
(``policy_rank``), the fairness guard's figures when the guard re-ranked (``fairness``), and
the places its ``--nice`` moved it (``nice``); for the job the guard brought forward that did
not fit, its reservation (``reservation``: when it can start, on which nodes, the GPUs held).
For nodes: the chosen nodes with their free GPUs and, where the placement has a GP (the RWGP
agent, alone or as the learned head's chooser), each node's posterior mean and std of
relative speed; then the best alternatives and why they lost (a higher RWGP cost, a lower
probability under the learned head, or the heuristic's own rule). Explaining never changes a
decision and never fails a cycle: any error becomes ``{"error": ...}``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from slurm_rl.core import ClusterSnapshot, Decision, Job, Placement
from slurm_rl.fairness import Reranking, find_on_chain, find_reranking
from slurm_rl.reservation import Reservation

log = logging.getLogger("slurm_rl.daemon")

MAX_EXPLAINED = 20  # placed jobs explained per cycle: the alternatives cost a placement each
ALTERNATIVES = 3

Why = dict[str, Any]


def explain_decision(inner: object, snapshot: ClusterSnapshot, decision: Decision) -> dict[str,
                                                                                           Why]:
    """``{job_id: why}`` for the ranked jobs of ``decision`` (placements for the first
    :data:`MAX_EXPLAINED` placed ones)."""
    try:
        reasons = _ranks(snapshot, decision)
        _add_reranking(reasons, find_reranking(inner), snapshot)
        _add_reservation(reasons, find_on_chain(inner, "last_reservation", Reservation),
                         snapshot)
        placement = getattr(inner, "placement", None)
        if placement is not None and decision.placements:
            _add_placements(reasons, placement, snapshot, decision)
        return reasons
    except Exception as exc:  # an explanation must never cost a cycle
        log.debug("no explanation this cycle: %s", exc, exc_info=True)
        return {job_id: {"error": str(exc)} for job_id in decision.ranking}


def _ranks(snapshot: ClusterSnapshot, decision: Decision) -> dict[str, Why]:
    scores = decision.scores
    ranking = decision.ranking
    reasons: dict[str, Why] = {}
    for rank, job_id in enumerate(ranking):
        why: Why = {"rank": rank, "ranked": len(ranking), "pending": len(snapshot.pending)}
        if scores:
            why["score"] = scores[rank]
            if rank > 0:
                why["above"] = {"job": ranking[rank - 1], "score": scores[rank - 1]}
            if rank + 1 < len(ranking):
                why["below"] = {"job": ranking[rank + 1], "score": scores[rank + 1]}
        reasons[job_id] = why
    return reasons


def _add_reranking(reasons: dict[str, Why], reranking: Reranking | None,
                   snapshot: ClusterSnapshot) -> None:
    """Where the shared ranking step put jobs other than where the policy did, and why."""
    if reranking is None or reranking.time != snapshot.time:
        return  # not this decision's (a wrapper that decides without the scheduler)
    if not (reranking.guard_applied or reranking.policy_rank or reranking.nice_places):
        return
    jobs = {job.job_id: job for job in snapshot.pending}
    fairness = reranking.fairness
    for job_id, why in reasons.items():
        if job_id in reranking.policy_rank:
            why["policy_rank"] = reranking.policy_rank[job_id]
        job = jobs.get(job_id)
        if reranking.guard_applied and job is not None:
            forward = job.user in reranking.brought_forward
            why["fairness"] = {
                "guard": "brought forward: the user waits too long" if forward else
                         "after the jobs of users who wait too long",
                "user": job.user, "user_mean_wait_s": fairness.mean_wait_s.get(job.user, 0.0),
                "wait_ratio": fairness.wait_ratio, "bound": reranking.max_wait_ratio,
                "jain_index": fairness.jain_index,
            }
        if job_id in reranking.nice_places and job is not None:
            why["nice"] = {"nice": job.nice, "places": reranking.nice_places[job_id]}


def _add_reservation(reasons: dict[str, Why], reservation: Reservation | None,
                     snapshot: ClusterSnapshot) -> None:
    """The GPUs held for the job the guard brought forward and could not place."""
    if reservation is None or reservation.time != snapshot.time:
        return
    why = reasons.get(reservation.job_id)
    if why is not None:
        held = [(node.name, gpus) for node, gpus in zip(snapshot.cluster.nodes,
                                                       reservation.held, strict=True) if gpus]
        why["reservation"] = {"start": reservation.start,
                              "nodes": list(reservation.placement.nodes),
                              "held": dict(held)}


def _add_placements(
    reasons: dict[str, Why], policy: object, snapshot: ClusterSnapshot, decision: Decision
) -> None:
    """Replays the scheduler's walk: each placed job sees the GPUs left by those before it."""
    free = list(snapshot.free_gpus)
    cluster = snapshot.cluster
    jobs = {job.job_id: job for job in snapshot.pending}
    explained = 0
    for job_id in decision.ranking:
        chosen = decision.placements.get(job_id)
        if chosen is None or job_id not in jobs:
            continue
        if explained < MAX_EXPLAINED:
            reasons[job_id]["placement"] = _placement_why(policy, jobs[job_id], free, snapshot,
                                                          chosen)
            explained += 1
        for name, gpus in zip(chosen.nodes, chosen.gpus, strict=True):
            free[cluster.index(name)] -= gpus


def _rwgp(policy: object) -> Any:
    """The RWGP placement behind ``policy`` (itself, or the learned head's chooser)."""
    if hasattr(policy, "node_belief"):
        return policy
    chooser = getattr(getattr(policy, "generator", None), "chooser", None)
    return chooser if hasattr(chooser, "node_belief") else None


def _placement_why(
    policy: object, job: Job, free: Sequence[int], snapshot: ClusterSnapshot, chosen: Placement
) -> Why:
    cluster = snapshot.cluster
    rwgp = _rwgp(policy)
    belief = rwgp.node_belief(job, snapshot) if rwgp is not None else {}
    nodes = []
    for name, gpus in zip(chosen.nodes, chosen.gpus, strict=True):
        entry: Why = {"node": name, "gpus": gpus, "free_gpus": free[cluster.index(name)]}
        if name in belief:
            entry["gp_mean"], entry["gp_std"] = belief[name]
        nodes.append(entry)
    why: Why = {"policy": getattr(policy, "name", type(policy).__name__), "nodes": nodes}
    if rwgp is not None:  # the GP's costs: why these nodes and not others
        why.update(_rwgp_alternatives(rwgp, job, free, snapshot, chosen))
    else:
        why["alternatives"] = _heuristic_alternatives(job, free, snapshot, chosen, why["policy"])
    if hasattr(policy, "generator") and hasattr(policy, "logits"):
        why["head"] = _learned_alternatives(policy, job, free, snapshot, chosen)
    return why


def _same(placement: Placement, chosen: Placement) -> bool:
    return set(placement.nodes) == set(chosen.nodes)


def _rwgp_alternatives(
    rwgp: Any, job: Job, free: Sequence[int], snapshot: ClusterSnapshot, chosen: Placement
) -> Why:
    found = sorted(rwgp.candidates(job, free, snapshot), key=lambda c: c.score)
    best = next((c for c in found if _same(c.placement, chosen)), None)
    out: Why = {}
    if best is not None:
        out["chosen"] = _features(best)
    others = [c for c in found if not _same(c.placement, chosen)][:ALTERNATIVES]
    out["alternatives"] = [{**_features(c), "lost": _rwgp_loss(c, best)} for c in others]
    if not others:  # a fixed shape yields one set: compare the nodes the GP passed over
        out["alternatives"] = _node_alternatives(rwgp, job, free, snapshot, chosen)
    return out


def _node_alternatives(
    rwgp: Any, job: Job, free: Sequence[int], snapshot: ClusterSnapshot, chosen: Placement
) -> list[Why]:
    belief = rwgp.node_belief(job, snapshot)
    mine = [belief[n] for n in chosen.nodes if n in belief]
    worst_mean = min((m for m, _ in mine), default=0.0)
    worst_std = max((s for _, s in mine), default=0.0)
    found = []
    for entry in _heuristic_alternatives(job, free, snapshot, chosen, "rwgp"):
        mean, std = belief.get(entry["node"], (float("nan"), float("nan")))
        if mean < worst_mean - 1e-9:
            lost = f"lower GP mean {mean:.3g} < {worst_mean:.3g}"
        elif std > worst_std + 1e-9:
            lost = f"higher GP std {std:.3g} > {worst_std:.3g}"
        else:
            lost = "no better: same GP belief; packing and node order break the tie"
        found.append({**entry, "gp_mean": mean, "gp_std": std, "lost": lost})
    return found


def _features(candidate: Any) -> Why:
    return {"nodes": list(candidate.placement.nodes), "score": candidate.score,
            "gp_mean": candidate.mean, "gp_std": candidate.std, "pace": candidate.pace,
            "price_per_hour": candidate.price, "spread": candidate.spread}


def _rwgp_loss(alt: Any, best: Any) -> str:
    """The one factor that makes the alternative's cost (lower is better) higher."""
    if best is None:
        return f"cost {alt.score:.4g}"
    reasons = []
    if alt.pace < best.pace * 0.999:
        reasons.append(f"slower risk-adjusted pace {alt.pace:.3g} < {best.pace:.3g}")
    if alt.mean < best.mean - 1e-9:
        reasons.append(f"lower GP mean {alt.mean:.3g} < {best.mean:.3g}")
    if alt.std > best.std + 1e-9:
        reasons.append(f"higher GP std {alt.std:.3g} > {best.std:.3g}")
    if alt.price > best.price + 1e-9:
        reasons.append(f"pricier {alt.price:.3g}/h > {best.price:.3g}/h")
    if alt.spread > best.spread:
        reasons.append(f"spread over {alt.spread + 1} nodes")
    detail = "; ".join(reasons) or "worse packing (leaves GPUs stranded)"
    return f"cost {alt.score:.4g} > {best.score:.4g}: {detail}"


def _learned_alternatives(
    policy: Any, job: Job, free: Sequence[int], snapshot: ClusterSnapshot, chosen: Placement
) -> Why:
    import torch  # lazy: only a learned placement is explained with it

    found = policy.generator.candidates(job, free, snapshot)
    if len(found) < 2:
        return {"alternatives": [], "note": "one candidate set (one GPU type had room)"}
    row = policy.builder.job_row(job, snapshot)
    cluster = policy.builder.encode(snapshot).cluster
    probs = torch.softmax(policy.logits(row, found, cluster), dim=0).tolist()
    pairs = sorted(zip(found.placements, probs, strict=True), key=lambda pair: -pair[1])
    mine = next((p for placement, p in pairs if _same(placement, chosen)), None)
    out: Why = {"chosen": {"nodes": list(chosen.nodes), "probability": mine}}
    out["alternatives"] = [
        {"nodes": list(placement.nodes), "probability": p,
         "lost": f"the learned head prefers the chosen set ({p:.3f} vs {mine or 0:.3f})"}
        for placement, p in pairs if not _same(placement, chosen)
    ][:ALTERNATIVES]
    return out


def _heuristic_alternatives(
    job: Job, free: Sequence[int], snapshot: ClusterSnapshot, chosen: Placement, policy: str
) -> list[Why]:
    """Other nodes with room for the job's per-node share, by free GPUs."""
    share = max(chosen.gpus)
    wanted = job.gpu_type.lower() if job.gpu_type else None
    found = []
    for node, room in zip(snapshot.cluster.nodes, free, strict=True):
        if node.name in chosen.nodes or room < share:
            continue
        if wanted is not None and node.gpu_type.lower() != wanted:
            continue
        found.append({"node": node.name, "free_gpus": room, "gpu_type": node.gpu_type,
                      "lost": f"{policy}'s rule ranks it after the chosen nodes"})
    found.sort(key=lambda entry: -int(str(entry["free_gpus"])))
    return found[:ALTERNATIVES]


def merge(details: Mapping[str, Any] | None, why: Why | None) -> dict[str, Any] | None:
    out = dict(details or {})
    if why:
        out["why"] = why
    return out or None
