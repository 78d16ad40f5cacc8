"""Every golden replay (tests/golden_schedules.py) gives exactly the recorded schedule: the
same jobs, starting and ending at the same float instants, on the same nodes and GPUs, with
the same restarts. The schedules were recorded before the simulator's speed work (issue 21);
an optimisation must leave every one of them bit-identical."""

from __future__ import annotations

import json

import pytest

from tests.golden_schedules import CASES, FIXTURE, Case, schedule

GOLDEN = json.loads(FIXTURE.read_text())


def test_every_case_has_a_recorded_schedule() -> None:
    assert sorted(GOLDEN) == sorted(case.name for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_replay_gives_the_recorded_schedule_exactly(case: Case) -> None:
    got, want = schedule(case), GOLDEN[case.name]
    first = next((i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w), None)
    assert first is None, f"{case.name}: job #{first} was {want[first]}, now {got[first]}"
    assert len(got) == len(want)
