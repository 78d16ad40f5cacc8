"""The simulator's side of the shared loop: a snapshot source and an actuator over one
:class:`~slurm_rl.simulator.engine.Simulation`."""

from __future__ import annotations

from slurm_rl.core import ClusterSnapshot, Decision
from slurm_rl.simulator.engine import Simulation


class TraceSource:
    """Advances the simulation to its next decision point."""

    def __init__(self, simulation: Simulation) -> None:
        self.simulation = simulation

    def snapshot(self) -> ClusterSnapshot | None:
        return self.simulation.next_snapshot()


class SimActuator:
    """Carries a decision out in the simulated cluster (direct starts or Slurm's levers)."""

    def __init__(self, simulation: Simulation) -> None:
        self.simulation = simulation

    def apply(self, decision: Decision) -> None:
        self.simulation.apply(decision)
