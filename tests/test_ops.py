"""Operations without a cluster: config precedence and show-conf, JSON decision lines,
metrics, stored reasons and before-values, explain's rendering of hostile text, revert's
field logic, and the packaging files."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_rl.cli.main import main
from slurm_rl.config import load_config, load_with_sources
from slurm_rl.core import Cluster, ClusterSnapshot, Job, Node
from slurm_rl.daemon.runner import Daemon
from slurm_rl.devcluster.cluster import free_base_port
from slurm_rl.errors import InputError
from slurm_rl.ops import reasons
from slurm_rl.ops.explain import explanation, find_job, render
from slurm_rl.ops.revert import (
    SLURMS_OWN,
    Change,
    changes,
    parse_since,
    record,
    restore_fields,
    revert,
)
from slurm_rl.retrain.schedule import RETENTION_JOB, RETRAIN_JOB
from slurm_rl.scheduler import Scheduler
from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.plan import before_values
from slurm_rl.slurm.records import SlurmJob
from slurm_rl.store.models import DecisionRow
from tests.slurm.fakes import fixture_text
from tests.test_daemon import NOW, ROLES, Clock, _cluster, _config

REPO = Path(__file__).resolve().parents[1]


# -- config --------------------------------------------------------------------------------


def test_precedence_is_defaults_file_environment_command_line(tmp_path: Path) -> None:
    path = tmp_path / "slurm-rl.toml"
    path.write_text('[daemon]\nmode = "advise"\ninterval_s = 2\npolicy = "qssf+first-fit"\n')
    env = {"SLURM_RL_INTERVAL_S": "3", "SLURM_RL_POLICY": "fifo+first-fit",
           "SLURM_RL_PARTITIONS": "gpu, a100", "SLURM_RL_PRICE_PER_GPU_HOUR": '{"a100": 2.5}'}
    config, sources = load_with_sources(path, {"policy": "multifactor+best-fit"}, env)
    assert (config.mode, sources["mode"]) == ("advise", str(path))
    assert (config.interval_s, sources["interval_s"]) == (3.0, "environment")
    assert (config.policy, sources["policy"]) == ("multifactor+best-fit", "command line")
    assert config.partitions == ("gpu", "a100") and config.price_per_gpu_hour == {"a100": 2.5}
    assert sources["seed"] == "default"


@pytest.mark.parametrize("env, where", [
    ({"SLURM_RL_MODE": "sometimes"}, "SLURM_RL_MODE: [daemon] mode: Input should be"),
    ({"SLURM_RL_PRICE_PER_GPU_HOUR": "{a100"}, "SLURM_RL_PRICE_PER_GPU_HOUR: not a JSON"),
])
def test_a_bad_environment_value_names_the_variable(env: dict[str, str], where: str) -> None:
    with pytest.raises(InputError) as caught:
        load_config(None, None, env)
    assert str(caught.value).startswith(where) and "\n" not in str(caught.value)


def test_show_conf_prints_each_value_with_its_source(tmp_path: Path) -> None:
    path = tmp_path / "site.toml"
    path.write_text('[daemon]\nmode = "enforce"\n')
    result = CliRunner().invoke(main, ["show-conf", "--config", str(path)],
                                env={"SLURM_RL_SEED": "7"})
    assert result.exit_code == 0, result.output
    assert f'mode = "enforce"  # {path}' in result.output
    assert "seed = 7  # environment (SLURM_RL_SEED)" in result.output
    assert 'policy = "fifo+best-fit"  # default' in result.output
    bad = tmp_path / "bad.toml"
    bad.write_text('[daemon]\nmood = "enforce"\n')
    failed = CliRunner().invoke(main, ["show-conf", "--config", str(bad)])
    assert failed.exit_code == 2
    assert f"{bad}: [daemon] mood: Extra inputs are not permitted" in failed.output


SECRET_URL = "postgresql+psycopg://slurmrl:s3cr3t-pw@127.0.0.1:9/slurmrl"  # port 9: nothing


@pytest.mark.parametrize("as_json", [False, True])
def test_show_conf_never_prints_the_store_password(tmp_path: Path, as_json: bool) -> None:
    """Issue 18 (4): show-conf printed store_url and the effective store as written."""
    path = tmp_path / "site.toml"
    path.write_text(f'[daemon]\nstore_url = "{SECRET_URL}"\n')
    result = CliRunner().invoke(main, ["show-conf", "--config", str(path)]
                                + (["--json"] if as_json else []))
    assert result.exit_code == 0, result.output
    assert "s3cr3t-pw" not in result.output
    assert "slurmrl:***@127.0.0.1:9" in result.output


def test_a_store_check_that_fails_never_prints_the_password(tmp_path: Path) -> None:
    """Issue 18 (4): selftest's FAIL line for a store it cannot open carried the URL whole."""
    from slurm_rl.config import DaemonConfig
    from slurm_rl.ops.selftest import check_store

    check = check_store(DaemonConfig(state_dir=tmp_path, store_url=SECRET_URL))
    assert not check.ok and "s3cr3t-pw" not in check.detail, check.detail
    assert "***" in check.detail


