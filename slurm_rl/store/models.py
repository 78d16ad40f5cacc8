"""The SQL audit trail: decision cycles, jobs, decisions and outcomes (SQLAlchemy 2.x).

A job's decisions link to its outcome through ``job_key`` (the cluster name and Slurm job id),
so ``explain`` and retraining can join what was decided with what happened. The schema is
owned by the Alembic migrations in the top-level ``db/``; these models must match the newest
revision.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


class CycleRow(Base):
    """One decision cycle of the daemon (or one simulated decision point)."""

    __tablename__ = "cycles"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    snapshot_time: Mapped[float] = mapped_column(Float)
    recorded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    policy_id: Mapped[str] = mapped_column(String(256))
    actuator_mode: Mapped[str] = mapped_column(String(32))
    pending_jobs: Mapped[int] = mapped_column(Integer)
    running_jobs: Mapped[int] = mapped_column(Integer)
    free_gpus: Mapped[int] = mapped_column(Integer)
    duration_s: Mapped[float] = mapped_column(Float, default=0.0)

    decisions: Mapped[list[DecisionRow]] = relationship(back_populates="cycle")


class JobRow(Base):
    """A job as first seen pending (its request, as the scheduler saw it)."""

    __tablename__ = "jobs"

    job_key: Mapped[str] = mapped_column(String(256), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128))
    job_id: Mapped[str] = mapped_column(String(128))
    user: Mapped[str] = mapped_column(String(128), default="")
    partition: Mapped[str] = mapped_column(String(128), default="")
    num_gpus: Mapped[int] = mapped_column(Integer)
    num_nodes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    gpu_type: Mapped[str | None] = mapped_column(String(64), nullable=True)
    time_limit_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    submit_time: Mapped[float] = mapped_column(Float)
    first_seen: Mapped[float] = mapped_column(Float)

    decisions: Mapped[list[DecisionRow]] = relationship(back_populates="job")
    outcome: Mapped[OutcomeRow | None] = relationship(back_populates="job")


class DecisionRow(Base):
    """What one cycle decided for one job, what was sent to Slurm, and Slurm's answer."""

    __tablename__ = "decisions"
    __table_args__ = (Index("ix_decisions_job_key", "job_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cycle_id: Mapped[int] = mapped_column(ForeignKey("cycles.id"))
    job_key: Mapped[str] = mapped_column(ForeignKey("jobs.job_key"))
    policy_id: Mapped[str] = mapped_column(String(256))
    rank: Mapped[int | None] = mapped_column(Integer, nullable=True)  # None = held back
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    nodes: Mapped[str | None] = mapped_column(Text, nullable=True)  # chosen node list, if pinned
    action: Mapped[str] = mapped_column(String(64))
    argv: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    slurm_rc: Mapped[int | None] = mapped_column(Integer, nullable=True)
    slurm_answer: Mapped[str | None] = mapped_column(Text, nullable=True)
    details: Mapped[dict[str, object] | None] = mapped_column(JSON, nullable=True)

    cycle: Mapped[CycleRow] = relationship(back_populates="decisions")
    job: Mapped[JobRow] = relationship(back_populates="decisions")


class IntentRow(Base):
    """One job's part of one ``scontrol`` call, written before the call is sent (the
    actuator's write-ahead journal, slurm_rl/slurm/journal.py). ``cycle_id`` is set once a
    decision row in that cycle records it; ``state`` goes intended -> applied, refused,
    unknown or not_applied."""

    __tablename__ = "intents"
    __table_args__ = (Index("ix_intents_open", "cluster", "cycle_id", "state"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    job_id: Mapped[str] = mapped_column(String(128))
    policy_id: Mapped[str] = mapped_column(String(256))
    created: Mapped[float] = mapped_column(Float)  # the snapshot time of the call's cycle
    kind: Mapped[str] = mapped_column(String(64))
    argv: Mapped[list[str]] = mapped_column(JSON)
    fields: Mapped[dict[str, str]] = mapped_column(JSON)
    before: Mapped[dict[str, str] | None] = mapped_column(JSON, nullable=True)
    state: Mapped[str] = mapped_column(String(16))
    slurm_rc: Mapped[int | None] = mapped_column(Integer, nullable=True)
    slurm_answer: Mapped[str | None] = mapped_column(Text, nullable=True)
    cycle_id: Mapped[int | None] = mapped_column(ForeignKey("cycles.id"), nullable=True)


class OutcomeRow(Base):
    """How a job ended: when and where it ran, its final state and exit code."""

    __tablename__ = "outcomes"

    job_key: Mapped[str] = mapped_column(ForeignKey("jobs.job_key"), primary_key=True)
    start_time: Mapped[float] = mapped_column(Float)
    end_time: Mapped[float] = mapped_column(Float)
    nodes: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(32))
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    source: Mapped[str] = mapped_column(String(32))  # squeue, jobcomp, sacct, simulator
    recorded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    job: Mapped[JobRow] = relationship(back_populates="outcome")
