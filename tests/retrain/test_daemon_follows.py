"""The daemon runs the registry's active version: switched at the next cycle, on a reload
(SIGHUP) too, back to the configured policy when none is active, and not at all with
``models_follow = false`` (only the subprocess boundary is fake, as in tests/test_daemon.py)."""

from __future__ import annotations

from pathlib import Path

from slurm_rl.daemon.runner import Daemon
from slurm_rl.store.registry import ModelRegistry
from tests.test_daemon import Clock, _cluster, _config
from tests.test_daemon_learned import _bundle, _policies


def test_the_daemon_follows_promote_and_rollback_at_its_next_cycle(tmp_path: Path) -> None:
    daemon = Daemon(lambda: _config(tmp_path, policy="fifo+best-fit"), runner=_cluster(),
                    clock=Clock())
    registry = ModelRegistry(daemon.store.engine)
    baseline = registry.register("multifactor+first-fit")
    learned = registry.register("rl+rl", bundle=_bundle(tmp_path / "bundle"))
    assert daemon.run_once().ok  # nothing active: the configured policy
    registry.promote(baseline)
    assert daemon.run_once().ok
    registry.promote(learned)
    assert daemon.run_once().ok
    assert daemon.config.policy_bundle == tmp_path / "state" / "models" / f"v{learned}"
    registry.rollback()  # back to the baseline version
    assert daemon.run_once().ok
    registry.rollback()  # and to no version: the configured policy again
    assert daemon.run_once().ok
    assert _policies(daemon) == ["fifo+best-fit", "multifactor+first-fit", "rl+rl-best-fit",
                                 "multifactor+first-fit", "fifo+best-fit"]
    daemon.close()


def test_a_reload_runs_the_active_version_and_follow_can_be_off(tmp_path: Path) -> None:
    daemon = Daemon(lambda: _config(tmp_path, policy="fifo+best-fit"), runner=_cluster(),
                    clock=Clock())
    registry = ModelRegistry(daemon.store.engine)
    registry.promote(registry.register("qssf+best-fit"))
    assert daemon.reload() and daemon.config.policy == "qssf+best-fit"  # as SIGHUP does
    assert daemon.run_once().ok
    daemon.close()
    off = Daemon(lambda: _config(tmp_path, policy="fifo+best-fit", models_follow=False),
                 runner=_cluster(), clock=Clock())
    assert off.run_once().ok and off.config.policy == "fifo+best-fit"
    off.close()


def test_a_reload_can_switch_following_off_and_on(tmp_path: Path) -> None:
    follow = {"models_follow": True}
    daemon = Daemon(lambda: _config(tmp_path, policy="fifo+best-fit", **follow),
                    runner=_cluster(), clock=Clock())
    registry = ModelRegistry(daemon.store.engine)
    registry.promote(registry.register("qssf+best-fit"))
    assert daemon.run_once().ok and daemon.config.policy == "qssf+best-fit"
    follow["models_follow"] = False
    assert daemon.reload() and daemon.config.policy == "fifo+best-fit"
    assert daemon.run_once().ok and daemon.config.policy == "fifo+best-fit"
    follow["models_follow"] = True
    assert daemon.reload() and daemon.run_once().ok
    assert daemon.config.policy == "qssf+best-fit"
    daemon.close()
