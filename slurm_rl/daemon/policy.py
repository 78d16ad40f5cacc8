"""The daemon's policy by name: a baseline from the registry, or the learned agents from a
policy bundle (``policies/default`` unless the config names one).

Learned names: ``rl+rl`` (the dual agent), ``rl-nocomm+rl`` (without the message path),
``rl+<placement>`` (learned ordering, heuristic placement), ``<ordering>+rl`` (heuristic
ordering, learned placement). Loading a bundle imports torch, so it happens only for them.
A bundle that cannot be used raises :class:`PolicyBundleError`; at start-up the daemon then
runs :data:`FALLBACK_POLICY` instead (and says so), on a reload it keeps the running policy.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path

from slurm_rl.agents.registry import ORDERING, make_scheduler, placement_factories, with_rules
from slurm_rl.errors import SlurmRLError, UnknownNameError
from slurm_rl.fairness import RankingRules
from slurm_rl.scheduler import Scheduler

LEARNED_ORDERING = ("rl", "rl-nocomm")
LEARNED_PLACEMENT = "rl"
FALLBACK_POLICY = "qssf+fastest-gpu"
# Orderings that need what only a trace knows: the simulator's reference, never a live policy.
SIMULATOR_ONLY_ORDERINGS = ("sjf-oracle",)


class PolicyBundleError(SlurmRLError):
    """The learned policy's bundle is missing, broken or of another feature schema."""


@functools.cache
def gpu_speeds() -> Mapping[str, float]:
    """Datasheet-like speed per GPU type (fastest-gpu placement); computed once per process."""
    from slurm_rl.simulator.perfmodel import datasheet_gpu_speeds

    return dict(datasheet_gpu_speeds())


def is_learned(name: str) -> bool:
    ordering, _, placement = name.partition("+")
    return ordering in LEARNED_ORDERING or placement == LEARNED_PLACEMENT


def _check_learned_name(name: str) -> None:
    ordering, _, placement = name.partition("+")
    placements = [*placement_factories({}), LEARNED_PLACEMENT]
    if ordering not in (*ORDERING, *LEARNED_ORDERING):
        raise UnknownNameError("ordering policy", ordering, [*ORDERING, *LEARNED_ORDERING])
    if placement not in placements:
        raise UnknownNameError("placement policy", placement, placements)
    if ordering == "rl-nocomm" and placement != LEARNED_PLACEMENT:
        raise UnknownNameError("policy", name, ["rl-nocomm+rl"])


def check_name(name: str) -> None:
    """:class:`UnknownNameError` for a name no live policy has; builds nothing (a config is
    read on every reload, and ``rwgp`` would import torch)."""
    ordering, sep, _ = name.partition("+")
    if ordering in SIMULATOR_ONLY_ORDERINGS:
        raise SlurmRLError(f"{ordering} orders jobs by their true run times, which only a "
                           "trace has (live it would be FIFO); use qssf, multifactor or rl")
    if not sep:
        raise UnknownNameError("policy", name, ["<ordering>+<placement>, e.g. fifo+best-fit"])
    if ordering not in (*ORDERING, *LEARNED_ORDERING):
        live = [o for o in (*ORDERING, *LEARNED_ORDERING) if o not in SIMULATOR_ONLY_ORDERINGS]
        raise UnknownNameError("ordering policy", ordering, live)
    _check_learned_name(name)


def make_policy(name: str, *, seed: int = 0, bundle: Path | None = None,
                rules: RankingRules | None = None) -> Scheduler:
    """The scheduler the daemon runs for ``name`` (a new one, weights read again), ranking
    under ``rules`` (the config's ``ranking_rules``; None: the defaults), whatever the
    policy."""
    if not is_learned(name):
        return make_scheduler(name, gpu_speeds(), seed=seed, rules=rules)
    _check_learned_name(name)
    from slurm_rl.agents.ordering.agent import BundleError, registry_scheduler

    try:
        scheduler = registry_scheduler(name, gpu_speeds(), seed=seed, bundle_path=bundle)
    except BundleError as exc:
        raise PolicyBundleError(str(exc)) from exc
    return with_rules(scheduler, rules)
