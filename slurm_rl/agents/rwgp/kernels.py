r"""Kernels of the RWGP: a diffusion kernel on the machine graph, a job-class kernel, and the
Ornstein–Uhlenbeck (Matérn-½) kernel in time, composed as in GPyTorch.

This is **our reconstruction**: the paper (Xing et al., KDD 2023) describes its RWGP in one
sentence; every formula here is our design.

Inputs are rows ``x = (machine index, job-class slot, time in hours)``.

**Machine graph.** Machines are the nodes. Two machines ``i ≠ j`` are joined by an edge of weight

.. math::

    W_{ij} = \frac{w_T\,[t_i = t_j]}{N_{t_i} - 1} + \frac{w_G\,[g_i = g_j]}{N_{g_i} - 1}

(``t``: GPU type, ``g``: host group, ``N``: machines in that type or group; ``w_T, w_G > 0``
learned). Dividing by ``N − 1`` makes each machine's total edge weight ``w_T + w_G`` whatever
the cluster's size, so the learned weights mean the same on 100 or 10,000 machines. A machine
without a host group has no group edges.

**Diffusion kernel** (Kondor & Lafferty 2002): with the Laplacian ``L = D − W``,
``K = exp(−L)`` (the diffusion time is absorbed into the weights). ``K_ij`` is the probability
that a continuous-time random walk on the graph goes from ``i`` to ``j``: machines joined by
heavy edges are alike. We use its unit-diagonal form ``K̂_ij = K_ij / sqrt(K_ii K_jj)`` so that
every machine has the same prior variance.

**Exact and cheap, through the cells.** Machines with the same (type, group) — a *cell* — are
interchangeable in the graph, so the cells form an equitable partition and ``exp(−L)`` splits
exactly into two parts. Let ``M[c, c']`` be the weight between one machine of cell ``c`` and one
of ``c'``, ``n_c`` the cell sizes, ``d_c = Σ_{c'} n_{c'} M[c, c'] − M[c, c]`` the degree. Then

* on vectors constant within each cell, ``L`` acts as the symmetric ``C × C`` matrix
  ``S = diag(d_c + M[c, c]) − N^{1/2} M N^{1/2}`` (``N = diag(n_c)``), and
* on vectors summing to zero within cell ``c``, as the scalar ``λ_c = d_c + M[c, c]``;

so, with ``E = exp(−S)``,

.. math::

    K_{ij} = \frac{E[c_i, c_j]}{\sqrt{n_{c_i} n_{c_j}}}
             + [c_i = c_j]\, e^{-λ_c} \left(δ_{ij} - \frac{1}{n_c}\right).

Normalised, ``K̂ = A + B``: a *cell part* ``A_ij = Â[c_i, c_j]`` (rank ≤ C, what a machine shares
with its type and rack) and an *individual part* ``B_ij = [c_i = c_j] b_c (δ_ij − 1/n_c)`` (what
is its own). Only a ``C × C`` matrix exponential is needed (C = number of cells, a few dozen
even for thousands of machines), and it is differentiable, so the edge weights are learned by
marginal likelihood.

**Job classes.** ``C_ρ(c, c') = ρ + (1 − ρ)[c = c']``: the speed of one machine for two job
classes is correlated by ``ρ`` (learned).

**Full covariance** of the latent relative speed ``f(m, c, τ)``:

.. math::

    k = σ_s^2 \left[ A(m, m')\, C_ρ(c, c') + B(m, m') \right]
        + σ_d^2\, K̂(m, m')\, e^{-|τ - τ'| / ℓ}

— a static graph × class part and a temporal random-walk (OU, Matérn-½) part for drift. The
class kernel multiplies the cell part only: a per-machine, per-class effect would need a
machine-sized state for every class and is too sparse to learn; what a class can do differently
is run slower on a whole GPU type or rack (e.g. a performance model that is off for it).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Literal, TypeVar

import gpytorch
import torch
from gpytorch.constraints import Interval
from torch import Tensor

from slurm_rl.core import Cluster

MACHINE, JOB_CLASS, TIME = 0, 1, 2  # the input columns
Component = Literal["full", "cell", "individual"]
_DTYPE = torch.float64
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class MachineGraph:
    """The cells of a cluster's machine graph (see the module docstring)."""

    cell_of: Tensor  # (M,) long: each machine's cell
    cell_type: Tensor  # (C,) long
    cell_group: Tensor  # (C,) long, -1 when the cell's machines have no host group
    cell_size: Tensor  # (C,) float
    type_size: Tensor  # (T,) float: machines per GPU type
    group_size: Tensor  # (G,) float: machines per host group

    @classmethod
    def from_cluster(cls, cluster: Cluster) -> MachineGraph:
        types = _ids(n.gpu_type.lower() for n in cluster.nodes)
        groups = _ids(n.host_group for n in cluster.nodes if n.host_group)
        keys = [
            (types[n.gpu_type.lower()], groups.get(n.host_group, -1) if n.host_group else -1)
            for n in cluster.nodes
        ]
        cells = _ids(keys)
        cell_of = torch.tensor([cells[k] for k in keys], dtype=torch.long)
        ordered = sorted(cells, key=cells.__getitem__)
        return cls(
            cell_of=cell_of,
            cell_type=torch.tensor([k[0] for k in ordered], dtype=torch.long),
            cell_group=torch.tensor([k[1] for k in ordered], dtype=torch.long),
            cell_size=torch.bincount(cell_of, minlength=len(cells)).to(_DTYPE),
            type_size=_counts([k[0] for k in keys], len(types)),
            group_size=_counts([k[1] for k in keys if k[1] >= 0], len(groups)),
        )

    @property
    def num_machines(self) -> int:
        return int(self.cell_of.numel())

    @property
    def num_cells(self) -> int:
        return int(self.cell_size.numel())

    def type_mask(self) -> Tensor:
        """``[t_c = t_{c'}] / (N_t − 1)`` over cell pairs."""
        same = self.cell_type[:, None] == self.cell_type[None, :]
        norm = (self.type_size[self.cell_type] - 1.0).clamp(min=1.0)
        return same.to(_DTYPE) / norm[:, None]

    def group_mask(self) -> Tensor:
        """``[g_c = g_{c'} ≠ none] / (N_g − 1)`` over cell pairs."""
        grouped = self.cell_group >= 0
        same = (self.cell_group[:, None] == self.cell_group[None, :]) & grouped[:, None]
        sizes = self.group_size[self.cell_group.clamp(min=0)] if self.group_size.numel() else None
        norm = (sizes - 1.0).clamp(min=1.0) if sizes is not None else torch.ones(self.num_cells)
        return same.to(_DTYPE) / norm.to(_DTYPE)[:, None]


