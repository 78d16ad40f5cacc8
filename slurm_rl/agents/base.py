"""What every placement is built from (:class:`PlacementContext`); the policy roles it fills
are :mod:`slurm_rl.policy`'s."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class PlacementContext:
    """What any placement is built from, so that one signature builds them all
    (:mod:`slurm_rl.agents.names`): the datasheet-like speed per GPU type, the seed of a
    randomised one, and λ for those that price fees (None: their own default)."""

    gpu_speed: Mapping[str, float]
    seed: int = 0
    fee_weight: float | None = None
