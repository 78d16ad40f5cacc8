"""The retrain schedule (APScheduler jobs held in memory, never unpickled from the store)
and the command lines' bad-input behaviour: one line, exit code 2, nothing changed."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from slurm_rl.cli.main import main
from slurm_rl.cli.retrain import command_settings, retrain_command
from slurm_rl.config import DaemonConfig
from slurm_rl.retrain.live_world import LiveWorld
from slurm_rl.retrain.schedule import (
    RETRAIN_JOB,
    STORE_ENV,
    retrain_argv,
    retrain_env,
    start_schedule,
)
from slurm_rl.slurm.priority import PriorityLimits
from slurm_rl.store import migrate
from slurm_rl.store.repository import Store, make_engine

JOB_TABLE = "apscheduler_jobs"  # APScheduler's SQLAlchemy job store, revisions 0003 to 0004


def test_the_schedule_is_coalesced_one_at_a_time_and_follows_the_config(tmp_path: Path) -> None:
    config = DaemonConfig(state_dir=tmp_path, retrain_every_h=6.0,
                          retrain_misfire_grace_s=900.0, retention_days=30.0)
    schedule = start_schedule(config)
    assert schedule is not None
    try:
        job = schedule.scheduler.get_job(RETRAIN_JOB)
        assert job is not None and job.coalesce and job.max_instances == 1
        assert job.misfire_grace_time == 900
        assert job.kwargs["argv"] == retrain_argv(config)
        assert schedule.scheduler.get_job("slurm-rl-retention") is not None
    finally:
        schedule.shutdown()
    schedule = start_schedule(config.model_copy(update={"retention_days": 0.0}))
    assert schedule is not None
    try:
        assert schedule.scheduler.get_job("slurm-rl-retention") is None
    finally:
        schedule.shutdown()
    assert start_schedule(DaemonConfig(state_dir=tmp_path)) is None  # off


class _Planted:
    """What an attacker with write access to the store put in APScheduler's table: a pickle
    that runs a command when it is loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, ...]]:
        return (Path.touch, (str(self.marker),))


def test_a_row_planted_in_the_store_runs_nothing(tmp_path: Path) -> None:
    """Issue 18 (1): the schedule's job store unpickled ``apscheduler_jobs.job_state``; a
    planted row ran code as the daemon when the schedule started. The store has no such
    table any more, and a planted one is never read."""
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    engine = make_engine(url)
    migrate.upgrade(engine, "0003_apscheduler_jobs")
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Planted(marker))
    for job_id in (RETRAIN_JOB, "slurm-rl-retention"):
        with engine.begin() as connection:
            connection.execute(sa.text(f"INSERT INTO {JOB_TABLE} VALUES (:id, 0, :state)"),
                               {"id": job_id, "state": payload})
    migrate.upgrade(engine)
    assert not sa.inspect(engine).has_table(JOB_TABLE)  # revision 0004 drops it
    with engine.begin() as connection:  # planted again after the upgrade
        connection.execute(sa.text(f"CREATE TABLE {JOB_TABLE} (id VARCHAR(191) PRIMARY KEY, "
                                   "next_run_time FLOAT, job_state BLOB NOT NULL)"))
        connection.execute(sa.text(f"INSERT INTO {JOB_TABLE} VALUES (:id, 0, :state)"),
                           {"id": RETRAIN_JOB, "state": payload})
    config = DaemonConfig(state_dir=tmp_path, store_url=url, retrain_every_h=6.0,
                          retention_days=30.0)
    schedule = start_schedule(config)
    assert schedule is not None
    try:
        assert {job.id for job in schedule.scheduler.get_jobs()} == \
            {RETRAIN_JOB, "slurm-rl-retention"}
    finally:
        schedule.shutdown()
    assert not marker.exists()
    engine.dispose()


def test_no_module_unpickles(tmp_path: Path) -> None:
    """No pickle and no APScheduler SQLAlchemy job store anywhere in the package."""
    package = Path(__file__).resolve().parents[2] / "slurm_rl"
    offenders = [str(path.relative_to(package)) for path in package.rglob("*.py")
                 if any(word in path.read_text() for word in
                        ("import pickle", "SQLAlchemyJobStore", "pickle.load",
                         "dill", "cloudpickle", "shelve", "jsonpickle"))]
    assert offenders == []


