"""Sim-to-real: the same mini-trace run by a real slurmctld and by the simulator's emulation
of it, compared job by job (docs/slurm-emulation.md).

The live side (``tests/slurm/replay.py``) submits the trace with ``sbatch`` and reads back,
in Slurm's own clock, when each job was submitted, started and ended and on which nodes.
:func:`simulate_runs` replays exactly those jobs (Slurm's submit times, the ``sleep``
durations, the same shapes, users, time limits and job ids) in ``slurm`` mode with fixed
performance, under the policy the daemon ran, built by the daemon's own constructor.
:func:`compare` measures how far the two schedules differ.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from slurm_rl.core import Cluster, Job, Node
from slurm_rl.loop import DecisionMaker, run_loop
from slurm_rl.simulator.engine import Simulation
from slurm_rl.simulator.perfmodel import PerformanceModel
from slurm_rl.simulator.sim_config import SimConfig
from slurm_rl.simulator.slurm_emulation import PriorityHolder, SlurmScheduler
from slurm_rl.simulator.speed import FixedSpeedModel
from slurm_rl.simulator.world import SimActuator, TraceSource

TIE_S = 5.0  # a disagreement within this many seconds is timing, not a missed behaviour


@dataclass(frozen=True, slots=True)
class JobRun:
    """When and where one job ran, in seconds of one clock (Slurm's, or the replay's)."""

    job_id: str
    submit: float
    start: float
    end: float
    nodes: tuple[str, ...]

    @property
    def wait(self) -> float:
        return self.start - self.submit


@dataclass(frozen=True, slots=True)
class WorldSetup:
    """What the simulator must share with the live run: the levers' timing and Slurm's
    scheduler (the daemon's ``interval_s`` and ``defer_window_s``, slurm.conf's
    ``SchedulerType``), how long the daemon's levers take to reach slurmctld's
    scheduler (``lever_delay_s``, measured: docs/slurm-emulation.md), and the priority
    values its actuator leaves in Slurm within its limits on changes
    (``held_priorities``: ``SimConfig.held_priorities``; None: no limit)."""

    cycle_s: float
    defer_window_s: float
    scheduler: SlurmScheduler
    lever_delay_s: float = 0.0
    cycle_phase_s: float = 0.0
    held_priorities: Callable[[], PriorityHolder] | None = None
    end_lag_s: float = 0.0  # SimConfig.slurm_end_lag_s: Slurm's own start after an end
    hold_cap_s: float = 3600.0  # SimConfig.hold_cap_s: the daemon's defer_cap_s


def simulate_runs(cluster: Cluster, jobs: Sequence[Job], policy: DecisionMaker,
                  setup: WorldSetup) -> dict[str, JobRun]:
    """The jobs replayed in ``slurm`` mode with fixed performance under ``policy`` (as the
    daemon built it: :func:`slurm_rl.live_policy.make_policy`)."""
    ordered = sorted(jobs, key=lambda job: (job.submit_time, job.job_id))
    speed = FixedSpeedModel(cluster, PerformanceModel.default(), "V100", None)
    config = SimConfig(mode="slurm", cycle_s=setup.cycle_s, defer_window_s=setup.defer_window_s,
                       slurm_scheduler=setup.scheduler, observations=False,
                       lever_delay_s=setup.lever_delay_s, cycle_phase_s=setup.cycle_phase_s,
                       held_priorities=setup.held_priorities, slurm_end_lag_s=setup.end_lag_s,
                       hold_cap_s=setup.hold_cap_s)
    simulation = Simulation(cluster, ordered, speed, None, config)
    run_loop(TraceSource(simulation), policy, SimActuator(simulation))
    return {o.job.job_id: JobRun(o.job.job_id, o.job.submit_time, o.start, o.end, o.nodes)
            for o in simulation.outcomes}


def dev_cluster(name: str, nodes: Sequence[tuple[str, str, int]]) -> Cluster:
    """The simulator's picture of a live cluster: (name, GPU type, GPUs) in Slurm's order,
    as the daemon's source builds it (no host groups, no prices)."""
    return Cluster(name, tuple(Node(n, gpu_type, gpus) for n, gpu_type, gpus in nodes))


# -- comparing ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobComparison:
    job_id: str
    real_rank: int  # 0-based place in start order
    sim_rank: int
    real: JobRun
    sim: JobRun | None

    @property
    def same_nodes(self) -> bool:
        return self.sim is not None and set(self.real.nodes) == set(self.sim.nodes)

    @property
    def start_error(self) -> float:
        """Simulated minus real wait (start − submit), in seconds; inf if it never ran."""
        return math.inf if self.sim is None else self.sim.wait - self.real.wait


@dataclass(frozen=True, slots=True)
class Comparison:
    jobs: tuple[JobComparison, ...]
    tau: float
    same_nodes: float  # share of jobs on identical node sets
    median_error_s: float  # of |start error|
    p95_error_s: float
    unmatched: tuple[str, ...] = field(default=())  # jobs the replay did not finish

    @property
    def disagreements(self) -> tuple[JobComparison, ...]:
        return tuple(j for j in self.jobs
                     if not j.same_nodes or j.real_rank != j.sim_rank
                     or abs(j.start_error) > TIE_S)


