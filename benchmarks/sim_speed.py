"""Benchmark: the simulator's speed against older commits, one run, same machine, same schedules.

Replays one trace (default: the full Philly trace, slurm mode, FIFO + first-fit on
philly-hetero) with the code of each commit asked for and with this working tree, each in its
own subprocess, and prints per leg the replay's wall and CPU time, the speed-up of this tree
over each commit, and whether the schedules are identical: a SHA-256 over every finished
job's id, start, end, nodes and GPUs (floats by ``repr``, so bit for bit).

An older commit's tree is extracted with ``git archive`` into a temporary folder beside this
checkout (so that ``../shared`` is found the same way; ``SLURM_RL_SHARED`` is passed on too)
and removed afterwards. A commit this clone lacks (a shallow clone, an exported tree) is
skipped, and the output says so.

Usage: python benchmarks/sim_speed.py [--commits 280e590,e8c15a5] [--trace philly]
       [--window 2017-10-01:2017-10-15] [--days 7] [--policy fifo+first-fit] [--mode slurm]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# 280e590: main when issue 21 asked for the speed-up; e8c15a5: the branch point of the speed
# work, whose Slurm emulation (promoted-only priorities) the golden schedules keep.
DEFAULT_COMMITS = "280e590,e8c15a5"

# Run inside the tree under test (its own slurm_rl first on sys.path); only the API that
# every commit since 280e590 has. Prints one JSON line.
CHILD = """
import hashlib, json, sys, time
from slurm_rl.agents.registry import make_scheduler
from slurm_rl.scenario import Scenario, replay
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.simulator.engine import SimConfig
from slurm_rl.simulator.perfmodel import datasheet_gpu_speeds
from slurm_rl.workloads import open_workload
a = json.loads(sys.argv[1])
trace = open_workload(a["trace"], window_spec=a["window"], days=a["days"])
wall, cpu = time.perf_counter(), time.process_time()
scenario = Scenario(load_cluster_spec(a["cluster"]), trace, SimConfig(mode=a["mode"]))
result = replay(scenario, make_scheduler(a["policy"], datasheet_gpu_speeds()),
                policy_id=a["policy"])
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
digest = hashlib.sha256()
for o in result.outcomes:
    digest.update(repr((o.job.job_id, o.start, o.end, tuple(o.nodes), tuple(o.gpus))).encode())
print(json.dumps({"jobs": len(result.outcomes), "cycles": result.cycles, "wall_s": wall,
                  "cpu_s": cpu, "schedule": digest.hexdigest()}))
"""


@dataclass(frozen=True)
class Leg:
    name: str
    jobs: int
    cycles: int
    wall_s: float
    cpu_s: float
    schedule: str


def main() -> None:
    args = _parse()
    replay = json.dumps({"trace": args.trace, "window": args.window, "days": args.days,
                         "cluster": args.cluster, "policy": args.policy, "mode": args.mode})
    print(f"trace {args.trace} (window {args.window or 'all'}), cluster {args.cluster}, "
          f"{args.policy}, {args.mode} mode; CPU and wall time of the replay alone "
          "(not the trace's loading)")
    legs: list[Leg] = []
    for commit in filter(None, args.commits.split(",")):
        leg = _commit_leg(commit, replay)
        if leg is None:
            print(f"{commit}: not in this clone's history, skipped")
        else:
            legs.append(leg)
            _print(leg)
    current = _run(ROOT, "this tree", replay)
    _print(current)
    for leg in legs:
        same = "identical" if leg.schedule == current.schedule else "DIFFERENT"
        print(f"this tree vs {leg.name}: {leg.cpu_s / current.cpu_s:.2f}x CPU, "
              f"{leg.wall_s / current.wall_s:.2f}x wall; schedules {same}")
    print("(280e590's Slurm emulation is older (EASY backfill, other priorities): its schedules "
          "may differ by semantics; the identity check is against the speed work's branch "
          "point e8c15a5)")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", default=DEFAULT_COMMITS,
                        help="older commits to compare with, comma-separated [%(default)s]")
    parser.add_argument("--trace", default="philly")
    parser.add_argument("--window", default=None, help="a window of the trace [all of it]")
    parser.add_argument("--days", type=float, default=7.0, help="synthetic trace: its length")
    parser.add_argument("--cluster", default="philly-hetero")
    parser.add_argument("--policy", default="fifo+first-fit")
    parser.add_argument("--mode", choices=["direct", "slurm"], default="slurm")
    return parser.parse_args()


def _commit_leg(commit: str, replay: str) -> Leg | None:
    """Replay with ``commit``'s tree, extracted beside this checkout; None if it is absent."""
    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
                           capture_output=True, check=False)
    if known.returncode != 0:
        return None
    tree = Path(tempfile.mkdtemp(prefix=f"sim-speed-{commit}-", dir=ROOT.parent))
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        return _run(tree, commit, replay)
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def _run(tree: Path, name: str, replay: str) -> Leg:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.setdefault("SLURM_RL_SHARED", str(ROOT.parent / "shared"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", CHILD, replay], cwd=tree, env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{name}: the replay failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    process_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"{name}: whole process {process_cpu:.1f} CPU-s (imports and trace loading included)")
    return Leg(name, result["jobs"], result["cycles"], result["wall_s"], result["cpu_s"],
               result["schedule"])


def _print(leg: Leg) -> None:
    print(f"{leg.name}: {leg.jobs:,} jobs, {leg.cycles:,} decision cycles; replay "
          f"{leg.wall_s:.2f} s wall, {leg.cpu_s:.2f} s CPU; schedule {leg.schedule[:16]}")


if __name__ == "__main__":
    main()
