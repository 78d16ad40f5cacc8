"""The daemon's side of the fail-open deferral done by ``plugins/job_submit.lua``.

The Lua plugin reads ``job_submit_slurm_rl.conf`` next to itself and defers new GPU jobs only
while the heartbeat file holds a recent Unix time. The daemon calls :func:`beat` every cycle;
if it stops, new jobs stop being deferred within ``heartbeat_max_age_s`` seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from slurm_rl.paths import shipped
from slurm_rl.safefile import write_atomic

CONF_NAME = "job_submit_slurm_rl.conf"
PLUGIN_NAME = "job_submit.lua"
DEFERRAL_TAG = "slurm-rl:deferred:"
WORLD_READABLE = 0o644  # slurmctld, which reads both files, may run as SlurmUser, not root


def plugin_source() -> Path:
    """The plugin the project ships (``plugins/job_submit.lua``)."""
    return shipped(f"plugins/{PLUGIN_NAME}")


@dataclass(frozen=True, slots=True)
class DeferralConfig:
    """What the Lua plugin reads: where the heartbeat is, how fresh it must be, the window."""

    heartbeat_path: Path
    heartbeat_max_age_s: int = 30
    window_s: int = 10
    partitions: tuple[str, ...] = ()  # empty = every partition
    gpu_only: bool = True
    # how long one check of the two files' paths serves (the plugin forks coreutils' stat for
    # it inside slurmctld); 0: every submission (the dev cluster, whose tests swap the files)
    path_check_every_s: int = 30

    def render(self) -> str:
        partitions = ",".join(self.partitions) if self.partitions else "*"
        return (
            "# Written by slurm-rl; read by job_submit.lua on every submission.\n"
            f"heartbeat_path = {self.heartbeat_path}\n"
            f"heartbeat_max_age = {self.heartbeat_max_age_s}\n"
            f"window = {self.window_s}\n"
            f"partitions = {partitions}\n"
            f"gpu_only = {'yes' if self.gpu_only else 'no'}\n"
            f"path_check_every = {self.path_check_every_s}\n"
        )


# What job_submit.lua uses for a key its config file lacks (its ``defaults`` table).
PLUGIN_DEFAULTS = {"heartbeat_path": "/run/slurm-rl/heartbeat", "heartbeat_max_age": "30",
                   "window": "10", "partitions": "*", "gpu_only": "yes",
                   "path_check_every": "30"}


def parse_config(text: str) -> dict[str, str]:
    """``key = value`` lines as job_submit.lua reads them (``#`` starts a comment)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.split("#", 1)[0].partition("=")
        if sep and key.strip().replace("_", "").isalnum():
            found[key.strip()] = value.strip()
    return found


def plugin_view(path: Path) -> dict[str, str]:
    """The settings the plugin acts on with ``path`` as its config: the file's keys over the
    plugin's defaults (all defaults when there is no file)."""
    text = path.read_text() if path.is_file() else ""
    return {**PLUGIN_DEFAULTS, **parse_config(text)}


def write_config(conf_dir: Path, config: DeferralConfig) -> Path:
    """Write the plugin's config next to slurm.conf (atomically, so Lua never reads half)."""
    target = conf_dir / CONF_NAME
    write_atomic(target, config.render(), WORLD_READABLE)
    return target


def beat(heartbeat_path: Path, now: float | None = None) -> None:
    """Record that the daemon is alive: the file's content is the current Unix time."""
    stamp = int(time.time() if now is None else now)
    # 0755 whatever the umask: the plugin refuses a heartbeat whose directory others may write
    heartbeat_path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    write_atomic(heartbeat_path, f"{stamp}\n", WORLD_READABLE)


def deferred_until(admin_comment: str) -> float | None:
    """The end of the plugin's window from a job's admin comment, or None if not deferred."""
    for part in admin_comment.split(","):
        part = part.strip()
        if part.startswith(DEFERRAL_TAG):
            try:
                return float(part[len(DEFERRAL_TAG) :])
            except ValueError:
                return None
    return None
