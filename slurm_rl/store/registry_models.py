"""Tables of the model registry, the retrain runs and the cluster's nodes (migration 0002).

Kept apart from :mod:`slurm_rl.store.models` (the audit trail) because they belong to
retraining: a model version carries its bundle's bytes, so every daemon that shares one store
(PostgreSQL) can load the active version without a shared file system, and a version is never
lost with a state directory.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from slurm_rl.store.models import Base, CycleRow, OutcomeRow

# The retrain window and retention select by these times.
Index("ix_outcomes_end_time", OutcomeRow.end_time)
Index("ix_cycles_snapshot_time", CycleRow.snapshot_time)


class NodeRow(Base):
    """A GPU node as the daemon last saw it: what a simulator scenario is calibrated on."""

    __tablename__ = "nodes"

    cluster: Mapped[str] = mapped_column(String(128), primary_key=True)
    name: Mapped[str] = mapped_column(String(256), primary_key=True)
    gpu_type: Mapped[str] = mapped_column(String(64))
    gpus: Mapped[int] = mapped_column(Integer)
    price_per_gpu_hour: Mapped[float] = mapped_column(Float, default=0.0)
    seen_at: Mapped[float] = mapped_column(Float)


class ModelVersionRow(Base):
    """One policy version: a bundle (or a baseline's name), how it was made, how it did."""

    __tablename__ = "model_versions"
    # At most one active row, kept by the database (migration 0006): a partial unique index.
    __table_args__ = (Index("uq_model_versions_one_active", "active", unique=True,
                            sqlite_where=text("active"), postgresql_where=text("active")),)

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    policy: Mapped[str] = mapped_column(String(256))  # e.g. rl+rl, or a baseline's name
    source: Mapped[str] = mapped_column(String(64))  # retrain, import, ...
    status: Mapped[str] = mapped_column(String(32))  # candidate, promoted, rejected
    active: Mapped[bool] = mapped_column(Boolean, default=False)
    base_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    meta: Mapped[dict[str, object] | None] = mapped_column(JSON, nullable=True)
    # Deferred: the bundle's bytes (megabytes) load only when a cache is filled from them,
    # not with every listing or every cycle's look at the active version.
    weights: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, deferred=True)
    metrics: Mapped[dict[str, object] | None] = mapped_column(JSON, nullable=True)
    window_start: Mapped[float | None] = mapped_column(Float, nullable=True)
    window_end: Mapped[float | None] = mapped_column(Float, nullable=True)
    window_jobs: Mapped[int | None] = mapped_column(Integer, nullable=True)
    note: Mapped[str] = mapped_column(Text, default="")


class ModelEventRow(Base):
    """Every change of the active version (promote, rollback), so rollback knows what came
    before and an admin can read the history."""

    __tablename__ = "model_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    action: Mapped[str] = mapped_column(String(32))
    version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    previous: Mapped[int | None] = mapped_column(Integer, nullable=True)
    note: Mapped[str] = mapped_column(Text, default="")


class RetrainRunRow(Base):
    """One retrain attempt: its outcome and its one-line reason."""

    __tablename__ = "retrain_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    status: Mapped[str] = mapped_column(String(32))  # running, skipped, promoted, rejected, failed
    message: Mapped[str] = mapped_column(Text, default="")
    candidate_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    host: Mapped[str] = mapped_column(String(256), default="")
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
