"""The models cache (``models_cache_dir/v<N>``) holds what this store's row holds: version
numbers restart at 1 in a recreated store or a new database, and a crash may leave a damaged
copy; before the fix either was trusted as long as a ``meta.json`` was there."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from slurm_rl.agents.dual.bundle import SettingsChange, change_settings
from slurm_rl.paths import default_bundle_path
from slurm_rl.store.registry import ModelRegistry
from slurm_rl.store.repository import Store


def _bundles(tmp_path: Path) -> tuple[Path, Path]:
    """The shipped bundle, and a copy whose meta.json differs (its age guard)."""
    first, second = tmp_path / "first-bundle", tmp_path / "second-bundle"
    shutil.copytree(default_bundle_path(), first)
    shutil.copytree(default_bundle_path(), second)
    change_settings(second, SettingsChange(starvation_h=6.0), "test: another bundle")
    return first, second


def test_another_store_s_version_of_that_number_is_unpacked_again(
        store_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The daemon ran v1 of its old SQLite store; its new store (recreated, or moved to
    PostgreSQL) has another v1."""
    first, second = _bundles(tmp_path)
    cache = tmp_path / "models"
    old = ModelRegistry(Store(f"sqlite:///{tmp_path / 'old.sqlite'}").engine)
    new = ModelRegistry(Store(store_url).engine)
    assert old.register("rl+rl", bundle=first) == new.register("rl+rl", bundle=second) == 1
    old.materialize(1, cache)
    with caplog.at_level(logging.WARNING, logger="slurm_rl.store"):
        unpacked = new.materialize(1, cache)
    assert unpacked == cache / "v1"
    expected = _cached_form(second)
    for name in ("meta.json", "weights.pt"):
        assert (unpacked / name).read_bytes() == (expected / name).read_bytes()
    assert json.loads((unpacked / "meta.json").read_text())["starvation_h"] == 6.0
    assert [r.getMessage() for r in caplog.records] == [
        f"models cache entry {unpacked} differs from the store's bundle of that version "
        "(another store's version, or damaged): unpacked again"]
    assert sorted(p.name for p in cache.iterdir()) == ["v1"]  # nothing left aside


@pytest.mark.parametrize("damage", ["truncated weights", "no weights", "empty meta"])
def test_a_damaged_cache_entry_is_unpacked_again(tmp_path: Path, damage: str) -> None:
    registry = ModelRegistry(Store(f"sqlite:///{tmp_path / 's.sqlite'}").engine)
    version = registry.register("rl+rl", bundle=default_bundle_path())
    cache = tmp_path / "models"
    entry = registry.materialize(version, cache)
    intact = {name: (entry / name).read_bytes() for name in ("meta.json", "weights.pt")}
    if damage == "truncated weights":  # the power went before the file reached the disk
        (entry / "weights.pt").write_bytes(intact["weights.pt"][:1000])
    elif damage == "no weights":
        (entry / "weights.pt").unlink()
    else:
        (entry / "meta.json").write_text("")
    again = registry.materialize(version, cache)
    assert {name: (again / name).read_bytes() for name in intact} == intact
    assert intact["weights.pt"] == (default_bundle_path() / "weights.pt").read_bytes()
    kept = again.stat().st_ino
    assert registry.materialize(version, cache).stat().st_ino == kept  # intact: kept


def _cached_form(bundle: Path) -> Path:
    """``bundle`` as the cache writes it (meta.json re-serialised, sorted keys)."""
    target = bundle.with_name(bundle.name + "-cached")
    target.mkdir()
    meta = json.loads((bundle / "meta.json").read_text())
    (target / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    shutil.copy(bundle / "weights.pt", target / "weights.pt")
    return target


def test_an_unpacking_that_fails_leaves_no_staging_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk halfway through unpacking: the error reaches the caller (the daemon keeps
    its policy and tries again at the next version or reload) and no ``.v1.*`` folder is left
    behind to pile up at every try."""
    import errno

    import slurm_rl.store.registry as registry_module

    first, _ = _bundles(tmp_path)
    cache = tmp_path / "models"
    registry = ModelRegistry(Store(f"sqlite:///{tmp_path / 'store.sqlite'}").engine)
    registry.register("rl+rl", bundle=first)
    written: list[Path] = []

    def full_disk(path: Path, content: bytes) -> None:
        if written:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        path.write_bytes(content)
        written.append(path)

    monkeypatch.setattr(registry_module, "write_atomic", full_disk)
    with pytest.raises(OSError, match="No space left"):
        registry.materialize(1, cache)
    assert written  # one file was unpacked before the disk filled
    assert list(cache.iterdir()) == []
