"""Prometheus metrics of the daemon, served on 127.0.0.1 only (``metrics_port``; 0 = off).

Each daemon owns its :class:`CollectorRegistry`, so tests (and a reload) never collide with
another daemon's metrics in the same process. Names follow Prometheus conventions:

* ``slurm_rl_cycle_duration_seconds`` (histogram) and ``slurm_rl_cycles_total{result}``
  (healthy, skipped, failed);
* ``slurm_rl_decisions_total{action}``: decision rows stored, by action;
* ``slurm_rl_slurm_errors_total{kind}``: Slurm calls that failed (timeout, unreachable,
  output, command; per-job scontrol answers: vanished, permission, rejected);
* ``slurm_rl_pending_jobs``, ``slurm_rl_running_jobs`` (gauges, from the last healthy cycle);
* ``slurm_rl_oldest_pending_wait_seconds``: how long the longest-waiting job slurm-rl orders
  has been pending (alert on it: a learned ordering can starve jobs; the ordering agent's
  guard puts a job first after 168 h, docs/ordering-agent.md);
* ``slurm_rl_fairness_jain_index`` and ``slurm_rl_fairness_wait_ratio``: Jain's index and
  the max/mean ratio of the waiting users' mean waits in the last healthy cycle (1 and 1 when
  even, or fewer than two users wait; slurm_rl/fairness.py), and
  ``slurm_rl_fairness_reranked_cycles_total``: healthy cycles whose ranking the fairness
  guard re-ranked;
* ``slurm_rl_active_model_info{policy,version}`` (1 for what decides now);
* ``slurm_rl_last_healthy_cycle_timestamp_seconds``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from slurm_rl.fairness import Reranking, find_reranking
from slurm_rl.paths import default_bundle_path
from slurm_rl.slurm import errors
from slurm_rl.slurm.waiting import WAIT_KINDS

log = logging.getLogger("slurm_rl.daemon")

BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def model_version(policy: str, bundle: Path | None, learned: bool) -> str:
    """``builtin`` for baselines; for a learned policy, the bundle's weights digest (12 hex),
    so a retrain that goes live by SIGHUP shows as a new version."""
    if not learned:
        return "builtin"
    weights = (bundle or default_bundle_path()) / "weights.pt"
    try:
        digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:12]
    except OSError:
        return "unreadable"
    return f"sha256:{digest}"


class DaemonMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.cycle_duration = Histogram(
            "slurm_rl_cycle_duration_seconds", "Wall time of one daemon cycle",
            buckets=BUCKETS, registry=r)
        self.cycles = Counter("slurm_rl_cycles", "Daemon cycles by result", ["result"],
                              registry=r)
        self.decisions = Counter("slurm_rl_decisions", "Decision rows stored, by action",
                                 ["action"], registry=r)
        self.slurm_errors = Counter("slurm_rl_slurm_errors", "Failed Slurm calls, by kind",
                                    ["kind"], registry=r)
        self.pending = Gauge("slurm_rl_pending_jobs", "Pending jobs in managed partitions",
                             registry=r)
        self.set_aside = Gauge("slurm_rl_set_aside_jobs", "Pending jobs left to Slurm while "
                               "they wait on a hold, dependency, begin time or limit",
                               ["waits_on"], registry=r)
        self.running = Gauge("slurm_rl_running_jobs", "Running jobs in managed partitions",
                             registry=r)
        self.oldest_wait = Gauge("slurm_rl_oldest_pending_wait_seconds", "How long the "
                                 "longest-waiting pending job slurm-rl orders has waited",
                                 registry=r)
        self.jain_index = Gauge("slurm_rl_fairness_jain_index", "Jain's index of the "
                                "waiting users' mean waits (1 = even)", registry=r)
        self.wait_ratio = Gauge("slurm_rl_fairness_wait_ratio", "The most-waiting user's "
                                "mean wait over the waiting users' average (1 = even)",
                                registry=r)
        self.reranked = Counter("slurm_rl_fairness_reranked_cycles", "Healthy cycles the "
                                "fairness guard re-ranked", registry=r)
        self._counted: Reranking | None = None  # the re-ranking last counted, counted once
        self.pinned_waiting = Gauge("slurm_rl_pinned_not_started_jobs", "Pending jobs holding "
                                    "a pin an earlier cycle set (placed, not started)",
                                    registry=r)
        self.pinned_oldest = Gauge("slurm_rl_pinned_not_started_oldest_seconds", "How long "
                                   "the longest-waiting of them has held its pin", registry=r)
        self.priority_held = Counter("slurm_rl_priority_changes_held", "Priority changes the "
                                     "churn limits held back, by limit", ["limit"], registry=r)
        self.model = Gauge("slurm_rl_active_model_info", "The policy (and bundle version) "
                           "that decides now", ["policy", "version"], registry=r)
        self.last_healthy = Gauge("slurm_rl_last_healthy_cycle_timestamp_seconds",
                                  "Unix time of the last healthy cycle", registry=r)
        self._server: Any = None

    def serve(self, address: str, port: int) -> None:
        """Start the HTTP endpoint (a daemon thread); a busy port is one warning, no exit:
        metrics must never stop scheduling."""
        if port == 0 or self._server is not None:
            return
        try:
            self._server, _ = start_http_server(port, addr=address, registry=self.registry)
        except OSError as exc:
            log.warning("metrics not served on %s:%d: %s", address, port, exc.strerror)
            return
        log.info("metrics on http://%s:%d/metrics", address, port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def set_model(self, policy: str, version: str) -> None:
        self.model.clear()
        self.model.labels(policy=policy, version=version).set(1)

    def healthy(self, duration_s: float, now: float, pending: int, running: int,
                actions: Mapping[str, int], job_errors: Mapping[str, int],
                set_aside: Mapping[str, int] | None = None, oldest_wait_s: float = 0.0) -> None:
        self.cycles.labels(result="healthy").inc()
        self.cycle_duration.observe(duration_s)
        self.pending.set(pending)
        self.oldest_wait.set(oldest_wait_s)
        for kind in WAIT_KINDS:
            self.set_aside.labels(waits_on=kind).set((set_aside or {}).get(kind, 0))
        self.running.set(running)
        self.last_healthy.set(now)
        for action, count in actions.items():
            self.decisions.labels(action=action).inc(count)
        for kind, count in job_errors.items():
            self.slurm_errors.labels(kind=kind).inc(count)

    def actuation(self, pinned_waiting: int, pinned_oldest_s: float,
                  priority_withheld: Mapping[str, int]) -> None:
        """Placed-not-started jobs and held-back priority changes of the last healthy cycle
        (slurm_rl/slurm/actuator.py)."""
        self.pinned_waiting.set(pinned_waiting)
        self.pinned_oldest.set(pinned_oldest_s)
        for limit, count in priority_withheld.items():
            self.priority_held.labels(limit=limit).inc(count)

    def fairness(self, decider: object) -> None:
        """The fairness figures of the decision ``decider`` made last (the daemon's
        scheduler, however wrapped: :func:`~slurm_rl.fairness.find_reranking`); nothing
        when it made none."""
        reranking = find_reranking(decider)
        if reranking is None:
            return
        self.jain_index.set(reranking.fairness.jain_index)
        self.wait_ratio.set(reranking.fairness.wait_ratio)
        if reranking.guard_applied and reranking is not self._counted:
            self.reranked.inc()
        self._counted = reranking

    def unhealthy(self, result: str, duration_s: float, error_kind: str | None) -> None:
        self.cycles.labels(result=result).inc()
        self.cycle_duration.observe(duration_s)
        if error_kind:
            self.slurm_errors.labels(kind=error_kind).inc()


def error_kind(error: BaseException) -> str | None:
    """The metric label of a skipped cycle's error (None when Slurm was not the cause)."""
    for cls, kind in ((errors.SlurmTimeoutError, "timeout"),
                      (errors.SlurmUnavailableError, "unreachable"),
                      (errors.SlurmOutputError, "output"),
                      (errors.SlurmCommandError, "command")):
        if isinstance(error, cls):
            return kind
    return None
