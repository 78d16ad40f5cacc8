r"""Joint training of the dual agent: behaviour cloning, then PPO with a centralised critic.

Read top to bottom (cleanrl style): arguments, seeding, the world, the networks, the warm
start, the PPO loop, the bundle. docs/training.md explains the method; in short:

* **Actors.** The ordering actor's Plackett–Luce ranking over the jobs that can start, and the
  placement head's softmax over each started job's per-GPU-type candidates
  (:mod:`.rollout`, :mod:`.objectives`).
* **Critic.** One centralised value over the pooled candidate set and cluster (it sees both
  actors' inputs: the messages carry the placement side), trained on returns of the shared
  reward :math:`r_t = -(Δ\text{job-hours} + λ\,Δ\text{fees})`, scaled by the running std of the
  discounted return.
* **MAPPO update.** Each actor has its own clipped ratio
  :math:`ρ = π_θ(a)/π_{θ_{old}}(a)`, both weighted by the same GAE advantage of their decision:

  .. math::

      L = -\mathbb{E}[\min(ρ_o A, \mathrm{clip}(ρ_o) A)] - \mathbb{E}[\min(ρ_p A,
      \mathrm{clip}(ρ_p) A)] + c_v \mathbb{E}[(V - \hat R)^2] - c_e (H_o + H_p)

* **Warm start.** Before PPO, both actors clone a realisable teacher (QSSF-like ranking by
  predicted GPU-hours from the observed history; the fastest candidate, or with
  ``placement_teacher = "prior"`` the best under the placement head's prior) by maximum
  likelihood,
  and the critic fits the teacher's returns.

Episodes are windows of the training trace (Philly October–November by default; September is
the validation window that picks the best checkpoint; December is never touched).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from slurm_rl import __version__
from slurm_rl.agents.dual.agent import network_config
from slurm_rl.agents.dual.bundle import LONG_LIMIT_H, save_bundle
from slurm_rl.agents.dual.network import DualNetwork
from slurm_rl.agents.starvation import STARVATION_H, guard_seconds
from slurm_rl.errors import InputError
from slurm_rl.fairness import RankingRules
from slurm_rl.training.actors import RolloutConfig, Step, observation_tensors
from slurm_rl.training.batch import StepBatch, collate_placements, collate_steps
from slurm_rl.training.curves import CurveLog
from slurm_rl.training.episodes import EpisodeSampler, check_not_held_out, check_windows
from slurm_rl.training.objectives import (
    ReturnScaler,
    first_choice_entropy,
    gae,
    plackett_luce_logp,
)
from slurm_rl.training.pool import Backend, LoadBasis, RolloutPool, WorldSpec
from slurm_rl.training.rollout import Episode
from slurm_rl.training.validation import Checkpoint, Selection, Validator


@dataclass
class Args:
    exp_name: str = "dual-agent"
    seed: int = 1
    workers: int = 2  # rollout workers
    backend: Backend = "auto"  # processes, or Ray actors ("auto": Ray when installed)
    torch_threads: int = 1  # per process
    # the world
    trace: str = "philly"
    cluster: str = "philly-hetero"
    train_window: str = "2017-10-01:2017-12-01"
    validation_window: str = "2017-09"
    warmup_days: float = 3.0  # heuristic warm-up before the agent takes over
    episode_days: float = 0.5  # the agent's part of an episode
    # offered loads (the load sweep's, docs/sweep.md): each episode draws one and runs on the
    # cluster scaled so that the training window offers it; validation replays its window at
    # each. Empty: the cluster as specified
    loads: tuple[float, ...] = ()
    # whose offered load scales an episode's cluster: the training window's ("window") or the
    # episode's own days' ("episode", as the load sweep scales a held-out window); pool.py
    load_basis: LoadBasis = "window"
    # the loads validation replays its window at (empty: ``loads``)
    validation_loads: tuple[float, ...] = ()
    # checkpoint selection: "mean" cost ratio over the validation loads, or "every-load" (a
    # checkpoint must also be no worse than the best so far, within 1 %, at every load;
    # validation.py)
    selection: Selection = "mean"
    # the reward and the agent
    fee_weight: float = 0.1  # λ: currency units worth one job-hour of JCT
    chooser: str = "rwgp-excluding"  # node sets inside a GPU type (agent.CHOOSERS)
    communicate: bool = True  # False trains the "no communication" ablation
    dispatch: bool = False  # episodes and validation as the daemon's dispatch = true runs
    hidden: int = 64
    # β_0 of the placement head's prior β_0 log pace (network.py): the head starts as the
    # chooser's rule, fastest predicted set first, and learns a residual (0: no prior)
    pace_sharpness: float = 4.0
    # "cost": −β_0 log (the chooser's cost per unit of work: fees priced at λ); "pace": β_0 log pace
    prior: str = "cost"
    # what the warm start's placement clones: "fastest" (fastest-GPU-first), or "prior" (the
    # best candidate under the head's prior; session 15: not shipped, docs/training.md)
    placement_teacher: str = "fastest"
    # β_o of the ordering prior (network.py): the ordering starts as sjf-limit, shortest time
    # limit first, and learns a residual (0: no prior)
    ordering_sharpness: float = 0.0
    # the ranking the warm start clones: "qssf" (predicted GPU-hours) or "limit" (the prior's)
    ordering_teacher: str = "qssf"
    # the age guard the rollouts and validation rank under and the bundle ships with (its
    # meta's starvation_h): hours pending before a job goes first; 0 turns it off
    starvation_h: float = STARVATION_H
    # the time limit, in hours, from which the chooser keeps a job off slow nodes (choosers
    # with the long-job rule), in rollouts and validation; the bundle ships with it
    long_limit_h: float = LONG_LIMIT_H
    max_jobs: int = 128  # candidate set size
    rank_k: int = 16  # ranked prefix that is the ordering action
    # behaviour cloning
    bc_iterations: int = 2
    bc_epochs: int = 8
    # PPO
    iterations: int = 20
    episodes_per_iteration: int = 4
    learning_rate: float = 1e-3
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    update_epochs: int = 8
    minibatch_steps: int = 512
    clip_coef: float = 0.2
    ent_coef: float = 0.003
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    validate_every: int = 5  # iterations (0: only at the end)
    # output
    output: Path = Path("policies/default")
    run_dir: Path = Path("reports/runs")  # reports/ is git-ignored
    progress: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


def train(args: Args) -> Path:
    """Trains, and writes the bundle of the best validated weights to ``args.output``."""
    started = time.perf_counter()
    # ----- seeding ----------------------------------------------------------------------
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.torch_threads)
    rng = np.random.default_rng(args.seed)

    # ----- the world --------------------------------------------------------------------
    check_not_held_out(args.trace, args.train_window, args.validation_window)
    check_run_dir(args)
    check_windows(args.trace, args.cluster, {"--train-window": args.train_window,
                                             "--validation-window": args.validation_window})
    world = WorldSpec(args.trace, args.cluster, dispatch=args.dispatch, loads=args.loads,
                      load_window=args.train_window, load_basis=args.load_basis)
    pool = RolloutPool(world, args.workers, args.torch_threads, args.backend)
    sampler = EpisodeSampler(pool.world.trace, args.train_window, args.warmup_days,
                             args.episode_days, args.loads)
    validator = Validator(world, args.validation_window, args.fee_weight, args.chooser,
                          args.workers, args.communicate,
                          args.validation_loads or args.loads, args.selection,
                          starvation_h=args.starvation_h, long_limit_h=args.long_limit_h)
    curves = CurveLog(args.run_dir / args.exp_name, progress=args.progress)

    def validate(label: str) -> Checkpoint:
        seen = len(validator.rows)
        best = validator.checkpoint(network, label, curves.print)
        for row in validator.rows[seen:]:
            curves.validation(row)
        return best


    # ----- the networks -----------------------------------------------------------------
    network = DualNetwork(network_config(args.hidden, args.pace_sharpness, args.prior,
                                          args.ordering_sharpness))
    network.ordering.communicate = args.communicate
    optimizer = torch.optim.Adam(network.parameters(), lr=args.learning_rate, eps=1e-5)
    scaler = ReturnScaler(args.gamma)
    rollout = RolloutConfig(args.fee_weight, args.chooser, "sample", args.max_jobs,
                            args.rank_k, communicate=args.communicate,
                            placement_teacher=args.placement_teacher,
                            ordering_teacher=args.ordering_teacher,
                            starvation_s=guard_seconds(args.starvation_h),
                            rules=RankingRules(dispatch=args.dispatch),
                            long_limit_s=3600.0 * args.long_limit_h)
    total = args.bc_iterations + args.iterations
    curves.start(total * args.episodes_per_iteration)

    with pool:
        # ----- warm start: clone the teacher ------------------------------------------------
        teacher = replace(rollout, mode="teacher")
        for iteration in range(1, args.bc_iterations + 1):
            specs = sampler.sample(rng, args.episodes_per_iteration, args.seed, iteration)
            episodes = pool.collect(network, teacher, specs, curves.episode_done)
            scaler.update([_rewards(e) for e in episodes])
            stats = clone(network, optimizer, episodes, scaler, args)
            curves.record("bc", iteration, episodes, stats, args.fee_weight)

        # ----- PPO ----------------------------------------------------------------------
        best = validate("warm start")
        for iteration in range(1, args.iterations + 1):
            if args.anneal_lr:
                fraction = 1.0 - (iteration - 1.0) / args.iterations
                optimizer.param_groups[0]["lr"] = fraction * args.learning_rate
            step = args.bc_iterations + iteration
            specs = sampler.sample(rng, args.episodes_per_iteration, args.seed, step)
            episodes = pool.collect(network, rollout, specs, curves.episode_done)
            scaler.update([_rewards(e) for e in episodes])
            stats = ppo_update(network, optimizer, episodes, scaler, args, rng)
            curves.record("ppo", iteration, episodes, stats, args.fee_weight)
            last = iteration == args.iterations
            if last or (args.validate_every and iteration % args.validate_every == 0):
                best = validate(f"PPO {iteration}")
        curves.finish()

    # ----- the bundle -------------------------------------------------------------------
    meta = {
        "trained_with": "slurm-rl train (behaviour cloning + PPO, centralised critic)",
        "fee_weight": args.fee_weight,
        "chooser": args.chooser,
        "communicate": args.communicate,
        "starvation_h": args.starvation_h,
        "long_limit_h": args.long_limit_h,
        "seed": args.seed,
        "training": {"trace": args.trace, "cluster": args.cluster, "mode": "slurm",
                     "train_window": args.train_window,
                     "validation_window": args.validation_window,
                     "episodes": sampler.used, "args": _jsonable(asdict(args))},
        "metrics": {"validation": validator.summary(), "checkpoint": best.label,
                    "wall_s": round(time.perf_counter() - started, 1)},
        "package_version": __version__,
    }
    network.load_state_dict(best.state)
    save_bundle(args.output, network, meta)
    (args.run_dir / args.exp_name / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return args.output


def check_run_dir(args: Args) -> None:
    """Refuses a run directory that is the bundle's own: the run's meta.json (the bundle's
    meta without its format and network fields) would overwrite the bundle's, and the bundle
    would no longer load (it happened: ``--run-dir /tmp/runs --output /tmp/runs/x``)."""
    run = args.run_dir / args.exp_name
    if run.resolve() == args.output.resolve():
        raise InputError(f"--run-dir {args.run_dir}: the run's files would go into the bundle "
                         f"directory {args.output}; give another --run-dir")


def _rewards(episode: Episode) -> np.ndarray:
    return np.array([s.reward for s in episode.steps], dtype=float)


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in values.items()}


# ----- advantages -----------------------------------------------------------------------


def values_of(network: DualNetwork, steps: Sequence[Step], chunk: int = 1024) -> np.ndarray:
    """The critic's values of these steps' observations, in batches."""
    out = []
    with torch.no_grad():
        for first in range(0, len(steps), chunk):
            batch = collate_steps(steps[first : first + chunk])
            out.append(network.critic.ragged(*batch.ragged()).double().numpy())
    return np.concatenate(out) if out else np.zeros(0)


def advantages(network: DualNetwork, episodes: Sequence[Episode], scaler: ReturnScaler,
               gamma: float, lam: float) -> tuple[list[Step], np.ndarray, np.ndarray]:
    """All steps, their GAE advantages and returns (in scaled reward units)."""
    steps: list[Step] = []
    adv, ret = [], []
    for episode in episodes:
        if not episode.steps:
            continue
        values = values_of(network, episode.steps)
        bootstrap = 0.0
        if episode.final is not None:
            with torch.no_grad():
                bootstrap = float(network.critic(*observation_tensors(episode.final))[0])
        rewards = _rewards(episode) / scaler.scale
        a, r = gae(rewards, values, bootstrap, gamma, lam)
        steps += episode.steps
        adv.append(a)
        ret.append(r)
    if not adv:  # no decision in any episode (a quiet stretch): nothing to learn from
        return steps, np.zeros(0), np.zeros(0)
    return steps, np.concatenate(adv), np.concatenate(ret)


# ----- the losses -----------------------------------------------------------------------


@dataclass
class Stats:
    """Means over an update's minibatches, for the curves."""

    sums: dict[str, float] = field(default_factory=dict)
    count: int = 0

    def add(self, **values: float) -> None:
        for key, value in values.items():
            self.sums[key] = self.sums.get(key, 0.0) + value
        self.count += 1

    def means(self) -> dict[str, float]:
        return {k: v / max(self.count, 1) for k, v in self.sums.items()}


