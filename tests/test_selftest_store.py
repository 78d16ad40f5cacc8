"""``slurm-rl selftest``'s store check on a fresh install and on a running one: the systemd
unit runs selftest before the daemon's first start, when no store exists yet, so "no store
yet, and the daemon can make it" passes; a store the daemon cannot make or read fails with
the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from slurm_rl.daemon.config import DaemonConfig
from slurm_rl.ops.selftest import check_store
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
