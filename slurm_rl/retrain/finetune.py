"""Fine-tuning the dual agent on the calibrated scenario: a few PPO iterations (the update of
``slurm-rl train``) starting from the base bundle's weights, at a lower learning rate, so the
candidate moves towards the logged workload without forgetting what it knew."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from slurm_rl import __version__
from slurm_rl.agents.dual.bundle import (
    INHERITED_META,
    PLACEMENT_GP,
    Bundle,
    load_bundle,
    save_bundle,
)
from slurm_rl.retrain.calibrate import Calibration
from slurm_rl.retrain.live_world import LiveWorld
from slurm_rl.training.actors import RolloutConfig
from slurm_rl.training.objectives import ReturnScaler
from slurm_rl.training.pool import RolloutPool
from slurm_rl.training.ppo import Args, _rewards, ppo_update
from slurm_rl.training.rollout import EpisodeSpec


@dataclass(frozen=True)
class FinetuneSettings:
    iterations: int = 10  # PPO iterations (production default; tests use 1)
    episodes_per_iteration: int = 4
    learning_rate: float = 2e-4
    update_epochs: int = 4
    workers: int = 1
    seed: int = 0
    world: LiveWorld = field(default_factory=LiveWorld)  # the daemon's: episodes happen there


def episode_specs(calibration: Calibration, count: int, seed: int,
                  iteration: int) -> list[EpisodeSpec]:
    """Episodes over the training trace's spans (one span each, drawn with replacement); the
    first tenth of a span is the heuristic's warm-up."""
    rng = np.random.default_rng(seed * 1_009 + iteration)
    specs = []
    for k in range(count):
        first = calibration.origin + calibration.span_s * int(rng.integers(calibration.repeats))
        specs.append(EpisodeSpec(warmup_start=first, start=first + 0.1 * calibration.span_s,
                                 end=first + calibration.span_s,
                                 seed=seed * 1_000_003 + iteration * 1_009 + k))
    return specs


def rollout_config(bundle: Bundle, settings: FinetuneSettings,
                   placement_gp: Mapping[str, Any] | None = None) -> RolloutConfig:
    """The rollouts act as the candidate will once deployed: the bundle's λ, chooser (from
    the GP hyperparameters the candidate ships with), message, age guard and long-job limit,
    ranking under the daemon's rules (dispatch included)."""
    args = Args()
    return RolloutConfig(bundle.fee_weight, bundle.chooser, "sample", args.max_jobs,
                         args.rank_k, communicate=bool(bundle.meta.get("communicate", True)),
                         starvation_s=bundle.starvation_s, rules=settings.world.rules,
                         long_limit_s=bundle.long_limit_s, placement_gp=placement_gp)


def finetune(base: Path, calibration: Calibration, output: Path,
             settings: FinetuneSettings, extra_meta: dict[str, Any],
             placement_gp: dict[str, Any] | None = None) -> tuple[Path, dict[str, Any]]:
    """Writes the candidate bundle to ``output`` (with the placement GP's refit
    hyperparameters, when given: its chooser starts from them); returns it and the
    training curve."""
    started = time.perf_counter()
    torch.manual_seed(settings.seed)
    bundle = load_bundle(base)
    network = bundle.network
    network.train()
    args = replace(Args(), learning_rate=settings.learning_rate,
                   update_epochs=settings.update_epochs, seed=settings.seed,
                   fee_weight=bundle.fee_weight, chooser=bundle.chooser)
    optimizer = torch.optim.Adam(network.parameters(), lr=settings.learning_rate, eps=1e-5)
    scaler = ReturnScaler(args.gamma)
    rollout = rollout_config(bundle, settings, placement_gp)
    world = settings.world.world_spec(str(calibration.training_trace),
                                      str(calibration.cluster_spec))
    rng = np.random.default_rng(settings.seed)
    curve: list[dict[str, float]] = []
    with RolloutPool(world, settings.workers) as pool:
        for iteration in range(1, settings.iterations + 1):
            specs = episode_specs(calibration, settings.episodes_per_iteration, settings.seed,
                                  iteration)
            episodes = pool.collect(network, rollout, specs)
            scaler.update([_rewards(e) for e in episodes])
            if not any(e.steps for e in episodes):
                continue  # nothing queued in these spans: nothing to learn from
            stats = ppo_update(network, optimizer, episodes, scaler, args, rng)
            hours = float(np.mean([e.job_hours for e in episodes]))
            curve.append({"iteration": iteration, "job_hours": hours,
                          **{k: float(v) for k, v in stats.items()}})
    network.eval()
    meta = {
        **{k: v for k, v in bundle.meta.items() if k in INHERITED_META},
        "trained_with": "slurm-rl retrain (PPO fine-tuning on a scenario calibrated from "
                        "the store)",
        "fine_tuned_from": str(base),
        "package_version": __version__,
        "retrain": {**extra_meta, "world": settings.world.describe(), "curve": curve,
                    "wall_s": round(time.perf_counter() - started, 1)},
    }
    if placement_gp is not None:
        meta[PLACEMENT_GP] = placement_gp
    save_bundle(output, network, meta)
    return output, {"curve": curve}
