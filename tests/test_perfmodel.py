"""The performance model: its table matches the measured sources, and its factors behave."""

from __future__ import annotations

import ast
import csv
import gzip
import json
import statistics
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from slurm_rl.errors import InputError, UnknownNameError
from slurm_rl.paths import shared_perfdata_dir
from slurm_rl.simulator.perfmodel import TABLES_PATH, PerformanceModel
from tests.scripts import load_script

FAMILIES = ("cifar10", "ncf", "deepspeech2", "yolov3", "imagenet", "bert")
TYPES = ("K80", "P100", "V100", "T4", "A100")
PERFDATA = shared_perfdata_dir()
needs_perfdata = pytest.mark.skipif(
    not (PERFDATA / "MANIFEST.tsv").is_file(), reason="../shared/perfdata is not here"
)


@pytest.fixture(scope="module")
def model() -> PerformanceModel:
    return PerformanceModel.default()


def _derive_script() -> ModuleType:
    return load_script("derive_perf_tables")


def _gavel(name: str) -> dict[str, Any]:
    with gzip.open(PERFDATA / "gavel" / name, "rt") as handle:
        table: dict[str, Any] = json.load(handle)
    return table


def _isolated(table: dict[str, Any], worker: str, model: str) -> dict[int, float]:
    out = {}
    for key, value in table[worker].items():
        name, sf = ast.literal_eval(key)
        if sf == 1 and name.startswith(model + " (batch size") and value["null"]:
            out[int(name.split()[-1].rstrip(")"))] = value["null"]
    return out


# ----- the table against its sources -----------------------------------------------------------


@needs_perfdata
def test_packaged_table_is_what_the_script_derives() -> None:
    assert _derive_script().main(["--check"]) == 0


@needs_perfdata
def test_k80_over_v100_resnet50_is_gavels_median_ratio(model: PerformanceModel) -> None:
    phys = _gavel("physical_cluster_throughputs.json.gz")
    k80, v100 = _isolated(phys, "k80", "ResNet-50"), _isolated(phys, "v100", "ResNet-50")
    expected = statistics.median(k80[b] / v100[b] for b in k80)
    assert model.relative_speed("imagenet", "K80", "V100") == pytest.approx(expected, rel=1e-3)
    # bs 64, the example in perfdata/README.md: 0.746 / 4.526 steps/s
    assert k80[64] / v100[64] == pytest.approx(0.746 / 4.526, rel=1e-3)


@needs_perfdata
def test_a100_over_v100_imagenet_is_elasticflow_over_gavel(model: PerformanceModel) -> None:
    with (PERFDATA / "elasticflow" / "throughputs_A100" / "resnet50.csv").open() as handle:
        a100 = {int(r["global_batch_size"]): float(r["1"]) for r in csv.DictReader(handle)}
    v100 = _isolated(_gavel("physical_cluster_throughputs.json.gz"), "v100", "ResNet-50")
    # one GPU at the same batch: (it/s x batch) / (steps/s x batch)
    expected = statistics.median([a100[64] / v100[64], a100[128] / v100[128]])
    assert model.relative_speed("imagenet", "A100", "V100") == pytest.approx(expected, rel=1e-3)


@needs_perfdata
def test_t4_over_v100_cifar10_at_batch_64_is_one_of_the_bridged_points() -> None:
    with (PERFDATA / "pollux" / "cifar10" / "placements.csv").open() as handle:
        rows = [r for r in csv.DictReader(handle) if r["placement"] == "1"]
    step = next(float(r["step_time"]) for r in rows if r["local_bsz"] == "64")
    v100 = _isolated(_gavel("physical_cluster_throughputs.json.gz"), "v100", "ResNet-18")
    point = (64 / step) / (v100[64] * 64)
    derive = _derive_script()
    curve = derive.pollux_one_gpu_samples(PERFDATA, "cifar10")
    assert derive.interpolate(curve, 64) / (v100[64] * 64) == pytest.approx(point)


