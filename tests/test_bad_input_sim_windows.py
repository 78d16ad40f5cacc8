"""Windows and workloads that cannot be replayed or trained on: one line naming the option,
the window and where the trace's jobs are, before any replay or training starts; the
synthetic workload cut to --window as a trace file is, and the options that mean nothing to
it refused — none of them silently ignored."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from slurm_rl.agents.dual.agent import network_config
from slurm_rl.agents.dual.network import DualNetwork
from slurm_rl.cli.main import main
from slurm_rl.traces import parse_window, synthetic_philly, window
from slurm_rl.training.objectives import ReturnScaler
from slurm_rl.training.ppo import advantages
from slurm_rl.training.rollout import Episode, EpisodeSpec

JAN_1_2024 = 1704067200  # 2024-01-01T00:00:00 on the trace clock
SPAN = "(its jobs span 2024-01-01..2024-01-03)"


def _run(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        repr(result.exception))
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


def _site_trace(tmp_path: Path, gpus: int = 1) -> Path:
    """A site's own trace: six one-hour jobs over 2024-01-01..03, far from Philly's 2017."""
    rows = [f"j{k},{JAN_1_2024 + k * 36_000},{gpus},3600" for k in range(6)]
    path = tmp_path / "site.csv"
    path.write_text("job_id,submit_time,num_gpus,duration\n" + "\n".join(rows) + "\n")
    return path


def _train(tmp_path: Path, trace: Path, *windows: str) -> tuple[int, list[str]]:
    return _run("train", "--trace", str(trace), "--cluster", "tiny", *windows,
                "--iterations", "0", "--bc-iterations", "0", "--workers", "1", "--quiet",
                "--warmup-days", "0", "--episode-days", "0.05", "--hidden", "8",
                "--output", str(tmp_path / "bundle"), "--run-dir", str(tmp_path / "runs"))


@pytest.mark.parametrize(("windows", "message"), [
    # the defaults (Philly's months) on a site's own trace: it was "no finished jobs to
    # measure" from the metrics, after the warm start
    ((), "--train-window 2017-10-01:2017-12-01 holds no jobs of trace 'site' " + SPAN),
    (("--train-window", "2024-01"),
     "--validation-window 2017-09 holds no jobs of trace 'site' " + SPAN),
    # an empty training window was "need at least one array to concatenate" from PPO
    (("--train-window", "2023-01", "--validation-window", "2024-01"),
     "--train-window 2023-01 holds no jobs of trace 'site' " + SPAN),
])
def test_train_refuses_a_window_without_jobs_before_training(
        tmp_path: Path, windows: tuple[str, ...], message: str) -> None:
    code, lines = _train(tmp_path, _site_trace(tmp_path), *windows)
    assert (code, lines[-1]) == (2, f"error: {message}")
    assert not (tmp_path / "runs").exists()  # no curves: nothing was trained


def test_train_refuses_a_window_whose_jobs_never_fit_the_cluster(tmp_path: Path) -> None:
    code, lines = _train(tmp_path, _site_trace(tmp_path, gpus=64), "--train-window", "2024-01",
                         "--validation-window", "2024-01")
    assert code == 2
    assert lines[-1] == ("error: --train-window 2024-01: no job of trace 'site[2024-01-01T00:"
                         "00:00..2024-02-01T00:00:00]' can ever fit cluster 'tiny' (6 jobs, "
                         "none fits); nothing to replay")


def test_episodes_without_a_decision_leave_nothing_to_learn_not_a_crash() -> None:
    """A window with jobs can still give an iteration whose episodes all fall in a quiet
    stretch: PPO and the warm start then update nothing."""
    quiet = Episode(EpisodeSpec(0.0, 0.0, 3600.0, 1), [], None, (0.0, 3600.0), 0.0, 0.0, 0.0)
    network = DualNetwork(network_config(hidden=8))
    steps, adv, ret = advantages(network, [quiet, quiet], ReturnScaler(0.99), 0.99, 0.95)
    assert steps == [] and adv.shape == ret.shape == (0,)
    assert adv.dtype == np.float64


def test_simulate_says_where_the_traces_jobs_are(tmp_path: Path) -> None:
    code, lines = _run("simulate", "--trace", str(_site_trace(tmp_path)), "--cluster", "tiny",
                       "--window", "1999-01")
    assert (code, lines[-1]) == (2, f"error: --window 1999-01 holds no jobs of trace 'site' {SPAN}")


def test_a_days_trace_says_its_hours(tmp_path: Path) -> None:
    path = tmp_path / "day.csv"
    path.write_text(f"job_id,submit_time,num_gpus,duration\na,{JAN_1_2024 + 3600},1,60\n"
                    f"b,{JAN_1_2024 + 7260},1,60\n")
    code, lines = _run("simulate", "--trace", str(path), "--cluster", "tiny", "--window",
                       "2024-02")
    assert (code, lines[-1]) == (2, "error: --window 2024-02 holds no jobs of trace 'day' (its "
                                    "jobs span 2024-01-01T01:00..02:01)")


SYNTHETIC = ("simulate", "--trace", "synthetic", "--cluster", "tiny", "--policies",
             "fifo+first-fit", "--workers", "1")


def test_synthetic_replays_only_its_window() -> None:
    """--window was ignored with --trace synthetic: a whole week replayed for 2 hours asked."""
    hours = "2017-09-04T06:00:00:2017-09-04T08:00:00"
    code, lines = _run(*SYNTHETIC, "--days", "1", "--warmup-days", "0", "--window", hours,
                       "--json")
    assert code == 0
    jobs = len(window(synthetic_philly(days=1, seed=0), *parse_window(hours)).jobs)
    assert 0 < jobs < 400  # of the day's ~850
    result = json.loads("\n".join(lines))["results"][0]
    assert result["jobs"] + result["unschedulable_jobs"] == jobs


@pytest.mark.parametrize(("window_spec", "message"), [
    ("1999-01", "holds no jobs of trace 'synthetic-philly(days=3.1,seed=0,load_scale=1)' (its "
                "jobs span 2017-09-04..2017-09-07)"),
    ("2017-09", "ends after the synthetic workload (its jobs span 2017-09-04..2017-09-07: "
                "--days 0.1 and 3 warm-up days); give a larger --days"),
])
def test_synthetic_refuses_a_window_it_does_not_cover(window_spec: str, message: str) -> None:
    code, lines = _run(*SYNTHETIC, "--days", "0.1", "--window", window_spec)
    assert (code, lines[-1]) == (2, f"error: --window {window_spec} {message}")


@pytest.mark.parametrize(("option", "message"), [
    (["--format", "philly"], "--format applies to trace files; the synthetic workload has none"),
    (["--skip-bad-rows"], "--skip-bad-rows applies to trace files; the synthetic workload has "
                          "no rows to skip"),
])
def test_synthetic_refuses_the_options_of_trace_files(option: list[str], message: str) -> None:
    code, lines = _run(*SYNTHETIC, "--days", "0.1", "--warmup-days", "0", *option)
    assert (code, lines[-1]) == (2, f"error: {message}")