def test_the_site_config_default_path_is_used_when_it_exists(tmp_path: Path,
                                                             monkeypatch: Any) -> None:
    from slurm_rl import config as module

    site = tmp_path / "slurm-rl.toml"
    monkeypatch.setattr(module, "DEFAULT_CONFIG_PATH", site)
    assert module.config_path(None, {}) is None
    site.write_text("[daemon]\n")
    assert module.config_path(None, {}) == site
    assert module.config_path(None, {"SLURM_RL_CONFIG": "/x.toml"}) == Path("/x.toml")
    assert module.config_path(Path("/given.toml"), {}) == Path("/given.toml")


# -- what a cycle stores and logs ----------------------------------------------------------


def test_decisions_are_json_lines_and_store_reasons_and_before_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = _config(tmp_path)
    daemon = Daemon(lambda: config, runner=_cluster())
    try:
        with caplog.at_level(logging.INFO, logger="slurm_rl.decisions"):
            assert daemon.run_once().ok
        lines = [json.loads(r.getMessage()) for r in caplog.records
                 if r.name == "slurm_rl.decisions"]
        placed = [d for d in daemon.store.decisions_for("slurm", ROLES["pending_prio"])]
    finally:
        daemon.close(retire=False)
    assert lines and {"event", "job", "action", "argv", "rc", "policy"} <= set(lines[0])
    row: DecisionRow = placed[0]
    assert row.details is not None
    assert row.details["before"]["ReqNodeList"] == "" and "NumNodes" in row.details["before"]
    why = row.details["why"]
    assert why["rank"] == 0 and why["placement"]["nodes"][0]["node"] in (row.nodes or "")
    samples = daemon.metrics.registry.get_sample_value
    assert samples("slurm_rl_cycles_total", {"result": "healthy"}) == 1.0
    assert samples("slurm_rl_decisions_total", {"action": "place"}) >= 1.0
    assert samples("slurm_rl_active_model_info",
                   {"policy": "fifo+best-fit", "version": "builtin"}) == 1.0


def test_metrics_are_served_on_localhost_only(tmp_path: Path) -> None:
    port = free_base_port(1, start=19600)
    config = _config(tmp_path, metrics_port=port)
    daemon = Daemon(lambda: config, runner=_cluster(), clock=Clock())
    try:
        daemon.metrics.serve(config.metrics_address, config.metrics_port)
        daemon.run_once()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    finally:
        daemon.close(retire=False)
    assert "slurm_rl_cycle_duration_seconds_count 1.0" in text
    # the recorded jobs were submitted a minute or so before NOW, the daemon's clock
    oldest = next(line for line in text.splitlines()
                  if line.startswith("slurm_rl_oldest_pending_wait_seconds "))
    assert 60.0 <= float(oldest.split()[1]) < 3600.0
    assert config.metrics_address == "127.0.0.1"


