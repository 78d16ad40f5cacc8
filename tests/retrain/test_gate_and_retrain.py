"""Retraining on a real SQLite store filled as the daemon fills it: the gate both ways (a
deliberately damaged policy is not promoted over the shipped agent, the shipped agent is
promoted over it), a full retrain with fine-tuning, and bad or thin logs skipped with one
line while the active version stays."""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from slurm_rl.fairness import RankingRules
from slurm_rl.paths import default_bundle_path
from slurm_rl.retrain.calibrate import calibrate
from slurm_rl.retrain.finetune import FinetuneSettings
from slurm_rl.retrain.gate import GateSettings, PolicyRef, judge
from slurm_rl.retrain.live_world import LiveWorld
from slurm_rl.retrain.run import RetrainSettings, retrain
from slurm_rl.retrain.window import load_window
from slurm_rl.store import migrate
from slurm_rl.store.models import DecisionRow
from slurm_rl.store.registry import ModelRegistry
from slurm_rl.store.registry_models import ModelVersionRow
from slurm_rl.store.repository import Store, make_engine
from tests.retrain.logged import NEGATABLE_BUNDLE, damaged_bundle, fill

NOW = 1_800_000_000.0
# The daemon's world without dispatch, and with it as a learned policy is deployed (holds
# that outlast this window's queue): without it, released jobs start by Slurm's own order
# whenever GPUs free up between cycles, and the daemon's limits on priority changes hold
# back most of what is left of the ranking (test_without_dispatch_...).
PLAIN = LiveWorld(cycle_s=5.0, defer_window_s=10.0)
DISPATCH = replace(PLAIN, rules=RankingRules(dispatch=True), hold_cap_s=7200.0)
GATE = GateSettings(margin=0.05, seeds=1, world=DISPATCH)


def tiny(tmp_path: Path, **values: object) -> RetrainSettings:
    settings = RetrainSettings(
        window_days=1.0, repeats=2, cache_dir=tmp_path / "models", gate=GATE,
        finetune=FinetuneSettings(iterations=1, episodes_per_iteration=1, update_epochs=1,
                                  world=DISPATCH))
    return replace(settings, **values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return damaged_bundle(NEGATABLE_BUNDLE, tmp_path_factory.mktemp("bad") / "bundle")


def unguarded_copy(source: Path, target: Path) -> Path:
    """``source`` deployed with its age guard off (meta.json ``starvation_h`` 0)."""
    shutil.copytree(source, target)
    meta_path = target / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "starvation_h": 0}))
    return target


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'store.sqlite'}")


def test_the_gate_keeps_the_better_policy_both_ways(
    store: Store, tmp_path: Path, damaged: Path
) -> None:
    fill(store, 40, now=NOW)
    window = load_window(store.engine, None, 1.0, NOW)
    calibration = calibrate(window, tmp_path / "cal", repeats=2, seed=0)
    good, bad = PolicyRef("rl+rl", NEGATABLE_BUNDLE), PolicyRef("rl+rl", damaged)
    worse = judge(bad, good, calibration, GATE)
    better = judge(good, bad, calibration, GATE)
    # The damaged agent starts the long jobs first: far worse on this window, not promoted
    # (6,292 s against 3,334 s with dispatch).
    assert worse.candidate_jct_s > 1.5 * worse.current_jct_s and not worse.promote
    assert better.promote and better.improvement >= GATE.margin
    assert better.candidate_jct_s == worse.current_jct_s  # the same replays, deterministic


def test_the_gate_judges_in_the_daemon_s_world(store: Store, tmp_path: Path) -> None:
    """Both policies replay in the daemon's world (GateSettings.world): with dispatch only
    the policy starts jobs until a hold reaches the cap, which changes the figures on this
    window (fifo+best-fit 4,530 s without; with a 2-hour cap 5,678 s; with the default
    600 s cap the holds end first and the figures are as without). Without the daemon's
    limits on priority changes they were 6,375 and 5,678 s (LiveWorld)."""
    fill(store, 40, now=NOW)
    window = load_window(store.engine, None, 1.0, NOW)
    calibration = calibrate(window, tmp_path / "cal", repeats=2, seed=0)
    fifo = PolicyRef("fifo+best-fit")
    figures = [round(judge(fifo, fifo, calibration, replace(GATE, world=world)).current_jct_s)
               for world in (PLAIN, replace(DISPATCH, hold_cap_s=PLAIN.hold_cap_s), DISPATCH)]
    assert figures == [4530, 4530, 5678]


