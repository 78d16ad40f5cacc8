"""The daemon on the recorded 22.05 cluster: healthy cycles, bad Slurm output, store trouble,
signals, config reloads and the command line.

Only the subprocess boundary is fake (squeue/sinfo answer with the golden files, scontrol
update with success); the store is a real SQLite file and the signals are real signals.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from slurm_rl.cli.daemon import daemon_command
from slurm_rl.config import DaemonConfig, load_config
from slurm_rl.core import Cluster, ClusterSnapshot, Decision, Job, Node, Placement
from slurm_rl.daemon.guard import checked, placement_problem
from slurm_rl.daemon.runner import Daemon
from slurm_rl.errors import InputError
from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.deferral import CONF_NAME
from slurm_rl.slurm.errors import SlurmTimeoutError
from slurm_rl.slurm.proc import CommandResult
from slurm_rl.slurm.source import SlurmSource
from slurm_rl.store.models import CycleRow, DecisionRow, JobRow, OutcomeRow
from tests.slurm.fakes import FakeRunner, fixture_text, recorded_cluster

ROLES: dict[str, str] = json.loads(fixture_text("22.05", "jobs.json"))
NOW = 1795970505.0 + 60  # a minute after the recorded jobs were submitted
SQUEUE = ("squeue", "--json")
SINFO = ("sinfo", "--json")
OK = CommandResult((), 0, "", "")


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _cluster() -> FakeRunner:
    runner = recorded_cluster("22.05")
    runner.default = OK  # scontrol update succeeds
    return runner


def _config(tmp_path: Path, **values: Any) -> DaemonConfig:
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    settings: dict[str, Any] = {
        "mode": "enforce", "state_dir": tmp_path / "state", "plugin_conf_dir": etc,
        "interval_s": 0.01,
    }
    return DaemonConfig(**{**settings, **values})


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Callable[..., tuple[Daemon, FakeRunner, Clock]]]:
    made: list[Daemon] = []

    def make(runner: FakeRunner | None = None, **values: Any) -> tuple[Daemon, FakeRunner, Clock]:
        runner = runner or _cluster()
        clock = Clock()
        config = _config(tmp_path, **values)
        daemon = Daemon(lambda: config, runner=runner, clock=clock)
        made.append(daemon)
        return daemon, runner, clock

    yield make
    for daemon in made:
        daemon.close(retire=False)


def _counts(daemon: Daemon) -> dict[str, int]:
    store = daemon.store
    return {m.__tablename__: store.count(m) for m in (CycleRow, DecisionRow, JobRow, OutcomeRow)}


def _updates(runner: FakeRunner) -> list[tuple[str, ...]]:
    return [argv for argv in runner.argvs if argv[:2] == ("scontrol", "update")]


def _problems(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


# -- healthy cycles -----------------------------------------------------------------------


def test_a_cycle_applies_records_and_beats(make_daemon: Any, tmp_path: Path) -> None:
    daemon, runner, _ = make_daemon()
    result = daemon.run_once()
    assert result.ok and result.summary is not None
    assert _updates(runner), "enforce sends scontrol updates"
    store, cluster = daemon.store, "slurm"  # 22.05's JSON names no cluster
    placed = store.decisions_for(cluster, ROLES["pending_prio"])
    assert [(d.policy_id, d.action, d.rank) for d in placed] == [("fifo+best-fit", "place", 0)]
    assert placed[0].nodes and placed[0].argv and placed[0].argv[:2] == ["scontrol", "update"]
    assert placed[0].slurm_rc == 0
    # Finished jobs that ran are outcomes; the one cancelled while pending never ran.
    done = store.outcome_for(cluster, ROLES["completed"])
    failed = store.outcome_for(cluster, ROLES["failed"])
    assert done is not None and (done.state, done.exit_code, done.source) == (
        "COMPLETED", 0, "squeue")
    assert failed is not None and failed.state == "FAILED" and failed.exit_code == 3
    assert store.outcome_for(cluster, ROLES["cancelled_pending"]) is None
    assert (tmp_path / "state" / "heartbeat").read_text() == f"{int(NOW)}\n"
    plugin_conf = (tmp_path / "etc" / CONF_NAME).read_text()
    assert f"heartbeat_path = {tmp_path / 'state' / 'heartbeat'}" in plugin_conf
    assert daemon.store.count(CycleRow) == 1


def test_ranked_jobs_get_priorities_from_the_configured_floor(make_daemon: Any) -> None:
    daemon, runner, _ = make_daemon(priority_floor=250_000)
    assert daemon.run_once().ok
    sent = [a for argv in _updates(runner) for a in argv if a.startswith("Priority=")]
    assert sent and min(int(a.removeprefix("Priority=")) for a in sent) >= 250_000


def test_an_unchanged_queue_stores_a_cycle_but_no_new_decisions(make_daemon: Any) -> None:
    daemon, _, _ = make_daemon(mode="shadow")
    assert daemon.run_once().ok
    first = _counts(daemon)
    assert first["decisions"] > 0
    assert daemon.run_once().ok
    second = _counts(daemon)
    assert second["cycles"] == 2 and second["decisions"] == first["decisions"]
    assert second["outcomes"] == first["outcomes"]  # each finished job is stored once


@pytest.mark.parametrize("mode, dry_run", [("shadow", False), ("enforce", True)])
def test_shadow_and_dry_run_touch_nothing_in_slurm(
    make_daemon: Any, tmp_path: Path, mode: str, dry_run: bool
) -> None:
    daemon, runner, _ = make_daemon(mode=mode, dry_run=dry_run)
    assert daemon.run_once().ok
    assert _updates(runner) == []
    assert not (tmp_path / "state" / "heartbeat").exists()
    assert not (tmp_path / "etc" / CONF_NAME).exists()
    decision = daemon.store.decisions_for("slurm", ROLES["pending_prio"])[0]
    assert decision.action == "place" and decision.slurm_rc is None  # planned, not sent
    with daemon.store.engine.connect() as connection:
        modes = connection.execute(text("SELECT actuator_mode FROM cycles")).scalars().all()
    assert modes == ["dry-run" if dry_run else "shadow"]


# -- bad Slurm output: the cycle is skipped, the daemon and the store are fine -------------


def _truncated(runner: FakeRunner) -> str:
    text_ = fixture_text("22.05", "squeue.json")
    runner.answer(SQUEUE, text_[: len(text_) // 2])
    return "squeue --json: invalid or truncated JSON"


def _unknown_state(runner: FakeRunner) -> str:
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    doc["jobs"][0]["job_state"] = "TELEPORTING"
    runner.answer(SQUEUE, json.dumps(doc))
    return "unknown job state 'TELEPORTING'"


def _node_without_gres(runner: FakeRunner) -> str:
    doc = json.loads(fixture_text("22.05", "sinfo.json"))
    del doc["nodes"][0]["gres"]
    runner.answer(SINFO, json.dumps(doc))
    return "column 'gres': node a100-01: field missing"


def _squeue_timeout(runner: FakeRunner) -> str:
    runner.fail(SQUEUE, SlurmTimeoutError(SQUEUE, 15.0))
    return "`squeue --json` did not answer within 15 s"


def _slurmctld_down(runner: FakeRunner) -> str:
    error = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
    runner.answer(SQUEUE, "", rc=1, stderr=error)
    return "slurmctld is not reachable"


def test_one_unreadable_job_record_leaves_the_rest_scheduled(
    make_daemon: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 18 (7): one job record that could not be read skipped the whole cycle, so the
    heartbeat went stale and deferral stopped for everyone."""
    daemon, runner, clock = make_daemon()
    assert daemon.run_once().ok
    heartbeat = tmp_path / "state" / "heartbeat"
    expected = _unknown_state(runner)
    clock.now += 5
    caplog.clear()
    with caplog.at_level(logging.INFO):
        result = daemon.run_once()
        again = daemon.run_once()
    assert result.ok and again.ok
    (line,) = _problems(caplog)  # said once, not every cycle
    assert expected in line.getMessage() and "left out" in line.getMessage()
    assert heartbeat.read_text().strip() == str(int(clock.now))
    assert daemon.recorder.last is not None and daemon.recorder.last.pending > 0


