"""Episodes in parallel worker processes (inline with one worker), reproducibly.

Each worker loads the trace and the cluster once. An episode's outcome depends only on the
weights, the rollout configuration and its :class:`~.rollout.EpisodeSpec` (which carries its
seed), and results come back in submission order, so a run gives the same episodes with any
number of workers.

Two backends run the workers: local processes (``processes``, the standard library's pool) and
Ray actors (``ray``, when Ray is installed: the same rollouts on a Ray cluster, or on this
machine's cores when no cluster is configured). ``auto`` takes Ray when it can be imported.
Either way each worker holds one :class:`World` and episodes come back in submission order.
"""

from __future__ import annotations

import copy
import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import torch
from torch import Tensor

from slurm_rl.agents.dual.network import DualNetwork, NetworkConfig
from slurm_rl.errors import InputError
from slurm_rl.fairness import LONGEST_HOLD_S
from slurm_rl.offered_load import load_points
from slurm_rl.scenario import Scenario, build_simulation
from slurm_rl.simulator.cluster_spec import ClusterSpec, load_cluster_spec
from slurm_rl.simulator.sim_config import SimConfig
from slurm_rl.simulator.slurm_emulation import PriorityHolder
from slurm_rl.traces import Trace, parse_window, window
from slurm_rl.training.actors import RolloutConfig
from slurm_rl.training.rollout import Episode, EpisodeSpec, run_episode
from slurm_rl.workloads import open_workload

LoadBasis = Literal["window", "episode"]
LOAD_BASES: tuple[LoadBasis, ...] = ("window", "episode")


@dataclass(frozen=True)
class WorldSpec:
    """Where episodes happen: a trace (name or path) on a cluster spec, in slurm mode.

    ``loads``: the offered loads an episode may be played at (its
    :class:`~.rollout.EpisodeSpec` names one). The cluster is scaled to each as the load sweep
    scales it (:func:`slurm_rl.offered_load.load_points`: every node group by one factor, the
    GPU-type mix kept). ``load_basis`` says whose offered load sets the factor:

    * ``window``: ``load_window``'s jobs, the training window. An episode at load 0.85 runs on
      the cluster that makes that whole window a 0.85 load, so its own few days are as busy
      as the window is there: busier or quieter than 0.85 by the days drawn.
    * ``episode``: the episode's own jobs, warm-up included, as the load sweep scales a
      held-out window by that window's own load. An episode at 0.85 is a 0.85 load, on a
      cluster as small as its days' demand makes it (a quiet month's sweep runs on a cluster
      a quarter of the spec's size; docs/training.md, "Session 32")."""

    trace: str
    cluster: str
    cycle_s: float = 10.0
    dispatch: bool = False  # jobs are held up to LONGEST_HOLD_S (the policies rank so too)
    loads: tuple[float, ...] = ()
    load_window: str | None = None
    load_basis: LoadBasis = "window"
    # a daemon's world (a retrain's episodes): its hold cap (defer_cap_s; None: by dispatch),
    # deferral window, one-GPU-type rule (not allow_mixed_gpu_types), the priorities its
    # actuator leaves within its limits and its moves a cycle (SimConfig's fields of the name)
    hold_cap: float | None = None
    defer_window_s: float = SimConfig.defer_window_s
    one_gpu_type: bool = True
    held_priorities: Callable[[], PriorityHolder] | None = field(default=None, compare=False)
    migrations_per_cycle: int | None = None

    @property
    def hold_cap_s(self) -> float:
        if self.hold_cap is not None:
            return self.hold_cap
        return LONGEST_HOLD_S if self.dispatch else SimConfig.hold_cap_s