def test_a_reload_moves_the_retrain_schedule_and_the_metrics_endpoint(tmp_path: Path) -> None:
    first = _config(tmp_path, retrain_every_h=24.0, metrics_port=0)
    port = free_base_port(1, start=19700)
    configs = [first]
    daemon = Daemon(lambda: configs[-1], runner=_cluster(), clock=Clock())
    loop = threading.Thread(target=daemon.run, name="daemon-loop")
    loop.start()
    try:
        _until(lambda: daemon.schedule is not None, "the schedule")
        assert _retrain_every(daemon) == timedelta(hours=24)
        configs.append(first.model_copy(update={
            "retrain_every_h": 12.0, "retention_days": 30.0, "metrics_port": port}))
        daemon.request_reload()
        _until(lambda: _retrain_every(daemon) == timedelta(hours=12), "the new schedule")
        assert daemon.schedule is not None
        assert daemon.schedule.scheduler.get_job(RETENTION_JOB) is not None
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            assert b"slurm_rl_cycles_total" in answer.read()
    finally:
        daemon.request_stop()
        loop.join(timeout=30)
    assert not loop.is_alive()


def test_a_failed_reload_does_not_hide_the_next_ones_schedule_change(tmp_path: Path) -> None:
    first = _config(tmp_path, retrain_every_h=24.0, metrics_port=0)
    twelve = first.model_copy(update={"retrain_every_h": 12.0})
    broken = twelve.model_copy(update={"policy": "rl+rl", "policy_bundle": tmp_path / "none"})
    configs = [first]
    daemon = Daemon(lambda: configs[-1], runner=_cluster(), clock=Clock())
    loop = threading.Thread(target=daemon.run, name="daemon-loop")
    loop.start()
    try:
        _until(lambda: _retrain_every(daemon) == timedelta(hours=24), "the schedule")
        configs.append(broken)  # its bundle is missing: the reload fails, 24 h stays
        cycles = daemon.cycles
        daemon.request_reload()
        _until(lambda: daemon.cycles > cycles + 1, "cycles after the failed reload")
        assert _retrain_every(daemon) == timedelta(hours=24)
        configs.append(twelve)
        daemon.request_reload()
        _until(lambda: _retrain_every(daemon) == timedelta(hours=12), "the 12 h schedule")
    finally:
        daemon.request_stop()
        loop.join(timeout=30)
    assert not loop.is_alive()


def _retrain_every(daemon: Daemon) -> timedelta | None:
    schedule = daemon.schedule
    job = schedule.scheduler.get_job(RETRAIN_JOB) if schedule is not None else None
    return job.trigger.interval if job is not None else None


def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_reasons_give_rank_neighbours_and_rwgp_belief() -> None:
    from slurm_rl.agents.ordering_baselines import Fifo
    from slurm_rl.agents.rwgp.placement import RwgpPlacement

    cluster = Cluster("c", (Node("a-1", "A100", 8), Node("a-2", "A100", 8),
                            Node("v-1", "V100", 4)))
    jobs = (Job("1", 0.0, 2, gpu_type="a100"), Job("2", 1.0, 4))
    snapshot = ClusterSnapshot(10.0, cluster, (8, 8, 4), jobs)
    scheduler = Scheduler(Fifo(), RwgpPlacement())
    decision = scheduler.decide(snapshot)
    why = reasons.explain_decision(scheduler, snapshot, decision)
    first = why[decision.ranking[0]]
    assert first["rank"] == 0 and "below" in first
    nodes = first["placement"]["nodes"]
    assert all("gp_mean" in n and "gp_std" in n for n in nodes)
    assert first["placement"]["alternatives"], "other a100 node was an alternative"
    assert "lost" in first["placement"]["alternatives"][0]


# -- explain and revert --------------------------------------------------------------------


