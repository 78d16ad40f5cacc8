"""RWGP placement: candidate node sets, their scores and features, and the policy in the
simulator (both action modes) with real machine fluctuation."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_rl.agents.ordering_baselines import Fifo
from slurm_rl.agents.placement_baselines import FirstFit
from slurm_rl.agents.rwgp.placement import PlacementConfig, RwgpPlacement
from slurm_rl.core import (
    Cluster,
    ClusterSnapshot,
    Job,
    Node,
    SpeedObservation,
    placement_fits_shape,
)
from slurm_rl.loop import run_loop
from slurm_rl.scheduler import Scheduler
from slurm_rl.simulator.engine import Simulation
from slurm_rl.simulator.fluctuation import FluctuationConfig, MachineFluctuation
from slurm_rl.simulator.sim_config import SimConfig
from slurm_rl.simulator.slurm_emulation import valid_pin
from slurm_rl.simulator.speed import SpeedModel
from slurm_rl.simulator.world import SimActuator, TraceSource
from tests.sim_doubles import SimplePerformance

SPEED = {"A100": 2.0, "V100": 1.0, "T4": 0.6}


def mixed_cluster() -> Cluster:
    nodes = [Node(f"v100-{i}", "V100", 8, "rack-v", 2.5) for i in range(4)]
    nodes += [Node(f"a100-{i}", "A100", 8, "rack-a", 3.0) for i in range(2)]
    nodes += [Node(f"t4-{i}", "T4", 4, "rack-t", 0.35) for i in range(2)]
    return Cluster("mixed", tuple(nodes))


def snapshot(cluster: Cluster, free: list[int] | None = None, time: float = 0.0,
             observations: tuple[SpeedObservation, ...] = ()) -> ClusterSnapshot:
    free = free if free is not None else [n.gpus for n in cluster.nodes]
    return ClusterSnapshot(time, cluster, tuple(free), (), observations=observations)


def taught(policy: RwgpPlacement, cluster: Cluster, slow: dict[str, float]) -> ClusterSnapshot:
    """Show the policy an hour of one-node readings: ``slow`` machines at their speed, the
    rest healthy."""
    readings = tuple(
        SpeedObservation(60.0 * k, (n.name,), "bert", slow.get(n.name, 1.0))
        for k in range(30) for n in cluster.nodes
    )
    view = snapshot(cluster, time=1800.0, observations=readings)
    policy.observe(view)
    return view


def test_avoids_a_machine_it_has_learned_is_slow() -> None:
    cluster = mixed_cluster()
    policy = RwgpPlacement(SPEED)
    view = taught(policy, cluster, {"v100-0": 0.6})
    job = Job("j", 0.0, 4, gpu_type="V100", model_family="bert")
    placement = policy.place(job, view.free_gpus, view)
    assert placement is not None and placement.nodes[0] not in ("v100-0",)
    assert FirstFit().place(job, view.free_gpus, view).nodes == ("v100-0",)  # type: ignore[union-attr]


def test_candidates_consolidated_first_then_spread_with_features() -> None:
    cluster = mixed_cluster()
    policy = RwgpPlacement(SPEED, PlacementConfig(exclusion_ratio=0.0))  # offer every set
    view = taught(policy, cluster, {"v100-2": 0.5})
    free = [6, 6, 6, 6, 0, 0, 4, 4]
    found = policy.candidates(Job("j", 0.0, 6, model_family="bert"), free, view)
    kinds = [c.consolidated for c in found]
    assert kinds[0] and not kinds[-1] and kinds == sorted(kinds, reverse=True)
    for c in found:
        assert c.placement.num_gpus == 6 and c.std > 0 and c.price > 0 and c.pace > 0
        shares = zip(c.placement.nodes, c.placement.gpus, strict=True)
        assert all(free[cluster.index(n)] >= g for n, g in shares)
    on_slow = [c for c in found if "v100-2" in c.placement.nodes]
    assert on_slow and all(c.mean < 0.6 for c in on_slow)
    best = min(found, key=lambda c: c.score)
    assert best.consolidated and "v100-2" not in best.placement.nodes


def test_a_gang_is_scored_by_its_slowest_member() -> None:
    """16 V100 GPUs with free = 8, 8, 4, 4: the two-node set holds the straggler and runs at
    its pace, so three healthy nodes (one more spread step) win."""
    cluster = mixed_cluster()
    policy = RwgpPlacement(SPEED)
    view = taught(policy, cluster, {"v100-0": 0.5})
    job = Job("j", 0.0, 16, gpu_type="V100", model_family="bert")
    found = policy.candidates(job, [8, 8, 4, 4, 8, 8, 4, 4], view)
    best = min(found, key=lambda c: c.score)
    assert best.spread == 2 and "v100-0" not in best.placement.nodes
    assert best.mean > 0.9
    pair = [c for c in found if c.spread == 1]
    assert pair and "v100-0" in pair[0].placement.nodes and pair[0].mean < 0.6


def test_fee_weight_trades_speed_for_price() -> None:
    """A100: 2x the speed for 3.0/h; T4: 0.6x for 0.35/h. Fee per unit of work is far lower
    on T4, so a large enough λ moves a 4-GPU job there."""
    cluster = mixed_cluster()
    free = [0, 0, 0, 0, 8, 8, 4, 4]
    job = Job("j", 0.0, 4, model_family="bert")
    for fee_weight, wanted in ((0.0, "A100"), (1.0, "T4")):
        policy = RwgpPlacement(SPEED, PlacementConfig(fee_weight=fee_weight))
        view = taught(policy, cluster, {})
        placement = policy.place(job, free, view)
        assert placement is not None
        assert cluster.nodes[cluster.index(placement.nodes[0])].gpu_type == wanted


class PoorScaling:
    """A spread model in which a second node halves the throughput."""

    def spread_factor(self, family: str, gpus_per_node: tuple[int, ...],
                      same_host_group: bool = True) -> float:
        return 0.5 if len(gpus_per_node) > 1 else 1.0


def test_the_spread_model_decides_between_spread_and_a_slower_type() -> None:
    """8 GPUs: two V100 nodes with 4 free each, or one whole T4 node (0.6x). With the default
    penalty (0.8 for two nodes) the V100 pair is faster; with a model that halves a spread
    job's throughput, the T4 node is."""
    cluster = Cluster("two", (Node("v0", "V100", 8, "r", 2.5), Node("v1", "V100", 8, "r", 2.5),
                              Node("t0", "T4", 8, "t", 0.35)))
    job = Job("j", 0.0, 8, model_family="bert")
    free = [4, 4, 8]
    chosen = []
    for spread in (None, PoorScaling()):
        policy = RwgpPlacement(SPEED, spread_model=spread)
        view = taught(policy, cluster, {})
        placement = policy.place(job, free, view)
        assert placement is not None
        chosen.append(placement.nodes)
    assert set(chosen[0]) == {"v0", "v1"} and chosen[1] == ("t0",)


