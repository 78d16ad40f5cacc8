"""The walk's room test (slurm_rl.room) skips only placements that would be refused: the
dual agent's loaded replay is the one computed asking its placement for every job, with far
fewer placements asked. (The heuristics' loaded replays are golden schedules, recorded before
the test existed: tests/golden_schedules.py.)"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from slurm_rl.agents.dual.placement import LearnedPlacement
from slurm_rl.core import ClusterSnapshot, Job, Placement
from slurm_rl.room import Room
from tests.sim_doubles import Schedule, loaded_dispatch_schedule


def _loaded_replay() -> Schedule:
    """The shipped dual agent on half a synthetic day at offered load 5, dispatch on."""
    return loaded_dispatch_schedule("rl+rl", days=0.5, seed=5, load=5.0)


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
    monkeypatch.setattr(Room, "could_fit", lambda self, job, barred=(): True)
    asked["count"] = 0
    assert _loaded_replay() == with_room
    assert len(with_room) > 50
    # the shipped chooser keeps gangs and long jobs off slow nodes: the room test knows it
    assert asked_with_room < asked["count"] / 2
