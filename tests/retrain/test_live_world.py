"""The daemon's world as a retrain plays it (:class:`LiveWorld`): the gate's replays and the
fine-tuning episodes carry the daemon's limits on priority changes and on moves, so a
candidate is not judged on moves the daemon would never send or on priority changes its
actuator would hold back."""

from __future__ import annotations

import pickle

from slurm_rl.config import DaemonConfig
from slurm_rl.retrain.live_world import LiveWorld
from slurm_rl.slurm.priority import HeldPriorities, PriorityLimits
from slurm_rl.training.pool import World, WorldSpec
from slurm_rl.training.rollout import EpisodeSpec

SITE = DaemonConfig(priority_tolerance_ranks=5, priority_updates_per_job_hour=3,
                    priority_updates_per_cycle=50, priority_floor=5000, migrate=True,
                    max_migrations_per_cycle=3)


def held(factory: object) -> HeldPriorities:
    assert callable(factory)
    holder = factory()
    assert isinstance(holder, HeldPriorities)
    return holder


def test_the_defaults_are_a_default_daemons_world() -> None:
    world = LiveWorld()
    assert world == LiveWorld.of(DaemonConfig())
    assert world.migrations_per_cycle == 0  # migrate is off unless the admin turns it on
    assert world.priority_limits == DaemonConfig().actuator_config.priority_limits
    assert world.sim_config().migrations_per_cycle == 0


def test_the_gate_replays_under_the_sites_limits_on_priorities_and_moves() -> None:
    world = LiveWorld.of(SITE)
    config = world.sim_config()
    assert config.migrations_per_cycle == 3
    holder = held(config.held_priorities)
    assert holder.limits == PriorityLimits(5, 3, 50) and holder.floor == 5000
    assert held(config.held_priorities) is not holder  # each replay starts from no values
    assert LiveWorld.of(SITE.model_copy(update={"migrate": False})).migrations_per_cycle == 0


def test_the_fine_tuning_episodes_play_the_same_world_in_other_processes() -> None:
    world = LiveWorld.of(SITE)
    spec = pickle.loads(pickle.dumps(world.world_spec("synthetic", "philly-hetero")))
    assert isinstance(spec, WorldSpec) and spec.migrations_per_cycle == 3
    config = World.load(spec).scenario(EpisodeSpec(0.0, 3600.0, 86_400.0, seed=1)).sim
    assert config.migrations_per_cycle == 3 and config.seed == 1
    assert held(config.held_priorities).limits == PriorityLimits(5, 3, 50)
