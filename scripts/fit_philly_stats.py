#!/usr/bin/env python3
"""Fit the synthetic workload's statistics to Philly September-November 2017.

Reads ../shared/traces/philly_pollux_jobs.csv.gz (or --trace) and writes
slurm_rl/data/philly_stats.json (or --out). December is never read into the fit.

    .venv/bin/python scripts/fit_philly_stats.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from slurm_rl.errors import SlurmRLError
from slurm_rl.paths import DATA_DIR, shared_traces_dir
from slurm_rl.traces import load_trace
from slurm_rl.traces.philly_fit import fit_philly_stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument(
        "--trace", type=Path, default=shared_traces_dir() / "philly_pollux_jobs.csv.gz"
    )
    parser.add_argument("--out", type=Path, default=DATA_DIR / "philly_stats.json")
    args = parser.parse_args(argv)
    try:
        stats = fit_philly_stats(load_trace(args.trace, "philly"))
    except SlurmRLError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(stats, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {stats['jobs']} jobs, {stats['jobs_per_hour']:.1f} jobs/hour")
    return 0


if __name__ == "__main__":
    sys.exit(main())
