"""slurm_rl.room: ``Room.could_fit`` says no only when no node set fits the job's shape, so
the scheduler's walk may skip the placement then. Checked against a brute force over every
subset of a small cluster's nodes, and against each heuristic placement."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_rl.agents.base import PlacementContext
from slurm_rl.agents.placement_baselines import HEURISTICS
from slurm_rl.agents.rwgp.placement import PlacementConfig, RwgpPlacement
from slurm_rl.core import Cluster, ClusterSnapshot, Job, Node
from slurm_rl.room import Room

TYPES = ("v100", "k80")


@st.composite
def clusters_and_free(draw: st.DrawFn) -> tuple[Cluster, list[int]]:
    sizes = draw(st.lists(st.tuples(st.sampled_from(TYPES), st.sampled_from((1, 2, 4, 8))),
                          min_size=1, max_size=7))
    nodes = tuple(Node(f"n{i}", gpu_type, gpus, price_per_gpu_hour=float(i))
                  for i, (gpu_type, gpus) in enumerate(sizes))
    free = [draw(st.integers(0, node.gpus)) for node in nodes]
    return Cluster("c", nodes), free


jobs = st.builds(
    Job,
    job_id=st.just("1"),
    submit_time=st.just(0.0),
    num_gpus=st.integers(1, 20),
    num_nodes=st.none() | st.integers(1, 5),
    gpus_per_node=st.none() | st.integers(1, 8),
    gpu_type=st.none() | st.sampled_from((*TYPES, "V100", "a100")),
    time_limit=st.none() | st.sampled_from((3_600.0, 7 * 86_400.0)),
)


def a_node_set_fits(job: Job, cluster: Cluster, free: list[int]) -> bool:
    """Whether some subset of the job's nodes can hold a placement that fits its shape."""
    allowed = [i for i, count in enumerate(free) if count > 0 and (
        not job.gpu_type or cluster.nodes[i].gpu_type == job.gpu_type.lower())]
    for size in range(1, len(allowed) + 1):
        for chosen in combinations(allowed, size):
            counts = [free[i] for i in chosen]
            if job.num_nodes is not None and size != job.num_nodes:
                continue
            if job.gpus_per_node is not None:
                if min(counts) >= job.gpus_per_node and size * job.gpus_per_node == job.num_gpus:
                    return True
            elif size <= job.num_gpus <= sum(counts):
                return True
    return False


@given(clusters_and_free(), jobs)
def test_no_room_means_no_node_set_fits(cluster_free: tuple[Cluster, list[int]],
                                        job: Job) -> None:
    cluster, free = cluster_free
    if not Room(cluster, free).could_fit(job):
        assert not a_node_set_fits(job, cluster, free)


@given(clusters_and_free(), jobs)
def test_no_room_means_every_heuristic_refuses(cluster_free: tuple[Cluster, list[int]],
                                               job: Job) -> None:
    cluster, free = cluster_free
    snapshot = ClusterSnapshot(time=0.0, cluster=cluster, free_gpus=tuple(free), pending=())
    room = Room(cluster, free)
    for make in HEURISTICS.values():
        placement = make(PlacementContext({"v100": 2.0, "k80": 1.0}, 0)).place(job, free,
                                                                               snapshot)
        # (a heuristic honours fixed_shape, even for a request whose counts disagree)
        assert placement is None or room.could_fit(job)


@given(clusters_and_free(), jobs, st.data())
def test_no_room_off_the_barred_nodes_means_no_node_set_fits_there(
        cluster_free: tuple[Cluster, list[int]], job: Job, data: st.DataObject) -> None:
    cluster, free = cluster_free
    barred = tuple(data.draw(st.sets(st.sampled_from([n.name for n in cluster.nodes]))))
    if not Room(cluster, free).could_fit(job, barred):
        left = [0 if node.name in barred else count
                for node, count in zip(cluster.nodes, free, strict=True)]
        assert not a_node_set_fits(job, cluster, left)


@settings(max_examples=40, deadline=None)
@given(clusters_and_free(), jobs)
def test_rwgp_keeps_its_promise_never_to_place_on_its_barred_nodes(
        cluster_free: tuple[Cluster, list[int]], job: Job) -> None:
    # the shipped chooser's rules: K80s (a fifth of a V100) are slow for gangs and long jobs
    cluster, free = cluster_free
    snapshot = ClusterSnapshot(time=0.0, cluster=cluster, free_gpus=tuple(free), pending=(job,))
    rwgp = RwgpPlacement({"v100": 1.0, "k80": 0.2}, PlacementConfig(exclusion_min_limit_s=86_400.0))
    rwgp.observe(snapshot)
    barred = rwgp.barred_nodes(job, snapshot)
    placement = rwgp.place(job, free, snapshot)
    assert placement is None or not set(placement.nodes) & set(barred)
    assert placement is None or Room(cluster, free).could_fit(job, barred)


def test_a_change_is_seen_after_changed() -> None:
    cluster = Cluster("c", (Node("a", "v100", 4), Node("b", "v100", 4)))
    free = [4, 4]
    room = Room(cluster, free)
    job = Job("1", 0.0, 8)
    assert room.could_fit(job)
    free[0] = 0
    room.changed()
    assert not room.could_fit(job)
