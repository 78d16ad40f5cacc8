"""The node lists the daemon last set on each job, read back from the audit trail.

The actuator changes or clears only the ``ExcNodeList`` and ``ReqNodeList`` values it set
itself (slurm_rl/slurm/ownership.py) and keeps them in memory; a restarted daemon asks the
store instead. Every ``scontrol update`` the daemon sends is stored as a decision row with
its argv and exit status (a move's pin, sent after its requeue, in ``details["then"]``), so
the last row of a job that carries ``<field>=...`` and that Slurm accepted (``slurm_rc ==
0``; shadow rows have none) holds the value the daemon last set: a node list, or ``""``
when its last such call cleared it. A value ``slurm-rl revert`` put back counts as a clear:
it is what Slurm showed before the daemon's change, which may be a user's. A call whose
cycle row never reached the store (the store was down) is not there: that value then counts
as someone else's and is left alone. A call the journal holds but no cycle recorded yet (the
daemon died after sending it; the actuator stores it at its next cycle, after the source has
asked) counts too, unless Slurm refused it: the ledger adopts a value only when Slurm shows
exactly that value, so a call that never went out changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from sqlalchemy import select

from slurm_rl.journal import APPLIED, INTENDED, UNANSWERED
from slurm_rl.store.models import CycleRow, DecisionRow, IntentRow
from slurm_rl.store.repository import Store, job_key

EXCLUDED = "ExcNodeList"
REQUIRED = "ReqNodeList"
PRIORITY = "Priority"
REVERT = "revert"  # the action slurm-rl revert stores its own calls under (ops/revert.py)
# Job keys per query: well under SQLite's smallest bound-parameter limit (999).
CHUNK = 500


def field_value(argv: Sequence[str] | None, field: str) -> str | None:
    """The value an ``scontrol update`` argv gives ``field`` (``""`` clears), or None."""
    prefix = f"{field}="
    for arg in argv or ():
        if arg.startswith(prefix):
            return arg[len(prefix):]
    return None


def excluded_value(argv: Sequence[str] | None) -> str | None:
    """The ``ExcNodeList`` an ``scontrol update`` argv sets (``""`` clears), or None."""
    return field_value(argv, EXCLUDED)


def _accepted_argvs(argv: Sequence[str] | None, details: object
                    ) -> Iterator[Sequence[str] | None]:
    """A row's argv, then the further calls Slurm accepted for it (a move's pin)."""
    yield argv
    then = details.get("then") if isinstance(details, dict) else None
    for later in then if isinstance(then, list) else ():
        if isinstance(later, list):
            yield later


def last_values(store: Store, cluster: str, job_ids: Iterable[str], field: str
                ) -> dict[str, str]:
    """Per job id, the value of ``field`` the daemon last set with success (``""``: it
    cleared its own, or revert put back what was there before); jobs it never sent one for
    are absent."""
    keys = {job_key(cluster, job_id): job_id for job_id in job_ids}
    found: dict[str, str] = {}
    ordered = sorted(keys)
    with store.session() as session:
        for start in range(0, len(ordered), CHUNK):
            query = (select(DecisionRow.job_key, DecisionRow.action, DecisionRow.argv,
                            DecisionRow.details)
                     .where(DecisionRow.job_key.in_(ordered[start:start + CHUNK]),
                            DecisionRow.slurm_rc == 0, DecisionRow.argv.is_not(None))
                     .order_by(DecisionRow.id))
            for key, action, argv, details in session.execute(query):
                for sent in _accepted_argvs(argv, details):
                    value = field_value(sent, field)
                    if value is not None:  # later calls overwrite earlier ones
                        found[keys[key]] = "" if action == REVERT else value
    found.update(_journaled_values(store, cluster, list(keys.values()), field))
    return found


def _journaled_values(store: Store, cluster: str, job_ids: Sequence[str], field: str
                      ) -> dict[str, str]:
    """Per job id, the value of ``field`` in the last call the journal holds that no cycle
    has recorded yet and Slurm did not refuse: newer than any decision row of the job."""
    found: dict[str, str] = {}
    open_states = (INTENDED, APPLIED, UNANSWERED)
    with store.session() as session:
        for start in range(0, len(job_ids), CHUNK):
            query = (select(IntentRow.job_id, IntentRow.fields)
                     .where(IntentRow.cluster == cluster,
                            IntentRow.job_id.in_(job_ids[start:start + CHUNK]),
                            IntentRow.cycle_id.is_(None), IntentRow.state.in_(open_states))
                     .order_by(IntentRow.id))
            for job_id, fields in session.execute(query):
                value = fields.get(field) if isinstance(fields, dict) else None
                if isinstance(value, str):
                    found[job_id] = value
    return found


def last_exclusions(store: Store, cluster: str, job_ids: Iterable[str]) -> dict[str, str]:
    """Per job id, the ``ExcNodeList`` value the daemon last set with success (``""``: it
    cleared its own); jobs it never sent one for are absent."""
    return last_values(store, cluster, job_ids, EXCLUDED)


def last_pins(store: Store, cluster: str, job_ids: Iterable[str]) -> dict[str, str]:
    """Per job id, the ``ReqNodeList`` the daemon last set with success: a placement's or a
    move's pin (``""``: cleared); jobs it never pinned are absent."""
    return last_values(store, cluster, job_ids, REQUIRED)


def recent_priority_changes(store: Store, cluster: str, job_ids: Iterable[str], since: float
                            ) -> dict[str, list[float]]:
    """Per job id, when (cycle snapshot times after ``since``) the daemon's ``Priority``
    changes were accepted: a restarted daemon keeps counting its hourly rate
    (slurm_rl/slurm/priority.py) from them."""
    keys = {job_key(cluster, job_id): job_id for job_id in job_ids}
    found: dict[str, list[float]] = {}
    ordered = sorted(keys)
    with store.session() as session:
        for start in range(0, len(ordered), CHUNK):
            query = (select(DecisionRow.job_key, DecisionRow.argv, CycleRow.snapshot_time)
                     .join(CycleRow, DecisionRow.cycle_id == CycleRow.id)
                     .where(DecisionRow.job_key.in_(ordered[start:start + CHUNK]),
                            DecisionRow.slurm_rc == 0, DecisionRow.argv.is_not(None),
                            CycleRow.snapshot_time > since)
                     .order_by(DecisionRow.id))
            for key, argv, at in session.execute(query):
                if field_value(argv, PRIORITY) is not None:
                    found.setdefault(keys[key], []).append(at)
    return found
