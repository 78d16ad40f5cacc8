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
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from torch import Tensor

from slurm_rl.agents.dual.bundle import LONG_LIMIT_H
from slurm_rl.agents.dual.network import DualNetwork
from slurm_rl.agents.starvation import STARVATION_H
from slurm_rl.fairness import RankingRules
from slurm_rl.objective import cost, hours
from slurm_rl.offered_load import load_points
from slurm_rl.scenario import ReplayResult, Scenario
from slurm_rl.simulator.sim_config import SimConfig
from slurm_rl.traces import window
from slurm_rl.traces.model import parse_window
from slurm_rl.training.evaluate import PolicySpec, replay_replicas
from slurm_rl.training.pool import World, WorldSpec

BASELINE = "qssf+fastest-gpu"

# How a checkpoint replaces the best so far: "mean", by its mean cost ratio over the loads;
# "every-load", only if it is also no worse at any load, so that the warm start is kept unless
# PPO beats it everywhere (a gain at light load never buys a loss under a deep queue).
Selection = Literal["mean", "every-load"]
SELECTIONS: tuple[Selection, ...] = ("mean", "every-load")
# "No worse" allows this much: one replay's cost moves by about that between neighbouring
# checkpoints that rank the light-load queue alike (session 33: PPO 10 was 0.2 % dearer than
# the warm start at 0.7, where the queue is 0.4 h, and 8 % cheaper at 1.6).
EVERY_LOAD_TOLERANCE = 0.01


@dataclass(frozen=True)
class Checkpoint:
    label: str
    state: dict[str, Tensor]
    cost: float  # the mean of ``ratios``
    ratios: tuple[float, ...] = ()  # its cost over the baseline's, at each validation load

    def beats(self, best: Checkpoint | None, selection: Selection) -> bool:
        if best is None:
            return True
        if selection == "every-load" and any(
                mine > theirs * (1.0 + EVERY_LOAD_TOLERANCE)
                for mine, theirs in zip(self.ratios, best.ratios, strict=True)):
            return False
        return self.cost < best.cost


def objective(result: ReplayResult, fee_weight: float) -> float:
    """The whole replay's cost (:func:`slurm_rl.objective.cost`): Σ JCT h + λ · fees."""
    metrics = result.metrics
    return cost(hours(metrics.jobs * metrics.avg_jct_s), metrics.total_fees, fee_weight)


@dataclass
class Validator:
    """Replays the validation window with each checkpoint's weights; keeps the best.

    With ``loads`` the window is replayed once per offered load, its cluster scaled as the
    load sweep scales it (:func:`~slurm_rl.offered_load.load_points`, by the window's own
    load), and a checkpoint's score is the mean over the loads of its cost over the
    baseline's there, so that no load's larger JCTs outweigh the others. With one replay that
    ratio orders checkpoints as the cost itself does. ``selection``: :data:`Selection`."""

    world: WorldSpec
    window_spec: str
    fee_weight: float
    chooser: str
    workers: int
    communicate: bool = True
    loads: tuple[float, ...] = ()
    selection: Selection = "mean"
    starvation_h: float = STARVATION_H  # the age guard the checkpoints rank under (0: off)
    long_limit_h: float = LONG_LIMIT_H  # the chooser's long-job rule's limit
    rows: list[dict[str, Any]] = field(default_factory=list)
    best: Checkpoint | None = None
    _scenarios: list[tuple[float | None, Scenario]] | None = None
    _baselines: list[ReplayResult] | None = None

    def scenarios(self) -> list[tuple[float | None, Scenario]]:
        """(the load or None, the scenario) of each validation replay."""
        if self._scenarios is None:
            loaded = World.load(replace(self.world, loads=()))
            start, end = parse_window(self.window_spec)
            config = SimConfig(mode="slurm", cycle_s=self.world.cycle_s,
                               hold_cap_s=self.world.hold_cap_s)
            base = Scenario(loaded.spec, window(loaded.trace, start, end), config)
            self._scenarios = ([(p.target, p.scenario) for p in load_points(base, self.loads)]
                               if self.loads else [(None, base)])
        return self._scenarios

    def checkpoint(self, network: DualNetwork, label: str,
                   log: Callable[[str], None]) -> Checkpoint:
        """Validates the current weights; returns the best checkpoint so far."""
        state = copy.deepcopy(network.state_dict())
        meta = {"fee_weight": self.fee_weight, "chooser": self.chooser,
                "communicate": self.communicate, "starvation_h": self.starvation_h,
                "long_limit_h": self.long_limit_h}
        rules = RankingRules(dispatch=self.world.dispatch)
        specs = [PolicySpec("dual-agent", weights=state, network=network.config, meta=meta,
                            rules=rules)]
        if self._baselines is None:
            specs.append(PolicySpec(BASELINE, baseline=BASELINE, rules=rules))
        scenarios = self.scenarios()
        results = replay_replicas([s for _, s in scenarios], specs, self.workers)
        if self._baselines is None:
            self._baselines = [per_load[1] for per_load in results]
        ratios = []
        for (load, _), per_load, baseline in zip(scenarios, results, self._baselines,
                                                 strict=True):
            ratios.append(self._record(label, load, per_load[0], baseline, log))
        candidate = Checkpoint(label, state, sum(ratios) / len(ratios), tuple(ratios))
        best = candidate if candidate.beats(self.best, self.selection) else self.best
        assert best is not None  # a candidate always beats no checkpoint
        self.best = best
        return best

    def _record(self, label: str, load: float | None, agent: ReplayResult,
                baseline: ReplayResult, log: Callable[[str], None]) -> float:
        """Logs one replay's row; returns the agent's cost over the baseline's."""
        base = baseline.metrics
        cost, base_cost = objective(agent, self.fee_weight), objective(baseline, self.fee_weight)
        row = {"label": label, "cost": cost, "avg_jct_h": agent.metrics.avg_jct_s / 3600.0,
               "fees": agent.metrics.total_fees, "baseline": BASELINE,
               "baseline_cost": base_cost,
               "baseline_avg_jct_h": base.avg_jct_s / 3600.0, "baseline_fees": base.total_fees}
        if load is not None:
            row["load"] = load
        self.rows.append(row)
        at = "" if load is None else f" at load {load:g}"
        # The jobs and the baseline's queue say whether the window can tell checkpoints
        # apart at all: a window where nothing queues scores every checkpoint alike.
        row["jobs"], row["baseline_avg_queue_h"] = base.jobs, base.avg_queueing_s / 3600.0
        log(f"validation {self.window_spec}{at} ({label}): dual agent avg JCT "
            f"{row['avg_jct_h']:.2f} h, fees {row['fees']:,.0f}; {BASELINE} "
            f"{row['baseline_avg_jct_h']:.2f} h, {row['baseline_fees']:,.0f} "
            f"({base.jobs:,} jobs, its avg queue {row['baseline_avg_queue_h']:.2f} h)")
        return cost / base_cost if base_cost > 0 else cost

    def summary(self) -> list[dict[str, Any]]:
        return list(self.rows)
