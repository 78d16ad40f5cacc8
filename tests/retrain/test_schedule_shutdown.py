"""Stopping the schedule ends a running retrain process (review 45b): its worker thread
waited in ``subprocess.run`` for up to ``retrain_timeout_s`` (4 h), the interpreter joined
that thread at exit, and systemd's SIGKILL then left the run's ``retrain_runs`` row
``running``, whose 6-hour lease blocked the next retrains. A retrain process that ends by a
signal or by the timeout has its row marked by the daemon."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import slurm_rl.retrain.schedule as schedule
from slurm_rl.config import DaemonConfig
from slurm_rl.daemon.runner import Daemon
from slurm_rl.retrain.run import _start_run
from slurm_rl.retrain.schedule import (
    RetrainProcesses,
    retrain_env,
    run_retrain_process,
    start_schedule,
)
from slurm_rl.store.repository import Store
from tests.test_daemon import Clock, _cluster, _config

LEASE_S = 6 * 3600.0
# A stand-in for a long retrain: it records its run as `slurm-rl retrain` does (a
# retrain_runs row, status running, with its host and pid), says its pid, and sleeps.
CHILD = textwrap.dedent("""
    import os, signal, socket, sys, time
    from datetime import UTC, datetime
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session
    from slurm_rl.store.registry_models import RetrainRunRow
    if sys.argv[2] == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with Session(create_engine(os.environ["SLURM_RL_STORE"])) as session, session.begin():
        session.add(RetrainRunRow(started_at=datetime.now(UTC), status="running",
                                  message="", host=socket.gethostname(), pid=os.getpid()))
    open(sys.argv[1], "w").write(str(os.getpid()))
    time.sleep(60)
""")


def _until(done: Callable[[], bool], what: str, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not done():
        assert time.monotonic() < deadline, f"no {what} within {within_s} s"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _runs(url: str) -> list[tuple[str, str]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return [(row.status, row.message) for row in connection.execute(
                sa.text("SELECT status, message FROM retrain_runs ORDER BY id"))]
    finally:
        engine.dispose()


def _lease_is_free(url: str) -> bool:
    engine = sa.create_engine(url)
    try:
        return _start_run(engine, LEASE_S) is not None
    finally:
        engine.dispose()


class Retrain:
    """The child's argv and the pid it reported."""

    def __init__(self, tmp_path: Path, kind: str = "polite") -> None:
        self.pid_file = tmp_path / f"child-{kind}.pid"
        self.argv = [sys.executable, "-c", CHILD, str(self.pid_file), kind]

    def started(self) -> bool:
        return self.pid_file.exists() and self.pid_file.read_text() != ""

    @property
    def pid(self) -> int:
        return int(self.pid_file.read_text())


@pytest.fixture
def store_url(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'state' / 'slurm-rl.sqlite'}"
    (tmp_path / "state").mkdir(mode=0o700)
    Store(url).engine.dispose()  # the schema, as the daemon creates it
    yield url


@contextlib.contextmanager
def _reaped(retrain: Retrain) -> Iterator[None]:
    """Never leave a sleeping child behind a failed test."""
    try:
        yield
    finally:
        if retrain.started():
            with contextlib.suppress(ProcessLookupError):
                os.kill(retrain.pid, signal.SIGKILL)


