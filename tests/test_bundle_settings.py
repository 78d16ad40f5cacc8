"""``slurm-rl bundle set``: a shipped bundle's settings change without retraining, weights
untouched, every change recorded; a bad change is refused before anything is written."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_rl.agents.dual.agent import learned_placement
from slurm_rl.agents.dual.bundle import (
    INHERITED_META,
    META_FILE,
    SETTINGS_CHANGED,
    WEIGHTS_FILE,
    BundleError,
    SettingsChange,
    change_settings,
    load_bundle,
    trained_dispatch,
)
from slurm_rl.agents.dual.features import FeatureBuilder
from slurm_rl.agents.rwgp.placement import RwgpPlacement
from slurm_rl.cli.main import main
from slurm_rl.fairness import RankingRules
from slurm_rl.paths import default_bundle_path
from slurm_rl.retrain.finetune import FinetuneSettings, rollout_config
from slurm_rl.retrain.live_world import LiveWorld


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return Path(shutil.copytree(default_bundle_path(), tmp_path / "bundle"))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_change_moves_only_its_settings_and_is_recorded(bundle: Path) -> None:
    before = load_bundle(bundle)
    weights = _digest(bundle / WEIGHTS_FILE)
    other = "best-fit" if before.chooser != "best-fit" else "rwgp"
    after = change_settings(bundle, SettingsChange(chooser=other, starvation_h=72.0,
                                                   ordering_sharpness=16.0), "a site's choice")
    assert (after.chooser, after.starvation_s, after.network.config.ordering_sharpness) == (
        other, 72.0 * 3600, 16.0)
    assert after.fee_weight == before.fee_weight and _digest(bundle / WEIGHTS_FILE) == weights
    record = after.meta[SETTINGS_CHANGED][-3:]
    assert [(r["key"], r["to"], r["reason"]) for r in record] == [
        ("chooser", other, "a site's choice"), ("starvation_h", 72.0, "a site's choice"),
        ("network.ordering_sharpness", 16.0, "a site's choice")]
    assert record[0]["from"] == before.chooser
    assert record[2]["from"] == before.network.config.ordering_sharpness


def test_an_unchanged_setting_adds_nothing_to_the_record(bundle: Path) -> None:
    before = load_bundle(bundle)
    after = change_settings(bundle, SettingsChange(chooser=before.chooser), "no-op")
    assert after.meta.get(SETTINGS_CHANGED, []) == list(before.meta.get(SETTINGS_CHANGED, []))


def test_the_record_survives_a_retrain() -> None:
    # a fine-tune keeps its base's settings (INHERITED_META): it must keep their history too
    assert SETTINGS_CHANGED in INHERITED_META
    assert "long_limit_h" in INHERITED_META


def test_a_site_moves_the_long_job_limit_above_its_default_time(bundle: Path) -> None:
    change_settings(bundle, SettingsChange(chooser="rwgp-long"), "the long rule")
    assert load_bundle(bundle).long_limit_s == 86_400.0  # a meta without the key: a day
    after = change_settings(bundle, SettingsChange(long_limit_h=72.0), "DefaultTime is 2 days")
    assert after.meta[SETTINGS_CHANGED][-1]["key"] == "long_limit_h"
    chooser = learned_placement(after, {"V100": 1.0}, FeatureBuilder()).generator.chooser
    assert isinstance(chooser, RwgpPlacement)
    assert chooser.config.exclusion_min_limit_s == 72 * 3600.0
    shown = CliRunner().invoke(main, ["bundle", "show", str(bundle)])
    assert "long jobs from 72 h" in shown.output


@pytest.mark.parametrize("dispatch", [False, True])
def test_a_retrain_fine_tunes_with_the_deployed_settings(bundle: Path, dispatch: bool) -> None:
    """The fine-tuning rollouts place with the bundle's chooser and long-job limit, rank
    under its age guard, and rank under the daemon's rules (dispatch included)."""
    changed = change_settings(bundle, SettingsChange(chooser="rwgp-long", starvation_h=0.0,
                                                     long_limit_h=72.0), "site")
    rules = RankingRules(max_wait_ratio=3.0, dispatch=dispatch)
    world = LiveWorld(rules, cycle_s=7.0, defer_window_s=12.0, hold_cap_s=7200.0,
                      one_gpu_type=False)
    refit = {"raw_noise": -3.0}
    config = rollout_config(changed, FinetuneSettings(world=world), refit)
    assert (config.chooser, config.long_limit_s) == ("rwgp-long", 72 * 3600.0)
    assert config.starvation_s is None and config.rules == rules
    assert config.fee_weight == changed.fee_weight and config.placement_gp == refit
    spec = world.world_spec("trace.csv", "cluster.toml")  # the episodes' world
    assert (spec.dispatch, spec.hold_cap_s, spec.cycle_s) == (dispatch, 7200.0, 7.0)
    assert (spec.defer_window_s, spec.one_gpu_type) == (12.0, False)


