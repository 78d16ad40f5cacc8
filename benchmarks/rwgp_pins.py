"""How many starts follow the placement's pin, in ``slurm`` mode, and how many are Slurm's own.

In ``slurm`` mode a released job that found no free GPUs at a decision is started by the
emulated slurmctld at the next event, on nodes of its own choice (first fit in node order). This
replays one window with one policy, records the last node set the placement proposed for each
job, and counts the measured jobs that ran exactly there, overall and on K80 nodes.
Usage: python benchmarks/rwgp_pins.py --window 2017-10-01:2017-10-15 --policy fifo+rwgp
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rwgp_simulate import scheduler

from slurm_rl.cli.simulate import build_scenario
from slurm_rl.core import ClusterSnapshot, Job, JobId, Placement
from slurm_rl.scenario import replay


class Recorder:
    """Wraps a placement and remembers the last node set it proposed per job."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[attr-defined]
        self.pins: dict[JobId, Placement] = {}

    def observe(self, snapshot: ClusterSnapshot) -> None:
        self.inner.observe(snapshot)  # type: ignore[attr-defined]

    def exclusions(self, job: Job, snapshot: ClusterSnapshot) -> tuple[str, ...]:
        exclude = getattr(self.inner, "exclusions", None)
        return () if exclude is None else tuple(exclude(job, snapshot))

    def place(self, job: Job, free: Sequence[int], snapshot: ClusterSnapshot) -> Placement | None:
        placement: Placement | None = self.inner.place(job, free, snapshot)  # type: ignore[attr-defined]
        if placement is not None:
            self.pins[job.job_id] = placement
        return placement


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--window", default="2017-10-01:2017-10-15")
    parser.add_argument("--days", type=float, default=7.0, help="measured days of the window")
    parser.add_argument("--policy", default="fifo+rwgp")
    args = parser.parse_args()
    scenario = build_scenario({
        "cluster": "philly-hetero", "trace_name": "philly", "window_spec": args.window,
        "days": args.days, "seed": 0, "trace_format": None, "skip_bad_rows": False,
        "warmup_days": None, "mode": "slurm", "cycle_s": 10.0, "no_fluctuation": False,
    })
    sched = scheduler(args.policy)
    recorder = Recorder(sched.placement)
    sched.placement = recorder
    result = replay(scenario, sched, policy_id=args.policy)
    start = scenario.measure_from
    measured = [o for o in result.outcomes if start is None or o.job.submit_time >= start]
    pinned = {o.job.job_id for o in measured
              if (p := recorder.pins.get(o.job.job_id)) is not None and p.nodes == o.nodes}
    on_k80 = [o for o in measured if o.nodes[0].startswith("k80")]
    k80_pinned = sum(o.job.job_id in pinned for o in on_k80)
    print(f"{args.policy}: avg JCT {result.metrics.avg_jct_s / 3600:.2f} h; "
          f"{len(pinned)}/{len(measured)} starts on the placement's pin "
          f"({len(pinned) / len(measured):.1%}); K80 starts: {k80_pinned} pinned, "
          f"{len(on_k80) - k80_pinned} Slurm's own")


if __name__ == "__main__":
    main()
