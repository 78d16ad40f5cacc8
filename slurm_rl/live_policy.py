"""The live policy by name, as the daemon, ``slurm-rl selftest`` and the retrain gate build it:
a baseline from the registry, or the learned agents from a policy bundle (``policies/default``
unless the config names one). Below the daemon, ops and retrain, which all build it.

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

from slurm_rl.agents.names import is_learned, parse
from slurm_rl.agents.registry import make_scheduler, with_rules
from slurm_rl.errors import SlurmRLError
from slurm_rl.fairness import RankingRules
from slurm_rl.scheduler import Scheduler
from slurm_rl.simulator.perfmodel import datasheet_gpu_speeds

__all__ = ["FALLBACK_POLICY", "PolicyBundleError", "check_name", "gpu_speeds", "is_learned",
           "make_policy"]

FALLBACK_POLICY = "qssf+fastest-gpu"


class PolicyBundleError(SlurmRLError):
    """The learned policy's bundle is missing, broken or of another feature schema."""


@functools.cache
def gpu_speeds() -> Mapping[str, float]:
    """Datasheet-like speed per GPU type (fastest-gpu placement); computed once per process."""
    return dict(datasheet_gpu_speeds())


def check_name(name: str) -> None:
    """:class:`~slurm_rl.errors.UnknownNameError` for a name no live policy has (an oracle
    ordering is refused too); builds nothing (a config is read on every reload, and ``rwgp``
    would import torch)."""
    parse(name, live=True)


def make_policy(name: str, *, seed: int = 0, bundle: Path | None = None,
                rules: RankingRules | None = None) -> Scheduler:
    """The scheduler the daemon runs for ``name`` (a new one, weights read again), ranking
    under ``rules`` (the config's ``ranking_rules``; None: the defaults), whatever the
    policy."""
    if not is_learned(name):
        return make_scheduler(name, gpu_speeds(), seed=seed, rules=rules)
    from slurm_rl.agents.dual.agent import registry_scheduler  # lazy: imports torch
    from slurm_rl.agents.dual.bundle import BundleError

    try:
        scheduler = registry_scheduler(name, gpu_speeds(), seed=seed, bundle_path=bundle)
    except BundleError as exc:
        raise PolicyBundleError(str(exc)) from exc
    return with_rules(scheduler, rules)


def dispatch_mismatch(name: str, bundle: Path | None, dispatch: bool) -> str | None:
    """One line when a learned policy's bundle was trained in the other dispatch mode than
    the daemon runs: with dispatch only the policy starts jobs, without it Slurm starts the
    released ones by its own priority between cycles, and a policy meets in the one world
    queues it never saw in the other (docs/daemon.md, "Dispatch"). None when they agree, for
    a baseline, or when the bundle does not say (an unreadable one is make_policy's to
    report)."""
    if not is_learned(name):
        return None
    from slurm_rl.agents.dual.bundle import BundleError, trained_dispatch
    from slurm_rl.paths import default_bundle_path

    path = bundle or default_bundle_path()
    try:
        trained = trained_dispatch(path)
    except BundleError:
        return None
    if trained is None or trained == dispatch:
        return None
    return (f"policy bundle {path} was trained with dispatch {'on' if trained else 'off'}; "
            f"this daemon runs with dispatch = {str(dispatch).lower()}, a world the policy "
            f"never trained in (set dispatch = {str(trained).lower()})")
