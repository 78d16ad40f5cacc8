"""The retrain schedule's job table (``apscheduler_jobs``, APScheduler's SQLAlchemy job
store) under Alembic, so a downgrade removes it with the rest. Its columns are the job
store's own (APScheduler 3: ``id`` Unicode(191), ``next_run_time`` Float(25) indexed,
``job_state`` pickled bytes); a store where APScheduler already created it keeps it as it is.

Revision ID: 0003_apscheduler_jobs
Revises: 0002_retrain_registry
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_apscheduler_jobs"
down_revision = "0002_retrain_registry"
branch_labels = None
depends_on = None

TABLE = "apscheduler_jobs"  # slurm_rl.retrain.schedule.JOB_TABLE, as it was at this revision


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table(TABLE):
        return  # created by APScheduler before this revision
    op.create_table(
        TABLE,
        sa.Column("id", sa.Unicode(191), primary_key=True),
        sa.Column("next_run_time", sa.Float(25), nullable=True),
        sa.Column("job_state", sa.LargeBinary, nullable=False),
    )
    op.create_index(f"ix_{TABLE}_next_run_time", TABLE, ["next_run_time"])


def downgrade() -> None:
    op.drop_table(TABLE)
