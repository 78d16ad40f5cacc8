"""``Decision.migrations`` against a real Slurm: a running job that opted in (``--requeue``,
``--comment=slurm-rl:checkpoint``) is requeued and restarts on the chosen node within seconds
(not after the two minutes Slurm's requeue would wait); a job that did not opt in is never
touched; shadow mode and a daemon without ``migrate`` send nothing; the daemon stores the move.
The jobs are pinned to their first node as the daemon pins one, so the pin is slurm-rl's own
(a user's ``--nodelist`` is never moved: tests/slurm/test_nodelist_live.py)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_rl.core import ClusterSnapshot, Decision, Placement
from slurm_rl.loop import DecisionMaker
from slurm_rl.slurm.actuator import ActuatorConfig, Mode, SlurmActuator
from slurm_rl.slurm.source import SlurmSource
from slurm_rl.store.repository import Store
from tests.slurm.live import LiveCluster
from tests.slurm.test_daemon_live import CLUSTER, _daemon
from tests.slurm.test_live import SCHED_SLACK_S, _nodes

pytestmark = pytest.mark.slurm

OPT_IN = ("--requeue", "--comment=slurm-rl:checkpoint")


def _submit(live: LiveCluster, *options: str) -> str:
    """A one-GPU job of any type (deferred by the plugin). Its script notes in the jobs
    directory each start (Slurm's restart count, the node) and a SIGTERM."""
    log = f"{live.jobs_dir}/starts.$SLURM_JOB_ID"
    script = (f"trap 'echo term >> {log}; exit 0' TERM; "
              f"echo start ${{SLURM_RESTART_COUNT:-0}} $SLURMD_NODENAME >> {log}; "
              "sleep 300 & wait")
    return live.sbatch("alice", "--gres=gpu:1", "-t", "10", *options, script=script)


def _running_on(live: LiveCluster, source: SlurmSource, node: str, *options: str) -> str:
    """A job of :func:`_submit`, started at once on ``node``: pinned there by an actuator on
    ``source``, whose ledger then holds the pin as slurm-rl's own."""
    job_id = _submit(live, *options)
    source.snapshot()
    placing = SlurmActuator(live.client, ActuatorConfig(mode=Mode.ENFORCE), pins=source.pins)
    report = placing.apply(Decision("test", (job_id,), {job_id: Placement((node,), (1,))}))
    assert all(o.sent and o.ok for o in report.outcomes), report.outcomes
    live.wait_state(job_id, "RUNNING", timeout_s=SCHED_SLACK_S)
    return job_id


def test_an_opted_in_job_moves_to_the_chosen_node_and_no_other_job_is_touched(
    live: LiveCluster,
) -> None:
    source = SlurmSource(live.client)
    a100, v100 = _nodes(source.snapshot(), "a100"), _nodes(source.snapshot(), "v100")
    mover = _running_on(live, source, v100[0], *OPT_IN)
    stays = _running_on(live, source, v100[0], "--requeue")  # requeueable, saves no checkpoint
    running = {r.job.job_id: r.job for r in source.snapshot().running}
    assert running[mover].checkpointable and not running[stays].checkpointable
    moves = {mover: Placement((a100[0],), (1,)), stays: Placement((a100[1],), (1,))}
    decision = Decision("test", (), migrations=moves)

    def actuator(mode: Mode, migrate: bool = True) -> SlurmActuator:
        # A generous wait for the requeued job to leave COMPLETING (slow machines), so that
        # this one apply releases it rather than leaving it to a later cycle.
        config = ActuatorConfig(mode=mode, migrate=migrate, restart_wait_s=15.0)
        return SlurmActuator(live.client, config, pins=source.pins)

    assert actuator(Mode.ENFORCE, migrate=False).apply(decision).outcomes == ()
    shadow = {o.job_id: o for o in actuator(Mode.SHADOW).apply(decision).outcomes}
    assert shadow[mover].kind == "migrate" and not shadow[mover].sent
    assert live.job(mover).raw["Restarts"] == "0"

    report = {o.job_id: o for o in actuator(Mode.ENFORCE).apply(decision).outcomes}
    assert report[mover].kind == "migrate" and report[mover].sent and report[mover].ok
    assert report[mover].argv == ("scontrol", "requeue", mover)
    assert "the pin failed" not in report[mover].note, report[mover].note
    assert "released on a later cycle" not in report[mover].note, report[mover].note
    assert (report[stays].kind, report[stays].sent) == ("not_movable", False)
    moved = live.wait_state(mover, "RUNNING", timeout_s=SCHED_SLACK_S)
    assert moved.nodes == (a100[0],) and moved.raw["Restarts"] == "1"
    # The script got SIGTERM at the requeue, then ran again from the top on the new node.
    # Read where the jobs run (the host, or the compose cluster's shared volume).
    starts = f"{live.jobs_dir}/starts.{mover}"
    expected = f"start 0 {v100[0]}\nterm\nstart 1 {a100[0]}\n"
    live.wait_for(lambda: live.run("cat", starts).stdout == expected,
                  "the restart's own start line", timeout_s=SCHED_SLACK_S)
    untouched = live.job(stays)
    assert untouched.state == "RUNNING" and untouched.nodes == (v100[0],)
    assert untouched.raw["Restarts"] == "0"


def test_a_move_onto_a_node_slurm_filled_after_the_snapshot_is_refused(
    live: LiveCluster,
) -> None:
    """The decision's snapshot shows the target free; by the time of the move Slurm runs
    another job on all of its GPUs. The actuator reads the nodes again and leaves the job
    running where it is (requeued, it would lose its work and then wait)."""
    source = SlurmSource(live.client)
    snapshot = source.snapshot()
    a100, v100 = _nodes(snapshot, "a100"), _nodes(snapshot, "v100")
    mover = _running_on(live, source, v100[0], *OPT_IN)
    decided = source.state()  # what the decision was made on: a100[0] free
    gpus = next(n.gpus for n in snapshot.cluster.nodes if n.name == a100[0])
    filler = live.sbatch("bob", f"--gres=gpu:{gpus}", "-t", "10")
    source.snapshot()
    placing = SlurmActuator(live.client, ActuatorConfig(mode=Mode.ENFORCE), pins=source.pins)
    placing.apply(Decision("test", (filler,), {filler: Placement((a100[0],), (gpus,))}))
    live.wait_state(filler, "RUNNING", timeout_s=SCHED_SLACK_S)

    config = ActuatorConfig(mode=Mode.ENFORCE, migrate=True, restart_wait_s=15.0)
    actuator = SlurmActuator(live.client, config, pins=source.pins)
    decision = Decision("test", (), migrations={mover: Placement((a100[0],), (1,))})
    (refused,) = actuator.apply(decision, decided).outcomes
    assert (refused.job_id, refused.kind, refused.sent) == (mover, "target_busy", False)
    assert refused.note == f"not moved: {a100[0]} has 0 GPUs free now, the move needs 1"
    kept = live.job(mover)
    assert kept.state == "RUNNING" and kept.nodes == (v100[0],) and kept.raw["Restarts"] == "0"


@dataclass
class _Placing:
    """Pins ``job`` on ``to`` while it is pending (what the daemon's policy may decide)."""

    job: str
    to: Placement

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        if self.job not in {job.job_id for job in snapshot.pending}:
            return Decision("test", ())
        return Decision("test", (self.job,), {self.job: self.to})


@dataclass
class _Moving:
    """The daemon's policy, plus one move (what RWGP decides after four hours on a slow
    node, which a test cannot wait for)."""

    inner: DecisionMaker
    job: str
    to: Placement

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        decision = self.inner.decide(snapshot)
        return dataclasses.replace(decision, migrations={self.job: self.to})


def test_the_daemon_moves_only_with_migrate_on_and_stores_the_move(
    live: LiveCluster, tmp_path: Path
) -> None:
    source = SlurmSource(live.client)
    a100, v100 = _nodes(source.snapshot(), "a100"), _nodes(source.snapshot(), "v100")
    mover = _submit(live, *OPT_IN)
    # A daemon run on the same store places it: later runs recall that pin as their own.
    placing = _daemon(live, tmp_path, policy="fifo+best-fit")
    placing.parts = dataclasses.replace(
        placing.parts, scheduler=_Placing(mover, Placement((v100[-1],), (1,))))
    try:
        assert placing.run_once().ok
    finally:
        placing.close(retire=False)
    started = live.wait_state(mover, "RUNNING", timeout_s=SCHED_SLACK_S).start_time
    assert started is not None
    # Slurm keeps whole seconds: a restart within the first start's second would show the
    # same start time (CI saw it), so the move is sent once that second is over.
    time.sleep(max(0.0, started + 1.2 - time.time()))
    to = Placement((a100[-1],), (1,))
    for migrate in (False, True):
        daemon = _daemon(live, tmp_path, policy="fifo+best-fit", migrate=migrate)
        daemon.parts = dataclasses.replace(
            daemon.parts, scheduler=_Moving(daemon.parts.scheduler, mover, to))
        try:
            assert daemon.run_once().ok
        finally:
            daemon.close(retire=False)
        if not migrate:
            rows = Store(daemon.config.store).decisions_for(CLUSTER, mover)
            assert [r.action for r in rows] == ["place"]
            assert live.job(mover).raw["Restarts"] == "0"
    placed, row = Store(daemon.config.store).decisions_for(CLUSTER, mover)
    assert (placed.action, placed.slurm_rc, placed.nodes) == ("place", 0, v100[-1])
    assert (row.action, row.slurm_rc, row.nodes) == ("migrate", 0, a100[-1])
    assert row.argv == ["scontrol", "requeue", mover]
    moved = live.wait_state(mover, "RUNNING", timeout_s=SCHED_SLACK_S)
    assert moved.nodes == (a100[-1],) and moved.raw["Restarts"] == "1"
    # the row keeps the run the move ended: Slurm's start time is now the restart's
    assert row.details is not None
    assert row.details["moved_from"]["nodes"] == [v100[-1]]
    assert row.details["moved_from"]["start_time"] == started
    assert moved.start_time is not None and moved.start_time > started


def test_a_move_the_jobs_constraint_or_exclusion_forbids_is_refused(live: LiveCluster) -> None:
    """Sent anyway, Slurm 22.05.8 would keep the requeued job pending with BadConstraints for
    good (measured by hand): the actuator refuses, and the job keeps running where it is."""
    source = SlurmSource(live.client)
    a100, v100 = _nodes(source.snapshot(), "a100"), _nodes(source.snapshot(), "v100")
    constrained = _running_on(live, source, v100[0], *OPT_IN, "--constraint=v100")
    excluding = _running_on(live, source, v100[0], *OPT_IN, f"--exclude={a100[0]}")
    moves = {job_id: Placement((a100[0],), (1,)) for job_id in (constrained, excluding)}
    actuator = SlurmActuator(live.client, ActuatorConfig(mode=Mode.ENFORCE, migrate=True),
                             pins=source.pins)
    source.snapshot()
    report = {o.job_id: o for o in actuator.apply(Decision("test", (), migrations=moves)).outcomes}
    assert report[constrained].kind == report[excluding].kind == "not_movable"
    assert "--constraint=v100 does not hold" in report[constrained].note
    assert f"ExcNodeList names {a100[0]}" in report[excluding].note
    for job_id in moves:
        job = live.job(job_id)
        assert job.state == "RUNNING" and job.raw["Restarts"] == "0"
