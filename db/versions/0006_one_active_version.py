"""At most one active model version, kept by the database itself: a unique index over
``model_versions.active`` on the rows where it is true (a partial index, on SQLite and
PostgreSQL). The registry serialises promotions with a lock (slurm_rl/store/registry.py);
the index makes a second active row impossible whatever writes the table (an older release,
an admin's SQL). A store that already holds several active rows (an older release's
promotions racing on PostgreSQL) keeps the one its history activated last, and a
``repair`` event says which were switched off.

Revision ID: 0006_one_active_version
Revises: 0005_intents
Create Date: 2026-12-07
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0006_one_active_version"
down_revision = "0005_intents"
branch_labels = None
depends_on = None

INDEX = "uq_model_versions_one_active"

_versions = sa.table("model_versions", sa.column("version", sa.Integer),
                     sa.column("active", sa.Boolean))
_events = sa.table("model_events", sa.column("id", sa.Integer),
                   sa.column("at", sa.DateTime(timezone=True)), sa.column("action", sa.String),
                   sa.column("version", sa.Integer), sa.column("previous", sa.Integer),
                   sa.column("note", sa.Text))


def upgrade() -> None:
    _keep_one_active(op.get_bind())
    op.create_index(INDEX, "model_versions", ["active"], unique=True,
                    sqlite_where=sa.text("active"), postgresql_where=sa.text("active"))


def downgrade() -> None:
    op.drop_index(INDEX, table_name="model_versions")


def _keep_one_active(connection: sa.Connection) -> None:
    """Switch off every active row but the one the latest promote or rollback activated
    (the highest version when no event names one), and record it."""
    active = set(connection.scalars(sa.select(_versions.c.version).where(_versions.c.active)))
    if len(active) < 2:
        return
    activated = connection.scalars(
        sa.select(_events.c.version)
        .where(_events.c.action.in_(("promote", "rollback")), _events.c.version.in_(active))
        .order_by(_events.c.id.desc())).first()
    keep = activated if activated is not None else max(active)
    off = sorted(active - {keep})
    connection.execute(sa.update(_versions).where(_versions.c.version.in_(off))
                       .values(active=False))
    connection.execute(sa.insert(_events).values(
        at=datetime.now(UTC), action="repair", version=keep, previous=None,
        note=(f"migration {revision}: {len(active)} versions were active; kept v{keep}, "
              f"switched off {', '.join(f'v{v}' for v in off)}")))