def test_a_retrain_registers_judges_and_promotes_over_a_worse_active_version(
    store: Store, tmp_path: Path, damaged: Path
) -> None:
    fill(store, 40, now=NOW)
    registry = ModelRegistry(store.engine)
    bad = registry.register("rl+rl", bundle=damaged, note="damaged on purpose")
    registry.promote(bad)
    base = unguarded_copy(NEGATABLE_BUNDLE, tmp_path / "base")
    result = retrain(store.engine.url.render_as_string(), tiny(tmp_path,
                     base_bundle=base), now=NOW)
    assert result.status == "promoted", result.message
    assert result.version == bad + 1 and registry.active_number() == result.version
    version = registry.get(result.version)
    assert version.base_version == bad and version.window_jobs == 40
    gate = version.metrics["gate"]
    assert isinstance(gate, dict) and gate["promote"] and gate["improvement"] >= 0.05
    with Session(store.engine) as session:  # the candidate really was fine-tuned
        row = session.get(ModelVersionRow, result.version)
        assert row is not None and row.meta is not None and row.weights
        assert row.meta["fine_tuned_from"] == str(base)
        assert row.meta["starvation_h"] == 0  # the base's deployed guard, kept
        assert row.meta["retrain"]["world"] == GATE.world.describe()  # type: ignore[index]
        refit = row.meta["placement_gp"]  # the chooser starts from the site's GP
        assert isinstance(refit, dict) and "raw_noise" in refit
        assert len(row.meta["retrain"]["curve"]) == 1  # type: ignore[index, arg-type]
    assert registry.rollback() == (bad, result.version)  # and back again
    assert registry.active_number() == bad


def test_a_worse_candidate_is_registered_but_not_promoted(
    store: Store, tmp_path: Path, damaged: Path
) -> None:
    fill(store, 40, now=NOW)
    registry = ModelRegistry(store.engine)
    good = registry.register("rl+rl", bundle=default_bundle_path())
    registry.promote(good)
    result = retrain(store.engine.url.render_as_string(), tiny(tmp_path, candidate=damaged),
                     now=NOW)
    assert result.status == "rejected" and result.verdict is not None
    assert result.verdict.candidate_jct_s > result.verdict.current_jct_s
    assert registry.active_number() == good
    assert registry.get(result.version or 0).status == "rejected"


def _skipped(caplog: pytest.LogCaptureFixture, store: Store, tmp_path: Path) -> str:
    registry = ModelRegistry(store.engine)
    active = registry.register("fifo+best-fit")
    registry.promote(active)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="slurm_rl.retrain"):
        result = retrain(store.engine.url.render_as_string(), tiny(tmp_path), now=NOW)
    lines = [r for r in caplog.records if r.name == "slurm_rl.retrain"]
    assert result.status == "skipped" and len(lines) == 1, [r.message for r in lines]
    assert lines[0].levelno == logging.WARNING and "\n" not in lines[0].message
    assert registry.active_number() == active and registry.count() == 1
    return lines[0].message


def test_no_finished_jobs_skips(store: Store, tmp_path: Path,
                                caplog: pytest.LogCaptureFixture) -> None:
    message = _skipped(caplog, store, tmp_path)
    assert message == ("retrain skipped: no finished jobs the daemon scheduled in the last 1 days; "
                       "the active policy stays")


def test_a_window_with_one_job_skips(store: Store, tmp_path: Path,
                                     caplog: pytest.LogCaptureFixture) -> None:
    fill(store, 1, now=NOW)
    assert "1 usable finished job(s) of cluster 'logged'" in _skipped(caplog, store, tmp_path)


def test_rows_without_their_nodes_skip(store: Store, tmp_path: Path,
                                       caplog: pytest.LogCaptureFixture) -> None:
    fill(store, 20, now=NOW, nodes=False)  # as written by a daemon before schema 0002
    assert "no GPU nodes stored for cluster 'logged'" in _skipped(caplog, store, tmp_path)


