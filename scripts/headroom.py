"""How much avg JCT is there to win on a window, and where is it? An analysis, not a policy.

Replays the best realisable baseline of a low-queue month (QSSF + fastest-GPU) and splits its
average JCT into queueing, run time at the nominal speed of the GPU type each job got, and the
excess over that (co-location, spread, machine fluctuation, stragglers); then replays
*oracle-informed* variants that no real cluster can run — they read the true durations — to
bound what smarter ordering and placement of this kind could win:

* ``sjf-oracle``: shortest true job first;
* ``oracle-route``: jobs shorter than an hour go to the slowest GPU type of at least T4 speed,
  longer ones to the fastest (keeps the fast GPUs for the long jobs);
* ``oracle-patience``: a job of an hour or more is held (Slurm deferral, up to a day) rather
  than started on a GPU type under half a V100's speed (K80);
* ``spread-small``: single-GPU jobs go to the emptiest node of the fastest type (fewer
  co-located neighbours), larger jobs as fastest-GPU.

Use it on training months only (September–November): December is held out. Example::

    python scripts/headroom.py --window 2017-11
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from collections.abc import Callable, Sequence

from slurm_rl.agents.ordering_baselines import Qssf, SjfOracle
from slurm_rl.agents.placement_baselines import FastestGpuFirst
from slurm_rl.cli.simulate import build_scenario
from slurm_rl.core import Cluster, ClusterSnapshot, Decision, Job, Placement
from slurm_rl.policy import PlacementPolicy
from slurm_rl.scenario import ReplayResult, Scenario, gpu_speed_table, replay
from slurm_rl.scheduler import Scheduler
from slurm_rl.simulator.outcomes import JobOutcome

HOUR = 3600.0
LONG_S = HOUR
SPEEDS = {k.lower(): v for k, v in gpu_speed_table().items()}


def _speed(snapshot: ClusterSnapshot, node: str) -> float:
    cluster = snapshot.cluster
    return SPEEDS[cluster.nodes[cluster.index(node)].gpu_type.lower()]


class OracleRoute:
    """Short jobs (true duration < 1 h) to the slowest type at least as fast as a T4."""

    name = "oracle-route"

    def __init__(self) -> None:
        floor = SPEEDS["t4"]
        slow_first = {k: (-v if v >= floor else -100.0 - v) for k, v in SPEEDS.items()}
        self._fast, self._slow = FastestGpuFirst(SPEEDS), FastestGpuFirst(slow_first)

    def observe(self, snapshot: ClusterSnapshot) -> None:
        return None

    def place(self, job: Job, free: Sequence[int], snapshot: ClusterSnapshot
              ) -> Placement | None:
        chooser = self._fast if job.oracle_duration >= LONG_S else self._slow
        return chooser.place(job, free, snapshot)


class SpreadSmall(FastestGpuFirst):
    """Fastest type first; single-GPU jobs on the emptiest node of it."""

    name = "spread-small"

    def place(self, job: Job, free: Sequence[int], snapshot: ClusterSnapshot
              ) -> Placement | None:
        self._small = job.num_gpus == 1
        return super().place(job, free, snapshot)

    def order(self, free: Sequence[int], snapshot: ClusterSnapshot) -> Sequence[int]:
        ranked = list(super().order(free, snapshot))
        if not self._small:
            return ranked
        return sorted(ranked, key=lambda i: (self._value[i], -free[i]))


class OraclePatience(Scheduler):
    """Holds a long job (true duration) instead of starting it on a type slower than 0.5."""

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        decision = super().decide(snapshot)
        jobs = {job.job_id: job for job in snapshot.pending}
        held = [j for j in decision.ranking if self._too_slow(jobs[j], decision, snapshot)]
        keep = [i for i, j in enumerate(decision.ranking) if j not in set(held)]
        ranking = tuple(decision.ranking[i] for i in keep)
        return Decision(decision.policy_id, ranking,
                        {j: p for j, p in decision.placements.items() if j in ranking},
                        tuple(decision.scores[i] for i in keep), tuple(held))

    @staticmethod
    def _too_slow(job: Job, decision: Decision, snapshot: ClusterSnapshot) -> bool:
        placement = decision.placements.get(job.job_id)
        if placement is None or job.oracle_duration < LONG_S:
            return False
        return min(_speed(snapshot, n) for n in placement.nodes) < 0.5


def variants() -> dict[str, Callable[[], Scheduler]]:
    return {
        "qssf+fastest-gpu": lambda: Scheduler(Qssf(), FastestGpuFirst(SPEEDS)),
        "sjf-oracle+fastest-gpu": lambda: Scheduler(SjfOracle(), FastestGpuFirst(SPEEDS)),
        "qssf+oracle-route": lambda: Scheduler(Qssf(), OracleRoute()),
        "qssf+oracle-patience": lambda: OraclePatience(Qssf(), FastestGpuFirst(SPEEDS)),
        "qssf+spread-small": lambda: Scheduler(Qssf(), _spread()),
    }


def _spread() -> PlacementPolicy:
    return SpreadSmall(SPEEDS)


def decomposition(outcomes: Sequence[JobOutcome], cluster: Cluster) -> dict[str, float]:
    """Mean hours per job: queueing, run time at the nominal speed of the slowest GPU type
    each job got, excess over that, and the lower bound's best run time."""
    type_of = {node.name: node.gpu_type.lower() for node in cluster.nodes}

    def nominal(o: JobOutcome) -> float:
        return o.job.oracle_duration / min(SPEEDS[type_of[node]] for node in o.nodes)

    mean = statistics.fmean
    return {
        "queue": mean(o.queueing_delay for o in outcomes) / HOUR,
        "run at nominal type speed": mean(nominal(o) for o in outcomes) / HOUR,
        "excess (co-location, spread, fluctuation)":
            mean(o.runtime - nominal(o) for o in outcomes) / HOUR,
        "best run time (lower bound)": mean(o.best_runtime for o in outcomes) / HOUR,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", default="2017-11", help="a training window (never 2017-12)")
    parser.add_argument("--cluster", default="philly-hetero")
    args = parser.parse_args(argv)
    if args.window.startswith("2017-12"):
        parser.error("December 2017 is the held-out evaluation month")
    scenario = build_scenario({
        "cluster": args.cluster, "trace_name": "philly", "window_spec": args.window,
        "days": 7.0, "seed": 0, "trace_format": None, "skip_bad_rows": False, "mode": "slurm",
        "cycle_s": 10.0, "no_fluctuation": False})
    scenario = dataclasses.replace(scenario, sim=dataclasses.replace(scenario.sim,
                                                                     hold_cap_s=24 * HOUR))
    results = {name: _replay(scenario, name, make) for name, make in variants().items()}
    _print(results, scenario.cluster)


def _replay(scenario: Scenario, name: str, make: Callable[[], Scheduler]) -> ReplayResult:
    return replay(scenario, make(), policy_id=name)


def _print(results: dict[str, ReplayResult], cluster: Cluster) -> None:
    base = results["qssf+fastest-gpu"]
    print(f"{'policy':<26} {'avg JCT h':>9} {'vs qssf+fastest':>15} {'fees $':>12}")
    for name, result in results.items():
        jct, fees = result.metrics.avg_jct_s, result.metrics.total_fees
        gain = 1.0 - jct / base.metrics.avg_jct_s
        print(f"{name:<26} {jct / HOUR:>9.3f} {100 * gain:>+14.1f}% {fees:>12,.0f}")
    print("\nqssf+fastest-gpu, mean hours per job:")
    for part, hours in decomposition(base.outcomes, cluster).items():
        print(f"  {part:<44} {hours:.3f}")


if __name__ == "__main__":
    main()
