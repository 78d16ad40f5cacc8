"""What a replay produces: one outcome per finished job and a timeline of the queue and GPUs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_rl.core import Job


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """A finished job with everything the metrics need.

    ``best_runtime`` is the job's run time on the fastest GPUs it could use, alone,
    consolidated and on healthy machines: the per-job term of the JCT lower bound. A job that
    was migrated ``restarts`` times started first at ``start`` and ended on ``nodes``;
    ``gpu_seconds`` and ``fee`` count all its runs.
    """

    job: Job
    start: float
    end: float
    nodes: tuple[str, ...]
    gpus: tuple[int, ...]
    gpu_seconds: Mapping[str, float]
    fee: float
    best_runtime: float
    restarts: int = 0

    @property
    def jct(self) -> float:
        return self.end - self.job.submit_time

    @property
    def queueing_delay(self) -> float:
        return self.start - self.job.submit_time

    @property
    def runtime(self) -> float:
        return self.end - self.start


@dataclass
class Timeline:
    """Queue length and busy GPUs over time, one point per change."""

    times: list[float] = field(default_factory=list)
    queue_length: list[int] = field(default_factory=list)
    busy_gpus: list[int] = field(default_factory=list)

    def record(self, t: float, queue_length: int, busy_gpus: int) -> None:
        if self.times and self.queue_length[-1] == queue_length and self.busy_gpus[-1] == busy_gpus:
            return
        if self.times and self.times[-1] == t:
            self.queue_length[-1], self.busy_gpus[-1] = queue_length, busy_gpus
            return
        self.times.append(t)
        self.queue_length.append(queue_length)
        self.busy_gpus.append(busy_gpus)
