"""The discrete-event GPU cluster simulator.

Jobs arrive from a trace, wait, start as gangs on exact node sets, progress at the rate the
performance model gives (which changes when machines drift or neighbours come and go), and
finish once their work is done; fees accrue per GPU-second at each GPU type's price.

The engine exposes the two halves of the shared loop: :meth:`Simulation.next_snapshot` (advance
to the next decision point, return what a policy sees) and :meth:`Simulation.apply` (carry out a
decision). In ``direct`` mode a decision starts jobs on node sets at once; in ``slurm`` mode it
only sets priority order, required nodes and deferral, and :mod:`slurm_rl.simulator.slurm_emulation`
starts jobs as slurmctld would — exactly the levers the daemon has live.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from slurm_rl.core import (
    Cluster,
    ClusterSnapshot,
    Decision,
    FinishedJob,
    Job,
    JobId,
    Placement,
    RunningJob,
    SpeedObservation,
)
from slurm_rl.simulator.backfill import Candidates
from slurm_rl.simulator.columns import ArrivalColumns
from slurm_rl.simulator.holds import DeferralBook, HoldTimes, extensions
from slurm_rl.simulator.outcomes import JobOutcome, Timeline
from slurm_rl.simulator.sim_config import SimConfig
from slurm_rl.simulator.slurm_emulation import (
    RunningShape,
    SlurmJobState,
    capacity_outside,
    one_type_sizes,
    schedule_pass,
    valid_pin,
)
from slurm_rl.simulator.speed import SpeedModel

if TYPE_CHECKING:
    from slurm_rl.simulator.fluctuation import MachineFluctuation

_FINISH, _STEP, _EXPIRE, _TICK, _LEVERS = 0, 1, 2, 3, 4
# Held jobs get a decision this often when nothing changes (it sees the same queue and free
_REVIEW_S = 600.0  # GPUs, so it mostly renews holds; the daemon decides every cycle)


@dataclass(eq=False)
class _Run:
    """A running job's progress. Its rate is min_i(s_i·m_i) · shape · coloc (see speed.py);
    the parts are kept apart because each changes for a different reason."""

    job: Job
    nodes: tuple[int, ...]
    gpus: tuple[int, ...]
    start: float
    remaining: float
    record: RunningJob
    speeds: tuple[float, ...]
    shape: float
    coloc: float = 1.0
    health: float = 1.0
    rate: float = 0.0
    updated: float = 0.0
    version: int = 0

    def refresh_rate(self) -> bool:
        rate = min(self.speeds) * self.health * self.shape * self.coloc
        changed = rate != self.rate or self.version == 0
        self.rate = rate
        return changed


@dataclass(eq=False)
class _EarlierRuns:
    """What a migrated job's earlier runs used, so its outcome counts every run."""

    first_start: float
    fee: float = 0.0
    restarts: int = 0
    gpu_seconds: dict[str, float] = field(default_factory=dict)


