"""Errors that reach a user as one clear line (never a traceback)."""

from __future__ import annotations

from pathlib import Path

# Every character at which str.splitlines() breaks a line. A message quotes what the input
# held (a header, a field, a node name), and one such character there would split the one
# line an error is into two: it is shown escaped, as repr() shows it.
_LINE_BREAKS = str.maketrans(
    {char: repr(char)[1:-1] for char in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}
)


class SlurmRLError(Exception):
    """Base class: the CLI prints ``str(error)`` on one line and exits non-zero."""


class InputError(SlurmRLError):
    """Bad input: a trace, config, cluster spec, Slurm output or CLI argument.

    The message names where the problem is: ``file:line: column 'x': what is wrong``.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        column: str | None = None,
    ) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.column = column
        self.reason = message
        super().__init__(self._format())

    def _format(self) -> str:
        where = self.path or ""
        if self.line is not None:
            where = f"{where}:{self.line}" if where else f"line {self.line}"
        if self.column is not None:
            where = f"{where}: column '{self.column}'" if where else f"column '{self.column}'"
        text = f"{where}: {self.reason}" if where else self.reason
        return text.translate(_LINE_BREAKS)


class UnknownNameError(SlurmRLError):
    """A name (policy, cluster, GPU type, trace format) that is not known."""

    def __init__(self, kind: str, name: str, known: list[str] | tuple[str, ...]) -> None:
        self.kind = kind
        self.name = name
        self.known = tuple(known)
        super().__init__(f"unknown {kind} {name!r}; known: {', '.join(sorted(known))}")

    def __reduce__(self) -> tuple[type[UnknownNameError], tuple[str, str, tuple[str, ...]]]:
        # Replays run in worker processes: the error must cross back whole, not as a
        # TypeError about missing arguments.
        return (type(self), (self.kind, self.name, self.known))
