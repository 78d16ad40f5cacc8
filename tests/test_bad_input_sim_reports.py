"""Replays whose figures have nothing to divide by (every job ran for no time) report "–"
and finite JSON, never a ZeroDivisionError; a cluster spec's straggler may be at most 100x
slower (a tiny factor replayed for days of wall time, or hung)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_rl.cli.main import main
from slurm_rl.errors import InputError
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.simulator.fluctuation import FluctuationConfig

ZERO_DURATIONS = "job_id,submit_time,num_gpus,duration\na,0,1,0\nb,60,2,0\n"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        repr(result.exception))
    return result.exit_code, result.output


def _no_constant(name: str) -> Any:
    raise AssertionError(f"JSON holds {name}")


def _finite_json(text: str) -> Any:
    """The document, which must hold no NaN or Infinity (json.dumps writes them silently)."""
    return json.loads(text, parse_constant=_no_constant)


def test_simulate_on_zero_durations_shows_no_ratio(tmp_path: Path) -> None:
    trace = tmp_path / "zero.csv"
    trace.write_text(ZERO_DURATIONS)
    code, output = _run("simulate", "--trace", str(trace), "--cluster", "tiny", "--policies",
                        "fifo+first-fit", "--workers", "1", "--report", str(tmp_path / "r"))
    assert code == 0
    row = next(line for line in output.splitlines() if "fifo+first-fit" in line)
    assert row.split("│")[-3].strip() == "–"  # JCT/LB, before the moves
    assert "| 0 | – | 0 |" in (tmp_path / "r" / "report.md").read_text()


def test_simulate_json_on_zero_durations_is_finite(tmp_path: Path) -> None:
    trace = tmp_path / "zero.csv"
    trace.write_text(ZERO_DURATIONS)
    code, output = _run("simulate", "--trace", str(trace), "--cluster", "tiny", "--policies",
                        "fifo+first-fit", "--workers", "1", "--json", "--report",
                        str(tmp_path / "r"))
    assert code == 0
    result = _finite_json(output)["results"][0]
    assert result["avg_jct_s"] == result["jct_lower_bound_s"] == 0.0
    _finite_json((tmp_path / "r" / "results.json").read_text())


def test_evaluate_on_zero_durations_reports_no_gain(tmp_path: Path) -> None:
    trace = tmp_path / "zero.csv"
    trace.write_text(ZERO_DURATIONS)
    report = tmp_path / "eval"
    code, output = _run("evaluate", "--trace", str(trace), "--cluster", "tiny",
                        "--no-ablations", "--orderings", "fifo", "--placements", "first-fit",
                        "--workers", "1", "--report", str(report))
    assert code == 0, output
    verdict = _finite_json((report / "evaluation.json").read_text())
    row = verdict["rows"][0]
    assert (row["jct_gain"], row["fee_gain"], row["fee_gain_vs_cheapest"]) == (0.0, 0.0, 0.0)
    assert verdict["met"] is False and verdict["beats_all"] is False


def test_a_gain_over_a_baselines_zero_is_none_not_a_division() -> None:
    """Free GPUs: a baseline that pays nothing while the agent pays has no relative gain to
    give (null in evaluation.json, "–" in the report); two zeros are no gain."""
    from slurm_rl.training.evaluate import gain  # here: a module that lacks it fails one test

    assert gain(3.0, 4.0) == pytest.approx(0.25)
    assert gain(0.0, 0.0) == 0.0
    assert gain(5.0, 0.0) is None


def _spec(tmp_path: Path, factor: str) -> Path:
    path = tmp_path / f"strag_{factor}.toml"
    path.write_text('name = "x"\ndescription = "d"\n[[node_groups]]\ngpu_type = "V100"\n'
                    'count = 2\ngpus_per_node = 8\nprice_per_gpu_hour = 1.0\n'
                    'price_source = "s"\n[fluctuation]\nstraggler_share = 1.0\n'
                    f"straggler_factor = {factor}\n")
    return path


@pytest.mark.parametrize("factor", ["1e-9", "0.001", "0.0099"])
def test_a_straggler_over_100x_slower_is_refused_naming_the_field(
        tmp_path: Path, factor: str) -> None:
    path = _spec(tmp_path, factor)
    with pytest.raises(InputError) as caught:
        load_cluster_spec(str(path))
    assert str(caught.value) == (f"{path}: column 'fluctuation.straggler_factor': Input should "
                                 f"be greater than or equal to 0.01 (got {float(factor)!r})")


def test_a_straggler_100x_slower_is_the_bound_of_spec_and_config(tmp_path: Path) -> None:
    spec = load_cluster_spec(str(_spec(tmp_path, "0.01")))
    assert spec.fluctuation.straggler_factor == 0.01
    with pytest.raises(ValueError, match="straggler_factor must be between 0.01"):
        replace(FluctuationConfig(), straggler_factor=1e-6)
    assert math.isclose(replace(FluctuationConfig(), straggler_factor=0.01).straggler_factor,
                        0.01)
