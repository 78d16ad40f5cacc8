"""The sim-to-real comparison (slurm_rl/sim2real.py) on schedules small enough to check by
hand, and the simulated side of the replay on a worked example."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from pathlib import Path

import pytest

from slurm_rl.core import ClusterSnapshot, Decision, Job, Placement
from slurm_rl.live_policy import make_policy
from slurm_rl.sim2real import (
    Comparison,
    JobRun,
    WorldSetup,
    compare,
    dev_cluster,
    job_lines,
    kendall_tau,
    kind_of,
    percentile,
    simulate_runs,
    spread,
)
from slurm_rl.slurm.priority import HeldPriorities, PriorityLimits, PriorityPlan
from tests.slurm.replay import cycle_timing, resimulate


def test_kendall_tau_counts_concordant_and_discordant_pairs() -> None:
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert kendall_tau([1, 2, 3, 4], [40, 30, 20, 10]) == -1.0
    # one swapped pair of six: (5 - 1) / 6
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # tau-b: a tie on one side is neither; sqrt((5 + 0 + 1) * (5 + 0 + 0)) below
    assert kendall_tau([1, 2, 3, 4], [1, 1, 3, 4]) == pytest.approx(5 / math.sqrt(6 * 5))
    assert kendall_tau([1], [2]) == 1.0


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]
    assert percentile(values, 0.95) == 19.0
    assert percentile(values, 0.5) == 10.0
    assert percentile([], 0.95) == 0.0


def _run(job_id: str, submit: float, start: float, nodes: tuple[str, ...]) -> JobRun:
    return JobRun(job_id, submit, start, start + 10, nodes)


def test_compare_reports_order_nodes_and_wait_errors() -> None:
    real = {"1": _run("1", 0, 2, ("a",)), "2": _run("2", 1, 3, ("b",)),
            "3": _run("3", 2, 20, ("a", "b"))}
    sim = {"1": _run("1", 0, 0, ("a",)), "2": _run("2", 1, 30, ("a",)),
           "3": _run("3", 2, 10, ("a", "b"))}
    result = compare(real, sim)
    assert [row.job_id for row in result.jobs] == ["1", "2", "3"]  # real start order
    assert [row.sim_rank for row in result.jobs] == [0, 2, 1]
    assert result.same_nodes == pytest.approx(2 / 3)
    assert [row.start_error for row in result.jobs] == [-2.0, 27.0, -10.0]
    assert result.median_error_s == 10.0 and result.p95_error_s == 27.0
    assert result.tau == pytest.approx(1 / 3)
    assert {row.job_id for row in result.disagreements} == {"2", "3"}
    lines = job_lines(result)
    assert len(lines) == 2 and "a / a" not in lines[0]


def test_a_job_the_replay_did_not_finish_is_unmatched() -> None:
    result = compare({"1": _run("1", 0, 0, ("a",))}, {})
    assert result.unmatched == ("1",) and not result.jobs[0].same_nodes


def test_the_simulated_side_starts_jobs_as_worked_out_by_hand() -> None:
    """Two nodes of 4 GPUs, limits 60 s, decisions every 2 s. Job 1 (4 GPUs, 30 s) starts
    on n1 at 0; job 2 (both nodes) waits for it. Job 3 (4 GPUs, 10 s) comes at 1; at the
    decision at 2 the policy pins it to the free n2, and the daemon gives a job it pins the
    top priority (plan.placed_first), so it starts at 2, ahead of job 2's plan. Job 1 ends at
    30 and job 2 runs 30-40."""
    cluster = dev_cluster("two", [("n1", "a100", 4), ("n2", "a100", 4)])
    jobs = [
        Job("1", 0.0, 4, num_nodes=1, gpus_per_node=4, time_limit=60.0, oracle_duration=30.0),
        Job("2", 0.0, 8, num_nodes=2, gpus_per_node=4, time_limit=60.0, oracle_duration=10.0),
        Job("3", 1.0, 4, num_nodes=1, gpus_per_node=4, time_limit=60.0, oracle_duration=10.0),
    ]
    policy = make_policy("fifo+best-fit")
    runs = simulate_runs(cluster, jobs, policy, WorldSetup(2.0, 6.0, "backfill"))
    assert {j: (r.start, r.end, r.nodes) for j, r in runs.items()} == {
        "1": (0.0, 30.0, ("n1",)), "2": (30.0, 40.0, ("n1", "n2")), "3": (2.0, 12.0, ("n2",)),
    }


class _PinsDWhenN1IsFree:
    """Releases every pending job; pins A to n1 and B to n2 at first, and D (not C, which
    Slurm would take: it was submitted first) to n1 once a snapshot shows n1 free."""

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        pending = tuple(job.job_id for job in snapshot.pending)
        pins = {"A": Placement(("n1",), (4,)), "B": Placement(("n2",), (4,))}
        if snapshot.free_gpus[0] == 4 and "A" not in pending:
            pins = {"D": Placement(("n1",), (4,))}
        return Decision("scripted", pending, {j: p for j, p in pins.items() if j in pending})


@pytest.mark.parametrize(("lag", "expected"), [
    (0.0, {"C": (3.5, "n1"), "D": (13.5, "n1")}),
    (0.9, {"C": (15.3, "n1"), "D": (4.4, "n1")}),
])
def test_slurm_starts_nothing_on_a_job_s_nodes_until_its_end_lag_is_over(
    lag: float, expected: dict[str, tuple[float, str]]
) -> None:
    """A (n1) ends at 3.5; C and D (4 GPUs each, released, unpromoted) wait, C submitted
    first. Decisions every 2 s. Without a lag Slurm's own pass gives n1 to C at once. With
    Slurm's measured 0.9 s lag (SimConfig.slurm_end_lag_s) n1 is free to the daemon's
    snapshot at 4 but not to Slurm until 4.4: the daemon pins D there, and D, promoted,
    starts first when the lag is over; C follows when D's end (14.4) has lagged too."""
    cluster = dev_cluster("two", [("n1", "a100", 4), ("n2", "a100", 4)])
    jobs = [Job(name, submit, 4, num_nodes=1, gpus_per_node=4, time_limit=60.0,
                oracle_duration=run)
            for name, submit, run in (("A", 0.0, 3.5), ("B", 0.0, 100.0), ("C", 0.1, 10.0),
                                      ("D", 0.2, 10.0))]
    runs = simulate_runs(cluster, jobs, _PinsDWhenN1IsFree(),
                         WorldSetup(2.0, 6.0, "backfill", end_lag_s=lag))
    assert {j: (round(runs[j].start, 6), runs[j].nodes[0]) for j in ("C", "D")} == expected
    assert runs["A"].end == 3.5 and runs["B"].start == 0.0


