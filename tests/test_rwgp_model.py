"""The RWGP learns machine speeds: against the simulator's own fluctuation model, from gangs,
from runtimes alone, and it survives a save and load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from slurm_rl.agents.rwgp.model import RwgpModel
from slurm_rl.agents.rwgp.runtimes import RuntimeReference
from slurm_rl.core import Cluster, FinishedJob, Job, Node, Placement, SpeedObservation
from slurm_rl.simulator.fluctuation import FluctuationConfig, MachineFluctuation

FAMILIES = ("imagenet", "yolov3", "bert", "ncf")
TYPES = ("K80", "P100", "V100", "A100")
T0 = 1.5e9
NOISE = 0.02  # the engine's default observation noise (lognormal)


def rack_cluster(groups: int = 3, per_group: int = 8) -> Cluster:
    nodes = [
        Node(f"{t.lower()}-{g}-{i}", t, 8, f"{t}-rack{g}", 1.0)
        for t in TYPES for g in range(groups) for i in range(per_group)
    ]
    return Cluster("racks", tuple(nodes))


def engine_like_readings(
    cluster: Cluster, truth: np.ndarray, time: float, rng: np.random.Generator,
    jobs_per_node: int = 4,
) -> list[SpeedObservation]:
    """What the engine emits at a fluctuation step on a busy cluster: per running job, the
    slowest member's capped factor times 2 % lognormal noise. Each node runs
    ``jobs_per_node`` one-node jobs, and a quarter as many gangs of 2-4 nodes of one type."""
    names = [n.name for n in cluster.nodes]
    speed = np.minimum(1.0, truth)
    readings = [
        SpeedObservation(time, (names[j],), str(rng.choice(FAMILIES)),
                         float(speed[j] * np.exp(rng.normal(0.0, NOISE))))
        for j in range(len(names)) for _ in range(jobs_per_node)
    ]
    per_type = len(names) // len(TYPES)
    for _ in range(len(names) // 4):
        t, k = int(rng.integers(len(TYPES))), int(rng.integers(2, 5))
        members = rng.choice(np.arange(t * per_type, (t + 1) * per_type), k, replace=False)
        readings.append(SpeedObservation(
            time, tuple(names[j] for j in members), str(rng.choice(FAMILIES)),
            float(speed[members].min() * np.exp(rng.normal(0.0, NOISE)))))
    return readings


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_learns_the_simulators_machine_speeds(seed: int) -> None:
    """After 24 hourly fluctuation steps (about 100 readings per machine) the predicted speed
    ranks machines like the simulator's true current speed (Spearman >= 0.8) and the
    injected stragglers are exactly the slowest predicted."""
    torch.set_num_threads(1)
    cluster = rack_cluster()
    config = FluctuationConfig(straggler_share=0.04, seed=seed)
    truth = MachineFluctuation(len(cluster.nodes), config)
    rng = np.random.default_rng(seed)
    model = RwgpModel(cluster)
    for hour in range(1, 25):
        truth.advance_to(hour * 3600.0)
        model.observe(engine_like_readings(cluster, truth.factors, T0 + hour * 3600.0, rng))
        model.flush()  # a real run drains a burst over the next cycles; here, at once
        model.advance(T0 + hour * 3600.0)
    predicted = model.predict("imagenet").mean
    true_speed = np.minimum(1.0, truth.factors)  # what a job runs at (speed.SpeedModel.health)
    assert spearmanr(predicted, true_speed).statistic >= 0.8
    stragglers = truth.stragglers
    assert len(stragglers) >= 3
    assert set(np.argsort(predicted)[: len(stragglers)].tolist()) == set(stragglers)
    assert model.fits >= 2  # hyperparameters were learned on the way


def test_finds_a_straggler_seen_only_through_gangs() -> None:
    """Every reading is a 2-node gang (the pace of its slower member); the straggler is the one
    machine in every slow pair."""
    cluster = rack_cluster(groups=1, per_group=6)
    names = [n.name for n in cluster.nodes[:6]]
    slow = 3
    model = RwgpModel(cluster)
    rng = np.random.default_rng(0)
    for hour in range(12):
        readings = []
        for a in range(6):
            for b in range(a + 1, 6):
                pace = 0.67 if slow in (a, b) else 1.0
                readings.append(SpeedObservation(T0 + hour * 3600.0, (names[a], names[b]), "bert",
                                                 pace * float(np.exp(rng.normal(0.0, NOISE)))))
        model.observe(readings)
    predicted = model.predict("bert").mean[:6]
    assert int(np.argmin(predicted)) == slow
    assert predicted[slow] == pytest.approx(0.67, abs=0.06)
    assert np.delete(predicted, slow).min() > 0.9


def test_save_and_load_keep_hyperparameters_and_belief(tmp_path: Path) -> None:
    cluster = rack_cluster(groups=1, per_group=4)
    model = RwgpModel(cluster)
    name = cluster.nodes[2].name
    model.observe([SpeedObservation(T0 + i, (name,), "ncf", 0.6) for i in range(200)])
    path = tmp_path / "rwgp.pt"
    model.save(path, with_belief=True)
    loaded = RwgpModel.load(path, cluster)
    assert loaded.prior.summary() == pytest.approx(model.prior.summary())
    assert np.allclose(loaded.predict("ncf").mean, model.predict("ncf").mean)
    with pytest.raises(ValueError, match="saved for 16 machines"):
        RwgpModel.load(path, rack_cluster(groups=1, per_group=2))


def test_runtime_readings_find_a_slow_machine_without_measured_speeds() -> None:
    """Live, only runtimes come back: jobs of one class vary 30 % in length, and one machine
    runs everything 1.5x slower; after enough jobs it is predicted slowest."""
    cluster = rack_cluster(groups=1, per_group=4)
    names = [n.name for n in cluster.nodes[:4]]
    reference, model = RuntimeReference(), RwgpModel(cluster)
    rng = np.random.default_rng(0)
    now = T0
    for i in range(400):
        node = i % 4
        runtime = 3600.0 * float(np.exp(rng.normal(0.0, 0.3))) * (1.5 if node == 1 else 1.0)
        job = Job(f"j{i}", now, 1, model_family="bert")
        done = FinishedJob(job, now, now + runtime, Placement((names[node],), (1,)))
        readings, variances = reference.readings([done], cluster)
        if readings:
            model.observe(readings, variances)
        now += 600.0
    predicted = model.predict("bert").mean[:4]
    assert int(np.argmin(predicted)) == 1
    assert predicted[1] < np.delete(predicted, 1).min() - 0.1


def test_a_changed_cluster_keeps_what_was_learned_of_the_nodes_it_still_has() -> None:
    """A node leaves and another joins (live: taken out of the partition, or added): the
    straggler is still known by name, the newcomer starts at the prior, and the
    hyperparameters, clock and counts carry over."""
    cluster = rack_cluster(groups=1, per_group=4)
    model = RwgpModel(cluster)
    slow = cluster.nodes[2].name
    model.observe([SpeedObservation(T0 + i, (slow,), "ncf", 0.6) for i in range(200)])
    model.flush()
    newcomer = Node("a100-9-0", "A100", 8, "A100-rack9", 1.0)
    changed = Cluster("racks", (*cluster.nodes[1:], newcomer))
    carried = model.carried_to(changed)
    before, after = model.predict("ncf").mean, carried.predict("ncf").mean
    assert after[changed.index(slow)] == pytest.approx(before[cluster.index(slow)], abs=0.02)
    assert after[changed.index(slow)] < 0.75
    assert after[changed.index(newcomer.name)] > 0.9
    assert carried.prior.summary() == pytest.approx(model.prior.summary())
    assert (carried.readings_seen, carried.fits, carried.origin) == (
        model.readings_seen, model.fits, model.origin)
    assert len(carried.window) == len(model.window)
