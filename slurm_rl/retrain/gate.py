"""The promotion gate: replay the logged window on the calibrated cluster with the candidate
and with the current policy, and promote only when the candidate's mean job completion time
is lower by at least ``margin`` (a fraction: 0.02 = 2 % better), it leaves no more jobs
unfinished, its fees are at most ``fee_tolerance`` above the current policy's (0.05: 5 %
more; on a public cloud a faster schedule that costs much more is not an improvement), and
its 99th-percentile queue wait is at most ``wait_tolerance`` above the current's plus
``wait_slack_s`` (0.5 and one hour: a lower mean bought by leaving a few jobs waiting for
days is not an improvement either — a learned ordering of this family once did exactly that,
docs/training.md "Session 15").

Both replays see the same jobs, cluster, machine fluctuation and seeds; the mean is taken
over ``seeds`` replays (machine fluctuation differs by seed), so one lucky draw does not
promote a policy. Both replay in the daemon's world (:mod:`.live_world`: its ranking rules,
pace, holds and GPU-type rule), so a policy is judged where it will run.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from slurm_rl.fairness import RankingRules
from slurm_rl.live_policy import make_policy
from slurm_rl.retrain.calibrate import Calibration
from slurm_rl.retrain.live_world import LiveWorld
from slurm_rl.scenario import ReplayResult, Scenario, replay
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.workloads import open_workload


@dataclass(frozen=True)
class PolicyRef:
    """A policy the gate can replay: a name, and a bundle for learned names."""

    name: str
    bundle: Path | None = None
    label: str = ""

    def describe(self) -> str:
        return self.label or (f"{self.name} ({self.bundle})" if self.bundle else self.name)


@dataclass(frozen=True)
class GateSettings:
    margin: float = 0.02
    fee_tolerance: float = 0.05
    wait_tolerance: float = 0.5
    wait_slack_s: float = 3600.0
    seeds: int = 3
    world: LiveWorld = field(default_factory=LiveWorld)  # the daemon's: replays happen there


@dataclass(frozen=True)
class Verdict:
    promote: bool
    candidate_jct_s: float
    current_jct_s: float
    improvement: float  # (current - candidate) / current
    margin: float
    candidate: dict[str, Any]
    current: dict[str, Any]
    fee_tolerance: float = 0.05
    wait_tolerance: float = 0.5
    wait_slack_s: float = 3600.0

    def line(self) -> str:
        word = "better" if self.improvement >= 0 else "worse"
        return (f"candidate mean JCT {self.candidate_jct_s:.1f} s vs current "
                f"{self.current_jct_s:.1f} s ({abs(self.improvement):.1%} {word}; margin "
                f"{self.margin:.1%}), fees {_change(self.fee_change)} (tolerance "
                f"{self.fee_tolerance:.1%}), p99 wait {self._wait('candidate')} vs "
                f"{self._wait('current')} (tolerance {self.wait_tolerance:.0%} + "
                f"{self.wait_slack_s / 3600:g} h): "
                f"{'promote' if self.promote else 'keep the current policy'}")

    def _wait(self, side: str) -> str:
        figures = self.candidate if side == "candidate" else self.current
        return f"{float(figures.get('p99_wait_s', 0.0)) / 3600:.1f} h"

    @property
    def patient(self) -> bool:
        """The candidate's p99 queue wait is within the tolerance of the current's."""
        cand = float(self.candidate.get("p99_wait_s", 0.0))
        cur = float(self.current.get("p99_wait_s", 0.0))
        return cand <= cur * (1.0 + self.wait_tolerance) + self.wait_slack_s

    @property
    def fee_change(self) -> float:
        """(candidate − current) / current fees; 0 when the current policy cost nothing."""
        cur = float(self.current.get("total_fees", 0.0))
        cand = float(self.candidate.get("total_fees", 0.0))
        return (cand - cur) / cur if cur > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"promote": self.promote, "candidate_jct_s": self.candidate_jct_s,
                "current_jct_s": self.current_jct_s, "improvement": self.improvement,
                "margin": self.margin, "fee_change": self.fee_change,
                "fee_tolerance": self.fee_tolerance, "wait_tolerance": self.wait_tolerance,
                "wait_slack_s": self.wait_slack_s, "candidate": self.candidate,
                "current": self.current}


def _change(fraction: float) -> str:
    return f"{fraction:+.1%}"


def replay_metrics(policy: PolicyRef, scenario: Scenario, seeds: int,
                   rules: RankingRules | None = None) -> dict[str, Any]:
    """Mean metrics of ``seeds`` replays of ``policy`` (each with its own scheduler, ranking
    under ``rules``; None: the defaults)."""
    runs = []
    for seed in range(seeds):
        scheduler = make_policy(policy.name, seed=seed, bundle=policy.bundle, rules=rules)
        seeded = replace(scenario, sim=replace(scenario.sim, seed=seed))
        result = replay(seeded, scheduler, policy_id=policy.name)
        runs.append(result)
    return {
        "policy": policy.describe(),
        "avg_jct_s": statistics.mean(r.metrics.avg_jct_s for r in runs),
        "avg_queueing_s": statistics.mean(r.metrics.avg_queueing_s for r in runs),
        "total_fees": statistics.mean(r.metrics.total_fees for r in runs),
        "p99_wait_s": statistics.mean(_p99_wait(r) for r in runs),
        "jobs": runs[0].metrics.jobs,
        "unfinished_jobs": max(r.unfinished_jobs for r in runs),
        "runs": [round(r.metrics.avg_jct_s, 3) for r in runs],
    }


def _p99_wait(result: ReplayResult) -> float:
    waits = [o.start - o.job.submit_time for o in result.outcomes]
    return float(np.percentile(waits, 99)) if waits else 0.0


def logged_scenario(calibration: Calibration, settings: GateSettings) -> Scenario:
    spec = load_cluster_spec(calibration.cluster_spec)
    trace = open_workload(str(calibration.replay_trace))
    return Scenario(spec, trace, settings.world.sim_config())


def judge(candidate: PolicyRef, current: PolicyRef, calibration: Calibration,
          settings: GateSettings) -> Verdict:
    scenario = logged_scenario(calibration, settings)
    ours = replay_metrics(candidate, scenario, settings.seeds, settings.world.rules)
    theirs = replay_metrics(current, scenario, settings.seeds, settings.world.rules)
    cand, cur = float(ours["avg_jct_s"]), float(theirs["avg_jct_s"])
    improvement = (cur - cand) / cur if cur > 0 else 0.0
    finished = ours["unfinished_jobs"] <= theirs["unfinished_jobs"]
    verdict = Verdict(False, cand, cur, improvement, settings.margin, ours, theirs,
                      settings.fee_tolerance, settings.wait_tolerance, settings.wait_slack_s)
    affordable = verdict.fee_change <= settings.fee_tolerance
    faster = cand <= cur * (1.0 - settings.margin) and cand < cur
    promote = finished and affordable and verdict.patient and faster
    return replace(verdict, promote=promote)
