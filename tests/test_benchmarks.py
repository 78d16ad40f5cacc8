"""Every script in benchmarks/ runs on a tiny input, so none can rot unseen (issue 19: the
cycle benchmark had ended in a KeyError since the source began asking for reservations).
These are smoke runs: they check that each script finishes and prints its figures, never a
time (timings are compared by running a benchmark itself, old commit against new)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "traces"
PHILLY_WINDOW = ("--window", "2017-10-01:2017-10-02", "--days", "0.1")

TINY: dict[str, tuple[tuple[str, ...], str]] = {
    "daemon_cycle.py": (("--pending", "50", "--running", "20", "--finished", "5", "--nodes",
                         "20", "--cycles", "2"), "parse+decide+plan"),
    # A live run needs root, Slurm and minutes: tests/slurm/test_load_live.py runs the same
    # load and checks (marker slurm); here the plan is made and printed, nothing started.
    "load_live.py": (("--tiny", "--plan-only"), "by kind"),
    "ordering_inference.py": (("--jobs", "50", "--repeat", "2"), "median"),
    # Sim-to-real needs root, Slurm and minutes: tests/slurm/test_replay_live.py runs one
    # short trace (marker slurm); here one saved live run is simulated again and compared.
    "replay_live.py": (("--from", "benchmarks/replay_live_runs/builtin-4-fifo-best-fit.json"),
                       "identical node sets"),
    "replay_philly.py": (("--trace", "synthetic", "--cluster", "tiny", "--days", "0.2"),
                         "avg JCT"),
    # the old-commit leg is skipped, and says so, where the clone lacks that commit
    "sim_speed.py": (("--trace", "synthetic", "--cluster", "tiny", "--days", "0.1",
                      "--commits", "e8c15a5,0000000"), "0000000: not in this clone's history"),
    "rwgp_cycle.py": (("--machines", "20", "--pending", "10", "--finished", "2",
                       "--warmup-hours", "1", "--repeat", "1"), ""),
    "rwgp_moves.py": (("--machines", "20", "--running", "20", "--repeat", "1"), ""),
    "rwgp_pins.py": (PHILLY_WINDOW, "starts on the placement's pin"),
    "rwgp_simulate.py": ((*PHILLY_WINDOW, "--policies", "fifo+best-fit,fifo+rwgp",
                          "--workers", "1"), "avg JCT"),
}
NEEDS_PHILLY = {"rwgp_pins.py", "rwgp_simulate.py"}


def test_every_benchmark_has_a_tiny_run() -> None:
    scripts = {path.name for path in (ROOT / "benchmarks").glob("*.py")}
    assert scripts == set(TINY), "give each new benchmark a tiny input here"


@pytest.mark.parametrize("script", sorted(TINY))
def test_the_benchmark_runs_on_a_tiny_input(script: str) -> None:
    if script in NEEDS_PHILLY and not (SHARED_TRACES / "philly_pollux_jobs.csv.gz").exists():
        pytest.skip("the Philly trace is not beside the checkout (../shared/traces)")
    args, expected = TINY[script]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.strip() and expected in done.stdout, done.stdout[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