def _clipped(ratio: Tensor, adv: Tensor, clip: float) -> Tensor:
    return torch.max(-adv * ratio, -adv * ratio.clamp(1.0 - clip, 1.0 + clip)).mean()


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def ppo_update(network: DualNetwork, optimizer: torch.optim.Optimizer,
               episodes: Sequence[Episode], scaler: ReturnScaler, args: Args,
               rng: np.random.Generator) -> dict[str, float]:
    steps, adv, ret = advantages(network, episodes, scaler, args.gamma, args.gae_lambda)
    stats = Stats()
    for _ in range(args.update_epochs):
        order = rng.permutation(len(steps))
        for first in range(0, len(steps), args.minibatch_steps):
            chosen = order[first : first + args.minibatch_steps]
            batch = collate_steps([steps[i] for i in chosen])
            a = torch.from_numpy(adv[chosen]).float()
            a = (a - a.mean()) / (a.std() + 1e-8) if len(a) > 1 else a
            losses = _ppo_losses(network, batch, [steps[i] for i in chosen], a,
                                 torch.from_numpy(ret[chosen]).float(), args)
            loss = losses["policy_o"] + losses["policy_p"] + args.vf_coef * losses["value"]
            loss = loss - args.ent_coef * (losses["entropy_o"] + losses["entropy_p"])
            _step(network, optimizer, loss, args.max_grad_norm)
            stats.add(**{k: v.item() for k, v in losses.items()})
    return stats.means()


