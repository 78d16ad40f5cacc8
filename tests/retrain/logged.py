"""A logged window written into a real store, as the daemon would have written it, and a
deliberately damaged policy bundle (for the gate's "worse candidate")."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from slurm_rl.core import Cluster, ClusterSnapshot, Decision, FinishedJob, Job, Node, Placement
from slurm_rl.store.nodes import record_nodes
from slurm_rl.store.repository import ActionRecord, Store

CLUSTER = "logged"
NODES = (
    Node("a100-01", "a100", 8, "", 2.9), Node("a100-02", "a100", 8, "", 2.9),
    Node("v100-01", "v100", 4, "", 1.2), Node("v100-02", "v100", 4, "", 1.2),
)


def fill(store: Store, jobs: int, *, now: float, seed: int = 0, nodes: bool = True,
         prefix: str = "") -> list[FinishedJob]:
    """``jobs`` finished jobs in the hours before ``now``: a burst of whole-node (8-GPU)
    jobs in which one user's long jobs (20-30 min) and two users' short ones (1-3 min) queue
    together for two nodes, so the order they start in decides the mean completion time."""
    rng = np.random.default_rng(seed)
    cluster = Cluster(CLUSTER, NODES)
    if nodes:
        record_nodes(store.engine, cluster, now - 4 * 3600.0)
    free_at = dict.fromkeys((n.name for n in NODES), now - 4 * 3600.0)
    submit = now - 4 * 3600.0
    finished = []
    for k in range(jobs):
        submit += float(rng.exponential(15.0))
        long = rng.random() < 0.4
        gpus = 8
        runtime = float(rng.uniform(1200, 1800) if long else rng.uniform(60, 180))
        user = "long" if long else f"short{k % 2}"
        fits = [n for n in NODES if n.gpus >= gpus]
        node = min(fits, key=lambda n: free_at[n.name])  # FIFO, one job per node at a time
        start = max(submit, free_at[node.name])
        free_at[node.name] = start + runtime
        job = Job(f"{prefix}{1000 + k}", submit, gpus, user=user, partition="gpu",
                  num_nodes=1, gpus_per_node=gpus, time_limit=3600.0)
        finished.append(FinishedJob(job, start, start + runtime, Placement((node.name,), (gpus,))))
    done = [f for f in finished if f.end_time <= now]
    if done:  # the daemon saw them pending and decided (one cycle), then saw them end
        jobs = tuple(f.job for f in done)
        snapshot = ClusterSnapshot(time=done[0].job.submit_time, cluster=cluster,
                                   free_gpus=tuple(n.gpus for n in NODES), pending=jobs,
                                   running=(), finished=())
        decision = Decision(ranking=tuple(j.job_id for j in jobs), placements={},
                            policy_id="logged")
        store.record_cycle(snapshot, decision, [ActionRecord(j.job_id, "release") for j in jobs],
                           mode="enforce")
    store.record_outcomes(CLUSTER, done, "squeue")
    return done


# A bundle without an ordering prior, whose scores are the network's alone, so negating its
# last layer reverses its ranking (session 14's, shipped until session 31). The shipped
# bundle's ordering is a residual on shortest-time-limit-first: negating the residual
# leaves the prior, which would not make it worse
NEGATABLE_BUNDLE = Path(__file__).resolve().parents[2] / "benchmarks" / "bundles" / "session-14"


def damaged_bundle(source: Path, target: Path) -> Path:
    """The bundle with its ordering scores negated: it ranks the jobs the trained agent
    would start first, last (a deliberately worse policy). ``source`` must have no ordering
    prior (:data:`NEGATABLE_BUNDLE` has none)."""
    from slurm_rl.agents.dual.bundle import load_bundle, save_bundle

    bundle = load_bundle(source)
    if bundle.network.config.ordering_sharpness > 0:
        raise ValueError(f"{source}: an ordering prior survives negating the network's scores")
    head = bundle.network.ordering.head[-1]
    head.weight.data.neg_()
    head.bias.data.neg_()
    meta = {k: v for k, v in bundle.meta.items() if k not in ("format", "feature_schema",
                                                               "network", "package_version")}
    return save_bundle(target, bundle.network, {**meta, "damaged": "ordering scores negated"})
