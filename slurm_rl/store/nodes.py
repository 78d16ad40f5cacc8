"""The cluster's GPU nodes in the store (table ``nodes``): retraining calibrates its
simulator scenario on them. Written when the daemon's view of the cluster changes, so an
unchanged cluster costs nothing per cycle."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from slurm_rl.core import Cluster, Node
from slurm_rl.store.registry_models import NodeRow


def record_nodes(engine: Engine, cluster: Cluster, seen: float) -> None:
    """Insert or update every node of ``cluster`` (nodes gone from it are kept: old
    outcomes still name them)."""
    with Session(engine) as session, session.begin():
        for node in cluster.nodes:
            session.merge(NodeRow(cluster=cluster.name, name=node.name, gpu_type=node.gpu_type,
                                  gpus=node.gpus, price_per_gpu_hour=node.price_per_gpu_hour,
                                  seen_at=seen))


def stored_nodes(engine: Engine, cluster: str) -> list[Node]:
    with Session(engine) as session:
        rows = session.scalars(select(NodeRow).where(NodeRow.cluster == cluster)
                               .order_by(NodeRow.name))
        return [Node(r.name, r.gpu_type, r.gpus, "", r.price_per_gpu_hour) for r in rows]


class NodeRecorder:
    """Writes the nodes when the cluster differs from the one written last."""

    def __init__(self) -> None:
        self._last: Cluster | None = None

    def __call__(self, engine: Engine, cluster: Cluster, seen: float) -> None:
        if cluster == self._last:
            return
        record_nodes(engine, cluster, seen)
        self._last = cluster
