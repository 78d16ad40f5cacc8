"""Drop the retrain schedule's job table (``apscheduler_jobs``): its rows were pickles that
APScheduler unpickled, so whoever could write the store could run code as the daemon. The
schedule is held in memory now and rebuilt from the config at every start; the table's rows
carried nothing the config does not say. A downgrade brings back an empty table in
APScheduler 3's layout, as revision 0003 made it.

Revision ID: 0004_no_apscheduler_jobs
Revises: 0003_apscheduler_jobs
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_no_apscheduler_jobs"
down_revision = "0003_apscheduler_jobs"
branch_labels = None
depends_on = None

TABLE = "apscheduler_jobs"


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table(TABLE):
        op.drop_table(TABLE)


def downgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("id", sa.Unicode(191), primary_key=True),
        sa.Column("next_run_time", sa.Float(25), nullable=True),
        sa.Column("job_state", sa.LargeBinary, nullable=False),
    )
    op.create_index(f"ix_{TABLE}_next_run_time", TABLE, ["next_run_time"])
