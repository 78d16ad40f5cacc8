"""Retraining: model registry (versions with their bundles, activation history), retrain
runs, and the cluster's GPU nodes (what a simulator scenario is calibrated on). Also an index
on outcomes' end time: the retrain window and retention select by it.

Revision ID: 0002_retrain_registry
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_retrain_registry"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "nodes",
        sa.Column("cluster", sa.String(128), primary_key=True),
        sa.Column("name", sa.String(256), primary_key=True),
        sa.Column("gpu_type", sa.String(64), nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("price_per_gpu_hour", sa.Float, nullable=False),
        sa.Column("seen_at", sa.Float, nullable=False),
    )
    op.create_table(
        "model_versions",
        sa.Column("version", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("policy", sa.String(256), nullable=False),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("active", sa.Boolean, nullable=False),
        sa.Column("base_version", sa.Integer, nullable=True),
        sa.Column("meta", sa.JSON, nullable=True),
        sa.Column("weights", sa.LargeBinary, nullable=True),
        sa.Column("metrics", sa.JSON, nullable=True),
        sa.Column("window_start", sa.Float, nullable=True),
        sa.Column("window_end", sa.Float, nullable=True),
        sa.Column("window_jobs", sa.Integer, nullable=True),
        sa.Column("note", sa.Text, nullable=False),
    )
    op.create_table(
        "model_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("version", sa.Integer, nullable=True),
        sa.Column("previous", sa.Integer, nullable=True),
        sa.Column("note", sa.Text, nullable=False),
    )
    op.create_table(
        "retrain_runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("candidate_version", sa.Integer, nullable=True),
        sa.Column("host", sa.String(256), nullable=False),
        sa.Column("pid", sa.Integer, nullable=True),
    )
    op.create_index("ix_outcomes_end_time", "outcomes", ["end_time"])
    op.create_index("ix_cycles_snapshot_time", "cycles", ["snapshot_time"])


def downgrade() -> None:
    op.drop_index("ix_cycles_snapshot_time", table_name="cycles")
    op.drop_index("ix_outcomes_end_time", table_name="outcomes")
    op.drop_table("retrain_runs")
    op.drop_table("model_events")
    op.drop_table("model_versions")
    op.drop_table("nodes")
