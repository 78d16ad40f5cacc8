"""The learned ordering agent and the ready schedulers built from a policy bundle.

Bundles themselves (save, load, the schema and settings checks) are :mod:`.bundle`'s.
Our design throughout; docs/ordering-agent.md describes it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from slurm_rl.agents.base import PlacementContext
from slurm_rl.agents.dual.bundle import (
    CHOOSERS,
    LONG_LIMIT_H,
    Bundle,
    BundleError,
    load_bundle,
)
from slurm_rl.agents.dual.candidates import CANDIDATE_FEATURES, CandidateGenerator
from slurm_rl.agents.dual.features import (
    CLUSTER_FEATURES,
    JOB_FEATURES,
    FeatureBuilder,
    FloatArray,
)
from slurm_rl.agents.dual.messages import MESSAGE_FEATURES, BoolArray, Messenger
from slurm_rl.agents.dual.network import NetworkConfig, OrderingNetwork
from slurm_rl.agents.dual.placement import LearnedPlacement
from slurm_rl.agents.names import naming_help, parse
from slurm_rl.agents.ordering_baselines import Qssf
from slurm_rl.agents.placement_baselines import BestFit, FastestGpuFirst
from slurm_rl.agents.rwgp.placement import PlacementConfig, RwgpPlacement
from slurm_rl.agents.starvation import STARVATION_S, promote_starved
from slurm_rl.core import ClusterSnapshot
from slurm_rl.errors import UnknownNameError
from slurm_rl.paths import default_bundle_path
from slurm_rl.policy import OrderingPolicy, PlacementPolicy, Scores
from slurm_rl.scheduler import Scheduler

Variant = Literal["dual", "ordering-only", "placement-only", "no-communication"]
VARIANTS: tuple[Variant, ...] = ("dual", "ordering-only", "placement-only", "no-communication")


def network_config(hidden: int = 64, pace_sharpness: float = 0.0,
                   prior: str = "pace", ordering_sharpness: float = 0.0) -> NetworkConfig:
    return NetworkConfig(len(JOB_FEATURES), len(CLUSTER_FEATURES), len(MESSAGE_FEATURES),
                         len(CANDIDATE_FEATURES), hidden, pace_sharpness, prior,
                         ordering_sharpness)


# ----- the ordering agent ----------------------------------------------------------------


@dataclass(frozen=True)
class Observation:
    """One snapshot as the ordering actor and the critic see it; rows follow ``pending``."""

    jobs: FloatArray
    messages: FloatArray
    cluster: FloatArray
    valid: BoolArray  # the job can start now (the placement agent found a node set)


def masked_scores(raw: FloatArray, valid: BoolArray) -> FloatArray:
    """Scores that rank every job that can start before every job that cannot, keeping the
    network's order inside each group (Slurm still sees the masked jobs' order: the first of
    them gets backfill's reservation)."""
    if not len(raw):
        return raw
    shift = float(raw.max() - raw.min()) + 1.0
    return np.where(valid, raw, raw - shift)


class OrderingAgent:
    """The learned :class:`~slurm_rl.policy.OrderingPolicy` (docs/ordering-agent.md)."""

    def __init__(self, network: OrderingNetwork, builder: FeatureBuilder,
                 messenger: Messenger, name: str = "rl",
                 starvation_s: float | None = STARVATION_S) -> None:
        self.network = network
        self.builder = builder
        self.messenger = messenger
        self.name = name
        self.starvation_s = starvation_s

    def observe(self, snapshot: ClusterSnapshot) -> None:
        self.builder.observe(snapshot)

    def observation(self, snapshot: ClusterSnapshot) -> Observation:
        encoded = self.builder.encode(snapshot)
        messages, valid = self.messenger.messages(encoded)
        return Observation(encoded.jobs, messages, encoded.cluster, valid)

    def raw_scores(self, observation: Observation) -> FloatArray:
        """The network's score per job (no mask)."""
        with torch.no_grad():
            scores = self.network(
                torch.from_numpy(observation.jobs).float().unsqueeze(0),
                torch.from_numpy(observation.messages).float().unsqueeze(0),
                torch.from_numpy(observation.cluster).float().unsqueeze(0),
                torch.ones(1, len(observation.jobs), dtype=torch.bool),
            )[0]
        out: FloatArray = scores.double().numpy()
        return out

    def score(self, snapshot: ClusterSnapshot) -> Scores:
        if not snapshot.pending:
            return np.zeros(0)
        observation = self.observation(snapshot)
        scores = masked_scores(self.raw_scores(observation), observation.valid)
        waits = np.array([snapshot.time - job.submit_time for job in snapshot.pending])
        return promote_starved(scores, waits, self.starvation_s)


