"""A retrain's candidate always ends with an outcome: a run that fails after registering it,
or dies (its lease expires), marks it, so ``models list`` does not keep offering it as a
candidate waiting for a verdict it will never get."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import slurm_rl.retrain.run as run_module
from slurm_rl.errors import SlurmRLError
from slurm_rl.paths import default_bundle_path
from slurm_rl.retrain.run import retrain
from slurm_rl.store.registry import ModelRegistry
from slurm_rl.store.registry_models import RetrainRunRow
from slurm_rl.store.repository import Store
from tests.retrain.logged import fill
from tests.retrain.test_gate_and_retrain import NOW, tiny


def test_a_run_that_fails_after_registering_its_candidate_marks_it_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = Store(url)
    fill(store, 40, now=NOW)

    def broken_judge(*_args: Any) -> None:
        raise SlurmRLError("the gate's replay could not start")

    monkeypatch.setattr(run_module, "judge", broken_judge)
    result = retrain(url, tiny(tmp_path, candidate=default_bundle_path()), now=NOW)
    assert result.status == "failed" and result.version is None
    (version,) = ModelRegistry(store.engine).versions()
    assert (version.status, version.note, version.active) == ("failed", result.message, False)
    with Session(store.engine) as session:
        run = session.scalars(sa.select(RetrainRunRow)).one()
    assert (run.status, run.candidate_version) == ("failed", version.version)


def test_the_candidate_of_a_run_whose_lease_expired_is_marked_abandoned(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = Store(url)
    registry = ModelRegistry(store.engine)
    orphan = registry.register("rl+rl", bundle=default_bundle_path(), source="retrain")
    imported = registry.register("qssf+best-fit")  # an admin's candidate: left alone
    with Session(store.engine) as session, session.begin():
        session.add(RetrainRunRow(started_at=datetime.now(UTC) - timedelta(days=1),
                                  status="running", message="", host="dead", pid=2,
                                  candidate_version=orphan))
    result = retrain(url, tiny(tmp_path), now=NOW)
    assert result.status == "skipped"  # nothing logged: this run has no window to learn from
    left = {v.version: (v.status, v.note) for v in registry.versions()}
    assert left[orphan] == ("abandoned",
                            "retrain run 1 stopped before judging it (lease expired)")
    assert left[imported] == ("candidate", "")