def test_explain_prints_hostile_stored_text_on_single_lines(tmp_path: Path) -> None:
    config = _config(tmp_path)
    daemon = Daemon(lambda: config, runner=_cluster())
    try:
        assert daemon.run_once().ok
        store = daemon.store
        with store.session() as session, session.begin():
            row = session.get(DecisionRow, 1)
            assert row is not None
            row.job.user = "evil\n\x1b[2Jcycle 99 faked"
        job = find_job(store, row.job.job_id, None)
        lines = render(explanation(store, job))
    finally:
        daemon.close(retire=False)
    assert all("\n" not in line for line in lines)
    assert "evil\\x0a\\x1b[2Jcycle 99 faked" in lines[0]


def _job(**values: Any) -> SlurmJob:
    settings: dict[str, Any] = {"job_id": "5", "name": "x", "user": "alice",
                                "partition": "gpu", "state": "PENDING"}
    return SlurmJob(**{**settings, **values})


def test_restore_fields_undo_pins_priorities_and_deferrals() -> None:
    now = 1000.0
    pinned = _job(required_nodes=("a-1",), priority=1000, eligible_time=now - 5)
    before = {"ReqNodeList": "", "NumNodes": "1", "Priority": "1", "Nice": "0",
              "StartTime": "990"}
    assert restore_fields(pinned, before, now, priority_set="1000") == {
        "ReqNodeList": "", "NumNodes": "1", "Priority": SLURMS_OWN}
    held = _job(eligible_time=now + 100, priority=1)
    assert restore_fields(held, {"StartTime": "995"}, now) == {"StartTime": "now"}
    user_begin = _job(eligible_time=now + 300)
    assert restore_fields(user_begin, {"StartTime": f"{now + 300:.0f}"}, now) == {}
    assert restore_fields(_job(priority=1), {"Priority": "1"}, now, priority_set="1000") == {}


def test_revert_hands_the_priority_back_to_slurm_with_the_users_nice() -> None:
    """A Priority written back as a number stays fixed in Slurm (no aging, no fair-share, a
    later Nice ignored), and the daemon's own Priority had zeroed the user's --nice: revert
    releases the priority to the priority plugin, then sends the nice from before."""
    now = 1000.0
    before = {"Priority": "120", "Nice": "50"}
    assert restore_fields(_job(priority=5000), before, now, priority_set="5000") == {
        "Priority": SLURMS_OWN, "Nice": "50"}
    # Someone set another priority since, or a user held the job: left as it is.
    assert restore_fields(_job(priority=7000), before, now, priority_set="5000") == {}
    assert restore_fields(_job(priority=0), before, now, priority_set="5000") == {}

    # what the daemon stores beside its Priority: the nice Slurm is about to zero
    assert before_values(_job(priority=120, nice=50), ["Priority"]) == (
        ("Priority", "120"), ("Nice", "50"))

    runner = _cluster()  # the recorded 22.05 queue; scontrol calls succeed
    client = CliSlurmClient(runner=runner)
    job_id = ROLES["pending_prio"]
    (shown,) = [job for job in client.jobs().jobs if job.job_id == job_id]
    assert shown.priority, "the recorded job is pending and not held"
    found = {job_id: Change(job_id, dict(before), priority_set=str(shown.priority))}
    steps = revert(client, found, dry_run=False, now=now)
    (step,) = [step for step in steps if step.job_id == job_id]
    assert step.result == "ok"
    release, update = (result.argv for result in step.sent)  # in this order
    assert release == ("scontrol", "release", job_id)
    assert update[:4] == ("scontrol", "update", f"JobId={job_id}", "Nice=50")
    assert "Priority" not in " ".join(update)  # no number written back
    assert runner.argvs.index(release) < runner.argvs.index(update)


