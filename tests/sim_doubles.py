"""Small, exact building blocks for engine tests: a cluster, jobs, and a performance model
whose numbers are simple enough to check by hand (the measured model is tested on its own)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from slurm_rl.agents.registry import make_scheduler
from slurm_rl.core import Cluster, Job, Node
from slurm_rl.fairness import LONGEST_HOLD_S, RankingRules
from slurm_rl.offered_load import load_points
from slurm_rl.scenario import Scenario, replay
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.simulator.engine import Simulation
from slurm_rl.simulator.perfmodel import datasheet_gpu_speeds
from slurm_rl.simulator.sim_config import SimConfig
from slurm_rl.simulator.speed import SpeedModel
from slurm_rl.workloads import open_workload

Schedule = list[tuple[str, float, float, tuple[str, ...], tuple[int, ...]]]


class SimplePerformance:
    """Type speeds from a table, 0.8 per extra node spanned, 0.9 when sharing a node."""

    def __init__(self, speeds: dict[str, float] | None = None) -> None:
        self.speeds = speeds or {"A100": 2.0, "V100": 1.0}

    def canonical_gpu_type(self, name: str) -> str:
        return name.upper()

    def relative_speed(self, family: str, gpu_type: str, reference_gpu: str) -> float:
        return self.speeds[gpu_type] / self.speeds[reference_gpu]

    def spread_factor(self, family: str, gpus_per_node: tuple[int, ...],
                      same_host_group: bool = True, node_capacity: int | None = None) -> float:
        return 0.8 ** (len(gpus_per_node) - 1)

    def colocation_factor(self, family: str, neighbour_families: tuple[str, ...]) -> float:
        return 0.9 if neighbour_families else 1.0

    def gang_colocation_factor(self, family: str,
                               neighbours_by_node: Iterable[tuple[str, ...]]) -> float:
        return min(self.colocation_factor(family, tuple(n)) for n in neighbours_by_node)


def small_cluster() -> Cluster:
    nodes = [Node(f"a100-{i}", "A100", 8, "rack-a", 4.0) for i in range(2)]
    nodes += [Node(f"v100-{i}", "V100", 4, "rack-b", 2.0) for i in range(2)]
    return Cluster("small", tuple(nodes))


def job(job_id: str, submit: float, gpus: int, duration: float, **extra: object) -> Job:
    fields: dict[str, object] = {"model_family": "cifar10", "time_limit": duration * 2}
    fields.update(extra)
    return Job(job_id, submit, gpus, oracle_duration=duration, **fields)  # type: ignore[arg-type]


def simulation(jobs: list[Job], mode: str = "direct", cycle_s: float = 0.0,
               cluster: Cluster | None = None, defer_window_s: float = 30.0,
               hold_cap_s: float = SimConfig.hold_cap_s, **config_fields: Any) -> Simulation:
    cluster = cluster or small_cluster()
    speed = SpeedModel(cluster, SimplePerformance(), "V100", None)  # type: ignore[arg-type]
    config = SimConfig(mode=mode, cycle_s=cycle_s, defer_window_s=defer_window_s,  # type: ignore[arg-type]
                       hold_cap_s=hold_cap_s, **config_fields)
    return Simulation(cluster, sorted(jobs, key=lambda j: j.submit_time), speed, None, config)


def loaded_dispatch_schedule(policy: str, *, days: float, seed: int, load: float) -> Schedule:
    """``policy`` on a synthetic workload on philly-hetero scaled to offer ``load``, slurm
    mode with dispatch (a queue, so that many jobs ask for room in the same free GPUs):
    every finished job's id, start, end, nodes and GPUs, sorted."""
    trace = open_workload("synthetic", days=days, seed=seed)
    config = SimConfig(mode="slurm", hold_cap_s=LONGEST_HOLD_S)
    scenario = Scenario(load_cluster_spec("philly-hetero"), trace, config)
    loaded = load_points(scenario, [load])[0].scenario
    scheduler = make_scheduler(policy, datasheet_gpu_speeds(), rules=RankingRules(dispatch=True))
    result = replay(loaded, scheduler, policy_id=policy)
    return sorted((o.job.job_id, o.start, o.end, tuple(o.nodes), tuple(o.gpus))
                  for o in result.outcomes)

