"""``slurm-rl selftest``'s store and directories checks on a fresh install and on a running
one: the systemd unit runs selftest before the daemon's first start, when no store (and, on a
first trial, no state directory) exists yet, so "not there yet, and the daemon can make it"
passes; what the daemon cannot make, or would refuse (``check_private_dirs``), fails with the
fix."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from slurm_rl.config import DaemonConfig
from slurm_rl.daemon.runner import Daemon, DaemonError, check_private_dirs
from slurm_rl.ops.selftest import check_directories, check_store
from slurm_rl.slurm.proc import CommandResult
from slurm_rl.store import migrate
from slurm_rl.store.repository import Store, make_engine


def _config(tmp_path: Path, url: str) -> DaemonConfig:
    return DaemonConfig(state_dir=tmp_path, store_url=url)


def test_a_fresh_install_passes_and_says_the_daemon_makes_the_store(
    store_url: str, tmp_path: Path
) -> None:
    check = check_store(_config(tmp_path, store_url))
    assert check.ok, check.detail
    assert "the daemon creates" in check.detail


def test_a_store_at_an_older_schema_passes_and_says_it_is_upgraded(
    store_url: str, tmp_path: Path
) -> None:
    engine = make_engine(store_url)
    migrate.upgrade(engine, "0001")
    engine.dispose()
    check = check_store(_config(tmp_path, store_url))
    assert check.ok and "schema 0001; the daemon upgrades it to" in check.detail, check.detail


def test_a_store_a_newer_release_wrote_fails(store_url: str, tmp_path: Path) -> None:
    """The daemon of this release could not start on it (Alembic knows no such revision)."""
    store = Store(store_url)
    with store.engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0099_future'"))
    store.engine.dispose()
    check = check_store(_config(tmp_path, store_url))
    assert not check.ok and "schema 0099_future is newer than this release" in check.detail


def test_a_running_store_reports_its_cycles(store_url: str, tmp_path: Path) -> None:
    Store(store_url).engine.dispose()
    check = check_store(_config(tmp_path, store_url))
    assert check.ok and check.detail.endswith(": 0 cycles stored"), check.detail


def test_a_store_in_a_missing_directory_fails_with_the_fix(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gone' / 'store.sqlite'}"
    check = check_store(_config(tmp_path, url))
    assert not check.ok
    assert f"cannot create {tmp_path / 'gone' / 'store.sqlite'}" in check.detail
    assert "fix: create it for the daemon's user" in check.detail


@pytest.mark.parametrize("junk", [b"not a database, just bytes" * 100])
def test_a_file_that_is_no_database_fails(tmp_path: Path, junk: bytes) -> None:
    path = tmp_path / "store.sqlite"
    path.write_bytes(junk)
    check = check_store(_config(tmp_path, f"sqlite:///{path}"))
    assert not check.ok and "fix:" in check.detail, check.detail


# -- the state directory before the daemon's first start (issue 19, item 8) ---------------


def _fresh(state: Path, **values: object) -> DaemonConfig:
    return DaemonConfig(state_dir=state, metrics_port=0, **values)  # type: ignore[arg-type]


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _deny_writes_to(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """``os.access`` says the daemon's user may not write ``folder`` (root may write
    anything, so a mode alone cannot say it when the tests run as root)."""
    real = os.access

    def access(path: object, mode: int, **kwargs: Any) -> bool:
        if Path(str(path)) == folder and mode & os.W_OK:
            return False
        return real(path, mode, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "access", access)


def _build(config: DaemonConfig) -> None:
    """A daemon start on this config (store opened and migrated), then its close."""
    def no_slurm(argv: Sequence[str], timeout_s: float) -> CommandResult:
        return CommandResult(tuple(argv), 1, "", "")

    daemon = Daemon(lambda: config, runner=no_slurm)
    daemon.close(retire=False)


@pytest.mark.parametrize("depth", [1, 3])
def test_a_state_directory_not_made_yet_passes_and_the_daemon_makes_it(
    tmp_path: Path, depth: int
) -> None:
    state = tmp_path.joinpath(*["sub"] * depth)
    config = _fresh(state)
    with _umask(0o022):
        directories, store = check_directories(config), check_store(config)
        assert directories.ok, directories.detail
        assert f"state directory {state} will be created by the daemon" in directories.detail
        assert store.ok and f"the daemon creates {state} and {state / 'slurm-rl.sqlite'}" \
            in store.detail, store.detail
        _build(config)
        check_private_dirs(config)  # what the daemon made, its next start accepts
        again = check_directories(config)
    assert again.ok and f"state directory {state} is private" in again.detail, again.detail


def test_a_parent_the_daemon_may_not_write_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _deny_writes_to(monkeypatch, tmp_path)
    config = _fresh(tmp_path / "state")
    check = check_directories(config)
    assert not check.ok
    assert f"cannot create state directory {tmp_path / 'state'}" in check.detail
    assert f"may not write {tmp_path}; fix:" in check.detail
    store = check_store(config)
    assert not store.ok and "fix: see the directories line" in store.detail, store.detail


def test_a_parent_that_is_a_file_fails(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    check = check_directories(_fresh(tmp_path / "file" / "state"))
    assert not check.ok and "Not a directory" in check.detail, check.detail


def test_a_umask_that_leaves_the_new_directory_group_writable_fails_as_the_daemon_would(
    tmp_path: Path,
) -> None:
    """The first start makes it 0775 and runs; the next one refuses it."""
    config = _fresh(tmp_path / "state")
    with _umask(0o002):
        check = check_directories(config)
        assert not check.ok and "mode 0775 (umask 0002)" in check.detail, check.detail
        assert "refuse it at its next start" in check.detail
        _build(config)
        with pytest.raises(DaemonError, match="may be written by its group or others"):
            check_private_dirs(config)


def _unsafe(tmp_path: Path, kind: str) -> Path:
    state = tmp_path / "state"
    if kind == "link":
        (tmp_path / "real").mkdir(mode=0o700)
        state.symlink_to(tmp_path / "real")
    else:
        state.mkdir()
        state.chmod(0o770 if kind == "group-writable" else 0o700)
        if kind == "someone else's":
            os.chown(state, 65534, 65534) if os.geteuid() == 0 else pytest.skip("needs root")
    return state


@pytest.mark.parametrize("kind", ["link", "group-writable", "someone else's"])
def test_an_existing_unsafe_state_directory_fails_with_the_daemons_own_words(
    tmp_path: Path, kind: str
) -> None:
    config = _fresh(_unsafe(tmp_path, kind))
    with pytest.raises(DaemonError) as refused:
        check_private_dirs(config)
    check = check_directories(config)
    assert not check.ok and check.detail == str(refused.value), check.detail


def test_a_private_directory_of_roots_the_daemon_may_not_write_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    _deny_writes_to(monkeypatch, state)
    check = check_directories(_fresh(state))
    assert not check.ok and f"may not write state directory {state}; fix: chown" in check.detail


def test_the_heartbeat_directory_counts_only_when_the_daemon_beats(tmp_path: Path) -> None:
    beat_dir = tmp_path / "run"
    beat_dir.mkdir()
    beat_dir.chmod(0o777)  # after mkdir: the umask does not take bits off a chmod
    settings = {"heartbeat_path": beat_dir / "heartbeat"}
    shadow = check_directories(_fresh(tmp_path / "state", **settings))
    assert shadow.ok and "heartbeat directory" not in shadow.detail, shadow.detail
    enforce = check_directories(_fresh(tmp_path / "state", mode="enforce", **settings))
    assert not enforce.ok and f"heartbeat directory {beat_dir} may be written" in enforce.detail
    beat_dir.rmdir()
    with _umask(0o022):
        fresh = check_directories(_fresh(tmp_path / "state", mode="enforce", **settings))
    assert fresh.ok and f"heartbeat directory {beat_dir} will be created" in fresh.detail


def test_a_state_directory_the_config_keeps_nothing_in_may_be_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _deny_writes_to(monkeypatch, tmp_path)
    config = _fresh(tmp_path / "state", store_url=f"sqlite:///{tmp_path / 's.sqlite'}",
                    heartbeat_path=tmp_path / "beat")
    check = check_directories(config)
    assert check.ok and "this config keeps nothing in it" in check.detail, check.detail
