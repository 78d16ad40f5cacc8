"""Integration tests against a real Slurm (native dev cluster, or compose with
``--slurm-cluster=compose``). Plain ``sbatch`` jobs from two users; decisions are built by
hand so each test knows exactly what Slurm must do; everything is read back from Slurm.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from slurm_rl.core import ClusterSnapshot, Decision, Placement
from slurm_rl.slurm.actuator import ActuatorConfig, Mode, SlurmActuator
from slurm_rl.slurm.deferral import deferred_until
from slurm_rl.slurm.source import SlurmSource
from slurm_rl.store.journal import StoreJournal
from slurm_rl.store.models import IntentRow
from slurm_rl.store.repository import Store
from tests.slurm.live import LiveCluster

pytestmark = pytest.mark.slurm

# Scheduling passes run every 2 s on the dev cluster; allow a few of them.
SCHED_SLACK_S = 8.0


def _nodes(snapshot: ClusterSnapshot, gpu_type: str) -> list[str]:
    names = [n.name for n in snapshot.cluster.nodes if n.gpu_type == gpu_type]
    assert names, f"the test cluster has no {gpu_type} nodes"
    return names


def _actuator(live: LiveCluster, source: SlurmSource, mode: Mode, **config: float) -> SlurmActuator:
    settings = ActuatorConfig(mode=mode, **config)  # type: ignore[arg-type]
    return SlurmActuator(live.client, settings, pins=source.pins)


def test_enforce_runs_jobs_exactly_where_decided(live: LiveCluster) -> None:
    multi_a100 = live.sbatch("alice", "-N2", "--gres=gpu:a100:8", "-t", "10", keep_deferred=True)
    half_a100 = live.sbatch("bob", "--gres=gpu:a100:4", "-t", "10", keep_deferred=True)
    v100s = live.sbatch("alice", "--gpus=v100:2", "-t", "10", keep_deferred=True)
    multi_v100 = live.sbatch("bob", "-N2", "--gres=gpu:v100:2", "-t", "10", keep_deferred=True)
    one_gpu = live.sbatch("alice", "--gres=gpu:1", "-t", "10", keep_deferred=True)
    source = SlurmSource(live.client)
    snap = source.snapshot()
    pending = {j.job_id: j for j in snap.pending}
    assert (pending[multi_a100].num_gpus, pending[multi_a100].num_nodes) == (16, 2)
    assert (pending[v100s].num_gpus, pending[v100s].gpu_type) == (2, "v100")
    a100, v100 = _nodes(snap, "a100"), _nodes(snap, "v100")
    # Not the nodes Slurm would pick by itself (it fills the lowest-named nodes first).
    placements = {
        multi_v100: Placement((v100[-1], v100[0]), (2, 2)),
        multi_a100: Placement((a100[1], a100[2]), (8, 8)),
        v100s: Placement((v100[-1],), (2,)),
        half_a100: Placement((a100[0],), (4,)),
        one_gpu: Placement((a100[0],), (1,)),
    }
    ranking = (multi_v100, multi_a100, v100s, half_a100, one_gpu)
    report = _actuator(live, source, Mode.ENFORCE).apply(Decision("test", ranking, placements))
    assert [o.kind for o in report.outcomes[: len(ranking)]] == ["place"] * len(ranking)
    assert all(o.sent and o.ok for o in report.outcomes)
    for job_id, placement in placements.items():
        job = live.wait_state(job_id, "RUNNING", timeout_s=live.window_s + SCHED_SLACK_S)
        assert sorted(job.nodes) == sorted(placement.nodes), job_id
    priorities = [live.job(j).priority or 0 for j in ranking]
    assert priorities == sorted(priorities, reverse=True) and len(set(priorities)) == len(ranking)
    running = {r.job.job_id: r.placement for r in source.snapshot().running}
    for job_id in (multi_a100, multi_v100, v100s):
        got = running[job_id]
        assert dict(zip(got.nodes, got.gpus, strict=True)) == dict(
            zip(placements[job_id].nodes, placements[job_id].gpus, strict=True)
        )


def test_enforce_order_decides_who_starts_first(live: LiveCluster) -> None:
    first = live.sbatch("alice", "--gres=gpu:a100:8", "-t", "10", keep_deferred=True)
    second = live.sbatch("bob", "--gres=gpu:a100:8", "-t", "10", keep_deferred=True)
    third = live.sbatch("alice", "--gres=gpu:a100:8", "-t", "10", keep_deferred=True)
    source = SlurmSource(live.client)
    node = _nodes(source.snapshot(), "a100")[0]
    ranking = (third, first, second)  # not the submit order
    placements = {j: Placement((node,), (8,)) for j in ranking}
    _actuator(live, source, Mode.ENFORCE).apply(Decision("test", ranking, placements))
    started = []
    for job_id in ranking:
        live.wait_state(job_id, "RUNNING", timeout_s=live.window_s + SCHED_SLACK_S)
        others = [j for j in ranking if j not in started and j != job_id]
        assert all(live.job(j).state == "PENDING" for j in others)
        started.append(job_id)
        live.run("scancel", job_id)
    assert started == list(ranking)


def test_shadow_changes_nothing(live: LiveCluster) -> None:
    job_id = live.sbatch("bob", "--gres=gpu:v100:1", "-t", "10")
    before = live.job(job_id)
    source = SlurmSource(live.client)
    node = _nodes(source.snapshot(), "v100")[-1]
    decision = Decision("test", (job_id,), {job_id: Placement((node,), (1,))})
    report = _actuator(live, source, Mode.SHADOW).apply(decision)
    assert report.commands == () and not report.outcomes[0].sent
    assert "ReqNodeList=" + node in report.outcomes[0].argv
    after = live.job(job_id)
    assert (after.state, after.reason, after.required_nodes) == ("PENDING", "BeginTime", ())
    assert (after.priority, after.eligible_time) == (before.priority, before.eligible_time)


def test_without_a_fresh_heartbeat_nothing_is_deferred(live: LiveCluster) -> None:
    live.stop_beating()
    job_id = live.sbatch("alice", "--gres=gpu:a100:2", "-t", "10")
    job = live.job(job_id)
    assert job.admin_comment == "" and job.reason != "BeginTime"
    assert live.wait_for(lambda: live.job(job_id).state == "RUNNING", "undeferred start") < (
        live.window_s
    )
    live.beat()
    again = live.job(live.sbatch("alice", "--gres=gpu:a100:2", "-t", "10"))
    assert deferred_until(again.admin_comment) is not None and again.reason == "BeginTime"


def test_a_users_own_begin_time_is_left_alone(live: LiveCluster) -> None:
    job = live.job(live.sbatch("bob", "--gres=gpu:v100:1", "--begin=now+2", "-t", "10"))
    assert job.admin_comment == "" and job.reason == "BeginTime"
    # sbatch reads "now" before slurmctld stamps the submit time: a second may pass between.
    assert job.submit_time is not None and job.eligible_time is not None
    assert job.submit_time + 1 <= job.eligible_time <= job.submit_time + 2


def test_a_deferred_job_nobody_acts_on_starts_when_its_window_ends(live: LiveCluster) -> None:
    job_id = live.sbatch("bob", "--gres=gpu:v100:2", "-t", "10")
    job = live.job(job_id)
    until = deferred_until(job.admin_comment)
    assert until is not None and job.reason == "BeginTime"
    assert job.submit_time is not None and job.eligible_time == until
    assert until - job.submit_time == pytest.approx(live.window_s, abs=1)
    running = live.wait_state(job_id, "RUNNING", timeout_s=live.window_s + SCHED_SLACK_S)
    assert running.start_time is not None
    assert until <= running.start_time <= until + SCHED_SLACK_S


def test_advise_releases_early_in_ranking_order(live: LiveCluster) -> None:
    low = live.sbatch("alice", "--gres=gpu:v100:1", "-t", "10")
    high = live.sbatch("bob", "--gres=gpu:v100:1", "-t", "10")
    source = SlurmSource(live.client)
    v100 = _nodes(source.snapshot(), "v100")
    # advise gives the jobs a decision places a priority (Slurm picks their nodes)
    placed = {high: Placement((v100[0],), (1,)), low: Placement((v100[1],), (1,))}
    report = _actuator(live, source, Mode.ADVISE).apply(Decision("test", (high, low), placed))
    assert {o.kind for o in report.outcomes} == {"release"}
    for job_id in (high, low):
        job = live.wait_state(job_id, "RUNNING", timeout_s=SCHED_SLACK_S)
        window_end = deferred_until(job.admin_comment)
        assert window_end is not None and job.start_time is not None
        assert job.start_time < window_end  # released before the plugin's window ended
        assert job.required_nodes == ()  # advise never places
    assert (live.job(high).priority or 0) > (live.job(low).priority or 0) >= 1000


def test_enforce_extends_the_deferral_of_held_jobs(live: LiveCluster) -> None:
    job_id = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10")
    source = SlurmSource(live.client)
    source.snapshot()
    actuator = _actuator(
        live, source, Mode.ENFORCE, defer_extension_s=40, renew_margin_s=10, defer_cap_s=600
    )
    asked = time.time()
    report = actuator.apply(Decision("test", (), holds=(job_id,)))
    assert report.outcome(job_id) is not None
    assert report.outcome(job_id).kind == "defer"  # type: ignore[union-attr]
    eligible = live.job(job_id).eligible_time
    assert eligible is not None and eligible == pytest.approx(asked + 40, abs=2)
    source.snapshot()
    again = actuator.apply(Decision("test", (), holds=(job_id,)))
    assert again.outcome(job_id).kind == "unchanged"  # type: ignore[union-attr]
    assert again.commands == ()


def test_an_update_for_a_vanished_job_is_recorded(live: LiveCluster) -> None:
    job_id = live.sbatch("bob", "--gres=gpu:v100:1", "-t", "10")
    source = SlurmSource(live.client)
    decided_on = source.observe().context  # the state the decision is made on: job pending
    live.run("scancel", job_id)
    live.wait_state(job_id, "CANCELLED", timeout_s=SCHED_SLACK_S)
    report = _actuator(live, source, Mode.ENFORCE).apply(Decision("test", (job_id,)),
                                                         decided_on)
    outcome = report.outcomes[0]
    assert (outcome.sent, outcome.ok, outcome.error_kind) == (True, False, "vanished")
    assert outcome.returncode not in (None, 0) and outcome.argv[:2] == ("scontrol", "update")


def test_finished_jobs_are_reported_once_with_their_nodes(live: LiveCluster) -> None:
    job_id = live.sbatch("alice", "--gres=gpu:v100:1", "-t", "10", script="sleep 1",
                         keep_deferred=True)
    source = SlurmSource(live.client)
    snap = source.snapshot()
    node = _nodes(snap, "v100")[0]
    decision = Decision("test", (job_id,), {job_id: Placement((node,), (1,))})
    _actuator(live, source, Mode.ENFORCE).apply(decision)
    live.wait_state(job_id, "COMPLETED", timeout_s=30)
    finished = {f.job.job_id: f for f in source.snapshot().finished}
    assert finished[job_id].placement == Placement((node,), (1,))
    assert (finished[job_id].state, finished[job_id].exit_code) == ("COMPLETED", 0)
    assert finished[job_id].end_time >= finished[job_id].start_time
    assert job_id not in {f.job.job_id for f in source.snapshot().finished}


def test_slurm_takes_a_job_list_only_for_the_batchable_fields(live: LiveCluster) -> None:
    """Issue 19 (1): what ``BATCHABLE_FIELDS`` says, measured on this Slurm: a job list works
    for StartTime, ExcNodeList and Priority; with ReqNodeList or NumNodes the call fails for
    every job of the list ("Invalid job ID a,b")."""
    from slurm_rl.slurm.actuator import BATCHABLE_FIELDS

    first = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", "--begin=now+300")
    second = live.sbatch("bob", "--gres=gpu:a100:1", "-t", "10", "--begin=now+300")
    node = _nodes(SlurmSource(live.client).snapshot(), "a100")[-1]
    both = f"JobId={first},{second}"
    for field, value in (("ReqNodeList", node), ("NumNodes", "1-1")):
        result = live.run("scontrol", "update", both, f"{field}={value}")
        assert not result.ok and "invalid job id" in result.stderr.lower(), \
            (field, result.stderr)
        assert field not in BATCHABLE_FIELDS
    assert live.run("scontrol", "update", both, f"ExcNodeList={node}").ok
    assert all(live.job(j).excluded_nodes == (node,) for j in (first, second))
    assert live.run("scontrol", "update", both, "StartTime=now+200").ok
    assert live.run("scontrol", "update", both, "Priority=7").ok
    assert [live.job(j).priority for j in (first, second)] == [7, 7]
    assert {"ExcNodeList", "StartTime", "Priority"} == BATCHABLE_FIELDS
    live.run("scancel", first, second)


def test_two_jobs_pinned_to_one_node_in_one_cycle_both_get_their_pin(live: LiveCluster) -> None:
    """Issue 19 (1): two released jobs sharing a node got one ``JobId=a,b ReqNodeList=...``
    call, Slurm refused it, the refusal was recorded as "vanished", and both jobs ran on
    nodes Slurm chose."""
    first = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", keep_deferred=True)
    second = live.sbatch("bob", "--gres=gpu:a100:1", "-t", "10", keep_deferred=True)
    source = SlurmSource(live.client)
    node = _nodes(source.snapshot(), "a100")[-1]  # not where Slurm would put them
    placements = {j: Placement((node,), (1,)) for j in (first, second)}
    # priority_floor 1: both already have a priority above it, so the two calls are the same
    actuator = _actuator(live, source, Mode.ENFORCE, priority_floor=1)
    report = actuator.apply(Decision("test", (first, second), placements))
    sent = [o for o in report.outcomes if o.job_id in placements]
    assert all(o.kind == "place" and o.sent and o.ok for o in sent), sent
    assert all(f"JobId={o.job_id}" in o.argv for o in sent)
    for job_id in placements:
        job = live.wait_state(job_id, "RUNNING", timeout_s=live.window_s + SCHED_SLACK_S)
        assert job.nodes == (node,), job_id


def test_a_pin_slurm_refuses_is_journaled_as_refused_with_slurms_message(
    live: LiveCluster, tmp_path: Path
) -> None:
    """Issue 19: a refused call is recorded as refused, with Slurm's own words (measured on
    22.05.8: ``Invalid node name specified for job N``), not as a vanished job. The node
    is in the state the decision was made on but gone from Slurm (removed from slurm.conf
    since): the actuator's own check (slurm_rl/slurm/eligibility.py) lets it pass."""
    job_id = live.sbatch("alice", "--gres=gpu:a100:1", "-t", "10", keep_deferred=True)
    source = SlurmSource(live.client)
    source.snapshot()
    state = source.state()
    gone = dataclasses.replace(state.nodes.nodes[0], name="no-such-node")
    state = dataclasses.replace(state, nodes=dataclasses.replace(
        state.nodes, nodes=(*state.nodes.nodes, gone)))
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    actuator = SlurmActuator(live.client, ActuatorConfig(mode=Mode.ENFORCE), pins=source.pins,
                             journal=StoreJournal(lambda: store))
    placements = {job_id: Placement(("no-such-node",), (1,))}
    report = actuator.apply(Decision("test", (job_id,), placements), state)
    outcome = report.outcome(job_id)
    assert outcome is not None and (outcome.sent, outcome.error_kind) == (True, "rejected")
    with store.session() as session:
        (entry,) = session.scalars(select(IntentRow)).all()
    assert (entry.job_id, entry.state) == (job_id, "refused")
    assert entry.slurm_answer == "Invalid node name specified"
    assert live.job(job_id).required_nodes == ()  # Slurm kept the job as it was
    store.engine.dispose()


