"""RWGP maths: the cell formula is the diffusion kernel, the state-space prior is the kernel,
and the online update is the exact GP posterior."""

from __future__ import annotations

import pytest
import torch

from slurm_rl.agents.rwgp.belief import Batch, SpeedBelief, StatePrior, gang_readings
from slurm_rl.agents.rwgp.kernels import Hyperparameters, MachineGraph, RwgpPrior
from slurm_rl.agents.rwgp.placement import gaussian_min
from slurm_rl.core import Cluster, Node


def crossed_cluster() -> Cluster:
    """Types crossed with host groups, uneven sizes, and two machines without a group."""
    nodes = [Node(f"a{i}", "A100", 8, f"rack{i % 3}") for i in range(7)]
    nodes += [Node(f"v{i}", "V100", 4, f"rack{i % 2}") for i in range(5)]
    nodes += [Node("t0", "T4", 4), Node("t1", "T4", 4)]
    return Cluster("crossed", tuple(nodes))


def brute_force_diffusion(cluster: Cluster, w_type: float, w_group: float) -> torch.Tensor:
    nodes = cluster.nodes
    n = len(nodes)
    types = [x.gpu_type for x in nodes]
    groups = [x.host_group for x in nodes]
    weight = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            if types[i] == types[j]:
                weight[i, j] += w_type / max(types.count(types[i]) - 1, 1)
            if groups[i] and groups[i] == groups[j]:
                weight[i, j] += w_group / max(groups.count(groups[i]) - 1, 1)
    laplacian = torch.diag(weight.sum(1)) - weight
    heat = torch.linalg.matrix_exp(-laplacian)
    scale = heat.diagonal().rsqrt()
    normalised: torch.Tensor = heat * scale[:, None] * scale[None, :]
    return normalised


@pytest.mark.parametrize(("w_type", "w_group"), [(0.5, 0.5), (3.0, 0.2), (0.01, 8.0)])
def test_cell_formula_is_the_diffusion_kernel(w_type: float, w_group: float) -> None:
    cluster = crossed_cluster()
    prior = RwgpPrior(MachineGraph.from_cluster(cluster),
                      Hyperparameters(type_weight=w_type, group_weight=w_group))
    exact = brute_force_diffusion(cluster, w_type, w_group)
    ours = prior.graph_kernel.parts().dense()
    assert torch.allclose(ours, exact, atol=1e-8)
    machines = torch.arange(len(cluster.nodes), dtype=torch.float64)[:, None]
    assert torch.allclose(prior.graph_kernel(machines).to_dense(), exact, atol=1e-8)


def test_state_space_prior_is_the_kernel() -> None:
    cluster = crossed_cluster()
    prior = RwgpPrior(MachineGraph.from_cluster(cluster))
    belief = SpeedBelief(StatePrior.from_prior(prior), 0.0)
    belief.add_slot()
    belief.add_slot()
    machines = torch.tensor([0, 1, 3, 7, 8, 12, 0, 7])
    slots = torch.tensor([0, 0, 1, 0, 1, 1, 1, 1])
    x = torch.stack([machines.double(), slots.double(), torch.zeros(8, dtype=torch.float64)], -1)
    with torch.no_grad():
        kernel = prior.covariance(x).to_dense()
    assert torch.allclose(belief.covariance(machines, slots), kernel, atol=1e-10)


