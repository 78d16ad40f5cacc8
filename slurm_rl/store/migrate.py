"""Schema migrations, run programmatically: the Alembic scripts (``env.py``, the script
template, ``versions/``) live in the top-level ``db/`` of a checkout, and a wheel ships them
beside the package (``<data>/share/slurm-rl/db``, pyproject's data-files), so that an installed
daemon can upgrade its store (tests/test_packaging.py installs one and upgrades a store)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

from slurm_rl.errors import SlurmRLError
from slurm_rl.paths import shipped

#: Where the migrations are, relative to the checkout or the install's share directory.
MIGRATIONS = "db"


def migrations_dir() -> Path:
    """The Alembic script directory; a broken install (no ``env.py`` found) is one line here,
    not Alembic's traceback from inside the first store the daemon opens."""
    directory = shipped(MIGRATIONS)
    if not (directory / "env.py").is_file():
        raise SlurmRLError(f"the store's migrations are missing (no {directory / 'env.py'}): "
                           "reinstall slurm-rl")
    return directory


def alembic_config(engine: Engine) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
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
