"""The fault suite's tally and the daemon rig it drives (tests/slurm/test_faults_live.py).

Every fault test runs inside :func:`fault`, which records whether the daemon survived it;
``tests/conftest.py`` prints ``N faults tried, N survived`` at the end of the session.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.slurm.live import LiveCluster

TRIED: list[tuple[str, bool]] = []


@contextlib.contextmanager
def fault(name: str) -> Iterator[None]:
    """Record ``name`` as survived when the block passes, as not survived when it fails."""
    try:
        yield
    except pytest.skip.Exception:
        raise
    except BaseException:
        TRIED.append((name, False))
        raise
    TRIED.append((name, True))


def summary() -> str | None:
    if not TRIED:
        return None
    survived = sum(1 for _, ok in TRIED if ok)
    line = f"{len(TRIED)} faults tried, {survived} survived"
    lost = [name for name, ok in TRIED if not ok]
    return f"{line} (not survived: {', '.join(lost)})" if lost else line


# Wrappers the daemon finds first on its PATH: while a fault file names a fault, they break
# Slurm's answers the way a real failure would; otherwise they run the real command.
SQUEUE_SHIM = """#!/bin/bash
fault=$(cat "{faults}/squeue" 2>/dev/null)
case "$fault" in
  truncate) "{real}" "$@" | head -c 1500; exit 0 ;;
  malformed) cat "{faults}/malformed.json"; exit 0 ;;
  badrecord) "{real}" "$@" | "{python}" "{faults}/one_bad_record.py"; exit 0 ;;
