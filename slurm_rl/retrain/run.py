"""One retrain, start to end: the logged window, calibration, the placement GP's refit,
fine-tuning (or a given candidate bundle), registration, the gate, and promotion.

Every run leaves a ``retrain_runs`` row and exactly one INFO/WARNING line saying how it
ended. Bad or thin logs skip the run; the active policy is never touched unless the gate
promotes the candidate, and then only while the version it was judged against is still the
active one (an admin may promote or roll back during the hours a retrain takes).
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from slurm_rl.agents.names import is_learned
from slurm_rl.errors import SlurmRLError
from slurm_rl.paths import default_bundle_path
from slurm_rl.retrain.calibrate import Calibration, calibrate
from slurm_rl.retrain.finetune import FinetuneSettings, finetune
from slurm_rl.retrain.gate import GateSettings, PolicyRef, Verdict, judge
from slurm_rl.retrain.window import LoggedWindow, RetrainSkipped, check_schema, load_window
from slurm_rl.store.registry import ActiveVersionChanged, ModelRegistry, Window, version_label
from slurm_rl.store.registry_models import ModelVersionRow, RetrainRunRow
from slurm_rl.store.repository import make_engine

log = logging.getLogger("slurm_rl.retrain")
LEARNED = "rl+rl"


@dataclass(frozen=True)
class RetrainSettings:
    window_days: float = 7.0
    cluster: str | None = None
    repeats: int = 8  # spans of the logged window in the training trace
    finetune: FinetuneSettings = field(default_factory=FinetuneSettings)
    gate: GateSettings = field(default_factory=GateSettings)
    policy: str = "fifo+best-fit"  # the daemon's configured policy: current when none is active
    policy_bundle: Path | None = None
    base_bundle: Path | None = None  # fine-tune from this instead of the current policy's
    candidate: Path | None = None  # judge this bundle; no fine-tuning
    cache_dir: Path = Path("/var/lib/slurm-rl/models")
    promote: bool = True  # False: register and judge, never activate
    lease_s: float = 6 * 3600.0  # a run younger than this still "running" blocks another


@dataclass(frozen=True)
class RetrainResult:
    status: str  # skipped, promoted, rejected, failed
    message: str
    version: int | None = None
    verdict: Verdict | None = None


class RetrainStopped(SlurmRLError):
    """The retrain process was asked to stop (SIGTERM: the daemon stopping, systemd): the
    run ends ``failed`` and marks its own row, whose lease would else block the next runs."""


def retrain(store_url: str, settings: RetrainSettings, *, now: float | None = None,
            engine: Engine | None = None,
            say: Callable[[RetrainResult], None] | None = None) -> RetrainResult:
    """Runs one retrain against the store at ``store_url``; never raises for bad logs. The
    outcome's one line goes to ``say`` (default: this module's logger)."""
    result = _retrain_once(store_url, settings, now, engine)
    (say or _log)(result)
    return result


def _retrain_once(store_url: str, settings: RetrainSettings, now: float | None,
                  engine: Engine | None) -> RetrainResult:
    engine = engine or make_engine(store_url)
    try:
        check_schema(engine)
    except RetrainSkipped as exc:
        return RetrainResult("skipped", f"retrain skipped: {exc}; the active policy stays")
    run_id = _start_run(engine, settings.lease_s)
    if run_id is None:
        return RetrainResult("skipped", "retrain skipped: another retrain is running "
                             "(a retrain_runs row younger than its lease)")
    try:
        result = _retrain(engine, settings, time.time() if now is None else now, run_id)
    except RetrainSkipped as exc:
        result = RetrainResult("skipped", f"retrain skipped: {exc}; the active policy stays")
    except SlurmRLError as exc:
        result = RetrainResult("failed", f"retrain failed: {exc}; the active policy stays")
    except Exception as exc:  # a bug: record it, keep the traceback in the log
        log.exception("retrain failed")
        result = RetrainResult("failed", f"retrain failed: {type(exc).__name__}: {exc}; "
                               "the active policy stays")
    _finish_run(engine, run_id, result)
    return result


def _log(result: RetrainResult) -> None:
    level = logging.WARNING if result.status in ("skipped", "failed") else logging.INFO
    log.log(level, "%s", result.message)


def _retrain(engine: Engine, settings: RetrainSettings, now: float,
             run_id: int) -> RetrainResult:
    window = load_window(engine, settings.cluster, settings.window_days, now)
    registry = ModelRegistry(engine)
    current, current_version = current_policy(registry, settings)
    with tempfile.TemporaryDirectory(prefix="slurm-rl-retrain-") as tmp:
        work = Path(tmp)
        calibration = calibrate(window, work / "scenario", repeats=settings.repeats,
                                seed=settings.finetune.seed)
        candidate, source = _candidate(settings, current, calibration, window, work)
        about = _about(window, calibration)
        version = registry.register(
            LEARNED, bundle=candidate, source=source, base_version=current_version,
            metrics={"calibration": about},
            window=Window(window.start, window.end, len(window.jobs)))
        _note_candidate(engine, run_id, version)
        verdict = judge(PolicyRef(LEARNED, candidate, f"v{version}"), current, calibration,
                        settings.gate)
    metrics = {"calibration": about, "gate": verdict.as_dict()}
    _set_metrics(registry, version, metrics)
    if verdict.promote and settings.promote:
        try:
            registry.promote(version, note=verdict.line(), expected_active=current_version)
        except ActiveVersionChanged as exc:
            return _not_promoted(registry, version, verdict, _changed_meanwhile(exc))
        return RetrainResult("promoted", f"retrain: v{version} promoted: {verdict.line()}",
                             version, verdict)
    return _not_promoted(registry, version, verdict, verdict.line())


def _not_promoted(registry: ModelRegistry, version: int, verdict: Verdict,
                  why: str) -> RetrainResult:
    """The candidate stays registered as ``rejected``, with ``why`` as its note."""
    registry.set_status(version, "rejected", why)
    return RetrainResult("rejected", f"retrain: v{version} registered, not promoted: {why}",
                         version, verdict)


def _changed_meanwhile(exc: ActiveVersionChanged) -> str:
    """Why a candidate the gate preferred is not promoted: it was compared with a version
    that is no longer active, and says nothing about the one that is."""
    return (f"the active version changed from {version_label(exc.expected)} to "
            f"{version_label(exc.found)} while it was judged: not promoted")


def current_policy(registry: ModelRegistry,
                   settings: RetrainSettings) -> tuple[PolicyRef, int | None]:
    """The active version, or the daemon's configured policy when none is active."""
    active = registry.active()
    if active is None:
        bundle = settings.policy_bundle if is_learned(settings.policy) else None
        return PolicyRef(settings.policy, bundle, f"{settings.policy} (configured)"), None
    bundle = registry.materialize(active.version, settings.cache_dir) if active.has_bundle \
        else None
    return PolicyRef(active.policy, bundle, f"v{active.version}"), active.version