def _ids(keys: Iterable[K]) -> dict[K, int]:
    """Dense ids in order of first appearance."""
    ids: dict[K, int] = {}
    for key in keys:
        ids.setdefault(key, len(ids))
    return ids


def _scalar_parameter() -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.zeros((), dtype=_DTYPE))


def _counts(values: list[int], size: int) -> Tensor:
    if not values:
        return torch.zeros(size, dtype=_DTYPE)
    return torch.bincount(torch.tensor(values, dtype=torch.long), minlength=size).to(_DTYPE)


@dataclass(frozen=True)
class DiffusionParts:
    """``K̂ = A + B`` in cell form: ``cell`` is ``Â`` (C × C), ``individual`` is ``b_c``."""

    cell: Tensor
    individual: Tensor
    size: Tensor
    cell_of: Tensor

    def between(self, cells1: Tensor, cells2: Tensor, same: Tensor, part: Component) -> Tensor:
        """Entries for machine pairs with cells ``cells1`` × ``cells2``; ``same`` marks pairs
        that are one machine. Written as products with one-hot cell matrices ``O``
        (``A = O₁ÂO₂ᵀ``, ``B = [same]·b − O₁ diag(b/n) O₂ᵀ``) so that gradients stay cheap."""
        c = self.size.numel()
        o1 = torch.nn.functional.one_hot(cells1, c).to(self.cell.dtype)
        o2 = torch.nn.functional.one_hot(cells2, c).to(self.cell.dtype)
        if part == "cell":
            return o1 @ self.cell @ o2.transpose(-1, -2)
        own = same.to(self.cell.dtype) * self.individual[cells1].unsqueeze(-1)
        own = own - (o1 * (self.individual / self.size)) @ o2.transpose(-1, -2)
        if part == "individual":
            return own
        return o1 @ self.cell @ o2.transpose(-1, -2) + own

    def dense(self, part: Component = "full") -> Tensor:
        """The M × M matrix of one part over all machines."""
        eye = torch.eye(self.cell_of.numel(), dtype=torch.bool)
        return self.between(self.cell_of, self.cell_of, eye, part)

    def machines(self, m1: Tensor, m2: Tensor, diag: bool, part: Component) -> Tensor:
        """Entries for machine indices ``m1`` × ``m2`` (or the diagonal, ``m1`` = ``m2``)."""
        c1, c2 = self.cell_of[m1], self.cell_of[m2]
        if diag:
            cell = self.cell[c1, c1]
            own = self.individual[c1] * (1.0 - 1.0 / self.size[c1])
            return {"cell": cell, "individual": own, "full": cell + own}[part]
        return self.between(c1, c2, m1.unsqueeze(-1) == m2.unsqueeze(-2), part)


