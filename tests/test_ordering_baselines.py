"""The realisable orderings of issue 21 (docs/orderings.md): SJF on predicted durations, SJF on
time limits, and the age guard every realisable ordering can be run under."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from slurm_rl.agents import names
from slurm_rl.agents.dual.bundle import load_bundle
from slurm_rl.agents.ordering_baselines import (
    AgeGuarded,
    Fifo,
    Qssf,
    SjfLimit,
    SjfPredicted,
)
from slurm_rl.agents.starvation import STARVATION_S, promote_starved
from slurm_rl.core import Cluster, ClusterSnapshot, FinishedJob, Job, Node, Placement
from slurm_rl.paths import default_bundle_path
from slurm_rl.policy import OrderingPolicy
from slurm_rl.scheduler import top_k_order

CLUSTER = Cluster("c", (Node("n0", "V100", 8),))
HOUR = 3600.0


def snapshot(pending: list[Job], *, time: float = 0.0,
             finished: tuple[FinishedJob, ...] = ()) -> ClusterSnapshot:
    return ClusterSnapshot(time, CLUSTER, (8,), tuple(pending), finished=finished)


def done(user: str, gpus: int, runtime_s: float) -> FinishedJob:
    return FinishedJob(Job(f"d-{user}-{gpus}-{runtime_s}", 0.0, gpus, user=user), 0.0,
                       runtime_s, Placement(("n0",), (gpus,)))


def order(policy: OrderingPolicy, view: ClusterSnapshot) -> list[str]:
    scores = np.asarray(policy.score(view), dtype=float)
    return [view.pending[i].job_id for i in top_k_order(scores, len(scores))]


def test_sjf_predicted_ranks_by_the_users_history_not_by_gpus() -> None:
    history = (done("long", 8, 10 * HOUR), done("short", 1, HOUR), done("short", 8, HOUR))
    policy = SjfPredicted()
    policy.observe(snapshot([], finished=history))
    pending = [Job("l", 0.0, 1, user="long"), Job("s", 1.0, 8, user="short"),
               Job("s1", 2.0, 1, user="short")]
    # the long user's 1-GPU job has no history of its size: its account's median (10 h)
    assert order(policy, snapshot(pending)) == ["s", "s1", "l"]
    qssf = Qssf()
    qssf.observe(snapshot([], finished=history))
    assert order(qssf, snapshot(pending)) == ["s1", "s", "l"]  # QSSF weighs by GPUs (8 h)


def test_sjf_limit_ranks_by_the_time_limit_ties_and_no_limit_last() -> None:
    pending = [Job("none", 0.0, 1), Job("day", 1.0, 1, time_limit=24 * HOUR),
               Job("hour", 2.0, 1, time_limit=HOUR), Job("day2", 3.0, 1, time_limit=24 * HOUR)]
    assert order(SjfLimit(), snapshot(pending)) == ["hour", "day", "day2", "none"]


def test_the_shipped_agent_runs_unguarded_and_the_aged_twins_keep_the_bundle_default(
        tmp_path: Path) -> None:
    """The shipped bundle turns the guard off (session 36, docs/training.md); the ``-aged``
    twins keep 168 h, the guard of a bundle whose meta.json does not set one."""
    assert load_bundle(default_bundle_path()).starvation_s is None
    shutil.copytree(default_bundle_path(), tmp_path / "bundle")
    meta_path = tmp_path / "bundle" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["starvation_h"]
    meta_path.write_text(json.dumps(meta))
    assert load_bundle(tmp_path / "bundle").starvation_s == STARVATION_S == 168 * HOUR


def test_aged_orderings_put_the_starved_first_longest_waiting_first() -> None:
    now = 400 * HOUR
    pending = [Job("old-long", 0.0, 1, time_limit=7 * 24 * HOUR),
               Job("older-long", -10 * HOUR, 1, time_limit=14 * 24 * HOUR),
               Job("new-short", now - HOUR, 1, time_limit=HOUR),
               Job("new-long", now - HOUR, 1, time_limit=3 * 24 * HOUR)]
    view = snapshot(pending, time=now)
    assert order(SjfLimit(), view) == ["new-short", "new-long", "old-long", "older-long"]
    aged = AgeGuarded(SjfLimit())
    assert aged.name == "sjf-limit-aged"
    assert order(aged, view) == ["older-long", "old-long", "new-short", "new-long"]


def test_the_guard_leaves_fifo_as_it_is() -> None:
    """Why the table has no fifo-aged: FIFO already ranks the longest-waiting first."""
    now = 500 * HOUR
    pending = [Job(f"j{i}", submit, 1) for i, submit in enumerate((0.0, 100 * HOUR, 490 * HOUR))]
    view = snapshot(pending, time=now)
    assert order(AgeGuarded(Fifo()), view) == order(Fifo(), view) == ["j0", "j1", "j2"]


def test_the_guard_lifts_a_job_an_ordering_knows_nothing_about() -> None:
    scores = np.array([-np.inf, -5.0])
    promoted = promote_starved(scores, np.array([2.0, 0.0]), 1.0)
    assert promoted[0] > promoted[1] and np.isfinite(promoted[0])
    lone = promote_starved(np.array([-np.inf]), np.array([2.0]), 1.0)
    assert np.isfinite(lone[0])


@pytest.mark.parametrize("name", [n for n in names.realisable_orderings()
                                  if n.endswith("-aged")])
def test_every_aged_name_builds_a_guarded_twin(name: str) -> None:
    policy = names.ORDERINGS[name].make()
    assert isinstance(policy, AgeGuarded) and policy.name == name
    assert name.removesuffix("-aged") in names.realisable_orderings()
