"""Which trace windows training may use, and the episodes drawn from them.

December 2017 of the Philly trace is the held-out evaluation month: training and tuning
(validation, checkpoint selection) refuse any window that touches it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from slurm_rl.errors import InputError
from slurm_rl.scenario import Scenario, check_something_to_measure
from slurm_rl.simulator.cluster_spec import load_cluster_spec
from slurm_rl.traces import Trace, parse_window, philly_heldout_window, window
from slurm_rl.traces.model import clock_to_datetime
from slurm_rl.training.rollout import EpisodeSpec
from slurm_rl.workloads import open_workload, window_bounds

DAY = 86400.0
HOUR = 3600.0


def is_philly(trace: str) -> bool:
    return trace == "philly" or "philly" in trace.lower()


def check_not_held_out(trace: str, *windows: str) -> None:
    """Refuses a training or tuning window that overlaps Philly's held-out December."""
    if not is_philly(trace):
        return
    low, high = philly_heldout_window()
    for spec in windows:
        start, end = parse_window(spec)
        if start < high and end > low:
            raise InputError(
                f"window {spec} overlaps December 2017, Philly's held-out evaluation month: "
                "train and tune on September-November only"
            )


def check_windows(trace: str, cluster: str, windows: Mapping[str, str]) -> None:
    """Each window (keyed by its option) must hold jobs of ``trace`` that can run on
    ``cluster``: said before training starts, as ``simulate`` says it of ``--window``
    (:func:`~slurm_rl.workloads.window_bounds`), not by a traceback from the metrics after
    the warm start, or from PPO after every episode came back empty."""
    loaded, spec = open_workload(trace), load_cluster_spec(cluster)
    for option, window_spec in windows.items():
        start, end = window_bounds(loaded, window_spec, option)
        try:
            check_something_to_measure(Scenario(spec, window(loaded, start, end)))
        except InputError as error:
            raise InputError(f"{option} {window_spec}: {error.reason}") from None


@dataclass
class EpisodeSampler:
    """Episode windows inside ``window_spec``: ``warmup_days`` of heuristic warm-up, then
    ``episode_days`` for the agent, starting on a whole hour drawn uniformly; with ``loads``,
    each episode also draws one of them uniformly, the offered load its cluster is scaled to
    (:class:`~slurm_rl.training.pool.WorldSpec`). Without ``loads`` nothing more is drawn, so
    the episodes are those of a run before loads existed."""

    trace: Trace
    window_spec: str
    warmup_days: float
    episode_days: float
    loads: tuple[float, ...] = ()
    used: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        start, end = parse_window(self.window_spec)
        self.low = start + self.warmup_days * DAY
        self.high = end - self.episode_days * DAY
        if self.high <= self.low:
            raise InputError(
                f"window {self.window_spec} is shorter than warm-up + episode "
                f"({self.warmup_days + self.episode_days:g} days)"
            )

    def sample(self, rng: np.random.Generator, count: int, seed: int,
               iteration: int) -> list[EpisodeSpec]:
        specs = []
        for k in range(count):
            start = HOUR * np.floor(rng.uniform(self.low, self.high) / HOUR)
            load = self.loads[int(rng.integers(len(self.loads)))] if self.loads else None
            specs.append(EpisodeSpec(
                warmup_start=start - self.warmup_days * DAY,
                start=start,
                end=start + self.episode_days * DAY,
                seed=seed * 1_000_003 + iteration * 1_009 + k,
                load=load,
            ))
            when = clock_to_datetime(start).isoformat()
            self.used.append(when if load is None else f"{when}@{load:g}")
        return specs
