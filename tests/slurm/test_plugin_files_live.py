"""job_submit.lua inside a real slurmctld: what it reads and what it defers (issue 18,
finding 8). The plugin's rules are tested in detail under a standalone Lua in
tests/test_job_submit_lua.py; these show that slurmctld's embedded Lua runs them (its
file checks run coreutils' stat from inside slurmctld) and that a planted FIFO cannot stall
the controller. The heartbeat tests change the native cluster's heartbeat file, so they skip
against compose; each puts a fresh regular heartbeat back.

An admin comment a job already has when it is submitted cannot be given from sbatch in 22.05
(only the standalone tests cover keeping it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_rl.slurm.deferral import deferred_until
from tests.slurm.live import LiveCluster

pytestmark = pytest.mark.slurm

# sbatch's answer within this: a blocked plugin would hold slurmctld's job locks for ever.
ANSWER_S = 10.0


def _assert_not_deferred(live: LiveCluster, job_id: str) -> None:
    job = live.job(job_id)
    assert job.admin_comment == "" and job.reason != "BeginTime", job


def _assert_deferred(live: LiveCluster, job_id: str) -> None:
    job = live.job(job_id)
    assert deferred_until(job.admin_comment) is not None and job.reason == "BeginTime", job


def _submit_gpu_job(live: LiveCluster) -> str:
    started = time.monotonic()
    job_id = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10")
    assert time.monotonic() - started < ANSWER_S
    return job_id


def _release_readers(fifo: Path) -> None:
    """A plugin blocked in opening the FIFO gets a writer, then end of file."""
    for _ in range(10):
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: nobody reads it (any more)
            return
        os.close(fd)
        time.sleep(0.1)


@pytest.fixture
def heartbeat(live: LiveCluster) -> Iterator[Path]:
    """The native cluster's heartbeat; a fresh regular one is put back after the test."""
    if live.controller is None:
        pytest.skip("changes slurmctld's heartbeat file: native cluster only")
    path = live.controller.heartbeat_path
    mode = path.parent.stat().st_mode & 0o7777
    try:
        yield path
    finally:
        path.parent.chmod(mode)
        if path.is_fifo():
            _release_readers(path)
        live.beat()  # an atomic rename: replaces a symlink or FIFO with a regular file


@pytest.mark.parametrize("option", ["--gres=gpu:0", "--gres=gpu:a100:0"])
def test_a_request_for_no_gpus_is_not_deferred(live: LiveCluster, option: str) -> None:
    _assert_not_deferred(live, live.sbatch("alice", option, "-t", "10"))
    _assert_deferred(live, live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10"))


def test_a_symlinked_heartbeat_is_not_followed(live: LiveCluster, heartbeat: Path) -> None:
    real = heartbeat.with_name("heartbeat.real")
    real.write_text(f"{int(time.time())}\n")
    try:
        heartbeat.unlink()
        heartbeat.symlink_to(real)
        _assert_not_deferred(live, _submit_gpu_job(live))
    finally:
        real.unlink()
    live.beat()
    _assert_deferred(live, _submit_gpu_job(live))


def test_a_fifo_heartbeat_does_not_stall_slurmctld(live: LiveCluster, heartbeat: Path) -> None:
    heartbeat.unlink()
    os.mkfifo(heartbeat, 0o644)
    _assert_not_deferred(live, _submit_gpu_job(live))
    assert live.run("scontrol", "ping").ok


def test_a_huge_heartbeat_is_not_read(live: LiveCluster, heartbeat: Path) -> None:
    heartbeat.write_text(f"{int(time.time())}" + " " * (4 << 20))
    _assert_not_deferred(live, _submit_gpu_job(live))


def test_a_heartbeat_in_a_directory_others_may_write_is_not_trusted(
    live: LiveCluster, heartbeat: Path
) -> None:
    heartbeat.parent.chmod(0o777)
    _assert_not_deferred(live, _submit_gpu_job(live))