def test_disagreements_are_sorted_by_kind() -> None:
    types = {"a": "a100", "b": "a100", "c": "v100"}
    real = {"1": _run("1", 0, 2, ("a",)), "2": _run("2", 0, 3, ("c",)),
            "3": _run("3", 0, 4, ("a",)), "4": _run("4", 0, 40, ("a",))}
    sim = {"1": _run("1", 0, 2, ("b",)), "2": _run("2", 0, 3, ("a",)),
           "3": _run("3", 0, 4, ("a",)), "4": _run("4", 0, 10, ("a",))}
    kinds = {row.job_id: kind_of(row, types) for row in compare(real, sim).jobs}
    assert kinds == {"1": "node tie", "2": "other nodes", "3": "agrees", "4": "early"}


class _Recording(HeldPriorities):
    """The holder, noting what each decision promoted and the values it then held."""

    def __init__(self, limits: PriorityLimits) -> None:
        super().__init__(limits)
        self.log: list[tuple[float, tuple[str, ...], dict[str, int]]] = []

    def apply(self, promoted: Sequence[str], now: float, alive: Collection[str],
              urgent: Collection[str] = frozenset()) -> PriorityPlan:
        planned = super().apply(promoted, now, alive, urgent)
        self.log.append((now, tuple(promoted), dict(self.values)))
        return planned


def test_the_replay_plans_priorities_with_the_holder_it_is_given() -> None:
    """``WorldSetup.held_priorities`` reaches the emulation (SimConfig.held_priorities): the
    replay plans priorities within the daemon's own limits. In the worked example above the
    decision at 2 promotes job 3 (pinned) and nothing else: job 2 keeps Slurm's own
    priority, and the schedule is the one worked out by hand."""
    cluster = dev_cluster("two", [("n1", "a100", 4), ("n2", "a100", 4)])
    jobs = [
        Job("1", 0.0, 4, num_nodes=1, gpus_per_node=4, time_limit=60.0, oracle_duration=30.0),
        Job("2", 0.0, 8, num_nodes=2, gpus_per_node=4, time_limit=60.0, oracle_duration=10.0),
        Job("3", 1.0, 4, num_nodes=1, gpus_per_node=4, time_limit=60.0, oracle_duration=10.0),
    ]
    holders: list[_Recording] = []

    def holder() -> HeldPriorities:
        holders.append(_Recording(PriorityLimits(2, 2, 200)))
        return holders[-1]

    setup = WorldSetup(2.0, 6.0, "backfill", held_priorities=holder)
    runs = simulate_runs(cluster, jobs, make_policy("fifo+best-fit"), setup)
    assert len(holders) == 1
    promoted_at_2 = [(promoted, values) for now, promoted, values in holders[0].log
                     if now == 2.0]
    assert promoted_at_2 == [(("3",), {"3": promoted_at_2[0][1]["3"]})]
    assert {j: r.start for j, r in runs.items()} == {"1": 0.0, "2": 30.0, "3": 2.0}


