"""Rollout workers: episodes are the same inline, in worker processes and on Ray actors."""

from __future__ import annotations

import pytest
import torch

from slurm_rl.agents.dual.agent import network_config
from slurm_rl.agents.dual.network import DualNetwork
from slurm_rl.errors import InputError
from slurm_rl.training import pool as pool_module
from slurm_rl.training.actors import RolloutConfig
from slurm_rl.training.pool import RolloutPool, WorldSpec, resolve_backend
from slurm_rl.training.rollout import EpisodeSpec

pytestmark = pytest.mark.slow

WORLD = WorldSpec("synthetic", "philly-hetero")


def _specs(world_pool: RolloutPool) -> list[EpisodeSpec]:
    start = world_pool.world.trace.jobs[0].submit_time
    hour = 3600.0
    return [EpisodeSpec(warmup_start=start, start=start + hour * (2 + i),
                        end=start + hour * (3 + i), seed=i) for i in range(3)]


def _episodes(backend: str, workers: int) -> list[tuple[float, float, int]]:
    torch.manual_seed(0)
    network = DualNetwork(network_config(hidden=8))
    with RolloutPool(WORLD, workers, backend=backend) as rollouts:  # type: ignore[arg-type]
        episodes = rollouts.collect(network, RolloutConfig(), _specs(rollouts))
    return [(round(e.job_hours, 6), round(e.fees, 4), len(e.steps)) for e in episodes]


def test_one_worker_runs_inline_and_ray_must_exist_when_asked(monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    assert resolve_backend("ray", 1) == "inline"
    monkeypatch.setattr(pool_module, "ray_available", lambda: False)
    assert resolve_backend("auto", 2) == "processes"
    with pytest.raises(InputError, match="Ray is not installed"):
        resolve_backend("ray", 2)


def test_processes_give_the_inline_episodes() -> None:
    inline = _episodes("processes", 1)
    assert all(steps > 0 and hours > 0 for hours, _, steps in inline)  # real episodes
    assert _episodes("processes", 2) == inline


def test_ray_actors_give_the_inline_episodes() -> None:
    pytest.importorskip("ray")
    assert _episodes("ray", 2) == _episodes("processes", 1)
