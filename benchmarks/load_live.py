"""Benchmark: the production-like load of issue 19 on the native dev cluster (root and
Debian's Slurm, slurmdbd and MariaDB packages needed; scripts/install-slurm.sh).

Per policy, on a fresh private cluster (4 x a100:8, 4 x v100:4, slurmdbd on a private
MariaDB, SlurmUser ``slurm``): ``--jobs`` jobs of ``--users`` in ``--bursts`` bursts (1–16
GPUs, most untyped ``--gpus=N``, some typed, some ``-N 2|4 --gpus-per-node=M``, each a
``sleep`` of ``--sleep`` seconds); the daemon in enforce mode as ``slurm``, SIGKILLed once in
the middle of a cycle (after the middle burst) and restarted on the same store. Then the
checks of tests/slurm/load_checks.py, whose docstring states each rule:

(a) every pin decided is the job's node list or a recorded refusal; (b) 0 decisions lost
across the SIGKILL; (c) 0 mixed-type gangs for untyped requests; (d) priority updates
<= 2 per pending job per hour; (e) the users' wait ratio within the configured bound.

Printed: the plan, then per policy the cluster's start and stop, the daemon's start and
restart, submission, makespan and waits, the stored decisions and each check's figures.
A failed check is printed as FAIL (``--strict``: exit status 1).

Usage: sudo .venv/bin/python benchmarks/load_live.py [--jobs 300] [--policies
fifo+best-fit,rl+rl] [--tiny] [--plan-only] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

# The load and its checks live with the live tests (tests/slurm/test_load_live.py runs
# them too); a benchmark runs as a script, so the checkout's root goes on the path.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.slurm import load  # noqa: E402
from tests.slurm.load_checks import Measured, measure, run_figures  # noqa: E402


def _range(text: str) -> tuple[int, int]:
    low, _, high = text.partition(":")
    first, last = int(low), int(high or low)
    if not 1 <= first <= last <= 120:
        raise argparse.ArgumentTypeError(f"{text}: seconds LOW:HIGH within 1..120")
    return first, last


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--bursts", type=int, default=10)
    parser.add_argument("--gap", type=float, default=15.0, help="seconds between bursts")
    parser.add_argument("--sleep", type=_range, default=(2, 20), help="job length LOW:HIGH s")
    parser.add_argument("--users", default=",".join(load.USERS))
    parser.add_argument("--policies", default="fifo+best-fit,rl+rl")
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--no-kill", action="store_true", help="never SIGKILL the daemon")
    parser.add_argument("--drain-timeout", type=float, default=1200.0)
    parser.add_argument("--tiny", action="store_true",
                        help="24 jobs in 3 bursts, 2-6 s each, fifo+best-fit only")
    parser.add_argument("--plan-only", action="store_true",
                        help="print the plan's figures; start nothing (no root needed)")
    parser.add_argument("--keep", type=Path, help="copy slurmctld's and the daemon's logs here")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a check fails")
    args = parser.parse_args(argv)
    if args.tiny:
        args.jobs, args.bursts, args.gap, args.sleep = 24, 3, 8.0, (2, 6)
        args.policies = "fifo+best-fit"
    users = [u for u in args.users.split(",") if u]
    if len(users) < 3 or args.bursts < 1 or not 1 <= args.jobs <= 5000:
        parser.error("at least 3 users, 1 burst and 1..5000 jobs")
    args.users = tuple(users)
    return args


def _print_measured(measured: Measured) -> bool:
    print(f"cluster up {measured.up_s:.2f} s (slurmdbd, MariaDB and sacctmgr included), "
          f"down {measured.down_s:.2f} s")
    for line in run_figures(measured.run, measured.evidence):
        print(line)
    for result in measured.results.values():
        for line in result.lines():
            print(f"  {line}")
    return all(result.passed for result in measured.results.values())


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    plan = load.make_plan(args.jobs, args.bursts, args.gap, args.sleep, users=args.users,
                          seed=args.seed, kill=not args.no_kill)
    for line in load.describe(plan):
        print(line)
    if args.plan_only:
        return 0
    reason = load.missing_tools()
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    passed = True
    with tempfile.TemporaryDirectory(prefix="slurm-rl-load-bench-") as scratch:
        for policy in args.policies.split(","):
            began = time.monotonic()
            measured = measure(plan, policy, Path(scratch), args.drain_timeout, args.keep)
            passed = _print_measured(measured) and passed
            print(f"{policy}: {time.monotonic() - began:.1f} s in all")
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
