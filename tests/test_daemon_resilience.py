"""What the daemon reads outside its cycle's error handling: the model registry (at start, at
each cycle's start, at a reload) and the stored history a new policy is primed with. Bad
rows and a full disk there are one warning line naming what is wrong; the daemon goes on
with its running policy (session 45, review 45b)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import slurm_rl.daemon.history as history_module
import slurm_rl.store.registry as registry_module
from slurm_rl.core import ClusterSnapshot, Decision
from slurm_rl.daemon.history import PrimedScheduler
from slurm_rl.daemon.runner import Daemon
from slurm_rl.retrain import window
from slurm_rl.retrain.follow import ModelFollower
from slurm_rl.store.registry import ModelRegistry
from slurm_rl.store.repository import Store
from tests.test_daemon import Clock, _cluster, _config
from tests.test_daemon_learned import _bundle

DAMAGED_DETAILS = ("INSERT INTO decisions (cycle_id, job_key, policy_id, action, slurm_rc, "
                   "details) VALUES (1, 'slurm:3', 'p', 'migrate', 0, '{\"moved_from\": {bad')")


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def _daemon(tmp_path: Path, clock: Clock | None = None, **values: Any) -> Daemon:
    config = _config(tmp_path, policy="fifo+best-fit", **values)
    return Daemon(lambda: config, runner=_cluster(), clock=clock or Clock())


def _damage_metrics(engine: sa.Engine) -> None:
    """A damaged row, as a hand edit or a bad restore leaves it (SQLite keeps JSON as text)."""
    with engine.begin() as connection:
        connection.execute(sa.text("UPDATE model_versions SET metrics = '{not json'"))


def test_a_full_models_cache_disk_is_one_line_and_the_cycle_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    daemon = _daemon(tmp_path)
    try:
        assert daemon.run_once().ok
        registry = ModelRegistry(daemon.store.engine)
        registry.promote(registry.register("rl+rl", bundle=_bundle(tmp_path / "bundle")))

        def full(*args: object, **kwargs: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(registry_module, "write_atomic", full)  # unpacking v1
        with caplog.at_level(logging.WARNING):
            assert daemon.run_once().ok  # was: OSError out of run_once, ending Daemon.run()
            assert daemon.run_once().ok
        assert daemon.config.policy == "fifo+best-fit"
        assert _warnings(caplog) == [  # once, not every cycle
            f"model version 1 not taken, keeping policy fifo+best-fit: model version 1: cannot "
            f"unpack its bundle into {daemon.config.models_cache}: No space left on device"]
        assert not any(r.exc_info for r in caplog.records)
    finally:
        daemon.close()


def test_a_damaged_model_versions_row_is_one_line_naming_it_and_the_cycle_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    daemon = _daemon(tmp_path)
    try:
        assert daemon.run_once().ok
        registry = ModelRegistry(daemon.store.engine)
        registry.promote(registry.register("qssf+best-fit"))
        _damage_metrics(daemon.store.engine)
        with caplog.at_level(logging.WARNING):
            assert daemon.run_once().ok  # was: JSONDecodeError out of run_once
            assert daemon.run_once().ok
        [line] = _warnings(caplog)
        assert line.startswith("model version 1 not taken, keeping policy fifo+best-fit: "
                               "model_versions row of version 1: column metrics does not "
                               "hold valid JSON (")
        assert daemon.config.policy == "fifo+best-fit"
    finally:
        daemon.close()


def test_the_daemon_starts_despite_a_damaged_active_version(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = _config(tmp_path, policy="fifo+best-fit")
    (tmp_path / "state").mkdir(mode=0o700)
    store = Store(config.store)
    registry = ModelRegistry(store.engine)
    registry.promote(registry.register("qssf+best-fit"))
    _damage_metrics(store.engine)
    store.engine.dispose()
    with caplog.at_level(logging.WARNING):
        daemon = Daemon(lambda: config, runner=_cluster(), clock=Clock())  # was: a traceback
    try:
        assert any("model_versions row of version 1: column metrics" in m
                   for m in _warnings(caplog))
        assert daemon.run_once().ok
        assert daemon.config.policy == "fifo+best-fit"
    finally:
        daemon.close()


def test_a_bug_in_a_model_switch_keeps_the_running_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    daemon = _daemon(tmp_path)
    try:
        assert daemon.run_once().ok
        registry = ModelRegistry(daemon.store.engine)
        registry.promote(registry.register("qssf+best-fit"))

        def broken(self: ModelFollower, config: object) -> None:
            raise RuntimeError("a bug")

        monkeypatch.setattr(ModelFollower, "effective", broken)
        with caplog.at_level(logging.WARNING):
            assert daemon.run_once().ok
        assert daemon.config.policy == "fifo+best-fit"
        [record] = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert record.exc_info is not None  # a bug keeps its traceback
    finally:
        daemon.close()


def test_a_reload_while_the_store_is_down_keeps_the_running_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    configs = [_config(tmp_path, policy="fifo+best-fit")]
    daemon = Daemon(lambda: configs[-1], runner=_cluster(), clock=Clock())
    try:
        assert daemon.run_once().ok
        configs.append(configs[0].model_copy(update={"policy": "qssf+best-fit"}))

        def down(self: ModelRegistry) -> None:
            raise sa.exc.OperationalError("SELECT", {}, Exception("connection refused"))

        with monkeypatch.context() as patch, caplog.at_level(logging.WARNING):
            patch.setattr(ModelRegistry, "active", down)  # PostgreSQL restarting at SIGHUP
            assert daemon.reload() is False  # was: OperationalError, the daemon ended
        assert _warnings(caplog) == ["reload failed, keeping the running config: "
                                     "(builtins.Exception) connection refused"]
        assert daemon.run_once().ok  # the store is back: the running config stays
        assert daemon.config.policy == "fifo+best-fit"
    finally:
        daemon.close()


def test_a_damaged_decisions_row_costs_no_cycle_and_is_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    daemon = _daemon(tmp_path, clock)
    reads: list[float] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(clock.now)
        return window.load_window(*args, **kwargs)

    monkeypatch.setattr(history_module, "load_window", counted)
    try:
        assert daemon.run_once().ok
        with daemon.store.engine.begin() as connection:  # one damaged row among many
            connection.execute(sa.text(DAMAGED_DETAILS))
        assert daemon.reload()  # new policy objects, primed from the stored history
        reads.clear()
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                clock.now += 60
                result = daemon.run_once()
                assert result.ok, result.error  # was: every cycle failed, no heartbeat
        assert len(reads) == 1
        [line] = _warnings(caplog)
        assert line.startswith("no stored history for the new policy: store table decisions, "
                               "row ")
        assert "(job slurm:3): column 'details' is not JSON (" in line
    finally:
        daemon.close()


class _Inner:
    placement = None

    def __init__(self) -> None:
        self.seen: list[ClusterSnapshot] = []

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        self.seen.append(snapshot)
        return Decision(policy_id="inner", ranking=())


def test_priming_that_fails_unforeseen_is_tried_once_and_costs_no_decision(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[ClusterSnapshot] = []

    def history(snapshot: ClusterSnapshot) -> tuple[()]:
        calls.append(snapshot)
        raise RuntimeError("a bug")

    inner = _Inner()
    primed = PrimedScheduler(inner, history)
    snapshot = object()  # never looked into: the failed read adds nothing
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            primed.decide(snapshot)  # type: ignore[arg-type]
    assert len(calls) == 1 and len(inner.seen) == 3
    assert [r.getMessage() for r in caplog.records] == ["no stored history for the new policy"]
