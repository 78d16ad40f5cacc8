"""How long after a job's end slurmctld starts the job waiting for its node, and which of
its schedulers does (docs/slurm-emulation.md, "Slurm's start after a job's end lags").

On a private dev cluster under ``sched/backfill`` with no daemon, job A (8 GPUs, pinned
to a100-01) sleeps each given time and job B is pinned behind it; slurmctld's own log
(millisecond timestamps) says when A ended and when, and by which scheduler, B started.

    python scripts/end_lag_probe.py 3 3.5 5     # one A/B pair per sleep, in seconds

Needs root and Slurm (scripts/install-slurm.sh); about 15 s a pair.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_rl.devcluster.cluster import DevCluster  # noqa: E402
from tests.slurm.replay import PARTITION, replay_cluster  # noqa: E402

NODE = "a100-01"
START = r"(sched/backfill: _start_job: Started|sched: Allocate) JobId={job}\b"
END = r"_job_complete: JobId={job} done"


def submit(cluster: DevCluster, sleep_s: str, name: str) -> str:
    argv = ["runuser", "-u", "alice", "--", "sbatch", "--parsable", "--output=/dev/null",
            f"--chdir={cluster.jobs_dir}", f"--partition={PARTITION}", "-J", name,
            "-w", NODE, "-N", "1", "--gres=gpu:8", "-t", "1", f"--wrap=sleep {sleep_s}"]
    done = subprocess.run(argv, env=cluster.client_env(), capture_output=True, text=True,
                          timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"sbatch as alice: {done.stderr.strip()}")
    return done.stdout.strip().split(";")[0]


def find(lines: list[str], pattern: str) -> tuple[float, str] | None:
    """The first log line matching ``pattern``: its time (epoch s) and its text."""
    for line in lines:
        found = re.match(r"\[([0-9T:.\-]+)\] (.*)", line)
        if found and re.search(pattern, found.group(2)):
            return datetime.fromisoformat(found.group(1)).timestamp(), found.group(2)
    return None


def one_pair(cluster: DevCluster, log: Path, sleep_s: str) -> str:
    first, second = submit(cluster, sleep_s, "A"), submit(cluster, "3", "B")
    deadline = time.monotonic() + 90.0
    while time.monotonic() < deadline:
        lines = log.read_text().splitlines()
        end, start = find(lines, END.format(job=first)), find(lines, START.format(job=second))
        if end is not None and start is not None:
            by = "backfill" if "backfill" in start[1] else "main scheduler"
            return f"sleep {sleep_s} s: B started {start[0] - end[0]:.3f} s after A's end, by {by}"
        time.sleep(0.5)
    return f"sleep {sleep_s} s: B not started within 90 s"


def main() -> int:
    sleeps = sys.argv[1:] or ["3", "3.5"]
    with replay_cluster("backfill") as cluster:
        log = cluster.root / "log" / "slurmctld.log"
        for sleep_s in sleeps:
            print(one_pair(cluster, log, sleep_s), flush=True)
            time.sleep(4.0)  # B ends before the next pair
    return 0


if __name__ == "__main__":
    sys.exit(main())
