"""What every placement is built from (:class:`PlacementContext`).

The policy roles themselves (``OrderingPolicy``, ``PlacementPolicy`` and the excluding and
migrating placements) live in :mod:`slurm_rl.policy`, below the scheduler. They are
re-exported here only for importers other engineers were editing when they moved
(``slurm_rl/scheduler.py``, ``slurm_rl/reservation.py``, ``slurm_rl/gym_env.py``,
``scripts/headroom.py``): until the first two import :mod:`slurm_rl.policy`, agents and the
scheduler import each other (tests/test_import_layers.py lists them as pending). Delete the
re-exports then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from slurm_rl.policy import (
    ExcludingPlacement,
    MigratingPlacement,
    OrderingPolicy,
    PlacementPolicy,
    Scores,
)

__all__ = ["ExcludingPlacement", "MigratingPlacement", "OrderingPolicy", "PlacementContext",
           "PlacementPolicy", "Scores"]


@dataclass(frozen=True)
class PlacementContext:
    """What any placement is built from, so that one signature builds them all
    (:mod:`slurm_rl.agents.names`): the datasheet-like speed per GPU type, the seed of a
    randomised one, and λ for those that price fees (None: their own default)."""

    gpu_speed: Mapping[str, float]
    seed: int = 0
    fee_weight: float | None = None
