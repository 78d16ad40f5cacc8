"""Typed errors for everything that talks to Slurm.

Each one carries a single-line message naming the command and what went wrong, so the CLI and
the daemon can print it (or record it) without a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurm_rl.errors import InputError, SlurmRLError


def _command_text(argv: Sequence[str]) -> str:
    return " ".join(argv)


def _failure_text(argv: Sequence[str], returncode: int, stderr: str, reported: str) -> str:
    last = stderr.splitlines()[-1] if stderr else ""
    if reported:  # the command exited 0 and said what failed in its JSON
        return f"`{_command_text(argv)}` reported: {reported}" + (f" ({last})" if last else "")
    return f"`{_command_text(argv)}` failed (exit {returncode}): {last or 'no error output'}"


class SlurmError(SlurmRLError):
    """Base class of every Slurm-side failure."""


class SlurmCommandError(SlurmError):
    """A Slurm command exited non-zero (or could not be started), or exited 0 with an error
    in its JSON's ``errors`` list (``reported``: what it says)."""

    prefix = ""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str,
                 reported: str = "") -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        self.reported = reported
        super().__init__(self.prefix + _failure_text(argv, returncode, self.stderr, reported))


class SlurmTimeoutError(SlurmError):
    """A Slurm command did not answer within its timeout."""

    def __init__(self, argv: Sequence[str], timeout_s: float) -> None:
        self.argv = tuple(argv)
        self.timeout_s = timeout_s
        super().__init__(f"`{_command_text(argv)}` did not answer within {timeout_s:g} s")


class SlurmUnavailableError(SlurmCommandError):
    """slurmctld cannot be reached (down, wrong SLURM_CONF, munge broken)."""

    prefix = "slurmctld is not reachable: "


class SlurmOutputError(InputError):
    """Slurm answered, but with output we cannot use (truncated JSON, missing fields...)."""


class SlurmReportedError(SlurmOutputError):
    """Slurm's JSON document has a non-empty ``errors`` list; ``entry`` is its first one."""

    def __init__(self, message: str, *, path: str, entry: Mapping[str, object]) -> None:
        super().__init__(message, path=path)
        self.entry = entry


class DevClusterError(SlurmError):
    """The native development cluster could not be started, inspected or stopped."""
