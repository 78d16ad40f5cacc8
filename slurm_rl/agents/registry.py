"""Policies by name. A scheduler is named ``<ordering>+<placement>``, e.g. ``fifo+best-fit``.

Every scheduler built here ranks through the shared ranking step (fairness guard and
``--nice``, :mod:`slurm_rl.fairness`) under the ``rules`` given, the defaults without."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from slurm_rl.agents.base import OrderingPolicy, PlacementPolicy
from slurm_rl.agents.ordering_baselines import Fifo, Multifactor, Qssf, SjfOracle
from slurm_rl.agents.placement_baselines import (
    BestFit,
    CheapestGpuFirst,
    FastestGpuFirst,
    FirstFit,
    RandomFit,
)
from slurm_rl.errors import UnknownNameError
from slurm_rl.fairness import RankingRules
from slurm_rl.paths import shipped
from slurm_rl.scheduler import Scheduler, Walk

ORDERING: dict[str, Callable[[], OrderingPolicy]] = {
    "fifo": Fifo,
    "sjf-oracle": SjfOracle,
    "qssf": Qssf,
    "multifactor": Multifactor,
}

#: Ordering policies a real cluster could run (no oracle knowledge).
REALISABLE_ORDERING = ("fifo", "qssf", "multifactor")


#: Placements whose score takes the fee weight λ (the reward's ``−(JCT h + λ·fees)``, per $).
FEE_WEIGHTED_PLACEMENTS = ("rwgp",)


def placement_factories(
    gpu_speed: Mapping[str, float], seed: int = 0, fee_weight: float | None = None
) -> dict[str, Callable[[], PlacementPolicy]]:
    """Placement constructors by name; ``fee_weight`` (λ) goes to the placements in
    :data:`FEE_WEIGHTED_PLACEMENTS`, ``None`` keeping their own default."""
    return {
        "first-fit": FirstFit,
        "best-fit": BestFit,
        "random": lambda: RandomFit(seed),
        "fastest-gpu": lambda: FastestGpuFirst(gpu_speed),
        "cheapest-gpu": CheapestGpuFirst,
        "rwgp": lambda: _rwgp(gpu_speed, fee_weight),
    }


def _rwgp(gpu_speed: Mapping[str, float], fee_weight: float | None) -> PlacementPolicy:
    """The learned placement agent; imported on use (it pulls in torch and gpytorch)."""
    from slurm_rl.agents.rwgp.placement import PlacementConfig, RwgpPlacement

    if fee_weight is None:
        return RwgpPlacement(gpu_speed)
    return RwgpPlacement(gpu_speed, PlacementConfig(fee_weight=fee_weight))


#: Learned ordering names: the dual agent's bundle (``rl``) and its no-communication ablation.
LEARNED_ORDERING = ("rl", "rl-nocomm")


def baseline_names() -> list[str]:
    """Every ordering with first-fit, FIFO with every placement, and the shipped dual agent
    (``rl+rl``) when its bundle is present."""
    placements = ["first-fit", "best-fit", "random", "fastest-gpu", "cheapest-gpu"]
    names = [f"{o}+first-fit" for o in ORDERING]
    names += [f"fifo+{p}" for p in placements if p != "first-fit"]
    return names + (["rl+rl"] if _default_bundle_exists() else [])


def _default_bundle_exists() -> bool:
    return (shipped("policies/default") / "meta.json").exists()


def is_learned(name: str) -> bool:
    """True for names served by the shipped bundle (``rl+rl``, ``rl+<placement>``,
    ``<ordering>+rl``): they use the fee weight the bundle was trained with."""
    ordering_name, sep, placement_name = name.partition("+")
    return bool(sep) and (ordering_name in LEARNED_ORDERING or placement_name == "rl")


def takes_fee_weight(name: str) -> bool:
    """True when ``make_scheduler(name, …, fee_weight=λ)`` puts λ to use."""
    return not is_learned(name) and name.partition("+")[2] in FEE_WEIGHTED_PLACEMENTS


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
    (:func:`takes_fee_weight`) and is ignored by the others; ``rules`` are its ranking
    step's (None: the defaults)."""
    ordering_name, sep, placement_name = name.partition("+")
    if is_learned(name):
        from slurm_rl.agents.ordering.agent import registry_scheduler

        return with_rules(registry_scheduler(name, gpu_speed, seed=seed), rules)
    placements = placement_factories(gpu_speed, seed, fee_weight)
    if not sep:
        raise UnknownNameError("policy", name, [f"{o}+{p}" for o in ORDERING for p in placements])
    if ordering_name not in ORDERING:
        raise UnknownNameError("ordering policy", ordering_name, list(ORDERING))
    if placement_name not in placements:
        raise UnknownNameError("placement policy", placement_name, list(placements))
    return Scheduler(ORDERING[ordering_name](), placements[placement_name](), walk=walk,
                     rules=rules)


def with_rules(scheduler: Scheduler, rules: RankingRules | None) -> Scheduler:
    """``scheduler`` ranking under ``rules`` (None: as built). For builders that take no
    rules, such as a bundle's: the step is the scheduler's, not the policy's."""
    if rules is not None:
        scheduler.rules = rules
    return scheduler