@pytest.mark.parametrize(
    "break_slurm",
    [_truncated, _node_without_gres, _squeue_timeout, _slurmctld_down],
    ids=["truncated-json", "node-without-gres", "squeue-timeout",
         "slurmctld-down"],
)
def test_bad_slurm_output_skips_one_cycle_with_one_line(
    make_daemon: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    break_slurm: Callable[[FakeRunner], str],
) -> None:
    daemon, runner, clock = make_daemon()
    assert daemon.run_once().ok
    before = _counts(daemon)
    heartbeat = (tmp_path / "state" / "heartbeat").read_text()
    good = dict(runner.answers)
    expected = break_slurm(runner)
    clock.now += 5
    caplog.clear()
    with caplog.at_level(logging.INFO):
        result = daemon.run_once()
    assert not result.ok
    (line,) = _problems(caplog)
    message = line.getMessage()
    assert message.startswith("cycle skipped: ") and expected in message and "\n" not in message
    assert _counts(daemon) == before  # nothing recorded, nothing lost
    assert (tmp_path / "state" / "heartbeat").read_text() == heartbeat  # no beat when unhealthy
    runner.answers = good  # Slurm recovers: the same daemon carries on
    assert daemon.run_once().ok
    assert _counts(daemon)["cycles"] == before["cycles"] + 1