@dataclass(frozen=True)
class World:
    trace: Trace
    spec: ClusterSpec
    gpu_speed: Mapping[str, float]
    cycle_s: float
    hold_cap_s: float = SimConfig.hold_cap_s
    scaled: Mapping[float, ClusterSpec] = field(default_factory=dict)  # by offered load
    load_basis: LoadBasis = "window"
    defer_window_s: float = SimConfig.defer_window_s
    one_gpu_type: bool = True
    held_priorities: Callable[[], PriorityHolder] | None = None
    migrations_per_cycle: int | None = None

    @classmethod
    def load(cls, world: WorldSpec) -> World:
        from slurm_rl.scenario import gpu_speed_table

        trace, spec = open_workload(world.trace), load_cluster_spec(world.cluster)
        scaled = scaled_specs(trace, spec, world) if world.load_basis == "window" else {}
        return cls(trace, spec, gpu_speed_table(), world.cycle_s, world.hold_cap_s, scaled,
                   world.load_basis, world.defer_window_s, world.one_gpu_type,
                   world.held_priorities, world.migrations_per_cycle)

    def scenario(self, spec: EpisodeSpec) -> Scenario:
        jobs = window(self.trace, spec.warmup_start, spec.end)
        config = SimConfig(mode="slurm", cycle_s=self.cycle_s, seed=spec.seed,
                           hold_cap_s=self.hold_cap_s, defer_window_s=self.defer_window_s,
                           one_gpu_type=self.one_gpu_type, held_priorities=self.held_priorities,
                           migrations_per_cycle=self.migrations_per_cycle)
        if spec.load is not None and self.load_basis == "episode":
            own = load_points(Scenario(self.spec, jobs, config), (spec.load,))[0]
            return own.scenario
        return Scenario(self.cluster_at(spec.load), jobs, config)

    def cluster_at(self, load: float | None) -> ClusterSpec:
        """The cluster spec scaled to offered load ``load`` (None: as specified)."""
        if load is None:
            return self.spec
        if load not in self.scaled:
            raise InputError(f"no cluster was scaled to load {load:g} (the world's loads: "
                             f"{', '.join(f'{x:g}' for x in self.scaled) or 'none'})")
        return self.scaled[load]


def scaled_specs(trace: Trace, spec: ClusterSpec, world: WorldSpec) -> dict[float, ClusterSpec]:
    """``spec`` scaled to each of ``world.loads`` (:class:`WorldSpec`); empty without loads."""
    if not world.loads:
        return {}
    if world.load_window is None:
        raise InputError("training at given loads needs the window whose load they scale")
    start, end = parse_window(world.load_window)
    reference = Scenario(spec, window(trace, start, end), SimConfig(mode="slurm"))
    return {point.target: point.scenario.spec
            for point in load_points(reference, world.loads)}


Backend = Literal["auto", "processes", "ray"]
BACKENDS: tuple[Backend, ...] = ("auto", "processes", "ray")

_world: World | None = None


def _init_worker(world: WorldSpec, threads: int) -> None:
    global _world
    torch.set_num_threads(threads)
    _world = World.load(world)


def _episode(state: Mapping[str, Tensor], network: NetworkConfig, config: RolloutConfig,
             spec: EpisodeSpec) -> Episode:
    assert _world is not None, "worker not initialised"
    return _run(_world, state, network, config, spec)


def _run(world: World, state: Mapping[str, Tensor], network: NetworkConfig,
         config: RolloutConfig, spec: EpisodeSpec) -> Episode:
    model = DualNetwork(network)
    model.load_state_dict(state)
    model.eval()
    return run_episode(model, build_simulation(world.scenario(spec)), world.gpu_speed, config,
                       spec)


class EpisodeWorker:
    """One Ray actor's state: its world, loaded once (the process pool's ``_init_worker``)."""

    def __init__(self, world: WorldSpec, threads: int) -> None:
        torch.set_num_threads(threads)
        self.world = World.load(world)

    def run(self, state: Mapping[str, Tensor], network: NetworkConfig, config: RolloutConfig,
            spec: EpisodeSpec) -> Episode:
        return _run(self.world, state, network, config, spec)


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_backend(backend: Backend, workers: int) -> Literal["inline", "processes", "ray"]:
    """Where episodes run: inline for one worker, else the named backend (``auto``: Ray when
    installed). Asking for Ray without it is an error, not a silent fallback."""
    if workers <= 1:
        return "inline"
    if backend == "ray" and not ray_available():
        raise InputError("--backend ray: Ray is not installed (pip install 'slurm-rl[ray]')")
    if backend == "ray" or (backend == "auto" and ray_available()):
        return "ray"
    return "processes"


