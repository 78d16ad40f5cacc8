"""Checkpoint selection on a validation window (tuning data, never the held-out month).

The validation replays the window as the evaluation does — from an empty cluster to the last
job, the deterministic dual agent under the project's scheduler — and scores it with the
training objective over the whole replay, :math:`\\sum_j \\text{JCT}_j/3600 + λ\\,\\text{fees}`.
The best weights so far are kept; a baseline (QSSF + fastest-GPU) replayed once gives the
reference line in the curves.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from slurm_rl.agents.dual.network import DualNetwork
from slurm_rl.fairness import RankingRules
from slurm_rl.objective import cost, hours
from slurm_rl.scenario import ReplayResult, Scenario
from slurm_rl.simulator.engine import SimConfig
from slurm_rl.traces import window
from slurm_rl.traces.model import parse_window
from slurm_rl.training.evaluate import PolicySpec, replay_policies
from slurm_rl.training.pool import World, WorldSpec

BASELINE = "qssf+fastest-gpu"


@dataclass(frozen=True)
class Checkpoint:
    label: str
    state: dict[str, Tensor]
    cost: float


def objective(result: ReplayResult, fee_weight: float) -> float:
    """The whole replay's cost (:func:`slurm_rl.objective.cost`): Σ JCT h + λ · fees."""
    metrics = result.metrics
    return cost(hours(metrics.jobs * metrics.avg_jct_s), metrics.total_fees, fee_weight)


@dataclass
class Validator:
    world: WorldSpec
    window_spec: str
    fee_weight: float
    chooser: str
    workers: int
    communicate: bool = True
    rows: list[dict[str, Any]] = field(default_factory=list)
    best: Checkpoint | None = None
    _scenario: Scenario | None = None
    _baseline: ReplayResult | None = None

    def scenario(self) -> Scenario:
        if self._scenario is None:
            loaded = World.load(self.world)
            start, end = parse_window(self.window_spec)
            config = SimConfig(mode="slurm", cycle_s=self.world.cycle_s,
                               hold_cap_s=self.world.hold_cap_s)
            self._scenario = Scenario(loaded.spec, window(loaded.trace, start, end), config)
        return self._scenario

    def checkpoint(self, network: DualNetwork, label: str,
                   log: Callable[[str], None]) -> Checkpoint:
        """Validates the current weights; returns the best checkpoint so far."""
        state = copy.deepcopy(network.state_dict())
        meta = {"fee_weight": self.fee_weight, "chooser": self.chooser,
                "communicate": self.communicate}
        rules = RankingRules(dispatch=self.world.dispatch)
        specs = [PolicySpec("dual-agent", weights=state, network=network.config, meta=meta,
                            rules=rules)]
        if self._baseline is None:
            specs.append(PolicySpec(BASELINE, baseline=BASELINE, rules=rules))
        results = replay_policies(self.scenario(), specs, self.workers)
        if self._baseline is None:
            self._baseline = results[1]
        cost = objective(results[0], self.fee_weight)
        self._record(label, results[0], cost, log)
        if self.best is None or cost < self.best.cost:
            self.best = Checkpoint(label, state, cost)
        return self.best

    def _record(self, label: str, agent: ReplayResult, cost: float,
                log: Callable[[str], None]) -> None:
        assert self._baseline is not None
        base = self._baseline.metrics
        row = {"label": label, "cost": cost, "avg_jct_h": agent.metrics.avg_jct_s / 3600.0,
               "fees": agent.metrics.total_fees, "baseline": BASELINE,
               "baseline_cost": objective(self._baseline, self.fee_weight),
               "baseline_avg_jct_h": base.avg_jct_s / 3600.0, "baseline_fees": base.total_fees}
        self.rows.append(row)
        log(f"validation {self.window_spec} ({label}): dual agent avg JCT "
            f"{row['avg_jct_h']:.2f} h, fees {row['fees']:,.0f}; {BASELINE} "
            f"{row['baseline_avg_jct_h']:.2f} h, {row['baseline_fees']:,.0f}")

    def summary(self) -> list[dict[str, Any]]:
        return list(self.rows)
