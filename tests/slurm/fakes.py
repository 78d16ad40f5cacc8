"""A fake of the subprocess boundary: answers recorded Slurm output by argv."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_rl.slurm.proc import CommandResult

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"
RESERVATIONS = ("scontrol", "show", "reservation", "-o")
NO_RESERVATIONS = "No reservations in the system\n"  # what 22.05.8 prints (to stdout, rc 0)


def fixture_text(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text()


def recorded_answer(version: str, name: str) -> CommandResult:
    """A ``scontrol update`` answer saved as JSON by record_22_05.py."""
    data = json.loads(fixture_text(version, name))
    return CommandResult(tuple(data["argv"]), data["returncode"], data["stdout"], data["stderr"])


@dataclass
class FakeRunner:
    """Maps an argv (as a tuple) to a result or an exception; records every call.

    Unknown commands fail the way a missing binary would, so a test notices them.
    """

    answers: dict[tuple[str, ...], CommandResult | Exception] = field(default_factory=dict)
    default: CommandResult | None = None
    calls: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    def answer(self, argv: Sequence[str], stdout: str = "", rc: int = 0, stderr: str = "") -> None:
        self.answers[tuple(argv)] = CommandResult(tuple(argv), rc, stdout, stderr)

    def fail(self, argv: Sequence[str], error: Exception) -> None:
        self.answers[tuple(argv)] = error

    def __call__(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        key = tuple(argv)
        self.calls.append((key, timeout_s))
        found = self.answers.get(key, self.default)
        if isinstance(found, Exception):
            raise found
        if found is None:
            return CommandResult(key, 127, "", f"no fake answer for {' '.join(key)}")
        return CommandResult(key, found.returncode, found.stdout, found.stderr)

    @property
    def argvs(self) -> list[tuple[str, ...]]:
        return [argv for argv, _ in self.calls]


def recorded_cluster(version: str) -> FakeRunner:
    """A runner that answers squeue/sinfo/scontrol with one version's golden files, each
    under the argv the client runs for that version (slurm_rl/slurm/layouts.py)."""
    from slurm_rl.slurm.client import parse_version
    from slurm_rl.slurm.layouts import layout_for

    runner = FakeRunner()
    version_text = fixture_text(version, "sinfo_version.txt")
    layout = layout_for(parse_version(version_text))
    runner.answer(("sinfo", "--version"), version_text)
    nodes = "sinfo.json" if layout.nodes_argv[0] == "sinfo" else "scontrol_show_nodes.json"
    runner.answer(layout.nodes_argv, fixture_text(version, nodes))
    runner.answer(("scontrol", "show", "job", "-o"), fixture_text(version, "scontrol_show_job.txt"))
    runner.answer(layout.jobs_argv, fixture_text(version, "squeue.json"))
    runner.answer(RESERVATIONS, NO_RESERVATIONS)
    return runner
