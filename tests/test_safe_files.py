"""Issue 18 (5): the daemon's writes never follow a link someone planted, and it refuses a
state, heartbeat or models directory that others may write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_rl.config import DaemonConfig
from slurm_rl.daemon.jobcomp import JobcompLog
from slurm_rl.daemon.runner import DaemonError, check_private_dirs
from slurm_rl.safefile import UnsafePathError, require_private_dir, write_atomic
from slurm_rl.slurm import deferral
from slurm_rl.store.registry import ModelRegistry
from slurm_rl.store.repository import Store


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file another user's link points at (say, one only the daemon's user may write)."""
    path = tmp_path / "elsewhere" / "precious"
    path.parent.mkdir()
    path.write_text("untouched\n")
    path.chmod(0o600)
    return path


def _plant(link: Path, victim: Path) -> None:
    link.symlink_to(victim)


def test_the_heartbeat_never_writes_through_a_planted_temporary_name(
    tmp_path: Path, victim: Path
) -> None:
    """The temporary file was ``.<name>.<pid>.tmp``: a link planted there was written
    through and chmod'ed 0644 (a private file made world-readable)."""
    beat = tmp_path / "state" / "heartbeat"
    beat.parent.mkdir()
    _plant(beat.parent / f".heartbeat.{os.getpid()}.tmp", victim)
    deferral.beat(beat, 1234.0)
    assert beat.read_text() == "1234\n" and not beat.is_symlink()
    assert victim.read_text() == "untouched\n"
    assert victim.stat().st_mode & 0o777 == 0o600
    assert beat.stat().st_mode & 0o777 == 0o644  # slurmctld's user reads it


def test_a_link_planted_as_the_target_is_replaced_not_followed(
    tmp_path: Path, victim: Path
) -> None:
    target = tmp_path / "job_submit_slurm_rl.conf"
    _plant(target, victim)
    write_atomic(target, "x = 1\n", 0o644)
    assert not target.is_symlink() and target.read_text() == "x = 1\n"
    assert victim.read_text() == "untouched\n"


def test_the_jobcomp_position_never_writes_through_a_planted_name(
    tmp_path: Path, victim: Path
) -> None:
    log = tmp_path / "jobcomp.txt"
    log.write_text("")
    position = tmp_path / "jobcomp.position"
    _plant(tmp_path / ".jobcomp.position.tmp", victim)
    reader = JobcompLog(log, position)
    reader.read_new()
    log.write_text("a line\n")
    reader.read_new()
    reader.commit()
    assert position.read_text().split()[1] == "7"
    assert victim.read_text() == "untouched\n"


def test_an_unpacked_model_never_lands_where_a_planted_link_points(tmp_path: Path) -> None:
    """The staging directory was ``.v<version>.<pid>``; made with exist_ok, a planted link
    to another directory received the bundle."""
    from slurm_rl.paths import default_bundle_path

    registry = ModelRegistry(Store(f"sqlite:///{tmp_path / 's.sqlite'}").engine)
    version = registry.register("rl+rl", bundle=default_bundle_path())
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (cache / f".v{version}.{os.getpid()}").symlink_to(elsewhere)
    bundle = registry.materialize(version, cache)
    assert (bundle / "weights.pt").read_bytes() == \
        (default_bundle_path() / "weights.pt").read_bytes()
    assert list(elsewhere.iterdir()) == []
    (cache / "v99").symlink_to(elsewhere)
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        registry.materialize(99, cache)


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777])
def test_a_directory_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    shared = tmp_path / "state"
    shared.mkdir()
    shared.chmod(mode)
    with pytest.raises(UnsafePathError) as caught:
        require_private_dir(shared, "state directory")
    assert f"chmod go-w {shared}" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(DaemonError, match="state directory .* may be written by its group"):
        check_private_dirs(DaemonConfig(state_dir=shared))
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        require_private_dir(link, "state directory")


def test_a_heartbeat_in_a_shared_directory_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "run"
    shared.mkdir()
    shared.chmod(0o777)
    config = DaemonConfig(state_dir=tmp_path / "state", heartbeat_path=shared / "beat",
                          mode="enforce")
    with pytest.raises(DaemonError, match="heartbeat directory"):
        check_private_dirs(config)
    shared.chmod(0o755)
    check_private_dirs(config)  # the daemon's own, readable by slurmctld: fine


def test_a_models_cache_others_may_write_is_refused(tmp_path: Path) -> None:
    from slurm_rl.paths import default_bundle_path

    registry = ModelRegistry(Store(f"sqlite:///{tmp_path / 's.sqlite'}").engine)
    version = registry.register("rl+rl", bundle=default_bundle_path())
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    with pytest.raises(UnsafePathError, match="models cache"):
        registry.materialize(version, cache)
