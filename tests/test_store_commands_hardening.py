"""The store commands on a store that is corrupt, empty, locked, read-only or unreachable,
an output directory that fills up, and numbers no store can hold: one clear line and exit
code 2 — never a traceback, a store password, or an earlier export lost."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_rl.cli.main import main
from slurm_rl.errors import InputError
from slurm_rl.ops.revert import parse_since
from slurm_rl.store import repository
from slurm_rl.store.models import CycleRow
from slurm_rl.store.registry import ModelRegistry
from slurm_rl.store.repository import Store

NOW = datetime.now(UTC).timestamp()
SECRET_URL = "postgresql+psycopg://admin:s3cret@127.0.0.1:1/slurm_rl?connect_timeout=2"
# Dropping these capabilities makes root meet file modes as any other user does.
AS_A_USER = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]


def _one_line(args: list[str]) -> str:
    result = CliRunner().invoke(main, args)
    assert "Traceback" not in result.output and result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def _store(path: Path, cycles: int = 3) -> str:
    url = f"sqlite:///{path}"
    store = Store(url)
    with store.session() as session, session.begin():
        session.add_all(CycleRow(cluster="c", snapshot_time=NOW - 60 + i, policy_id="fifo+x",
                                 recorded_at=datetime.now(UTC), actuator_mode="enforce",
                                 pending_jobs=i, running_jobs=0, free_gpus=8)
                        for i in range(cycles))
    store.engine.dispose()
    return url


def _registry_store(path: Path) -> str:
    url = _store(path, cycles=0)
    engine = repository.make_engine(url)
    registry = ModelRegistry(engine)
    first = registry.register("fifo+best-fit")
    registry.register("qssf+best-fit")
    registry.promote(first)
    engine.dispose()
    return url


def _active(url: str) -> int | None:
    engine = repository.make_engine(url)
    try:
        return ModelRegistry(engine).active_number()
    finally:
        engine.dispose()


@pytest.fixture
def short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A locked store is given up on after 0.2 s here, not the daemon's 10 s."""
    pragmas = repository._sqlite_pragmas

    def shorter(connection: Any, record: Any) -> None:
        connection.execute("PRAGMA busy_timeout=200")  # journal_mode=WAL may wait, too
        pragmas(connection, record)
        connection.execute("PRAGMA busy_timeout=200")

    monkeypatch.setattr(repository, "_sqlite_pragmas", shorter)