def test_unknown_extra_fields_are_ignored(make_daemon: Any) -> None:
    runner = _cluster()
    for argv, name, key in ((SQUEUE, "squeue.json", "jobs"), (SINFO, "sinfo.json", "nodes")):
        doc = json.loads(fixture_text("22.05", name))
        doc["a_field_from_the_future"] = {"x": 1}
        for record in doc[key]:
            record["brand_new_field"] = [1, "two"]
        runner.answer(argv, json.dumps(doc))
    daemon, _, _ = make_daemon(runner)
    plain, plain_runner, _ = make_daemon(state_dir=daemon.config.state_dir.parent / "plain")
    assert daemon.run_once().ok and plain.run_once().ok
    assert _updates(runner) == _updates(plain_runner) != []


def test_a_node_with_empty_gres_is_no_gpu_node(make_daemon: Any) -> None:
    runner = _cluster()
    doc = json.loads(fixture_text("22.05", "sinfo.json"))
    doc["nodes"][0]["gres"] = ""
    doc["nodes"][0]["gres_used"] = ""
    runner.answer(SINFO, json.dumps(doc))
    daemon, _, _ = make_daemon(runner)
    assert daemon.run_once().ok
    names = {n.name for n in daemon.parts.source.snapshot().cluster.nodes}
    assert doc["nodes"][0]["name"] not in names and names


# -- the placement guard ------------------------------------------------------------------


def _recorded_snapshot() -> ClusterSnapshot:
    return SlurmSource(CliSlurmClient(runner=_cluster()), clock=Clock()).snapshot()


@pytest.mark.parametrize(
    "placement, why",
    [
        (Placement(("v100-02",), (8,)), "asks for a100, v100-02 has v100"),
        (Placement(("a100-09",), (8,)), "unknown node a100-09"),
        (Placement(("a100-02", "a100-03"), (4, 4)), "shape (4, 4) is not the job's (8 GPUs)"),
    ],
)
def test_the_guard_drops_placements_slurm_would_refuse(placement: Placement, why: str) -> None:
    snapshot = _recorded_snapshot()
    typed, untyped = ROLES["pending_prio"], ROLES["pending_unlimited"]  # a100:8; --gpus=4 -N2
    good = Placement(("v100-02", "v100-03"), (2, 2))  # one GPU type (an untyped gang)
    decision = Decision("p", (typed, untyped), {typed: placement, untyped: good}, (2.0, 1.0))
    kept, refused = checked(decision, snapshot)
    assert refused == {typed: why}
    assert dict(kept.placements) == {untyped: good}
    assert (kept.ranking, kept.scores, kept.policy_id) == (decision.ranking, decision.scores, "p")


