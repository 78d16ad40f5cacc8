"""The one decision loop both worlds run (README.md, "Architecture": one loop, two worlds).

    snapshot = source.snapshot()        # what the world looks like now
    decision = scheduler.decide(snapshot)
    result = actuator.apply(decision)   # the only place that changes the world
    recorder.record(snapshot, decision, result)

The simulator plugs in ``TraceSource``/``SimActuator``; the daemon ``SlurmSource`` and a
``SlurmActuator`` (shadow mode is an actuator that only logs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from slurm_rl.core import ClusterSnapshot, Decision


class SnapshotSource(Protocol):
    def snapshot(self) -> ClusterSnapshot | None:
        """The world now, or None when there is nothing more to decide (end of a replay)."""
        ...


class Actuator(Protocol):
    def apply(self, decision: Decision) -> object: ...


class DecisionMaker(Protocol):
    def decide(self, snapshot: ClusterSnapshot) -> Decision: ...


class Recorder(Protocol):
    def record(self, snapshot: ClusterSnapshot, decision: Decision, result: object) -> None: ...


def run_cycle(
    source: SnapshotSource,
    scheduler: DecisionMaker,
    actuator: Actuator,
    recorder: Recorder | None = None,
) -> bool:
    """One cycle; False when the source has nothing more to decide."""
    snapshot = source.snapshot()
    if snapshot is None:
        return False
    decision = scheduler.decide(snapshot)
    result = actuator.apply(decision)
    if recorder is not None:
        recorder.record(snapshot, decision, result)
    return True


def run_loop(
    source: SnapshotSource,
    scheduler: DecisionMaker,
    actuator: Actuator,
    recorder: Recorder | None = None,
    on_cycle: Callable[[], None] | None = None,
) -> int:
    """Run cycles until the source is exhausted; returns the number of cycles."""
    cycles = 0
    while run_cycle(source, scheduler, actuator, recorder):
        cycles += 1
        if on_cycle is not None:
            on_cycle()
    return cycles
