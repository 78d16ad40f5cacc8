"""What the operations commands share: the config they act on, the store, safe printing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from slurm_rl.config import DaemonConfig, config_path, load_config
from slurm_rl.errors import SlurmRLError
from slurm_rl.ops.safe_text import terminal_text
from slurm_rl.store.repository import Store, require_store, shown_url


def load(config_file: Path | None, store_url: str | None = None) -> DaemonConfig:
    return load_config(config_path(config_file), {"store_url": store_url})


def open_store(config: DaemonConfig) -> Store:
    """The daemon's store, without migrating it (a reader must not change the schema, nor
    create an empty SQLite file where the daemon never wrote one)."""
    require_store(config.store)
    try:
        store = Store(config.store, upgrade=False)
        with store.engine.connect():
            pass
    except SQLAlchemyError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SlurmRLError(f"cannot open the store {shown_url(config.store)}: {first}") from exc
    return store


@contextlib.contextmanager
def reading(config: DaemonConfig) -> Iterator[None]:
    """Store errors while reading become one line (a store without our tables, a lost
    connection), never a traceback."""
    try:
        yield
    except SQLAlchemyError as exc:
        orig = getattr(exc, "orig", None) or exc
        first = (str(orig).strip().splitlines() or [type(exc).__name__])[0]
        raise SlurmRLError(f"cannot read the store {shown_url(config.store)}: {first}") from exc


def safe(text: object) -> str:
    """Stored text as one printable line: a job name or user is data, and a newline, escape
    sequence or control character in it must not forge another line of our output."""
    return terminal_text(str(text))
