"""A scenario (cluster + trace + action mode) and replaying a scheduler through it."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from slurm_rl.agents.nodesets import fixed_shape
from slurm_rl.core import Cluster, Job
from slurm_rl.errors import InputError
from slurm_rl.loop import DecisionMaker, run_loop
from slurm_rl.metrics import ScheduleMetrics, compute_metrics
from slurm_rl.simulator.cluster_spec import ClusterSpec
from slurm_rl.simulator.engine import Simulation
from slurm_rl.simulator.fluctuation import MachineFluctuation
from slurm_rl.simulator.outcomes import JobOutcome, Timeline
from slurm_rl.simulator.perfmodel import PerformanceModel, datasheet_gpu_speeds
from slurm_rl.simulator.sim_config import ActionMode, SimConfig
from slurm_rl.simulator.speed import FixedSpeedModel, SpeedModel
from slurm_rl.simulator.world import SimActuator, TraceSource
from slurm_rl.traces import Trace

PerformanceMode = Literal["measured", "fixed"]
PERFORMANCE_MODES: tuple[PerformanceMode, ...] = ("measured", "fixed")


@dataclass(frozen=True)
class Scenario:
    spec: ClusterSpec
    trace: Trace
    sim: SimConfig = field(default_factory=SimConfig)
    fluctuation: bool = True
    measure_from: float | None = None  # jobs submitted earlier only warm the cluster up
    request_shape: Literal["per-node", "flexible"] = "per-node"
    # the share of jobs that save checkpoints and may be requeued to move them
    # (Job.checkpointable): the same jobs for every policy and replica
    checkpointable: float = 0.0
    # "measured": the performance model (type speeds, spread, co-location, fluctuation);
    # "fixed": every job runs its trace duration (FixedSpeedModel, no fluctuation)
    performance: PerformanceMode = "measured"

    def measured(self, outcomes: Sequence[JobOutcome]) -> list[JobOutcome]:
        start = self.measure_from
        if start is None:
            return list(outcomes)
        return [o for o in outcomes if o.job.submit_time >= start]

    @property
    def cluster(self) -> Cluster:
        return self.spec.cluster

    def replica(self, offset: int) -> Scenario:
        """The same scenario with other random draws: the machine fluctuation's seed and the
        simulator's (speed-reading noise) each moved by ``offset``; ``replica(0)`` is this one.
        Replicas measure how much of a difference between policies is luck."""
        if offset == 0:
            return self
        spec = replace(self.spec, fluctuation=replace(
            self.spec.fluctuation, seed=self.spec.fluctuation.seed + offset))
        return replace(self, spec=spec, sim=replace(self.sim, seed=self.sim.seed + offset))

    def runnable_jobs(self) -> tuple[list[Job], int]:
        """The trace's jobs that can run on this cluster at all, and how many cannot."""
        sizes = _node_sizes_by_type(self.cluster)
        submitted = self.trace.jobs
        if self.request_shape == "per-node":
            submitted = tuple(as_submitted(job, max(sizes[None])) for job in submitted)
        jobs = [job for job in submitted if can_ever_run(job, sizes)]
        if self.checkpointable > 0:
            jobs = [replace(job, checkpointable=_drawn(job.job_id, self.checkpointable))
                    for job in jobs]
        return jobs, len(self.trace.jobs) - len(jobs)


def check_something_to_measure(scenario: Scenario) -> None:
    """A replay of jobs none of which fits the cluster measures nothing: say so before it
    starts (``simulate``, ``evaluate``, training's windows), not with a traceback from the
    metrics after it."""
    jobs, _ = scenario.runnable_jobs()
    start = scenario.measure_from
    measured = [job for job in jobs if start is None or job.submit_time >= start]
    if measured:
        return
    trace, cluster = scenario.trace, scenario.cluster.name
    if not jobs:
        raise InputError(f"no job of trace {trace.name!r} can ever fit cluster {cluster!r} "
                         f"({len(trace.jobs)} jobs, none fits); nothing to replay")
    raise InputError(f"no measured job of trace {trace.name!r} can ever fit cluster "
                     f"{cluster!r} (only warm-up jobs fit); nothing to measure")


