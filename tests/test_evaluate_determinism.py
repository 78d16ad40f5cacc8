"""Issue 21: ``slurm-rl evaluate`` gives the same figures to the digit, run after run (a pool
worker runs several replays one after the other: none may see what an earlier one left
behind, which the second test checks directly; one in-process run was dropped for CI time)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from slurm_rl.cli.train import evaluate_command
from slurm_rl.paths import default_bundle_path
from slurm_rl.replay_pool import fresh_replay_state


def tiny_trace(path: Path, jobs: int = 40) -> Path:
    """A queue on the tiny cluster (32 GPUs): users, sizes and run times that make every
    ordering and placement matter, in slurm-rl's CSV schema."""
    rng = np.random.default_rng(21)
    rows = ["job_id,submit_time,num_gpus,duration,user"]
    for i in range(jobs):
        gpus = int(rng.choice([1, 2, 4, 8]))
        rows.append(f"j{i},{1_504_224_000 + 120 * i},{gpus},{rng.lognormal(8.0, 1.2):.0f},"
                    f"u{rng.integers(4)}")
    path.write_text("\n".join(rows) + "\n")
    return path


def evaluation(trace: Path, directory: Path, workers: int) -> str:
    result = CliRunner().invoke(evaluate_command, [
        "--trace", str(trace), "--cluster", "tiny", "--placements", "best-fit",
        "--replicas", "2", "--bundle", str(default_bundle_path()), "--workers", str(workers),
        "--report", str(directory)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return (directory / "evaluation.json").read_text()


@pytest.mark.slow
def test_the_same_command_gives_the_same_evaluation(tmp_path: Path) -> None:
    trace = tiny_trace(tmp_path / "tiny.csv")
    first = evaluation(trace, tmp_path / "first", workers=2)
    assert '"sjf-predicted-aged+best-fit"' in first
    assert evaluation(trace, tmp_path / "second", workers=2) == first


def test_every_replay_starts_from_the_same_process_state() -> None:
    def draws() -> tuple[float, float, float]:
        return float(torch.rand(1)), float(np.random.random()), random.random()  # noqa: NPY002

    fresh_replay_state()
    first = draws()
    draws()  # what an earlier replay in the same worker might have drawn
    torch.set_num_threads(2)
    fresh_replay_state()
    assert draws() == first and torch.get_num_threads() == 1
