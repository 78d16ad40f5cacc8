"""The database itself keeps at most one model version active (migration 0006), on SQLite
and PostgreSQL; a store an older release left with several active rows is repaired by the
upgrade, keeping the version its history activated last. Reading versions leaves their
bundles' bytes in the store."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from slurm_rl.paths import default_bundle_path
from slurm_rl.store import migrate
from slurm_rl.store.registry import ModelRegistry
from slurm_rl.store.repository import Store, make_engine

BEFORE = "0005_intents"


def test_a_second_active_row_is_refused_by_the_database(store_url: str) -> None:
    engine = Store(store_url).engine
    registry = ModelRegistry(engine)
    first, second = registry.register("fifo+best-fit"), registry.register("qssf+best-fit")
    registry.promote(first)
    with pytest.raises(IntegrityError), engine.begin() as connection:
        connection.execute(sa.text("UPDATE model_versions SET active = :on WHERE version = :v"),
                           {"on": True, "v": second})
    assert registry.active_number() == first
    assert registry.promote(second) == first  # the registry's own change still works
    assert registry.active_number() == second


def test_the_upgrade_keeps_the_version_activated_last_and_says_so(store_url: str) -> None:
    engine = make_engine(store_url)
    migrate.upgrade(engine, BEFORE)
    with engine.begin() as connection:
        for version, active in ((1, True), (2, True), (3, True), (4, False)):
            _version_row(connection, version, active)
        # v3 was promoted, then v2 (racing promotions left v1 and v3 on): v2 is the one kept
        _event(connection, "promote", 3, 1)
        _event(connection, "promote", 2, 1)
    migrate.upgrade(engine)
    registry = ModelRegistry(engine)
    assert [v.version for v in registry.versions() if v.active] == [2]
    with engine.connect() as connection:
        action, version, note = connection.execute(sa.text(
            "SELECT action, version, note FROM model_events ORDER BY id DESC")).first()
    assert (action, version) == ("repair", 2)
    assert note == ("migration 0006_one_active_version: 3 versions were active; kept v2, "
                    "switched off v1, v3")
    migrate.downgrade(engine, BEFORE)  # and back: the index goes, the rows stay
    migrate.upgrade(engine)
    assert registry.active_number() == 2


def test_without_an_event_the_highest_active_version_is_kept(store_url: str) -> None:
    engine = make_engine(store_url)
    migrate.upgrade(engine, BEFORE)
    with engine.begin() as connection:
        for version in (1, 2):
            _version_row(connection, version, True)
    migrate.upgrade(engine)
    assert ModelRegistry(engine).active_number() == 2


def _version_row(connection: sa.Connection, version: int, active: bool) -> None:
    connection.execute(sa.text(
        "INSERT INTO model_versions (version, created_at, policy, source, status, active, note)"
        " VALUES (:v, :at, 'fifo+best-fit', 'import', 'promoted', :active, '')"),
        {"v": version, "at": datetime.now(UTC), "active": active})


def _event(connection: sa.Connection, action: str, version: int, previous: int) -> None:
    connection.execute(sa.text(
        "INSERT INTO model_events (at, action, version, previous, note)"
        " VALUES (:at, :action, :v, :p, '')"),
        {"at": datetime.now(UTC), "action": action, "v": version, "p": previous})


def test_listing_and_reading_versions_leave_the_bundles_bytes_in_the_store(
        store_url: str) -> None:
    """``models list`` and the daemon's look at the active version loaded every version's
    weights (megabytes each) before; only filling a cache reads them."""
    engine = Store(store_url).engine
    registry = ModelRegistry(engine)
    version = registry.register("rl+rl", bundle=default_bundle_path())
    registry.promote(version)
    selects: list[str] = []
    sa.event.listen(engine, "before_cursor_execute",
                    lambda _c, _k, statement, *_: selects.append(statement))
    assert [v.version for v in registry.versions()] == [version]
    assert registry.get(version).active and registry.active() is not None
    assert selects and not any("weights" in s for s in selects), selects