@pytest.fixture
def write_lock(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holding the store's write lock (a daemon in its transaction)."""
    url = _registry_store(tmp_path / "s.sqlite")
    holder = sqlite3.connect(tmp_path / "s.sqlite", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    yield holder
    holder.execute("ROLLBACK")
    holder.close()
    assert _active(url) == 1  # nothing changed


def _as_a_user() -> list[str]:
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None or subprocess.run([*AS_A_USER, "true"],
                                                             capture_output=True).returncode:
        pytest.skip("running as root without setpriv: file modes do not stop root")
    return AS_A_USER


def _cli(prefix: list[str], args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    command = [*prefix, sys.executable, "-c", "from slurm_rl.cli.main import main; main()", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, **kwargs)


def _one_stderr_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr and result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# -- export: bad stores --------------------------------------------------------------------


def _zero_bytes(path: Path) -> None:
    path.write_bytes(b"")


def _not_a_database(path: Path) -> None:
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40)


def _malformed(path: Path) -> None:
    _store(path, cycles=500)
    with path.open("r+b") as handle:  # keep the header, overwrite the schema and the rows
        handle.seek(100)
        handle.write(b"\xde\xad\xbe\xef" * 4000)


@pytest.mark.parametrize("damage", [_zero_bytes, _not_a_database, _malformed])
def test_export_from_a_damaged_store_is_one_line(tmp_path: Path, damage: Any) -> None:
    damage(tmp_path / "s.sqlite")
    line = _one_line(["export", "--store", f"sqlite:///{tmp_path / 's.sqlite'}",
                      "--since", "1d", "--output", str(tmp_path / "out")])
    assert line.startswith(f"error: cannot read the store sqlite:///{tmp_path / 's.sqlite'}: ")
    assert "[SQL:" not in line


def test_export_from_a_locked_store_is_one_line(tmp_path: Path,
                                                short_busy_timeout: None) -> None:
    """WAL readers are never blocked; a store in rollback-journal mode (copied, or on a file
    system without shared memory) is, while another process writes."""
    url = _store(tmp_path / "s.sqlite")
    holder = sqlite3.connect(tmp_path / "s.sqlite", isolation_level=None)
    holder.execute("PRAGMA journal_mode=DELETE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        line = _one_line(["export", "--store", url, "--since", "1d",
                          "--output", str(tmp_path / "out")])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "cannot read the store" in line and "database is locked" in line


def test_export_from_an_unreachable_store_never_shows_its_password(tmp_path: Path) -> None:
    line = _one_line(["export", "--store", SECRET_URL, "--since", "1d",
                      "--output", str(tmp_path / "out")])
    assert "s3cret" not in line and "admin:***@127.0.0.1:1" in line


def test_export_from_a_read_only_store_works(tmp_path: Path) -> None:
    _store(tmp_path / "s.sqlite")
    url = f"sqlite:///file:{tmp_path / 's.sqlite'}?mode=ro&uri=true"
    result = CliRunner().invoke(main, ["export", "--store", url, "--since", "1d",
                                       "--output", str(tmp_path / "out")])
    assert result.exit_code == 0 and "cycles: 3 rows" in result.output, result.output


def test_export_from_a_store_in_a_read_only_directory_is_one_line(tmp_path: Path) -> None:
    """SQLite cannot make the WAL index (``-shm``) beside it, so it cannot read it at all."""
    prefix = _as_a_user()
    (tmp_path / "ro").mkdir()
    url = _store(tmp_path / "ro" / "s.sqlite")
    (tmp_path / "ro").chmod(0o555)
    (tmp_path / "out").mkdir(mode=0o777)
    try:
        result = _cli(prefix, ["export", "--store", url, "--since", "1d",
                               "--output", str(tmp_path / "out")])
    finally:
        (tmp_path / "ro").chmod(0o755)
    line = _one_stderr_line(result)
    assert "cannot read the store" in line and "readonly" in line


# -- export: the output --------------------------------------------------------------------


def _earlier_export(tmp_path: Path) -> dict[str, bytes]:
    url = _store(tmp_path / "good.sqlite", cycles=2000)
    result = CliRunner().invoke(main, ["export", "--store", url, "--since", "1d",
                                       "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    return {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}


def test_a_failed_export_leaves_the_earlier_one_intact(tmp_path: Path) -> None:
    before = _earlier_export(tmp_path)
    assert len(before["cycles.csv"]) > 100_000
    _malformed(tmp_path / "bad.sqlite")
    _one_line(["export", "--store", f"sqlite:///{tmp_path / 'bad.sqlite'}", "--since", "1d",
               "--output", str(tmp_path / "out")])
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before


def _file_size_limit(limit: int) -> Any:
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE as on Linux")
def test_an_export_that_fills_the_disk_is_one_line_and_keeps_the_earlier_one(
    tmp_path: Path
) -> None:
    before = _earlier_export(tmp_path)
    result = _cli([], ["export", "--store", f"sqlite:///{tmp_path / 'good.sqlite'}",
                       "--since", "1d", "--output", str(tmp_path / "out")],
                  preexec_fn=_file_size_limit(64 * 1024))
    line = _one_stderr_line(result)
    assert line.startswith(f"error: --output: cannot write {tmp_path / 'out'}")
    assert "File too large" in line and "earlier export" in line
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before


def test_an_export_that_succeeds_replaces_the_earlier_one_whole(tmp_path: Path) -> None:
    _earlier_export(tmp_path)
    url = _store(tmp_path / "small.sqlite", cycles=1)
    result = CliRunner().invoke(main, ["export", "--store", url, "--since", "1d",
                                       "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "cycles.csv", "decisions.csv", "jobs.csv", "outcomes.csv"]  # no temporary left
    assert len((tmp_path / "out" / "cycles.csv").read_text().splitlines()) == 2
    mode = (tmp_path / "out" / "cycles.csv").stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask  # as a plain open() would have made it


# -- models promote / rollback -------------------------------------------------------------


@pytest.mark.parametrize("args", [["promote", "2"], ["rollback"]])
def test_promote_and_rollback_on_a_locked_store_are_one_line(
    tmp_path: Path, args: list[str], short_busy_timeout: None, write_lock: sqlite3.Connection
) -> None:
    line = _one_line(["models", *args, "--store", f"sqlite:///{tmp_path / 's.sqlite'}"])
    assert "database is locked" in line and "another process" in line


@pytest.mark.parametrize("args", [["promote", "2"], ["rollback"]])
def test_promote_and_rollback_on_a_read_only_store_are_one_line(
    tmp_path: Path, args: list[str]
) -> None:
    url = _registry_store(tmp_path / "s.sqlite")
    read_only = f"sqlite:///file:{tmp_path / 's.sqlite'}?mode=ro&uri=true"
    line = _one_line(["models", *args, "--store", read_only])
    shown = repository.shown_url(read_only)
    assert line.startswith(f"error: store {shown}: cannot change the model registry: ")
    assert "readonly" in line and "read-only" in line
    assert _active(url) == 1


def test_promote_on_a_store_file_this_user_may_not_write_is_one_line(tmp_path: Path) -> None:
    prefix = _as_a_user()
    url = _registry_store(tmp_path / "s.sqlite")
    (tmp_path / "s.sqlite").chmod(0o444)
    try:
        result = _cli(prefix, ["models", "promote", "2", "--store", url])
    finally:
        (tmp_path / "s.sqlite").chmod(0o644)
    line = _one_stderr_line(result)
    assert "cannot change the model registry" in line and "readonly" in line
    assert _active(url) == 1


def test_a_version_no_store_can_hold_is_a_usage_error(tmp_path: Path) -> None:
    url = _registry_store(tmp_path / "s.sqlite")
    result = CliRunner().invoke(main, ["models", "promote", str(2**70), "--store", url])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"Error: Invalid value for 'VERSION': {2**70} is not in the range 1<=x<=2147483647.")
    assert _active(url) == 1


@pytest.mark.parametrize("args", [["list"], ["promote", "2"], ["rollback"]])
def test_models_never_show_the_store_password(args: list[str]) -> None:
    line = _one_line(["models", *args, "--store", SECRET_URL])
    assert "s3cret" not in line and "admin:***@127.0.0.1:1" in line


# -- revert --since ------------------------------------------------------------------------


@pytest.mark.parametrize("since", ["1e400", "-1e400", "inf", "nan", "1e300", "-1e300",
                                   "99999999999999999999"])
def test_a_since_out_of_any_calendar_is_one_line(tmp_path: Path, since: str) -> None:
    with pytest.raises(InputError, match="^--since: "):
        parse_since(since)
    url = _store(tmp_path / "s.sqlite")
    line = _one_line(["revert", "--dry-run", "--since", since, "--store", url])
    assert line.startswith("error: --since: ") and repr(since) in line


def test_a_since_at_the_edge_of_the_calendar_still_works() -> None:
    assert parse_since("0") == datetime(1970, 1, 1, tzinfo=UTC)
    assert parse_since("9999-12-31T23:59:59-01:00") is not None


@pytest.mark.parametrize("args", [["explain", "5"], ["revert", "--dry-run"]])
def test_explain_and_revert_never_show_the_store_password(args: list[str]) -> None:
    line = _one_line([*args, "--store", SECRET_URL])
    assert "s3cret" not in line and "admin:***@127.0.0.1:1" in line
