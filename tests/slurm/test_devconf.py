"""The dev cluster's rendered configuration and CLI, without starting anything."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from slurm_rl.cli.devcluster import devcluster_group
from slurm_rl.devcluster.cluster import DevCluster
from slurm_rl.devcluster.config import (
    DevClusterConfig,
    NodeGroup,
    render_gres_conf,
    render_slurm_conf,
    render_slurmdbd_conf,
)
from slurm_rl.slurm import deferral


def _lines(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines()}


def test_nodes_get_names_types_and_consecutive_ports() -> None:
    config = DevClusterConfig(base_port=20000)
    nodes = config.nodes()
    assert [n.name for n in nodes] == [f"a100-0{i}" for i in range(1, 5)] + [
        f"v100-0{i}" for i in range(1, 5)
    ]
    assert [n.port for n in nodes] == list(range(20001, 20009))
    assert {(n.gpu_type, n.gpus) for n in nodes} == {("a100", 8), ("v100", 4)}
    assert config.port_count == 9


def test_slurm_conf_has_every_line_the_daemon_relies_on(tmp_path: Path) -> None:
    config = DevClusterConfig(root=tmp_path, base_port=20000, min_job_age_s=600)
    lines = _lines(render_slurm_conf(config, hostname="box"))
    for wanted in (
        "SlurmctldHost=box(127.0.0.1)",
        "SlurmctldPort=20000",
        "SchedulerType=sched/backfill",
        "PriorityType=priority/multifactor",
        "PriorityWeightAge=0",
        "PriorityWeightFairShare=0",
        "SelectType=select/cons_tres",
        "GresTypes=gpu",
        "JobSubmitPlugins=lua",
        "MinJobAge=600",
        "JobCompType=jobcomp/filetxt",
        "SlurmdParameters=config_overrides",
        f"AuthInfo=socket={tmp_path / 'munge' / 'munge.socket'}",
    ):
        assert wanted in lines, wanted
    node_line = next(line for line in lines if line.startswith("NodeName=v100-02 "))
    assert "Port=20006" in node_line and "Gres=gpu:v100:4" in node_line


def test_the_scheduler_is_backfill_unless_builtin_is_asked_for(tmp_path: Path) -> None:
    builtin = DevClusterConfig(root=tmp_path, scheduler="builtin")
    lines = _lines(render_slurm_conf(builtin, hostname="box"))
    assert "SchedulerType=sched/builtin" in lines
    assert "PriorityType=priority/multifactor" in lines  # builtin honours Priority= with it
    assert "SchedulerType=sched/backfill" not in lines
    fine = DevClusterConfig(root=tmp_path, bf_resolution_s=1)
    params = next(line for line in _lines(render_slurm_conf(fine, hostname="box"))
                  if line.startswith("SchedulerParameters="))
    assert params.endswith(",bf_resolution=1")


def test_gres_conf_points_every_gpu_at_a_placeholder_device(tmp_path: Path) -> None:
    config = DevClusterConfig(root=tmp_path, groups=(NodeGroup("h100", 1, 2),))
    lines = _lines(render_gres_conf(config))
    assert "AutoDetect=off" in lines
    assert f"NodeName=h100-01 Name=gpu Type=h100 File={tmp_path / 'dev' / 'nvidia'}[0-1]" in lines


def test_deferral_config_and_tag_round_trip(tmp_path: Path) -> None:
    config = deferral.DeferralConfig(tmp_path / "hb", 30, 8, ("gpu", "big"))
    path = deferral.write_config(tmp_path, config)
    assert _lines(path.read_text()) >= {
        f"heartbeat_path = {tmp_path / 'hb'}",
        "window = 8",
        "partitions = gpu,big",
        "gpu_only = yes",
    }
    deferral.beat(tmp_path / "hb", now=1234.9)
    assert (tmp_path / "hb").read_text() == "1234\n"
    assert deferral.deferred_until("slurm-rl:deferred:1795974105") == 1795974105
    assert deferral.deferred_until("x,slurm-rl:deferred:oops") is None
    assert deferral.deferred_until("") is None


def test_cli_env_and_status_of_a_stopped_cluster(tmp_path: Path) -> None:
    runner = CliRunner()
    root = tmp_path / "cluster"
    env = runner.invoke(devcluster_group, ["env", "--root", str(root)])
    assert env.exit_code == 0
    assert env.output.strip() == f"export SLURM_CONF={root / 'etc' / 'slurm.conf'}"
    status = runner.invoke(devcluster_group, ["status", "--root", str(root)])
    assert status.exit_code == 0 and "slurmctld        stopped" in status.output
    assert DevCluster(DevClusterConfig(root=root)).status().stopped


def test_accounting_adds_slurmdbd_on_two_more_ports_and_its_own_munge_socket(
    tmp_path: Path,
) -> None:
    plain = DevClusterConfig(root=tmp_path, base_port=20000)
    assert "AccountingStorageType=accounting_storage/none" in _lines(render_slurm_conf(plain))
    config = DevClusterConfig(root=tmp_path, base_port=20000, accounting=True,
                              slurm_user="slurm")
    assert config.port_count == 11 and (config.dbd_port, config.db_port) == (20009, 20010)
    lines = _lines(render_slurm_conf(config, hostname="box"))
    socket = tmp_path / "munge" / "munge.socket"
    assert {"AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=127.0.0.1", "AccountingStoragePort=20009",
            f"AccountingStoragePass=socket={socket}"} <= lines  # never munge's default socket
    dbd = _lines(render_slurmdbd_conf(config, "s3cret"))
    assert {f"AuthInfo=socket={socket}", "DbdAddr=127.0.0.1", "DbdPort=20009",
            "SlurmUser=slurm", "StorageHost=127.0.0.1", "StoragePort=20010",
            "StoragePass=s3cret", "StorageType=accounting_storage/mysql"} <= dbd


def test_status_of_an_accounting_cluster_names_slurmdbd_and_mariadb(tmp_path: Path) -> None:
    cluster = DevCluster(DevClusterConfig(root=tmp_path / "c", accounting=True))
    names = [daemon.name for daemon in cluster.status().daemons]
    assert names[:2] == ["munged", "slurmctld"] and names[-2:] == ["slurmdbd", "mariadbd"]
    assert cluster.status().stopped
    plain = DevCluster(DevClusterConfig(root=tmp_path / "p"))
    assert "slurmdbd" not in {daemon.name for daemon in plain.status().daemons}