def test_the_guard_drops_moves_that_would_leave_a_running_job_stuck() -> None:
    snapshot = _recorded_snapshot()
    running = ROLES["running_gpus"]  # 3 v100 GPUs on v100-01
    bad = Placement(("v100-02",), (1,))  # the wrong GPU count: Slurm would refuse the pin
    decision = Decision("p", (), migrations={running: bad, "gone": bad})
    kept, refused = checked(decision, snapshot)
    assert refused == {running: "move: shape (1,) is not the job's (3 GPUs)"}
    assert dict(kept.migrations) == {"gone": bad}  # not running: the actuator refuses it
    assert checked(Decision("p", (), migrations={running: Placement(("a100-01",), (2,))}),
                   snapshot)[1] == {running: "move: asks for v100, a100-01 has a100"}
    good = Placement(("v100-02",), (3,))
    assert checked(Decision("p", (), migrations={running: good}), snapshot)[1] == {}


def test_the_guard_knows_each_nodes_capacity() -> None:
    cluster = Cluster("c", (Node("v1", "V100", 4),))
    problem = placement_problem(Job("1", 0.0, 8), Placement(("v1",), (8,)), cluster)
    assert problem == "8 GPUs on v1, which has 4"
    assert placement_problem(Job("2", 0.0, 4, gpu_type="v100"), Placement(("v1",), (4,)),
                             cluster) is None


def test_the_guard_keeps_an_untyped_gang_on_one_gpu_type() -> None:
    """Issue 19 (3): rl+rl placed an untyped --gpus=2 job on a100-02,v100-01 and the guard
    let it through."""
    cluster = Cluster("c", (Node("a100-02", "a100", 8), Node("v100-01", "v100", 4)))
    job = Job("9", 0.0, 2, num_nodes=2, gpus_per_node=1)
    mixed = Placement(("a100-02", "v100-01"), (1, 1))
    assert placement_problem(job, mixed, cluster) == (
        "an untyped request on 2 GPU types (a100, v100); allow_mixed_gpu_types is off")
    assert placement_problem(job, mixed, cluster, allow_mixed_gpu_types=True) is None
    snapshot = ClusterSnapshot(0.0, cluster, (8, 4), (job,), (), ())
    kept, refused = checked(Decision("p", ("9",), {"9": mixed}), snapshot)
    assert dict(kept.placements) == {} and "2 GPU types" in refused["9"]


def test_under_dispatch_the_guard_holds_a_job_whose_placement_it_refuses() -> None:
    """Released without nodes, Slurm would start the job by itself on whatever frees up
    first and race the pins of the jobs the policy did start (docs/slurm-emulation.md)."""
    cluster = Cluster("c", (Node("a100-02", "a100", 8), Node("v100-01", "v100", 4)))
    gang = Job("9", 0.0, 2, num_nodes=2, gpus_per_node=1)  # untyped: one GPU type only
    other, brought = Job("8", 0.0, 1), Job("7", 0.0, 2, num_nodes=2, gpus_per_node=1)
    snapshot = ClusterSnapshot(0.0, cluster, (8, 4),
                               (gang, other, brought), (), ())
    mixed = Placement(("a100-02", "v100-01"), (1, 1))
    decision = Decision("p", ("7", "9", "8"),
                        {"9": mixed, "8": Placement(("a100-02",), (1,)), "7": mixed},
                        (3.0, 2.0, 1.0), holds=("6",), exclusions={"9": ("v100-01",)},
                        forward=("7",))
    released, _ = checked(decision, snapshot)
    assert released.ranking == ("7", "9", "8") and released.holds == ("6",)
    held, refused = checked(decision, snapshot, hold_refused=True)
    assert set(refused) == {"9", "7"}
    assert (held.ranking, held.scores) == (("7", "8"), (3.0, 1.0))  # 7: fairness promised it
    assert held.holds == ("9", "6") and dict(held.exclusions) == {}
    assert held.promoted == frozenset({"7", "8"})