class GraphDiffusionKernel(gpytorch.kernels.Kernel):  # type: ignore[misc]
    """The unit-diagonal diffusion kernel ``K̂`` on the machine graph (module docstring), over
    input column :data:`MACHINE`. Its learned parameters are the edge weights ``w_T, w_G``.

    ``component("cell")`` / ``component("individual")`` give kernels for ``A`` and ``B`` that
    share these parameters."""

    def __init__(
        self, graph: MachineGraph, type_weight: float = 0.5, group_weight: float = 0.5
    ) -> None:
        super().__init__(active_dims=torch.tensor([MACHINE]))
        self.graph = graph
        self._type_mask = graph.type_mask()
        self._group_mask = graph.group_mask()
        bounds = Interval(1e-3, 30.0)
        self.register_parameter("raw_type_weight", _scalar_parameter())
        self.register_parameter("raw_group_weight", _scalar_parameter())
        self.register_constraint("raw_type_weight", bounds)
        self.register_constraint("raw_group_weight", Interval(1e-3, 30.0))
        self.initialize(
            raw_type_weight=bounds.inverse_transform(torch.tensor(type_weight, dtype=_DTYPE)),
            raw_group_weight=bounds.inverse_transform(torch.tensor(group_weight, dtype=_DTYPE)),
        )

    @property
    def type_weight(self) -> Tensor:
        return self.raw_type_weight_constraint.transform(self.raw_type_weight)  # type: ignore[no-any-return]

    @property
    def group_weight(self) -> Tensor:
        return self.raw_group_weight_constraint.transform(self.raw_group_weight)  # type: ignore[no-any-return]

    def parts(self) -> DiffusionParts:
        """``Â`` and ``b`` from one C × C matrix exponential (module docstring)."""
        size = self.graph.cell_size
        weight = self.type_weight * self._type_mask + self.group_weight * self._group_mask
        degree = weight @ size - weight.diagonal()
        within = degree + weight.diagonal()  # λ_c
        root = size.sqrt()
        generator = torch.diag(within) - root[:, None] * weight * root[None, :]
        heat = torch.linalg.matrix_exp(-generator)
        own = torch.exp(-within)
        k_diag = heat.diagonal() / size + own * (1.0 - 1.0 / size)
        scale = (size * k_diag).rsqrt()
        cell = heat * scale[:, None] * scale[None, :]
        return DiffusionParts(cell, own / k_diag, size, self.graph.cell_of)

    def component(self, part: Component) -> GraphComponentKernel:
        return GraphComponentKernel(self, part)

    def forward(self, x1: Tensor, x2: Tensor, diag: bool = False, **params: object) -> Tensor:
        return _graph_forward(self.parts(), x1, x2, diag, "full")


class GraphComponentKernel(gpytorch.kernels.Kernel):  # type: ignore[misc]
    """The cell part ``A`` or individual part ``B`` of a :class:`GraphDiffusionKernel`,
    sharing its edge weights."""

    def __init__(self, graph_kernel: GraphDiffusionKernel, part: Component) -> None:
        super().__init__(active_dims=torch.tensor([MACHINE]))
        self.graph_kernel = graph_kernel
        self.part: Component = part

    def forward(self, x1: Tensor, x2: Tensor, diag: bool = False, **params: object) -> Tensor:
        return _graph_forward(self.graph_kernel.parts(), x1, x2, diag, self.part)


def _graph_forward(
    parts: DiffusionParts, x1: Tensor, x2: Tensor, diag: bool, part: Component
) -> Tensor:
    return parts.machines(x1[..., 0].long(), x2[..., 0].long(), diag, part)


