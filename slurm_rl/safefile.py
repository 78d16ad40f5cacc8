"""Files the daemon writes where someone else might have planted something first.

The daemon writes its heartbeat (read by slurmctld's Lua plugin), the plugin's config, its
place in the jobcomp log and unpacked model bundles. A predictable temporary name, or a
``chmod`` through a path, follows a symbolic link another user planted there and writes or
changes the file it points to with the daemon's rights. So:

* a temporary file is made with ``O_CREAT | O_EXCL`` under a random name (``mkstemp``), its
  mode set through its descriptor, and renamed over the target (``rename`` replaces a link
  itself, never what it points to);
* a directory the daemon keeps state in must not be writable by anyone but its owner, who
  must be the daemon's user or root: otherwise another user could replace its files between
  two cycles.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from slurm_rl.errors import SlurmRLError


class UnsafePathError(SlurmRLError):
    """A directory others can write, or a path that is not what it should be."""


def write_atomic(target: Path, data: str | bytes, mode: int = 0o600) -> None:
    """Replace ``target`` with ``data`` (a reader sees the old file or the new one, never
    half), the new file having ``mode``."""
    payload = data.encode() if isinstance(data, str) else data
    handle, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                    suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            os.fchmod(stream.fileno(), mode)
            stream.write(payload)
        os.replace(name, target)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


def require_private_dir(path: Path, what: str) -> None:
    """Refuse a directory that is a symbolic link, is not owned by this user (or root), or
    that its group or others may write (:class:`UnsafePathError`, one line with the fix)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return  # made by the caller, with this user's umask
    except OSError as exc:
        raise UnsafePathError(f"{what} {path}: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePathError(f"{what} {path} is a symbolic link; fix: point the setting at "
                              "the real directory")
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafePathError(f"{what} {path} is not a directory")
    me = os.geteuid()
    if info.st_uid not in (me, 0):
        raise UnsafePathError(f"{what} {path} belongs to uid {info.st_uid}, not to the "
                              f"daemon's user (uid {me}) or root; fix: chown it")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePathError(f"{what} {path} may be written by its group or others (mode "
                              f"{stat.S_IMODE(info.st_mode):04o}), who could replace the "
                              f"daemon's files; fix: chmod go-w {path}")