def test_a_retrained_bundle_says_the_dispatch_mode_it_was_fine_tuned_in(bundle: Path) -> None:
    assert trained_dispatch(bundle) is True  # the shipped bundle: trained with dispatch
    meta = json.loads((bundle / META_FILE).read_text())
    meta["retrain"] = {"world": LiveWorld().describe()}  # fine-tuned without it
    (bundle / META_FILE).write_text(json.dumps(meta))
    assert trained_dispatch(bundle) is False


@pytest.mark.parametrize(("change", "message"), [
    (SettingsChange(ordering_sharpness=0.0), "cannot remove it"),
    (SettingsChange(ordering_sharpness=101.0), "from 0 to 100"),
    (SettingsChange(starvation_h=-1.0), "finite number >= 0"),
    (SettingsChange(chooser="fastest"), "is not one of"),
    (SettingsChange(long_limit_h=0.0), "'long_limit_h' must be a finite number of hours > 0"),
])
def test_a_bad_change_is_refused_and_nothing_is_written(
        bundle: Path, change: SettingsChange, message: str) -> None:
    meta = (bundle / META_FILE).read_bytes()
    with pytest.raises(BundleError, match=message):
        change_settings(bundle, change, "bad")
    assert (bundle / META_FILE).read_bytes() == meta


def test_a_prior_cannot_be_added_to_an_ordering_trained_without_one(bundle: Path) -> None:
    meta = json.loads((bundle / META_FILE).read_text())
    meta["network"]["ordering_sharpness"] = 0.0
    (bundle / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(BundleError, match="trained without a prior"):
        change_settings(bundle, SettingsChange(ordering_sharpness=8.0), "bad")


def test_the_command_line_sets_shows_and_refuses_in_one_line(bundle: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(main, ["bundle", "set", str(bundle), "--starvation-h", "0",
                                "--chooser", "best-fit", "--reason", "try best-fit"])
    assert done.exit_code == 0, done.output
    assert "chooser best-fit" in done.output and "age guard off" in done.output
    assert "(try best-fit)" in runner.invoke(main, ["bundle", "show", str(bundle)]).output
    refused = runner.invoke(main, ["bundle", "set", str(bundle / "absent"), "--reason", "x"])
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert "no policy bundle" in refused.output


def test_an_empty_reason_is_refused_and_a_misshapen_network_names_the_tensor(
        bundle: Path) -> None:
    """A bad-input review: ``--reason ""`` was accepted though it is required, and weights
    that do not fit meta.json's network ended "... state_dict for DualNetwork:" with nothing
    after the colon."""
    refused = CliRunner().invoke(main, ["bundle", "set", str(bundle), "--starvation-h", "0",
                                        "--reason", " "])
    assert refused.exit_code == 2 and "'--reason': say why the setting changes" in refused.output
    meta = json.loads((bundle / META_FILE).read_text())
    meta["network"]["hidden"] = 3
    (bundle / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(BundleError, match=r"DualNetwork: size mismatch for \S+: copying a "):
        load_bundle(bundle)


def test_make_train_default_sets_what_the_shipped_bundle_records() -> None:
    """The shipped meta.json's changes since training are the ones `make train-default` makes
    after training, with the same reasons: the recipe reproduces the settings, not only the
    weights."""
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    variables = {name: " ".join(part.strip().rstrip("\\").strip() for part in value)
                 for name, *value in _make_variables(makefile)}
    flags = {"--starvation-h": "starvation_h", "--chooser": "chooser",
             "--ordering-sharpness": "network.ordering_sharpness",
             "--long-limit-h": "long_limit_h"}
    made = []
    for line in makefile.splitlines():
        if "slurm-rl bundle set policies/default" in line:
            words = line.split()
            flag = next(word for word in words if word in flags)
            reason = line.split('--reason "$(')[1].split(')"')[0]
            made.append((flags[flag], words[words.index(flag) + 1], variables[reason]))
    recorded = load_bundle(default_bundle_path()).meta[SETTINGS_CHANGED]
    assert made == [(r["key"], str(r["to"]).removesuffix(".0"), r["reason"]) for r in recorded]


def _make_variables(makefile: str) -> list[list[str]]:
    """``NAME = value`` assignments, continuation lines joined: [name, line, line, ...]."""
    found: list[list[str]] = []
    lines = iter(makefile.splitlines())
    for line in lines:
        if " = " in line and not line.startswith(("\t", "#")):
            name, value = line.split(" = ", 1)
            entry = [name.strip(), value]
            while entry[-1].endswith("\\"):
                entry.append(next(lines))
            found.append(entry)
    return found


def test_show_names_the_default_guard_of_a_meta_without_the_key(bundle: Path) -> None:
    meta = json.loads((bundle / META_FILE).read_text())
    meta.pop("starvation_h", None)
    (bundle / META_FILE).write_text(json.dumps(meta))
    shown = CliRunner().invoke(main, ["bundle", "show", str(bundle)])
    assert shown.exit_code == 0 and "age guard 168 h" in shown.output
