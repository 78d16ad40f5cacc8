"""The replay's jobs as numeric columns, for cheap snapshots (moved out of engine.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from slurm_rl.core import Job, PendingColumns


class ArrivalColumns:
    """Numeric columns of every job in the replay, and which are pending, so a snapshot's
    pending columns cost array operations, not a pass over the queue in Python."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        self.index = {job.job_id: i for i, job in enumerate(jobs)}
        self.all = PendingColumns.from_jobs(jobs)
        self.pending = np.zeros(len(jobs), dtype=bool)

    def pending_columns(self) -> PendingColumns:
        rows = np.flatnonzero(self.pending)
        return PendingColumns(
            submit_time=self.all.submit_time[rows],
            num_gpus=self.all.num_gpus[rows],
            time_limit=self.all.time_limit[rows],
            oracle_duration=self.all.oracle_duration[rows],
        )