def _ppo_losses(network: DualNetwork, batch: StepBatch, steps: Sequence[Step], adv: Tensor,
                returns: Tensor, args: Args) -> dict[str, Tensor]:
    scores = batch.padded(network.ordering.ragged(*batch.ragged()))
    logp = plackett_luce_logp(scores, batch.order, batch.prefix, batch.valid)
    acted = batch.acted.float()
    ratio = (logp - batch.old_logp).exp()
    clipped = torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef))
    out = {
        "policy_o": _masked_mean(clipped, acted),
        "entropy_o": _masked_mean(first_choice_entropy(scores, batch.valid), acted),
        "kl_o": _masked_mean(batch.old_logp - logp, acted).detach(),
        "value": 0.5 * ((network.critic.ragged(*batch.ragged()) - returns) ** 2).mean(),
    }
    placements = collate_placements(steps)
    zero = scores.sum() * 0.0
    out["policy_p"], out["entropy_p"], out["kl_p"] = zero, zero, zero.detach()
    if placements is not None:
        logits = network.placement(placements.job, placements.candidates, placements.cluster,
                                   placements.present, placements.log_cost)
        log_probs = torch.log_softmax(logits, dim=1)
        new = log_probs.gather(1, placements.choice.unsqueeze(1)).squeeze(1)
        ratio_p = (new - placements.old_logp).exp()
        out["policy_p"] = _clipped(ratio_p, adv[placements.step], args.clip_coef)
        p = log_probs.exp()
        out["entropy_p"] = -(p * torch.nan_to_num(log_probs, neginf=0.0)).sum(1).mean()
        out["kl_p"] = (placements.old_logp - new).mean().detach()
    return out


