"""``Decision.exclusions`` against a real Slurm: ``ExcNodeList`` steers where Slurm starts a
released job, a user's own ``--exclude`` is left alone, a later pin clears the actuator's
exclusion in the same update (also after a daemon restart, from its store), and revert
restores the list from before."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_rl.core import ClusterSnapshot, Decision, Placement
from slurm_rl.loop import DecisionMaker
from slurm_rl.ops.revert import Change, revert
from slurm_rl.slurm.actuator import ActuatorConfig, Mode, SlurmActuator
from slurm_rl.slurm.source import SlurmSource
from slurm_rl.store.repository import Store
from tests.slurm.live import LiveCluster
from tests.slurm.test_daemon_live import CLUSTER, _daemon
from tests.slurm.test_live import SCHED_SLACK_S, _nodes

pytestmark = pytest.mark.slurm


def test_exclusions_steer_slurm_and_leave_a_users_exclude_alone(live: LiveCluster) -> None:
    source = SlurmSource(live.client)
    a100, v100 = _nodes(source.snapshot(), "a100"), _nodes(source.snapshot(), "v100")
    # Deferred by the plugin (kept so while the test runs its commands).
    ours = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", keep_deferred=True)
    theirs = live.sbatch("bob", "--gres=gpu:v100:1", "-t", "10", f"--exclude={v100[0]}",
                         keep_deferred=True)
    # A user's own --begin: released by nobody, so it stays pending for the later steps.
    kept = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", "--begin=now+300")
    source.snapshot()
    actuator = SlurmActuator(live.client, ActuatorConfig(mode=Mode.ENFORCE), pins=source.pins)
    # Slurm fills the lowest-named nodes first: leave it only the last a100 node.
    exclusions = {ours: tuple(a100[:-1]), theirs: (v100[1],), kept: (a100[0],)}
    report = actuator.apply(Decision("test", (ours, theirs, kept), exclusions=exclusions))
    by_job = {o.job_id: o for o in report.outcomes}
    assert all(o.sent and o.ok for o in report.outcomes), report.outcomes
    assert (by_job[ours].kind, by_job[kept].kind, by_job[theirs].kind) == (
        "exclude", "exclude", "release")
    assert f"ExcNodeList={v100[0]} was not set by slurm-rl: left alone" in by_job[theirs].note

    started = live.wait_state(ours, "RUNNING", timeout_s=SCHED_SLACK_S)
    assert started.nodes == (a100[-1],) and started.excluded_nodes == tuple(a100[:-1])
    other = live.wait_state(theirs, "RUNNING", timeout_s=SCHED_SLACK_S)
    assert other.excluded_nodes == (v100[0],) and v100[0] not in other.nodes

    assert live.job(kept).excluded_nodes == (a100[0],)
    before = dict(by_job[kept].before)
    assert before["ExcNodeList"] == ""
    steps = revert(live.client, {kept: Change(kept, before)}, dry_run=False)
    (step,) = [s for s in steps if s.job_id == kept]
    assert step.result == "ok" and step.fields["ExcNodeList"] == ""
    assert live.job(kept).excluded_nodes == ()

    # Excluded again, then pinned inside the exclusion: the pin clears it in the same call
    # (Slurm would otherwise keep the job pending with BadConstraints).
    source.snapshot()
    again = actuator.apply(Decision("test", (kept,), exclusions={kept: (a100[0],)}))
    assert again.outcomes[0].kind == "exclude" and live.job(kept).excluded_nodes == (a100[0],)
    source.snapshot()
    pinned = actuator.apply(Decision("test", (kept,), {kept: Placement((a100[0],), (1,))}))
    assert pinned.outcomes[0].kind == "place" and "ExcNodeList=" in pinned.outcomes[0].argv
    job = live.job(kept)
    assert (job.required_nodes, job.excluded_nodes, job.state) == ((a100[0],), (), "PENDING")


@dataclass
class _Excluding:
    """The daemon's policy, but ``job`` released unplaced and kept off ``nodes`` (what RWGP
    decides for a gang when only slow nodes are free)."""

    inner: DecisionMaker
    job: str
    nodes: tuple[str, ...]

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        decision = self.inner.decide(snapshot)
        placements = {k: v for k, v in decision.placements.items() if k != self.job}
        exclusions = {**decision.exclusions, self.job: self.nodes}
        return dataclasses.replace(decision, placements=placements, exclusions=exclusions)


def test_a_restarted_daemon_pins_over_the_exclusion_it_set_before(
    live: LiveCluster, tmp_path: Path
) -> None:
    a100 = _nodes(SlurmSource(live.client).snapshot(), "a100")
    live.stop_beating()  # not deferred: it holds the last a100 node from the start
    blocker = live.sbatch("bob", f"--nodelist={a100[-1]}", "--gres=gpu:a100:8", "-t", "10")
    live.wait_state(blocker, "RUNNING", timeout_s=SCHED_SLACK_S)
    live.beat()
    gang = live.sbatch("alice", "--gres=gpu:a100:8", "-t", "10", keep_deferred=True)
    theirs = live.sbatch("bob", "--gres=gpu:a100:1", "-t", "10", f"--exclude={a100[0]}",
                         "--begin=now+300")  # a user's own list, and a begin nobody lifts
    first = _daemon(live, tmp_path, policy="fifo+best-fit")
    first.parts = dataclasses.replace(
        first.parts, scheduler=_Excluding(first.parts.scheduler, gang, tuple(a100[:-1])))
    try:
        assert first.run_once().ok
    finally:
        first.close(retire=False)
    (row,) = Store(first.config.store).decisions_for(CLUSTER, gang)
    assert (row.action, row.slurm_rc) == ("exclude", 0), row.slurm_answer
    time.sleep(SCHED_SLACK_S / 2)  # scheduling passes: only excluded a100 nodes are free
    held = live.job(gang)
    assert (held.state, held.excluded_nodes) == ("PENDING", tuple(a100[:-1]))

    second = _daemon(live, tmp_path, policy="fifo+best-fit")  # the daemon restarted
    try:
        assert second.run_once().ok
    finally:
        second.close(retire=False)
    rows = Store(second.config.store).decisions_for(CLUSTER, gang)
    pinned = rows[-1]
    assert (pinned.action, pinned.slurm_rc) == ("place", 0), pinned.slurm_answer
    assert pinned.argv and "ExcNodeList=" in pinned.argv and pinned.nodes in a100[:-1]
    started = live.wait_state(gang, "RUNNING", timeout_s=SCHED_SLACK_S)
    assert (started.nodes, started.excluded_nodes) == ((pinned.nodes,), ())
    assert live.job(theirs).excluded_nodes == (a100[0],)  # still the user's own


def test_a_pin_of_ours_slurm_finds_impossible_is_cleared_and_the_job_starts(
        live: LiveCluster) -> None:
    """A pin of ours that can never hold (here: a v100 node for a job constrained to a100,
    as a feature taken away after the pin would leave it) keeps the job pending with
    BadConstraints and priority 0 for good; the actuator's unpin, an update without a
    Priority, makes slurmctld drop the reason and compute the priority again."""
    source = SlurmSource(live.client)
    v100 = _nodes(source.snapshot(), "v100")
    job = live.sbatch("alice", "--gres=gpu:1", "--constraint=a100", "-t", "10",
                      keep_deferred=True)
    bad = live.run("scontrol", "update", f"JobId={job}", f"ReqNodeList={v100[0]}",
                   "StartTime=now")
    assert bad.ok, bad.stderr  # scontrol accepts it (rc 0), as the module docstring says
    live.wait_for(lambda: live.job(job).reason == "BadConstraints", "BadConstraints",
                  timeout_s=SCHED_SLACK_S)
    assert live.job(job).priority == 0
    observed = source.observe()
    assert source.set_aside[job] == "held"  # set aside: no policy orders or places it
    state = observed.context
    actuator = SlurmActuator(live.client, ActuatorConfig(mode=Mode.ENFORCE), pins=source.pins)
    actuator.pins.remember(job, v100[0])  # the daemon's own pin, as its ledger knows it
    report = actuator.apply(Decision("test", ()), state)
    outcome = report.outcome(job)
    assert outcome is not None and (outcome.kind, outcome.ok) == ("unpin", True), outcome
    started = live.wait_state(job, "RUNNING", timeout_s=SCHED_SLACK_S)
    assert started.nodes[0].startswith("a100")