def test_the_store_password_is_not_on_the_retrain_command_line(tmp_path: Path) -> None:
    """Issue 18 (4): the child's argv is world-readable in /proc; its store comes by its
    environment."""
    url = "postgresql+psycopg://slurmrl:s3cret@db.example/slurmrl"
    config = DaemonConfig(state_dir=tmp_path, store_url=url, retrain_every_h=1.0)
    assert not any("s3cret" in arg for arg in retrain_argv(config))
    assert retrain_env(config)[STORE_ENV] == url


def test_the_scheduled_command_line_is_one_the_command_accepts(tmp_path: Path) -> None:
    config = DaemonConfig(state_dir=tmp_path, cluster_name="c", retrain_every_h=1.0,
                          retrain_base_bundle=tmp_path)
    argv = retrain_argv(config)
    assert argv[1:3] == ["-m", "slurm_rl.cli.retrain"]
    with pytest.MonkeyPatch.context() as env:
        env.setenv(STORE_ENV, config.store)
        context = retrain_command.make_context("retrain", argv[3:])
    assert context.params["store_url"] == config.store
    assert context.params["base_bundle"] == tmp_path


@pytest.mark.parametrize("dispatch", [True, False])
def test_a_scheduled_retrain_fine_tunes_and_judges_in_the_daemon_s_world(
        tmp_path: Path, dispatch: bool) -> None:
    """The candidate is trained and gated as the daemon runs: its dispatch (episodes and gate
    replays where only the policy starts jobs), its hold cap and its ranking rules, passed on
    the scheduled command line (which reads no site file)."""
    config = DaemonConfig(state_dir=tmp_path, cluster_name="c", mode="enforce",
                          dispatch=dispatch, defer_cap_s=7200.0, fairness_max_wait_ratio=4.0,
                          fairness_window_s=1800.0, fairness_min_wait_s=120.0,
                          nice_per_rank=50, interval_s=7.0, defer_window_s=12,
                          allow_mixed_gpu_types=dispatch, priority_tolerance_ranks=5,
                          priority_updates_per_job_hour=3, priority_updates_per_cycle=50,
                          priority_floor=5000, migrate=dispatch, max_migrations_per_cycle=4)
    argv = retrain_argv(config)
    with pytest.MonkeyPatch.context() as env:
        env.setenv(STORE_ENV, config.store)
        # the daemon's own --mode enforce is not in the environment the child inherits
        env.setenv("SLURM_RL_MODE", "advise")
        params = retrain_command.make_context("retrain", argv[3:]).params
        child, settings = command_settings(params.pop("config_path"),
                                           params.pop("store_url"), params)
    assert child.ranking_rules == config.ranking_rules and child.dispatch is dispatch
    world = settings.gate.world
    assert world == settings.finetune.world and world.rules == config.ranking_rules
    assert (world.hold_cap_s, world.cycle_s, world.defer_window_s) == (7200.0, 7.0, 12.0)
    assert world.one_gpu_type is not dispatch
    # the actuator's limits on priority changes and on moves, which the site sets too
    assert world == LiveWorld.of(config)
    assert (world.priority_limits, world.priority_floor) == (PriorityLimits(5, 3, 50), 5000)
    assert world.migrations_per_cycle == (4 if dispatch else 0)


def _one_error_line(args: list[str]) -> str:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    Store(url)
    assert "give --store URL or --config FILE" in _one_error_line(["retrain"])
    line = _one_error_line(["retrain", "--store", url, "--candidate", str(tmp_path / "nope")])
    assert "--candidate: no such bundle directory" in line
    line = _one_error_line(["export", "--store", url, "--since", "yesterday-ish",
                            "--output", str(tmp_path / "x")])
    assert "--since: not a time: 'yesterday-ish'" in line
    line = _one_error_line(["export", "--store", url, "--since", "1d", "--tables", "cycles,foo",
                            "--output", str(tmp_path / "x")])
    assert "--tables: unknown foo" in line
    assert "nothing to roll back" in _one_error_line(["models", "rollback", "--store", url])
    bad = tmp_path / "bad.toml"
    bad.write_text("[daemon]\nretrain_margin = 2\n")
    line = _one_error_line(["retrain", "--config", str(bad)])
    assert "bad.toml" in line and "retrain_margin" in line


def test_an_empty_store_retrain_exits_0_with_the_skip_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    Store(url)
    result = CliRunner().invoke(main, ["retrain", "--store", url, "--cache-dir",
                                       str(tmp_path / "models")])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == (
        "retrain skipped: no finished jobs the daemon scheduled in the last 7 days; "
        "the active policy stays")


