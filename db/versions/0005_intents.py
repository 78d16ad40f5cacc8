"""The actuator's write-ahead journal (``intents``): each job's part of each ``scontrol``
call is stored before the call is sent, so a daemon killed between the call and the
cycle's record loses no decision (slurm_rl/slurm/journal.py).

Revision ID: 0005_intents
Revises: 0004_no_apscheduler_jobs
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_intents"
down_revision = "0004_no_apscheduler_jobs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "intents",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("policy_id", sa.String(256), nullable=False),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("argv", sa.JSON, nullable=False),
        sa.Column("fields", sa.JSON, nullable=False),
        sa.Column("before", sa.JSON, nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("slurm_rc", sa.Integer, nullable=True),
        sa.Column("slurm_answer", sa.Text, nullable=True),
        sa.Column("cycle_id", sa.Integer, sa.ForeignKey("cycles.id"), nullable=True),
    )
    op.create_index("ix_intents_open", "intents", ["cluster", "cycle_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_intents_open", table_name="intents")
    op.drop_table("intents")
