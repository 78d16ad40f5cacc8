"""The world a daemon runs its policy in, as a retrain plays it: the fine-tuning episodes and
the gate's replays both happen there, so a candidate is trained and judged where it will act.

A policy meets other queues under other rules: with ``dispatch = true`` only it starts jobs,
until a hold reaches ``defer_cap_s``; the fairness guard and ``--nice`` re-rank what it
ranks; an untyped gang stays on one GPU type unless ``allow_mixed_gpu_types``; its priority
changes are held back by the actuator's limits (``priority_tolerance_ranks``,
``priority_updates_per_job_hour``, ``priority_updates_per_cycle``, from ``priority_floor``
up); its moves of running jobs happen only with ``migrate``, at most
``max_migrations_per_cycle`` a cycle. A candidate whose gain came from moves the daemon would
not send, or from priority changes its limits would hold back, is judged without them.

On the tests' logged window (tests/retrain/test_gate_and_retrain.py) fifo+best-fit's mean JCT
is 4,530 s without dispatch and 5,678 s with it and a 2-hour hold cap (at the default 600 s
cap, holds end before the queue drains and the figures are as without dispatch); the shipped
agent and a damaged copy of it, 3,334 and 6,292 s with dispatch, but 4,398 and 4,597 s
without it: under the daemon's hourly limit on priority changes little of a ranking reaches
Slurm without dispatch (with no limits, 4,729 and 6,572 s).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from slurm_rl.config import DaemonConfig
from slurm_rl.fairness import RankingRules
from slurm_rl.simulator.sim_config import SimConfig
from slurm_rl.slurm.plan import ActuatorConfig
from slurm_rl.slurm.priority import HeldPriorities, PriorityLimits

if TYPE_CHECKING:
    from slurm_rl.training.pool import WorldSpec

_DAEMON = DaemonConfig.model_fields  # the defaults below are the daemon's
_ACTUATOR = DaemonConfig().actuator_config


def _moves_per_cycle(actuator: ActuatorConfig) -> int:
    """The moves of running jobs the actuator sends a cycle: none without ``migrate``."""
    return actuator.max_migrations if actuator.migrate else 0


@dataclass(frozen=True)
class LiveWorld:
    """A daemon's settings that shape the world (:meth:`of`)."""

    rules: RankingRules = field(default_factory=RankingRules)
    cycle_s: float = float(_DAEMON["interval_s"].default)  # decisions as often as live
    defer_window_s: float = float(_DAEMON["defer_window_s"].default)
    hold_cap_s: float = float(_DAEMON["defer_cap_s"].default)
    one_gpu_type: bool = not _DAEMON["allow_mixed_gpu_types"].default
    priority_limits: PriorityLimits = _ACTUATOR.priority_limits
    priority_floor: int = _ACTUATOR.priority_floor
    migrations_per_cycle: int = _moves_per_cycle(_ACTUATOR)

    @classmethod
    def of(cls, config: DaemonConfig, cycle_s: float | None = None,
           defer_window_s: float | None = None) -> LiveWorld:
        """The world of a daemon run with ``config`` (its ranking rules, interval, deferral
        window, ``defer_cap_s``, ``allow_mixed_gpu_types``, its actuator's limits on priority
        changes and on moves); a replay may decide at another pace or deferral window
        (``slurm-rl retrain --cycle``, ``--defer-window``)."""
        actuator = config.actuator_config
        return cls(config.ranking_rules,
                   config.interval_s if cycle_s is None else cycle_s,
                   config.defer_window_s if defer_window_s is None else defer_window_s,
                   config.defer_cap_s, not config.allow_mixed_gpu_types,
                   actuator.priority_limits, actuator.priority_floor,
                   _moves_per_cycle(actuator))

    def held_priorities(self) -> partial[HeldPriorities]:
        """What makes, for each replay, a fresh holder of the priorities the daemon's actuator
        leaves in Slurm (a ``partial``: the training pool's worker processes receive it
        pickled)."""
        return partial(HeldPriorities, self.priority_limits, self.priority_floor)

    def sim_config(self) -> SimConfig:
        """The gate's replays: Slurm mode at the daemon's pace, holds, type rule and limits."""
        return SimConfig(mode="slurm", cycle_s=self.cycle_s, defer_window_s=self.defer_window_s,
                         hold_cap_s=self.hold_cap_s, one_gpu_type=self.one_gpu_type,
                         held_priorities=self.held_priorities(),
                         migrations_per_cycle=self.migrations_per_cycle)

    def world_spec(self, trace: str, cluster: str) -> WorldSpec:
        """The fine-tuning episodes' world, the same as :meth:`sim_config`'s."""
        from slurm_rl.training.pool import WorldSpec  # lazy: imports torch

        return WorldSpec(trace, cluster, cycle_s=self.cycle_s, dispatch=self.rules.dispatch,
                         hold_cap=self.hold_cap_s, defer_window_s=self.defer_window_s,
                         one_gpu_type=self.one_gpu_type, held_priorities=self.held_priorities(),
                         migrations_per_cycle=self.migrations_per_cycle)

    def describe(self) -> dict[str, object]:
        """For a candidate's meta.json: the world it was fine-tuned in."""
        return {**asdict(self.rules), "cycle_s": self.cycle_s,
                "defer_window_s": self.defer_window_s, "hold_cap_s": self.hold_cap_s,
                "one_gpu_type": self.one_gpu_type,
                "priority_limits": asdict(self.priority_limits),
                "priority_floor": self.priority_floor,
                "migrations_per_cycle": self.migrations_per_cycle}