def test_the_daemon_guard_holds_refused_jobs_only_under_dispatch(make_daemon: Any) -> None:
    plain, _, _ = make_daemon()
    assert plain.parts.scheduler.hold_refused is False
    dispatching, _, _ = make_daemon(dispatch=True)
    assert dispatching.parts.scheduler.hold_refused is True


def test_best_fit_places_a_typed_job_on_its_gpu_type(
    make_daemon: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The fullest node with room is v100-01 (1 GPU free): an a100 request must skip it.
    runner = _cluster()
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    for job in doc["jobs"]:
        if str(job["job_id"]) == ROLES["user_begin"]:
            job["tres_per_node"] = "gres:gpu:a100:1"
            # deferred by the plugin, not by its user: the scheduler's to place (waiting.py)
            job["admin_comment"] = f"slurm-rl:deferred:{job['eligible_time']}"
    runner.answer(SQUEUE, json.dumps(doc))
    daemon, _, _ = make_daemon(runner)
    with caplog.at_level(logging.INFO):
        assert daemon.run_once().ok
    assert [r.getMessage() for r in _problems(caplog)] == []
    row = daemon.store.decisions_for("slurm", ROLES["user_begin"])[0]
    assert row.nodes is not None and row.nodes.startswith("a100-")


# -- store trouble --------------------------------------------------------------------------


def test_outcomes_survive_a_store_that_cannot_be_written(
    make_daemon: Any, caplog: pytest.LogCaptureFixture
) -> None:
    daemon, _, _ = make_daemon()
    engine = daemon.store.engine
    with engine.begin() as connection:
        connection.execute(text("ALTER TABLE outcomes RENAME TO outcomes_away"))
    with caplog.at_level(logging.INFO):
        result = daemon.run_once()
    assert not result.ok
    (line,) = _problems(caplog)
    assert line.getMessage().startswith("outcomes not stored (2 kept for the next cycle)")
    assert daemon.store.count(CycleRow) == 1  # the cycle itself was stored
    with engine.begin() as connection:
        connection.execute(text("ALTER TABLE outcomes_away RENAME TO outcomes"))
    assert daemon.run_once().ok  # squeue no longer reports them: they come from the buffer
    assert daemon.store.outcome_for("slurm", ROLES["completed"]) is not None
    assert daemon.store.outcome_for("slurm", ROLES["failed"]) is not None


# -- signals --------------------------------------------------------------------------------


class SignalOnCall(FakeRunner):
    """The recorded cluster, sending this process a signal when squeue runs in cycle N."""

    def __init__(self, signals: dict[int, signal.Signals], hook: Callable[[int], None]) -> None:
        super().__init__(dict(_cluster().answers), OK)
        self.signals = signals
        self.hook = hook
        self.cycle = 0

    def __call__(self, argv: Any, timeout_s: float) -> CommandResult:
        if tuple(argv) == SQUEUE:
            self.cycle += 1
            self.hook(self.cycle)
            if self.cycle in self.signals:
                os.kill(os.getpid(), self.signals[self.cycle])
        return super().__call__(argv, timeout_s)


def test_sigterm_finishes_the_cycle_then_exits_0(tmp_path: Path) -> None:
    runner = SignalOnCall({2: signal.SIGTERM}, lambda cycle: None)
    config = _config(tmp_path)
    daemon = Daemon(lambda: config, runner=runner, clock=Clock())
    before = signal.getsignal(signal.SIGTERM)
    assert daemon.run() == 0
    assert runner.cycle == 2
    assert daemon.store.count(CycleRow) == 2  # the interrupted cycle completed
    assert not config.heartbeat.exists()  # retired: new jobs are not deferred any more
    assert signal.getsignal(signal.SIGTERM) is before


def test_sighup_reloads_config_and_policy_at_the_next_cycle(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "slurm-rl.toml"
    base = f'state_dir = "{tmp_path / "state"}"\ninterval_s = 0.01\nmode = "enforce"\n'
    path.write_text(f'[daemon]\npolicy = "fifo+best-fit"\n{base}')

    def edit(cycle: int) -> None:
        if cycle == 1:
            path.write_text(f'[daemon]\npolicy = "multifactor+first-fit"\n{base}')
        if cycle == 2:
            path.write_text("[daemon\nnot toml")

    signals = {1: signal.SIGHUP, 2: signal.SIGHUP, 3: signal.SIGTERM}
    daemon = Daemon(lambda: load_config(path), runner=SignalOnCall(signals, edit), clock=Clock())
    with caplog.at_level(logging.INFO, logger="slurm_rl.daemon"):
        assert daemon.run() == 0
    with daemon.store.engine.connect() as connection:
        policies = connection.execute(text("SELECT policy_id FROM cycles ORDER BY id")).scalars()
        assert list(policies) == ["fifo+best-fit", "multifactor+first-fit", "multifactor+first-fit"]
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("reloaded config: policy multifactor+first-fit") for m in messages)
    assert any(m.startswith("reload failed, keeping the running config") for m in messages)


def test_a_reload_to_shadow_retires_the_heartbeat(tmp_path: Path) -> None:
    config = _config(tmp_path)
    configs = iter([config, config.model_copy(update={"mode": "shadow"})])
    daemon = Daemon(lambda: next(configs), runner=_cluster(), clock=Clock())
    assert daemon.run_once().ok and config.heartbeat.exists()
    assert daemon.reload()
    assert not config.heartbeat.exists()
    daemon.close()


# -- config ---------------------------------------------------------------------------------


def test_config_precedence_defaults_file_command_line(tmp_path: Path) -> None:
    path = tmp_path / "site.toml"
    path.write_text('[daemon]\npolicy = "qssf+best-fit"\nmode = "advise"\n'
                    'partitions = ["gpu"]\n[other]\nignored = 1\n')
    config = load_config(path, {"mode": "enforce", "interval_s": None})
    assert (config.policy, config.mode, config.partitions) == ("qssf+best-fit", "enforce", ("gpu",))
    assert config.interval_s == DaemonConfig().interval_s
    assert config.store == f"sqlite:///{config.state_dir / 'slurm-rl.sqlite'}"


@pytest.mark.parametrize(
    "body, expected",
    [
        ('[daemon]\nmood = "calm"\n', "[daemon] mood: Extra inputs are not permitted"),
        ('[daemon]\nmode = "loud"\n', "[daemon] mode: Input should be 'shadow', 'advise'"),
        ("[daemon]\ninterval_s = 20\n", "heartbeat_max_age_s (30) must be at least twice"),
        ("[daemon\n", "not valid TOML"),
        ('[daemon]\npolicy = "sjf-oracle+rwgp"\n',
         "[daemon] policy: sjf-oracle orders jobs by their true run times, which only a trace "
         "has (live it would be FIFO)"),
    ],
)
def test_a_bad_config_is_one_line_naming_file_and_key(
    tmp_path: Path, body: str, expected: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(InputError) as error:
        load_config(path)
    assert str(error.value).startswith(str(path)) and expected in str(error.value)
    assert "\n" not in str(error.value)


# -- the command line -----------------------------------------------------------------------


def test_cli_once_without_a_reachable_slurm_exits_1_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Real Slurm commands with a slurm.conf that does not exist: squeue retries for a minute
    # (or is not installed at all); either way the one cycle is skipped.
    path = tmp_path / "slurm-rl.toml"
    path.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\nslurm_conf = "{tmp_path}/none.conf"\n'
                    "slurm_timeout_s = 1\n")
    with caplog.at_level(logging.INFO):
        result = CliRunner().invoke(daemon_command, ["--config", str(path), "--once"])
    assert result.exit_code == 1, result.output
    (line,) = _problems(caplog)
    # The first command of a cycle is `sinfo --version` (the JSON layout: slurm/layouts.py).
    assert line.getMessage().startswith("cycle skipped: `sinfo --version` ")
    assert (tmp_path / "slurm-rl.sqlite").exists()


def test_cli_refuses_an_unknown_policy_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "slurm-rl.toml"
    path.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n')
    args = ["--config", str(path), "--policy", "fifo+nowhere", "--once"]
    result = CliRunner().invoke(daemon_command, args)
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: command line: [daemon] policy: unknown placement policy 'nowhere'; known: "
        "best-fit, cheapest-gpu, fastest-gpu, first-fit, random, rl, rwgp"
    ]
    assert not (tmp_path / "state").exists()  # nothing is created for a config that fails


