"""The model registry: policy versions in the store, which one is active, and its history.

A version holds its bundle (``meta.json`` as JSON, ``weights.pt`` as bytes) or, for a
baseline, only a policy name. Exactly one version is active at a time (or none: the daemon
then runs its configured policy). Promote and rollback are one transaction each, serialised
across every process sharing the store, and append an event, so ``rollback`` restores
whatever was active before the current version, and every daemon sharing the store sees the
change at its next cycle. A promotion may name the version it expects to replace (a retrain:
the version its candidate was judged against) and is refused when another is active.
"""

from __future__ import annotations

import contextlib
import enum
import io
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from sqlalchemy import false, func, select, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from slurm_rl.errors import InputError, SlurmRLError
from slurm_rl.safefile import UnsafePathError, require_private_dir, write_atomic
from slurm_rl.store.registry_models import ModelEventRow, ModelVersionRow

META_FILE = "meta.json"
WEIGHTS_FILE = "weights.pt"
log = logging.getLogger("slurm_rl.store")


class _Unchecked(enum.Enum):
    ANY = "any"


#: ``promote(..., expected_active=ANY_ACTIVE)``: replace whatever is active (an admin's choice).
ANY_ACTIVE: Final = _Unchecked.ANY


def version_label(version: int | None) -> str:
    return f"v{version}" if version is not None else "none"


class ActiveVersionChanged(SlurmRLError):
    """A promotion expected another version to be active (it was changed meanwhile)."""

    def __init__(self, expected: int | None, found: int | None) -> None:
        self.expected, self.found = expected, found
        super().__init__(f"the active version is {version_label(found)}, not "
                         f"{version_label(expected)}")


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

    def promote(self, version: int, note: str = "", *,
                expected_active: int | None | Literal[_Unchecked.ANY] = ANY_ACTIVE,
                ) -> int | None:
        """Make ``version`` the active one; returns the version active before (or None).
        With ``expected_active`` (a version, or None for none) the promotion happens only
        while that one is active, checked in the same transaction; otherwise
        :class:`ActiveVersionChanged` and nothing changes."""
        with self._sessions.begin() as session:
            self._lock_activation(session)
            row = self._row(session, version)
            previous = self._active_number(session)
            if expected_active is not ANY_ACTIVE and previous != expected_active:
                raise ActiveVersionChanged(expected_active, previous)
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
            self._lock_activation(session)
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
        """The version's bundle as a directory under ``cache_dir`` (written atomically: a
        half-written bundle is never seen by a loading daemon). The cache must be the
        daemon's own (:func:`require_private_dir`): a bundle someone else put there, or a
        link they planted, would be loaded as the active version.

        A copy already there is compared with the row's bytes on every call, and unpacked
        again when it differs: version numbers restart at 1 in a recreated store or a new
        database (SQLite to PostgreSQL), so ``v1`` may be another store's v1, and a crash
        may have left a damaged copy. Reading the row's bundle is cheap enough here: the
        daemon calls this only when the active version changes or at a reload, a retrain
        once, never every cycle."""
        require_private_dir(cache_dir, "models cache")
        target = cache_dir / f"v{version}"
        if target.is_symlink():
            raise UnsafePathError(f"models cache entry {target} is a symbolic link; fix: "
                                  "remove it (the daemon writes it again)")
        files = self._bundle_files(version)
        if _holds(target, files):
            return target
        cache_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=cache_dir, prefix=f".v{version}."))  # random, 0700
        try:
            for name, content in files.items():
                write_atomic(staging / name, content)
        except BaseException:  # a full disk: every try would leave another staging folder
            shutil.rmtree(staging, ignore_errors=True)
            raise
        _install(staging, target, files)
        return target

    def _bundle_files(self, version: int) -> dict[str, bytes]:
        """The version's bundle files as the cache holds them (name: bytes)."""
        with self._sessions() as session:
            row = self._row(session, version)
            if row.meta is None or row.weights is None:
                raise InputError(f"model version {version} ({row.policy}) has no bundle")
            meta = json.dumps(row.meta, indent=2, sort_keys=True) + "\n"
            return {META_FILE: meta.encode(), WEIGHTS_FILE: bytes(row.weights)}

    def _row(self, session: Session, version: int) -> ModelVersionRow:
        row = session.get(ModelVersionRow, version)
        if row is None:
            known = ", ".join(str(v) for v in session.scalars(select(ModelVersionRow.version)))
            raise InputError(f"no model version {version} (known: {known or 'none'})")
        return row

    @staticmethod
    def _active_number(session: Session) -> int | None:
        return session.scalar(select(ModelVersionRow.version).where(ModelVersionRow.active))

    @staticmethod
    def _lock_activation(session: Session) -> None:
        """Serialise changes of the active version across processes; first in the
        transaction, so that the active version it then reads is the latest committed.

        Without it PostgreSQL's read committed lets two promotions each read v1 active, each
        clear it and set their own: two versions active. The table lock conflicts with
        itself, not with the daemons' reads. On SQLite a write statement (matching no row)
        takes the database's write lock, waiting the busy timeout for another's commit."""
        if session.get_bind().dialect.name == "postgresql":
            session.execute(text("LOCK TABLE model_versions IN SHARE ROW EXCLUSIVE MODE"))
        else:
            session.execute(update(ModelVersionRow).where(false()).values(active=False))


def _event(action: str, version: int | None, previous: int | None, note: str) -> ModelEventRow:
    return ModelEventRow(at=datetime.now(UTC), action=action, version=version,
                         previous=previous, note=note)


def _holds(target: Path, files: Mapping[str, bytes]) -> bool:
    """Whether the cache entry ``target`` holds exactly these files' bytes."""
    try:
        return all((target / name).read_bytes() == content for name, content in files.items())
    except OSError:  # missing, not a directory, unreadable: unpacked again
        return False


def _install(staging: Path, target: Path, files: Mapping[str, bytes]) -> None:
    """Move the unpacked ``staging`` to ``target``. A copy there that differs (another
    store's version of that number, or damaged) is moved aside first; one another process
    unpacked from the same bytes meanwhile is kept."""
    for _ in range(3):  # another process may be replacing the same entry
        try:
            staging.rename(target)
            return
        except OSError:
            if _holds(target, files):
                shutil.rmtree(staging, ignore_errors=True)
                return
        log.warning("models cache entry %s differs from the store's bundle of that version "
                    "(another store's version, or damaged): unpacked again", target)
        _move_aside(target)
    shutil.rmtree(staging, ignore_errors=True)
    raise UnsafePathError(f"models cache entry {target} could not be replaced; fix: remove it "
                          "(the daemon writes it again)")


def _move_aside(target: Path) -> None:
    if not target.is_dir() or target.is_symlink():
        target.unlink(missing_ok=True)
        return
    aside = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.old."))
    with contextlib.suppress(FileNotFoundError):  # another process moved it first
        os.replace(target, aside)  # a directory onto an empty one: one step
    shutil.rmtree(aside, ignore_errors=True)


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
