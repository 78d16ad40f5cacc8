r"""Speed readings from finished jobs' runtimes, for a world that measures no pace (live Slurm).

A finished job of class ``c`` that ran ``r`` seconds on GPU type ``g`` with ``n`` GPUs is
compared with what its class predicts there: the running mean ``m`` and variance ``v`` of
``log r`` over earlier jobs of the same ``(c, g, n)``. The reading is

.. math::

    y = \exp(m - \log r), \qquad \text{noise variance} \approx v

— slower than the class usually is on that hardware reads as ``y < 1``. Runtimes of one class
spread far more than machines differ (``v`` is typically ≈ 1 in log space against a few per cent
of machine spread), so each reading carries little, and the GP weighs it by its noise; many of
them still find a machine that is persistently slow. Only classes with at least ``min_jobs``
earlier jobs yield readings, so the first jobs only build the reference. Our design, like the
rest of the RWGP (see docs/placement-agent.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from slurm_rl.core import Cluster, FinishedJob, SpeedObservation
from slurm_rl.stats import RunningMoments

_Key = tuple[str, str, int]


class RuntimeReference:
    """What each job class's runtime usually is, per GPU type and GPU count."""

    def __init__(self, min_jobs: int = 5, min_variance: float = 0.01) -> None:
        self.min_jobs = min_jobs
        self.min_variance = min_variance
        self._stats: dict[_Key, RunningMoments] = {}

    def readings(
        self, finished: Sequence[FinishedJob], cluster: Cluster
    ) -> tuple[list[SpeedObservation], list[float]]:
        """Readings and their noise variances for these jobs; then learns from them."""
        observations: list[SpeedObservation] = []
        variances: list[float] = []
        for done in finished:
            runtime = done.end_time - done.start_time
            key = self._key(done, cluster)
            if runtime <= 0 or key is None or done.state != "COMPLETED":
                continue
            stats = self._stats.setdefault(key, RunningMoments())
            if stats.count >= self.min_jobs:
                speed = math.exp(stats.mean - math.log(runtime))
                observations.append(
                    SpeedObservation(done.end_time, done.placement.nodes, key[0], speed)
                )
                variances.append(max(stats.variance, self.min_variance))
            stats.add(math.log(runtime))
        return observations, variances

    @staticmethod
    def _key(done: FinishedJob, cluster: Cluster) -> _Key | None:
        nodes = done.placement.nodes
        if not nodes or not all(cluster.has_node(n) for n in nodes):
            return None
        types = {cluster.nodes[cluster.index(n)].gpu_type.lower() for n in nodes}
        gpu_type = types.pop() if len(types) == 1 else "mixed"
        return done.job.model_family, gpu_type, done.placement.num_gpus
