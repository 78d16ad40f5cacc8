"""The load sweep (issue 21, part 1): ``slurm-rl evaluate --loads``: the offered load's maths,
the node-group scaling, the intervals, bad ``--loads`` values, and a small sweep end to end
(every policy at every load, the plots written, the same JSON twice)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from slurm_rl.cli.train import evaluate_command
from slurm_rl.core import Job
from slurm_rl.errors import InputError
from slurm_rl.offered_load import node_groups, offered_load, scale_cluster, scaled_counts
from slurm_rl.paths import default_bundle_path
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.training.sweep import parse_loads
from slurm_rl.training.sweep_plots import FILES
from slurm_rl.training.sweep_report import interval

V100_ONLY = """name = "flat"
description = "four 8-GPU V100 nodes"
[[node_groups]]
gpu_type = "V100"
count = 4
gpus_per_node = 8
host_group_size = 2
price_per_gpu_hour = 2.48
price_source = "test"
"""


def job(index: int, submit: float, gpus: int, duration: float, family: str = "") -> Job:
    return Job(f"j{index}", submit, gpus, model_family=family, oracle_duration=duration)


def test_offered_load_is_demand_over_capacity_over_the_span(tmp_path: Path) -> None:
    (tmp_path / "flat.toml").write_text(V100_ONLY)
    spec = load_cluster_spec(tmp_path / "flat.toml")
    jobs = [job(0, 0.0, 4, 3600.0), job(1, 1800.0, 2, 7200.0), job(2, 3600.0, 1, 60.0),
            Job("no-duration", 100.0, 8)]  # no recorded run time: no demand
    load = offered_load(jobs, spec, "V100")
    assert load.demand_gpu_s == 4 * 3600 + 2 * 7200 + 60
    assert load.capacity_gpus == 32 and load.span_s == 3600 and load.jobs == 3
    assert load.load == pytest.approx((4 * 3600 + 2 * 7200 + 60) / (32 * 3600))


def test_a_gpu_type_is_worth_its_speed_averaged_harmonically_over_the_family_mix() -> None:
    spec = load_cluster_spec("tiny")  # 2 x 8 V100, 4 x 4 T4
    perf = spec.performance_model()
    jobs = [job(0, 0.0, 1, 3000.0, "imagenet"), job(1, 100.0, 1, 1000.0, "bert")]
    load = offered_load(jobs, spec, "V100")
    speeds = {f: perf.relative_speed(f, "T4", "V100") for f in ("imagenet", "bert")}
    t4 = 4000.0 / (3000.0 / speeds["imagenet"] + 1000.0 / speeds["bert"])
    assert load.gpu_worth["V100"] == pytest.approx(1.0)
    assert load.gpu_worth["T4"] == pytest.approx(t4) and 0 < t4 < 1
    assert load.capacity_gpus == pytest.approx(16 + 16 * t4)


def test_scaling_keeps_every_group_and_comes_closest_to_the_capacity() -> None:
    spec = load_cluster_spec("philly-hetero")
    groups = node_groups(spec.cluster)
    worth = {"K80": 0.18, "P100": 0.64, "T4": 0.62, "V100": 1.0, "A100": 1.49}
    assert scaled_counts(groups, 1.0, worth) == {p: len(n) for p, n in groups.items()}
    assert scaled_counts(groups, 2.0, worth) == {p: 2 * len(n) for p, n in groups.items()}
    assert set(scaled_counts(groups, 0.001, worth).values()) == {1}  # never a group of 0
    capacity = {p: n[0].gpus * worth[n[0].gpu_type] for p, n in groups.items()}
    original = sum(capacity[p] * len(n) for p, n in groups.items())
    for factor in (0.253, 0.298, 0.361, 0.506, 1.7):
        counts = scaled_counts(groups, factor, worth)
        for prefix, nodes in groups.items():  # each group the floor or ceiling of its share
            assert counts[prefix] in (math.floor(len(nodes) * factor),
                                      math.ceil(len(nodes) * factor))
        half_up = {p: max(1, math.floor(len(n) * factor + 0.5)) for p, n in groups.items()}
        error = abs(sum(capacity[p] * c for p, c in counts.items()) - factor * original)
        naive = abs(sum(capacity[p] * c for p, c in half_up.items()) - factor * original)
        assert error <= naive + 1e-9


def test_a_scaled_cluster_keeps_types_prices_and_host_group_sizes() -> None:
    spec = load_cluster_spec("philly-hetero")
    counts = {p: 2 * len(n) for p, n in node_groups(spec.cluster).items()} | {"v100": 3}
    scaled = scale_cluster(spec, counts).cluster
    groups = node_groups(scaled)
    assert {p: len(n) for p, n in groups.items()} == counts
    assert len({n.name for n in scaled.nodes}) == len(scaled.nodes)
    for prefix, nodes in groups.items():
        original = node_groups(spec.cluster)[prefix][0]
        assert {(n.gpu_type, n.gpus, n.price_per_gpu_hour) for n in nodes} == {
            (original.gpu_type, original.gpus, original.price_per_gpu_hour)}
    racks = [n.host_group for n in groups["a100"]]  # 10 nodes in one host group, grown to 20
    assert len(set(racks)) == 2 and racks.count(racks[0]) == racks.count(racks[-1]) == 10


def test_the_interval_is_students_t_of_the_mean() -> None:
    iv = interval([1.0, 2.0, 3.0])
    assert iv.mean == 2.0
    assert iv.high - iv.mean == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert iv.mean - iv.low == pytest.approx(iv.high - iv.mean)
    one = interval([5.0])
    assert one.low == one.mean == one.high == 5.0


def test_loads_are_parsed_in_order() -> None:
    assert parse_loads("0.5, 0.7,0.85,1") == (0.5, 0.7, 0.85, 1.0)


@pytest.mark.parametrize(("text", "says"), [
    ("0", "above 0"), ("-0.5", "above 0"), ("abc", "not a number"), ("", "no load given"),
    (" , ", "no load given"), ("nan", "above 0"), ("inf", "above 0"), ("0.5,0.5", "twice"),
    ("0.5,,1", "not a number"), ("11", "at most 10")])
def test_bad_loads_are_one_clear_message(text: str, says: str) -> None:
    with pytest.raises(InputError, match=says):
        parse_loads(text)
    result = CliRunner().invoke(evaluate_command, ["--loads", text])
    assert result.exit_code == 2
    assert "Invalid value for '--loads'" in result.output and says in result.output
    assert "Traceback" not in result.output


def sweep_trace(path: Path, jobs: int = 24) -> Path:
    """Jobs arriving every 5 min for 2 h: the tiny cluster as it is is loaded about 1.6."""
    rng = np.random.default_rng(5)
    rows = ["job_id,submit_time,num_gpus,duration,user"]
    for i in range(jobs):
        rows.append(f"j{i},{1_504_224_000 + 300 * i},{int(rng.choice([1, 2, 4, 8]))},"
                    f"{rng.lognormal(8.0, 1.0):.0f},u{rng.integers(3)}")
    path.write_text("\n".join(rows) + "\n")
    return path


def sweep(trace: Path, directory: Path) -> dict[str, object]:
    result = CliRunner().invoke(evaluate_command, [
        "--trace", str(trace), "--cluster", "tiny", "--placements", "best-fit,fastest-gpu",
        "--orderings", "fifo,sjf-oracle", "--no-ablations",
        "--loads", "0.5,1,3", "--replicas", "2", "--workers", "1",
        "--bundle", str(default_bundle_path()), "--report", str(directory)],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    payload: dict[str, object] = json.loads((directory / "sweep.json").read_text())
    return payload


@pytest.mark.slow
def test_a_small_sweep_end_to_end(tmp_path: Path) -> None:
    trace = sweep_trace(tmp_path / "sweep.csv")
    first = sweep(trace, tmp_path / "first")
    points = first["points"]
    assert isinstance(points, list) and [p["target_load"] for p in points] == [0.5, 1.0, 3.0]
    policies = set(points[0]["policies"])
    assert policies == {f"{o}+{p}" for o in ("fifo", "sjf-oracle")
                        for p in ("best-fit", "fastest-gpu")} | {"dual-agent"}
    assert points[0]["verdict"]["best_baseline"] in policies - {"dual-agent"}
    for point in points:
        assert set(point["policies"]) == policies  # every policy at every load
        assert min(count for _, count in point["node_groups"].values()) >= 1
        row = point["policies"]["fifo+best-fit"]["avg_jct_h"]
        assert len(row["per_replica"]) == 2 and row["low"] <= row["mean"] <= row["high"]
    assert points[2]["gpus"] < points[1]["gpus"] < points[0]["gpus"]
    for point in points[:2]:  # the achieved load beside the target, near it
        assert abs(point["achieved_load"] - point["target_load"]) < 0.1 * point["target_load"]
    # load 3 would need less than one of the two V100 nodes: one is kept
    assert points[2]["node_groups"]["v100"] == [2, 1]
    for name in FILES.values():
        assert (tmp_path / "first" / name).stat().st_size > 10_000
    text = (tmp_path / "first" / "sweep.md").read_text()
    assert "slurm-rl evaluate --trace" in text and "--loads 0.5,1,3" in text
    # the same sweep again: the same JSON, to the byte
    sweep(trace, tmp_path / "second")
    assert ((tmp_path / "second" / "sweep.json").read_text()
            == (tmp_path / "first" / "sweep.json").read_text())


def test_an_unknown_ordering_is_one_clear_message(tmp_path: Path) -> None:
    result = CliRunner().invoke(evaluate_command, [
        "--trace", str(sweep_trace(tmp_path / "sweep.csv")), "--cluster", "tiny",
        "--orderings", "fifo,shortest", "--loads", "1", "--report", str(tmp_path / "out")])
    assert result.exit_code != 0
    assert isinstance(result.exception, InputError)
    assert "unknown baseline ordering 'shortest'" in str(result.exception)


def test_policies_that_did_not_finish_the_same_jobs_are_flagged() -> None:
    """A review's remark: a replay measures finished jobs only, and nothing compared the
    policies' counts, so a policy that stranded long jobs would have looked better."""
    from slurm_rl.training.sweep import RunFigures
    from slurm_rl.training.sweep_report import unequal_jobs

    def run(policy: str, jobs: int, unfinished: int = 0) -> RunFigures:
        return RunFigures(policy, 1.0, 0.5, 10.0, 0.1, 1.0, jobs, unfinished)

    same = {"a": [run("a", 100), run("a", 100)], "b": [run("b", 100), run("b", 100)]}
    assert unequal_jobs(same) == {}
    stranded = {"a": [run("a", 100)], "b": [run("b", 97, unfinished=3)]}
    assert unequal_jobs(stranded) == {"a": [100, 0], "b": [97, 3]}


def test_a_sweep_without_sjf_oracle_shows_a_dash_not_nan() -> None:
    """``--orderings sjf-limit`` replays no SJF-oracle: its column read 'nan' (session 46)."""
    from slurm_rl.training.sweep_report import _verdict_table

    figures = {"avg_jct_h": 3.6, "fees": 421_170.0, "p99_wait_h": 8.48}
    verdict = {"best_baseline": "sjf-limit+fastest-gpu", "oracle": None, "gap_closed": None,
               "agent": figures, "baseline": {**figures, "avg_jct_h": 3.83},
               "checks": {"jct": True, "gap": False}, "held": False}
    (row,) = [r for r in _verdict_table([{"target_load": 0.85, "verdict": verdict}])
              if r.startswith("| 0.85")]
    assert row.startswith("| 0.85 | sjf-limit+fastest-gpu | 3.83 | 3.60 | — | — |")
    assert "nan" not in row
