"""Golden schedules: small, varied replays whose every job's start, end and nodes are kept in
``tests/fixtures/golden_schedules.json``, recorded from the simulator before its speed work
(issue 21), so that any change to the engine, the Slurm emulation or the backfill plan that
moves a single job shows up (tests/test_golden_schedules.py).

Regenerate (only when a change of *semantics* is intended, and say so in the commit):
    .venv/bin/python -m tests.golden_schedules
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from slurm_rl.agents.ordering_baselines import Fifo
from slurm_rl.agents.registry import make_scheduler
from slurm_rl.agents.rwgp.placement import PlacementConfig, RwgpPlacement
from slurm_rl.fairness import LONGEST_HOLD_S, RankingRules
from slurm_rl.offered_load import load_points
from slurm_rl.scenario import PerformanceMode, Scenario, replay
from slurm_rl.scheduler import Scheduler
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.simulator.perfmodel import datasheet_gpu_speeds
from slurm_rl.simulator.sim_config import SimConfig
from slurm_rl.workloads import open_workload

FIXTURE = Path(__file__).parent / "fixtures" / "golden_schedules.json"


@dataclass(frozen=True)
class Case:
    name: str
    policy: str
    cluster: str
    days: float
    sim: SimConfig
    fluctuation: bool = True
    performance: PerformanceMode = "measured"
    checkpointable: float = 0.0
    seed: int = 0
    eager_moves: bool = False  # RWGP moving after 30 min to a node 1.2x faster: migrations
    load: float | None = None  # the cluster scaled to offer this load (a queue to walk)
    dispatch: bool = False  # the daemon's dispatch rule, holds up to the longest hold


CASES = (
    Case("direct-fifo-ff", "fifo+first-fit", "tiny", 0.25, SimConfig(mode="direct")),
    Case("direct-sjf-bf-fixed", "sjf-predicted+best-fit", "tiny", 0.25,
         SimConfig(mode="direct"), fluctuation=False, performance="fixed"),
    Case("slurm-fifo-ff", "fifo+first-fit", "tiny", 0.25, SimConfig(mode="slurm")),
    Case("slurm-fifo-ff-fixed", "fifo+first-fit", "tiny", 0.25, SimConfig(mode="slurm"),
         fluctuation=False, performance="fixed", seed=3),
    Case("slurm-multifactor-bf", "multifactor+best-fit", "tiny", 0.25,
         SimConfig(mode="slurm", lever_delay_s=5.0, cycle_phase_s=3.0)),
    Case("slurm-builtin-sjf", "sjf-predicted+first-fit", "tiny", 0.25,
         SimConfig(mode="slurm", slurm_scheduler="builtin")),
    Case("slurm-easy-qssf", "qssf+fastest-gpu", "tiny", 0.25,
         SimConfig(mode="slurm", backfill_reservations=1)),
    Case("slurm-philly-fifo-bf", "fifo+best-fit", "philly-hetero", 0.3,
         SimConfig(mode="slurm"), seed=1),
    # The RWGP cases were recorded with the simulator's pace readings on (its default until
    # session 45, SimConfig.observations): they check the engine, so they keep them.
    Case("slurm-rwgp-migrations", "fifo+rwgp", "philly-hetero", 0.15,
         SimConfig(mode="slurm", observations=True), checkpointable=0.5, eager_moves=True),
    Case("direct-rwgp-migrations", "fifo+rwgp", "philly-hetero", 0.15,
         SimConfig(mode="direct", observations=True), checkpointable=0.5, eager_moves=True),
    # Recorded before the walk's room test (slurm_rl/room.py): queues deep enough that most
    # placements asked for are refused, with and without dispatch's holds.
    Case("slurm-loaded-dispatch-fifo-fastest", "fifo+fastest-gpu", "philly-hetero", 1.0,
         SimConfig(mode="slurm", hold_cap_s=LONGEST_HOLD_S), load=5.0, dispatch=True),
    Case("slurm-loaded-limit-bf", "sjf-limit+best-fit", "philly-hetero", 1.0,
         SimConfig(mode="slurm"), load=5.0),
    Case("slurm-loaded-dispatch-multifactor-rwgp", "multifactor+rwgp", "philly-hetero", 1.0,
         SimConfig(mode="slurm", hold_cap_s=LONGEST_HOLD_S, observations=True), load=5.0,
         dispatch=True),
)

Schedule = list[list[object]]  # per job: id, start, end, node names, GPUs, restarts


def schedule(case: Case) -> Schedule:
    """Every finished job's start, end, nodes, GPUs and restarts, in finish order."""
    trace = open_workload("synthetic", days=case.days, seed=case.seed)
    spec = load_cluster_spec(case.cluster)
    scenario = Scenario(spec, trace, case.sim, fluctuation=case.fluctuation,
                        performance=case.performance, checkpointable=case.checkpointable)
    if case.load is not None:
        scenario = load_points(scenario, [case.load])[0].scenario
    rules = RankingRules(dispatch=True) if case.dispatch else None
    scheduler = make_scheduler(case.policy, datasheet_gpu_speeds(), rules=rules)
    if case.eager_moves:
        eager = PlacementConfig(migrate_after_s=1800.0, migrate_speedup=1.2)
        scheduler = Scheduler(Fifo(), RwgpPlacement(datasheet_gpu_speeds(), eager))
    result = replay(scenario, scheduler, policy_id=case.policy)
    return [[o.job.job_id, o.start, o.end, list(o.nodes), list(o.gpus), o.restarts]
            for o in result.outcomes]


def record() -> None:
    golden = {case.name: schedule(case) for case in CASES}
    FIXTURE.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print({name: len(jobs) for name, jobs in golden.items()})


if __name__ == "__main__":
    record()
