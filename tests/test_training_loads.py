"""Training across offered loads (issue 21): each episode draws a load and runs on the
cluster scaled as the load sweep scales it; validation replays its window at every load."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from slurm_rl.agents.dual.bundle import load_bundle
from slurm_rl.cli.train import train_command
from slurm_rl.errors import InputError
from slurm_rl.offered_load import offered_load
from slurm_rl.traces import parse_window, synthetic_philly, window
from slurm_rl.training.episodes import EpisodeSampler
from slurm_rl.training.pool import World, WorldSpec
from slurm_rl.training.rollout import EpisodeSpec
from slurm_rl.training.validation import Checkpoint
from tests.test_training_pipeline import TRAIN

WINDOW = "2017-09-04T00:00:00:2017-09-06T00:00:00"


def _gpus(world: World, load: float | None) -> int:
    return sum(node.gpus for node in world.cluster_at(load).cluster.nodes)


def test_without_loads_the_sampler_draws_what_it_drew_before() -> None:
    trace = synthetic_philly(days=1.0, seed=0)
    plain = EpisodeSampler(trace, "2017-10-01:2017-10-11", warmup_days=2.0, episode_days=1.0)
    specs = plain.sample(np.random.default_rng(3), 8, seed=1, iteration=1)
    assert all(spec.load is None for spec in specs)
    # the rng is consumed exactly as before loads existed: one uniform draw per episode
    rng = np.random.default_rng(3)
    low, _ = parse_window("2017-10-01:2017-10-11")
    starts = [3600 * np.floor(rng.uniform(low + 2 * 86400, plain.high) / 3600) for _ in specs]
    assert [spec.start for spec in specs] == starts


def test_with_loads_every_episode_draws_one_of_them_and_says_which() -> None:
    trace = synthetic_philly(days=1.0, seed=0)
    sampler = EpisodeSampler(trace, "2017-10-01:2017-10-11", 2.0, 1.0, loads=(0.5, 1.0))
    specs = sampler.sample(np.random.default_rng(3), 40, seed=1, iteration=1)
    assert {spec.load for spec in specs} == {0.5, 1.0}
    assert all(used.endswith(f"@{spec.load:g}") for used, spec in zip(sampler.used, specs,
                                                                       strict=True))
    again = EpisodeSampler(trace, "2017-10-01:2017-10-11", 2.0, 1.0, loads=(0.5, 1.0))
    assert again.sample(np.random.default_rng(3), 40, seed=1, iteration=1) == specs


def test_an_episode_at_a_load_runs_on_the_cluster_scaled_to_offer_it() -> None:
    world = World.load(WorldSpec("synthetic", "philly-hetero", loads=(0.5, 2.0),
                                 load_window=WINDOW))
    assert _gpus(world, 2.0) < _gpus(world, None) < _gpus(world, 0.5)
    start, end = parse_window(WINDOW)
    jobs = window(world.trace, start, end).jobs
    for load in (0.5, 2.0):
        achieved = offered_load(jobs, world.cluster_at(load), world.trace.reference_gpu).load
        assert achieved == pytest.approx(load, rel=0.05)
    spec = EpisodeSpec(warmup_start=start, start=start + 3600, end=start + 7200, seed=0,
                       load=2.0)
    assert world.scenario(spec).spec == world.cluster_at(2.0)
    with pytest.raises(InputError, match="no cluster was scaled to load 0.7"):
        world.cluster_at(0.7)


def test_on_the_episode_basis_each_episode_offers_its_load_on_its_own_days() -> None:
    """--load-basis episode: the cluster is scaled by the episode's own jobs (warm-up
    included), as the sweep scales a held-out window by its own load; no training window
    is needed, and two episodes of different demand get different clusters."""
    world = World.load(WorldSpec("synthetic", "philly-hetero", loads=(1.5,),
                                 load_basis="episode"))
    assert world.scaled == {}
    start, _ = parse_window(WINDOW)
    quiet = EpisodeSpec(warmup_start=start, start=start + 6 * 3600, end=start + 12 * 3600,
                        seed=0, load=1.5)
    busy = replace(quiet, warmup_start=start, end=start + 36 * 3600)
    sizes = []
    for spec in (quiet, busy):
        scenario = world.scenario(spec)
        jobs = window(world.trace, spec.warmup_start, spec.end).jobs
        assert list(scenario.trace.jobs) == list(jobs)
        achieved = offered_load(jobs, scenario.spec, world.trace.reference_gpu).load
        assert achieved == pytest.approx(1.5, rel=0.1)
        sizes.append(sum(node.gpus for node in scenario.spec.cluster.nodes))
    assert sizes[0] != sizes[1]
    assert world.scenario(replace(quiet, load=None)).spec == world.spec


def test_every_load_selection_keeps_the_best_unless_beaten_at_every_load() -> None:
    best = Checkpoint("warm start", {}, 1.0, (0.9, 1.1))
    mixed = Checkpoint("PPO 5", {}, 0.95, (0.8, 1.1 * 1.02))
    everywhere = Checkpoint("PPO 10", {}, 0.95, (0.85, 1.05))
    within_noise = Checkpoint("PPO 15", {}, 0.97, (0.9 * 1.005, 1.0))
    assert mixed.beats(best, "mean") and not mixed.beats(best, "every-load")
    assert everywhere.beats(best, "every-load") and everywhere.beats(best, "mean")
    assert within_noise.beats(best, "every-load")  # 0.5 % dearer at one load: noise
    assert not best.beats(everywhere, "mean") and mixed.beats(None, "every-load")


def test_loads_need_the_window_that_sets_their_scale() -> None:
    with pytest.raises(InputError, match="needs the window"):
        World.load(WorldSpec("synthetic", "philly-hetero", loads=(1.0,)))


EPISODE_BASIS = ["--load-basis", "episode", "--selection", "every-load"]


@pytest.mark.slow
@pytest.mark.parametrize("basis", [[], EPISODE_BASIS])
def test_train_across_loads_validates_at_each_and_records_the_loads(
    tmp_path: Path, basis: list[str]
) -> None:
    result = CliRunner().invoke(
        train_command, [*TRAIN, "--loads", "0.5,2", "--output", str(tmp_path / "bundle"),
                        "--run-dir", str(tmp_path / "runs"), *basis], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    meta = load_bundle(tmp_path / "bundle").meta
    assert meta["training"]["args"]["loads"] == [0.5, 2.0]
    assert meta["training"]["args"]["load_basis"] == ("episode" if basis else "window")
    assert all("@" in when for when in meta["training"]["episodes"])
    rows = meta["metrics"]["validation"]
    assert [(row["label"], row["load"]) for row in rows] == [
        ("warm start", 0.5), ("warm start", 2.0), ("PPO 1", 0.5), ("PPO 1", 2.0)]
    assert rows[1]["baseline_avg_jct_h"] >= rows[0]["baseline_avg_jct_h"]  # a busier cluster
    # each row says how many jobs the window held and how long the baseline queued them, so
    # that a window that cannot tell checkpoints apart shows it (one of 20 jobs once did)
    assert all(row["jobs"] > 0 for row in rows)
    assert rows[1]["baseline_avg_queue_h"] >= rows[0]["baseline_avg_queue_h"] >= 0.0
    assert "jobs, its avg queue" in " ".join(result.output.split())
    validation = (tmp_path / "runs" / "bundle" / "validation.csv").read_text().splitlines()
    assert len(validation) == 5 and "load" in validation[0]
    assert json.loads(json.dumps(meta))  # the bundle's meta stays plain JSON


def test_train_refuses_a_bad_load_in_one_line() -> None:
    result = CliRunner().invoke(train_command, ["--loads", "0.5,zero", "--quiet"])
    assert result.exit_code == 2
    assert "--loads" in result.output and "'zero' is not a number" in result.output


@pytest.mark.slow
def test_validation_may_replay_at_other_loads_than_training(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        train_command, [*TRAIN, "--loads", "0.5,2", *EPISODE_BASIS, "--validation-loads", "1.5",
                        "--output", str(tmp_path / "bundle"), "--run-dir", str(tmp_path / "runs")],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    meta = load_bundle(tmp_path / "bundle").meta
    assert meta["training"]["args"]["validation_loads"] == [1.5]
    rows = meta["metrics"]["validation"]
    assert [(row["label"], row["load"]) for row in rows] == [("warm start", 1.5), ("PPO 1", 1.5)]


def test_train_refuses_a_run_dir_that_is_the_bundle_s_own(tmp_path: Path) -> None:
    """--run-dir D --output D/x wrote the run's meta over the bundle's: it no longer loaded."""
    from slurm_rl.cli.main import main

    result = CliRunner().invoke(main, ["train", *TRAIN, "--output", str(tmp_path / "x"),
                                       "--run-dir", str(tmp_path)])
    assert result.exit_code != 0
    assert "give another --run-dir" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x" / "meta.json").exists()
