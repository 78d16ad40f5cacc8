"""Which JSON layout each Slurm release writes, and so which commands the client runs.

``sinfo --version`` (no slurmctld needed) names the release; :func:`layout_for` maps it to a
:class:`Layout` or refuses it in one line. Two families are read (slurm_rl/slurm/parse.py):

* **openapi/v0.0.38**, Slurm 22.05: plain numbers, ``sinfo --json`` one record a node,
  ``squeue --json`` ignores state filters and lists finished jobs by itself. Recorded on
  22.05.8 (tests/fixtures/slurm/22.05).
* **data_parser**, Slurm 23.02 to 26.05 (v0.0.42 in 24.11, v0.0.45 in 26.05): numbers in
  ``{"set", "infinite", "number"}`` objects, states as lists; ``sinfo --json`` groups
  identical nodes, so nodes come from ``scontrol show nodes --json``; and ``squeue --json``
  applies squeue's default state filter (pending and running only: measured on 24.11.5 and
  26.05.5, a job finished a second before is missing), so the client asks for
  ``--states=all`` to learn outcomes. Recorded on 24.11.5 and 26.05.5
  (tests/fixtures/slurm/24.11, 26.05); 23.02 to 25.11 are read the same way, not recorded.

Any other release (21.08 and older, or one newer than 26.05) is refused: its JSON may differ
in ways this parser would read wrongly, and a wrong parse misplaces jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_rl.errors import SlurmRLError
from slurm_rl.slurm.errors import SlurmOutputError

# Releases slurm-rl reads, oldest first: (major, minor) of each Slurm release series.
OPENAPI_RELEASES = ((22, 5),)
DATA_PARSER_RELEASES = ((23, 2), (23, 11), (24, 5), (24, 11), (25, 5), (25, 11), (26, 5))
RECORDED = {(22, 5): "22.05.8", (24, 11): "24.11.5", (26, 5): "26.05.5"}


@dataclass(frozen=True, slots=True)
class Layout:
    """How to read one Slurm release: the commands and what to call the layout."""

    version: tuple[int, int, int]
    family: str  # "openapi/v0.0.38" or "data_parser"
    jobs_argv: tuple[str, ...]
    nodes_argv: tuple[str, ...]

    @property
    def release(self) -> str:
        major, minor, micro = self.version
        return f"{major:02d}.{minor:02d}.{micro}"

    def describe(self) -> str:
        """One line for the daemon's start: the release, the layout, the commands."""
        series = self.version[:2]
        recorded = RECORDED.get(series)
        checked = (f"recorded on {recorded}" if recorded is not None
                   else "read like 24.11 and 26.05, not recorded")
        return (f"Slurm {self.release}: JSON layout {self.family} ({checked}); jobs from "
                f"'{' '.join(self.jobs_argv)}', nodes from '{' '.join(self.nodes_argv)}'")


def layout_for(version: tuple[int, int, int]) -> Layout:
    """The layout of this release; an unknown one raises :class:`SlurmVersionError`."""
    series = version[:2]
    if series in OPENAPI_RELEASES:
        return Layout(version, "openapi/v0.0.38", ("squeue", "--json"), ("sinfo", "--json"))
    if series in DATA_PARSER_RELEASES:
        return Layout(version, "data_parser", ("squeue", "--json", "--states=all"),
                      ("scontrol", "show", "nodes", "--json"))
    raise SlurmVersionError(version)


def _series(release: tuple[int, int]) -> str:
    return f"{release[0]:02d}.{release[1]:02d}"


class SlurmVersionError(SlurmOutputError):
    """A Slurm release whose JSON layout slurm-rl does not know."""

    def __init__(self, version: tuple[int, int, int]) -> None:
        known = OPENAPI_RELEASES + DATA_PARSER_RELEASES
        major, minor, micro = version
        super().__init__(
            f"Slurm {major:02d}.{minor:02d}.{micro} is not a release slurm-rl reads (it "
            f"knows {_series(known[0])} to {_series(known[-1])}); its JSON layout may differ, "
            "so nothing is parsed", path="sinfo --version")
        self.version = version


def start_line(client: object) -> str:
    """What the daemon says at start about the Slurm it reads: :meth:`Layout.describe`.
    An unknown release raises :class:`SlurmVersionError` (the daemon does not start); a
    ``sinfo --version`` that cannot run yet is said, and tried again at the first cycle."""
    layout = getattr(client, "layout", None)
    if not callable(layout):
        return f"Slurm read through {type(client).__name__}"
    try:
        found = layout()
    except SlurmVersionError:
        raise
    except SlurmRLError as exc:
        return f"Slurm version not read yet ({exc}); the first cycle tries again"
    return found.describe() if isinstance(found, Layout) else str(found)
