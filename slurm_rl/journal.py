"""The actuator's write-ahead journal: every change is written down before it is sent.

A daemon killed between ``scontrol update`` and the cycle's record would otherwise leave a
change in Slurm that no row explains and ``slurm-rl revert`` cannot undo. So the actuator
hands each planned call to a :class:`Journal` first (state ``intended``), sends it, and then
settles it:

* ``applied``   Slurm accepted it;
* ``refused``   Slurm answered with an error (its message is kept);
* ``unanswered`` no answer (a timeout, slurmctld unreachable): Slurm may or may not hold it.

An entry still ``intended`` or ``unanswered`` on a later cycle (the daemon died, or the call
timed out) is checked against what Slurm shows then (slurm_rl/slurm/journal.py):
``applied`` when the job holds every value the call set, ``not_applied`` when it holds
others, ``unknown`` when the job left the queue. The store (slurm_rl/store/journal.py) turns
every entry into a decision row, so ``explain`` and ``revert`` see every call ever sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from slurm_rl.core import Job

# ``unanswered``: no answer came (a timeout, slurmctld unreachable), so a later cycle checks
# it; ``unknown``: checked, but the job had left the queue, so nobody can say.
INTENDED, APPLIED, REFUSED, UNANSWERED, NOT_APPLIED, UNKNOWN = (
    "intended", "applied", "refused", "unanswered", "not_applied", "unknown")


@dataclass(frozen=True, slots=True)
class Intent:
    """One job's part of one planned call: what is sent and what Slurm showed before."""

    job_id: str
    kind: str
    argv: tuple[str, ...]
    fields: tuple[tuple[str, str], ...]
    before: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Entry:
    """A journal entry left over from an earlier cycle (unsettled, or never recorded)."""

    entry_id: int
    job_id: str
    policy_id: str
    time: float
    intent: Intent
    state: str
    rc: int | None = None
    answer: str = ""


@dataclass(frozen=True, slots=True)
class Settlement:
    entry_id: int
    state: str
    rc: int | None = None
    answer: str = ""


class Journal(Protocol):
    """Where the actuator writes ahead (the daemon's store; tests keep it in memory)."""

    def intend(self, cluster: str, policy_id: str, at: float, intents: Sequence[Intent],
               jobs: Sequence[Job]) -> list[int]:
        """Store ``intents`` (and the ``jobs`` they are for) before anything is sent; one id
        per intent. Raising stops the cycle before any call."""
        ...

    def settle(self, settlements: Sequence[Settlement]) -> None: ...

    def leftovers(self, cluster: str) -> list[Entry]:
        """Entries an earlier cycle left unsettled or unrecorded, oldest first."""
        ...

    def recover(self, cluster: str, at: float, mode: str,
                checked: Sequence[tuple[Entry, Settlement]]) -> None:
        """Settle leftovers and store each as a decision row (one cycle of its own)."""
        ...
