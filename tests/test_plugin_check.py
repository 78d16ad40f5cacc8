"""selftest's deferral check: the job_submit plugin is installed beside slurm.conf and reads
what this daemon writes (heartbeat, window, partitions), or the daemon writes its config."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from slurm_rl.config import DaemonConfig, load_config
from slurm_rl.ops.plugin_check import check_deferral
from slurm_rl.slurm import deferral


def _site(tmp_path: Path, slurm_conf: str = "JobSubmitPlugins=lua\n", script: bool = True,
          plugin_conf: str | None = None) -> Path:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text(f"ClusterName=c\n{slurm_conf}")
    if script:
        (etc / deferral.PLUGIN_NAME).write_text(deferral.plugin_source().read_text())
    if plugin_conf is not None:
        (etc / deferral.CONF_NAME).write_text(plugin_conf)
    return etc / "slurm.conf"


def _config(tmp_path: Path, **values: Any) -> DaemonConfig:
    return DaemonConfig(**{"mode": "enforce", "state_dir": tmp_path / "state", **values})


def test_the_shadow_mode_needs_no_plugin(tmp_path: Path) -> None:
    ok, detail = check_deferral(_config(tmp_path, mode="shadow"), tmp_path / "none.conf")
    assert ok and "not used in shadow mode" in detail


@pytest.mark.parametrize("slurm_conf, script, why", [
    ("", True, "JobSubmitPlugins does not name lua"),
    ("JobSubmitPlugins=require_timelimit\n", True, "JobSubmitPlugins does not name lua"),
    ("jobsubmitplugins=lua\n", False, "no "),
])
def test_a_plugin_not_installed_fails_with_the_fix(tmp_path: Path, slurm_conf: str,
                                                  script: bool, why: str) -> None:
    path = _site(tmp_path, slurm_conf, script)
    ok, detail = check_deferral(_config(tmp_path), path)
    assert not ok and detail.startswith(why), detail
    assert f"fix: install the shipped job_submit.lua as {path.parent / 'job_submit.lua'}" \
        in detail


def test_the_plugins_defaults_against_the_daemons_default_heartbeat_fail(
    tmp_path: Path
) -> None:
    """The silent production failure: no plugin config, and the daemon beats in state_dir
    while the plugin looks in /run/slurm-rl: nothing would ever be deferred."""
    ok, detail = check_deferral(_config(tmp_path), _site(tmp_path))
    assert not ok, detail
    assert detail.startswith("the plugin's defaults (no ")
    assert (f"heartbeat_path /run/slurm-rl/heartbeat (daemon: "
            f"{tmp_path / 'state' / 'heartbeat'})") in detail
    assert f"fix: set plugin_conf_dir = {tmp_path / 'etc'}" in detail


def test_settings_that_match_the_plugins_defaults_pass(tmp_path: Path) -> None:
    config = _config(tmp_path, heartbeat_path=Path("/run/slurm-rl/heartbeat"))
    ok, detail = check_deferral(config, _site(tmp_path))
    assert ok and "agrees with the daemon" in detail, detail


def test_a_hand_written_config_with_another_window_fails(tmp_path: Path) -> None:
    config = _config(tmp_path, partitions=("gpu",))
    written = config.deferral.render().replace("window = 10", "window = 5")
    ok, detail = check_deferral(config, _site(tmp_path, plugin_conf=written))
    assert not ok and "differs: window 5 (daemon: 10)" in detail, detail
    (tmp_path / "b").mkdir()
    ok, _ = check_deferral(config, _site(tmp_path / "b", plugin_conf=config.deferral.render()))
    assert ok


def test_plugin_conf_dir_must_be_slurm_confs_directory(tmp_path: Path) -> None:
    path = _site(tmp_path)
    ok, detail = check_deferral(_config(tmp_path, plugin_conf_dir=tmp_path), path)
    assert not ok and f"fix: set plugin_conf_dir = {path.parent}" in detail
    ok, detail = check_deferral(_config(tmp_path, plugin_conf_dir=path.parent), path)
    assert ok and detail == f"the daemon writes {path.parent / deferral.CONF_NAME}"


def test_the_python_view_of_the_plugins_defaults_is_the_plugins_own() -> None:
    lua = deferral.plugin_source().read_text()
    table = re.search(r"local defaults = \{(.*?)\n\}", lua, re.DOTALL)
    assert table is not None
    pairs = dict(re.findall(r'(\w+) = "([^"]*)"', table.group(1)))
    assert pairs == deferral.PLUGIN_DEFAULTS


def test_the_packaged_plugin_config_agrees_with_the_packaged_daemon_config(
    tmp_path: Path
) -> None:
    packaging = Path(__file__).resolve().parents[1] / "packaging"
    config = load_config(packaging / "slurm-rl.toml", None, {})
    plugin_conf = (packaging / deferral.CONF_NAME).read_text()
    ok, detail = check_deferral(config, _site(tmp_path, plugin_conf=plugin_conf))
    assert ok and "agrees with the daemon (heartbeat /run/slurm-rl/heartbeat)" in detail, detail


@pytest.mark.parametrize("line", ["JobSubmitPlugins=job_submit/lua\n",
                                  "JobSubmitPlugins=pbs, lua  # site comment\n"])
def test_every_spelling_slurm_accepts_for_lua_passes(tmp_path: Path, line: str) -> None:
    config = _config(tmp_path, heartbeat_path=Path("/run/slurm-rl/heartbeat"))
    ok, detail = check_deferral(config, _site(tmp_path, line))
    assert ok, detail


def test_values_are_compared_as_the_plugin_reads_them(tmp_path: Path) -> None:
    config = _config(tmp_path, partitions=("gpu", "debug"))
    written = config.deferral.render().replace("partitions = gpu,debug", "partitions = debug, gpu")
    written = written.replace("heartbeat_max_age = 30", "heartbeat_max_age = 30.0")
    ok, detail = check_deferral(config, _site(tmp_path, plugin_conf=written))
    assert ok, detail


def test_an_unreadable_plugin_config_is_a_failed_check(tmp_path: Path) -> None:
    path = _site(tmp_path)
    (path.parent / deferral.CONF_NAME).write_bytes(b"\xff\xfe\x00 not text")
    ok, detail = check_deferral(_config(tmp_path), path)
    assert not ok and detail.startswith(f"cannot read {path.parent / deferral.CONF_NAME}")


@pytest.mark.parametrize("damage, why", [
    ("shared directory", "its directory"),
    ("symlink", "not a regular file"),
    ("huge", "larger than 256 bytes"),
])
def test_a_heartbeat_the_plugin_would_refuse_fails_the_check(
    tmp_path: Path, damage: str, why: str
) -> None:
    """The plugin does not read a heartbeat it cannot trust (issue 18, finding 8), and then
    defers nothing with only a slurmctld log line: selftest says so with the same rules."""
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    beat = run / "heartbeat"
    if damage == "symlink":
        (run / "real").write_text("1\n")
        beat.symlink_to(run / "real")
    else:
        beat.write_text("1\n" if damage != "huge" else "1" * 1000)
    if damage == "shared directory":
        run.chmod(0o777)
    config = _config(tmp_path, heartbeat_path=beat, plugin_conf_dir=tmp_path / "etc")
    ok, detail = check_deferral(config, _site(tmp_path))
    assert not ok and f"will not read the heartbeat {beat}: {why}" in detail, detail
