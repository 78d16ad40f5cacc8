r"""The networks of the dual agent: ordering (squeeze-and-communicate), placement head, critic.

Our design (the paper's abstract names squeeze-and-communicate; its internals are not public).

**Ordering network.** For a queue of :math:`n` jobs with features :math:`x_j`, messages
:math:`m_j` from the placement agent and cluster features :math:`u`:

.. math::

    φ_j &= \mathrm{enc}(x_j) && \text{shared per-job encoder}\\
    c &= \mathrm{sq}\bigl([\tfrac1n\textstyle\sum_j φ_j,\ \max_j φ_j,\ ψ(u)]\bigr)
        && \text{squeeze: queue + cluster context, } O(n)\\
    μ_j &= \mathrm{msg}(m_j),\quad g_j = σ(W_g[φ_j, μ_j, c] + b_g)
        && \text{communicate: gated message}\\
    s_j &= \mathrm{head}([φ_j + g_j ⊙ μ_j,\ c]) && \text{score}

With an *ordering prior* of sharpness :math:`β_o > 0` (``ordering_sharpness``) the score is
:math:`s_j + β_o\,π^o_j`, :math:`π^o_j = -\log(1 + \mathrm{limit}_j/\mathrm{h})` (minus
:math:`B` more for a job without a time limit): shortest time limit first, as the
``sjf-limit`` ordering; the head's last layer starts at zero, so a new network ranks exactly
as that heuristic and learning moves it only where that pays (a residual, as the placement
head's prior below). Bundles without it have :math:`β_o = 0`.

Permutation-equivariant in the jobs, any :math:`n`, no attention over the queue. Batches of
queues are ragged (``ragged``: all jobs in one matrix, pooled per queue by segment) or padded
(``forward``: a ``present`` mask, flattened to the ragged form). With ``communicate=False``
the message term is dropped (:math:`s_j = \mathrm{head}([φ_j, c])`): the "no communication"
ablation.

**Placement head.** For a job with candidates :math:`k = 1..C` (one node set per GPU type,
:mod:`.candidates`) with features :math:`y_k`, a two-tower form:
:math:`a_j = \mathrm{mlp}_a([x_j, u])`, :math:`[b_k, β_k] = \mathrm{mlp}_b([y_k, u])`,
logits :math:`l_{jk} = π_k + \langle a_j, b_k\rangle / \sqrt{h} + β_k`;
the policy is :math:`\mathrm{softmax}_k(l_{jk})` over the candidates present. Candidates
depend only on a job's request shape, so :math:`b` is computed once per shape for a whole
queue.

The first term :math:`π_k` is a *prior* at sharpness :math:`β_0` (``pace_sharpness``, the name
it had when the pace was the only prior): with ``prior = "pace"`` it is :math:`β_0 \log
\mathrm{pace}_k`, the candidates' predicted pace (the RWGP's risk-adjusted speed of the set,
relative to the fastest type), so a new head starts as fastest-predicted-set first; with
``prior = "cost"`` it is :math:`-β_0 \log c_k`, :math:`c_k` the chooser's own cost per unit of
the job's work (the RWGP's score :math:`(1 + λ g\,\mathrm{price})/\mathrm{pace}`, which also
prices the fees), so a new head starts as the chooser's rule over GPU types. With :math:`β_0 >
0` the last layer of the candidate tower starts at zero, and learning moves the head only where
that pays (a residual). Bundles trained before the prior existed have :math:`β_0 = 0` and keep
their plain two-tower logits.

**Critic** (centralised, as in MAPPO: it sees what both actors see):
:math:`V = \mathrm{mlp}([\text{mean}_j e_j, \max_j e_j, ψ'(u)])` with
:math:`e_j = \mathrm{enc}'([x_j, m_j])`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

PACE_COLUMN = 0  # "pace" in candidates.CANDIDATE_FEATURES (tests check it)
HAS_LIMIT_COLUMN = 4  # "has_limit" in features.JOB_FEATURES (tests check it)
LOG_LIMIT_COLUMN = 5  # "log_limit_h": log1p(time limit in hours)
# B: a job without a limit ranks as one with a limit of e^B ~ 3e4 times longer (last, as
# sjf-limit puts it)
NO_LIMIT_PENALTY = 10.0
PRIORS = ("pace", "cost")
_MIN_PRIOR_PACE = 0.01


@dataclass(frozen=True)
class NetworkConfig:
    job_features: int
    cluster_features: int
    message_features: int
    candidate_features: int
    hidden: int = 64
    pace_sharpness: float = 0.0  # β_0 of the placement head's prior (0: no prior)
    prior: str = "pace"  # "pace": β_0 log pace; "cost": −β_0 log (the chooser's cost)
    ordering_sharpness: float = 0.0  # β_o of the ordering prior, shortest limit first (0: none)

    def as_dict(self) -> dict[str, float | str]:
        return asdict(self)


def mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    """Two layers with a SiLU between them (smooth like tanh, but several times cheaper on CPU
    for a 5,000-job queue)."""
    return nn.Sequential(nn.Linear(inputs, hidden), nn.SiLU(), nn.Linear(hidden, outputs))


def zero_last_layer(net: nn.Sequential) -> None:
    """Output 0 for every input until learning moves it: a prior added to it acts alone."""
    last = net[-1]
    assert isinstance(last, nn.Linear)
    nn.init.zeros_(last.weight)
    nn.init.zeros_(last.bias)


def segment_pool(values: Tensor, segment: Tensor, count: int) -> tuple[Tensor, Tensor]:
    """Mean and max of ``values`` [N, h] per segment (``segment`` [N] in ``0..count-1``);
    0 for an empty segment. Ragged queues pool this way, with no padding."""
    width = values.shape[-1]
    sums = values.new_zeros(count, width).index_add(0, segment, values)
    sizes = torch.bincount(segment, minlength=count).clamp(min=1).to(values.dtype)
    index = segment.unsqueeze(-1).expand_as(values)
    start = values.new_full((count, width), float("-inf"))
    top = start.scatter_reduce(0, index, values, reduce="amax", include_self=True)
    return sums / sizes.unsqueeze(-1), torch.where(torch.isfinite(top), top, torch.zeros_like(top))


def flatten(present: Tensor) -> tuple[Tensor, Tensor]:
    """Rows and segments of the present entries of a padded ``present`` [B, n]."""
    batch, slot = present.nonzero(as_tuple=True)
    return batch, slot


def unflatten(values: Tensor, present: Tensor, batch: Tensor, slot: Tensor) -> Tensor:
    out = values.new_zeros(present.shape)
    out[batch, slot] = values
    return out


class OrderingNetwork(nn.Module):
    """Scores every job of a queue (module docstring)."""

    def __init__(self, config: NetworkConfig) -> None:
        super().__init__()
        h = config.hidden
        self.encoder = mlp(config.job_features, h, h)
        self.cluster = mlp(config.cluster_features, h, h)
        self.squeeze = mlp(3 * h, h, h)
        self.message = mlp(config.message_features, h, h)
        self.gate = nn.Linear(3 * h, h)
        self.head = mlp(2 * h, h, 1)
        self.communicate = True
        self.sharpness = config.ordering_sharpness
        if self.sharpness > 0:  # start as the prior alone: the network learns a residual
            zero_last_layer(self.head)

    def forward(self, jobs: Tensor, messages: Tensor, cluster: Tensor, present: Tensor) -> Tensor:
        """``jobs`` [B, n, Fj], ``messages`` [B, n, Fm], ``cluster`` [B, Fu], ``present``
        [B, n] (bool) -> scores [B, n] (0 on absent rows)."""
        batch, slot = flatten(present)
        flat = self.ragged(jobs[batch, slot], messages[batch, slot], cluster, batch)
        return unflatten(flat, present, batch, slot)

    def ragged(self, jobs: Tensor, messages: Tensor, cluster: Tensor, segment: Tensor) -> Tensor:
        """The same on a ragged batch: ``jobs`` [N, Fj] of ``len(cluster)`` queues, job ``i``
        in queue ``segment[i]`` -> scores [N]."""
        phi = self.encoder(jobs)
        mean, top = segment_pool(phi, segment, len(cluster))
        context = self.squeeze(torch.cat([mean, top, self.cluster(cluster)], dim=-1))[segment]
        if self.communicate:
            mu = self.message(messages)
            gate = torch.sigmoid(self.gate(torch.cat([phi, mu, context], dim=-1)))
            phi = phi + gate * mu
        scores: Tensor = self.head(torch.cat([phi, context], dim=-1)).squeeze(-1)
        if self.sharpness > 0:
            scores = scores + self.sharpness * ordering_prior(jobs)
        return scores


def ordering_prior(jobs: Tensor) -> Tensor:
    """π^o per job (module docstring) from the job features [..., Fj]: shortest time limit
    first, jobs without one last."""
    no_limit = 1.0 - jobs[..., HAS_LIMIT_COLUMN]
    return -(jobs[..., LOG_LIMIT_COLUMN] + NO_LIMIT_PENALTY * no_limit)


class PlacementHead(nn.Module):
    """Logits over each job's candidate node sets: a two-tower form, so that the candidates of
    a request shape are embedded once however many jobs share it."""

    def __init__(self, config: NetworkConfig) -> None:
        super().__init__()
        h = config.hidden
        self.job = mlp(config.job_features + config.cluster_features, h, h)
        self.candidate = mlp(config.candidate_features + config.cluster_features, h, h + 1)
        self.scale = h**-0.5
        self.pace_sharpness = config.pace_sharpness
        if config.prior not in PRIORS:
            raise ValueError(f"unknown placement prior {config.prior!r}; known: {PRIORS}")
        self.prior_kind = config.prior
        if self.pace_sharpness > 0:  # start as the prior alone: the towers learn a residual
            zero_last_layer(self.candidate)

    def forward(self, job: Tensor, candidates: Tensor, cluster: Tensor, present: Tensor,
                log_cost: Tensor | None = None) -> Tensor:
        """``job`` [M, Fj], ``candidates`` [M, C, Fc], ``cluster`` [M, Fu], ``present`` [M, C],
        ``log_cost`` [M, C] (needed by the cost prior) -> logits [M, C], ``-inf`` where no
        candidate is present."""
        a = self.job(torch.cat([job, cluster], dim=-1))
        b = self.embed_candidates(candidates, cluster)
        return self._combine(a, b, present) + self.prior(candidates, log_cost)

    def embed_candidates(self, candidates: Tensor, cluster: Tensor) -> Tensor:
        """[..., C, Fc] with cluster [..., Fu] -> [..., C, h + 1] (the last unit is a bias)."""
        wide = cluster.unsqueeze(-2).expand(*candidates.shape[:-1], cluster.shape[-1])
        out: Tensor = self.candidate(torch.cat([candidates, wide], dim=-1))
        return out

    def by_shape(self, job: Tensor, cluster: Tensor, candidates: Tensor, present: Tensor,
                 shape_of: Tensor, log_cost: Tensor | None = None) -> Tensor:
        """Logits [n, C] for ``n`` jobs whose candidates are those of their shape:
        ``candidates`` [S, C, Fc], ``present`` and ``log_cost`` [S, C], ``shape_of`` [n],
        ``cluster`` [Fu]."""
        a = self.job(torch.cat([job, cluster.expand(len(job), -1)], dim=-1))
        b = self.embed_candidates(candidates, cluster.expand(len(candidates), -1))
        prior = self.prior(candidates, log_cost)[shape_of]
        return self._combine(a, b[shape_of], present[shape_of]) + prior

    def prior(self, candidates: Tensor, log_cost: Tensor | None = None) -> Tensor:
        """The prior per candidate (module docstring; 0 without one); absent rows are masked
        anyway."""
        if self.pace_sharpness <= 0:
            return candidates.new_zeros(candidates.shape[:-1])
        if self.prior_kind == "cost":
            if log_cost is None:
                raise ValueError("the cost prior needs the candidates' log cost")
            return -self.pace_sharpness * log_cost
        pace = candidates[..., PACE_COLUMN].clamp(min=_MIN_PRIOR_PACE)
        return self.pace_sharpness * torch.log(pace)

    def _combine(self, a: Tensor, b: Tensor, present: Tensor) -> Tensor:
        """l_k = <a, b_k> / sqrt(h) + bias_k."""
        logits: Tensor = torch.einsum("mh,mch->mc", a, b[..., :-1]) * self.scale + b[..., -1]
        return logits.masked_fill(~present, float("-inf"))


class Critic(nn.Module):
    """The centralised value function (module docstring)."""

    def __init__(self, config: NetworkConfig) -> None:
        super().__init__()
        h = config.hidden
        self.encoder = mlp(config.job_features + config.message_features, h, h)
        self.cluster = mlp(config.cluster_features, h, h)
        self.value = mlp(3 * h, h, 1)

    def forward(self, jobs: Tensor, messages: Tensor, cluster: Tensor, present: Tensor) -> Tensor:
        """Shapes as :meth:`OrderingNetwork.forward` -> values [B]."""
        batch, slot = flatten(present)
        return self.ragged(jobs[batch, slot], messages[batch, slot], cluster, batch)

    def ragged(self, jobs: Tensor, messages: Tensor, cluster: Tensor, segment: Tensor) -> Tensor:
        """Shapes as :meth:`OrderingNetwork.ragged` -> values [len(cluster)]."""
        e = self.encoder(torch.cat([jobs, messages], dim=-1))
        mean, top = segment_pool(e, segment, len(cluster))
        pooled = torch.cat([mean, top, self.cluster(cluster)], dim=-1)
        return self.value(pooled).squeeze(-1)  # type: ignore[no-any-return]


class DualNetwork(nn.Module):
    """Everything a policy bundle stores: both actors and the critic."""

    def __init__(self, config: NetworkConfig) -> None:
        super().__init__()
        self.config = config
        self.ordering = OrderingNetwork(config)
        self.placement = PlacementHead(config)
        self.critic = Critic(config)
