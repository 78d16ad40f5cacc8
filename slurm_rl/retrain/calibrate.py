"""A simulator scenario calibrated on the logged window.

* **Cluster**: the GPU nodes the daemon stored, grouped by (GPU type, GPUs per node), with
  their configured prices. Machine speeds enter as the fluctuation model's stragglers: nodes
  whose refit RWGP posterior mean is below :data:`STRAGGLER_BELOW` of nominal.
* **Machine speeds / the placement GP**: every finished job is a speed reading of its node
  set: its class's median runtime over its own runtime (a class is the user and the request
  shape), with the runtime-derived readings' extra noise. The RWGP is refit on them (type-II
  ML) and saved with the candidate (``rwgp.pt``).
* **Replay trace** (what the gate judges on): the logged jobs themselves, with their submit
  times, shapes, GPU types, limits and runtimes.
* **Training trace** (what fine-tuning learns on): arrivals at the logged rate (Poisson),
  requests resampled from the logged jobs, runtimes from the same job's runtime with
  log-normal jitter, for ``repeats`` spans of the logged window.

The runtimes are taken as measured on the most common logged GPU type (the trace's reference
GPU): a runtime does not say how much of it was GPU speed. That is an approximation.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from slurm_rl.core import Cluster, Node, SpeedObservation
from slurm_rl.retrain.window import LoggedJob, LoggedWindow
from slurm_rl.traces.families import canonical_gpu_type

STRAGGLER_BELOW = 0.85
RUNTIME_READING_VAR = 0.05  # extra noise of a runtime-derived speed reading (relative²)
MIN_SPAN_S = 600.0


@dataclass(frozen=True)
class Calibration:
    cluster_spec: Path
    replay_trace: Path
    training_trace: Path
    reference_gpu: str
    span_s: float  # one training span (the logged window's length, at least MIN_SPAN_S)
    repeats: int
    origin: float  # the training trace starts here
    node_speed: dict[str, float]
    stragglers: int
    gp_loss: float
    readings: int
    gp_hyperparameters: dict[str, Any] | None = None  # the refit prior, for the bundle


def calibrate(window: LoggedWindow, work: Path, *, repeats: int, seed: int) -> Calibration:
    work.mkdir(parents=True, exist_ok=True)
    reference = _reference_gpu(window)
    speeds, loss, readings, fitted = refit_gp(window, work / "rwgp.pt")
    slow = [s for s in speeds.values() if s < STRAGGLER_BELOW]
    spec = work / "cluster.toml"
    spec.write_text(cluster_toml(window, slow))
    replay = work / "replay.csv"
    _write_trace(replay, reference, [_row(j) for j in window.jobs])
    span = max(window.end - window.start, MIN_SPAN_S)
    origin = math.floor(window.start)
    training = work / "training.csv"
    rows = synthetic_rows(window, np.random.default_rng(seed), origin, span * repeats)
    _write_trace(training, reference, rows)
    return Calibration(spec, replay, training, reference, span, repeats, origin, speeds,
                       len(slow), loss, readings, fitted)


# ----- machine speeds ---------------------------------------------------------------------


def speed_readings(window: LoggedWindow) -> list[SpeedObservation]:
    """One reading per job: its class's median runtime over its runtime (1 = typical)."""
    by_class: dict[tuple[object, ...], list[float]] = defaultdict(list)
    for job in window.jobs:
        by_class[_job_class(job)].append(job.runtime)
    medians = {key: statistics.median(values) for key, values in by_class.items()}
    return [
        SpeedObservation(job.end_time, job.nodes, "",
                         float(np.clip(medians[_job_class(job)] / job.runtime, 0.05, 2.0)))
        for job in window.jobs
    ]


def _job_class(job: LoggedJob) -> tuple[object, ...]:
    return (job.user, job.num_gpus, job.num_nodes, job.gpu_type, job.time_limit_s)


def refit_gp(window: LoggedWindow, path: Path
             ) -> tuple[dict[str, float], float, int, dict[str, Any] | None]:
    """Refit the RWGP on the window's readings; returns each node's posterior mean speed,
    the fit's negative log marginal likelihood per reading (NaN with fewer than 8 readings:
    the prior's hyperparameters stay), the number of readings, and the refit
    hyperparameters (None when there was no fit)."""
    from slurm_rl.agents.rwgp.model import RwgpModel  # lazy: torch and gpytorch

    cluster = Cluster(window.cluster, tuple(window.nodes))
    model = RwgpModel(cluster)
    readings = speed_readings(window)
    model.observe(readings, [RUNTIME_READING_VAR] * len(readings))
    model.flush()
    loss = model.fit()
    model.advance(window.end)
    mean = model.predict().mean
    model.save(path)
    fitted = model.hyperparameters() if math.isfinite(loss) else None
    return {node.name: float(m) for node, m in zip(cluster.nodes, mean, strict=True)}, loss, \
        len(readings), fitted


