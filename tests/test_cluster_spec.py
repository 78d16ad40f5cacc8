"""Cluster specs: the shipped ones load and match their sources; bad ones fail in one line."""

from __future__ import annotations

import csv
import gzip
import os
from collections import Counter
from pathlib import Path

import pytest

from slurm_rl.errors import InputError, UnknownNameError
from slurm_rl.paths import shared_traces_dir
from slurm_rl.simulator.cluster_spec import ClusterSpec, list_cluster_specs, load_cluster_spec
from slurm_rl.simulator.perfmodel import PerformanceModel
from tests.timebox import time_limit

GOOD_GROUP = """
[[node_groups]]
gpu_type = "V100"
count = 2
gpus_per_node = 8
price_per_gpu_hour = 2.48
price_source = "GCP list price"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


def _spec(body: str = GOOD_GROUP, head: str = 'name = "t"\ndescription = "d"\n') -> str:
    return head + body


def _one_line_error(path: Path) -> str:
    with pytest.raises(InputError) as caught:
        load_cluster_spec(path)
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message
    return message


# ----- the shipped specs -----------------------------------------------------------------------


def test_every_shipped_spec_loads_and_every_gpu_type_has_a_speed() -> None:
    names = list_cluster_specs()
    assert {"philly-hetero", "pai-2020", "venus", "tiny"} <= set(names)
    for name in names:
        spec = load_cluster_spec(name)
        assert isinstance(spec, ClusterSpec) and spec.name == name and spec.description
        perf = spec.performance_model()
        for node in spec.cluster.nodes:
            assert perf.relative_speed("imagenet", node.gpu_type, "V100") > 0
            assert node.price_per_gpu_hour > 0 and node.host_group
        assert set(spec.price_sources) == {n.name.rsplit("-", 1)[0] for n in spec.cluster.nodes}


def test_tiny_has_two_types_two_racks_and_one_straggler() -> None:
    spec = load_cluster_spec("tiny")
    nodes = spec.cluster.nodes
    assert [n.name for n in nodes[:3]] == ["v100-001", "v100-002", "t4-001"]
    assert spec.cluster.gpu_types == ("T4", "V100") and spec.cluster.total_gpus == 32
    assert {n.host_group for n in nodes} == {"rack-01", "rack-02"}
    assert spec.fluctuation.enabled and spec.fluctuation.straggler_count(len(nodes)) == 1


def test_philly_hetero_is_sized_as_its_comment_says() -> None:
    spec = load_cluster_spec("philly-hetero")
    perf = PerformanceModel.default()
    assert spec.cluster.gpu_types == ("A100", "K80", "P100", "T4", "V100")
    # GPU-time shares of the families in Philly Sep-Nov under the family rule
    mix = {"imagenet": 0.834, "yolov3": 0.113, "deepspeech2": 0.018, "bert": 0.018,
           "cifar10": 0.0087, "ncf": 0.0087}
    capacity = sum(
        node.gpus / sum(w / perf.relative_speed(f, node.gpu_type, "V100") for f, w in mix.items())
        for node in spec.cluster.nodes
    )
    assert spec.cluster.total_gpus == 720
    assert capacity == pytest.approx(642, abs=3)
    assert {n.gpus for n in spec.cluster.nodes} == {2, 4, 8}


@pytest.mark.skipif(
    not (shared_traces_dir() / "alibaba_pai_v2020_machine_spec.csv.gz").is_file(),
    reason="../shared/traces is not here",
)
def test_pai_2020_matches_the_machine_table() -> None:
    with gzip.open(shared_traces_dir() / "alibaba_pai_v2020_machine_spec.csv.gz", "rt") as handle:
        rows = [r for r in csv.DictReader(handle) if r["gpu_type"] != "CPU"]
    expected = Counter((r["gpu_type"], int(r["cap_gpu"])) for r in rows)
    spec = load_cluster_spec("pai-2020")
    assert Counter((n.gpu_type, n.gpus) for n in spec.cluster.nodes) == expected
    assert spec.cluster.total_gpus == 6742
    assert spec.speed_like == {"MISC": "P100"}


def test_venus_is_22_nodes_of_8_v100() -> None:
    spec = load_cluster_spec("venus")
    assert len(spec.cluster.nodes) == 22 and spec.cluster.total_gpus == 176
    perf = spec.performance_model()
    assert {perf.canonical_gpu_type(t) for t in spec.cluster.gpu_types} == {"V100"}


# ----- loading by path, names and speed_like ----------------------------------------------------


def test_a_spec_loads_from_a_path_with_defaults(tmp_path: Path) -> None:
    spec = load_cluster_spec(_write(tmp_path, _spec()))
    assert [n.name for n in spec.cluster.nodes] == ["v100-001", "v100-002"]
    assert {n.host_group for n in spec.cluster.nodes} == {"rack-01"}
    assert not spec.fluctuation.enabled


def test_host_groups_fill_in_blocks(tmp_path: Path) -> None:
    body = GOOD_GROUP.replace("count = 2", "count = 5") + "host_group_size = 2\n"
    spec = load_cluster_spec(_write(tmp_path, _spec(body)))
    assert [n.host_group for n in spec.cluster.nodes] == [
        "rack-01", "rack-01", "rack-02", "rack-02", "rack-03"]


def test_speed_like_models_unmeasured_hardware(tmp_path: Path) -> None:
    body = GOOD_GROUP.replace('"V100"', '"H100"') + 'speed_like = "A100"\n'
    spec = load_cluster_spec(_write(tmp_path, _spec(body)))
    assert spec.cluster.gpu_types == ("H100",)
    assert spec.performance_model().canonical_gpu_type("H100") == "A100"


def test_an_unknown_spec_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownNameError, match="unknown cluster spec 'nope'; known: .*tiny"):
        load_cluster_spec("nope")


# ----- bad specs: one line naming file and key ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        (_spec(GOOD_GROUP + "gpu_tpye = 'V100'\n"), "node_groups[0].gpu_tpye", "unknown key"),
        (_spec(head="name = 't'\ndescription = 'd'\ncolour = 'red'\n"), "colour", "unknown key"),
        (_spec() + "[fluctuation]\nsigmaa = 0.1\n", "fluctuation.sigmaa", "unknown key"),
        (_spec(GOOD_GROUP.replace('"V100"', '"V1000"')), "node_groups[0].gpu_type",
         "unknown GPU type 'V1000'"),
        (_spec(GOOD_GROUP.replace("count = 2", "count = -3")), "node_groups[0].count",
         "greater than or equal to 1"),
        (_spec(GOOD_GROUP.replace("count = 2", 'count = "2"')), "node_groups[0].count",
         "valid integer"),
        (_spec(GOOD_GROUP.replace("price_source", "#")), "node_groups[0].price_source",
         "missing required key"),
        (_spec() + "[fluctuation]\nsigma = -1.0\n", "fluctuation.sigma", "greater than"),
        # typos that would hang or overflow a replay instead of failing
        (_spec() + "[fluctuation]\nsigma = 1e300\n", "fluctuation.sigma", "less than or equal"),
        (_spec() + "[fluctuation]\nstep_s = 1e-6\n", "fluctuation.step_s", "greater than"),
        (_spec() + "[fluctuation]\nseed = -7\n", "fluctuation.seed", "greater than"),
        (_spec(GOOD_GROUP.replace("2.48", "1e308")), "node_groups[0].price_per_gpu_hour",
         "less than or equal"),
        (_spec(GOOD_GROUP + 'speed_like = "P100"\n'), "node_groups[0].speed_like",
         "is measured"),
        (_spec(GOOD_GROUP.replace('"V100"', '"H100"') + 'speed_like = "H200"\n'),
         "node_groups[0].speed_like", "must be a measured type"),
        (_spec(GOOD_GROUP + GOOD_GROUP), "node_groups[1].prefix", "used by another node group"),
        (_spec(GOOD_GROUP + 'host_groups = ["a", "b", "c"]\nhost_group_size = 1\n'),
         "node_groups[0].host_groups", "need 2 names, not 3"),
        (_spec(head='name = "Bad Name"\ndescription = "d"\n'), "name", "lower-case"),
    ],
)
def test_bad_specs_name_the_file_and_the_key(
    tmp_path: Path, text: str, key: str, reason: str
) -> None:
    message = _one_line_error(_write(tmp_path, text))
    assert f"column '{key}'" in message
    assert reason in message


def test_invalid_toml_names_the_line(tmp_path: Path) -> None:
    message = _one_line_error(_write(tmp_path, 'name = "t"\ndescription = \n'))
    assert "spec.toml:2" in message and "not valid TOML" in message


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such cluster spec file"):
        load_cluster_spec(tmp_path / "absent.toml")


# ----- files and sizes that hung or exhausted memory ----------------------------------------------


@pytest.mark.parametrize("name", ["spec.toml", "spec"])
def test_a_fifo_is_refused_not_waited_on(tmp_path: Path, name: str) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    with time_limit(10, "reading a FIFO"):
        message = _one_line_error(fifo)
    assert message == f"{fifo}: not a regular file (a FIFO)"


def test_a_directory_is_named_as_such(tmp_path: Path) -> None:
    folder = tmp_path / "specs.toml"
    folder.mkdir()
    assert _one_line_error(folder) == f"{folder}: is a directory, not a cluster spec file"


@pytest.mark.parametrize("count", ["100001", "100000000000", "9223372036854775807"])
def test_node_counts_are_bounded(tmp_path: Path, count: str) -> None:
    """A count of 1e11 built a list of 1e11 host-group names: MemoryError, after minutes."""
    body = GOOD_GROUP.replace("count = 2", f"count = {count}") + "host_group_size = 1\n"
    with time_limit(10, "loading the spec"):
        message = _one_line_error(_write(tmp_path, _spec(body)))
    assert "column 'node_groups[0].count'" in message and "less than or equal to 100000" in message


def test_the_whole_cluster_is_bounded(tmp_path: Path) -> None:
    group = GOOD_GROUP.replace("count = 2", "count = 60000")
    body = group + group.replace('gpu_type = "V100"', 'gpu_type = "V100"\nprefix = "b"')
    with time_limit(10, "loading the spec"):
        message = _one_line_error(_write(tmp_path, _spec(body)))
    assert "column 'node_groups'" in message
    assert "120000 nodes in all; at most 100000 are accepted" in message


def test_the_largest_cluster_accepted_loads(tmp_path: Path) -> None:
    body = GOOD_GROUP.replace("count = 2", "count = 100000")
    spec = load_cluster_spec(_write(tmp_path, _spec(body)))
    assert len(spec.cluster.nodes) == 100000 and spec.cluster.nodes[-1].name == "v100-100000"


@pytest.mark.parametrize("nested", ["a = " + "[" * 3000 + "]" * 3000,
                                    "a = " + "{b = " * 3000 + "}" * 3000,
                                    "a" + ".a" * 3000 + " = 1"])
def test_deeply_nested_toml_is_one_line(tmp_path: Path, nested: str) -> None:
    """tomllib recurses once per level: 3000 levels raised RecursionError (a traceback)."""
    message = _one_line_error(_write(tmp_path, _spec() + nested + "\n"))
    assert "not valid TOML" in message or "unknown key" in message


def test_a_long_bad_value_is_cut_in_the_message(tmp_path: Path) -> None:
    body = GOOD_GROUP.replace("count = 2", f'count = "{"9" * 100000}"')
    message = _one_line_error(_write(tmp_path, _spec(body)))
    assert "column 'node_groups[0].count'" in message and len(message) < 500


def test_an_integer_of_5000_digits_is_one_line(tmp_path: Path) -> None:
    """tomllib's int() refuses more than 4300 digits with a ValueError (a traceback)."""
    body = GOOD_GROUP.replace("count = 2", f"count = {'9' * 5000}")
    message = _one_line_error(_write(tmp_path, _spec(body)))
    assert "not valid TOML" in message and "4300 digits" in message