def test_fixed_shapes_and_type_constraints_are_honoured() -> None:
    cluster = mixed_cluster()
    policy = RwgpPlacement(SPEED)
    view = taught(policy, cluster, {})
    jobs = [
        Job("a", 0.0, 8, num_nodes=2, gpus_per_node=4, model_family="bert"),
        Job("b", 0.0, 6, num_nodes=3, model_family="bert"),
        Job("c", 0.0, 4, gpu_type="t4", model_family="bert"),
    ]
    for job in jobs:
        found = policy.candidates(job, view.free_gpus, view)
        assert found
        for c in found:
            assert placement_fits_shape(job, c.placement) and valid_pin(job, c.placement, cluster)
    assert policy.place(Job("d", 0.0, 12, gpu_type="T4"), view.free_gpus, view) is None


def _workload(count: int, seed: int) -> list[Job]:
    rng = np.random.default_rng(seed)
    submits = np.cumsum(rng.exponential(450.0, count))
    return [
        Job(f"j{i}", float(t), int(rng.choice([1, 1, 2, 4, 8, 16])), time_limit=1e6,
            model_family="bert", oracle_duration=float(rng.uniform(1800.0, 4 * 3600.0)))
        for i, t in enumerate(submits)
    ]


def _replay(placement: RwgpPlacement | FirstFit, mode: str,
            fluctuation: MachineFluctuation) -> Simulation:
    cluster = Cluster("racks", tuple(
        Node(f"n{i:02d}", "V100", 8, f"rack{i // 8}", 2.5) for i in range(32)))
    speed = SpeedModel(cluster, SimplePerformance(), "V100", fluctuation)  # type: ignore[arg-type]
    # with the simulator's pace readings, which this test checks it learns from (live it
    # learns from finished jobs' run times: slurm_rl/agents/rwgp/runtimes.py)
    sim = Simulation(cluster, _workload(600, 0), speed, fluctuation,
                     SimConfig(mode=mode, cycle_s=10.0, observations=True))  # type: ignore[arg-type]
    run_loop(TraceSource(sim), Scheduler(Fifo(), placement), SimActuator(sim))
    return sim


@pytest.mark.parametrize("mode", ["direct", "slurm"])
def test_in_the_simulator_it_learns_the_stragglers_and_runs_less_on_them(mode: str) -> None:
    config = FluctuationConfig(straggler_share=0.1, straggler_factor=0.5, seed=4)
    policy = RwgpPlacement(SPEED)
    ours = _replay(policy, mode, MachineFluctuation(32, config))
    fluctuation = MachineFluctuation(32, config)
    baseline = _replay(FirstFit(), mode, fluctuation)
    stragglers = fluctuation.stragglers
    for sim in (ours, baseline):
        assert sim.unfinished_jobs == 0 and sim.rejected_actions == 0
    assert policy.model is not None
    predicted = policy.model.predict("bert").mean
    # It learns a machine only from the jobs it ran there, and a straggler it was steered off
    # early (another node looked better) may keep the prior. Which one that is depends on the
    # last bits of torch's CPU kernels (the same replay differs between AVX2 and the generic
    # dispatch, ATEN_CPU_CAPABILITY=default), so the test asks what holds on either: no healthy
    # node is believed slow, and all stragglers but at most one are.
    believed_slow = {i for i, mean in enumerate(predicted) if mean < 0.75}
    assert believed_slow <= set(stragglers)
    assert len(believed_slow) >= len(stragglers) - 1

    def straggler_share(sim: Simulation) -> float:
        names = {f"n{i:02d}" for i in stragglers}
        total = sum(o.gpu_seconds["V100"] for o in sim.outcomes)
        on = sum(o.gpu_seconds["V100"] for o in sim.outcomes if names & set(o.nodes))
        return on / total

    # Its share of GPU time on stragglers is about half first-fit's: 0.060 against 0.118 on
    # an AVX-512 CPU (ratio 0.51, session 38), under 0.5 on the AVX2 machines before; the
    # bound leaves room for the kernels' last bits, as above.
    assert straggler_share(ours) < 0.6 * straggler_share(baseline)
    jct = [np.mean([o.jct for o in sim.outcomes]) for sim in (ours, baseline)]
    assert jct[0] < jct[1]
