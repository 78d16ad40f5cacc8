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

``--load X`` replays on the cluster scaled to offer load X (``slurm-rl simulate --load``,
the load sweep's scaling; commits from 2f96ab5 on); ``--dispatch`` ranks with the daemon's
dispatch rule and holds jobs up to the longest hold (``simulate --dispatch``; from 5d65346
on). ``--repeat N`` replays each leg N times, the legs taking turns (on a shared machine,
noise then hits each alike), and keeps each leg's least CPU time.

Usage: python benchmarks/sim_speed.py [--commits 280e590,e8c15a5] [--trace philly]
       [--window 2017-10-01:2017-10-15] [--days 7] [--policy fifo+first-fit] [--mode slurm]
       [--load 1.0] [--dispatch] [--repeat 1]
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
from slurm_rl.simulator.perfmodel import datasheet_gpu_speeds
try:
    from slurm_rl.simulator.sim_config import SimConfig
except ImportError:  # older commits: it lived in the engine
    from slurm_rl.simulator.engine import SimConfig
from slurm_rl.workloads import open_workload
a = json.loads(sys.argv[1])
trace = open_workload(a["trace"], window_spec=a["window"], days=a["days"])
rules, config = None, SimConfig(mode=a["mode"])
if a["dispatch"]:  # (imported only then: older commits lack it)
    from slurm_rl.fairness import LONGEST_HOLD_S, RankingRules
    rules = RankingRules(dispatch=True)
    config = SimConfig(mode=a["mode"], hold_cap_s=LONGEST_HOLD_S)
scenario = Scenario(load_cluster_spec(a["cluster"]), trace, config)
if a["load"] is not None:
    from slurm_rl.offered_load import load_points
    scenario = load_points(scenario, [a["load"]])[0].scenario
scheduler = make_scheduler(a["policy"], datasheet_gpu_speeds(), rules=rules) if rules else (
    make_scheduler(a["policy"], datasheet_gpu_speeds()))
wall, cpu = time.perf_counter(), time.process_time()
result = replay(scenario, scheduler, policy_id=a["policy"])
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
                         "cluster": args.cluster, "policy": args.policy, "mode": args.mode,
                         "load": args.load, "dispatch": args.dispatch})
    load = "" if args.load is None else f" scaled to load {args.load:g}"
    print(f"trace {args.trace} (window {args.window or 'all'}), cluster {args.cluster}{load}, "
          f"{args.policy}, {args.mode} mode{', dispatch' if args.dispatch else ''}; CPU and "
          "wall time of the replay alone (not the trace's loading)")
    trees: dict[str, Path] = {}
    try:
        for commit in filter(None, args.commits.split(",")):
            tree = _extract(commit)
            if tree is None:
                print(f"{commit}: not in this clone's history, skipped")
            else:
                trees[commit] = tree
        legs, current = _race(trees, replay, args.repeat)
    finally:
        for tree in trees.values():
            shutil.rmtree(tree, ignore_errors=True)
    for leg in [*legs, current]:
        _print(leg)
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
    parser.add_argument("--load", type=float, default=None,
                        help="replay on the cluster scaled to offer this load [as it is]")
    parser.add_argument("--dispatch", action="store_true",
                        help="rank with the dispatch rule, holding jobs up to the longest hold")
    parser.add_argument("--repeat", type=int, default=1,
                        help="replays per leg, legs taking turns; the least CPU time is kept")
    return parser.parse_args()


def _extract(commit: str) -> Path | None:
    """``commit``'s tree, extracted beside this checkout; None if the clone lacks it."""
    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
                           capture_output=True, check=False)
    if known.returncode != 0:
        return None
    tree = Path(tempfile.mkdtemp(prefix=f"sim-speed-{commit}-", dir=ROOT.parent))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def _race(trees: dict[str, Path], replay: str, repeat: int) -> tuple[list[Leg], Leg]:
    """Each commit's leg and this tree's, ``repeat`` rounds of one replay each; per leg the
    round with the least CPU time (the schedules of all rounds must agree)."""
    runs: dict[str, list[Leg]] = {name: [] for name in [*trees, "this tree"]}
    for _ in range(max(1, repeat)):
        for name, tree in [*trees.items(), ("this tree", ROOT)]:
            runs[name].append(_run(tree, name, replay))
    best = {}
    for name, legs in runs.items():
        if len({leg.schedule for leg in legs}) > 1:
            sys.exit(f"{name}: its rounds' schedules differ (the replay is not deterministic)")
        best[name] = min(legs, key=lambda leg: leg.cpu_s)
    current = best.pop("this tree")
    return list(best.values()), current


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
