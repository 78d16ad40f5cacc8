"""Which node lists on a job slurm-rl set itself: only those are slurm-rl's to change.

Users set ``ExcNodeList`` (``sbatch --exclude``) and ``ReqNodeList`` (``sbatch --nodelist``,
``-w``) too. slurm-rl changes or clears such a list only when Slurm shows it empty or exactly
what slurm-rl itself last set on the job, and Slurm accepted; any other value is someone
else's. A :class:`Ledger` keeps those values of one field, by job id, in memory:

* :meth:`Ledger.remember` after every accepted call that sets or clears the field;
* :meth:`Ledger.sync` with each Slurm query: jobs that left and values someone has changed
  since are forgotten (now theirs), and a value it does not know is looked up once per job
  in the daemon's audit trail (``recall``, slurm_rl/store/exclusions.py), so a restarted
  daemon still knows its own. A store that cannot answer is asked again next time; until
  then the value counts as someone else's;
* :meth:`Ledger.inherit` on a config reload, which builds new parts.

The daemon keeps one ledger for ``ExcNodeList`` (in the actuator) and one for
``ReqNodeList``, shared by :class:`~slurm_rl.slurm.source.SlurmSource` (a pending job pinned
by someone else is set aside, a running one is offered to no move) and
:class:`~slurm_rl.slurm.actuator.SlurmActuator` (it never re-pins or moves such a job).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType

from ClusterShell.NodeSet import NodeSet

from slurm_rl.slurm.records import SlurmJob, numeric_id

log = logging.getLogger(__name__)

EXC = "ExcNodeList"
PIN = "ReqNodeList"

# Asked, for jobs showing a value of the field this daemon does not know, what it last set on
# each of them before (its audit trail): job id -> value ("" for a clear); None when that
# cannot be told now (asked again next time).
Recall = Callable[[Sequence[str]], Mapping[str, str] | None]

_SHOWN: dict[str, Callable[[SlurmJob], tuple[str, ...]]] = {
    EXC: lambda job: job.excluded_nodes,
    PIN: lambda job: job.required_nodes,
}


def fold(nodes: Iterable[str]) -> str:
    """Node names as one folded Slurm hostlist (``a100-[01-02]``); empty for none."""
    names = sorted(set(nodes))
    return str(NodeSet.fromlist(names)) if names else ""


def node_set(text: str) -> frozenset[str]:
    return frozenset(NodeSet(text)) if text else frozenset()


class Ledger:
    """The values of one field (``ExcNodeList`` or ``ReqNodeList``) slurm-rl set, by job.

    ``running``: also recall values shown on running jobs (a pin stays on a job that
    started, and decides whether it may be moved); else pending jobs only.
    """

    def __init__(self, field: str, recall: Recall | None = None, *,
                 running: bool = False) -> None:
        if field not in _SHOWN:
            raise ValueError(f"no ledger for {field}")
        self.field = field
        self.recall = recall
        self._running = running
        self._mine: dict[str, frozenset[str]] = {}
        self._asked: set[str] = set()  # jobs whose unknown value recall answered for

    @property
    def values(self) -> Mapping[str, frozenset[str]]:
        return MappingProxyType(self._mine)

    def shown(self, job: SlurmJob) -> frozenset[str]:
        return frozenset(_SHOWN[self.field](job))

    def owns(self, job: SlurmJob) -> bool:
        """True when Slurm shows the field empty or exactly as slurm-rl last set it."""
        shown = self.shown(job)
        return not shown or shown == self._mine.get(job.job_id)

    def remember(self, job_id: str, value: str) -> None:
        """An accepted call set the field to ``value`` (a hostlist; empty: cleared)."""
        nodes = node_set(value)
        if nodes:
            self._mine[job_id] = nodes
        else:
            self._mine.pop(job_id, None)

    def inherit(self, previous: Ledger) -> None:
        """Take over what ``previous`` knew (a config reload builds new parts)."""
        self._mine.update(previous._mine)
        self._asked |= previous._asked

    def sync(self, jobs: Mapping[str, SlurmJob], *, ask: bool = True) -> None:
        """Bring the ledger up to what Slurm shows now (``jobs``: the managed jobs)."""
        self._forget(jobs)
        self._asked &= set(jobs)
        if ask and self.recall is not None:
            self._recall(jobs, self.recall)

    def _forget(self, jobs: Mapping[str, SlurmJob]) -> None:
        """Drop jobs that left, and values someone else has changed since (now theirs). An
        empty field keeps its entry: the state may predate the call that set it."""
        for job_id, nodes in list(self._mine.items()):
            job = jobs.get(job_id)
            shown = self.shown(job) if job is not None else frozenset()
            if job is None or (shown and shown != nodes):
                del self._mine[job_id]

    def _recall(self, jobs: Mapping[str, SlurmJob], recall: Recall) -> None:
        """Adopt the values ``recall`` says this daemon set last and Slurm still shows
        exactly. Each job is asked about once; what the store does not vouch for stays
        someone else's."""
        unknown = {
            job.job_id: self.shown(job) for job in jobs.values()
            if (job.is_pending or (self._running and job.is_active)) and self.shown(job)
            and job.job_id not in self._mine and job.job_id not in self._asked
        }
        if not unknown:
            return
        answer = recall(sorted(unknown, key=numeric_id))
        if answer is None:
            return
        self._asked |= set(unknown)
        for job_id, value in answer.items():
            nodes = node_set(value)
            if nodes and unknown.get(job_id) == nodes:
                self._mine[job_id] = nodes
                log.info("job %s: %s=%s is slurm-rl's own (audit trail)", job_id, self.field,
                         value)


def exclusion_ledger(recall: Recall | None = None) -> Ledger:
    return Ledger(EXC, recall)


def pin_ledger(recall: Recall | None = None) -> Ledger:
    return Ledger(PIN, recall, running=True)
