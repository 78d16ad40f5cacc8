"""Initial audit-trail schema: cycles, jobs, decisions, outcomes.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cycles",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("snapshot_time", sa.Float, nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("policy_id", sa.String(256), nullable=False),
        sa.Column("actuator_mode", sa.String(32), nullable=False),
        sa.Column("pending_jobs", sa.Integer, nullable=False),
        sa.Column("running_jobs", sa.Integer, nullable=False),
        sa.Column("free_gpus", sa.Integer, nullable=False),
        sa.Column("duration_s", sa.Float, nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("job_key", sa.String(256), primary_key=True),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("partition", sa.String(128), nullable=False),
        sa.Column("num_gpus", sa.Integer, nullable=False),
        sa.Column("num_nodes", sa.Integer, nullable=True),
        sa.Column("gpu_type", sa.String(64), nullable=True),
        sa.Column("time_limit_s", sa.Float, nullable=True),
        sa.Column("submit_time", sa.Float, nullable=False),
        sa.Column("first_seen", sa.Float, nullable=False),
    )
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cycle_id", sa.Integer, sa.ForeignKey("cycles.id"), nullable=False),
        sa.Column("job_key", sa.String(256), sa.ForeignKey("jobs.job_key"), nullable=False),
        sa.Column("policy_id", sa.String(256), nullable=False),
        sa.Column("rank", sa.Integer, nullable=True),
        sa.Column("score", sa.Float, nullable=True),
        sa.Column("nodes", sa.Text, nullable=True),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("argv", sa.JSON, nullable=True),
        sa.Column("slurm_rc", sa.Integer, nullable=True),
        sa.Column("slurm_answer", sa.Text, nullable=True),
        sa.Column("details", sa.JSON, nullable=True),
    )
    op.create_index("ix_decisions_job_key", "decisions", ["job_key"])
    op.create_table(
        "outcomes",
        sa.Column("job_key", sa.String(256), sa.ForeignKey("jobs.job_key"), primary_key=True),
        sa.Column("start_time", sa.Float, nullable=False),
        sa.Column("end_time", sa.Float, nullable=False),
        sa.Column("nodes", sa.Text, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("outcomes")
    op.drop_index("ix_decisions_job_key", table_name="decisions")
    op.drop_table("decisions")
    op.drop_table("jobs")
    op.drop_table("cycles")
