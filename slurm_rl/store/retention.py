"""Retention: delete audit rows older than N days, in dependency order, in small batches.

What goes: cycles (and their decisions and journal entries) whose snapshot is older than the
cutoff, outcomes of jobs that ended before it, and jobs that neither a kept decision nor a
kept outcome refers to.
Model versions, their history and retrain runs are kept (they are small and they are what
rollback needs). Batches keep each transaction short, so the daemon's writes wait at most one
batch.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from sqlalchemy import delete, exists, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from slurm_rl.store.models import CycleRow, DecisionRow, IntentRow, JobRow, OutcomeRow

log = logging.getLogger("slurm_rl.store")
DAY = 86400.0
BATCH = 5000


@dataclass(frozen=True)
class Removed:
    cycles: int
    decisions: int
    outcomes: int
    jobs: int


def _count(result: object) -> int:
    return int(getattr(result, "rowcount", 0) or 0)


def apply_retention(engine: Engine, days: float, *, now: float | None = None) -> Removed:
    cutoff = (time.time() if now is None else now) - days * DAY
    decisions = cycles = 0
    while True:
        with Session(engine) as session, session.begin():
            ids = list(session.scalars(select(CycleRow.id).where(CycleRow.snapshot_time < cutoff)
                                       .limit(BATCH)))
            if not ids:
                break
            decisions += _count(session.execute(
                delete(DecisionRow).where(DecisionRow.cycle_id.in_(ids))
                .execution_options(synchronize_session=False)))
            # Journal entries go with the cycle that recorded them (their decision rows).
            session.execute(delete(IntentRow).where(IntentRow.cycle_id.in_(ids))
                            .execution_options(synchronize_session=False))
            cycles += _count(session.execute(
delete(CycleRow).where(CycleRow.id.in_(ids))
                .execution_options(synchronize_session=False)))
    with Session(engine) as session, session.begin():
        outcomes = _count(session.execute(
delete(OutcomeRow).where(OutcomeRow.end_time < cutoff)
                                   .execution_options(synchronize_session=False)))
        orphan = (~exists().where(DecisionRow.job_key == JobRow.job_key)
                  & ~exists().where(OutcomeRow.job_key == JobRow.job_key)
                  & (JobRow.first_seen < cutoff))
        jobs = _count(session.execute(
delete(JobRow).where(orphan)
                               .execution_options(synchronize_session=False)))
    removed = Removed(cycles, decisions, outcomes, jobs)
    log.info("retention (%g days): removed %d cycles, %d decisions, %d outcomes, %d jobs",
             days, cycles, decisions, outcomes, jobs)
    return removed