def _drawn(job_id: str, share: float) -> bool:
    """Whether a job is in the ``share`` of jobs picked by a hash of its id (no random state:
    every policy and replica gets the same jobs)."""
    digest = hashlib.blake2b(job_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < share


def as_submitted(job: Job, largest_node: int) -> Job:
    """The job as a Slurm user would submit it when the trace gives only a GPU count:
    ``--gres=gpu:N`` on one node up to the largest node's size, else the fewest nodes that
    hold it, GPUs spread evenly (``-N n --gres=gpu:N/n``). Traces that give a shape keep it."""
    if job.num_nodes is not None or job.gpus_per_node is not None:
        return job
    return replace(job, num_nodes=-(-job.num_gpus // largest_node))


def _node_sizes_by_type(cluster: Cluster) -> dict[str | None, list[int]]:
    """GPUs per node, largest first, for every GPU type (lower case) and for None (any type)."""
    sizes: dict[str | None, list[int]] = {None: []}
    for node in cluster.nodes:
        sizes.setdefault(node.gpu_type.lower(), []).append(node.gpus)
        sizes[None].append(node.gpus)
    return {key: sorted(values, reverse=True) for key, values in sizes.items()}


def can_ever_run(job: Job, sizes_by_type: dict[str | None, list[int]]) -> bool:
    """True when an empty cluster could hold the job with its shape and GPU type."""
    sizes = sizes_by_type.get(job.gpu_type.lower() if job.gpu_type else None, [])
    if job.num_nodes is None and job.gpus_per_node is None:
        return sum(sizes) >= job.num_gpus
    if (job.num_nodes or 0) > len(sizes) or job.num_gpus > sum(sizes):
        return False  # and the shape of a job far larger than the cluster is never laid out
    shares = fixed_shape(job)
    return len(sizes) >= len(shares) and all(s >= g for s, g in zip(sizes, shares, strict=False))


@dataclass(frozen=True)
class ReplayResult:
    policy_id: str
    metrics: ScheduleMetrics
    outcomes: Sequence[JobOutcome]
    timeline: Timeline
    wall_s: float
    cycles: int
    unschedulable_jobs: int
    rejected_actions: int
    unfinished_jobs: int


def build_simulation(scenario: Scenario, perf: PerformanceModel | None = None) -> Simulation:
    perf = scenario.spec.performance_model(perf)
    cluster = scenario.cluster
    fixed = scenario.performance == "fixed"
    fluctuation = None
    if scenario.fluctuation and scenario.spec.fluctuation.enabled and not fixed:
        fluctuation = MachineFluctuation(len(cluster.nodes), scenario.spec.fluctuation)
    model = FixedSpeedModel if fixed else SpeedModel
    speed = model(cluster, perf, scenario.trace.reference_gpu, fluctuation)
    jobs, _ = scenario.runnable_jobs()
    return Simulation(cluster, jobs, speed, fluctuation, scenario.sim)


def replay(
    scenario: Scenario,
    scheduler: DecisionMaker,
    *,
    policy_id: str,
    perf: PerformanceModel | None = None,
    on_cycle: Callable[[], None] | None = None,
) -> ReplayResult:
    started = time.perf_counter()
    simulation = build_simulation(scenario, perf)
    cycles = run_loop(TraceSource(simulation), scheduler, SimActuator(simulation), None, on_cycle)
    measured = scenario.measured(simulation.outcomes)
    return ReplayResult(
        policy_id=policy_id,
        metrics=compute_metrics(measured, scenario.cluster.total_gpus, simulation.timeline),
        outcomes=measured,
        timeline=simulation.timeline,
        wall_s=time.perf_counter() - started,
        cycles=cycles,
        unschedulable_jobs=scenario.runnable_jobs()[1],
        rejected_actions=simulation.rejected_actions,
        unfinished_jobs=simulation.unfinished_jobs,
    )


def gpu_speed_table() -> dict[str, float]:
    """Nominal speed of each GPU type (datasheet), the table the agents are given."""
    return dict(datasheet_gpu_speeds())


def with_mode(scenario: Scenario, mode: ActionMode) -> Scenario:
    return replace(scenario, sim=replace(scenario.sim, mode=mode))
