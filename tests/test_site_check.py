"""What of the site config does not match the cluster, said at the daemon's start and by
selftest: a misspelt partition (the daemon managed nothing, silently), prices keyed ``A100``
for Slurm's ``a100`` (every node priced 0), a GPU type the performance model does not know
(fastest-gpu ranked it last). Found by a bad-input review; each passed selftest before."""

from __future__ import annotations

import json
import logging

import pytest

from slurm_rl.config import DaemonConfig
from slurm_rl.ops.selftest import check_site
from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.site_check import site_problems
from slurm_rl.slurm.source import SlurmSource, SourceConfig
from tests.slurm.fakes import FakeRunner, fixture_text, recorded_cluster


def _nodes(runner: FakeRunner) -> list:  # type: ignore[type-arg]
    return list(CliSlurmClient(runner=runner).nodes().nodes)


def test_the_recorded_cluster_with_its_own_names_has_no_problem() -> None:
    assert site_problems(_nodes(recorded_cluster("22.05")), ("gpu",),
                         {"a100": 2.9, "V100": 1.2}) == []


def test_a_misspelt_partition_unmatched_prices_and_an_unknown_type_are_each_one_line() -> None:
    runner = recorded_cluster("22.05")
    doc = json.loads(fixture_text("22.05", "sinfo.json"))
    for node in doc["nodes"]:
        if node["name"] == "a100-01":
            node["gres"] = "gpu:nvidia_a100-sxm4-80gb:8"
    runner.answer(("sinfo", "--json"), json.dumps(doc))
    problems = site_problems(_nodes(runner), ("gpuu",), {"H100": 4.0, "A100": 2.9})
    assert problems == [
        "partitions: 'gpuu' is not a partition of this cluster's GPU nodes (Slurm shows: "
        "gpu); the daemon manages no job there",
        "price_per_gpu_hour: H100 match no GPU type Slurm reports (a100, "
        "nvidia_a100-sxm4-80gb, v100); those prices are not used",
        "GPU type 'nvidia_a100-sxm4-80gb' (node a100-01) is unknown to the performance "
        "model: fastest-gpu ranks it last and a learned policy takes it for a V100"]


def test_prices_ignore_case_and_the_source_says_each_problem_once(
        caplog: pytest.LogCaptureFixture) -> None:
    runner = recorded_cluster("22.05")
    source = SlurmSource(CliSlurmClient(runner=runner),
                         SourceConfig(partitions=("gpu", "gpuu"),
                                      price_per_gpu_hour={"A100": 2.9}))
    with caplog.at_level(logging.WARNING, logger="slurm_rl.slurm.source"):
        snapshot = source.snapshot()
        source.snapshot()
    assert {n.price_per_gpu_hour for n in snapshot.cluster.nodes if n.gpu_type == "a100"} \
        == {2.9}
    assert [r.getMessage() for r in caplog.records] == [
        "site config: partitions: 'gpuu' is not a partition of this cluster's GPU nodes "
        "(Slurm shows: gpu); the daemon manages no job there"]


def test_selftest_fails_on_them_with_the_fix() -> None:
    check = check_site(CliSlurmClient(runner=recorded_cluster("22.05")),
                       DaemonConfig(partitions=("gpuu",)))
    assert not check.ok and "'gpuu' is not a partition" in check.detail
    assert "fix: the [daemon] keys named" in check.detail
    assert check_site(CliSlurmClient(runner=recorded_cluster("22.05")), DaemonConfig()).ok
