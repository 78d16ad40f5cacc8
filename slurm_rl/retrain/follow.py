"""The daemon side of the registry: which version is active, checked every cycle (one
indexed SELECT), and the config that runs it.

A version that cannot be used (a damaged row, a cache disk that is full) is reported as a
:class:`ModelVersionError` naming the version and what is wrong, so the daemon logs one line
and keeps its running policy instead of ending with a traceback."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from sqlalchemy import Text, select, type_coerce
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from slurm_rl.config import DaemonConfig
from slurm_rl.errors import SlurmRLError
from slurm_rl.store.registry import ModelRegistry, ModelVersion
from slurm_rl.store.registry_models import ModelVersionRow

log = logging.getLogger("slurm_rl.daemon")
_UNSEEN = -1
_JSON_COLUMNS = ("meta", "metrics")


class ModelVersionError(SlurmRLError):
    """The active version cannot be read or unpacked (one line: version, table, column)."""


class ModelFollower:
    def __init__(self, engine: Engine) -> None:
        self.registry = ModelRegistry(engine)
        self.seen: int | None = _UNSEEN  # the version the running parts were built for
        self.pending: int | None = None

    def changed(self) -> bool:
        """Whether the active version differs from the one running (False when the store
        cannot tell: the running policy stays)."""
        try:
            return self.registry.active_number() != self.seen
        except SQLAlchemyError as exc:
            log.debug("model registry not readable: %s", exc)
            return False

    def effective(self, config: DaemonConfig) -> DaemonConfig:
        """``config`` with the active version's policy and bundle (as is when none is
        active); marks that version as the one running once the caller commits."""
        active = self._active()
        self.pending = active.version if active is not None else None
        if active is None:
            return config
        bundle = self._unpacked(active, config.models_cache) if active.has_bundle else None
        return config.model_copy(update={"policy": active.policy, "policy_bundle": bundle})

    def committed(self) -> None:
        self.seen = self.pending

    def forget(self) -> None:
        """Build again at the next check (after a reload)."""
        self.seen = _UNSEEN

    def _active(self) -> ModelVersion | None:
        try:
            return self.registry.active()
        except (ValueError, TypeError) as exc:  # the row's JSON or a date does not decode
            # Pending is that version, so that the caller's committed() does not retry it
            # every cycle (a new version or a SIGHUP will).
            self.pending = self.registry.active_number()
            raise ModelVersionError(_damaged(self.registry.engine, self.pending, exc)) from exc

    def _unpacked(self, active: ModelVersion, cache: Path) -> Path:
        try:
            return self.registry.materialize(active.version, cache)
        except OSError as exc:  # e.g. ENOSPC: the next version or a SIGHUP tries again
            raise ModelVersionError(
                f"model version {active.version}: cannot unpack its bundle into {cache}: "
                f"{exc.strerror or exc}") from exc
        except (ValueError, TypeError) as exc:  # its row, read again for the bundle's bytes
            raise ModelVersionError(_damaged(self.registry.engine, active.version, exc)) \
                from exc


def _damaged(engine: Engine, version: int | None, error: Exception) -> str:
    """One line on a ``model_versions`` row that does not decode, naming its bad columns."""
    where = f"model_versions row of version {version}"
    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    bad = _invalid_json_columns(engine, version) if version is not None else []
    if bad:
        return f"{where}: column {', '.join(bad)} does not hold valid JSON ({reason})"
    return f"{where} cannot be read: {reason}"


def _invalid_json_columns(engine: Engine, version: int) -> list[str]:
    """The JSON columns of the row whose stored text does not parse (SQLite keeps JSON as
    text; PostgreSQL never stores invalid JSON, and its driver hands back decoded values)."""
    columns = [type_coerce(getattr(ModelVersionRow, name), Text) for name in _JSON_COLUMNS]
    try:
        with engine.connect() as connection:
            row = connection.execute(select(*columns).where(
                ModelVersionRow.version == version)).first()
    except SQLAlchemyError:
        return []
    if row is None:
        return []
    return [name for name, raw in zip(_JSON_COLUMNS, row, strict=True)
            if isinstance(raw, str) and not _parses(raw)]


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