# ----- schedulers from a bundle ------------------------------------------------------------


# How long ``rwgp-patient`` keeps a gang off slow nodes, and ``rwgp-long-patient`` a long job:
# one untuned value (session 39)
PATIENCE_S = 3600.0
# How deep the long jobs' queue may get (hours of the whole cluster's GPUs) before
# ``rwgp-long-queue`` lets them onto slow nodes: (1/ρ − 1) × the long limit, the least run
# time a long job loses on a node under ρ = ¼ of the best pace (3 × 24 h); one untuned value,
# written down before any replay of it (session 48)
QUEUE_H = 72.0
# Each RWGP chooser's exclusion rules (slurm_rl/agents/rwgp/exclusions.py); λ is the bundle's
_RWGP_EXCLUSIONS: dict[str, PlacementConfig] = {
    "rwgp": PlacementConfig(exclusion_ratio=0.0),
    "rwgp-excluding": PlacementConfig(),
    "rwgp-patient": PlacementConfig(exclusion_patience_s=PATIENCE_S),
    # with the long-job rule (its limit: the bundle's long_limit_h)
    "rwgp-excluding-long": PlacementConfig(exclusion_min_limit_s=LONG_LIMIT_H * 3600),
    # the long-job rule alone (an ablation of rwgp-excluding-long: no gang is kept off for its size)
    "rwgp-long": PlacementConfig(exclusion_spanning=False, exclusion_min_gpus=None,
                                 exclusion_min_limit_s=LONG_LIMIT_H * 3600),
    # the long-job rule until the job has waited PATIENCE_S: without the simulator's pace
    # readings rwgp-long kept hundreds of long jobs waiting for fast nodes for weeks under
    # shortest-limit-first (session 46)
    "rwgp-long-patient": PlacementConfig(exclusion_spanning=False, exclusion_min_gpus=None,
                                         exclusion_min_limit_s=LONG_LIMIT_H * 3600,
                                         exclusion_patience_s=PATIENCE_S),
    # the long-job rule while the long jobs' queue is shallow: in a deep one the fast nodes'
    # queue starts sooner for every long job that leaves it (session 48)
    "rwgp-long-queue": PlacementConfig(exclusion_spanning=False, exclusion_min_gpus=None,
                                       exclusion_min_limit_s=LONG_LIMIT_H * 3600,
                                       exclusion_queue_h=QUEUE_H),
    # and only while no shorter job waits: a long job takes a slow node nothing shorter is
    # waiting for (session 49; rwgp-long-queue's released long jobs took the short jobs' nodes)
    "rwgp-long-lull": PlacementConfig(exclusion_spanning=False, exclusion_min_gpus=None,
                                      exclusion_min_limit_s=LONG_LIMIT_H * 3600,
                                      exclusion_queue_h=QUEUE_H, exclusion_queue_lull=True),
}


def make_chooser(name: str, gpu_speed: Mapping[str, float], fee_weight: float,
                 hyperparameters: Mapping[str, Any] | None = None,
                 long_limit_s: float = LONG_LIMIT_H * 3600) -> PlacementPolicy:
    """The node-set chooser inside the placement agent (:data:`CHOOSERS`): the RWGP (starting
    from a retrained bundle's refit hyperparameters when it has them), or best-fit.
    ``long_limit_s``: where a chooser keeps long jobs off slow nodes, from that limit."""
    exclusions = _RWGP_EXCLUSIONS.get(name)
    if exclusions is not None:
        config = replace(exclusions, fee_weight=fee_weight)
        if config.exclusion_min_limit_s is not None:
            config = replace(config, exclusion_min_limit_s=long_limit_s)
        return RwgpPlacement(gpu_speed, config, hyperparameters=hyperparameters)
    if name == "best-fit":
        return BestFit()
    raise BundleError(f"unknown node-set chooser {name!r}; known: {', '.join(CHOOSERS)}")


