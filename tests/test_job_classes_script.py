"""scripts/job_classes.py, the avg-JCT split by job class behind docs/training-log/
sessions-48.md: the classes add up to the avg JCT, and the script runs on a tiny input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from slurm_rl.core import Cluster, Job, Node
from slurm_rl.simulator.outcomes import JobOutcome
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "job_classes.py"


def _script() -> ModuleType:
    return load_script("job_classes")


def _outcome(job_id: str, gpus: int, limit_h: float | None, wait_h: float, run_h: float,
             node: str) -> JobOutcome:
    job = Job(job_id, submit_time=0.0, num_gpus=gpus,
              time_limit=None if limit_h is None else limit_h * 3600)
    start = wait_h * 3600
    return JobOutcome(job, start, start + run_h * 3600, (node,), (gpus,), {}, 0.0, run_h * 3600)


def test_the_classes_add_up_to_the_avg_jct_and_name_the_gpu_types() -> None:
    script = _script()
    cluster = Cluster("c", (Node("a1", "a100", 8), Node("k1", "k80", 8)))
    replica_0 = [_outcome("1", 1, 2.0, 0.0, 1.0, "a1"), _outcome("2", 8, 48.0, 10.0, 30.0, "k1")]
    replica_1 = [_outcome("1", 1, 2.0, 1.0, 1.0, "a1"), _outcome("2", 8, None, 20.0, 10.0, "a1")]
    figures = script.class_figures("p", [replica_0, replica_1], cluster)
    assert [(f.gpus, f.limit) for f in figures] == [("1", "<4 h"), ("5-8", ">=24 h")]
    avg_jct_h = (1.0 + 40.0 + 2.0 + 30.0) / 4
    assert sum(f.contribution_h for f in figures) == pytest.approx(avg_jct_h)
    gang = figures[1]
    assert gang.jobs_per_replica == 1.0 and gang.wait_h == 15.0 and gang.run_h == 20.0
    assert dict(gang.gpu_types) == {"k80": 0.5, "a100": 0.5}
    assert script.gpu_class(9) == ">8" and script.limit_class(4 * 3600.0) == "4-24 h"
    by_gpus = script.class_figures("p", [replica_0, replica_1], cluster, by_limit=False)
    assert [(f.gpus, f.limit) for f in by_gpus] == [("1", "any"), ("5-8", "any")]


def test_the_script_runs_on_a_tiny_input() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--trace", "synthetic", "--cluster", "tiny", "--days",
         "0.2", "--policies", "fifo+first-fit,sjf-limit+fastest-gpu", "--replicas", "2",
         "--workers", "1", "--by-gpus-only"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "avg JCT by job class" in done.stdout and "sjf-limit+fastest-gpu: avg JCT" in \
        done.stdout, done.stdout[-2000:]
