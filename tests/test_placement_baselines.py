"""The heuristic placements, one preference each (slurm_rl/agents/placement_baselines.py).

A new heuristic is its class, its line in ``HEURISTICS`` and a test of its preference here
(CONTRIBUTING.md); ``test_every_heuristic_reaches_every_list`` then checks that every list of
names took it up."""

from __future__ import annotations

import pytest

from slurm_rl.agents import names
from slurm_rl.agents.base import PlacementContext
from slurm_rl.agents.placement_baselines import HEURISTICS
from slurm_rl.agents.registry import baseline_names, make_scheduler
from slurm_rl.core import Cluster, ClusterSnapshot, Job, Node
from slurm_rl.live_policy import check_name
from slurm_rl.policy import PlacementPolicy
from slurm_rl.simulator.perfmodel import datasheet_gpu_speeds
from slurm_rl.training.evaluate import PLACEMENTS

SPEED = {"A100": 2.0, "V100": 1.0}
# Node order: a cheap slow node with most free GPUs first, the fast expensive ones after it.
CLUSTER = Cluster("mixed", (Node("v100-0", "V100", 8, "rack-b", 1.0),
                            Node("a100-0", "A100", 8, "rack-a", 4.0),
                            Node("a100-1", "A100", 8, "rack-a", 4.0)))
FREE = (8, 6, 2)


def nodes_for(placement: PlacementPolicy, gpus: int = 2) -> tuple[str, ...]:
    job = Job("j", 0.0, gpus)
    chosen = placement.place(job, FREE, ClusterSnapshot(0.0, CLUSTER, FREE, (job,)))
    assert chosen is not None
    return chosen.nodes


def build(name: str, seed: int = 0) -> PlacementPolicy:
    return HEURISTICS[name](PlacementContext(SPEED, seed))


def test_first_fit_takes_the_first_node_that_fits() -> None:
    assert nodes_for(build("first-fit")) == ("v100-0",)


def test_best_fit_takes_the_fullest_node_that_fits() -> None:
    assert nodes_for(build("best-fit")) == ("a100-1",)
    assert nodes_for(build("best-fit"), gpus=4) == ("a100-0",)


def test_random_follows_its_seed() -> None:
    picks = {nodes_for(build("random", seed)) for seed in range(20)}
    assert len(picks) > 1
    assert nodes_for(build("random", 3)) == nodes_for(build("random", 3))


def test_fastest_gpu_prefers_the_fastest_type_then_the_fullest_node() -> None:
    assert nodes_for(build("fastest-gpu")) == ("a100-1",)


def test_fastest_gpu_knows_every_name_the_performance_model_takes_for_a_type() -> None:
    """Nodes reporting ``A100-80GB`` or ``V100M32`` (pai-2020, venus) were ranked as the
    slowest of all: only the five measured names had a speed."""
    cluster = Cluster("named", (Node("p100-0", "P100", 4), Node("v100-0", "V100M32", 4),
                                Node("a100-0", "A100-80GB", 4)))
    free = (4, 4, 4)
    job = Job("j", 0.0, 2)
    fastest = HEURISTICS["fastest-gpu"](PlacementContext(datasheet_gpu_speeds(), 0))
    chosen = fastest.place(job, free, ClusterSnapshot(0.0, cluster, free, (job,)))
    assert chosen is not None and chosen.nodes == ("a100-0",)
    chosen = fastest.place(job, (4, 4, 0), ClusterSnapshot(0.0, cluster, (4, 4, 0), (job,)))
    assert chosen is not None and chosen.nodes == ("v100-0",)


def test_cheapest_gpu_prefers_the_cheapest_gpu_hour() -> None:
    assert nodes_for(build("cheapest-gpu")) == ("v100-0",)


@pytest.mark.parametrize("name", list(HEURISTICS))
def test_every_heuristic_reaches_every_list(name: str) -> None:
    """Its name is its policy's, and the simulator, the daemon, the evaluation and the
    baselines of ``slurm-rl simulate`` all know it without another file naming it."""
    assert build(name).name == name
    assert names.PLACEMENTS[name].baseline and not names.is_learned(f"fifo+{name}")
    assert make_scheduler(f"qssf+{name}", SPEED).policy_id == f"qssf+{name}"
    check_name(f"multifactor+{name}")
    assert name in PLACEMENTS
    assert f"fifo+{name}" in baseline_names() or name == names.REFERENCE_PLACEMENT
    assert name in names.names_help()
