r"""The RWGP posterior in state-space form: the GP of :mod:`.kernels`, updated online at a cost
set by the number of machines, never by the number of observations.

This is **our reconstruction** of the paper's one-sentence RWGP; the design is ours.

**State.** The kernel ``k = σ_s²[A ⊗ C_ρ + B] + σ_d² K̂ ⊗ OU`` is the covariance of

.. math::

    f(m, c, τ) = μ_0 + s_m + u_{c,\,cell(m)} + d_m(τ)

with independent Gaussian parts: ``s ~ N(0, σ_s²(ρA + B))`` (a machine's lasting speed, shared
by all job classes), ``u_c ~ N(0, σ_s²(1 − ρ)Â)`` one per job class over the cells (what that
class does differently on a GPU type or rack), and the drift ``d``, a vector
Ornstein–Uhlenbeck process with stationary covariance ``σ_d² K̂`` and time constant ``ℓ``.
(Check: ``Cov(f, f')`` is exactly ``k``, because ``A C_ρ = ρA + (1 − ρ)A[c = c']``.) The
belief is ``x = [s, d, u_1, …, u_K] ~ N(μ, Σ)``, of size ``2M + K·C`` (M machines, C cells, K
job classes seen).

**Time** (exact, because Matérn-½ is Markov): going from ``τ`` to ``τ + Δ`` with
``a = e^{−Δ/ℓ}``,

.. math::

    μ_d ← a μ_d,\qquad Σ_{d·} ← a Σ_{d·},\quad Σ_{·d} ← a Σ_{·d},\qquad
    Σ_{dd} ← Σ_{dd} + (1 − a^2)\, σ_d^2 K̂ .

**Observations** are linear: ``y = h^T x + μ_0 + ε``, ``ε ~ N(0, r)``. A job on one machine
gives ``h = e_{s_m} + e_{d_m} + e_{u_{c,cell(m)}}``. A gang runs at the pace of its slowest
member, ``y = min_i f_i``, which no linear ``h`` describes: we match moments instead
(assumed-density filtering, :func:`gang_readings`): each member's posterior mean and variance
under the exact min-likelihood are computed against its current marginal, and turned into a
one-machine pseudo-reading with that effect. When the reading only says "one of them is slow"
(each member's exact posterior is bimodal and wider than its belief), there is nothing
Gaussian to take, and the model waits for the members to be told apart
(:meth:`slurm_rl.agents.rwgp.model.RwgpModel`). A batch ``y = Hx + μ_0 + ε`` is one Kalman
update:

.. math::

    S = HΣH^T + R,\quad μ ← μ + ΣH^T S^{-1}(y − μ_0 − Hμ),\quad Σ ← Σ − ΣH^T S^{-1} HΣ .

For one-machine readings this is the GP posterior itself, not an approximation of it:
conditioning on all observations so far, with no window and no inducing points (gangs add
the moment-matching approximation above). It costs
``O(n² B)`` for a batch of ``B`` (merged) observations, with ``n = 2M + K·C``, and memory
``O(n²)``: bounded however long the cluster runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from slurm_rl.agents.rwgp.kernels import RwgpPrior

_DTYPE = torch.float64
_JITTER = 1e-9


@dataclass(frozen=True)
class StatePrior:
    """The prior in state-space form, read (detached) from an :class:`RwgpPrior`."""

    shared: Tensor  # M × M: σ_s² (ρA + B), the prior of s
    drift: Tensor  # M × M: σ_d² K̂, the stationary prior of d
    class_cells: Tensor  # C × C: σ_s² (1 − ρ) Â, the prior of each u_c
    cell_of: Tensor  # (M,)
    mean: float  # μ₀
    noise_var: float  # σ_n²
    lengthscale_h: float  # ℓ

    @classmethod
    def from_prior(cls, prior: RwgpPrior) -> StatePrior:
        with torch.no_grad():
            parts = prior.graph_kernel.parts()
            rho = prior.class_kernel.correlation
            static, drift = prior.static.outputscale, prior.drift.outputscale
            cell_dense = parts.dense("cell")
            own = parts.dense("individual")
            return cls(
                shared=static * (rho * cell_dense + own),
                drift=drift * (cell_dense + own),
                class_cells=static * (1.0 - rho) * parts.cell,
                cell_of=parts.cell_of,
                mean=float(prior.mean.constant),
                noise_var=float(prior.noise_variance),
                lengthscale_h=float(prior.time_kernel.lengthscale),
            )

    @property
    def num_machines(self) -> int:
        return int(self.cell_of.numel())

    @property
    def num_cells(self) -> int:
        return int(self.class_cells.shape[0])


@dataclass(frozen=True)
class Batch:
    """Observations at one time: member machines (``-1`` pads), linearisation weights, class
    slot, observed relative speed and noise variance of each."""

    machines: Tensor  # (B, k) long
    weights: Tensor  # (B, k)
    slots: Tensor  # (B,) long
    speeds: Tensor  # (B,)
    noise: Tensor  # (B,)


class SpeedBelief:
    """``N(μ, Σ)`` over ``x = [s, d, u_1 … u_K]`` at time :attr:`time_h` (module docstring)."""

    def __init__(self, prior: StatePrior, time_h: float) -> None:
        self.prior = prior
        self.time_h = time_h
        m = prior.num_machines
        self._mean = torch.zeros(2 * m, dtype=_DTYPE)
        self._cov = _block_diag(prior.shared, prior.drift)
        self.num_slots = 0

    @property
    def size(self) -> int:
        return int(self._mean.numel())

    def add_slot(self) -> int:
        """Room for one more job class: its ``u_c`` enters at its prior, independent of all."""
        c = self.prior.num_cells
        self._mean = torch.cat([self._mean, torch.zeros(c, dtype=_DTYPE)])
        self._cov = _block_diag(self._cov, self.prior.class_cells)
        self.num_slots += 1
        return self.num_slots - 1

    def advance(self, time_h: float) -> None:
        """Let the drift evolve to ``time_h`` (earlier times are taken as now)."""
        delta = time_h - self.time_h
        if delta <= 0:
            return
        m = self.prior.num_machines
        a = float(np.exp(-delta / self.prior.lengthscale_h))
        d = slice(m, 2 * m)
        self._mean[d] *= a
        self._cov[:, d] *= a
        self._cov[d, :] *= a
        self._cov[d, d] += (1.0 - a * a) * self.prior.drift
        self.time_h = time_h

    def _indices(self, machines: Tensor, slots: Tensor | None) -> Tensor:
        """State indices ``(…, 3)`` of ``s_m, d_m, u_{c,cell(m)}`` (2 without a class)."""
        m = self.prior.num_machines
        columns = [machines, machines + m]
        if slots is not None:
            cells = self.prior.cell_of[machines]
            columns.append(2 * m + slots * self.prior.num_cells + cells)
        return torch.stack(columns, dim=-1)

    def marginals(
        self, machines: Tensor, slots: Tensor | None, time_h: float | None = None
    ) -> tuple[Tensor, Tensor]:
        """Mean and variance of ``f`` for each machine (for a class slot; ``None``: a class
        never observed, whose ``u`` is still at its prior), at ``time_h`` (default: the
        belief's time). Looking ahead does not touch ``Σ``: with ``a = e^{−Δ/ℓ}``,
        ``f = s + u + a·d + ε`` with ``Var ε = (1 − a²)σ_d²``, which costs O(machines)."""
        index = self._indices(machines, slots)
        delta = 0.0 if time_h is None else max(0.0, time_h - self.time_h)
        a = float(np.exp(-delta / self.prior.lengthscale_h))
        coef = torch.ones(index.shape[-1], dtype=_DTYPE)
        coef[1] = a
        mean = self.prior.mean + (self._mean[index] * coef).sum(-1)
        block = self._cov[index.unsqueeze(-1), index.unsqueeze(-2)]
        var = (block * coef[:, None] * coef[None, :]).sum((-1, -2))
        var = var + (1.0 - a * a) * self.prior.drift.diagonal()[machines]
        if slots is None:
            cells = self.prior.cell_of[machines]
            var = var + self.prior.class_cells[cells, cells]
        return mean, var.clamp(min=_JITTER)

    def covariance(self, machines: Tensor, slots: Tensor) -> Tensor:
        """Posterior covariance of ``f`` between the given (machine, class slot) points."""
        index = self._indices(machines, slots)
        block = self._cov[index[:, None, :, None], index[None, :, None, :]]
        return block.sum((-1, -2))

    def condition(self, batch: Batch) -> None:
        """One Kalman update with every observation of the batch (module docstring)."""
        rows = self._rows(batch)
        hs = torch.sparse.mm(rows, self._cov)  # H Σ, (B, n)
        s = torch.sparse.mm(rows, hs.T)  # H Σ Hᵀ
        s = s + torch.diag(batch.noise + _JITTER)
        chol = torch.linalg.cholesky(s)
        predicted = torch.sparse.mm(rows, self._mean[:, None])[:, 0]
        innovation = batch.speeds - self.prior.mean - predicted
        v = torch.linalg.solve_triangular(chol, hs, upper=False)  # L⁻¹ H Σ
        z = torch.linalg.solve_triangular(chol, innovation[:, None], upper=False)[:, 0]
        self._mean += v.T @ z
        self._cov.addmm_(v.T, v, alpha=-1.0)

    def symmetrize(self) -> None:
        """Undo rounding drift between Σ and Σᵀ (O(n²); the caller decides how often)."""
        self._cov = 0.5 * (self._cov + self._cov.T)

    def _rows(self, batch: Batch) -> Tensor:
        valid = batch.machines >= 0
        b, k = batch.machines.shape
        index = self._indices(batch.machines.clamp(min=0), batch.slots[:, None].expand(b, k))
        row = torch.arange(b)[:, None, None].expand(b, k, 3)
        mask = valid[:, :, None].expand(b, k, 3)
        values = batch.weights[:, :, None].expand(b, k, 3)
        coords = torch.stack([row[mask], index[mask]])
        return torch.sparse_coo_tensor(
            coords, values[mask], (b, self.size), check_invariants=False
        ).coalesce()

    def state_dict(self) -> dict[str, Tensor]:
        return {"mean": self._mean, "cov": self._cov, "time_h": torch.tensor(self.time_h)}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self._mean, self._cov = state["mean"].to(_DTYPE), state["cov"].to(_DTYPE)
        self.time_h = float(state["time_h"])
        extra = self.size - 2 * self.prior.num_machines
        self.num_slots = extra // self.prior.num_cells


def _block_diag(a: Tensor, b: Tensor) -> Tensor:
    out = torch.zeros(a.shape[0] + b.shape[0], a.shape[1] + b.shape[1], dtype=_DTYPE)
    out[: a.shape[0], : a.shape[1]] = a
    out[a.shape[0] :, a.shape[1] :] = b
    return out


@dataclass(frozen=True)
class GangReadings:
    """Per-member pseudo-readings for gangs (B, k): conditioning member ``i`` alone on
    ``N(speed_i; f_i, noise_i)`` moves its marginal to the moment-matched posterior
    (``noise = inf``: nothing to learn about that member). ``settled``: no member's matched
    posterior is wider than its belief, i.e. the reading is not "one of them, unknown which"."""

    speed: Tensor
    noise: Tensor
    settled: Tensor  # (B,)


def gang_readings(
    mean: Tensor, var: Tensor, valid: Tensor, speeds: Tensor, noise: Tensor
) -> GangReadings:
    r"""Assumed-density filtering of ``y = min_i f_i + ε`` (``ε ~ N(0, r)``) for gangs whose
    members have independent marginals ``N(μ_i, v_i)`` (B, k; pads ``valid=False``).

    Which member is the slowest splits the likelihood into cases; for small ``r``,

    .. math::

        p(y \mid f) ≈ \sum_j N(y; f_j, r) \prod_{l ≠ j} [f_l > y],
        \qquad
        π_j ∝ N(y; μ_j, v_j + r) \prod_{l ≠ j} Φ\Bigl(\frac{μ_l - y}{\sqrt{v_l}}\Bigr),

    so member ``i``'s posterior is a two-part mixture: with weight ``π_i`` it is the slowest
    (the conjugate update on ``y``), otherwise it is only known to be above ``y`` (its
    marginal truncated at ``y``). Its mean ``m_i`` and variance ``p_i`` are that mixture's;
    the Gaussian pseudo-reading with the same effect is
    ``r̂_i = v_i p_i / (v_i − p_i)``, ``ŷ_i = μ_i + (m_i − μ_i) v_i / (v_i − p_i)``, none when
    ``p_i ≥ v_i`` (the posterior is wider than the belief: "one of them is slow", bimodal), and
    never more precise than the reading itself."""
    y, r = speeds[:, None], noise[:, None]
    pi = _slowest(mean, var, valid, y, r)
    gain = var / (var + r)  # the slowest: conjugate update on y
    m_min, v_min = mean + gain * (y - mean), var * r / (var + r)
    m_up, v_up = _above(mean, var, y)  # the others: only known to be above y
    post_mean = pi * m_min + (1 - pi) * m_up
    post_var = pi * (v_min + m_min.square()) + (1 - pi) * (v_up + m_up.square())
    post_var = (post_var - post_mean.square()).clamp(min=_JITTER)
    return _as_readings(mean, var, valid, r, post_mean, post_var)


def _slowest(mean: Tensor, var: Tensor, valid: Tensor, y: Tensor, r: Tensor) -> Tensor:
    """``π_j``: the probability that member ``j`` is the one whose pace was read."""
    above = torch.special.log_ndtr((mean - y) / var.sqrt())  # log P(f_l > y)
    above = torch.where(valid, above, torch.zeros_like(above))
    log_pi = -0.5 * ((y - mean).square() / (var + r) + torch.log(var + r)) + above.sum(-1, True)
    log_pi = torch.where(valid, log_pi - above, torch.full_like(log_pi, -torch.inf))
    return torch.softmax(log_pi, dim=-1)


def _above(mean: Tensor, var: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and variance of ``N(mean, var)`` truncated to ``f > y`` (inverse Mills ratio)."""
    std = var.sqrt()
    alpha = (y - mean) / std
    log_pdf = -0.5 * alpha.square() - 0.5 * math.log(2 * math.pi)
    mills = torch.exp(log_pdf - torch.special.log_ndtr(-alpha))
    return mean + std * mills, (var * (1.0 + alpha * mills - mills.square())).clamp(min=_JITTER)


def _as_readings(mean: Tensor, var: Tensor, valid: Tensor, r: Tensor, post_mean: Tensor,
                 post_var: Tensor) -> GangReadings:
    """The one-machine pseudo-readings that move ``N(mean, var)`` to the matched posterior."""
    informative = valid & (post_var < var * (1.0 - 1e-3))
    scale = var / (var - post_var).clamp(min=_JITTER)
    noise = torch.where(informative, (post_var * scale).clamp(min=r),
                        torch.full_like(var, float("inf")))
    speed = torch.where(informative, mean + (post_mean - mean) * scale, mean)
    settled = (~valid | (post_var <= 1.05 * var)).all(dim=-1)
    return GangReadings(speed, noise, settled)