def test_a_store_at_an_older_schema_is_skipped_not_upgraded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = make_engine(url)
    migrate.upgrade(engine, "0001")
    with caplog.at_level(logging.INFO, logger="slurm_rl.retrain"):
        result = retrain(url, tiny(tmp_path), now=NOW)
    assert result.status == "skipped"
    assert "store schema is at revision 0001, retraining needs 0006_one_active_version" in \
        result.message
    assert "model_versions" not in sa.inspect(engine).get_table_names()  # left as it was


def test_jobs_the_daemon_never_saw_pending_are_left_out(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fill(store, 10, now=NOW)
    with Session(store.engine) as session, session.begin():
        session.execute(sa.delete(DecisionRow))  # as if they ran before the daemon started
    assert "no finished jobs the daemon scheduled" in _skipped(caplog, store, tmp_path)


def test_a_run_holding_the_lease_makes_another_skip(store: Store, tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from slurm_rl.store.registry_models import RetrainRunRow

    fill(store, 10, now=NOW)
    with Session(store.engine) as session, session.begin():
        session.add(RetrainRunRow(started_at=datetime.now(UTC), status="running", message="",
                                  host="elsewhere", pid=1))
        session.add(RetrainRunRow(started_at=datetime.now(UTC) - timedelta(days=1),
                                  status="running", message="", host="dead", pid=2))
    result = retrain(store.engine.url.render_as_string(), tiny(tmp_path), now=NOW)
    assert result.status == "skipped" and "another retrain is running" in result.message
    with Session(store.engine) as session:
        statuses = [r.status for r in session.scalars(sa.select(RetrainRunRow)
                                                      .order_by(RetrainRunRow.id))]
    assert statuses == ["running", "running", "skipped"]  # nothing else touched


def test_a_faster_candidate_that_costs_more_than_the_tolerance_is_not_promoted(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    from slurm_rl.retrain import gate

    figures = {"candidate": (100.0, 120.0), "current": (200.0, 100.0)}  # JCT s, fees

    def replayed(policy: PolicyRef, scenario: object, seeds: int,
                 rules: object = None) -> dict[str, object]:
        jct, fees = figures[policy.name]
        return {"policy": policy.name, "avg_jct_s": jct, "total_fees": fees,
                "unfinished_jobs": 0, "p99_wait_s": 600.0}

    monkeypatch.setattr(gate, "logged_scenario", lambda calibration, settings: None)
    monkeypatch.setattr(gate, "replay_metrics", replayed)
    candidate, current = PolicyRef("candidate"), PolicyRef("current")
    dear = judge(candidate, current, None, GATE)  # type: ignore[arg-type]
    assert not dear.promote and dear.improvement == 0.5
    assert dear.fee_change == pytest.approx(0.2)
    assert "fees +20.0% (tolerance 5.0%), p99 wait" in dear.line()
    assert dear.line().endswith("keep the current policy")
    tolerant = judge(candidate, current, None, replace(GATE, fee_tolerance=0.25))  # type: ignore[arg-type]
    assert tolerant.promote and tolerant.as_dict()["fee_tolerance"] == 0.25


def test_a_faster_candidate_that_leaves_some_jobs_waiting_for_days_is_not_promoted(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    from slurm_rl.retrain import gate

    waits = {"candidate": 3 * 86400.0, "current": 4 * 3600.0}  # p99 queue wait, s

    def replayed(policy: PolicyRef, scenario: object, seeds: int,
                 rules: object = None) -> dict[str, object]:
        jct = 100.0 if policy.name == "candidate" else 200.0
        return {"policy": policy.name, "avg_jct_s": jct, "total_fees": 100.0,
                "unfinished_jobs": 0, "p99_wait_s": waits[policy.name]}

    monkeypatch.setattr(gate, "logged_scenario", lambda calibration, settings: None)
    monkeypatch.setattr(gate, "replay_metrics", replayed)
    candidate, current = PolicyRef("candidate"), PolicyRef("current")
    starving = judge(candidate, current, None, GATE)  # type: ignore[arg-type]
    assert not starving.promote and starving.improvement == 0.5
    assert "p99 wait 72.0 h vs 4.0 h (tolerance 50% + 1 h)" in starving.line()
    waits["candidate"] = 4 * 3600.0 * 1.5 + 3600.0  # at the limit
    assert judge(candidate, current, None, GATE).promote  # type: ignore[arg-type]
