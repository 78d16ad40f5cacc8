"""Typed errors for everything that talks to Slurm.

Each one carries a single-line message naming the command and what went wrong, so the CLI and
the daemon can print it (or record it) without a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_rl.errors import InputError, SlurmRLError


def _command_text(argv: Sequence[str]) -> str:
    return " ".join(argv)


class SlurmError(SlurmRLError):
    """Base class of every Slurm-side failure."""


class SlurmCommandError(SlurmError):
    """A Slurm command exited non-zero (or could not be started)."""

    prefix = ""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        detail = self.stderr.splitlines()[-1] if self.stderr else "no error output"
        text = f"`{_command_text(argv)}` failed (exit {returncode}): {detail}"
        super().__init__(self.prefix + text)


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


class DevClusterError(SlurmError):
    """The native development cluster could not be started, inspected or stopped."""
