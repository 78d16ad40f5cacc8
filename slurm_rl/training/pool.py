"""Episodes in parallel worker processes (inline with one worker), reproducibly.

Each worker loads the trace and the cluster once. An episode's outcome depends only on the
weights, the rollout configuration and its :class:`~.rollout.EpisodeSpec` (which carries its
seed), and results come back in submission order, so a run gives the same episodes with any
number of workers. (Ray is not used yet: docs/training.md, "Not done yet".)
"""

from __future__ import annotations

import copy
import multiprocessing
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from types import TracebackType

import torch
from torch import Tensor

from slurm_rl.agents.ordering.network import DualNetwork, NetworkConfig
from slurm_rl.scenario import Scenario, build_simulation
from slurm_rl.simulator.cluster_spec import ClusterSpec, load_cluster_spec
from slurm_rl.simulator.engine import SimConfig
from slurm_rl.traces import Trace, window
from slurm_rl.training.rollout import Episode, EpisodeSpec, RolloutConfig, run_episode
from slurm_rl.workloads import open_workload


@dataclass(frozen=True)
class WorldSpec:
    """Where episodes happen: a trace (name or path) on a cluster spec, in slurm mode."""

    trace: str
    cluster: str
    cycle_s: float = 10.0


@dataclass(frozen=True)
class World:
    trace: Trace
    spec: ClusterSpec
    gpu_speed: Mapping[str, float]
    cycle_s: float

    @classmethod
    def load(cls, world: WorldSpec) -> World:
        from slurm_rl.simulate_command import gpu_speed_table

        return cls(open_workload(world.trace), load_cluster_spec(world.cluster),
                   gpu_speed_table(), world.cycle_s)

    def scenario(self, spec: EpisodeSpec) -> Scenario:
        jobs = window(self.trace, spec.warmup_start, spec.end)
        return Scenario(self.spec, jobs, SimConfig(mode="slurm", cycle_s=self.cycle_s,
                                                   seed=spec.seed))


_world: World | None = None


def _init_worker(world: WorldSpec, threads: int) -> None:
    global _world
    torch.set_num_threads(threads)
    _world = World.load(world)


def _episode(state: Mapping[str, Tensor], network: NetworkConfig, config: RolloutConfig,
             spec: EpisodeSpec) -> Episode:
    assert _world is not None, "worker not initialised"
    model = DualNetwork(network)
    model.load_state_dict(state)
    model.eval()
    return run_episode(model, build_simulation(_world.scenario(spec)), _world.gpu_speed, config,
                       spec)


class RolloutPool:
    """Runs episodes of the current weights; a context manager (closes its workers)."""

    def __init__(self, world: WorldSpec, workers: int, threads: int = 1) -> None:
        self.world_spec = world
        self.workers = workers
        self._threads = threads
        self._world: World | None = None
        self._pool: ProcessPoolExecutor | None = None
        if workers > 1:
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(workers, context, _init_worker, (world, threads))
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
        if self._pool is None:
            return [self._inline(network, config, spec, on_done) for spec in specs]
        state = {k: v.detach().clone() for k, v in network.state_dict().items()}
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

    def __enter__(self) -> RolloutPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
