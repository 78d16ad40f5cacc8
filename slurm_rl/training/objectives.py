r"""The maths of training: Plackett–Luce rankings, GAE, return scaling.

**Ranking policy.** At a decision the ordering actor's scores :math:`s_1..s_m` over the jobs
that can start define a Plackett–Luce distribution over rankings:

.. math::

    P(σ) = \prod_{i=1}^{m} \frac{e^{s_{σ(i)}}}{\sum_{k \ge i} e^{s_{σ(k)}}} .

Sorting :math:`s_j + G_j` with i.i.d. Gumbel(0, 1) noise :math:`G_j` draws an exact sample
(the Gumbel-top-k trick). Only the first :math:`K` positions are treated as the action (they
are the jobs that can start in this decision); their probability is the product of the first
:math:`K` factors. Their denominators are computed as
:math:`\log\sum_{k\ge i} e^{s_{σ(k)}} = \operatorname{logaddexp}(L_i, R)` with
:math:`L_i = \log\sum_{i \le k \le K} e^{s_{σ(k)}}` (a reversed ``logcumsumexp``) and
:math:`R` the log-sum-exp over the jobs not in the prefix. We use the first-choice softmax entropy
:math:`H(\operatorname{softmax}(s))` as the exploration bonus (the exact entropy of a
Plackett–Luce ranking has no closed form).

**Advantages.** Generalised advantage estimation over one episode's decisions:
:math:`δ_t = r_t + γ V_{t+1} - V_t`, :math:`A_t = \sum_l (γλ)^l δ_{t+l}`, with
:math:`V_{T}` the critic's value at truncation (0 when the episode ended).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

FloatArray = NDArray[np.float64]


def gumbel_order(
    scores: FloatArray, valid: NDArray[np.bool_], rng: np.random.Generator
) -> NDArray[np.int64]:
    """A Plackett–Luce sample: the valid indices, most preferred first."""
    candidates = np.flatnonzero(valid)
    keys = scores[candidates] + rng.gumbel(size=len(candidates))
    return candidates[np.argsort(-keys, kind="stable")]


def plackett_luce_logp(scores: Tensor, order: Tensor, prefix: Tensor, valid: Tensor) -> Tensor:
    """Log-probability of each row's ranked prefix.

    ``scores`` [B, m]; ``order`` [B, K] (indices into m; padding anywhere ``prefix`` is false);
    ``prefix`` [B, K] bool, true on the first ``K_b`` positions; ``valid`` [B, m] bool, the
    jobs in the distribution. Returns [B] (0 for an empty prefix)."""
    neg_inf = torch.finfo(scores.dtype).min
    chosen = scores.gather(1, order).masked_fill(~prefix, neg_inf)
    # scatter_add, not scatter: padding entries may repeat an index of the prefix
    hits = torch.zeros(valid.shape, dtype=scores.dtype)
    hits = hits.scatter_add(1, order, prefix.to(scores.dtype))
    in_prefix = hits > 0
    rest = torch.logsumexp(scores.masked_fill(~valid | in_prefix, neg_inf), dim=1)
    tail = torch.logcumsumexp(chosen.flip(1), dim=1).flip(1)
    denominators = torch.logaddexp(tail, rest.unsqueeze(1))
    terms = (chosen - denominators).masked_fill(~prefix, 0.0)
    return terms.sum(dim=1)


def first_choice_entropy(scores: Tensor, valid: Tensor) -> Tensor:
    """Entropy of softmax over each row's valid jobs [B] (0 for a row with none)."""
    logits = scores.masked_fill(~valid, float("-inf"))
    logp = torch.log_softmax(logits, dim=1)
    p = logp.exp()
    return -(p * torch.nan_to_num(logp, neginf=0.0)).sum(dim=1).nan_to_num(0.0)


def gae(
    rewards: FloatArray, values: FloatArray, bootstrap: float, gamma: float, lam: float
) -> tuple[FloatArray, FloatArray]:
    """Advantages and returns (advantages + values) of one episode."""
    advantages = np.zeros_like(rewards)
    running = 0.0
    following = bootstrap
    for t in range(len(rewards) - 1, -1, -1):
        delta = rewards[t] + gamma * following - values[t]
        running = delta + gamma * lam * running
        advantages[t] = running
        following = values[t]
    return advantages, advantages + values


class ReturnScaler:
    """Scales rewards by the running std of the discounted return (as cleanrl's
    NormalizeReward): rewards here are job-hours and dollars, orders of magnitude apart
    between a quiet and a busy hour, and PPO wants O(1) values."""

    def __init__(self, gamma: float) -> None:
        self.gamma = gamma
        self.count = 1e-4
        self.mean = 0.0
        self.var = 1.0

    def update(self, episodes: list[FloatArray]) -> None:
        returns = [self._discounted(r) for r in episodes if len(r)]
        if not returns:
            return
        batch = np.concatenate(returns)
        self._merge(float(batch.mean()), float(batch.var()), len(batch))

    def _discounted(self, rewards: FloatArray) -> FloatArray:
        out = np.empty_like(rewards)
        running = 0.0
        for t, reward in enumerate(rewards):
            running = running * self.gamma + reward
            out[t] = running
        return out

    def _merge(self, mean: float, var: float, count: int) -> None:
        total = self.count + count
        delta = mean - self.mean
        self.mean += delta * count / total
        m2 = self.var * self.count + var * count + delta**2 * self.count * count / total
        self.var = m2 / total
        self.count = total

    @property
    def scale(self) -> float:
        return math.sqrt(self.var) + 1e-8

    def state(self) -> dict[str, float]:
        return {"count": self.count, "mean": self.mean, "var": self.var}
