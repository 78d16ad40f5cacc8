"""End to end on the synthetic workload: ``train`` writes a loadable bundle with its metadata
and curves; ``evaluate`` replays baselines, the agent and the ablations and writes a verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_rl.agents.dual.bundle import load_bundle
from slurm_rl.agents.dual.features import FEATURE_SCHEMA_VERSION
from slurm_rl.agents.names import realisable_orderings
from slurm_rl.cli.train import evaluate_command, train_command
from slurm_rl.training.actors import RolloutConfig
from slurm_rl.training.evaluate import PolicySpec, replay_replicas
from slurm_rl.training.pool import RolloutPool

pytestmark = pytest.mark.slow

TRAIN = [
    "--trace", "synthetic", "--cluster", "philly-hetero", "--chooser", "best-fit",
    "--train-window", "2017-09-04T00:00:00:2017-09-06T00:00:00",
    "--validation-window", "2017-09-06T00:00:00:2017-09-06T03:00:00",
    "--warmup-days", "0.25", "--episode-days", "0.05", "--episodes-per-iteration", "1",
    "--bc-iterations", "1", "--iterations", "1", "--validate-every", "1", "--workers", "1",
    "--hidden", "8", "--quiet",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("train")
    result = CliRunner().invoke(
        train_command, [*TRAIN, "--output", str(root / "bundle"), "--run-dir", str(root / "runs")],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return root


def test_train_writes_a_bundle_with_its_provenance(trained: Path) -> None:
    bundle = load_bundle(trained / "bundle")
    meta = bundle.meta
    assert meta["feature_schema"]["version"] == FEATURE_SCHEMA_VERSION
    assert meta["fee_weight"] == 0.1 and meta["seed"] == 1 and meta["chooser"] == "best-fit"
    assert meta["starvation_h"] == 168.0 and bundle.starvation_s == 168 * 3600.0
    assert meta["training"]["train_window"].startswith("2017-09-04")
    assert len(meta["training"]["episodes"]) == 2  # one cloning and one PPO episode
    assert [v["label"] for v in meta["metrics"]["validation"]] == ["warm start", "PPO 1"]
    assert meta["metrics"]["checkpoint"] in ("warm start", "PPO 1")
    curves = (trained / "runs" / "bundle" / "curves.csv").read_text().splitlines()
    assert curves[0].startswith("phase,iteration") and len(curves) == 3
    assert (trained / "runs" / "bundle" / "curves.png").exists()


def test_training_twice_with_one_seed_gives_the_same_weights(trained: Path,
                                                            tmp_path: Path) -> None:
    result = CliRunner().invoke(
        train_command, [*TRAIN, "--output", str(tmp_path / "again"), "--run-dir",
                        str(tmp_path / "runs")], catch_exceptions=False)
    assert result.exit_code == 0
    first = load_bundle(trained / "bundle").network.state_dict()
    second = load_bundle(tmp_path / "again").network.state_dict()
    assert all(first[k].equal(second[k]) for k in first)


def test_the_guard_and_long_limit_trained_under_are_those_validated_and_shipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--starvation-h 0 --long-limit-h 48``: the rollouts rank without the age guard and
    place with the long-job rule from 48 h, validation replays the checkpoints so, and the
    bundle ships so (what is trained is deployed)."""
    rollout_guards: list[tuple[float | None, float]] = []
    validated_meta: list[object] = []
    collect = RolloutPool.collect

    def spy_collect(self: RolloutPool, network: Any, config: RolloutConfig, *rest: Any) -> Any:
        rollout_guards.append((config.starvation_s, config.long_limit_s))
        return collect(self, network, config, *rest)

    def spy_replay(scenarios: Any, specs: list[PolicySpec], *rest: Any, **named: Any) -> Any:
        validated_meta.extend((spec.meta.get("starvation_h"), spec.meta.get("long_limit_h"))
                              for spec in specs if spec.weights is not None)
        return replay_replicas(scenarios, specs, *rest, **named)

    monkeypatch.setattr(RolloutPool, "collect", spy_collect)
    monkeypatch.setattr("slurm_rl.training.validation.replay_replicas", spy_replay)
    result = CliRunner().invoke(
        train_command, [*TRAIN, "--starvation-h", "0", "--long-limit-h", "48", "--output",
                        str(tmp_path / "b"), "--run-dir", str(tmp_path / "runs")],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert rollout_guards and set(rollout_guards) == {(None, 48 * 3600.0)}
    assert validated_meta == [(0.0, 48.0), (0.0, 48.0)]  # the warm start and PPO 1
    bundle = load_bundle(tmp_path / "b")
    assert bundle.meta["starvation_h"] == 0.0 and bundle.starvation_s is None
    assert bundle.long_limit_s == 48 * 3600.0


def test_evaluate_reports_every_policy_and_a_verdict(trained: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(evaluate_command, [
        "--bundle", str(trained / "bundle"), "--trace", "synthetic",
        "--window", "2017-09-05T00:00:00:2017-09-05T02:00:00", "--placements",
        "first-fit,fastest-gpu", "--workers", "1", "--report", str(tmp_path / "report"),
        "--replicas", "2",
    ], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    verdict = json.loads((tmp_path / "report" / "evaluation.json").read_text())
    assert [r["ordering"] for r in verdict["rows"]] == realisable_orderings()
    assert isinstance(verdict["met"], bool)
    assert verdict["replicas"] == 2 and len(set(verdict["fluctuation_seeds"])) == 2
    for policy in verdict["policies"]:  # the mean is the mean of the replicas shown
        each = policy["avg_jct_h_per_replica"]
        assert len(each) == 2 and policy["avg_jct_h"] == pytest.approx(sum(each) / 2)
    for row in verdict["rows"]:
        assert len(row["jct_gain_per_replica"]) == 2
    fastest = min(p["avg_jct_h"] for p in verdict["policies"])
    assert 0 < verdict["jct_lower_bound_h"] <= fastest  # no policy beats the bound
    assert "avg JCT lower bound" in (tmp_path / "report" / "evaluation.md").read_text()
    report = (tmp_path / "report" / "report.md").read_text()
    for label in ("sjf-oracle+fastest-gpu", "dual-agent", "ordering-agent-only",
                  "placement-agent-only", "no-communication"):
        assert label in report
    assert (tmp_path / "report" / "jct_cdf.png").exists()
