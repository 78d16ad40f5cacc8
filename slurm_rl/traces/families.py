"""Model families, time limits and GPU-type names for trace jobs.

Public traces carry neither the model a job trains nor the time limit its user typed, but the
simulator's performance model needs the first and Slurm's backfill plans with the second. Both
are filled here by deterministic rules; they are *our modelling choices* (docs/traces.md).

* Family: Pollux's workload generator (petuum/adaptdl, branch ``osdi21-artifact``,
  ``simulator/workload.py``) maps a Philly job to one of its six applications by the job's
  GPU time: < 1 GPU-hour -> cifar10 or ncf, < 10 -> deepspeech2 or bert, < 100 -> yolov3, else
  imagenet. Pollux picks inside a bucket with a seeded RNG; we pick by a stable hash of the
  job id so that the same job always gets the same family, whatever else is in the trace.
* Time limit: the job's reference duration times a safety factor, rounded up to the next value
  users commonly type into ``sbatch --time``.
"""

from __future__ import annotations

import bisect
import math
import zlib

from slurm_rl.core import Job

FAMILIES: tuple[str, ...] = ("cifar10", "ncf", "deepspeech2", "yolov3", "imagenet", "bert")

# (upper bound in GPU-hours, families in the bucket); bounds from Pollux's workload.py.
_FAMILY_BUCKETS: tuple[tuple[float, tuple[str, ...]], ...] = (
    (1.0, ("cifar10", "ncf")),
    (10.0, ("deepspeech2", "bert")),
    (100.0, ("yolov3",)),
    (math.inf, ("imagenet",)),
)
_BUCKET_BOUNDS = tuple(bound for bound, _ in _FAMILY_BUCKETS)

HOUR = 3600.0
DAY = 24 * HOUR

# The values users typically request: whole hours up to a day, then days.
TIME_LIMIT_LADDER: tuple[float, ...] = (
    1 * HOUR,
    2 * HOUR,
    4 * HOUR,
    8 * HOUR,
    12 * HOUR,
    1 * DAY,
    2 * DAY,
    3 * DAY,
    7 * DAY,
    14 * DAY,
    30 * DAY,
    60 * DAY,
)
# A user asks for more than the job needs, or Slurm would kill it at the limit.
TIME_LIMIT_SAFETY_FACTOR = 1.5
# Beyond the ladder's top, limits grow in steps of this size.
_TIME_LIMIT_STEP_BEYOND_LADDER = 30 * DAY

# GPU type names the readers accept (case-insensitive, returned in this spelling). The
# performance model owns the speeds and may know fewer types; this list only catches
# misspellings in trace files. "V100M16"/"V100M32" (16/32 GB) and the undisclosed "G1"-"G3" are
# spelled as in the Alibaba PAI traces; the dashed names are common vendor spellings.
KNOWN_GPU_TYPES: tuple[str, ...] = (
    "K80",
    "M40",
    "P40",
    "P100",
    "T4",
    "V100",
    "V100M16",
    "V100M32",
    "V100-16GB",
    "V100-32GB",
    "V100-PCIE",
    "V100-SXM2",
    "A10",
    "A30",
    "A40",
    "A100",
    "A100M40",
    "A100M80",
    "A100-40GB",
    "A100-80GB",
    "L4",
    "L40S",
    "H100",
    "H200",
    "G1",
    "G2",
    "G3",
)
_GPU_TYPES_BY_UPPER = {name.upper(): name for name in KNOWN_GPU_TYPES}


def stable_hash(text: str) -> int:
    """A hash of ``text`` that is the same in every process and on every platform."""
    return zlib.crc32(text.encode("utf-8"))


def family_for(job_id: str, gpu_seconds: float) -> str:
    """The model family of a trace job, from its GPU time (GPU-seconds on the reference GPU)."""
    bucket = bisect.bisect_right(_BUCKET_BOUNDS, gpu_seconds / HOUR)
    choices = _FAMILY_BUCKETS[min(bucket, len(_FAMILY_BUCKETS) - 1)][1]
    if len(choices) == 1:
        return choices[0]
    return choices[stable_hash(job_id) % len(choices)]


def time_limit_for(duration: float) -> float:
    """The time limit (seconds) a user would have typed for a job that ran ``duration`` s."""
    wanted = duration * TIME_LIMIT_SAFETY_FACTOR
    index = bisect.bisect_left(TIME_LIMIT_LADDER, wanted)
    if index < len(TIME_LIMIT_LADDER):
        return TIME_LIMIT_LADDER[index]
    steps = math.ceil(wanted / _TIME_LIMIT_STEP_BEYOND_LADDER)
    return steps * _TIME_LIMIT_STEP_BEYOND_LADDER


def canonical_gpu_type(name: str) -> str | None:
    """``name`` in the spelling of :data:`KNOWN_GPU_TYPES`, or None when it is not known."""
    return _GPU_TYPES_BY_UPPER.get(name.strip().upper())


def trace_job(
    job_id: str,
    submit_time: float,
    num_gpus: int,
    duration: float,
    *,
    user: str = "",
    partition: str = "",
    num_nodes: int | None = None,
    gpus_per_node: int | None = None,
    gpu_type: str | None = None,
    time_limit: float | None = None,
    model_family: str = "",
) -> Job:
    """A :class:`Job` from a trace row, with family and time limit modelled when not given."""
    return Job(
        job_id=job_id,
        submit_time=submit_time,
        num_gpus=num_gpus,
        user=user,
        partition=partition,
        num_nodes=num_nodes,
        gpus_per_node=gpus_per_node,
        gpu_type=gpu_type,
        time_limit=time_limit if time_limit is not None else time_limit_for(duration),
        model_family=model_family or family_for(job_id, duration * num_gpus),
        oracle_duration=duration,
    )