class JobClassKernel(gpytorch.kernels.Kernel):  # type: ignore[misc]
    """``C_ρ(c, c') = ρ + (1 − ρ)[c = c']`` over input column :data:`JOB_CLASS`: compound
    symmetry, so a class never seen before is still correlated ``ρ`` with every known one."""

    def __init__(self, correlation: float = 0.9) -> None:
        super().__init__(active_dims=torch.tensor([JOB_CLASS]))
        bounds = Interval(0.0, 1.0)
        self.register_parameter("raw_correlation", _scalar_parameter())
        self.register_constraint("raw_correlation", bounds)
        raw = bounds.inverse_transform(torch.tensor(correlation, dtype=_DTYPE))
        self.initialize(raw_correlation=raw)

    @property
    def correlation(self) -> Tensor:
        return self.raw_correlation_constraint.transform(self.raw_correlation)  # type: ignore[no-any-return]

    def forward(self, x1: Tensor, x2: Tensor, diag: bool = False, **params: object) -> Tensor:
        rho = self.correlation
        if diag:
            return torch.ones(x1.shape[:-1], dtype=x1.dtype)
        same = (x1[..., 0].unsqueeze(-1) == x2[..., 0].unsqueeze(-2)).to(x1.dtype)
        return rho + (1.0 - rho) * same


@dataclass(frozen=True)
class Hyperparameters:
    """Initial values (and the centres of the weak priors the fit uses). Units: relative speed
    (1 = the nominal speed of the GPU type) and hours. The defaults match what machines do:
    a few per cent of spread between same-type GPUs, rare stragglers near 0.67, drift over
    hours, 2 % measurement noise."""

    mean: float = 0.97
    static_std: float = 0.10  # σ_s
    drift_std: float = 0.04  # σ_d
    lengthscale_h: float = 6.0  # ℓ
    noise_std: float = 0.02  # σ_n
    type_weight: float = 0.5  # w_T
    group_weight: float = 0.5  # w_G
    class_correlation: float = 0.9  # ρ


class RwgpPrior(gpytorch.Module):  # type: ignore[misc]
    """Everything learned about the prior: the composed kernel ``k`` (module docstring), the
    constant mean ``μ₀`` and the noise ``σ_n²``. Its ``state_dict`` is the model file."""

    def __init__(self, graph: MachineGraph, init: Hyperparameters | None = None) -> None:
        super().__init__()
        init = init or Hyperparameters()
        self.graph_kernel = GraphDiffusionKernel(graph, init.type_weight, init.group_weight)
        self.class_kernel = JobClassKernel(init.class_correlation)
        self.time_kernel = gpytorch.kernels.MaternKernel(
            nu=0.5, active_dims=torch.tensor([TIME]), lengthscale_constraint=Interval(0.1, 1000.0)
        )
        cell, own = self.graph_kernel.component("cell"), self.graph_kernel.component("individual")
        self.static = gpytorch.kernels.ScaleKernel(
            cell * self.class_kernel + own, outputscale_constraint=Interval(1e-6, 1.0)
        )
        self.drift = gpytorch.kernels.ScaleKernel(
            self.graph_kernel * self.time_kernel, outputscale_constraint=Interval(1e-6, 1.0)
        )
        self.covariance = self.static + self.drift
        self.mean = gpytorch.means.ConstantMean()
        self.register_parameter("raw_noise", _scalar_parameter())
        self.register_constraint("raw_noise", Interval(1e-6, 0.25))
        self.double()
        self._initialize(init)

    def _initialize(self, init: Hyperparameters) -> None:
        def value(x: float) -> Tensor:
            return torch.tensor(x, dtype=_DTYPE)

        self.time_kernel.lengthscale = value(init.lengthscale_h)
        self.static.outputscale = value(init.static_std**2)
        self.drift.outputscale = value(init.drift_std**2)
        self.mean.constant = value(init.mean)
        self.noise_variance = value(init.noise_std**2)

    @property
    def noise_variance(self) -> Tensor:
        return self.raw_noise_constraint.transform(self.raw_noise)  # type: ignore[no-any-return]

    @noise_variance.setter
    def noise_variance(self, value: Tensor) -> None:
        self.initialize(raw_noise=self.raw_noise_constraint.inverse_transform(value))

    def summary(self) -> dict[str, float]:
        """The hyperparameters in their natural units, for logs and reports."""
        values = {
            "mean": self.mean.constant,
            "static_std": self.static.outputscale.sqrt(),
            "drift_std": self.drift.outputscale.sqrt(),
            "lengthscale_h": self.time_kernel.lengthscale,
            "noise_std": self.noise_variance.sqrt(),
            "type_weight": self.graph_kernel.type_weight,
            "group_weight": self.graph_kernel.group_weight,
            "class_correlation": self.class_kernel.correlation,
        }
        return {name: float(v.detach()) for name, v in values.items()}
