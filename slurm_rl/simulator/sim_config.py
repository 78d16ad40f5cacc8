"""How the simulated world behaves around the policy (:class:`SimConfig`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from slurm_rl.simulator.slurm_emulation import DEFAULT_RESERVATIONS, PriorityHolder, SlurmScheduler

ActionMode = Literal["direct", "slurm"]


@dataclass(frozen=True)
class SimConfig:
    """How the simulated world behaves around the policy.

    ``cycle_s``: decisions happen at most once per cycle, aligned to it (0 = at every event),
    as the daemon polls Slurm. ``defer_window_s``: in ``slurm`` mode, how long the job_submit
    plugin defers a new job for the daemon to decide on it. ``hold_cap_s``: the longest the
    daemon may hold a job back after submit before it is left to Slurm. ``slurm_queue_depth``:
    how many queued jobs one emulated scheduling pass looks at (Slurm's ``bf_max_job_test``).
    ``restart_overhead_s``: what a migrated job loses, in seconds of work on the trace's
    reference hardware: the work since its last checkpoint plus loading it again.
    ``slurm_scheduler``: the SchedulerType emulated in ``slurm`` mode, ``backfill`` or
    ``builtin`` (strict priority order, no backfill); ``backfill_reservations``: how many
    waiting jobs one backfill pass plans (Slurm plans every one; 1 is EASY backfill).
    ``lever_delay_s``: in ``slurm`` mode, how long after its snapshot a decision's levers
    reach Slurm's scheduler (live: the cycle's own work, its scontrol calls, slurmctld's
    next pass; docs/slurm-emulation.md). ``cycle_phase_s``: decisions fall at the first
    submit + this + k · ``cycle_s`` (a live daemon's cycles keep their own phase).
    ``one_gpu_type``: a released untyped gang is kept on one GPU type, as the daemon does
    unless ``allow_mixed_gpu_types`` (``Features=[a100|v100]``, slurm/onetype.py).
    ``held_priorities``: in ``slurm`` mode, makes the holder of the priority values the
    daemon's actuator leaves in Slurm within its limits on changes (a
    ``slurm_rl.slurm.priority.HeldPriorities``); None: as if no limit held a change back
    (the same queue order otherwise, tests/test_held_priorities.py). ``slurm_end_lag_s``: Slurm
    starts nothing on a job's nodes until this long after its end, while the daemon already
    sees them free (0: at once; docs/slurm-emulation.md, measured 0.9 s on the dev cluster).
    ``migrations_per_cycle``: how many of a decision's migrations are carried out, the first
    that can be, in the decision's order (the daemon's ``max_migrations_per_cycle``; 0: none,
    as a daemon without ``migrate`` sends none; None: every one).
    """

    mode: ActionMode = "direct"
    cycle_s: float = 10.0
    defer_window_s: float = 30.0
    hold_cap_s: float = 3600.0
    slurm_queue_depth: int = 500
    slurm_scheduler: SlurmScheduler = "backfill"
    backfill_reservations: int = DEFAULT_RESERVATIONS
    lever_delay_s: float = 0.0
    cycle_phase_s: float = 0.0
    one_gpu_type: bool = True
    # Per-job pace readings (each running job's true machine health, hourly and at its end,
    # with observation_noise): live Slurm measures no pace (docs/placement-agent.md §5), so
    # off by default, the world the daemon, the evaluation and training share; an RWGP
    # given them learns the machines from them instead of from finished jobs' run times.
    observations: bool = False
    observation_noise: float = 0.02
    restart_overhead_s: float = 300.0
    seed: int = 0
    held_priorities: Callable[[], PriorityHolder] | None = field(default=None, compare=False)
    slurm_end_lag_s: float = 0.0
    migrations_per_cycle: int | None = None