def compare(real: Mapping[str, JobRun], sim: Mapping[str, JobRun]) -> Comparison:
    """Per job and per run: start order, node sets, start-time (wait) error."""
    ids = sorted(real, key=lambda j: (real[j].start, real[j].submit, _numeric(j)))
    sim_ids = sorted((j for j in ids if j in sim), key=lambda j: (sim[j].start, sim[j].submit,
                                                                   _numeric(j)))
    sim_rank = {job_id: rank for rank, job_id in enumerate(sim_ids)}
    rows = tuple(JobComparison(j, r, sim_rank.get(j, len(ids)), real[j], sim.get(j))
                 for r, j in enumerate(ids))
    matched = [row for row in rows if row.sim is not None]
    errors = sorted(abs(row.start_error) for row in matched)
    both = [j for j in ids if j in sim]
    tau = kendall_tau([real[j].start for j in both], [sim[j].start for j in both])
    return Comparison(
        jobs=rows, tau=tau,
        same_nodes=sum(row.same_nodes for row in rows) / len(rows) if rows else 1.0,
        median_error_s=statistics.median(errors) if errors else 0.0,
        p95_error_s=percentile(errors, 0.95),
        unmatched=tuple(j for j in ids if j not in sim),
    )


@dataclass(frozen=True, slots=True)
class Spread:
    """How the live schedule sits among several emulated ones, each with its own draw of the
    sub-second timings that vary live (``tests/slurm/replay.py`` ``Jitter``): ``reachable``,
    the share of jobs whose live node set at least one replica gives them; ``best``, the
    replica that agrees most (identical node sets, then tau)."""

    replicas: int
    reachable: float
    best: Comparison


def spread(real: Mapping[str, JobRun], sims: Sequence[Mapping[str, JobRun]]) -> Spread:
    """The live run against each replica (:class:`Spread`); at least one replica."""
    if not sims:
        raise ValueError("spread needs at least one replica")
    comparisons = [compare(real, sim) for sim in sims]
    reachable = sum(
        any(sim.get(job_id) is not None and set(sim[job_id].nodes) == set(run.nodes)
            for sim in sims)
        for job_id, run in real.items())
    best = max(comparisons, key=lambda c: (c.same_nodes, c.tau))
    return Spread(len(sims), reachable / len(real) if real else 1.0, best)


def kind_of(row: JobComparison, gpu_type_of: Mapping[str, str]) -> str:
    """What a disagreeing job is: ``node tie`` (started within TIE_S, on as many nodes of
    the same GPU types, just not the same ones: which of two equal nodes freed first),
    ``rank swap`` (same nodes, within TIE_S, another place in start order), ``late`` /
    ``early`` (the simulated start is over TIE_S after / before the real one), ``agrees``."""
    sim = row.sim
    if sim is None:
        return "unfinished"
    if abs(row.start_error) > TIE_S:
        return "late" if row.start_error > 0 else "early"
    if not row.same_nodes:
        types = sorted(gpu_type_of.get(n, "?") for n in row.real.nodes)
        same_types = types == sorted(gpu_type_of.get(n, "?") for n in sim.nodes)
        return "node tie" if same_types else "other nodes"
    return "rank swap" if row.real_rank != row.sim_rank else "agrees"


def kendall_tau(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Kendall's tau-b of two rankings (ties in either count as neither concordant nor
    discordant); 1.0 for fewer than two items or when either side is all ties."""
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(xs)):
        for j in range(i + 1, len(xs)):
            dx, dy = xs[i] - xs[j], ys[i] - ys[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x)
                            * (concordant + discordant + ties_y))
    return 1.0 if denominator == 0 else (concordant - discordant) / denominator


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of already sorted values (0.0 for none)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def _numeric(job_id: str) -> tuple[int, str]:
    return (int(job_id), "") if job_id.isdigit() else (0, job_id)


# -- printing -----------------------------------------------------------------------------


def summary_line(label: str, comparison: Comparison) -> str:
    c = comparison
    return (f"{label:<44} {len(c.jobs):>4} {c.tau:>6.3f} {100 * c.same_nodes:>6.1f}% "
            f"{c.median_error_s:>7.1f} {c.p95_error_s:>7.1f} {len(c.disagreements):>5}")


SUMMARY_HEADER = (f"{'run':<44} {'jobs':>4} {'tau':>6} {'nodes=':>7} {'med s':>7} "
                  f"{'p95 s':>7} {'diff':>5}")


def job_lines(comparison: Comparison, *, only_disagreements: bool = True) -> list[str]:
    """One line per job: ranks, waits and node sets, real against simulated."""
    rows = comparison.disagreements if only_disagreements else comparison.jobs
    lines = []
    for row in rows:
        sim = row.sim
        sim_nodes = ",".join(sim.nodes) if sim else "-"
        sim_wait = f"{sim.wait:6.0f}" if sim else "     -"
        lines.append(f"  job {row.job_id:>5}: rank {row.real_rank:>3} / {row.sim_rank:<3} "
                     f"wait {row.real.wait:6.0f} / {sim_wait} s  nodes "
                     f"{','.join(row.real.nodes)} / {sim_nodes}")
    return lines
