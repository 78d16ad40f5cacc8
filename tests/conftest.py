"""Session fixtures shared by the test suite.

``slurm_cluster`` is the one real Slurm cluster the integration tests (marker ``slurm``) run
against. ``--slurm-cluster=native`` (the default) starts the native dev cluster once per
session in a temporary directory (root needed; Debian's Slurm packages are installed if
missing); ``--slurm-cluster=compose`` uses the docker-compose cluster that
``docker compose up -d`` started, so the same tests run against containers.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import pg
from tests.slurm.live import LiveCluster, compose_cluster, native_cluster


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The fault suite's one-line verdict (tests/slurm/test_faults_live.py), shown with -q."""
    from tests.slurm.faults import summary

    line = summary()
    if line is not None:
        terminalreporter.write_line(line)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slurm-cluster",
        choices=("native", "compose"),
        default="native",
        help="where the 'slurm' integration tests get their cluster (default: native)",
    )


def _native_unavailable() -> str | None:
    """Why this machine cannot host the native cluster, or None if it can."""
    if os.geteuid() != 0:
        return "the native Slurm cluster needs root (slurmd, mknod, useradd)"
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        return "Slurm is not installed and there is no apt-get to install it"
    return None


@pytest.fixture(scope="session")
def slurm_cluster(request: pytest.FixtureRequest) -> Iterator[LiveCluster]:
    kind = request.config.getoption("--slurm-cluster")
    if kind == "compose":
        yield from compose_cluster()
        return
    reason = _native_unavailable()
    if reason is not None:
        pytest.skip(reason)
    yield from native_cluster()


@pytest.fixture
def live(slurm_cluster: LiveCluster) -> Iterator[LiveCluster]:
    """The session cluster with a fresh heartbeat; the test's jobs are cancelled after it."""
    slurm_cluster.beat()
    yield slurm_cluster
    slurm_cluster.cancel_all()
    slurm_cluster.beat()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[pg.PgServer]:
    """A private PostgreSQL server for the session (tests with marker ``postgres``)."""
    reason = pg.unavailable()
    if reason is not None:
        pytest.skip(reason)
    yield from pg.pg_server()


@pytest.fixture
def pg_url(pg_server: pg.PgServer) -> str:
    """A fresh, empty database on the session's PostgreSQL server."""
    return pg_server.url(pg_server.create_database())


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL on each backend: a SQLite file not made yet, or an empty PostgreSQL
    database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return str(request.getfixturevalue("pg_url"))
