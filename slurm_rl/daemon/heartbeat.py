"""The daemon's side of the fail-open deferral: the heartbeat that job_submit.lua checks.

A beat is written after every healthy cycle, so a daemon that is stuck or cannot reach
Slurm stops deferring new jobs within ``heartbeat_max_age_s``. A clean stop retires the beat
at once: from then on new jobs are not deferred at all.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from slurm_rl.slurm import deferral


class Heartbeat(Protocol):
    def beat(self, now: float) -> None: ...

    def retire(self) -> None: ...


@dataclass(frozen=True, slots=True)
class FileHeartbeat:
    """The plugin's heartbeat file: its content is the Unix time of the last beat."""

    path: Path

    def beat(self, now: float) -> None:
        deferral.beat(self.path, now)

    def retire(self) -> None:
        # A missing file is what the plugin reads as "daemon down".
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