def _candidate(settings: RetrainSettings, current: PolicyRef, calibration: Calibration,
               window: LoggedWindow, work: Path) -> tuple[Path, str]:
    if settings.candidate is not None:
        return settings.candidate, "given"
    base = settings.base_bundle or current.bundle or settings.policy_bundle \
        or default_bundle_path()
    extra = {"window": [window.start, window.end], "jobs": len(window.jobs),
             "cluster": window.cluster}
    path, _ = finetune(base, calibration, work / "candidate", settings.finetune, extra,
                       calibration.gp_hyperparameters)
    return path, "retrain"


def _about(window: LoggedWindow, calibration: Calibration) -> dict[str, Any]:
    return {"cluster": window.cluster, "jobs": len(window.jobs),
            "nodes": len(window.nodes), "reference_gpu": calibration.reference_gpu,
            "median_runtime_s": round(window.median_runtime, 3),
            "stragglers": calibration.stragglers, "gp_readings": calibration.readings,
            "gp_nll": None if calibration.gp_loss != calibration.gp_loss
            else round(calibration.gp_loss, 4),
            "node_speed": {k: round(v, 4) for k, v in calibration.node_speed.items()}}


def _set_metrics(registry: ModelRegistry, version: int, metrics: dict[str, Any]) -> None:
    with Session(registry.engine) as session, session.begin():
        row = session.get(ModelVersionRow, version)
        assert row is not None
        row.metrics = metrics


# ----- the runs table (one run at a time across every process sharing the store) ----------


def _start_run(engine: Engine, lease_s: float) -> int | None:
    """This run's row, or None (and a ``skipped`` row) when another run holds the lease.

    The row is inserted before the others are read: on SQLite the insert takes the write
    lock, so of two runs starting together the second sees the first; PostgreSQL's read
    committed would let both miss each other, so there the table is locked first."""
    started = datetime.now(UTC)
    with Session(engine) as session, session.begin():
        if engine.dialect.name == "postgresql":
            session.execute(text("LOCK TABLE retrain_runs IN SHARE ROW EXCLUSIVE MODE"))
        mine = RetrainRunRow(started_at=started, status="running", message="",
                             host=socket.gethostname(), pid=os.getpid())
        session.add(mine)
        session.flush()
        cutoff = started - timedelta(seconds=lease_s)
        others = session.scalars(select(RetrainRunRow).where(
            RetrainRunRow.status == "running", RetrainRunRow.id != mine.id)).all()
        if any(_aware(row.started_at) > cutoff for row in others):
            mine.status, mine.finished_at = "skipped", started
            mine.message = "another retrain is running"
            return None
        for row in others:  # older than the lease: that process died
            row.status, row.message = "failed", "abandoned (lease expired)"
            _retire_candidate(session, row.candidate_version, "abandoned",
                              f"retrain run {row.id} stopped before judging it (lease expired)")
        return mine.id


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _note_candidate(engine: Engine, run_id: int, version: int) -> None:
    """The run's candidate, as soon as it is registered: a run that fails or dies before its
    verdict can then mark it, and ``models list`` does not offer it as an untried candidate."""
    with Session(engine) as session, session.begin():
        session.execute(update(RetrainRunRow).where(RetrainRunRow.id == run_id)
                        .values(candidate_version=version))


def _finish_run(engine: Engine, run_id: int, result: RetrainResult) -> None:
    with Session(engine) as session, session.begin():
        run = session.get(RetrainRunRow, run_id)
        assert run is not None
        run.finished_at, run.status, run.message = datetime.now(UTC), result.status, \
            result.message
        if result.version is not None:
            run.candidate_version = result.version
        if result.status == "failed":
            _retire_candidate(session, run.candidate_version, "failed", result.message)


def _retire_candidate(session: Session, version: int | None, status: str, why: str) -> None:
    """A run's candidate that never got a verdict: ``status`` (failed, abandoned) instead of
    ``candidate``, with ``why`` as its note."""
    row = session.get(ModelVersionRow, version) if version is not None else None
    if row is not None and row.status == "candidate" and not row.active:
        row.status, row.note = status, why
