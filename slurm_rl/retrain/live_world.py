"""The world a daemon runs its policy in, as a retrain plays it: the fine-tuning episodes and
the gate's replays both happen there, so a candidate is trained and judged where it will act.

A policy meets other queues under other rules: with ``dispatch = true`` only it starts jobs,
until a hold reaches ``defer_cap_s``; the fairness guard and ``--nice`` re-rank what it
ranks; an untyped gang stays on one GPU type unless ``allow_mixed_gpu_types``. On the
tests' logged window fifo+best-fit's mean JCT is 6,375 s without dispatch and 5,678 s with
it and a 2-hour hold cap (at the default 600 s cap, holds end before the queue drains and
the figures are as without dispatch).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from slurm_rl.config import DaemonConfig
from slurm_rl.fairness import RankingRules
from slurm_rl.simulator.engine import SimConfig

if TYPE_CHECKING:
    from slurm_rl.training.pool import WorldSpec

_DAEMON = DaemonConfig.model_fields  # the defaults below are the daemon's


@dataclass(frozen=True)
class LiveWorld:
    """A daemon's settings that shape the world (:meth:`of`)."""

    rules: RankingRules = field(default_factory=RankingRules)
    cycle_s: float = float(_DAEMON["interval_s"].default)  # decisions as often as live
    defer_window_s: float = float(_DAEMON["defer_window_s"].default)
    hold_cap_s: float = float(_DAEMON["defer_cap_s"].default)
    one_gpu_type: bool = not _DAEMON["allow_mixed_gpu_types"].default

    @classmethod
    def of(cls, config: DaemonConfig, cycle_s: float | None = None,
           defer_window_s: float | None = None) -> LiveWorld:
        """The world of a daemon run with ``config`` (its ranking rules, interval, deferral
        window, ``defer_cap_s`` and ``allow_mixed_gpu_types``); a replay may decide at
        another pace or deferral window (``slurm-rl retrain --cycle``, ``--defer-window``)."""
        return cls(config.ranking_rules,
                   config.interval_s if cycle_s is None else cycle_s,
                   config.defer_window_s if defer_window_s is None else defer_window_s,
                   config.defer_cap_s, not config.allow_mixed_gpu_types)

    def sim_config(self) -> SimConfig:
        """The gate's replays: Slurm mode at the daemon's pace, holds and type rule."""
        return SimConfig(mode="slurm", cycle_s=self.cycle_s, defer_window_s=self.defer_window_s,
                         hold_cap_s=self.hold_cap_s, one_gpu_type=self.one_gpu_type)

    def world_spec(self, trace: str, cluster: str) -> WorldSpec:
        """The fine-tuning episodes' world, the same as :meth:`sim_config`'s."""
        from slurm_rl.training.pool import WorldSpec  # lazy: imports torch

        return WorldSpec(trace, cluster, cycle_s=self.cycle_s, dispatch=self.rules.dispatch,
                         hold_cap=self.hold_cap_s, defer_window_s=self.defer_window_s,
                         one_gpu_type=self.one_gpu_type)

    def describe(self) -> dict[str, object]:
        """For a candidate's meta.json: the world it was fine-tuned in."""
        return {**asdict(self.rules), "cycle_s": self.cycle_s,
                "defer_window_s": self.defer_window_s, "hold_cap_s": self.hold_cap_s,
                "one_gpu_type": self.one_gpu_type}