class _RayWorkers:
    """``workers`` Ray actors fed round robin; results in submission order."""

    def __init__(self, world: WorldSpec, workers: int, threads: int) -> None:
        import ray

        if not ray.is_initialized():
            # RAY_ADDRESS names a running cluster (which sizes itself); else a local one.
            if os.environ.get("RAY_ADDRESS"):
                ray.init(log_to_driver=False, configure_logging=False)
            else:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
        actor: Any = ray.remote(num_cpus=1)(EpisodeWorker)
        self._ray = ray
        self._actors: list[Any] = [actor.remote(world, threads) for _ in range(workers)]

    def submit(self, state: Mapping[str, Tensor], network: NetworkConfig,
               config: RolloutConfig, specs: Sequence[EpisodeSpec]) -> list[Any]:
        shared = self._ray.put(dict(state))
        return [self._actors[i % len(self._actors)].run.remote(shared, network, config, spec)
                for i, spec in enumerate(specs)]

    def gather(self, refs: list[Any], on_done: Callable[[Episode], None] | None) -> list[Episode]:
        episodes: list[Episode] = self._ray.get(refs)
        if on_done is not None:
            for episode in episodes:
                on_done(episode)
        return episodes

    def close(self) -> None:
        for actor in self._actors:
            self._ray.kill(actor)
        self._actors = []


class RolloutPool:
    """Runs episodes of the current weights; a context manager (closes its workers)."""

    def __init__(self, world: WorldSpec, workers: int, threads: int = 1,
                 backend: Backend = "processes") -> None:
        self.world_spec = world
        self.workers = workers
        self.backend = resolve_backend(backend, workers)
        self._world: World | None = None
        self._pool: ProcessPoolExecutor | None = None
        self._ray: _RayWorkers | None = None
        if self.backend == "processes":
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(workers, context, _init_worker, (world, threads))
        elif self.backend == "ray":
            self._ray = _RayWorkers(world, workers, threads)
        else:
            self._world = World.load(world)

    @property
    def world(self) -> World:
        """The world in this process (loaded on first use when workers run elsewhere)."""
        if self._world is None:
            self._world = World.load(self.world_spec)
        return self._world

    def collect(self, network: DualNetwork, config: RolloutConfig, specs: Sequence[EpisodeSpec],
                on_done: Callable[[Episode], None] | None = None) -> list[Episode]:
        state = {k: v.detach().clone() for k, v in network.state_dict().items()}
        if self._ray is not None:
            return self._ray.gather(self._ray.submit(state, network.config, config, specs),
                                    on_done)
        if self._pool is None:
            return [self._inline(network, config, spec, on_done) for spec in specs]
        futures: list[Future[Episode]] = [
            self._pool.submit(_episode, state, network.config, config, spec) for spec in specs
        ]
        if on_done is not None:
            for future in futures:
                future.add_done_callback(lambda f: on_done(f.result()))
        return [future.result() for future in futures]

    def _inline(self, network: DualNetwork, config: RolloutConfig, spec: EpisodeSpec,
                on_done: Callable[[Episode], None] | None) -> Episode:
        model = copy.deepcopy(network).eval()
        simulation = build_simulation(self.world.scenario(spec))
        episode = run_episode(model, simulation, self.world.gpu_speed, config, spec)
        if on_done is not None:
            on_done(episode)
        return episode

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
        if self._ray is not None:
            self._ray.close()
            self._ray = None

    def __enter__(self) -> RolloutPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
