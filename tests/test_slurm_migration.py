"""The live actuator's moves on the recorded 22.05 state, with only the subprocess boundary
fake: who may be moved (opted in, running, under the cap), what is sent and in which order,
and a job still completing released on a later cycle."""

from __future__ import annotations

import json

from slurm_rl.core import Decision, Placement
from slurm_rl.slurm.actuator import ActuationReport, ActuatorConfig, Mode, SlurmActuator
from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.eligibility import satisfies
from slurm_rl.slurm.errors import SlurmTimeoutError
from slurm_rl.slurm.migration import Move, Refusal, plan_moves
from slurm_rl.slurm.proc import CommandResult
from slurm_rl.slurm.source import SlurmSource, SlurmState
from tests.slurm.fakes import FakeRunner, fixture_text, recorded_cluster

SUBMIT = 1795970505.0
OK = CommandResult((), 0, "", "")
RUNNING_ONE_NODE = "2"  # on v100-01 (tests/fixtures/slurm/22.05/jobs.json)
RUNNING_TWO_NODES = "1"
PENDING = "3"
TO_A100 = Placement(("a100-02",), (2,))


def _cluster(comment: str = "slurm-rl:checkpoint", requeue: bool = True,
             **fields: str) -> FakeRunner:
    """The recording, with the running one-node job's comment and requeue flag (and any
    other squeue field given) set."""
    runner = recorded_cluster("22.05")
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    for job in doc["jobs"]:
        if str(job["job_id"]) == RUNNING_ONE_NODE:
            job["comment"], job["requeue"] = comment, requeue
            job.update(fields)
    runner.answer(("squeue", "--json"), json.dumps(doc))
    return runner


def _actuator(runner: FakeRunner, mode: Mode = Mode.ENFORCE, **config: object
              ) -> tuple[SlurmActuator, SlurmState]:
    """An actuator and the Slurm state a decision is made on (the loop's hand-over)."""
    client = CliSlurmClient(runner=runner)
    source = SlurmSource(client, clock=lambda: SUBMIT + 60)
    state = source.state()
    runner.default = OK
    runner.calls.clear()
    settings = ActuatorConfig(**{"mode": mode, "migrate": True, **config})  # type: ignore[arg-type]
    return SlurmActuator(client, settings, pins=source.pins, clock=lambda: SUBMIT + 60), state


def _apply(made: tuple[SlurmActuator, SlurmState], decision: Decision) -> ActuationReport:
    actuator, state = made
    return actuator.apply(decision, state)


def _pending_after_requeue(runner: FakeRunner, job_id: str) -> None:
    shown = f"JobId={job_id} JobState=PENDING Reason=BeginTime UserId=alice(1001)\n"
    runner.answer(("scontrol", "show", "job", "-o", job_id), shown)


def test_an_opted_in_job_is_requeued_pinned_and_released_in_that_order() -> None:
    runner = _cluster()
    _pending_after_requeue(runner, RUNNING_ONE_NODE)
    report = _apply(_actuator(runner),
                        Decision("p", (), migrations={RUNNING_ONE_NODE: TO_A100}))
    (outcome,) = report.outcomes
    assert (outcome.kind, outcome.sent, outcome.ok) == ("migrate", True, True)
    assert outcome.note == "restarts on a100-02"
    job = f"JobId={RUNNING_ONE_NODE}"
    assert runner.argvs == [
        ("sinfo", "--json"),  # the target's GPUs, read again just before the requeue
        ("scontrol", "requeue", RUNNING_ONE_NODE),
        ("scontrol", "update", job, "ReqNodeList=a100-02", "NumNodes=1-1"),
        ("scontrol", "show", "job", "-o", RUNNING_ONE_NODE),
        ("scontrol", "update", job, "StartTime=now"),
    ]


def test_jobs_that_did_not_opt_in_are_not_running_or_over_the_cap_are_refused() -> None:
    for comment, requeue in (("", True), ("slurm-rl:checkpoint", False), ("checkpoint", True)):
        runner = _cluster(comment, requeue)
        report = _apply(_actuator(runner),
                        Decision("p", (), migrations={RUNNING_ONE_NODE: TO_A100}))
        assert [o.kind for o in report.outcomes] == ["not_movable"], (comment, requeue)
        assert runner.argvs == []
    runner = _cluster()
    moves = {PENDING: TO_A100, "404": TO_A100, RUNNING_ONE_NODE: TO_A100}
    report = _apply(_actuator(runner, max_migrations=1), Decision("p", (), migrations=moves))
    kinds = {o.job_id: o.kind for o in report.outcomes}
    assert kinds == {PENDING: "not_running", "404": "not_running", RUNNING_ONE_NODE: "migrate"}
    capped, state = _actuator(_cluster(), max_migrations=0)
    (refused,) = capped.apply(Decision("p", (), migrations={RUNNING_ONE_NODE: TO_A100}),
                              state).outcomes
    assert refused.kind == "over_cap"