def test_an_untyped_gang_slurm_places_stays_on_one_gpu_type(live: LiveCluster) -> None:
    """Issue 19: with 4 a100 GPUs free on one node and v100 nodes idle, Slurm would run an
    untyped 2 x 4-GPU gang on a100 + v100; released with the daemon's one-type constraint it
    runs on one type (Slurm 22.05.8's matching OR, ``Features=[a100|v100]``)."""
    source = SlurmSource(live.client)
    a100 = _nodes(source.snapshot(), "a100")
    fillers = {live.sbatch("alice", "--gres=gpu:a100:8", "-t", "10", keep_deferred=True):
               (node, 8) for node in a100[:-1]}
    fillers[live.sbatch("bob", "--gres=gpu:a100:4", "-t", "10", keep_deferred=True)] = (a100[-1], 4)
    placements = {job: Placement((node,), (gpus,)) for job, (node, gpus) in fillers.items()}
    _actuator(live, source, Mode.ENFORCE).apply(Decision("fill", tuple(fillers), placements))
    for job_id in fillers:
        live.wait_state(job_id, "RUNNING", timeout_s=live.window_s + SCHED_SLACK_S)
    gang = live.sbatch("alice", "-N2", "--gpus-per-node=4", "-t", "10", keep_deferred=True)
    source.snapshot()
    config = ActuatorConfig(mode=Mode.ENFORCE, one_gpu_type=True)
    report = SlurmActuator(live.client, config, pins=source.pins).apply(Decision("t", (gang,)))
    outcome = report.outcome(gang)
    assert outcome is not None and "Features=[a100|v100]" in outcome.argv and outcome.ok
    job = live.wait_state(gang, "RUNNING", timeout_s=live.window_s + SCHED_SLACK_S)
    assert len({node.split("-")[0] for node in job.nodes}) == 1, job.nodes