def test_the_store_commands_find_the_site_config_as_the_daemon_does(tmp_path: Path) -> None:
    """Without --config or --store, retrain, models and export read $SLURM_RL_CONFIG (else
    /etc/slurm-rl/slurm-rl.toml) like the daemon: an admin's shell acts on its store."""
    url = f"sqlite:///{tmp_path / 'site.sqlite'}"
    Store(url)
    site = tmp_path / "slurm-rl.toml"
    site.write_text(f'[daemon]\nstore_url = "{url}"\nretrain_window_days = 2.5\n'
                    f'state_dir = "{tmp_path}"\n')
    env = {"SLURM_RL_CONFIG": str(site)}
    listed = CliRunner().invoke(main, ["models", "list"], env=env)
    assert listed.exit_code == 0 and "no model versions" in listed.output, listed.output
    retrained = CliRunner().invoke(main, ["retrain"], env=env)
    assert retrained.exit_code == 0, retrained.output
    assert "in the last 2.5 days" in retrained.output  # the site's retrain_window_days
    exported = CliRunner().invoke(main, ["export", "--since", "1d", "--output",
                                         str(tmp_path / "out")], env=env)
    assert exported.exit_code == 0, exported.output
    assert (tmp_path / "out" / "cycles.csv").is_file()
    # --store alone reads no file: the daemon's scheduled retrain passes its own settings, and
    # a site file this user may not read (or a broken one) is not in the way.
    broken = {"SLURM_RL_CONFIG": str(tmp_path / "unreadable.toml")}
    listed = CliRunner().invoke(main, ["models", "list", "--store", url], env=broken)
    assert listed.exit_code == 0 and "no model versions" in listed.output, listed.output


def test_parquet_export_needs_pyarrow_else_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    Store(url)
    args = ["export", "--store", url, "--since", "1d", "--format", "parquet",
            "--output", str(tmp_path / "out")]
    try:
        import pyarrow.parquet as pq
    except ImportError:
        assert "--format parquet needs pyarrow" in _one_error_line(args)
        return
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert pq.read_table(tmp_path / "out" / "cycles.parquet").num_rows == 0


def test_a_store_whose_schedule_table_apscheduler_made_upgrades(tmp_path: Path) -> None:
    """Stores from before revision 0003 may have the table APScheduler created itself; the
    upgrade drops it with its rows, and a downgrade below 0003 leaves none."""
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    engine = make_engine(url)
    migrate.upgrade(engine, "0002_retrain_registry")
    with engine.begin() as connection:
        connection.execute(sa.text(f"CREATE TABLE {JOB_TABLE} (id VARCHAR(191) PRIMARY KEY, "
                                   "next_run_time FLOAT, job_state BLOB NOT NULL)"))
        connection.execute(sa.text(f"INSERT INTO {JOB_TABLE} VALUES ('old', NULL, x'00')"))
    migrate.upgrade(engine)
    assert not sa.inspect(engine).has_table(JOB_TABLE)
    migrate.downgrade(engine, "0003_apscheduler_jobs")
    assert sa.inspect(engine).has_table(JOB_TABLE)
    migrate.downgrade(engine, "0002_retrain_registry")
    assert not sa.inspect(engine).has_table(JOB_TABLE)
    engine.dispose()


def test_a_sigterm_ends_the_retrain_failed_with_its_own_row_marked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon stopping (or systemd) sends the retrain process SIGTERM: its default
    action killed it with its retrain_runs row left running, whose lease blocked the next
    retrains for hours. The run now ends as a failure it records itself."""
    import os
    import signal

    import slurm_rl.retrain.run as run
    from slurm_rl.store.registry_models import RetrainRunRow

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    Store(url)

    def terminated(*_args: object, **_kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the window is read

    monkeypatch.setattr(run, "load_window", terminated)
    before = signal.getsignal(signal.SIGTERM)
    try:
        result = CliRunner().invoke(main, ["retrain", "--store", url, "--cache-dir",
                                           str(tmp_path / "models")])
    finally:
        signal.signal(signal.SIGTERM, before)
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == (
        "retrain failed: stopped by SIGTERM; the active policy stays")
    with make_engine(url).connect() as connection:
        rows = connection.execute(sa.select(RetrainRunRow.status, RetrainRunRow.message)).all()
    assert [tuple(row) for row in rows] == [
        ("failed", "retrain failed: stopped by SIGTERM; the active policy stays")]