def test_shutdown_ends_the_running_retrain_and_frees_its_lease(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    retrain = Retrain(tmp_path)
    monkeypatch.setattr(schedule, "retrain_argv", lambda config: retrain.argv)
    config = DaemonConfig(store_url=store_url, state_dir=tmp_path / "state", retrain_every_h=24)
    started = start_schedule(config)
    assert started is not None
    with _reaped(retrain):
        started.run_now()
        _until(retrain.started, "retrain process")
        began = time.monotonic()
        started.shutdown()
        _until(lambda: not _alive(retrain.pid), "end of the retrain process", 3.0)
        assert time.monotonic() - began < 3.0
        [(status, message)] = _runs(store_url)
        assert (status, message) == ("failed",
                                     "retrain process ended (SIGTERM) as the daemon stopped")
        assert _lease_is_free(store_url)


def test_a_retrain_that_ignores_sigterm_is_killed_after_the_grace(
    tmp_path: Path, store_url: str
) -> None:
    retrain = Retrain(tmp_path, "stubborn")
    processes = RetrainProcesses(grace_s=0.5)
    config = DaemonConfig(store_url=store_url, state_dir=tmp_path / "state")
    job = threading.Thread(target=run_retrain_process,
                           args=(retrain.argv, retrain_env(config), 60.0, processes))
    job.start()
    with _reaped(retrain):
        _until(retrain.started, "retrain process")
        began = time.monotonic()
        processes.stop()
        job.join(5.0)
        assert not job.is_alive() and not _alive(retrain.pid)
        assert time.monotonic() - began < 3.0
        assert _runs(store_url) == [("failed",
                                     "retrain process ended (SIGKILL) as the daemon stopped")]
    # Nothing starts once stopped: a retrain queued just before the shutdown.
    assert run_retrain_process(retrain.argv, retrain_env(config), 60.0, processes) == 143


def test_a_retrain_killed_by_its_timeout_frees_its_lease(tmp_path: Path, store_url: str) -> None:
    retrain = Retrain(tmp_path)
    config = DaemonConfig(store_url=store_url, state_dir=tmp_path / "state")
    with _reaped(retrain):
        assert run_retrain_process(retrain.argv, retrain_env(config), 4.0) == 124
    assert _runs(store_url) == [("failed", "retrain process killed: retrain_timeout_s passed")]
    assert _lease_is_free(store_url)


def test_the_daemon_stops_a_retrain_even_one_a_reload_left_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    retrain = Retrain(tmp_path)
    monkeypatch.setattr(schedule, "retrain_argv", lambda config: retrain.argv)
    configs = [_config(tmp_path, retrain_every_h=24.0, metrics_port=0)]
    daemon = Daemon(lambda: configs[-1], runner=_cluster(), clock=Clock())
    loop = threading.Thread(target=daemon.run, name="daemon-loop")
    loop.start()
    with _reaped(retrain):
        try:
            _until(lambda: daemon.schedule is not None, "schedule")
            assert daemon.schedule is not None
            daemon.schedule.run_now()
            _until(retrain.started, "retrain process")
            first = daemon.schedule
            configs.append(configs[0].model_copy(update={"retrain_every_h": 12.0}))
            daemon.request_reload()  # a new schedule; the running retrain goes on
            _until(lambda: daemon.schedule is not first, "new schedule")
            assert _alive(retrain.pid)
        finally:
            daemon.request_stop()
            loop.join(timeout=10)
        assert not loop.is_alive()
        _until(lambda: not _alive(retrain.pid), "end of the retrain process", 3.0)
        assert _runs(configs[0].store)[0][0] == "failed"


def test_the_interpreter_exits_at_once_after_the_shutdown(tmp_path: Path, store_url: str) -> None:
    """The symptom: `systemctl stop` waited until its timeout, then SIGKILLed the daemon."""
    retrain = Retrain(tmp_path)
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        import slurm_rl.retrain.schedule as schedule
        from slurm_rl.config import DaemonConfig
        schedule.retrain_argv = lambda config: {retrain.argv!r}
        config = DaemonConfig(store_url={store_url!r}, state_dir=Path({str(tmp_path)!r}),
                              retrain_every_h=24)
        started = schedule.start_schedule(config)
        started.run_now()
        while not Path({str(retrain.pid_file)!r}).exists():
            time.sleep(0.02)
        time.sleep(0.2)
        started.shutdown()
    """)
    with _reaped(retrain):
        began = time.monotonic()
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=30, check=False)
        assert done.returncode == 0, done.stderr
        assert time.monotonic() - began < 15.0  # was: the child's 60 s sleep