def test_changes_take_the_value_before_the_first_change(tmp_path: Path) -> None:
    config = _config(tmp_path)
    daemon = Daemon(lambda: config, runner=_cluster())
    try:
        assert daemon.run_once().ok
        found = changes(daemon.store, None, None)
        later = changes(daemon.store, None, parse_since("2999-01-01"))
    finally:
        daemon.close(retire=False)
    assert ROLES["pending_prio"] in found
    assert found[ROLES["pending_prio"]].before["ReqNodeList"] == ""
    assert later == {}
    with pytest.raises(InputError, match="--since: not a time"):
        parse_since("last tuesday")


def test_revert_records_what_it_sent_and_a_later_revert_ignores_it(tmp_path: Path) -> None:
    config = _config(tmp_path)
    runner = _cluster()
    daemon = Daemon(lambda: config, runner=runner, clock=lambda: NOW)
    try:
        assert daemon.run_once().ok
        store = daemon.store
        found = changes(store, None, None)
        (placed,) = store.decisions_for("slurm", ROLES["pending_prio"])
        doc = json.loads(fixture_text("22.05", "squeue.json"))
        for job in doc["jobs"]:  # Slurm now shows the daemon's pin
            if str(job["job_id"]) == ROLES["pending_prio"]:
                job["required_nodes"] = placed.nodes
        runner.answer(("squeue", "--json"), json.dumps(doc))
        client = CliSlurmClient(runner=runner)
        steps = revert(client, found, dry_run=False, now=NOW)
        sent = [step for step in steps if step.sent is not None]
        assert sent, "the recorded queue has daemon changes to undo"
        assert record(store, steps, found, "slurm", NOW) == sum(len(s.sent) for s in sent)
        for step in sent:
            rows = [r for r in store.decisions_for("slurm", step.job_id) if r.action == "revert"]
            assert [row.argv for row in rows] == [list(result.argv) for result in step.sent]
            assert all(row.policy_id == "revert" and row.slurm_rc == 0 for row in rows)
            recorded = {name for row in rows for name in (row.details or {})["before"]}
            assert recorded == set(step.fields) | ({"Nice"} if "Priority" in step.fields else set())
        assert changes(store, None, None) == found  # revert's own rows are not daemon changes
    finally:
        daemon.close(retire=False)


# -- packaging -----------------------------------------------------------------------------


def test_the_packaged_config_loads_and_the_unit_runs_as_slurmuser() -> None:
    config = load_config(REPO / "packaging" / "slurm-rl.toml", None, {})
    assert config.mode == "enforce" and config.metrics_port == 9464
    unit = (REPO / "packaging" / "slurm-rl.service").read_text()
    assert "\nUser=slurm\n" in unit and "User=root" not in unit
    assert "ExecStart=/usr/bin/slurm-rl daemon --config /etc/slurm-rl/slurm-rl.toml" in unit
    assert "ExecReload=/bin/kill -HUP $MAINPID" in unit
    # numba's cache where the hardened unit may write (ProtectSystem=strict, ProtectHome)
    assert "CacheDirectory=slurm-rl\n" in unit
    assert "Environment=NUMBA_CACHE_DIR=/var/cache/slurm-rl/numba\n" in unit
    sysusers = (REPO / "packaging" / "slurm-rl.sysusers").read_text().splitlines()
    assert any(line.split()[:2] == ["u", "slurm"] for line in sysusers)


def test_explain_and_revert_on_a_missing_or_foreign_store_are_one_line(tmp_path: Path) -> None:
    import sqlite3

    conf = tmp_path / "c.toml"
    conf.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n')
    runner = CliRunner()
    missing = runner.invoke(main, ["explain", "5", "--config", str(conf)])
    assert missing.exit_code == 2 and "no store at sqlite:///" in missing.output
    assert not (tmp_path / "slurm-rl.sqlite").exists()  # a reader creates nothing
    sqlite3.connect(tmp_path / "slurm-rl.sqlite").execute("CREATE TABLE other (a)")
    for argv in (["explain", "5"], ["revert"]):
        foreign = runner.invoke(main, [*argv, "--config", str(conf)])
        assert foreign.exit_code == 2 and "cannot read the store" in foreign.output
        assert "Traceback" not in foreign.output
