"""An untyped request left to Slurm's choice of nodes stays on one GPU type (issue 19: the
load test measured 25 of 82 untyped multi-node gangs on a100 and v100 at once)."""

from __future__ import annotations

import dataclasses
import json

from slurm_rl.core import Decision, Placement
from slurm_rl.ops.revert import restore_fields
from slurm_rl.slurm.actuator import ActuatorConfig, Mode, SlurmActuator
from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.onetype import OneType
from slurm_rl.slurm.proc import CommandResult
from slurm_rl.slurm.source import SlurmSource
from tests.slurm.fakes import FakeRunner, fixture_text, recorded_cluster

NOW = 1795970505.0 + 60
UNTYPED_TWO_NODES = "10"  # --gpus=4 on two nodes, pending
ONE_GPU = "6"  # --gres=gpu:1
TYPED = "3"  # --gres=gpu:a100:8


def _actuator(one_gpu_type: bool = True, squeue: str | None = None
              ) -> tuple[SlurmActuator, FakeRunner]:
    runner = recorded_cluster("22.05")
    if squeue is not None:
        runner.answer(("squeue", "--json"), squeue)
    runner.default = CommandResult((), 0, "", "")
    client = CliSlurmClient(runner=runner)
    source = SlurmSource(client, clock=lambda: NOW)
    config = ActuatorConfig(mode=Mode.ENFORCE, one_gpu_type=one_gpu_type, priority_floor=1)
    return SlurmActuator(client, config, pins=source.pins, clock=lambda: NOW), runner


def _sent_to(runner: FakeRunner, job_id: str) -> list[str]:
    return [arg for argv in runner.argvs if argv[:3] == ("scontrol", "update", f"JobId={job_id}")
            for arg in argv[3:]]


def test_an_untyped_gang_released_without_nodes_is_kept_on_one_type() -> None:
    actuator, runner = _actuator()
    report = actuator.apply(Decision("p", (UNTYPED_TWO_NODES, ONE_GPU, TYPED)))
    assert "Features=[a100|v100]" in _sent_to(runner, UNTYPED_TWO_NODES)
    assert not any(a.startswith("Features=") for a in _sent_to(runner, ONE_GPU))
    assert not any(a.startswith("Features=") for a in _sent_to(runner, TYPED))
    outcome = report.outcome(UNTYPED_TWO_NODES)
    assert outcome is not None and dict(outcome.before)["Features"] == ""  # for revert


def test_a_placed_job_needs_no_constraint_and_mixing_allowed_sets_none() -> None:
    actuator, runner = _actuator()
    placed = {UNTYPED_TWO_NODES: Placement(("a100-01", "a100-02"), (2, 2))}
    actuator.apply(Decision("p", (UNTYPED_TWO_NODES,), placed))
    assert not any(a.startswith("Features=") for a in _sent_to(runner, UNTYPED_TWO_NODES))
    mixing, runner = _actuator(one_gpu_type=False)
    mixing.apply(Decision("p", (UNTYPED_TWO_NODES,)))
    assert not any(a.startswith("Features=") for a in _sent_to(runner, UNTYPED_TWO_NODES))


def _squeue_with(job_id: str, **fields: object) -> str:
    doc = json.loads(fixture_text("22.05", "squeue.json"))
    for job in doc["jobs"]:
        if str(job["job_id"]) == job_id:
            job.update(fields)
    return json.dumps(doc)


def test_a_users_constraint_is_never_overwritten_and_ours_is_not_sent_again() -> None:
    users, runner = _actuator(squeue=_squeue_with(UNTYPED_TWO_NODES, features="ib"))
    users.apply(Decision("p", (UNTYPED_TWO_NODES,)))
    assert not any(a.startswith("Features=") for a in _sent_to(runner, UNTYPED_TWO_NODES))
    ours, runner = _actuator(squeue=_squeue_with(UNTYPED_TWO_NODES, features="[a100|v100]"))
    ours.apply(Decision("p", (UNTYPED_TWO_NODES,)))
    assert not any(a.startswith("Features=") for a in _sent_to(runner, UNTYPED_TWO_NODES))


def test_nodes_without_their_type_as_a_feature_get_no_constraint() -> None:
    runner = recorded_cluster("22.05")
    source = SlurmSource(CliSlurmClient(runner=runner), clock=lambda: NOW)
    state = source.state()
    job = state.managed[UNTYPED_TWO_NODES]
    assert OneType(state.nodes.nodes).constraint(job) == "[a100|v100]"
    bare = [dataclasses.replace(node, features=()) if node.name == "v100-01" else node
            for node in state.nodes.nodes]
    assert OneType(bare).constraint(job) is None


def test_revert_clears_the_constraint_it_set() -> None:
    runner = recorded_cluster("22.05")
    runner.answer(("squeue", "--json"), _squeue_with(UNTYPED_TWO_NODES, features="[a100|v100]"))
    state = SlurmSource(CliSlurmClient(runner=runner), clock=lambda: NOW).state()
    fields = restore_fields(state.managed[UNTYPED_TWO_NODES], {"Features": ""}, NOW)
    assert fields["Features"] == ""  # (and its deferral lifted, as revert does)
