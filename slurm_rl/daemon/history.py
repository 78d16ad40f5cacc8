"""What new policy objects learn first: the finished jobs the daemon's store recorded.

A policy learns while it runs, from the finished jobs each snapshot reports: the RWGP's belief
about each machine's speed (runtime readings), the learned ordering's runtime history. A
restart, a SIGHUP and a model switch build new policy objects, which would start again from
their priors and relearn over hours. So the first decision of new parts sees, besides what
Slurm reports, the jobs that ended in the last ``history_days`` days as the store recorded
them — read by the retraining window's reader (slurm_rl/retrain/window.py): jobs the daemon
scheduled, run on nodes the store still lists — oldest first, and none Slurm reports itself.
Only the policies see them; the recorder keeps the snapshot Slurm gave.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError

from slurm_rl.core import ClusterSnapshot, Decision, FinishedJob, Job, Placement
from slurm_rl.loop import DecisionMaker
from slurm_rl.retrain.window import LoggedJob, RetrainSkipped, StoreRowDamaged, load_window
from slurm_rl.store.repository import Store

log = logging.getLogger(__name__)

History = Callable[[ClusterSnapshot], tuple[FinishedJob, ...]]


def stored_history(store: Callable[[], Store], days: float) -> History:
    """The finished jobs of the snapshot's cluster that ended in the ``days`` before it, from
    the daemon's store at that time (none when it has too few or cannot be read: the policy
    then starts afresh)."""

    def read(snapshot: ClusterSnapshot) -> tuple[FinishedJob, ...]:
        try:
            window = load_window(store().engine, snapshot.cluster.name, days, snapshot.time)
        except RetrainSkipped as why:
            log.info("no stored history for the new policy: %s", why)
            return ()
        except SQLAlchemyError as exc:  # the cycle reports store trouble itself
            log.info("no stored history for the new policy: %s", str(exc).splitlines()[0])
            return ()
        except StoreRowDamaged as why:  # names the row, e.g. a details that is not JSON
            log.warning("no stored history for the new policy: %s", why)
            return ()
        except (ValueError, TypeError) as exc:  # a stored value that does not decode
            log.warning("no stored history for the new policy: %s", _unreadable(exc))
            return ()
        return tuple(sorted(map(finished_job, window.jobs), key=lambda f: f.end_time))

    return read


def finished_job(job: LoggedJob) -> FinishedJob:
    """A stored job as the source reports a finished one (GPUs spread evenly over its nodes,
    as the source does when Slurm gives no per-node detail)."""
    core = Job(job_id=job.job_id, submit_time=job.submit_time, num_gpus=job.num_gpus,
               user=job.user, partition=job.partition, num_nodes=job.num_nodes,
               gpu_type=job.gpu_type, time_limit=job.time_limit_s)
    return FinishedJob(core, job.start_time, job.end_time, Placement.even(job.nodes, job.num_gpus),
                       job.state)


def with_history(snapshot: ClusterSnapshot, history: tuple[FinishedJob, ...]) -> ClusterSnapshot:
    """``snapshot`` with the stored jobs it does not report itself before its own finished
    ones (a job still queued or running, e.g. requeued, is left out)."""
    reported = {j.job_id for j in snapshot.pending}
    reported |= {r.job.job_id for r in snapshot.running}
    reported |= {f.job.job_id for f in snapshot.finished}
    cluster = snapshot.cluster
    earlier = tuple(f for f in history if f.job.job_id not in reported
                    and all(cluster.has_node(n) for n in f.placement.nodes))
    return dataclasses.replace(snapshot, finished=earlier + snapshot.finished)


class PrimedScheduler:
    """A :class:`~slurm_rl.loop.DecisionMaker` whose first snapshot also carries ``history``
    (module docstring); later ones pass unchanged."""

    def __init__(self, inner: DecisionMaker, history: History | None) -> None:
        self.inner = inner
        self._history = history
        # what explanations read (slurm_rl/ops/reasons.py)
        self.placement = getattr(inner, "placement", None)

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        # Read once, whatever happens: a read that failed every cycle would cost every
        # decision (and the heartbeat) for what is only a head start.
        history, self._history = self._history, None
        if history is not None:
            stored = _primed(history, snapshot)
            if stored:
                own = len(snapshot.finished)
                snapshot = with_history(snapshot, stored)
                log.info("the new policy learned from %d stored finished jobs",
                         len(snapshot.finished) - own)
        return self.inner.decide(snapshot)


def _primed(history: History, snapshot: ClusterSnapshot) -> tuple[FinishedJob, ...]:
    """The stored history, or none when reading it fails in a way :func:`stored_history`
    does not foresee (a bug: logged with its traceback; the policy starts afresh)."""
    try:
        return history(snapshot)
    except Exception:
        log.exception("no stored history for the new policy")
        return ()


def _unreadable(error: Exception) -> str:
    """One line on a stored value the window's reader cannot decode and does not name (a
    damaged ``decisions.details`` it names itself: :class:`StoreRowDamaged`)."""
    text = str(error).strip().splitlines()
    reason = text[0] if text else type(error).__name__
    return f"a stored row cannot be read ({reason})"
