"""The daemon with learned policies: a bundle runs and reloads, an unusable one falls back to a
heuristic with one line, unknown learned names are refused. Same fakes as test_daemon.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import text

from slurm_rl.config import load_config
from slurm_rl.daemon.runner import Daemon
from slurm_rl.errors import SlurmRLError
from tests.test_daemon import Clock, _cluster, _config, _problems


def _bundle(path: Path, seed: int = 0, **meta: object) -> Path:
    """An untrained policy bundle (the daemon's wiring does not depend on what it learned)."""
    import torch

    from slurm_rl.agents.dual.agent import network_config
    from slurm_rl.agents.dual.bundle import save_bundle
    from slurm_rl.agents.dual.network import DualNetwork

    torch.manual_seed(seed)
    return save_bundle(path, DualNetwork(network_config(16)), {"chooser": "best-fit", **meta})


def _policies(daemon: Daemon) -> list[str]:
    with daemon.store.engine.connect() as connection:
        return list(connection.execute(text("SELECT policy_id FROM cycles ORDER BY id")).scalars())


def test_a_learned_policy_runs_from_its_bundle_and_reloads_on_sighup(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "bundle")
    config = _config(tmp_path, policy="rl+rl", policy_bundle=bundle)
    daemon = Daemon(lambda: config, runner=_cluster(), clock=Clock())
    assert daemon.run_once().ok
    first = daemon.parts.scheduler
    (bundle / "weights.pt").write_bytes(b"not a checkpoint")  # a bad retrain lands
    assert not daemon.reload()  # the running agent stays
    assert daemon.parts.scheduler is first and daemon.run_once().ok
    _bundle(bundle, seed=1)  # a good one: the next reload reads its weights
    assert daemon.reload() and daemon.parts.scheduler is not first
    assert daemon.run_once().ok
    assert _policies(daemon) == ["rl+rl-best-fit"] * 3
    daemon.close()


def test_an_unusable_bundle_at_start_falls_back_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = _config(tmp_path, policy="rl+rl", policy_bundle=tmp_path / "missing")
    with caplog.at_level(logging.INFO):
        daemon = Daemon(lambda: config, runner=_cluster(), clock=Clock())
    (line,) = _problems(caplog)
    assert "no policy bundle" in line.getMessage()
    assert line.getMessage().endswith("running qssf+fastest-gpu instead")
    assert daemon.run_once().ok and _policies(daemon) == ["qssf+fastest-gpu"]
    daemon.close()


@pytest.mark.parametrize("damage", ["text weights", "nan network setting"])
def test_a_damaged_bundle_at_start_falls_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    """Issue 18 (6): a text weights.pt raised an uncaught IndexError and the daemon did not
    start; a NaN network setting was accepted and changed the schedule silently."""
    import json

    bundle = _bundle(tmp_path / "bundle")
    if damage == "text weights":
        (bundle / "weights.pt").write_text("all fine, trust me\n")  # torch: IndexError
    else:
        meta = json.loads((bundle / "meta.json").read_text())
        meta["network"]["pace_sharpness"] = float("nan")
        (bundle / "meta.json").write_text(json.dumps(meta))
    config = _config(tmp_path, policy="rl+rl", policy_bundle=bundle)
    with caplog.at_level(logging.INFO):
        daemon = Daemon(lambda: config, runner=_cluster(), clock=Clock())
    (line,) = _problems(caplog)
    assert str(bundle) in line.getMessage()
    assert line.getMessage().endswith("running qssf+fastest-gpu instead")
    assert daemon.run_once().ok and _policies(daemon) == ["qssf+fastest-gpu"]
    daemon.close()


@pytest.mark.parametrize("name", ["rl+nowhere", "rl-nocomm+best-fit", "magic+rl"])
def test_unknown_learned_names_are_refused_in_one_line(tmp_path: Path, name: str) -> None:
    """Refused where the config is read, naming the key, before a daemon is built."""
    with pytest.raises(SlurmRLError) as error:
        load_config(None, {"policy": name, "state_dir": tmp_path})
    assert "[daemon] policy: unknown" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("dispatch", [False, True])
def test_a_bundle_trained_in_the_other_dispatch_mode_is_named_in_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, dispatch: bool
) -> None:
    """The shipped bundle is trained with --dispatch: run without it, Slurm starts the
    released jobs by its own priority between cycles, queues the policy never saw (issue 22:
    the emulation agrees with live Slurm at 99.3 % with dispatch, 89.2 % without)."""
    bundle = _bundle(tmp_path / "bundle", training={"args": {"dispatch": True}})
    config = _config(tmp_path, policy="rl+rl", policy_bundle=bundle, dispatch=dispatch)
    with caplog.at_level(logging.INFO):
        daemon = Daemon(lambda: config, runner=_cluster(), clock=Clock())
    problems = [line.getMessage() for line in _problems(caplog)]
    if dispatch:
        assert problems == []
    else:
        (line,) = problems
        assert f"policy bundle {bundle} was trained with dispatch on" in line
        assert line.endswith("(set dispatch = true)")
    assert daemon.run_once().ok and _policies(daemon) == ["rl+rl-best-fit"]
    daemon.close()


def test_a_bundle_that_does_not_say_how_it_was_trained_gets_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = _config(tmp_path, policy="rl+rl", policy_bundle=_bundle(tmp_path / "bundle"))
    with caplog.at_level(logging.INFO):
        daemon = Daemon(lambda: config, runner=_cluster(), clock=Clock())
    assert _problems(caplog) == []
    daemon.close()
