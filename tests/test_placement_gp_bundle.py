"""A retrained bundle carries the RWGP hyperparameters refit on the site's logs
(``meta.json`` key ``placement_gp``), and the dual agent's node-set chooser starts from them;
hyperparameters that do not fit are one warning, and the default prior is used."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from slurm_rl.agents.dual.agent import build_scheduler
from slurm_rl.agents.dual.bundle import META_FILE, PLACEMENT_GP, load_bundle
from slurm_rl.agents.rwgp.model import RwgpModel
from slurm_rl.agents.rwgp.placement import RwgpPlacement
from slurm_rl.core import Cluster, Node
from slurm_rl.paths import default_bundle_path
from slurm_rl.scenario import gpu_speed_table

CLUSTER = Cluster("c", tuple(Node(f"n{i}", "v100", 4) for i in range(4)))


def _refit() -> RwgpModel:
    model = RwgpModel(CLUSTER)
    with torch.no_grad():
        dict(model.prior.named_parameters())["raw_noise"].fill_(-3.0)
    return model


def test_hyperparameters_round_trip_through_json() -> None:
    values = json.loads(json.dumps(_refit().hyperparameters()))
    other = RwgpModel(CLUSTER)
    other.use_hyperparameters(values)
    assert other.hyperparameters() == _refit().hyperparameters()
    for broken in ({**values, "raw_noise": float("nan")}, {"raw_noise": -3.0}):
        with pytest.raises(ValueError):
            RwgpModel(CLUSTER).use_hyperparameters(broken)


def _bundle(tmp_path: Path, placement_gp: object) -> Path:
    target = tmp_path / "bundle"
    shutil.copytree(default_bundle_path(), target)
    meta = json.loads((target / META_FILE).read_text())
    meta[PLACEMENT_GP] = placement_gp
    (target / META_FILE).write_text(json.dumps(meta))
    return target


def _chooser_noise(bundle: Path) -> float:
    scheduler = build_scheduler(load_bundle(bundle), gpu_speed_table())
    chooser = scheduler.placement.generator.chooser  # type: ignore[attr-defined]
    assert isinstance(chooser, RwgpPlacement)
    model = chooser._model_for(CLUSTER)
    return float(dict(model.prior.named_parameters())["raw_noise"].detach())


def test_the_chooser_starts_from_the_bundles_hyperparameters(tmp_path: Path) -> None:
    assert _chooser_noise(_bundle(tmp_path, _refit().hyperparameters())) == -3.0


def test_hyperparameters_that_do_not_fit_are_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        noise = _chooser_noise(_bundle(tmp_path, {"raw_noise": [1.0, 2.0]}))
    assert noise == RwgpModel(CLUSTER).hyperparameters()["raw_noise"]
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "the bundle's RWGP hyperparameters do not fit this RWGP"]