def test_cli_reports_a_store_it_cannot_open_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "slurm-rl.toml"
    path.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n')
    store = f"sqlite:///{tmp_path}/missing/dir/s.sqlite"
    result = CliRunner().invoke(daemon_command, ["--config", str(path), "--store", store])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"Error: cannot open the store {store}: (sqlite3.OperationalError)")


def test_a_placed_job_slurm_has_not_started_yet_is_not_stored_again() -> None:
    from slurm_rl.daemon.recorder import _same_decision

    argv = ("scontrol", "update", "JobId=7", "ReqNodeList=a100-1")
    placed = ("fifo+best-fit", "place", argv, 0, None, ("a100-1",))
    waiting = ("fifo+best-fit", "unchanged", None, None, None, ("a100-1",))
    assert _same_decision(placed, waiting)  # Slurm holds the pin; it just has not started it
    assert _same_decision(placed, placed)
    assert not _same_decision(placed, waiting[:-1] + (("a100-2",),))  # other nodes: new row
    assert not _same_decision(placed, ("multifactor+first-fit",) + waiting[1:])  # new policy
    assert not _same_decision(None, waiting)  # first decision for the job


class _AlwaysMoving:
    """The configured scheduler, plus the same move every cycle."""

    def __init__(self, inner: Any, job_id: str, to: Placement) -> None:
        self.inner, self.job_id, self.to = inner, job_id, to

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        decision: Decision = self.inner.decide(snapshot)
        return dataclasses.replace(decision, migrations={self.job_id: self.to})


def test_a_refused_move_asked_for_every_cycle_is_stored_once(make_daemon: Any) -> None:
    runner = _cluster()
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    for job in doc["jobs"]:
        if str(job["job_id"]) == ROLES["running_gpus"]:  # one node (v100-01), opted in
            job.update(comment="slurm-rl:checkpoint", requeue=True, excluded_nodes="a100-02")
    runner.answer(SQUEUE, json.dumps(doc))
    daemon, _, clock = make_daemon(runner, migrate=True)
    moving = _AlwaysMoving(daemon.parts.scheduler, ROLES["running_gpus"],
                           Placement(("a100-02",), (3,)))
    daemon.parts = dataclasses.replace(daemon.parts, scheduler=moving)
    for _ in range(3):
        assert daemon.run_once().ok
        clock.now += 10
    rows = daemon.store.decisions_for("slurm", ROLES["running_gpus"])
    assert [(r.action, (r.details or {}).get("note")) for r in rows] == [
        ("not_movable", "not moved: its ExcNodeList names a100-02")]
    assert not [argv for argv in runner.argvs if argv[:2] == ("scontrol", "requeue")]