# ----- the cluster spec -------------------------------------------------------------------


def _reference_gpu(window: LoggedWindow) -> str:
    used: Counter[str] = Counter()
    by_name = {node.name: node for node in window.nodes}
    for job in window.jobs:
        used[by_name[job.nodes[0]].gpu_type] += 1
    return _measured_type(used.most_common(1)[0][0])[0]


def _measured_type(gpu_type: str) -> tuple[str, str | None]:
    """(type name for the spec, speed_like) for a GPU type as Slurm names it."""
    known = canonical_gpu_type(gpu_type)
    if known is not None:
        return known, None
    return gpu_type.upper(), "V100"  # unmeasured hardware: assumed as fast as a V100


def cluster_toml(window: LoggedWindow, slow_speeds: list[float]) -> str:
    groups: dict[tuple[str, int, float], int] = Counter(
        (n.gpu_type, n.gpus, n.price_per_gpu_hour) for n in window.nodes)
    lines = [f'name = "{_spec_name(window.cluster)}"',
             f'description = "calibrated from the store: cluster {window.cluster}"', ""]
    for index, ((gpu_type, gpus, price), count) in enumerate(sorted(groups.items())):
        name, like = _measured_type(gpu_type)
        lines += ["[[node_groups]]", f'prefix = "g{index}-{name.lower()}"',
                  f'gpu_type = "{name}"', f"count = {count}", f"gpus_per_node = {gpus}",
                  f"price_per_gpu_hour = {price!r}",
                  'price_source = "the daemon\'s price_per_gpu_hour"']
        if like is not None:
            lines.append(f'speed_like = "{like}"')
        lines.append("")
    if slow_speeds:
        share = len(slow_speeds) / len(window.nodes)
        factor = float(np.clip(statistics.mean(slow_speeds), 0.05, 1.0))
        lines += ["[fluctuation]", "enabled = true", f"straggler_share = {share!r}",
                  f"straggler_factor = {factor!r}", ""]
    return "\n".join(lines)


def _spec_name(cluster: str) -> str:
    cleaned = "".join(c if c.isalnum() else "-" for c in cluster.lower()).strip("-")
    return f"logged-{cleaned or 'cluster'}"


# ----- traces -----------------------------------------------------------------------------

COLUMNS = ("job_id", "submit_time", "num_gpus", "duration", "user", "partition", "num_nodes",
           "gpus_per_node", "gpu_type", "time_limit")


def _row(job: LoggedJob, job_id: str | None = None, submit: float | None = None,
         runtime: float | None = None) -> list[object]:
    per_node = job.num_gpus // job.num_nodes if job.num_gpus % job.num_nodes == 0 else ""
    gpu_type = (canonical_gpu_type(job.gpu_type) or "") if job.gpu_type else ""
    return [job_id or job.job_id, round(submit if submit is not None else job.submit_time, 3),
            job.num_gpus, round(max(runtime if runtime is not None else job.runtime, 1.0), 3),
            job.user, job.partition, job.num_nodes if per_node else "", per_node, gpu_type,
            job.time_limit_s or ""]


def synthetic_rows(window: LoggedWindow, rng: np.random.Generator, origin: float,
                   length_s: float) -> list[list[object]]:
    """Poisson arrivals at the logged rate; requests and runtimes resampled from the log."""
    jobs = window.jobs
    rate = len(jobs) / max(window.end - window.start, MIN_SPAN_S)
    rows: list[list[object]] = []
    now, k = origin, 0
    while True:
        now += rng.exponential(1.0 / rate)
        if now >= origin + length_s:
            return rows
        job = jobs[int(rng.integers(len(jobs)))]
        runtime = job.runtime * float(np.exp(rng.normal(0.0, 0.25)))
        if job.time_limit_s:
            runtime = min(runtime, job.time_limit_s)
        rows.append(_row(job, f"s{k}", now, runtime))
        k += 1


def _write_trace(path: Path, reference: str, rows: list[list[object]]) -> None:
    rows = sorted(rows, key=lambda r: (float(str(r[1])), str(r[0])))
    with path.open("w", newline="") as handle:
        handle.write(f"# reference_gpu: {reference}\n")
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        writer.writerows(rows)


def cluster_of(window: LoggedWindow) -> Cluster:
    return Cluster(window.cluster, tuple(Node(n.name, n.gpu_type, n.gpus, "",
                                              n.price_per_gpu_hour) for n in window.nodes))