class Simulation:
    """One replay of ``jobs`` (sorted by submit time) on ``cluster``."""

    def __init__(
        self,
        cluster: Cluster,
        jobs: Sequence[Job],
        speed: SpeedModel,
        fluctuation: MachineFluctuation | None = None,
        config: SimConfig | None = None,
    ) -> None:
        self.cluster = cluster
        self.config = config or SimConfig()
        self._speed = speed
        self._fluctuation = fluctuation
        self._arrivals = list(jobs)
        self._next_arrival = 0
        self._columns = ArrivalColumns(self._arrivals)
        self.origin = self._arrivals[0].submit_time if self._arrivals else 0.0
        self.now = self.origin
        self._free = [node.gpus for node in cluster.nodes]
        self._node_jobs: list[set[JobId]] = [set() for _ in cluster.nodes]
        self._pending: dict[JobId, Job] = {}
        # Slurm's scheduler only has something new to try after GPUs free up, a deferral ends
        # or the daemon changes its levers; other events are skipped.
        self._slurm_dirty = False
        self._running: dict[JobId, _Run] = {}
        self._running_records: dict[JobId, RunningJob] = {}
        self._earlier: dict[JobId, _EarlierRuns] = {}
        self._movable = 0  # running jobs that are checkpointable: worth a decision when idle
        self._versions = 0  # finish events name a run version; unique across runs and restarts
        self._shapes: dict[JobId, RunningShape] = {}  # what backfill plans with, per running job
        self._events: list[tuple[float, int, int, object]] = []
        self._seq = 0
        self._decision_at: float | None = None
        self._review_at = 0.0  # when the next review of held jobs is due (one at a time)
        self._new_finished: list[FinishedJob] = []
        self._new_observations: list[SpeedObservation] = []
        self._rng = random.Random(self.config.seed)
        held = self.config.held_priorities
        self._slurm = SlurmJobState(one_type_of=one_type_sizes(cluster, self.config.one_gpu_type),
                                    held=held() if held is not None else None,
                                    end_lag_s=self.config.slurm_end_lag_s)
        self._deferrals = DeferralBook(self._slurm.eligible_at)
        self._candidates = Candidates(cluster)  # the backfill passes' lookups, pass to pass
        self.outcomes: list[JobOutcome] = []
        self.timeline = Timeline()
        self.rejected_actions = 0
        self._total_gpus = cluster.total_gpus
        self._step_armed = False
        self.job_seconds = 0.0  # ∫ jobs in the system dt: the sum of JCTs so far
        self.fees_accrued = 0.0  # ∫ Σ_running GPUs × price dt, in currency units
        self._fee_rate = 0.0
        self._schedule_fluctuation()

    # ----- the loop's two halves -------------------------------------------------------

    def next_snapshot(self) -> ClusterSnapshot | None:
        """Advance to the next decision point and return the snapshot, or None when done."""
        while True:
            upcoming = self._next_event_time()
            if self._decision_at is not None and self._decision_at <= upcoming:
                self._advance_clock(self._decision_at)
                self._decision_at = None
                return self._snapshot()
            if upcoming == math.inf:
                return None
            self._process_events_at(upcoming)

    def apply(self, decision: Decision) -> None:
        if self.config.mode == "direct":
            self._apply_direct(decision)
        elif self.config.lever_delay_s > 0:
            self._push(self.now + self.config.lever_delay_s, _LEVERS, decision)
        else:
            self._apply_slurm(decision)
        self._record_timeline()

    @property
    def unfinished_jobs(self) -> int:
        """Jobs still waiting or running: non-zero after a replay means a policy stranded them."""
        return len(self._pending) + len(self._running)

    @property
    def done(self) -> bool:
        return self._next_arrival >= len(self._arrivals) and not self._pending and not self._running

    # ----- events ------------------------------------------------------------------------

    def _next_event_time(self) -> float:
        arrivals, index = self._arrivals, self._next_arrival
        arrival = arrivals[index].submit_time if index < len(arrivals) else math.inf
        while self._events and self._stale(self._events[0]):
            heapq.heappop(self._events)
        event = self._events[0][0] if self._events else math.inf
        return min(arrival, event)

    def _stale(self, event: tuple[float, int, int, object]) -> bool:
        _, _, kind, payload = event
        if kind != _FINISH:
            return False
        job_id, version = _finish_payload(payload)
        run = self._running.get(job_id)
        return run is None or run.version != version

    def peek(self) -> ClusterSnapshot:
        """The snapshot now, without advancing time (several decisions at one instant)."""
        return self._snapshot()

    def _advance_clock(self, t: float) -> None:
        elapsed = t - self.now
        if elapsed > 0:
            self.job_seconds += (len(self._pending) + len(self._running)) * elapsed
            self.fees_accrued += self._fee_rate * elapsed
        self.now = t

    def _process_events_at(self, t: float) -> None:
        self._advance_clock(t)
        changed = self._admit_arrivals(t)
        while self._events and self._events[0][0] <= t:
            _, _, kind, payload = heapq.heappop(self._events)
            changed |= self._handle(kind, payload)
        if self.config.mode == "slurm":
            self._slurm_pass()
        self._record_timeline()
        if changed and self._wants_decision():
            self._decision_at = self._align(t)

    def _handle(self, kind: int, payload: object) -> bool:
        if kind == _FINISH:
            job_id, version = _finish_payload(payload)
            run = self._running.get(job_id)
            if run is not None and run.version == version:
                self._finish(run)
                return True
            return False
        if kind == _STEP:
            self._fluctuation_step()
            return False
        if kind == _LEVERS:
            assert isinstance(payload, Decision)
            self._apply_slurm(payload)
            return False
        if kind == _EXPIRE:
            self._slurm_dirty = True  # a deferral ran out: Slurm may start the job now
        return True  # (or a held job is due a look)

    def _admit_arrivals(self, t: float) -> bool:
        admitted = False
        while self._next_arrival < len(self._arrivals):
            job = self._arrivals[self._next_arrival]
            if job.submit_time > t:
                break
            self._pending[job.job_id] = job
            self._columns.pending[self._next_arrival] = True
            self._next_arrival += 1
            admitted = True
            if self.config.mode == "slurm":
                self._defer(job.job_id, job.submit_time + self.config.defer_window_s)
                self._slurm_dirty |= self.config.defer_window_s <= 0
        return admitted

    def _wants_decision(self) -> bool:
        if not self._pending:
            return self._movable > 0 and any(self._free)
        return self.config.mode == "slurm" or any(self._free)

    def _align(self, t: float) -> float:
        cycle = self.config.cycle_s
        if cycle <= 0:
            return t
        grid = self.origin + self.config.cycle_phase_s % cycle
        return grid + math.ceil((t - grid) / cycle - 1e-9) * cycle

    def _push(self, t: float, kind: int, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, kind, payload))

    # ----- starting, progressing and finishing jobs --------------------------------------

    def _start(self, job: Job, placement: Placement) -> None:
        del self._pending[job.job_id]
        self._columns.pending[self._columns.index[job.job_id]] = False
        self._slurm.forget(job.job_id)
        work = job.oracle_duration if job.oracle_duration is not None else 0.0
        self._launch(job, placement, work)

    def _launch(self, job: Job, placement: Placement, work: float) -> None:
        nodes = tuple(self.cluster.index(n) for n in placement.nodes)
        for i, gpus in zip(nodes, placement.gpus, strict=True):
            self._free[i] -= gpus
            self._fee_rate += gpus * self.cluster.nodes[i].price_per_gpu_hour / 3600.0
        self._movable += job.checkpointable
        family = job.model_family
        speeds = self._speed.member_speeds(family, nodes)
        run = _Run(
            job, nodes, placement.gpus, self.now, work,
            RunningJob(job=job, start_time=self.now, placement=placement),
            speeds, self._speed.shape_factor(family, nodes, placement.gpus),
            health=self._speed.health_factor(speeds, nodes), updated=self.now,
        )
        self._running[job.job_id] = run
        self._running_records[job.job_id] = run.record
        self._shapes[job.job_id] = RunningShape(run.record.limit_end or math.inf, nodes,
                                                placement.gpus)
        if not self._step_armed:
            self._schedule_fluctuation()
        affected = self._neighbours(nodes)
        for i in nodes:
            self._node_jobs[i].add(job.job_id)
        self._refresh([run, *affected], colocation=True)

    def _finish(self, run: _Run) -> None:
        self._release(run)
        earlier = self._earlier.pop(run.job.job_id, None)
        # As Slurm reports a requeued job: started when its last run did.
        finished = FinishedJob(run.job, run.start, self.now, run.record.placement)
        self._new_finished.append(finished)
        self._observe(run)
        self.outcomes.append(self._outcome(run, earlier))
        self._refresh(self._neighbours(run.nodes), colocation=True)

    def _release(self, run: _Run) -> None:
        """Stop ``run`` now: its GPUs free up, its fees stop."""
        self._progress(run)
        del self._running[run.job.job_id]
        del self._running_records[run.job.job_id]
        del self._shapes[run.job.job_id]
        self._slurm_dirty = True
        if (due := self._slurm.job_ended(run.nodes, self.now)) is not None:
            self._push(due, _EXPIRE, None)  # Slurm's own pass after the lag
        self._movable -= run.job.checkpointable
        for i, gpus in zip(run.nodes, run.gpus, strict=True):
            self._free[i] += gpus
            self._fee_rate -= gpus * self.cluster.nodes[i].price_per_gpu_hour / 3600.0
            self._node_jobs[i].discard(run.job.job_id)

    def _migrate(self, job_id: JobId, placement: Placement) -> bool:
        """Requeue a running, checkpointable job and restart it on ``placement`` (free now),
        with the work since its last checkpoint lost (``restart_overhead_s``); False when it
        cannot be moved there."""
        run = self._running.get(job_id)
        if run is None or not run.job.checkpointable or not self._fits_now(run.job, placement):
            self.rejected_actions += 1
            return False
        self._release(run)
        earlier = self._earlier.setdefault(job_id, _EarlierRuns(run.start))
        earlier.restarts += 1
        earlier.fee += self._charge(run, earlier.gpu_seconds)
        self._refresh(self._neighbours(run.nodes), colocation=True)
        self._launch(run.job, placement, run.remaining + self.config.restart_overhead_s)
        return True

    def _charge(self, run: _Run, gpu_seconds: dict[str, float]) -> float:
        """The fee of ``run`` from its start to now; adds its GPU-seconds per type."""
        runtime, fee = self.now - run.start, 0.0
        for i, gpus in zip(run.nodes, run.gpus, strict=True):
            node = self.cluster.nodes[i]
            gpu_seconds[node.gpu_type] = gpu_seconds.get(node.gpu_type, 0.0) + gpus * runtime
            fee += gpus * runtime * node.price_per_gpu_hour / 3600.0
        return fee

    def _outcome(self, run: _Run, earlier: _EarlierRuns | None) -> JobOutcome:
        earlier = earlier or _EarlierRuns(run.start)
        gpu_seconds = dict(earlier.gpu_seconds)
        fee = earlier.fee + self._charge(run, gpu_seconds)
        best = self._speed.best_rate(run.job, self.cluster)
        work = run.job.oracle_duration or 0.0
        return JobOutcome(
            job=run.job,
            start=earlier.first_start,
            end=self.now,
            nodes=run.record.placement.nodes,
            gpus=run.gpus,
            gpu_seconds=gpu_seconds,
            fee=fee,
            best_runtime=work / best if best > 0 else self.now - earlier.first_start,
            restarts=earlier.restarts,
        )

    def _neighbours(self, nodes: tuple[int, ...]) -> list[_Run]:
        # sorted: a set of strings iterates in hash order, which changes with the process's
        # hash seed, and the order re-timed runs are pushed in breaks ties between their ends
        ids = set().union(*(self._node_jobs[i] for i in nodes))
        return [self._running[j] for j in sorted(ids)]

    def _progress(self, run: _Run) -> None:
        run.remaining = max(0.0, run.remaining - (self.now - run.updated) * run.rate)
        run.updated = self.now

    def _refresh(self, runs: Sequence[_Run], *, colocation: bool = False,
                 health: bool = False) -> None:
        """Recompute the parts of these runs' rates that changed; re-time their finish."""
        for run in runs:
            self._progress(run)
            if colocation:
                run.coloc = self._speed.colocation(run.job.model_family,
                                                   self._neighbour_families(run))
            if health:
                run.health = self._speed.health_factor(run.speeds, run.nodes)
            if not run.refresh_rate():
                continue  # its finish event still holds
            self._versions += 1
            run.version = self._versions
            end = self.now + (run.remaining / run.rate if run.rate > 0 else math.inf)
            self._push(end, _FINISH, (run.job.job_id, run.version))

    def _neighbour_families(self, run: _Run) -> tuple[tuple[str, ...], ...]:
        """Per node of the run, the families of the other jobs sharing that node."""
        own = run.job.job_id
        return tuple(
            tuple(sorted(self._running[j].job.model_family for j in self._node_jobs[i] if j != own))
            for i in run.nodes
        )

    # ----- machine fluctuation and observations ------------------------------------------

    def _schedule_fluctuation(self) -> None:
        if self._fluctuation is not None and math.isfinite(self._fluctuation.next_step_time):
            self._push(self.origin + self._fluctuation.next_step_time, _STEP, None)
            self._step_armed = True

    def _fluctuation_step(self) -> None:
        assert self._fluctuation is not None
        self._step_armed = False
        # The step is due now; advancing to its own time (not now − origin, which rounding can
        # leave a hair short of it) guarantees progress.
        due = max(self.now - self.origin, self._fluctuation.next_step_time)
        if self._fluctuation.advance_to(due):
            runs = list(self._running.values())
            self._refresh(runs, health=True)
            for run in runs:
                self._observe(run)
        # Machines drift only while something can still change: with nothing running and no
        # arrivals left, pending jobs wait on a decision, not on time.
        if self._running or self._next_arrival < len(self._arrivals):
            self._schedule_fluctuation()

    def _observe(self, run: _Run) -> None:
        if not self.config.observations or not run.job.model_family:
            return
        noise = math.exp(self._rng.gauss(0.0, self.config.observation_noise))
        self._new_observations.append(
            SpeedObservation(self.now, run.record.placement.nodes, run.job.model_family,
                             run.health * noise)
        )

    # ----- snapshots and decisions -------------------------------------------------------

    def _snapshot(self) -> ClusterSnapshot:
        snapshot = ClusterSnapshot(
            time=self.now,
            cluster=self.cluster,
            free_gpus=tuple(self._free),
            pending=tuple(self._pending.values()),
            running=tuple(self._running_records.values()),
            finished=tuple(self._new_finished),
            observations=tuple(self._new_observations),
            precomputed_columns=self._columns.pending_columns(),
        )
        self._new_finished.clear()
        self._new_observations.clear()
        return snapshot

    def _apply_direct(self, decision: Decision) -> None:
        for job_id, placement in decision.placements.items():  # in start order
            job = self._pending.get(job_id)
            if job is None:
                continue
            if self._fits_now(job, placement):
                self._start(job, placement)
            else:
                self.rejected_actions += 1
        self._apply_migrations(decision)

    def _apply_migrations(self, decision: Decision) -> None:
        # as the live actuator's plan_moves: a move that cannot be made does not use the cap
        cap, moved = self.config.migrations_per_cycle, 0
        for job_id, placement in decision.migrations.items():
            if cap is not None and moved >= cap:
                return
            moved += self._migrate(job_id, placement)

    def _fits_now(self, job: Job, placement: Placement) -> bool:
        if not valid_pin(job, placement, self.cluster):
            return False
        return all(
            self._free[self.cluster.index(n)] >= g
            for n, g in zip(placement.nodes, placement.gpus, strict=True)
        )

    def _apply_slurm(self, decision: Decision) -> None:
        pins = {
            job_id: placement
            for job_id, placement in decision.placements.items()
            if job_id in self._pending and self._pinnable(job_id, placement)
        }
        self._slurm.set_levers(decision.ranking, pins, self._exclusions(decision, pins),
                               now=self.now, pending=self._pending, urgent=decision.forward,
                               placed=decision.placements.keys())
        self._hold(decision.holds)
        self._apply_migrations(decision)  # before Slurm's pass could give their nodes away
        self._slurm_dirty = True
        self._slurm_pass()

    def _exclusions(
        self, decision: Decision, pins: Mapping[JobId, Placement]
    ) -> dict[JobId, frozenset[int]]:
        """Node indices each released, unpinned job is kept off (Slurm's ExcNodeList). One
        that would leave the job too few GPUs to ever start is refused, as live."""
        kept: dict[JobId, frozenset[int]] = {}
        for job_id, names in decision.exclusions.items():
            job = self._pending.get(job_id)
            if job is None or job_id in pins:
                continue
            excluded = frozenset(self.cluster.index(n) for n in names if self.cluster.has_node(n))
            if capacity_outside(job, excluded, self.cluster) >= job.num_gpus:
                kept[job_id] = excluded
            else:
                self.rejected_actions += 1
        return kept

    def _pinnable(self, job_id: JobId, placement: Placement) -> bool:
        if valid_pin(self._pending[job_id], placement, self.cluster):
            return True
        self.rejected_actions += 1
        return False

    def _hold(self, holds: Sequence[JobId]) -> None:
        """Extend held jobs' deferrals as the daemon does live: to two review periods ahead
        (never past the cap) once under 1.5 are left; one review a period renews them."""
        review, now = max(self.config.cycle_s, _REVIEW_S), self.now
        times = HoldTimes(now, now + 1.5 * review, now + 2 * review, self.config.hold_cap_s)
        extended, held = extensions(self._deferrals, holds, self._pending, self._slurm.released,
                                    times)
        for job_id, until in extended:
            self._defer(job_id, until)
        if held and self._review_at <= self.now:
            self._review_at = self.now + review
            self._push(self._review_at, _TICK, None)

    def _defer(self, job_id: JobId, until: float) -> None:
        self._deferrals.set(job_id, until)
        self._push(until, _EXPIRE, job_id)

    def _slurm_pass(self) -> None:
        if not self._slurm_dirty or not self._pending or not any(self._free):
            return
        self._slurm_dirty = False
        queue = self._slurm.queue(self._pending, self.now)
        free, lagging = self._slurm.usable(self._free, self.now)
        for job, placement in schedule_pass(
                self.now, queue, free, lambda: [*self._shapes.values(), *lagging], self.cluster,
                self.config.slurm_queue_depth, self.config.slurm_scheduler,
                self.config.backfill_reservations, self._candidates):
            self._start(job, placement)

    def _record_timeline(self) -> None:
        self.timeline.record(self.now, len(self._pending), self._total_gpus - sum(self._free))


def _finish_payload(payload: object) -> tuple[JobId, int]:
    assert isinstance(payload, tuple)
    return payload[0], payload[1]