esac
exec "{real}" "$@"
"""

SCONTROL_SHIM = """#!/bin/bash
# vanish: cancel the jobs of an update just before it reaches slurmctld.
if [ "$(cat "{faults}/scontrol" 2>/dev/null)" = vanish ] && [ "$1" = update ]; then
  for arg in "$@"; do
    case "$arg" in JobId=*) ids="${{arg#JobId=}}"; "{scancel}" ${{ids//,/ }} ;; esac
  done
  sleep 0.5
fi
exec "{real}" "$@"
"""


@dataclass
class Rig:
    """A ``python -m slurm_rl.cli.daemon`` process on the session cluster, with fault levers."""

    live: LiveCluster
    tmp: Path
    config: Path
    faults: Path
    store: Path
    heartbeat: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)
    jobs: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.log = self.tmp / "daemon.log"

    # -- the daemon ---------------------------------------------------------------------

    def start(self) -> None:
        since = time.time()
        out = self.log.open("ab")
        argv = [sys.executable, "-m", "slurm_rl.cli.daemon", "--config", str(self.config)]
        self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                        cwd=Path(__file__).resolve().parents[2])
        out.close()
        self.live.wait_for(lambda: self._beat_since(since), "the daemon's first beat", 60.0)

    def _beat_since(self, since: float) -> bool:
        assert self.alive(), f"daemon exited: {self.output()[-2000:]}"
        text = self.heartbeat.read_text() if self.heartbeat.exists() else ""
        return text.strip().isdigit() and int(text) >= int(since)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def set_fault(self, command: str, name: str | None) -> None:
        target = self.faults / command
        if name is None:
            target.unlink(missing_ok=True)
        else:
            target.write_text(name)

    def wait_log(self, text: str, timeout_s: float = 30.0) -> None:
        self.live.wait_for(lambda: text in self.output(), f"{text!r} in the daemon's log",
                           timeout_s)

    # -- the store ----------------------------------------------------------------------

    def rows(self) -> dict[str, set[object]]:
        """Every stored row's key, per table (read-only: never blocks the daemon)."""
        tables = {"cycles": "id", "jobs": "job_key", "decisions": "id", "outcomes": "job_key"}
        with contextlib.closing(sqlite3.connect(f"file:{self.store}?mode=ro", uri=True,
                                                timeout=30)) as db:
            return {t: {r[0] for r in db.execute(f"SELECT {k} FROM {t}")}  # noqa: S608
                    for t, k in tables.items()}

    def cycles(self) -> int:
        return len(self.rows()["cycles"])

    def wait_healthy_cycles(self, count: int = 2, timeout_s: float = 40.0) -> None:
        """``count`` more healthy cycles: stored *and* beating (a cycle whose row was stored
        but whose outcomes failed is not healthy, and does not beat)."""
        start, since = self.cycles(), time.time()

        def beat() -> float:
            text = self.heartbeat.read_text().strip() if self.heartbeat.exists() else ""
            return float(text) if text.isdigit() else 0.0

        self.live.wait_for(lambda: self.alive() and self.cycles() >= start + count
                           and beat() >= int(since) + count, f"{count} healthy cycles",
                           timeout_s, every_s=0.5)

    # -- jobs ---------------------------------------------------------------------------

    def submit(self, *shapes: str, user: str = "alice", extra: tuple[str, ...] = ()) -> list[str]:
        """Short jobs, one per shape (its options, space-separated), each deferred by the
        plugin (the daemon beats)."""
        found = []
        for shape in shapes:
            job_id = self.live.sbatch(user, *shape.split(), "-t", "5", *extra,
                                      script="sleep 2")
            found.append(job_id)
        self.jobs.extend(found)
        return found

    def all_start(self, jobs: list[str] | None = None, timeout_s: float = 45.0) -> None:
        """Every job (default: every job this rig submitted) started, or already ended."""
        wanted = list(self.jobs if jobs is None else jobs)

        def started() -> bool:
            states = {j: self.live.job(j) for j in wanted}
            return all(s.start_time is not None and s.state != "PENDING"
                       for s in states.values())

        self.live.wait_for(started, f"jobs {wanted} to start", timeout_s, every_s=0.5)

    def survived(self, before: dict[str, set[object]], *, running: bool = True) -> None:
        """The daemon runs (or left cleanly), no stored row is lost, every job started."""
        if running:
            assert self.alive(), f"daemon died: {self.output()[-3000:]}"
        after = self.rows()
        for table, keys in before.items():
            lost = keys - after[table]
            assert not lost, f"{table}: rows lost: {sorted(map(str, lost))[:5]}"
        self.all_start()
        if running:
            self.wait_healthy_cycles(1)  # healthy again, not just alive
        assert "Traceback" not in self.output(), self.output()[-3000:]


def decision_lines(output: str) -> list[dict[str, object]]:
    """The daemon's JSON decision lines (the other lines are plain log text)."""
    found = []
    for line in output.splitlines():
        if line.startswith("{"):
            found.append(json.loads(line))
    return found


# Valid JSON from a 22.05 squeue that breaks the schema as a whole (its job list is no list).
MALFORMED = {
    "meta": {"plugin": {"type": "openapi/v0.0.38"},
             "Slurm": {"version": {"major": 22, "minor": 5, "micro": 8}, "release": "22.05.8"}},
    "errors": [],
    "jobs": {"job_id": "seven", "job_state": "WEIRD", "partition": 3},
}

# The real squeue's answer with one record broken: the job named "unreadable" asks for a GPU
# count that is no number.
ONE_BAD_RECORD = """import json, sys
doc = json.load(sys.stdin)
for job in doc.get("jobs", []):
    if job.get("name") == "unreadable":
        job["tres_per_node"] = "gres:gpu:a100:many"
json.dump(doc, sys.stdout)
"""


def make_shims(directory: Path, faults: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (faults / "malformed.json").write_text(json.dumps(MALFORMED))
    (faults / "one_bad_record.py").write_text(ONE_BAD_RECORD)
    scripts = {
        "squeue": SQUEUE_SHIM.format(faults=faults, real=shutil.which("squeue"),
                                     python=sys.executable),
        "scontrol": SCONTROL_SHIM.format(faults=faults, real=shutil.which("scontrol"),
                                         scancel=shutil.which("scancel")),
    }
    for name, text in scripts.items():
        path = directory / name
        path.write_text(text)
        path.chmod(0o755)


def shim_env(shims: Path) -> dict[str, str]:
    return {**os.environ, "PATH": f"{shims}:{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1"}