@needs_perfdata
def test_spread_points_are_pollux_step_time_ratios() -> None:
    times = _derive_script().pollux_step_times(PERFDATA, "imagenet")
    # README example: imagenet '4' 0.1610 s vs '44' 0.5612 s per step at local batch 20
    assert times[((4,), 20)] / times[((4, 4), 20)] == pytest.approx(0.1610 / 0.5612, rel=1e-3)


def test_every_family_and_type_has_a_speed_and_a_method() -> None:
    tables = json.loads(TABLES_PATH.read_text())
    for family in FAMILIES:
        for gpu in TYPES:
            assert tables["relative_speed"]["value"][family][gpu] > 0
            assert tables["relative_speed"]["method"][family][gpu]
    assert tables["sources"]["gavel"]["files"][0].startswith("stanford-futuredata/gavel @ ")


# ----- type speed ------------------------------------------------------------------------------


@pytest.mark.parametrize("family", (*FAMILIES, ""))
def test_speed_relative_to_itself_is_one_and_ratios_invert(
    model: PerformanceModel, family: str
) -> None:
    for a in TYPES:
        assert model.relative_speed(family, a, a) == 1.0
        for b in TYPES:
            forth, back = model.relative_speed(family, a, b), model.relative_speed(family, b, a)
            assert forth * back == pytest.approx(1.0)


def test_known_orderings_hold(model: PerformanceModel) -> None:
    for family in FAMILIES:
        assert model.relative_speed(family, "K80", "V100") < 0.35
        assert model.relative_speed(family, "A100", "V100") > 1.3
        assert 0.4 < model.relative_speed(family, "T4", "V100") < 0.8


def test_aliases_resolve_case_insensitively(model: PerformanceModel) -> None:
    assert model.canonical_gpu_type("V100M32") == "V100"
    assert model.canonical_gpu_type(" a100 ") == "A100"
    assert model.canonical_gpu_type("nvidia-tesla-t4") == "T4"
    assert model.is_measured("V100M16") and model.assumption("V100M16") is None


def test_unmeasured_hardware_is_an_explicit_assumption(model: PerformanceModel) -> None:
    assert model.canonical_gpu_type("MISC") == "P100"
    assert not model.is_measured("MISC")
    assert "no measurement" in (model.assumption("A10") or "")


def test_unknown_names_are_refused(model: PerformanceModel) -> None:
    with pytest.raises(UnknownNameError, match="unknown GPU type 'H100'"):
        model.canonical_gpu_type("H100")
    with pytest.raises(UnknownNameError, match="unknown model family 'gpt'"):
        model.relative_speed("gpt", "V100", "V100")


def test_speed_like_aliases_extend_a_model(model: PerformanceModel) -> None:
    extended = model.with_aliases({"H100": "A100"})
    assert extended.relative_speed("bert", "H100", "V100") == model.relative_speed(
        "bert", "A100", "V100"
    )
    assert not extended.is_measured("H100")
    with pytest.raises(UnknownNameError):
        model.with_aliases({"H100": "B200"})


def test_best_relative_speed_is_the_fastest_type(model: PerformanceModel) -> None:
    best = model.best_relative_speed("imagenet", ["K80", "T4", "V100M32"], "P100")
    assert best == model.relative_speed("imagenet", "V100", "P100")
    with pytest.raises(ValueError):
        model.best_relative_speed("imagenet", [], "V100")


# ----- spread ----------------------------------------------------------------------------------


@pytest.mark.parametrize("family", (*FAMILIES, ""))
def test_spread_is_one_on_one_node_and_never_rises_with_nodes(
    model: PerformanceModel, family: str
) -> None:
    assert model.spread_factor(family, (8,)) == 1.0
    factors = [model.spread_factor(family, (2,) * k) for k in range(1, 40)]
    assert all(0 < f <= 1 for f in factors)
    assert all(b <= a for a, b in zip(factors, factors[1:], strict=False))
    assert factors[1] < 1.0  # crossing a node boundary costs something
    assert factors[16 - 1] == factors[-1]  # saturates at the widest measured spread


