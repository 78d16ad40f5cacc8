"""The subprocess boundary: every Slurm, munge and system command goes through here.

Commands are argv lists (never a shell) and always carry a timeout. Tests replace the
:data:`Runner` with a fake that returns recorded output, so nothing else needs mocking.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from slurm_rl.slurm.errors import SlurmCommandError, SlurmTimeoutError, SlurmUnavailableError

# Phrases Slurm clients print when slurmctld is down or unreachable (22.05 .. 24.x).
_UNREACHABLE_MARKERS = (
    "Unable to contact slurm controller",
    "Socket timed out on send/recv",
    "Connection refused",
    "Zero Bytes were transmitted or received",
    "Munge encode failed",
    "Invalid authentication credential",
    "Could not establish a configuration source",
    "s_p_parse_file: unable to status file",
)


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What one command did: its argv, exit status, output and how long it took."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0


Runner = Callable[[Sequence[str], float], CommandResult]


def make_runner(env: Mapping[str, str] | None = None) -> Runner:
    """A runner that executes commands with ``env`` added to this process's environment."""
    merged = {**os.environ, **(env or {})}

    def run(argv: Sequence[str], timeout_s: float) -> CommandResult:
        return run_command(argv, timeout_s, merged)

    return run


def run_command(
    argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None
) -> CommandResult:
    """Run ``argv`` without a shell; a timeout or a missing binary becomes a typed error."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise SlurmTimeoutError(argv, timeout_s) from exc
    except OSError as exc:
        raise SlurmCommandError(argv, 127, f"cannot run {argv[0]}: {exc.strerror}") from exc
    elapsed = time.monotonic() - started
    return CommandResult(tuple(argv), done.returncode, done.stdout, done.stderr, elapsed)


def is_unreachable(stderr: str) -> bool:
    """True when a client's error output says slurmctld cannot be reached."""
    return any(marker in stderr for marker in _UNREACHABLE_MARKERS)


def reports_unreachable(entry: Mapping[str, object]) -> bool:
    """True when an entry of a ``--json`` document's ``errors`` list says the command's query
    to slurmctld failed. Slurm 22.05 exits 0 then and gives no reason: measured with slurmctld
    stopped and with munged stopped (tests/fixtures/slurm/22.05/*_unreachable.json,
    *_munge_down.json), squeue --json reports ``slurm_load_jobs`` "Failed while looking for
    jobs" with error_number -1, sinfo --json "Unspecified error" with errno -1 (SLURM_ERROR:
    the call failed); a reason in the entry is one of :data:`_UNREACHABLE_MARKERS`."""
    number = entry.get("error_number", entry.get("errno"))
    return number == -1 or is_unreachable(" ".join(str(value) for value in entry.values()))


def check(result: CommandResult) -> CommandResult:
    """Return ``result`` if it succeeded, else raise the matching typed error."""
    if result.ok:
        return result
    if is_unreachable(result.stderr):
        raise SlurmUnavailableError(result.argv, result.returncode, result.stderr)
    raise SlurmCommandError(result.argv, result.returncode, result.stderr)