def learned_placement(bundle: Bundle, gpu_speed: Mapping[str, float],
                      builder: FeatureBuilder) -> LearnedPlacement:
    chooser = make_chooser(bundle.chooser, gpu_speed, bundle.fee_weight, bundle.placement_gp,
                           bundle.long_limit_s)
    return LearnedPlacement(bundle.network.placement, builder,
                            CandidateGenerator(chooser, builder))


def build_scheduler(
    bundle: Bundle,
    gpu_speed: Mapping[str, float],
    *,
    variant: Variant = "dual",
    baseline_placement: PlacementPolicy | None = None,
    baseline_ordering: OrderingPolicy | None = None,
    max_ranked: int = 500,
    threads: int | None = 1,
) -> Scheduler:
    """A scheduler from a bundle. ``ordering-only``: the learned ordering with a heuristic
    placement (``baseline_placement``, default fastest-GPU first), whose own placement is its
    message; ``placement-only``: a heuristic ordering (default QSSF) with the learned
    placement; ``no-communication``: the dual agent with the message path cut."""
    if threads:
        torch.set_num_threads(threads)
    builder = FeatureBuilder(gpu_speed)
    if variant == "placement-only":
        ordering = baseline_ordering or Qssf()
        return Scheduler(ordering, learned_placement(bundle, gpu_speed, builder),
                         max_ranked=max_ranked)
    network = bundle.network
    if variant == "no-communication" or not bundle.meta.get("communicate", True):
        network = copy.deepcopy(network)
        network.ordering.communicate = False
    if variant == "ordering-only":
        placement: PlacementPolicy = baseline_placement or FastestGpuFirst(gpu_speed)
        messenger = Messenger(CandidateGenerator(placement, builder, per_type=False), None)
    else:
        chooser = make_chooser(bundle.chooser, gpu_speed, bundle.fee_weight, bundle.placement_gp,
                               bundle.long_limit_s)
        learned = LearnedPlacement(network.placement, builder,
                                   CandidateGenerator(chooser, builder))
        placement, messenger = learned, learned.messenger
    agent = OrderingAgent(network.ordering, builder, messenger, _agent_name(variant),
                          bundle.starvation_s)
    return Scheduler(agent, placement, max_ranked=max_ranked)


def _agent_name(variant: Variant) -> str:
    return "rl-nocomm" if variant == "no-communication" else "rl"


def registry_scheduler(
    name: str, gpu_speed: Mapping[str, float], *, seed: int = 0, bundle_path: Path | None = None
) -> Scheduler:
    """Learned names (:mod:`slurm_rl.agents.names`) with the shipped bundle: ``rl+rl`` (the
    dual agent), ``rl-nocomm+rl``, ``rl+<placement>`` (learned ordering, heuristic placement)
    and ``<ordering>+rl`` (heuristic ordering, learned placement)."""
    policy = parse(name)
    if not policy.learned:
        raise UnknownNameError("learned policy", name, [naming_help()])
    bundle = load_bundle(bundle_path or default_bundle_path())
    ordering, placement = policy.ordering, policy.placement
    if ordering.learned and placement.learned:
        variant: Variant = "dual" if ordering.communicates else "no-communication"
        return build_scheduler(bundle, gpu_speed, variant=variant)
    if ordering.learned:
        return build_scheduler(bundle, gpu_speed, variant="ordering-only",
                               baseline_placement=placement.make(PlacementContext(gpu_speed, seed)))
    return build_scheduler(bundle, gpu_speed, variant="placement-only",
                           baseline_ordering=ordering.make())
