"""Schema migrations (Alembic scripts in ``slurm_rl/store/migrations/``, shipped inside the
package so an installed daemon can upgrade its store), run programmatically."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config(engine: Engine) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Alembic's config is a ConfigParser: a '%' (URL-escaped socket paths, passwords) must be
    # doubled or it is read as interpolation.
    url = engine.url.render_as_string(hide_password=False)
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    config = alembic_config(engine)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str) -> None:
    config = alembic_config(engine)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def knows(engine: Engine, revision: str) -> bool:
    """Whether this release has ``revision`` (a newer release's store: it has not)."""
    names = {script.revision for script in
             ScriptDirectory.from_config(alembic_config(engine)).walk_revisions()}
    return revision in names


def revisions(engine: Engine) -> tuple[str | None, str]:
    """The store's schema revision (None: no slurm-rl schema yet) and this release's head.
    Reads only; raises SQLAlchemyError when the store cannot be read."""
    head = ScriptDirectory.from_config(alembic_config(engine)).get_current_head()
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    return current, str(head)
