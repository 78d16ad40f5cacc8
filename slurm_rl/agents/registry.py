"""Schedulers by name (``<ordering>+<placement>``, e.g. ``fifo+best-fit``), built from the
policy-name table (:mod:`slurm_rl.agents.names`, which parses and lists them).

Every scheduler built here ranks through the shared ranking step (fairness guard and
``--nice``, :mod:`slurm_rl.fairness`) under the ``rules`` given, the defaults without."""

from __future__ import annotations

from collections.abc import Mapping

from slurm_rl.agents import names
from slurm_rl.agents.base import PlacementContext
from slurm_rl.agents.names import is_learned, takes_fee_weight
from slurm_rl.fairness import RankingRules
from slurm_rl.paths import default_bundle_path
from slurm_rl.scheduler import Scheduler, Walk

# Read from here by callers that predate the table (cli/simulate.py, tests): the names'
# home is slurm_rl.agents.names.
__all__ = ["baseline_names", "is_learned", "make_scheduler", "takes_fee_weight", "with_rules"]


def baseline_names() -> list[str]:
    """Every heuristic ordering with first-fit, FIFO with every heuristic placement, and the
    shipped dual agent (``rl+rl``) when its bundle is present."""
    return names.baseline_names(with_dual_agent=_default_bundle_exists())


def _default_bundle_exists() -> bool:
    return (default_bundle_path() / "meta.json").exists()


def make_scheduler(
    name: str,
    gpu_speed: Mapping[str, float],
    *,
    seed: int = 0,
    walk: Walk = "greedy",
    fee_weight: float | None = None,
    rules: RankingRules | None = None,
) -> Scheduler:
    """The scheduler ``name``; ``fee_weight`` (λ) reaches the placements that take one
    (:func:`~slurm_rl.agents.names.takes_fee_weight`) and is ignored by the others; ``rules``
    are its ranking step's (None: the defaults). A learned name is built from the shipped
    bundle, with the bundle's own walk and λ."""
    policy = names.parse(name)
    if policy.learned:
        # lazy: the learned agents import torch; baselines need none of it
        from slurm_rl.agents.dual.agent import registry_scheduler

        return with_rules(registry_scheduler(name, gpu_speed, seed=seed), rules)
    ordering = policy.ordering.make()
    placement = policy.placement.make(PlacementContext(gpu_speed, seed, fee_weight))
    return Scheduler(ordering, placement, walk=walk, rules=rules)


def with_rules(scheduler: Scheduler, rules: RankingRules | None) -> Scheduler:
    """``scheduler`` ranking under ``rules`` (None: as built). For builders that take no
    rules, such as a bundle's: the step is the scheduler's, not the policy's."""
    if rules is not None:
        scheduler.rules = rules
    return scheduler