def test_shadow_and_advise_send_nothing_and_migrate_off_ignores_moves() -> None:
    decision = Decision("p", (), migrations={RUNNING_ONE_NODE: TO_A100})
    runner = _cluster()
    (shadow,) = _apply(_actuator(runner, Mode.SHADOW), decision).outcomes
    assert (shadow.kind, shadow.sent) == ("migrate", False)
    assert _apply(_actuator(runner, Mode.ADVISE), decision).outcomes == ()
    assert _apply(_actuator(runner, migrate=False), decision).outcomes == ()
    assert runner.argvs == []


def test_a_requeue_slurm_refuses_is_recorded_and_nothing_else_is_sent() -> None:
    runner = _cluster()
    runner.answer(("scontrol", "requeue", RUNNING_ONE_NODE), rc=1,
                  stderr="Requested operation is presently disabled for job 2")
    (outcome,) = _apply(_actuator(runner),
                        Decision("p", (), migrations={RUNNING_ONE_NODE: TO_A100})).outcomes
    assert (outcome.kind, outcome.ok, outcome.error_kind) == ("migrate", False, "rejected")
    assert runner.argvs == [("sinfo", "--json"), ("scontrol", "requeue", RUNNING_ONE_NODE)]


def test_a_job_still_completing_is_released_on_the_next_cycle() -> None:
    runner = _cluster()
    completing = f"JobId={RUNNING_ONE_NODE} JobState=COMPLETING UserId=alice(1001)\n"
    runner.answer(("scontrol", "show", "job", "-o", RUNNING_ONE_NODE), completing)
    actuator, state = _actuator(runner, restart_wait_s=0.0)
    (outcome,) = actuator.apply(Decision("p", (), migrations={RUNNING_ONE_NODE: TO_A100}),
                                state).outcomes
    assert outcome.note.endswith("released on a later cycle")
    # Next cycle: Slurm shows it pending, eligible in two minutes; the decision ignores it.
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    for job in doc["jobs"]:
        if str(job["job_id"]) == RUNNING_ONE_NODE:
            job.update(job_state="PENDING", nodes="", eligible_time=int(SUBMIT + 180))
    runner.answer(("squeue", "--json"), json.dumps(doc))
    state = SlurmSource(CliSlurmClient(runner=runner), clock=lambda: SUBMIT + 60).state()
    runner.calls.clear()
    (released,) = actuator.apply(Decision("p", ()), state).outcomes
    assert (released.kind, released.sent) == ("release", True)
    assert runner.argvs == [("scontrol", "update", f"JobId={RUNNING_ONE_NODE}", "StartTime=now")]
    assert actuator.apply(Decision("p", ()), state).outcomes == ()  # released once


def test_a_move_its_exclusion_or_constraint_forbids_is_refused() -> None:
    """Slurm 22.05.8 keeps such a requeued job pending with BadConstraints for good
    (measured): the move would strand it. The recorded a100 nodes have feature ``a100``."""
    cases = {
        (("excluded_nodes", "a100-02"),): "not moved: its ExcNodeList names a100-02",
        (("features", "v100"),): "not moved: --constraint=v100 does not hold on a100-02 "
                                 "(or cannot be checked)",
        (("features", "[v100|t4]"),): "not moved: --constraint=[v100|t4] does not hold on "
                                      "a100-02 (or cannot be checked)",
        (("partition", "gpuv"),): "not moved: a100-02 not in its partition gpuv",
    }
    for fields, note in cases.items():
        runner = _cluster(**dict(fields))
        report = _apply(_actuator(runner),
                        Decision("p", (), migrations={RUNNING_ONE_NODE: TO_A100}))
        assert [(o.kind, o.note) for o in report.outcomes] == [("not_movable", note)]
        assert runner.argvs == []
    # [a100|v100]: what the daemon's one-type rule writes on an untyped gang (onetype.py)
    for fields in ({"features": "a100"}, {"features": "a100|v100"},
                   {"features": "[a100|v100]"}, {"excluded_nodes": "v100-03"}):
        runner = _cluster(**fields)
        _pending_after_requeue(runner, RUNNING_ONE_NODE)
        report = _apply(_actuator(runner),
                        Decision("p", (), migrations={RUNNING_ONE_NODE: TO_A100}))
        assert [o.kind for o in report.outcomes] == ["migrate"], fields