def test_crossing_host_groups_costs_at_least_as_much(model: PerformanceModel) -> None:
    for family in FAMILIES:
        for k in (2, 4, 16, 30):
            shape = (8,) * k
            assert model.spread_factor(family, shape, same_host_group=False) <= (
                model.spread_factor(family, shape)
            )


def test_spread_relative_to_the_most_consolidated_shape(model: PerformanceModel) -> None:
    # 16 GPUs on 8-GPU nodes cannot use fewer than 2 nodes: that shape is the reference.
    assert model.spread_factor("bert", (8, 8), node_capacity=8) == 1.0
    four = model.spread_factor("bert", (4, 4, 4, 4), node_capacity=8)
    assert four == pytest.approx(
        model.spread_factor("bert", (4, 4, 4, 4)) / model.spread_factor("bert", (8, 8))
    )
    assert four <= 1.0
    with pytest.raises(ValueError):
        model.spread_factor("bert", (0, 0))


# ----- co-location -----------------------------------------------------------------------------


def test_colocation_is_at_most_one_and_falls_with_each_neighbour(model: PerformanceModel) -> None:
    for family in (*FAMILIES, ""):
        assert model.colocation_factor(family, ()) == 1.0
        previous = 1.0
        for k in range(1, 8):
            value = model.colocation_factor(family, ("imagenet",) * k)
            assert 0 < value <= previous
            previous = value


def test_colocation_is_much_weaker_than_sharing_a_gpu(model: PerformanceModel) -> None:
    tables = json.loads(TABLES_PATH.read_text())
    same_gpu = tables["colocation"]["same_gpu"]["imagenet"]["imagenet"]
    node = model.colocation_factor("imagenet", ("imagenet",))
    assert 1 - node < 0.1 * (1 - same_gpu)
    assert model.colocation_factor("bert", ("ncf", "")) == pytest.approx(
        model.colocation_factor("bert", ("", "ncf"))
    )


def test_a_malformed_table_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"schema": 1, "families": []}))
    with pytest.raises(InputError, match="bad.json: malformed performance table"):
        PerformanceModel.from_file(path)
    path.write_text("{")
    with pytest.raises(InputError, match="cannot read performance table"):
        PerformanceModel.from_file(path)


def test_spread_table_is_the_isotonic_fit_of_the_measured_points() -> None:
    tables = json.loads(TABLES_PATH.read_text())
    for family, entry in tables["spread"]["by_family"].items():
        ks = sorted(entry["points"], key=int)
        table = [entry["table"][k] for k in ks]
        assert all(b <= a <= 1 for a, b in zip(table, table[1:], strict=False)), family
        # pooling adjacent violators keeps the weighted mean of the measured points
        weights = [entry["placements"][k] for k in ks]
        measured = sum(w * entry["points"][k] for w, k in zip(weights, ks, strict=True))
        fitted = sum(w * t for w, t in zip(weights, table, strict=True))
        assert fitted == pytest.approx(measured, rel=1e-3), family


def test_isotonic_fit_pools_only_violating_neighbours() -> None:
    fit = _derive_script().isotonic_spread({2: (0.5, 1), 3: (0.7, 1), 4: (0.4, 2), 8: (0.3, 1)})
    assert fit == {2: 0.6, 3: 0.6, 4: 0.4, 8: 0.3}


def test_a_gang_runs_at_its_most_crowded_nodes_pace(model: PerformanceModel) -> None:
    by_node = [("bert",), ("ncf", "imagenet", "imagenet"), ()]
    assert model.gang_colocation_factor("imagenet", by_node) == model.colocation_factor(
        "imagenet", ("imagenet", "imagenet", "ncf")
    )
    assert model.gang_colocation_factor("imagenet", [(), ()]) == 1.0
    # not the product over every neighbour of every node
    many = [("imagenet",) * 7] * 4
    assert model.gang_colocation_factor("imagenet", many) > model.colocation_factor(
        "imagenet", ("imagenet",) * 28
    )
