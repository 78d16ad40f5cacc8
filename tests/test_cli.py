"""`slurm-rl simulate` end to end, and bad input: one clear line and a non-zero exit, never a
traceback."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_rl.cli.main import main

HEADER = "job_id,submit_time,num_gpus,duration"


def simulate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["simulate", "--cluster", "tiny", "--workers", "1", *args])
    return result.exit_code, result.output


def _csv(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert "Traceback" not in output
    assert lines[0].startswith("error:")
    return lines[0]


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("missing.csv", "job_id,submit_time,duration\n1,2017-10-01T00:00:00,100\n",
         ["missing.csv:1", "num_gpus", "missing column"]),
        ("negative.csv", f"{HEADER}\n1,2017-10-01T00:00:00,2,-5\n",
         ["negative.csv:2", "duration", "negative duration"]),
        ("nonnumeric.csv", f"{HEADER}\n1,2017-10-01T00:00:00,two,100\n",
         ["nonnumeric.csv:2", "num_gpus", "not a number"]),
        ("empty.csv", f"{HEADER}\n", ["empty.csv", "no jobs"]),
        ("gputype.csv", f"{HEADER},gpu_type\n1,2017-10-01T00:00:00,2,100,Z999\n",
         ["gputype.csv:2", "gpu_type", "unknown GPU type 'Z999'"]),
        ("truncated.csv", f"{HEADER}\n1,2017-10-01T00:00:00,2,100\n2,2017-10-01T00:0",
         ["truncated.csv:3", "truncated row"]),
    ],
)
def test_bad_trace_rows(tmp_path, name, text, expected):
    code, output = simulate("--trace", _csv(tmp_path, name, text))
    line = _one_error_line(output)
    assert code != 0
    for fragment in expected:
        assert fragment in line


def test_truncated_gzip(tmp_path):
    rows = "".join(f"{i},2017-10-01T00:{i % 60:02d}:00,1,{100 + i}\n" for i in range(20000))
    data = gzip.compress((HEADER + "\n" + rows).encode())
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(data[: len(data) // 2])
    code, output = simulate("--trace", str(path))
    assert code != 0
    assert "truncated gzip" in _one_error_line(output)


def test_skip_bad_rows_counts_what_it_skipped(tmp_path):
    good = "".join(f"{i},2017-10-01T00:{i:02d}:00,1,{600 + i}\n" for i in range(10))
    trace = _csv(tmp_path, "mixed.csv", f"{HEADER}\n{good}99,2017-10-01T01:00:00,1,-3\n")
    code, output = simulate("--trace", trace, "--skip-bad-rows", "--policies", "fifo+first-fit")
    assert code == 0, output
    assert "skipped trace rows: 1" in output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--policies", "fifo+nope"], "unknown placement policy 'nope'"),
        (["--policies", "lifo+first-fit"], "unknown ordering policy 'lifo'"),
        (["--policies", "fifo"], "unknown policy 'fifo'"),
        (["--cluster", "nowhere"], "unknown cluster spec 'nowhere'"),
        (["--trace", "/no/such/file.csv"], "no such trace file"),
        (["--window", "2017-13-01:2017-13-02", "--trace", "philly"], "window"),
    ],
)
def test_bad_arguments(args, expected):
    result = CliRunner().invoke(main, ["simulate", *args])
    assert result.exit_code != 0
    assert expected in _one_error_line(result.output)


def test_unknown_gpu_type_in_a_cluster_spec(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text(
        'name = "bad"\ndescription = "x"\n[[node_groups]]\ngpu_type = "Z999"\ncount = 1\n'
        'gpus_per_node = 4\nprice_per_gpu_hour = 1.0\nprice_source = "none"\n'
    )
    result = CliRunner().invoke(main, ["simulate", "--cluster", str(spec)])
    assert result.exit_code != 0
    line = _one_error_line(result.output)
    assert "bad.toml" in line and "Z999" in line


def test_simulate_compares_policies_and_writes_a_report(tmp_path):
    report = tmp_path / "report"
    code, output = simulate("--days", "1", "--warmup-days", "0.5", "--json",
                            "--policies", "fifo+first-fit,sjf-oracle+best-fit",
                            "--report", str(report))
    assert code == 0, output
    results = json.loads(output)["results"]
    assert [r["policy"] for r in results] == ["fifo+first-fit", "sjf-oracle+best-fit"]
    for r in results:
        assert r["avg_jct_s"] >= r["jct_lower_bound_s"] > 0
        assert r["unfinished_jobs"] == 0
    for name in ("report.md", "results.json", "jct_cdf.png", "queue_length.png",
                 "gpu_utilisation.png", "fees_by_gpu_type.png"):
        assert (report / name).stat().st_size > 0
    assert "synthetic" in (report / "report.md").read_text()


def test_replicas_move_the_fluctuation_seed_and_report_means(tmp_path):
    report = tmp_path / "replicas"
    code, output = simulate("--days", "0.5", "--warmup-days", "0", "--json", "--replicas", "2",
                            "--policies", "fifo+first-fit,fifo+rwgp", "--report", str(report))
    assert code == 0, output
    payload = json.loads(output)
    seeds = [r["fluctuation_seed"] for r in payload["replicas"]]
    assert len(seeds) == 2 and seeds[1] == seeds[0] + 1
    for replica in payload["replicas"]:
        assert [r["policy"] for r in replica["results"]] == ["fifo+first-fit", "fifo+rwgp"]
    runs = [r["results"][1]["avg_jct_s"] / 3600 for r in payload["replicas"]]
    assert payload["means"]["fifo+rwgp"]["avg_jct_h"] == pytest.approx(sum(runs) / 2)
    assert (report / "replicas.json").exists() and (report / "replica-1" / "report.md").exists()


def test_replicas_must_be_positive():
    code, output = simulate("--replicas", "0")
    assert code != 0 and "--replicas" in output


def test_load_scales_the_cluster_to_the_offered_load_asked() -> None:
    code, out = simulate("--days", "0.3", "--warmup-days", "0", "--policies", "fifo+first-fit",
                         "--load", "0.8", "--json")
    assert code == 0, out
    plain_code, plain = simulate("--days", "0.3", "--warmup-days", "0", "--policies",
                                 "fifo+first-fit", "--load", "0.8")
    assert plain_code == 0 and "offered load 0.8" in plain and "(asked 0.8;" in plain, plain
    # The spec's own cluster's load, whatever load is asked (it once showed achieved/factor).
    from slurm_rl.cli.simulate import build_scenario
    from slurm_rl.offered_load import offered_load

    scenario = build_scenario({"cluster": "tiny", "trace_name": "synthetic", "window_spec": None,
                               "days": 0.3, "seed": 0, "trace_format": None,
                               "skip_bad_rows": False, "warmup_days": 0.0, "mode": "slurm",
                               "cycle_s": 10.0, "no_fluctuation": False})
    own = offered_load(scenario.runnable_jobs()[0], scenario.spec, scenario.trace.reference_gpu)
    for load in ("0.8", "2"):
        _, text = simulate("--days", "0.3", "--warmup-days", "0", "--policies", "fifo+first-fit",
                           "--load", load)
        assert f"the spec's cluster: {own.load:.2f})" in text, text


@pytest.mark.parametrize("load", ["0", "-1", "nan", "1e9"])
def test_a_load_out_of_range_is_one_clear_error(load: str) -> None:
    code, out = simulate("--days", "0.3", "--load", load)
    assert code == 2 and "Invalid value for '--load'" in out and "Traceback" not in out


def test_dispatch_needs_slurm_mode_and_a_sane_cap() -> None:
    code, out = simulate("--days", "0.3", "--mode", "direct", "--dispatch")
    assert code == 2 and "--dispatch needs --mode slurm" in _one_error_line(out)
    code, out = simulate("--days", "0.3", "--hold-cap-h", "1e9")
    assert code == 2 and "Invalid value for '--hold-cap-h'" in out and "Traceback" not in out


def test_dispatch_replays_and_holds_up_to_the_cap_asked() -> None:
    from slurm_rl.cli.simulate import hold_cap_s, ranking_rules

    options = {"dispatch": True, "hold_cap_h": None, "mode": "slurm"}
    assert hold_cap_s(options) == 720 * 3600.0
    assert hold_cap_s({**options, "hold_cap_h": 2.0}) == 7200.0
    assert hold_cap_s({**options, "dispatch": False}) == 3600.0
    rules = ranking_rules(options)
    assert rules is not None and rules.dispatch
    code, out = simulate("--days", "0.3", "--warmup-days", "0", "--policies",
                         "sjf-limit+first-fit", "--dispatch", "--load", "1.5")
    assert code == 0 and "sjf-limit+first-fit" in out, out


def test_the_demo_command_runs_on_a_shorter_day() -> None:
    """`make demo`'s options (the Makefile's DEMO_ARGS), on a fifth of its day: the demo
    cannot rot without a test failing."""
    import re
    import shlex

    makefile = (Path(__file__).parents[1] / "Makefile").read_text()
    policies = re.search(r"^DEMO_POLICIES = (.+)$", makefile, re.M)
    line = re.search(r"^DEMO_ARGS = (.+)$", makefile, re.M)
    assert policies and line
    args = shlex.split(line.group(1).replace("$(DEMO_POLICIES)", policies.group(1)))
    args[args.index("--days") + 1] = "0.2"
    args[args.index("--warmup-days") + 1] = "0.1"
    result = CliRunner().invoke(main, ["simulate", "--workers", "1", *args])
    assert result.exit_code == 0, result.output
    assert "offered load" in result.output and "rl+rl" in result.output
