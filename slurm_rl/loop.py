"""The one decision loop both worlds run (README.md, "Architecture": one loop, two worlds).

    observed = source.observe()         # the world now: a snapshot and the world's context
    decision = scheduler.decide(observed.snapshot)
    result = actuator.apply(decision, observed.context)   # the only place that changes it
    recorder.record(observed.snapshot, decision, result)

The simulator plugs in ``TraceSource``/``SimActuator`` (no context: ``None``); the daemon
``SlurmSource`` and a ``SlurmActuator`` (shadow mode is an actuator that only logs), whose
context is the raw Slurm state the snapshot was built from: the source hands the actuator
what it needs of the same moment through the loop, and nothing else passes between them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, NamedTuple, Protocol, TypeVar

from slurm_rl.core import ClusterSnapshot, Decision

Context = TypeVar("Context")
Context_co = TypeVar("Context_co", covariant=True)
Context_contra = TypeVar("Context_contra", contravariant=True)


class Observed(NamedTuple, Generic[Context_co]):
    """One look at the world: the snapshot the scheduler decides on, and the context the
    actuator carries the decision out with (what it needs of the same moment)."""

    snapshot: ClusterSnapshot
    context: Context_co


class SnapshotSource(Protocol[Context_co]):
    def observe(self) -> Observed[Context_co] | None:
        """The world now, or None when there is nothing more to decide (end of a replay)."""
        ...


class Actuator(Protocol[Context_contra]):
    def apply(self, decision: Decision, context: Context_contra, /) -> object: ...


class DecisionMaker(Protocol):
    def decide(self, snapshot: ClusterSnapshot) -> Decision: ...


class Recorder(Protocol):
    def record(self, snapshot: ClusterSnapshot, decision: Decision, result: object) -> None: ...


def run_cycle(
    source: SnapshotSource[Context],
    scheduler: DecisionMaker,
    actuator: Actuator[Context],
    recorder: Recorder | None = None,
) -> bool:
    """One cycle; False when the source has nothing more to decide."""
    observed = source.observe()
    if observed is None:
        return False
    decision = scheduler.decide(observed.snapshot)
    result = actuator.apply(decision, observed.context)
    if recorder is not None:
        recorder.record(observed.snapshot, decision, result)
    return True


def run_loop(
    source: SnapshotSource[Context],
    scheduler: DecisionMaker,
    actuator: Actuator[Context],
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