def test_the_replay_fits_the_live_cycles_period_and_phase() -> None:
    """A live daemon's cycles last interval_s plus a millisecond of sleep overshoot: 60
    cycles of 2.001 s drift 0.06 s from a 2 s grid, so the replay fits the period."""
    origin = 1000.0
    cycles = [(origin - 1.6 + 2.001 * k, 0.15 + 0.01 * (k % 3)) for k in range(60)]
    period, phase, duration = cycle_timing(cycles, origin, 2.0)
    assert period == pytest.approx(2.001)
    assert phase == pytest.approx(0.401)  # cycle 1, at origin + 0.401, is the first after it
    assert duration == pytest.approx(0.16)
    assert cycle_timing([], origin, 2.0) == (2.0, 0.0, 0.0)


def test_the_spread_says_which_live_node_sets_some_replica_reaches() -> None:
    real = {"1": _run("1", 0, 2, ("a",)), "2": _run("2", 0, 3, ("b",))}
    one = {"1": _run("1", 0, 2, ("b",)), "2": _run("2", 0, 3, ("b",))}
    other = {"1": _run("1", 0, 2, ("a",)), "2": _run("2", 0, 3, ("a",))}
    result = spread(real, [one, other])
    assert result.replicas == 2 and result.reachable == 1.0  # each job's nodes, in one of them
    assert result.best.same_nodes == 0.5
    assert spread(real, [one]).reachable == 0.5
    with pytest.raises(ValueError):
        spread(real, [])


SAVED_RUNS = Path(__file__).resolve().parents[1] / "benchmarks" / "replay_live_runs"


@pytest.fixture(scope="module")
def saved_table() -> list[Comparison]:
    """The 30 saved live runs (5 mini-traces x 3 policies x 2 schedulers) re-simulated by
    the emulation as it is now: the table of benchmarks/replay_live.py --from, no Slurm."""
    return [resimulate(path).comparison for path in sorted(SAVED_RUNS.glob("*.json"))]


def _overall(table: Sequence[Comparison]) -> tuple[float, float, float]:
    """Identical node sets over every job, tau's median over runs, median |start error|."""
    jobs = [row for comparison in table for row in comparison.jobs]
    taus = sorted(comparison.tau for comparison in table)
    errors = sorted(abs(row.start_error) for row in jobs)
    return (sum(row.same_nodes for row in jobs) / len(jobs), taus[len(taus) // 2],
            errors[len(errors) // 2])


def test_the_saved_live_runs_agree_as_docs_slurm_emulation_says(
    saved_table: list[Comparison],
) -> None:
    """Issue 22's table, short: every saved run re-simulated, held to the figures
    docs/slurm-emulation.md publishes (89.2 % identical node sets, tau median 0.978, median
    start error 0.5 s), so a change to the emulation that loses agreement with the real
    slurmctld fails here."""
    assert len(saved_table) == 30
    same_nodes, tau, error = _overall(saved_table)
    assert same_nodes >= 0.89 and tau >= 0.95 and error <= 5.0, (same_nodes, tau, error)


@pytest.mark.xfail(strict=True, reason="issue 22 not met: 89.2 % identical node sets, not 95 "
                   "(docs/slurm-emulation.md 'Every remaining disagreement')")
def test_the_saved_live_runs_meet_issue_22_s_targets(saved_table: list[Comparison]) -> None:
    same_nodes, tau, error = _overall(saved_table)
    assert same_nodes >= 0.95 and tau >= 0.95 and error <= 5.0, (same_nodes, tau, error)


DISPATCH_RUNS = SAVED_RUNS.parent / "replay_live_dispatch"


def test_the_saved_dispatch_runs_meet_issue_22_s_targets() -> None:
    """The 30 runs with the daemon's dispatch = true (5 mini-traces x 3 policies x 2
    schedulers, recorded in session 32 with the shipped bundle and the guard that holds
    what it refuses), re-simulated: with only the daemon starting jobs, Slurm's own start
    after a job's end no longer races the daemon's pins, and the emulation meets issue 22's
    targets (docs/slurm-emulation.md: 99.3 % identical node sets, tau median 1.000, min
    0.987, median start error 0.4 s)."""
    table = [resimulate(path).comparison for path in sorted(DISPATCH_RUNS.glob("*.json"))]
    assert len(table) == 30
    same_nodes, tau, error = _overall(table)
    assert same_nodes >= 0.95 and tau >= 0.95 and error <= 5.0, (same_nodes, tau, error)
    assert min(row.tau for row in table) >= 0.95
