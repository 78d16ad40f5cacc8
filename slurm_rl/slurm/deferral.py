"""The daemon's side of the fail-open deferral done by ``plugins/job_submit.lua``.

The Lua plugin reads ``job_submit_slurm_rl.conf`` next to itself and defers new GPU jobs only
while the heartbeat file holds a recent Unix time. The daemon calls :func:`beat` every cycle;
if it stops, new jobs stop being deferred within ``heartbeat_max_age_s`` seconds.
:func:`plugin_refuses` is the plugin's own check of a file before it reads one (its trust
model), which ``slurm-rl selftest`` and ``slurm-rl devcluster`` apply to warn ahead.
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from slurm_rl.paths import shipped
from slurm_rl.safefile import write_atomic
from slurm_rl.slurm.records import SlurmJob

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


# slurm_time rounds a deferral up to the second; Slurm shows it to the second.
_ROUNDING_S = 2.0


def begin_is_ours(job: SlurmJob, cap_s: float, deferred_by_us: bool = False) -> bool:
    """Whether ``job``'s begin time can be the plugin's window or a deferral of the daemon's:
    it carries the plugin's tag (or the daemon deferred it, ``deferred_by_us``) and begins
    no later than the window's end or ``submit + cap_s``, past which the daemon never
    defers. Later, its user set it (``scontrol update StartTime=now+1hour`` on their own
    job keeps the tag): releasing it with ``StartTime=now`` would undo their choice. A
    user's later begin inside the cap cannot be told from a hold of the daemon's."""
    until = deferred_until(job.admin_comment)
    if until is None and not deferred_by_us:
        return False
    if job.eligible_time is None:
        return True
    latest = max(until or 0.0, (job.submit_time or 0.0) + cap_s)
    return job.eligible_time <= latest + _ROUNDING_S


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


def plugin_refuses(path: Path, trusted: frozenset[int]) -> str | None:
    """Why plugins/job_submit.lua would not read ``path`` (None: it would, or the file is not
    there, which the plugin reads as defaults or "daemon down"). The same rules as the
    plugin's check_file: no symbolic link on the path; the file's directory writable by its
    owner only; every directory above it of root or slurmctld's user (``trusted``) and
    writable by its owner only, unless sticky with a trusted entry below it; the file
    regular, not writable by group or others, and small."""
    text = str(path)
    if not path.is_absolute() or any(part in (".", "..") for part in path.parts) \
            or re.search(r"[\x00-\x1f\x7f']", text):
        return "not a plain absolute path"
    chain = [Path(*path.parts[: i + 1]) for i in range(len(path.parts))]
    try:
        infos = [item.lstat() for item in chain]
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be checked ({exc.strerror})"
    for index, (item, info) in enumerate(zip(chain[:-1], infos[:-1], strict=True)):
        refusal = _directory_refusal(item, info, infos[index + 1], index == len(chain) - 2,
                                     trusted)
        if refusal is not None:
            return refusal
    file = infos[-1]
    if not stat.S_ISREG(file.st_mode):
        return "not a regular file (symbolic links are not followed)"
    if file.st_mode & _OTHERS_WRITE:
        return "writable by its group or others"
    limit = _MAX_CONF_BYTES if path.name == CONF_NAME else _MAX_BEAT_BYTES
    return f"larger than {limit} bytes" if file.st_size > limit else None


_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_MAX_CONF_BYTES, _MAX_BEAT_BYTES = 8192, 256  # the plugin's MAX_CONF_BYTES, MAX_BEAT_BYTES


def _directory_refusal(item: Path, info: os.stat_result, below: os.stat_result, parent: bool,
                       trusted: frozenset[int]) -> str | None:
    if not stat.S_ISDIR(info.st_mode):
        return f"{item} is not a directory (symbolic links are not followed)"
    if parent:
        return f"its directory {item} is writable by others" \
            if info.st_mode & _OTHERS_WRITE else None
    if info.st_uid not in trusted:
        return f"{item} belongs to uid {info.st_uid}, not root or slurmctld's user"
    if info.st_mode & _OTHERS_WRITE:
        if not info.st_mode & stat.S_ISVTX:
            return f"{item} is writable by others"
        if below.st_uid not in trusted:
            return (f"the entry below the shared directory {item} belongs to uid "
                    f"{below.st_uid}, not root or slurmctld's user")
    return None
