"""A FIFO where a bundle file or the jobcomp log should be: one clear message, not a read
that blocks for good (a bad-input review found ``bundle show`` hanging on a FIFO weights.pt
or meta.json, and ``daemon --once`` on a FIFO ``jobcomp_path``; the trace, cluster spec and
config readers already refused one)."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from slurm_rl.agents.dual.bundle import META_FILE, WEIGHTS_FILE, BundleError, load_bundle
from slurm_rl.daemon.jobcomp import JobcompLog
from slurm_rl.paths import default_bundle_path
from tests.timebox import time_limit


@pytest.mark.parametrize("name", [META_FILE, WEIGHTS_FILE])
def test_a_fifo_in_a_bundle_is_one_line_not_a_hang(name: str, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(default_bundle_path(), bundle)
    (bundle / name).unlink()
    os.mkfifo(bundle / name)
    with time_limit(30, f"load_bundle with a FIFO {name}"), \
            pytest.raises(BundleError, match=r"not a regular file \(a FIFO\)"):
        load_bundle(bundle)


def test_a_fifo_as_the_jobcomp_log_is_one_warning_not_a_hang(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fifo = tmp_path / "jobcomp.txt"
    os.mkfifo(fifo)
    log = JobcompLog(fifo, tmp_path / "position")
    with time_limit(30, "reading a FIFO jobcomp log"), \
            caplog.at_level(logging.WARNING, logger="slurm_rl.daemon"):
        assert log.read_new() == []
    assert [r.getMessage() for r in caplog.records] == [
        f"jobcomp log not read: {fifo}: not a regular file (a FIFO)"]
