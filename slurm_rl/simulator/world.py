"""The simulator's side of the shared loop: a snapshot source and an actuator over one
:class:`~slurm_rl.simulator.engine.Simulation`."""

from __future__ import annotations

from slurm_rl.core import Decision
from slurm_rl.loop import Observed
from slurm_rl.simulator.engine import Simulation


class TraceSource:
    """Advances the simulation to its next decision point. The simulator needs no context
    beside the snapshot: the actuator acts on the same simulation."""

    def __init__(self, simulation: Simulation) -> None:
        self.simulation = simulation

    def observe(self) -> Observed[None] | None:
        snapshot = self.simulation.next_snapshot()
        return Observed(snapshot, None) if snapshot is not None else None


class SimActuator:
    """Carries a decision out in the simulated cluster (direct starts or Slurm's levers)."""

    def __init__(self, simulation: Simulation) -> None:
        self.simulation = simulation

    def apply(self, decision: Decision, context: None = None) -> None:
        self.simulation.apply(decision)