def _step(network: nn.Module, optimizer: torch.optim.Optimizer, loss: Tensor,
          max_norm: float) -> None:
    optimizer.zero_grad()
    loss.backward()  # type: ignore[no-untyped-call]
    nn.utils.clip_grad_norm_(network.parameters(), max_norm)
    optimizer.step()


def clone(network: DualNetwork, optimizer: torch.optim.Optimizer,
          episodes: Sequence[Episode], scaler: ReturnScaler, args: Args) -> dict[str, float]:
    """Behaviour cloning: the teacher's ranked prefixes and placements by maximum likelihood;
    the critic on the teacher's returns (GAE with λ = 1: Monte Carlo, bootstrapped)."""
    steps, _, ret = advantages(network, episodes, scaler, args.gamma, 1.0)
    stats = Stats()
    rng = np.random.default_rng(args.seed)
    for _ in range(args.bc_epochs):
        order = rng.permutation(len(steps))
        for first in range(0, len(steps), args.minibatch_steps):
            chosen = order[first : first + args.minibatch_steps]
            part = [steps[i] for i in chosen]
            batch = collate_steps(part)
            scores = batch.padded(network.ordering.ragged(*batch.ragged()))
            nll_o = -_masked_mean(
                plackett_luce_logp(scores, batch.order, batch.prefix, batch.valid),
                batch.acted.float())
            value = network.critic.ragged(*batch.ragged())
            v_loss = 0.5 * ((value - torch.from_numpy(ret[chosen]).float()) ** 2).mean()
            nll_p = _placement_nll(network, part, scores)
            _step(network, optimizer, nll_o + nll_p + args.vf_coef * v_loss, args.max_grad_norm)
            stats.add(nll_o=nll_o.item(), nll_p=nll_p.item(), value=v_loss.item())
    return stats.means()


def _placement_nll(network: DualNetwork, steps: Sequence[Step], like: Tensor) -> Tensor:
    placements = collate_placements(steps)
    if placements is None:
        return like.sum() * 0.0
    logits = network.placement(placements.job, placements.candidates, placements.cluster,
                               placements.present, placements.log_cost)
    return nn.functional.cross_entropy(logits.nan_to_num(neginf=-1e9), placements.choice)
