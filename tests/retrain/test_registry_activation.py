"""Changes of the active version on SQLite and PostgreSQL: a retrain promotes its candidate
only over the version it was judged against, and promotions or rollbacks made at the same
time are serialised (one version active, each event naming the version it replaced)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import slurm_rl.retrain.run as run_module
from slurm_rl.paths import default_bundle_path
from slurm_rl.retrain.gate import Verdict
from slurm_rl.retrain.run import retrain
from slurm_rl.store.registry import ActiveVersionChanged, ModelRegistry
from slurm_rl.store.registry_models import ModelEventRow, ModelVersionRow, RetrainRunRow
from slurm_rl.store.repository import Store
from tests.retrain.logged import NEGATABLE_BUNDLE, damaged_bundle, fill
from tests.retrain.test_gate_and_retrain import NOW, tiny

HOLD_S = 1.0  # how long the first promotion waits at its commit


def test_a_retrain_promotes_only_over_the_version_it_beat(
        store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The retrain judges its candidate against v2 (damaged); meanwhile an admin rolls back
    to v1. Before the fix the candidate replaced v1, which it was never compared with."""
    store = Store(store_url)
    fill(store, 40, now=NOW)
    registry = ModelRegistry(store.engine)
    good = registry.register("rl+rl", bundle=NEGATABLE_BUNDLE, note="good")
    registry.promote(good)
    bad = registry.register("rl+rl", bundle=damaged_bundle(NEGATABLE_BUNDLE, tmp_path / "bad"))
    registry.promote(bad)
    real_judge = run_module.judge
    verdicts: list[Verdict] = []

    def judge_while_an_admin_rolls_back(*args: Any) -> Verdict:
        assert registry.rollback(note="rolled back by an admin") == (good, bad)
        verdicts.append(real_judge(*args))
        return verdicts[-1]

    monkeypatch.setattr(run_module, "judge", judge_while_an_admin_rolls_back)
    result = retrain(store_url, tiny(tmp_path, candidate=default_bundle_path()), now=NOW)
    assert verdicts[0].promote, "the gate preferred the candidate to v2"
    why = f"the active version changed from v{bad} to v{good} while it was judged: not promoted"
    assert result.status == "rejected" and result.version is not None
    assert result.message == f"retrain: v{result.version} registered, not promoted: {why}"
    assert registry.active_number() == good
    candidate = registry.get(result.version)
    assert (candidate.status, candidate.note, candidate.active) == ("rejected", why, False)
    with Session(store.engine) as session:
        run = session.scalars(select(RetrainRunRow)).one()
    assert (run.status, run.message, run.candidate_version) == \
        ("rejected", result.message, result.version)


def test_a_promotion_that_expects_another_active_version_changes_nothing(
        store_url: str) -> None:
    registry = ModelRegistry(Store(store_url).engine)
    first, second, third = (registry.register(name) for name in
                            ("fifo+best-fit", "qssf+best-fit", "sjf+best-fit"))
    with pytest.raises(ActiveVersionChanged, match="the active version is none, not v1"):
        registry.promote(second, expected_active=first)
    assert registry.promote(first, expected_active=None) is None
    with pytest.raises(ActiveVersionChanged, match="the active version is v1, not none"):
        registry.promote(second, expected_active=None)
    registry.promote(third)  # an admin's promotion checks nothing
    with pytest.raises(ActiveVersionChanged) as refused:
        registry.promote(second, expected_active=first)
    assert (refused.value.expected, refused.value.found) == (first, third)
    assert registry.active_number() == third and registry.get(second).status == "candidate"
    assert [e.action for e in _events(registry.engine)] == ["promote", "promote"]
    assert registry.promote(second, expected_active=third) == third


def test_two_promotions_at_once_leave_one_active(store_url: str) -> None:
    """PostgreSQL (read committed) left v2 and v3 active; SQLite recorded that v3 replaced
    v1, so a rollback skipped v2."""
    engine, (v1, v2, v3) = _three_versions(store_url)
    replaced = _while_a_promotion_commits(engine, v2, lambda other: other.promote(v3))
    assert replaced == v2
    assert _active(engine) == [v3]
    assert ModelRegistry(engine).rollback() == (v2, v3)
    assert _active(engine) == [v2]


def test_a_retrain_promotion_at_the_same_time_as_an_admin_s_is_refused(store_url: str) -> None:
    engine, (v1, v2, v3) = _three_versions(store_url)
    with pytest.raises(ActiveVersionChanged, match="the active version is v2, not v1"):
        _while_a_promotion_commits(engine, v2,
                                   lambda other: other.promote(v3, expected_active=v1))
    assert _active(engine) == [v2]
    assert ModelRegistry(engine).get(v3).status == "candidate"


def test_a_rollback_at_the_same_time_as_a_promotion_rolls_that_one_back(
        store_url: str) -> None:
    engine, (v1, v2, v3) = _three_versions(store_url)
    ModelRegistry(engine).promote(v2)
    restored = _while_a_promotion_commits(engine, v3, lambda other: other.rollback())
    assert restored == (v2, v3)
    assert _active(engine) == [v2]
    assert ModelRegistry(engine).get(v3).status == "rolled-back"


# ----- helpers ------------------------------------------------------------------------------


def _three_versions(url: str) -> tuple[Engine, tuple[int, int, int]]:
    """A store with three baseline versions, the first active."""
    engine = Store(url).engine
    registry = ModelRegistry(engine)
    versions = tuple(registry.register(name) for name in
                     ("fifo+best-fit", "qssf+best-fit", "sjf+best-fit"))
    registry.promote(versions[0])
    return engine, (versions[0], versions[1], versions[2])


def _while_a_promotion_commits(engine: Engine, version: int,
                               other: Callable[[ModelRegistry], Any]) -> Any:
    """Runs ``other`` on a second registry while a first one's promotion of ``version`` has
    written its rows and waits at its commit; returns what ``other`` returned (or raises what
    it raised). ``other`` must wait for that commit, then act on what it changed."""
    first = ModelRegistry(engine)
    written, go = threading.Event(), threading.Event()

    @event.listens_for(first._sessions, "before_commit")
    def hold(_session: Session) -> None:
        written.set()
        go.wait(10)

    outcome: list[Any] = []
    promoting = threading.Thread(target=first.promote, args=(version,))
    promoting.start()
    assert written.wait(10)
    acting = threading.Thread(target=lambda: outcome.append(_outcome(other, engine)))
    acting.start()
    acting.join(HOLD_S)
    waited = acting.is_alive()
    go.set()
    promoting.join(10)
    acting.join(20)
    assert waited, "the second change did not wait for the first's commit"
    if isinstance(outcome[0], Exception):
        raise outcome[0]
    return outcome[0]


def _outcome(act: Callable[[ModelRegistry], Any], engine: Engine) -> Any:
    try:
        return act(ModelRegistry(engine))
    except Exception as exc:  # handed to the test's thread
        return exc


def _active(engine: Engine) -> list[int]:
    with Session(engine) as session:
        return list(session.scalars(select(ModelVersionRow.version)
                                    .where(ModelVersionRow.active)))


def _events(engine: Engine) -> list[ModelEventRow]:
    with Session(engine) as session:
        return list(session.scalars(select(ModelEventRow).order_by(ModelEventRow.id)))
