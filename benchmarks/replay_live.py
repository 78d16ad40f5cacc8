"""Sim-to-real (issue 22): mini-traces run by a real slurmctld 22.05 with the daemon steering
it, and by the simulator's emulation of it, compared job by job.

Every (trace, policy, scheduler) run gets a fresh private dev cluster (2 x a100:8, 2 x v100:4)
under ``sched/<scheduler>``, the daemon in enforce mode in this process, and plain ``sbatch``
of alice and bob at the trace's times (tests/slurm/replay.py). The table: per run, Kendall
tau of start order, the share of jobs on identical node sets, the median and p95 of
|simulated − real wait| (seconds, Slurm's clock), and how many jobs disagree (another rank,
other nodes, or > 5 s apart); with ``--jobs-detail`` every disagreeing job is listed.

    python benchmarks/replay_live.py                 # 5 traces x 3 policies x 2 schedulers
    python benchmarks/replay_live.py --tiny          # one short trace, fifo+best-fit, both
    python benchmarks/replay_live.py --plan-only     # the traces, nothing started
    python benchmarks/replay_live.py --save runs/    # keep each run's live half (JSON)
    python benchmarks/replay_live.py --until 07:48   # start no run that would end later
    python benchmarks/replay_live.py --from runs/    # re-simulate saved runs: no Slurm
    python benchmarks/replay_live.py --from benchmarks/replay_live_runs   # the published table
    python benchmarks/replay_live.py --from runs/ --spread 10   # and 10 jittered replays each
    python benchmarks/replay_live.py --dispatch      # the daemon with dispatch = true

Needs root and Slurm (scripts/install-slurm.sh); about 1.5 min a run.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_rl.devcluster.config import DevClusterConfig  # noqa: E402
from slurm_rl.sim2real import (  # noqa: E402
    SUMMARY_HEADER,
    Comparison,
    Spread,
    job_lines,
    kind_of,
    spread,
    summary_line,
)
from slurm_rl.simulator.slurm_emulation import SLURM_SCHEDULERS, SlurmScheduler  # noqa: E402
from tests.slurm.replay import (  # noqa: E402
    GROUPS,
    SLURM_END_LAG_S,
    MiniJob,
    make_trace,
    replay_cluster,
    resimulate,
    resimulate_jittered,
    run_live,
    save_run,
)

POLICIES = ("fifo+best-fit", "multifactor+best-fit", "rl+rl")


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=5, help="mini-traces (seeds 1..N)")
    parser.add_argument("--seeds", default=None, help="these trace seeds instead, e.g. 1,4")
    parser.add_argument("--save", type=Path, default=None,
                        help="write each run's live half here (JSON), for --from")
    parser.add_argument("--from", dest="saved", type=Path, default=None,
                        help="re-simulate the runs saved in this directory (or this one run's "
                             "file); start nothing")
    parser.add_argument("--jobs", type=int, default=20, help="jobs a trace")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--schedulers", default=",".join(SLURM_SCHEDULERS))
    parser.add_argument("--tiny", action="store_true",
                        help="one trace of 8 jobs, fifo+best-fit, both schedulers")
    parser.add_argument("--plan-only", action="store_true", help="print the traces and stop")
    parser.add_argument("--jobs-detail", action="store_true", help="list disagreeing jobs")
    parser.add_argument("--dispatch", action="store_true",
                        help="run the daemon with dispatch = true (only its decisions start "
                             "jobs; docs/daemon.md) and the emulation likewise")
    parser.add_argument("--spread", type=int, default=0, metavar="N",
                        help="with --from: also replay each run N times with the sub-second "
                             "timings drawn anew (tests/slurm/replay.py Jitter) and say which "
                             "live node sets some replica reaches")
    parser.add_argument("--end-lag", type=float, default=SLURM_END_LAG_S, metavar="S",
                        help="with --from: Slurm starts nothing on a job's nodes until this "
                             "long after its end (SimConfig.slurm_end_lag_s; default the "
                             f"measured {SLURM_END_LAG_S:g} s; 0: at once)")
    parser.add_argument("--until", default=None, metavar="HH:MM",
                        help="UTC time by which the live runs must be done (a shared cluster's "
                             "slot): a run that would end later, by the longest so far, is "
                             "not started")
    args = parser.parse_args()
    if args.tiny:
        args.traces, args.jobs, args.policies = 1, 8, "fifo+best-fit"
    for name in args.schedulers.split(","):
        if name not in SLURM_SCHEDULERS:
            parser.error(f"--schedulers: unknown {name!r} (known: {', '.join(SLURM_SCHEDULERS)})")
    if args.end_lag < 0:
        parser.error(f"--end-lag: a number of seconds >= 0, not {args.end_lag:g}")
    if args.spread < 0 or (args.spread and args.saved is None):
        parser.error("--spread takes a number of replicas, with --from")
    if args.traces < 1 or args.jobs < 1:
        parser.error("--traces and --jobs must be at least 1")
    try:
        args.seeds = ([int(s) for s in args.seeds.split(",")] if args.seeds
                      else list(range(1, args.traces + 1)))
    except ValueError:
        parser.error(f"--seeds: not a list of numbers: {args.seeds!r}")
    if args.saved is not None and not args.saved.exists():
        parser.error(f"--from: no such file or directory: {args.saved}")
    args.deadline = _deadline(parser, args.until)
    return args


def _deadline(parser: argparse.ArgumentParser, until: str | None) -> float:
    """``HH:MM`` UTC as epoch seconds (today's, or tomorrow's if that has passed)."""
    if until is None:
        return math.inf
    try:
        hours, minutes = (int(part) for part in until.split(":"))
        when = datetime.now(UTC).replace(hour=hours, minute=minutes, second=0, microsecond=0)
    except ValueError:
        parser.error(f"--until: not a time HH:MM: {until!r}")
    if when.timestamp() < time.time():
        when += timedelta(days=1)
    return when.timestamp()


def _describe(seed: int, trace: tuple[MiniJob, ...]) -> str:
    gpus = sum(j.nodes * j.gpus_per_node * j.sleep_s for j in trace)
    span = trace[-1].offset_s
    return (f"trace {seed}: {len(trace)} jobs over {span:.0f} s, sleeps "
            f"{min(j.sleep_s for j in trace)}-{max(j.sleep_s for j in trace)} s, "
            f"{gpus} GPU-s asked of 24 GPUs")


def main() -> int:
    args = _args()
    if args.saved is not None:
        return _from_saved(args.saved, args.jobs_detail, args.spread, args.end_lag)
    traces = {seed: make_trace(args.jobs, seed) for seed in args.seeds}
    for seed, trace in traces.items():
        print(_describe(seed, trace))
    if args.plan_only:
        return 0
    if os.geteuid() != 0 or shutil.which("slurmctld") is None:
        print("needs root and Slurm (scripts/install-slurm.sh)", file=sys.stderr)
        return 1
    results: list[tuple[str, Comparison, float]] = []
    work = Path(tempfile.mkdtemp(prefix="slurm-rl-replay-state-"))
    longest, skipped = 0.0, []
    try:
        for scheduler_name in args.schedulers.split(","):
            scheduler: SlurmScheduler = "builtin" if scheduler_name == "builtin" else "backfill"
            for seed, trace in traces.items():
                for policy in args.policies.split(","):
                    if time.time() + longest > args.deadline:
                        skipped.append(f"{scheduler}-{seed}-{policy}")
                        continue
                    began = time.monotonic()
                    try:
                        results.append(_one(work, trace, seed, policy, scheduler, args))
                    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
                        # one failed run (a timeout, a cluster that did not come up) should
                        # not cost the slot's other runs
                        print(f"{scheduler}-{seed}-{policy}: failed: {error}", flush=True)
                    longest = max(longest, time.monotonic() - began)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if skipped:
        print(f"not run (past --until {args.until}): {', '.join(skipped)}")
    if results:
        _print_table(results)
    return 0


def _from_saved(directory: Path, detail: bool, replicas: int = 0,
                end_lag_s: float = SLURM_END_LAG_S) -> int:
    results = []
    spreads: list[tuple[str, Spread]] = []
    paths = sorted(directory.glob("*.json")) if directory.is_dir() else [directory]
    for path in paths:
        run = resimulate(path, end_lag_s)
        results.append((path.stem, run.comparison, run.overhead_s))
        if detail:
            print(summary_line(path.stem, run.comparison))
            print("\n".join(job_lines(run.comparison)))
        if replicas:
            sims = resimulate_jittered(path, replicas, end_lag_s=end_lag_s)
            spreads.append((path.stem, spread(run.real, sims)))
    if not results:
        print(f"no saved runs (*.json) in {directory}", file=sys.stderr)
        return 1
    _print_table(results)
    if spreads:
        _print_spreads(spreads)
    return 0


def _print_spreads(spreads: list[tuple[str, Spread]]) -> None:
    """Per run: the best of the jittered replicas, and the live node sets some reach."""
    replicas = spreads[0][1].replicas
    print(f"\nwith the sub-second timings drawn anew, {replicas} replicas a run "
          "(best replica; reach = live node set in some replica):")
    print(SUMMARY_HEADER + f" {'reach':>7}")
    for label, result in spreads:
        print(summary_line(label, result.best) + f" {100 * result.reachable:>6.1f}%")
    jobs = [row for _, r in spreads for row in r.best.jobs]
    same = sum(row.same_nodes for row in jobs) / max(1, len(jobs))
    taus = sorted(r.best.tau for _, r in spreads)
    reach = sum(r.reachable for _, r in spreads) / len(spreads)
    print(f"best replicas: identical node sets {100 * same:.1f}%, tau min {taus[0]:.3f} median "
          f"{taus[len(taus) // 2]:.3f}; live node sets reached {100 * reach:.1f}%")


def _one(work: Path, trace: tuple[MiniJob, ...], seed: int, policy: str,
         scheduler: SlurmScheduler, args: argparse.Namespace) -> tuple[str, Comparison, float]:
    began = time.monotonic()
    prefix = "dispatch-" if args.dispatch else ""
    name = f"{prefix}{scheduler}-{seed}-{policy.replace('+', '-')}"
    with replay_cluster(scheduler) as cluster:
        run = run_live(cluster, trace, policy, scheduler, work / name, dispatch=args.dispatch)
    if args.save is not None:
        args.save.mkdir(parents=True, exist_ok=True)
        save_run(run, args.save / f"{name}.json")
    label = f"{prefix}{scheduler:<8} trace {seed} {policy}"
    comparison = run.comparison
    print(summary_line(label, comparison)
          + f"  ({time.monotonic() - began:.0f} s, run time − sleep {run.overhead_s:+.2f} s)",
          flush=True)
    if args.jobs_detail:
        print("\n".join(job_lines(comparison)), flush=True)
    return label, comparison, run.overhead_s


def _print_table(results: list[tuple[str, Comparison, float]]) -> None:
    print()
    print(SUMMARY_HEADER)
    for label, comparison, _ in results:
        print(summary_line(label, comparison))
    overheads = [overhead for _, _, overhead in results]
    print(f"run time − sleep, mean per run: {min(overheads):+.2f} to {max(overheads):+.2f} s")
    jobs = [row for _, c, _ in results for row in c.jobs]
    errors = sorted(abs(row.start_error) for row in jobs)
    same = sum(row.same_nodes for row in jobs) / max(1, len(jobs))
    taus = sorted(c.tau for _, c, _ in results)
    median = errors[len(errors) // 2] if errors else 0.0
    print(f"all {len(results)} runs, {len(jobs)} jobs: identical node sets {100 * same:.1f}%, "
          f"tau min {taus[0]:.3f} median {taus[len(taus) // 2]:.3f}, "
          f"median start error {median:.1f} s")
    types = {node.name: node.gpu_type for node in DevClusterConfig(groups=GROUPS).nodes()}
    kinds = Counter(kind_of(row, types) for _, c, _ in results for row in c.disagreements)
    print("disagreeing jobs: " + (", ".join(f"{k} {n}" for k, n in kinds.most_common())
                                   or "none"))


if __name__ == "__main__":
    sys.exit(main())
