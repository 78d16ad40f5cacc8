"""A private PostgreSQL server for the tests that need one (marker ``postgres``).

Debian's packages (``scripts/install-postgres.sh``, run by ``make test``) provide the
binaries; the server is a throw-away cluster in a temporary directory, run as the
``postgres`` user, listening only on a Unix socket there, on a free port number. Each test
gets its own database.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

USER = "postgres"


@dataclass(frozen=True)
class PgServer:
    socket_dir: Path
    port: int

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{USER}@/{database}?host={self.socket_dir}&port={self.port}"

    def create_database(self) -> str:
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(host=str(self.socket_dir), port=self.port, user=USER,
                             dbname="postgres", autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return name


def unavailable() -> str | None:
    """Why this machine cannot run the test server, or None."""
    if os.geteuid() != 0:
        return "the private PostgreSQL server is started as root (runuser -u postgres)"
    if not _bindir():
        return "PostgreSQL is not installed (scripts/install-postgres.sh installs it)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg driver is not installed (pip install -e '.[dev]')"
    return None


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _as_postgres(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", USER, "--", *argv], check=True,
                          capture_output=True, text=True, timeout=120)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def pg_server() -> Iterator[PgServer]:
    bindir = _bindir()
    assert bindir is not None
    root = Path(tempfile.mkdtemp(prefix="slurm-rl-pg-"))
    shutil.chown(root, USER, USER)
    data, sockets = root / "data", root / "run"
    sockets.mkdir()
    shutil.chown(sockets, USER, USER)
    port = _free_port()
    _as_postgres(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", USER,
                 "--no-sync", "-E", "UTF8")
    options = f"-k {sockets} -p {port} -c listen_addresses='' -c fsync=off"
    _as_postgres(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"),
                 "-o", options, "-w", "start")
    try:
        yield PgServer(sockets, port)
    finally:
        subprocess.run(["runuser", "-u", USER, "--", str(bindir / "pg_ctl"), "-D", str(data),
                        "-m", "immediate", "-w", "stop"], capture_output=True, timeout=60,
                       check=False)
        shutil.rmtree(root, ignore_errors=True)
