"""Advance reservations: nodes no job outside them may get, and jobs that run inside them.

Measured on Slurm 22.05.8: while a reservation for alice holds ``a100-01``, sinfo still shows
the node ``idle`` with no state flag, and a job of bob's pinned there stays pending with
``ReqNodeNotAvail, May be reserved for other job`` while other A100 nodes sit idle; a policy
that sees the node free would pin it there again every cycle. So the snapshot counts no free
GPU on a node of an active reservation, and a pending job that asks for a reservation
(``resv_name`` in squeue's JSON) is left to Slurm (slurm_rl/slurm/waiting.py): it may only
run on the reservation's nodes, which the agents do not offer.

``scontrol show reservation -o`` (one ``Key=Value`` line per reservation; 22.05 has no
``--json`` for scontrol) is read on every version; ``State=ACTIVE`` marks the active ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from slurm_rl.slurm.errors import SlurmOutputError
from slurm_rl.slurm.scontrol import hostlist, parse_local_time, parse_records

NO_RESERVATIONS = "No reservations in the system"


@dataclass(frozen=True, slots=True)
class SlurmReservation:
    name: str
    nodes: tuple[str, ...]
    start_time: float | None
    end_time: float | None
    state: str  # ACTIVE or INACTIVE
    flags: tuple[str, ...] = ()

    def active(self, now: float) -> bool:
        """Holding its nodes now: Slurm says so, or its window covers ``now``."""
        if self.state == "ACTIVE":
            return True
        start, end = self.start_time, self.end_time
        return start is not None and start <= now and (end is None or now < end)


def parse_reservations(text: str, where: str = "scontrol show reservation -o"
                       ) -> list[SlurmReservation]:
    if text.strip().startswith(NO_RESERVATIONS):
        return []
    return [_reservation(pairs, where) for pairs in parse_records(text, "ReservationName")]


def _reservation(pairs: dict[str, str], where: str) -> SlurmReservation:
    name = pairs.get("ReservationName", "")
    if not name:
        raise SlurmOutputError("a reservation without a name", path=where,
                               column="ReservationName")
    flags = tuple(f for f in pairs.get("Flags", "").split(",") if f and f != "(null)")
    return SlurmReservation(
        name=name, nodes=hostlist(pairs.get("Nodes", ""), where, "Nodes"),
        start_time=parse_local_time(pairs.get("StartTime", "")),
        end_time=parse_local_time(pairs.get("EndTime", "")),
        state=pairs.get("State", "").upper(), flags=flags)


def reserved_nodes(reservations: Iterable[SlurmReservation], now: float) -> frozenset[str]:
    """Nodes an active reservation holds now."""
    return frozenset(n for r in reservations if r.active(now) for n in r.nodes)
