"""The one replay pool (slurm_rl/replay_pool.py): results in task order whether replays run
in this process or in spawned workers, each from the same fresh state, decisions counted."""

from __future__ import annotations

import random

import numpy as np

from slurm_rl import replay_pool
from slurm_rl.replay_pool import decision_tick, fresh_replay_state, pool_map


def draw(label: str, cycles: int) -> tuple[str, float, float, int]:
    """A stand-in replay: counts its cycles and reads the global generators (a policy that
    drew from them would see the same numbers in any worker)."""
    fresh_replay_state()
    for _ in range(cycles):
        decision_tick()
    counted = 0 if replay_pool._decisions is None else 1
    return label, random.random(), float(np.random.random()), counted


def test_nothing_to_replay_starts_nothing() -> None:
    assert pool_map(draw, [], workers=4) == []


def test_in_process_and_in_workers_give_the_same_results_in_task_order() -> None:
    tasks = [(f"t{k}", k) for k in range(5)]
    here = pool_map(draw, tasks, workers=1)
    there = pool_map(draw, tasks, workers=2, progress=False)
    assert [r[0] for r in here] == [f"t{k}" for k in range(5)]
    assert [r[:3] for r in here] == [r[:3] for r in there]
    assert len({r[1:3] for r in here}) == 1  # every replay from the same fresh state
    assert {r[3] for r in here} == {0} and {r[3] for r in there} == {1}  # counted in workers