def test_plain_constraints_are_read_and_others_count_as_not_met() -> None:
    assert satisfies("a100", ("a100", "ib"))
    assert satisfies("a100&ib", ("a100", "ib")) and not satisfies("a100&ib", ("a100",))
    assert satisfies("a100|v100", ("v100",)) and not satisfies("a100|v100", ("t4",))
    assert satisfies("[a100|v100]", ("a100",)) and not satisfies("[a100|v100]", ("t4",))
    for unread in ("a100*2", "[a100*2|v100]", "a100,ib", "(a100&ib)|v100", ""):
        assert not satisfies(unread, ("a100", "ib", "v100")), unread


def _nodes_now(runner: FakeRunner, **used: str) -> None:
    """What ``sinfo --json`` shows after the decision's snapshot: each named node's
    ``gres_used`` (a job Slurm started there since)."""
    doc = json.loads(fixture_text("22.05", "sinfo.json"))
    for node in doc["nodes"]:
        if node["name"] in used:
            node["gres_used"] = used[node["name"]]
    runner.answer(("sinfo", "--json"), json.dumps(doc))


def test_a_move_onto_gpus_slurm_gave_away_since_the_snapshot_is_refused() -> None:
    """The snapshot showed a100-02 with 4 of 8 GPUs free; by the moves Slurm has started a
    job there. Requeued, the job would lose its work since the checkpoint and then wait."""
    runner = _cluster()
    made = _actuator(runner)
    _nodes_now(runner, **{"a100-02": "gpu:a100:7(IDX:0-6)"})
    (refused,) = _apply(made, Decision("p", (), migrations={RUNNING_ONE_NODE: TO_A100})).outcomes
    assert (refused.kind, refused.sent) == ("target_busy", False)
    assert refused.note == "not moved: a100-02 has 1 GPU free now, the move needs 2"
    assert runner.argvs == [("sinfo", "--json")]


def test_a_refused_target_leaves_the_cap_to_the_next_move_and_moves_share_the_free_gpus(
) -> None:
    runner = _cluster()
    doc = json.loads(runner.answers[("squeue", "--json")].stdout)  # type: ignore[union-attr]
    for job in doc["jobs"]:
        if str(job["job_id"]) == RUNNING_TWO_NODES:
            job.update(comment="slurm-rl:checkpoint", requeue=True, required_nodes="")
    runner.answer(("squeue", "--json"), json.dumps(doc))
    _pending_after_requeue(runner, RUNNING_TWO_NODES)
    made = _actuator(runner, max_migrations=1)
    _nodes_now(runner, **{"a100-01": "gpu:a100:8(IDX:0-7)"})
    moves = {RUNNING_ONE_NODE: Placement(("a100-01",), (2,)),
             RUNNING_TWO_NODES: Placement(("a100-02", "a100-03"), (4, 4))}
    report = _apply(made, Decision("p", (), migrations=moves))
    assert {o.job_id: o.kind for o in report.outcomes} == {
        RUNNING_ONE_NODE: "target_busy", RUNNING_TWO_NODES: "migrate"}
    # Two moves onto one node take its free GPUs in turn (a100-02: 4 free).
    state = made[1]
    twice = Decision("p", (), migrations={RUNNING_ONE_NODE: Placement(("a100-02",), (3,)),
                                          RUNNING_TWO_NODES: Placement(("a100-02",), (3,))})
    nodes = {node.name: node for node in state.nodes.nodes}
    steps = list(plan_moves(twice, state.job, 2, nodes, None, {"a100-02": 4}))
    assert [type(step) for step in steps] == [Move, Refusal]
    assert steps[1] == Refusal(RUNNING_TWO_NODES, "target_busy",
                               "not moved: a100-02 has 1 GPU free now, the move needs 3")


def test_no_job_is_moved_when_the_nodes_cannot_be_read_again() -> None:
    runner = _cluster()
    made = _actuator(runner)
    runner.fail(("sinfo", "--json"), SlurmTimeoutError(("sinfo", "--json"), 15.0))
    (refused,) = _apply(made, Decision("p", (), migrations={RUNNING_ONE_NODE: TO_A100})).outcomes
    assert (refused.kind, refused.sent) == ("target_busy", False)
    assert refused.note.startswith("not moved: the nodes could not be read again (")
    assert runner.argvs == [("sinfo", "--json")]
