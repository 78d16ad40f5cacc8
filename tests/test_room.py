"""The walk's room test (slurm_rl.room) skips only placements that would be refused: the
dual agent's loaded replay is the one computed asking its placement for every job, with far
fewer placements asked. (The heuristics' loaded replays are golden schedules, recorded before
the test existed: tests/golden_schedules.py.)"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from slurm_rl.agents.dual.placement import LearnedPlacement
from slurm_rl.agents.registry import make_scheduler
from slurm_rl.core import ClusterSnapshot, Job, Placement
from slurm_rl.fairness import LONGEST_HOLD_S, RankingRules
from slurm_rl.offered_load import load_points
from slurm_rl.room import Room
from slurm_rl.scenario import Scenario, replay
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.simulator.engine import SimConfig
from slurm_rl.simulator.perfmodel import datasheet_gpu_speeds
from slurm_rl.workloads import open_workload

Schedule = list[tuple[str, float, float, tuple[str, ...], tuple[int, ...]]]


def _loaded_replay() -> Schedule:
    """The shipped dual agent on half a synthetic day at offered load 5, dispatch on."""
    trace = open_workload("synthetic", days=0.5, seed=5)
    config = SimConfig(mode="slurm", hold_cap_s=LONGEST_HOLD_S)
    scenario = Scenario(load_cluster_spec("philly-hetero"), trace, config)
    loaded = load_points(scenario, [5.0])[0].scenario
    scheduler = make_scheduler("rl+rl", datasheet_gpu_speeds(),
                               rules=RankingRules(dispatch=True))
    result = replay(loaded, scheduler, policy_id="rl+rl")
    return sorted((o.job.job_id, o.start, o.end, tuple(o.nodes), tuple(o.gpus))
                  for o in result.outcomes)


def test_the_room_test_changes_no_schedule_and_saves_placements(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked = {"count": 0}
    place = LearnedPlacement.place

    def counted(self: LearnedPlacement, job: Job, free_gpus: Sequence[int],
                snapshot: ClusterSnapshot) -> Placement | None:
        asked["count"] += 1
        return place(self, job, free_gpus, snapshot)

    monkeypatch.setattr(LearnedPlacement, "place", counted)
    with_room = _loaded_replay()
    asked_with_room = asked["count"]
    monkeypatch.setattr(Room, "could_fit", lambda self, job: True)
    asked["count"] = 0
    assert _loaded_replay() == with_room
    assert len(with_room) > 50
    assert asked_with_room < asked["count"] / 2