def test_online_update_is_the_exact_gp_posterior() -> None:
    """Kalman steps through time with batches of one-machine readings give the same posterior
    as GP regression with the composed GPyTorch kernel over all of them at once."""
    cluster = crossed_cluster()
    prior = RwgpPrior(MachineGraph.from_cluster(cluster),
                      Hyperparameters(lengthscale_h=3.0, drift_std=0.05))
    belief = SpeedBelief(StatePrior.from_prior(prior), 0.0)
    belief.add_slot()
    belief.add_slot()
    gen = torch.Generator().manual_seed(1)
    rows: list[tuple[int, int, float, float]] = []
    for time_h in (0.0, 1.5, 4.0):
        machines = torch.randint(0, len(cluster.nodes), (5,), generator=gen)
        slots = torch.randint(0, 2, (5,), generator=gen)
        speeds = 0.9 + 0.1 * torch.rand(5, generator=gen, dtype=torch.float64)
        belief.advance(time_h)
        belief.condition(Batch(machines[:, None], torch.ones(5, 1, dtype=torch.float64), slots,
                               speeds, torch.full((5,), 4e-4, dtype=torch.float64)))
        rows += [(int(m), int(c), time_h, float(y))
                 for m, c, y in zip(machines, slots, speeds, strict=True)]
    belief.advance(6.0)
    data = torch.tensor(rows, dtype=torch.float64)
    x, y = data[:, :3], data[:, 3]
    test_m = torch.arange(len(cluster.nodes))
    test_x = torch.stack([test_m.double(), torch.ones_like(test_m, dtype=torch.float64),
                          torch.full_like(test_m, 6.0, dtype=torch.float64)], -1)
    with torch.no_grad():
        k_xx = prior.covariance(x).to_dense() + 4e-4 * torch.eye(len(rows), dtype=torch.float64)
        k_sx = prior.covariance(test_x, x).to_dense()
        k_ss = prior.covariance(test_x, diag=True)
        mu0 = float(prior.mean.constant)
        solve = torch.linalg.solve(k_xx, torch.cat([(y - mu0)[:, None], k_sx.T], 1))
        exact_mean = mu0 + k_sx @ solve[:, 0]
        exact_var = k_ss - (k_sx * solve[:, 1:].T).sum(1)
    mean, var = belief.marginals(test_m, torch.ones_like(test_m))
    assert torch.allclose(mean, exact_mean, atol=1e-8)
    assert torch.allclose(var, exact_var, atol=1e-9)


def test_gang_readings_blame_the_known_slow_member_and_wait_when_unsure() -> None:
    """Three gangs read at pace 0.7, 0.5 and 1.0: (a) one member is known to be slow, (b)
    two unknown members, one of which must be slow, (c) two unknown members, both fast."""
    known, unknown = 1e-4, 0.01
    mean = torch.tensor([[1.0, 0.7, 1.0], [0.97, 0.97, 0.0], [0.97, 0.97, 0.0]],
                        dtype=torch.float64)
    var = torch.tensor([[known] * 3, [unknown, unknown, 1.0], [unknown, unknown, 1.0]],
                       dtype=torch.float64)
    valid = torch.tensor([[True, True, True], [True, True, False], [True, True, False]])
    speeds = torch.tensor([0.7, 0.5, 1.0], dtype=torch.float64)
    noise = torch.full((3,), 4e-4, dtype=torch.float64)
    out = gang_readings(mean, var, valid, speeds, noise)
    assert out.settled.tolist() == [True, False, True]
    # (a): the slow member gets a reading near 0.7; the fast ones learn little
    assert float(out.speed[0, 1]) == pytest.approx(0.7, abs=0.02)
    assert float(out.noise[0, 1]) == pytest.approx(4e-4)  # as precise as the reading
    assert min(float(out.noise[0, 0]), float(out.noise[0, 2])) > 100 * known
    # (b): "one of the two" is no Gaussian fact about either: nothing to take
    assert torch.isinf(out.noise[1, :2]).all()
    # (c): both learn they are at least about 1.0
    assert torch.isfinite(out.noise[2, :2]).all() and (out.speed[2, :2] > 0.97).all()


def test_gaussian_min_matches_sampling() -> None:
    mean, std = [0.95, 0.9, 1.0], [0.05, 0.02, 0.1]
    m, s = gaussian_min(mean, std)
    draws = torch.randn(200_000, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    samples = (torch.tensor(mean) + torch.tensor(std) * draws).min(1).values
    assert m == pytest.approx(float(samples.mean()), abs=2e-3)
    assert s == pytest.approx(float(samples.std()), rel=0.05)
    assert gaussian_min(mean[:1], std[:1]) == (0.95, 0.05)
