"""The daemon: the shared decision loop against a live Slurm, one cycle every ``interval_s``.

Each cycle is ``run_cycle(SlurmSource, Scheduler, SlurmActuator, StoreRecorder)``, the same
loop the simulator runs. A cycle is *healthy* when Slurm answered, the decision was applied
and the store took it; only then is the heartbeat written, so a daemon that cannot do its job
stops the job_submit plugin from deferring new jobs (fail-open). An unhealthy cycle is
skipped with one log line and the next one starts on time; nothing already stored is touched.

Signals: SIGTERM/SIGINT finish the current cycle, flush the store and exit 0 (the heartbeat
is retired, so new jobs are not deferred any more); SIGHUP reloads the config, and with it
the policy, at the next cycle boundary. A config that fails to load keeps the running one.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TypeVar

from alembic.util import CommandError
from sqlalchemy.exc import SQLAlchemyError

from slurm_rl.config import DaemonConfig
from slurm_rl.daemon.accounting import AccountingReader
from slurm_rl.daemon.guard import GuardedScheduler
from slurm_rl.daemon.heartbeat import FileHeartbeat, Heartbeat
from slurm_rl.daemon.history import PrimedScheduler, stored_history
from slurm_rl.daemon.jobcomp import JobcompLog
from slurm_rl.daemon.recorder import CycleSummary, StoreRecorder, log_cycle
from slurm_rl.daemon.waker import Waker
from slurm_rl.errors import SlurmRLError
from slurm_rl.live_policy import (
    FALLBACK_POLICY,
    PolicyBundleError,
    dispatch_mismatch,
    is_learned,
    make_policy,
)
from slurm_rl.loop import DecisionMaker, run_cycle
from slurm_rl.ops.prometheus import DaemonMetrics, error_kind, model_version
from slurm_rl.retrain.follow import ModelFollower
from slurm_rl.retrain.schedule import (
    RetrainProcesses,
    RetrainSchedule,
    schedule_settings,
    start_schedule,
)
from slurm_rl.safefile import UnsafePathError, require_private_dir
from slurm_rl.slurm import deferral
from slurm_rl.slurm.actuator import PriorityRecall, SlurmActuator
from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.layouts import start_line
from slurm_rl.slurm.ownership import Recall, pin_ledger
from slurm_rl.slurm.proc import Runner, make_runner
from slurm_rl.slurm.source import SlurmSource, SlurmState, SourceConfig
from slurm_rl.store.exclusions import last_exclusions, last_pins, recent_priority_changes
from slurm_rl.store.journal import StoreJournal
from slurm_rl.store.repository import Store, shown_url

log = logging.getLogger("slurm_rl.daemon")

ConfigLoader = Callable[[], DaemonConfig]
HeartbeatFactory = Callable[[DaemonConfig], Heartbeat]
# What the daemon last set on jobs, from its store (slurm_rl/store/exclusions.py).
LastValues = Callable[[Store, str, Sequence[str]], dict[str, str]]
LastQuery = Callable[[], SlurmState | None]  # the Slurm state of the source's last query
_T = TypeVar("_T")


class DaemonError(SlurmRLError):
    """The daemon cannot start or reload (store, state directory, plugin config)."""


def file_heartbeat(config: DaemonConfig) -> Heartbeat:
    return FileHeartbeat(config.heartbeat)


def check_private_dirs(config: DaemonConfig) -> None:
    """The directories whose files the daemon trusts (its state, the heartbeat the plugin
    reads) are its own: nobody else may replace a file there (slurm_rl/safefile.py)."""
    places = [("state directory", config.state_dir)]
    if config.changes_slurm:
        places.append(("heartbeat directory", config.heartbeat.parent))
    for what, path in places:
        try:
            require_private_dir(path, what)
        except UnsafePathError as exc:
            raise DaemonError(str(exc)) from None


def one_line(error: BaseException) -> str:
    """The first line of an error (SQLAlchemy's carry the SQL and a link on later lines, and
    an autoflush note before the database's own message, which is what an operator needs)."""
    orig = getattr(error, "orig", None)
    if orig is not None:
        cls = type(orig)
        return f"({cls.__module__}.{cls.__name__}) {one_line(orig)}"
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside a cycle. Decoding squeue's JSON creates about a
    hundred objects per job field; collections triggered by that allocation halve the speed
    of a large cycle, yet the cycle's garbage is acyclic and freed by reference counting.
    The collector runs again between cycles."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@dataclass(frozen=True, slots=True)
class CycleResult:
    ok: bool
    duration_s: float
    summary: CycleSummary | None = None
    error: str = ""


@dataclass(frozen=True)
class Parts:
    """Everything built from one config; a reload builds a new set and swaps it in whole."""

    config: DaemonConfig
    source: SlurmSource
    scheduler: DecisionMaker
    actuator: SlurmActuator
    heartbeat: Heartbeat
    model_version: str = "builtin"  # for the active-model metric
    accounting: AccountingReader | None = None  # outcomes from sacct, when turned on


class Daemon:
    """Builds the live loop from a config and runs it.

    ``load`` returns the config (called again on SIGHUP); ``runner`` is the subprocess
    boundary for every Slurm command (default: the real commands with ``SLURM_CONF`` from
    the config); ``heartbeat`` makes the heartbeat a config asks for; ``on_config`` sees
    every config that takes effect (the CLI sets the log level there).
    """

    def __init__(
        self,
        load: ConfigLoader,
        *,
        runner: Runner | None = None,
        heartbeat: HeartbeatFactory = file_heartbeat,
        on_config: Callable[[DaemonConfig], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._load = load
        self._runner = runner
        self._heartbeat_factory = heartbeat
        self._on_config = on_config
        self._clock = clock
        self._stop = False
        self._reload = False
        self._plugin_conf: str | None = None
        self.cycles = 0
        self.metrics = DaemonMetrics()
        config = load()
        parts = self._build_or_fall_back(config)  # a bad name fails before anything is made
        self.store = self._open_store(config)
        self.recorder = StoreRecorder(self.store, config.recorded_mode)
        try:
            self._commit(parts, previous=None)
        except BaseException:
            self.store.engine.dispose()
            raise
        self._waker = Waker()
        # Retraining (docs/retraining.md): the registry's active version, and the schedule.
        self._base_config = config
        self.models = ModelFollower(self.store.engine) if config.models_follow else None
        self.schedule: RetrainSchedule | None = None  # retraining and retention, in run()
        self._retrains = RetrainProcesses()  # every schedule's, ended by close()
        self._looping = False  # run() owns the schedule and the metrics endpoint
        self._services: DaemonConfig | None = None  # the config they were started with
        if self.models is not None:
            self.models.seen = None  # the parts above run the configured policy
            self.follow_models()

    @property
    def config(self) -> DaemonConfig:
        return self.parts.config

    # -- building ------------------------------------------------------------------------

    def _build_or_fall_back(self, config: DaemonConfig) -> Parts:
        """At start-up, a learned policy whose bundle cannot be used gives way to a baseline
        (scheduling goes on; the store records which policy decided)."""
        try:
            return self._build(config)
        except PolicyBundleError as exc:
            log.warning("%s; running %s instead", exc, FALLBACK_POLICY)
            return self._build(config.model_copy(update={"policy": FALLBACK_POLICY}))

    def _build(self, config: DaemonConfig) -> Parts:
        check_private_dirs(config)
        policy = make_policy(config.policy, seed=config.seed, bundle=config.policy_bundle,
                             rules=config.ranking_rules)
        mismatch = dispatch_mismatch(config.policy, config.policy_bundle, config.dispatch)
        if mismatch:
            log.warning("%s", mismatch)
        history = (stored_history(lambda: self.store, config.history_days)
                   if config.history_days > 0 else None)
        scheduler = GuardedScheduler(PrimedScheduler(policy, history),
                                     allow_mixed_gpu_types=config.allow_mixed_gpu_types,
                                     hold_refused=config.dispatch)
        env = {"SLURM_CONF": str(config.slurm_conf)} if config.slurm_conf else None
        runner = self._runner or make_runner(env)
        client = CliSlurmClient(runner=runner, timeout_s=config.slurm_timeout_s)
        source_config = SourceConfig(
            config.partitions, config.cluster_name, dict(config.price_per_gpu_hour),
            config.defer_cap_s,
        )

        def last_query() -> SlurmState | None:
            # The source built below: the store is asked only after one of its queries.
            return source.last_state

        # One ledger of the daemon's own pins, given to both: the source sets aside the jobs
        # someone else pinned, the actuator records the pins it sets.
        pins = pin_ledger(self._recall_for(last_query, last_pins, "pins"))
        source = SlurmSource(client, source_config, clock=self._clock, pins=pins)
        actuator = SlurmActuator(client, config.actuator_config, clock=self._clock,
                                 recall=self._recall_for(last_query, last_exclusions,
                                                         "exclusions"),
                                 pins=pins, journal=StoreJournal(lambda: self.store),
                                 priority_recall=self._priority_recall_for(last_query))
        heartbeat = self._heartbeat_factory(config)
        version = model_version(config.policy, config.policy_bundle, is_learned(config.policy))
        accounting = AccountingReader(
            runner, config.slurm_timeout_s, config.accounting_every_s,
            config.accounting_lookback_days * 86400.0, _shown_by(source),
        ) if config.accounting_outcomes else None
        return Parts(config, source, scheduler, actuator, heartbeat, version, accounting)

    def _recall_for(self, last_query: LastQuery, read: LastValues, what: str) -> Recall:
        """What the daemon set before a restart (its ``what``), from the store it records to
        (see slurm_rl/store/exclusions.py)."""
        return lambda job_ids: self._from_store(
            last_query, what, lambda store, cluster: read(store, cluster, job_ids))

    def _priority_recall_for(self, last_query: LastQuery) -> PriorityRecall:
        """The Priority changes this daemon sent before a restart (its hourly rate)."""
        return lambda job_ids, since: self._from_store(
            last_query, "priority changes",
            lambda store, cluster: recent_priority_changes(store, cluster, job_ids, since))

    def _from_store(self, last_query: LastQuery, what: str,
                    read: Callable[[Store, str], _T]) -> _T | None:
        """``read`` on the store for the cluster of the source's last query; None, and asked
        again next cycle, if it cannot say. ``self.store`` is read at each call: a reload may
        have opened another."""
        state = last_query()
        if state is None:
            return None
        try:
            return read(self.store, state.cluster)
        except SQLAlchemyError as exc:
            log.warning("cannot read the daemon's earlier %s from the store: %s", what,
                        one_line(exc))
            return None

    def _open_store(self, config: DaemonConfig) -> Store:
        check_private_dirs(config)
        try:
            if config.uses_state_dir:
                config.state_dir.mkdir(parents=True, exist_ok=True)
            return Store(config.store)
        except OSError as exc:
            raise DaemonError(f"cannot create the state directory {config.state_dir}: "
                              f"{exc.strerror}") from exc
        except (SQLAlchemyError, CommandError) as exc:  # CommandError: migrations not found
            raise DaemonError(f"cannot open the store {shown_url(config.store)}: "
                              f"{one_line(exc)}") from exc

    def _commit(self, parts: Parts, previous: Parts | None, store: Store | None = None) -> None:
        """Make ``parts`` (and ``store``, if new) the running set; the plugin config is
        written first, since it is the step that may fail."""
        config = parts.config
        if config.changes_slurm and config.plugin_conf_dir is not None:
            self._write_plugin_conf(config, config.plugin_conf_dir)
        if previous is not None and _beat_moves_away(previous.config, config):
            previous.heartbeat.retire()  # the old beat must not keep deferring jobs
        if store is not None:
            self.store = self.recorder.store = store
        if previous is not None:  # what the old actuator set stays its successor's
            parts.actuator.inherit(previous.actuator)
        self.recorder.mode = config.recorded_mode
        self.recorder.explainer = parts.scheduler
        self.metrics.set_model(config.policy, parts.model_version)
        if previous is None or previous.config.jobcomp_path != config.jobcomp_path:
            self.recorder.jobcomp = _jobcomp_log(config)
        # The new reader reads the new source; it keeps the old one's schedule and warning.
        old = self.recorder.accounting
        if old is not None and parts.accounting is not None:
            parts.accounting.clock_due, parts.accounting.warned = old.clock_due, old.warned
        self.recorder.accounting = parts.accounting
        self.parts = parts
        if self._on_config is not None:
            self._on_config(config)

    def _write_plugin_conf(self, config: DaemonConfig, conf_dir: Path) -> None:
        plugin = config.deferral
        text = plugin.render()
        if text == self._plugin_conf:
            return
        try:
            target = deferral.write_config(conf_dir, plugin)
        except OSError as exc:
            raise DaemonError(f"cannot write the job_submit plugin config in {conf_dir}: "
                              f"{exc.strerror}") from exc
        self._plugin_conf = text
        log.info("wrote %s", target)

    # -- cycles --------------------------------------------------------------------------

    def run_once(self) -> CycleResult:
        """One cycle; never raises for Slurm or store trouble (that cycle is skipped)."""
        started = time.monotonic()
        self.cycles += 1
        self.follow_models()
        parts = self.parts
        self.recorder.start_cycle()
        try:
            with paused_gc():
                run_cycle(parts.source, parts.scheduler, parts.actuator, self.recorder)
        except SlurmRLError as exc:
            return self._skipped(f"cycle skipped: {_flat(exc)}", started, error_kind(exc))
        except SQLAlchemyError as exc:
            # A connection that saw a disk I/O or read-only error may stay broken in SQLite;
            # the next cycle opens fresh ones.
            self.store.engine.dispose()
            return self._skipped(self._store_trouble() + one_line(exc), started, "store")
        except Exception as exc:  # a bug: keep serving, but with the traceback
            log.exception("cycle failed: %s", one_line(exc))
            took = time.monotonic() - started
            self.metrics.unhealthy("failed", took, None)
            return CycleResult(False, took, error=one_line(exc))
        return self._healthy(parts, started)

    def _store_trouble(self) -> str:
        kept = self.recorder.unrecorded_outcomes
        if self.recorder.cycle_stored:
            return f"outcomes not stored ({kept} kept for the next cycle): store error: "
        return f"cycle not recorded ({kept} outcomes kept for later): store error: "

    def _skipped(self, message: str, started: float, kind: str | None = None) -> CycleResult:
        log.warning("%s", message)
        took = time.monotonic() - started
        self.metrics.unhealthy("skipped", took, kind)
        return CycleResult(False, took, error=message)

    def _healthy(self, parts: Parts, started: float) -> CycleResult:
        if parts.config.changes_slurm:
            try:
                parts.heartbeat.beat(self._clock())
            except OSError as exc:
                return self._skipped(f"heartbeat not written: {exc}", started)
        duration = time.monotonic() - started
        summary = self.recorder.last
        if summary is not None:
            log_cycle(summary, parts.config.policy, parts.config.recorded_mode, duration)
            self.metrics.healthy(duration, self._clock(), summary.pending, summary.running,
                                 summary.actions, summary.job_errors,
                                 Counter(parts.source.set_aside.values()),
                                 summary.oldest_wait_s)
            self.metrics.fairness(parts.scheduler)
            self.metrics.actuation(summary.pinned_waiting, summary.pinned_oldest_s,
                                   summary.priority_withheld)
        return CycleResult(True, duration, summary)

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> int:
        """Cycle until SIGTERM/SIGINT (or :meth:`request_stop`); returns the exit status."""
        log.info("daemon started: policy %s, mode %s, every %g s, store %s; %s",
                 self.config.policy, self.config.recorded_mode, self.config.interval_s,
                 shown_url(self.config.store), start_line(self.parts.source.client))
        self._looping = True
        self._services = self._base_config
        self.schedule = start_schedule(self._base_config, self._retrains)
        self.metrics.serve(self.config.metrics_address, self.config.metrics_port)
        with self._signal_handlers():
            while not self._stop:
                if self._reload:
                    self.reload()
                    continue  # a stop may have come during the reload
                result = self.run_once()
                if not self._stop:
                    self._waker.sleep(self.config.interval_s - result.duration_s)
        log.info("daemon stopping after %d cycles", self.cycles)
        self.close()
        return 0

    def request_stop(self) -> None:
        self._stop = True
        self._waker.wake()

    def request_reload(self) -> None:
        self._reload = True
        self._waker.wake()

    def reload(self) -> bool:
        """Re-read the config and rebuild policy, source and actuator; False keeps the old."""
        self._reload = False
        old, old_store, old_base = self.parts, self.store, self._base_config
        seen = self.models.seen if self.models is not None else None
        store: Store | None = None
        try:
            config = self._base_config = self._load()
            if self.models is not None and config.models_follow:
                self.models.forget()
                config = self.models.effective(config)
            parts = self._build(config)
            if config.store != old.config.store:
                store = self._open_store(config)
            self._commit(parts, previous=old, store=store)
        except (SlurmRLError, SQLAlchemyError) as exc:  # SQLAlchemyError: the store is down
            if store is not None:
                store.engine.dispose()
            # Really keep it: else the next cycle's model check would build the new config.
            self._base_config = old_base
            if self.models is not None:
                self.models.seen = seen
            log.warning("reload failed, keeping the running config: %s",
                        one_line(exc) if isinstance(exc, SQLAlchemyError) else exc)
            return False
        self._follow_after_reload(store is not None)
        self._restart_services(self._base_config)
        if store is not None:
            self._flush_quietly()  # outcomes kept for the old store go to the new one
            old_store.engine.dispose()
        log.info("reloaded config: policy %s, mode %s", config.policy, config.recorded_mode)
        return True

    def _restart_services(self, new: DaemonConfig) -> None:
        """A reload's retraining, retention and metrics settings take effect: the schedule
        is started afresh (its next run counts from now) and the endpoint moves, only when
        their settings differ from those they run with (not from the last config read: a
        reload that failed read one too)."""
        old = self._services
        if not self._looping or old is None:
            return
        self._services = new
        if schedule_settings(old) != schedule_settings(new):
            if self.schedule is not None:  # a running retrain finishes (close() ends it)
                self.schedule.shutdown(end_retrain=False)
            self.schedule = start_schedule(new, self._retrains)
        if (old.metrics_address, old.metrics_port) != (new.metrics_address, new.metrics_port):
            self.metrics.close()
            self.metrics.serve(new.metrics_address, new.metrics_port)

    def close(self, *, retire: bool = True) -> None:
        """Flush buffered outcomes, retire the heartbeat (if this run beats) and let go."""
        if self.schedule is not None:
            self.schedule.shutdown()
            self.schedule = None
        self._retrains.stop()  # else the exit waits for a retrain, up to retrain_timeout_s
        self._flush_quietly()
        if retire and self.config.changes_slurm:
            with contextlib.suppress(OSError):
                self.parts.heartbeat.retire()
        self.store.engine.dispose()
        self.metrics.close()
        self._waker.close()

    def _flush_quietly(self) -> None:
        try:
            self.recorder.flush()
        except SQLAlchemyError as exc:
            kept = self.recorder.unrecorded_outcomes
            log.warning("%d outcomes could not be stored: %s", kept, one_line(exc))

    @contextlib.contextmanager
    def _signal_handlers(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # only the main thread may take signals; callers use request_stop()
            return
        wanted = {signal.SIGTERM: self._on_stop, signal.SIGINT: self._on_stop,
                  signal.SIGHUP: self._on_hup}
        previous = {sig: signal.signal(sig, handler) for sig, handler in wanted.items()}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _follow_after_reload(self, new_store: bool) -> None:
        if not self._base_config.models_follow:
            self.models = None
        elif self.models is None or new_store:  # resolved against this store next cycle
            self.models = ModelFollower(self.store.engine)
        else:
            self.models.committed()

    def follow_models(self) -> bool:
        """Switch to the registry's active version when it changed (each cycle's start; a
        version that cannot be used is logged once and the running policy stays)."""
        if self.models is None or not self.models.changed():
            return False
        try:
            config = self.models.effective(self._base_config)
            self._commit(self._build(config), previous=self.parts)
        except Exception as exc:  # it runs outside the cycle's handling: never end the daemon
            self.models.committed()  # not retried every cycle; a new version or SIGHUP will
            known = isinstance(exc, SlurmRLError | SQLAlchemyError)  # else a bug: the trace
            log.warning("model version %s not taken, keeping policy %s: %s",
                        self.models.pending, self.config.policy, one_line(exc),
                        exc_info=not known)
            return False
        self.models.committed()
        if self.models.pending is not None:  # the metric names the registry's version too
            self.metrics.set_model(config.policy,
                                   f"registry-{self.models.pending}/{self.parts.model_version}")
        log.info("model version %s active: policy %s%s", self.models.pending or "none",
                 config.policy, f" ({config.policy_bundle})" if config.policy_bundle else "")
        return True

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.request_stop()

    def _on_hup(self, signum: int, frame: FrameType | None) -> None:
        self.request_reload()


def _flat(error: BaseException) -> str:
    """An error on one line: Slurm's stderr may span several, a job name may hold a newline."""
    return " ".join(str(error).split())


def _shown_by(source: SlurmSource) -> Callable[[], set[str]]:
    """The ids of every job squeue showed at the source's last query."""
    def shown() -> set[str]:
        state = source.last_state
        return {job.job_id for job in state.jobs.jobs} if state is not None else set()
    return shown


def _jobcomp_log(config: DaemonConfig) -> JobcompLog | None:
    if config.jobcomp_path is None:
        return None
    return JobcompLog(config.jobcomp_path, config.jobcomp_position)


def _beat_moves_away(old: DaemonConfig, new: DaemonConfig) -> bool:
    """True when the old config beat a heartbeat that the new one no longer writes."""
    if not old.changes_slurm:
        return False
    return not new.changes_slurm or old.heartbeat != new.heartbeat
