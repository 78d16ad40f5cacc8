"""The model registry: policy versions in the store, which one is active, and its history.

A version holds its bundle (``meta.json`` as JSON, ``weights.pt`` as bytes) or, for a
baseline, only a policy name. Exactly one version is active at a time (or none: the daemon
then runs its configured policy). Promote and rollback are one transaction each and append
an event, so ``rollback`` restores whatever was active before the current version, and
every daemon sharing the store sees the change at its next cycle.
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from slurm_rl.errors import InputError
from slurm_rl.safefile import UnsafePathError, require_private_dir, write_atomic
from slurm_rl.store.registry_models import ModelEventRow, ModelVersionRow

META_FILE = "meta.json"
WEIGHTS_FILE = "weights.pt"


@dataclass(frozen=True)
class ModelVersion:
    """A version without its weights (listing and comparing them never loads bytes)."""

    version: int
    created_at: datetime
    policy: str
    source: str
    status: str
    active: bool
    base_version: int | None
    metrics: Mapping[str, Any]
    window_start: float | None
    window_end: float | None
    window_jobs: int | None
    note: str

    @property
    def has_bundle(self) -> bool:
        return self.source != "baseline"


def _version(row: ModelVersionRow) -> ModelVersion:
    return ModelVersion(
        version=row.version, created_at=row.created_at, policy=row.policy, source=row.source,
        status=row.status, active=row.active, base_version=row.base_version,
        metrics=dict(row.metrics or {}), window_start=row.window_start,
        window_end=row.window_end, window_jobs=row.window_jobs, note=row.note,
    )


@dataclass(frozen=True)
class Window:
    """The logged window a version was trained and judged on."""

    start: float
    end: float
    jobs: int


class ModelRegistry:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    # -- writing -------------------------------------------------------------------------

    def register(
        self,
        policy: str,
        *,
        bundle: Path | None = None,
        source: str = "import",
        base_version: int | None = None,
        metrics: Mapping[str, Any] | None = None,
        window: Window | None = None,
        note: str = "",
    ) -> int:
        """Store a new version (not active); ``bundle`` is a policy bundle directory."""
        meta, weights = _read_bundle(bundle) if bundle is not None else (None, None)
        row = ModelVersionRow(
            created_at=datetime.now(UTC), policy=policy,
            source=source if bundle is not None else "baseline", status="candidate",
            active=False, base_version=base_version, meta=meta, weights=weights,
            metrics=dict(metrics or {}), window_start=window.start if window else None,
            window_end=window.end if window else None,
            window_jobs=window.jobs if window else None, note=note,
        )
        with self._sessions.begin() as session:
            session.add(row)
            session.flush()
            return row.version

    def set_status(self, version: int, status: str, note: str = "") -> None:
        with self._sessions.begin() as session:
            row = self._row(session, version)
            row.status = status
            if note:
                row.note = note

    def promote(self, version: int, note: str = "") -> int | None:
        """Make ``version`` the active one; returns the version active before (or None)."""
        with self._sessions.begin() as session:
            row = self._row(session, version)
            previous = self._active_number(session)
            if previous == version:
                return previous
            session.execute(update(ModelVersionRow).where(ModelVersionRow.active)
                            .values(active=False))
            row.active, row.status = True, "promoted"
            session.add(_event("promote", version, previous, note))
            return previous

    def rollback(self, note: str = "") -> tuple[int | None, int]:
        """Re-activate the version that was active before the current one; returns
        (restored version, replaced version). With no earlier version: InputError."""
        with self._sessions.begin() as session:
            current = self._active_number(session)
            if current is None:
                raise InputError("no active model version: nothing to roll back")
            events = session.scalars(select(ModelEventRow).where(ModelEventRow.version == current,
                                                             ModelEventRow.action == "promote")
                                     .order_by(ModelEventRow.id.desc())).first()
            previous = events.previous if events is not None else None
            session.execute(update(ModelVersionRow).where(ModelVersionRow.active)
                            .values(active=False))
            if previous is not None:
                self._row(session, previous).active = True
            self._row(session, current).status = "rolled-back"
            session.add(_event("rollback", previous, current, note))
            return previous, current

    # -- reading -------------------------------------------------------------------------

    def versions(self) -> list[ModelVersion]:
        with self._sessions() as session:
            query = select(ModelVersionRow).order_by(ModelVersionRow.version)
            return [_version(row) for row in session.scalars(query)]

    def get(self, version: int) -> ModelVersion:
        with self._sessions() as session:
            return _version(self._row(session, version))

    def active(self) -> ModelVersion | None:
        with self._sessions() as session:
            row = session.scalars(select(ModelVersionRow).where(ModelVersionRow.active)).first()
            return _version(row) if row is not None else None

    def active_number(self) -> int | None:
        """Only the active version's number: the daemon asks this every cycle."""
        with self._sessions() as session:
            return self._active_number(session)

    def count(self) -> int:
        with self._sessions() as session:
            return int(session.scalar(select(func.count()).select_from(ModelVersionRow)) or 0)

    def materialize(self, version: int, cache_dir: Path) -> Path:
        """The version's bundle as a directory under ``cache_dir`` (written once, atomically:
        a half-written bundle is never seen by a loading daemon). The cache must be the
        daemon's own (:func:`require_private_dir`): a bundle someone else put there, or a
        link they planted, would be loaded as the active version."""
        require_private_dir(cache_dir, "models cache")
        target = cache_dir / f"v{version}"
        if target.is_symlink():
            raise UnsafePathError(f"models cache entry {target} is a symbolic link; fix: "
                                  "remove it (the daemon writes it again)")
        if (target / META_FILE).is_file():
            return target
        with self._sessions() as session:
            row = self._row(session, version)
            if row.meta is None or row.weights is None:
                raise InputError(f"model version {version} ({row.policy}) has no bundle")
            meta, weights = row.meta, row.weights
        cache_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=cache_dir, prefix=f".v{version}."))  # random, 0700
        write_atomic(staging / WEIGHTS_FILE, weights)
        write_atomic(staging / META_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n")
        try:
            staging.rename(target)
        except OSError:  # another process made it first: theirs is identical
            shutil.rmtree(staging, ignore_errors=True)
        return target

    def _row(self, session: Session, version: int) -> ModelVersionRow:
        row = session.get(ModelVersionRow, version)
        if row is None:
            known = ", ".join(str(v) for v in session.scalars(select(ModelVersionRow.version)))
            raise InputError(f"no model version {version} (known: {known or 'none'})")
        return row

    @staticmethod
    def _active_number(session: Session) -> int | None:
        return session.scalar(select(ModelVersionRow.version).where(ModelVersionRow.active))


def _event(action: str, version: int | None, previous: int | None, note: str) -> ModelEventRow:
    return ModelEventRow(at=datetime.now(UTC), action=action, version=version,
                         previous=previous, note=note)


def _read_bundle(path: Path) -> tuple[dict[str, Any], bytes]:
    """The bundle's meta and weights, checked loadable first (a broken bundle never enters
    the registry)."""
    from slurm_rl.agents.dual.bundle import BundleError, load_bundle  # lazy: torch

    try:
        load_bundle(path)
    except BundleError as exc:
        raise InputError(str(exc)) from exc
    meta = json.loads((path / META_FILE).read_text())
    buffer = io.BytesIO((path / WEIGHTS_FILE).read_bytes())
    return meta, buffer.getvalue()
