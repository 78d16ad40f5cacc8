"""The ``ExcNodeList`` the daemon last set on each job, read back from the audit trail.

The actuator changes or clears only the exclusions it set itself (slurm_rl/slurm/exclusion.py)
and keeps them in memory; a restarted daemon asks the store instead. Every ``scontrol
update`` the daemon sends is stored as a decision row with its argv and exit status, so the
last row of a job whose argv carries ``ExcNodeList=...`` and that Slurm accepted
(``slurm_rc == 0``; shadow rows have none) holds the value the daemon last set: a node list,
or ``""`` when its last such call cleared it. A call whose cycle row never reached the store
(the store was down) is not there: that exclusion then counts as the user's and is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import select

from slurm_rl.store.models import DecisionRow
from slurm_rl.store.repository import Store, job_key

FIELD = "ExcNodeList="
# Job keys per query: well under SQLite's smallest bound-parameter limit (999).
CHUNK = 500


def excluded_value(argv: Sequence[str] | None) -> str | None:
    """The ``ExcNodeList`` an ``scontrol update`` argv sets (``""`` clears), or None."""
    for arg in argv or ():
        if arg.startswith(FIELD):
            return arg[len(FIELD):]
    return None


def last_exclusions(store: Store, cluster: str, job_ids: Iterable[str]) -> dict[str, str]:
    """Per job id, the ``ExcNodeList`` value the daemon last set with success (``""``: it
    cleared its own); jobs it never sent one for are absent."""
    keys = {job_key(cluster, job_id): job_id for job_id in job_ids}
    found: dict[str, str] = {}
    ordered = sorted(keys)
    with store.session() as session:
        for start in range(0, len(ordered), CHUNK):
            query = (select(DecisionRow.job_key, DecisionRow.argv)
                     .where(DecisionRow.job_key.in_(ordered[start:start + CHUNK]),
                            DecisionRow.slurm_rc == 0, DecisionRow.argv.is_not(None))
                     .order_by(DecisionRow.id))
            for key, argv in session.execute(query):
                value = excluded_value(argv)
                if value is not None:
                    found[keys[key]] = value  # later rows overwrite earlier ones
    return found
