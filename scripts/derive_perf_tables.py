#!/usr/bin/env python3
"""Derive ``slurm_rl/data/perf_tables.json`` from the measured data in ``../shared/perfdata``.

Usage::

    .venv/bin/python scripts/derive_perf_tables.py            # write the packaged table
    .venv/bin/python scripts/derive_perf_tables.py --check    # exit 1 if it is out of date

Every figure in the output comes from the files listed in its ``sources`` section (repository @
commit : path, read from ``perfdata/MANIFEST.tsv``); the modelling choices that turn them into
a table (proxies, bridges, fits) are documented in ``docs/performance-model.md``.
"""

from __future__ import annotations

import argparse
import ast
import csv
import gzip
import hashlib
import json
import math
import re
import statistics
import sys
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO_DIR = Path(__file__).resolve().parent.parent
OUT_PATH = REPO_DIR / "slurm_rl" / "data" / "perf_tables.json"
DEFAULT_PERFDATA = REPO_DIR.parent / "shared" / "perfdata"

FAMILIES = ("cifar10", "ncf", "deepspeech2", "yolov3", "imagenet", "bert")
GPU_TYPES = ("K80", "P100", "V100", "T4", "A100")
HUB = "V100"  # every speed is first expressed relative to the V100 (the type all bridges reach)
ANY = "any"  # pseudo-family for jobs whose model is unknown (live jobs)

# Gavel job type standing in for each family (Gavel measured neither YOLOv3 nor DeepSpeech2).
GAVEL_PROXY = {
    "cifar10": "ResNet-18",  # identical workload: ResNet-18 on CIFAR-10
    "imagenet": "ResNet-50",  # identical workload: ResNet-50 on ImageNet
    "yolov3": "ResNet-50",  # Darknet-53 backbone: a ResNet-like convnet on large images
    "bert": "Transformer",  # same layer type (self-attention), much smaller model
    "ncf": "Recommendation",  # collaborative filtering on MovieLens (autoencoder, not NeuMF)
    "deepspeech2": "LM",  # recurrent (LSTM) model; DeepSpeech2 is conv + bidirectional RNN
}
# Families whose Gavel proxy *is* the Pollux workload, so absolute samples/s can be compared.
T4_IDENTICAL = ("cifar10", "imagenet")
# ElasticFlow A100 model identical to the Gavel proxy (bridged to V100 directly) ...
A100_DIRECT = {"imagenet": "resnet50"}
# ... or to the Pollux app (bridged to T4, then through the T4 figure to V100).
A100_VIA_T4 = {"deepspeech2": "deepspeech2"}
# A family without its own bridge follows the family whose proxy it shares.
FOLLOWS = {"yolov3": "imagenet"}

# Measured-equivalent spellings (same chip, other memory size or vendor naming).
ALIASES = {
    "V100M16": "V100", "V100M32": "V100", "V100-16GB": "V100", "V100-32GB": "V100",
    "V100-SXM2": "V100", "V100-PCIE": "V100", "TESLA-V100": "V100", "NVIDIA-TESLA-V100": "V100",
    "A100M40": "A100", "A100M80": "A100", "A100-40GB": "A100", "A100-80GB": "A100",
    "NVIDIA-TESLA-A100": "A100", "TESLA-K80": "K80", "NVIDIA-TESLA-K80": "K80",
    "TESLA-P100": "P100", "NVIDIA-TESLA-P100": "P100", "TESLA-T4": "T4", "NVIDIA-TESLA-T4": "T4",
}
# Hardware with no measurement at all: an explicit, documented assumption each.
ASSUMED_ALIASES = {
    "A10": ("V100", "no measurement; NVIDIA's data sheets give A10 and V100 the same dense FP16 "
                    "tensor peak (125 TFLOPS)"),
    "MISC": ("P100", "PAI 2020's undisclosed 8-GPU machines; no measurement, assumed as fast as "
                     "the P100, the cluster's most common type"),
    "G1": ("V100", "undisclosed PAI 2023 code; assumed V100-class (no public information)"),
    "G2": ("V100", "undisclosed PAI 2023 code; assumed V100-class (no public information)"),
    "G3": ("V100", "undisclosed PAI 2023 code; assumed V100-class (no public information)"),
    "P40": ("P100", "no measurement; Pascal, FP32 peak close to the P100's"),
    "M40": ("K80", "no measurement; Maxwell, conservatively as slow as a K80"),
}

SAME_GPU_WORKER = "v100"  # Gavel worker type whose co-location pairs define interference
MIN_SAME_GPU_LOSS = 0.05  # below this the same-GPU loss is clipping noise; no alpha from it

_BATCH = re.compile(r"\(batch size (\d+)\)")


def sig(value: float, digits: int = 4) -> float:
    """``value`` rounded to ``digits`` significant digits (keeps the table compact)."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - int(math.floor(math.log10(abs(value)))))


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def geomean(values: Iterable[float]) -> float:
    items = list(values)
    return math.exp(sum(math.log(v) for v in items) / len(items))


# ----- sources ------------------------------------------------------------------------------


class PerfDataError(Exception):
    """Bad performance data: one line naming the file (and line and column), for main."""


def load_manifest(perfdata: Path) -> dict[str, dict[str, str]]:
    if not (perfdata / "MANIFEST.tsv").is_file():
        raise PerfDataError(f"{perfdata}: no MANIFEST.tsv (is ../shared/perfdata there?)")
    columns = ("file", "source_repo", "commit", "source_path", "sha256_uncompressed")
    return {row["file"]: row for _, row in _csv_rows(perfdata / "MANIFEST.tsv", columns, "\t")}


def verify_files(perfdata: Path, manifest: Mapping[str, Mapping[str, str]]) -> None:
    """Each file read must be the published one, its uncompressed sha256 the manifest's: checked
    first, so a truncated or edited copy is named, not a traceback or a quietly other table."""
    for name in (name for files in used_files().values() for name in files):
        path, row = perfdata / name, manifest.get(name)
        if row is None or not path.is_file():
            raise PerfDataError(f"{path}: " + ("missing; MANIFEST.tsv lists it" if row
                                               else "not listed in MANIFEST.tsv"))
        try:
            with gzip.open(path) if name.endswith(".gz") else path.open("rb") as handle:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
        except (OSError, EOFError, zlib.error) as error:  # a truncated or damaged gzip
            raise PerfDataError(f"{path}: cannot be read ({error})") from None
        if digest != row["sha256_uncompressed"]:
            raise PerfDataError(f"{path}: sha256 {digest} is not MANIFEST.tsv's (a damaged "
                                "or changed copy: restore it from its source)")


def _csv_rows(path: Path, columns: Sequence[str],
              delimiter: str = ",") -> list[tuple[int, dict[str, str]]]:
    """A CSV file's rows with their line numbers; it must name ``columns`` and hold a row."""
    try:
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle, delimiter=delimiter)
            missing = [c for c in columns if c not in (reader.fieldnames or ())]
            rows = [(reader.line_num, row) for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise PerfDataError(f"{path}: cannot be read ({error})") from None
    if missing or not rows:
        raise PerfDataError(f"{path}:1: no column {missing[0]!r} in the header" if missing
                            else f"{path}: no data rows")
    return rows


def _number(path: Path, line: int, row: Mapping[str, str | None], column: str, *,
            integer: bool = False, unmeasured: bool = False) -> float:
    """A cell's number > 0 (``unmeasured``: or an empty or nan cell, ElasticFlow's NaN)."""
    text = (row.get(column) or "").strip()
    try:
        value = float(int(text)) if integer else float(text or "nan")
    except ValueError:
        value = -1.0
    if not (value > 0 and math.isfinite(value) or unmeasured and math.isnan(value)):
        raise PerfDataError(f"{path}:{line}: column {column!r}: {text!r} is not "
                            f"{'an integer' if integer else 'a finite number'} > 0")
    return value


def load_json(path: Path) -> Any:
    """A (gzipped) JSON file's content; a bad one named with its line and column."""
    try:
        with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as handle:
            return json.load(handle)
    except json.JSONDecodeError as error:
        raise PerfDataError(f"{path}:{error.lineno}: column {error.colno}: {error.msg}") from None


def source_entry(manifest: Mapping[str, Mapping[str, str]], files: Iterable[str]) -> dict[str, Any]:
    rows = [manifest[name] for name in files]
    return {
        "repo": rows[0]["source_repo"],
        "commits": sorted({row["commit"] for row in rows}),
        "files": [f"{row['source_repo']} @ {row['commit']} : {row['source_path']}" for row in rows],
    }


def used_files() -> dict[str, list[str]]:
    pollux = sorted(f"pollux/{app}/{name}" for app in FAMILIES
                    for name in ("placements.csv", "scalability.csv"))
    elastic = [f"elasticflow/throughputs_A100/{m}.csv" for m in ("resnet50", "deepspeech2")]
    elastic.append("elasticflow/throughputs_T4/imagenet.csv")  # cross-check only
    return {
        "gavel": ["gavel/physical_cluster_throughputs.json.gz",
                  "gavel/simulation_throughputs.json.gz"],
        "shockwave": ["shockwave/tacc_throughputs.json.gz", "shockwave/wisr_throughputs.json.gz"],
        "pollux": pollux,
        "elasticflow": elastic,
        "chronus": ["elasticflow/chronus_model_info.json"],
    }


# ----- Gavel --------------------------------------------------------------------------------

GavelTable = dict[str, dict[str, dict[str, Any]]]


def gavel_keys(table: GavelTable, model: str, scale_factor: int = 1) -> dict[int, str]:
    """Job keys of ``model`` (one per batch size) at ``scale_factor``: batch -> key."""
    keys: dict[int, str] = {}
    for key in table["v100"]:
        name, factor = ast.literal_eval(key)
        found = _BATCH.search(name)
        if factor == scale_factor and name.startswith(model + " ") and found:
            keys[int(found.group(1))] = key
    return keys


def gavel_isolated(table: GavelTable, worker: str, model: str, sf: int = 1) -> dict[int, float]:
    """Isolated throughput (steps/s, summed over workers) by batch size; zeros left out."""
    out: dict[int, float] = {}
    for batch, key in gavel_keys(table, model, sf).items():
        value = table.get(worker, {}).get(key, {}).get("null")
        if value:
            out[batch] = float(value)
    return out


def gavel_ratio(table: GavelTable, model: str, gpu: str) -> float:
    """Median over batch sizes of throughput on ``gpu`` / on V100 (same code, same batch)."""
    mine, hub = gavel_isolated(table, gpu.lower(), model), gavel_isolated(table, "v100", model)
    return median(mine[b] / hub[b] for b in mine if b in hub)


def gavel_v100_samples(table: GavelTable, model: str) -> dict[int, float]:
    return {b: steps * b for b, steps in gavel_isolated(table, "v100", model).items()}


# ----- Pollux and ElasticFlow ---------------------------------------------------------------

StepTimes = dict[tuple[tuple[int, ...], int], float]


def pollux_step_times(perfdata: Path, app: str, column: str = "step_time") -> StepTimes:
    """Median ``column`` by (placement sorted descending, local batch); rotations merged.
    ``scalability.csv`` rows enter as placement ``(0, nodes, gpus)`` (no per-node split)."""
    samples: dict[tuple[tuple[int, ...], int], list[float]] = defaultdict(list)
    for name, counts in (("placements.csv", ["placement"]),
                         ("scalability.csv", ["num_nodes", "num_replicas"])):
        path = perfdata / "pollux" / app / name
        for line, row in _csv_rows(path, [*counts, "local_bsz", "step_time", "sync_time"]):
            n = [int(_number(path, line, row, c, integer=True)) for c in [*counts, "local_bsz"]]
            shape = (0, *n[:2]) if len(counts) == 2 else tuple(sorted(map(int, str(n[0])))[::-1])
            step, sync = (_number(path, line, row, c) for c in ("step_time", "sync_time"))
            if sync >= step:  # the all-reduce is part of the step: no time left to compute
                raise PerfDataError(f"{path}:{line}: column 'sync_time': {sync!r} is not below "
                                    f"step_time {step!r}")
            samples[(shape, n[-1])].append(step - sync if column == "compute_time" else step)
    return {key: median(values) for key, values in samples.items()}


def pollux_one_gpu_samples(perfdata: Path, app: str) -> dict[int, float]:
    """Samples/s of one T4 by local batch size."""
    times = pollux_step_times(perfdata, app)
    return {b: b / t for (shape, b), t in times.items() if shape == (1,)}


def interpolate(curve: Mapping[int, float], batch: int) -> float | None:
    """Log-log interpolation of ``curve`` at ``batch``; None outside the measured range."""
    xs = sorted(curve)
    if not xs or batch < xs[0] or batch > xs[-1]:
        return None
    hi = next(x for x in xs if x >= batch)
    lo = max(x for x in xs if x <= batch)
    if hi == lo:
        return curve[lo]
    w = math.log(batch / lo) / math.log(hi / lo)
    return math.exp((1 - w) * math.log(curve[lo]) + w * math.log(curve[hi]))


def elasticflow_one_gpu_samples(perfdata: Path, gpu: str, model: str) -> dict[int, float]:
    """Samples/s of one GPU by (global = local) batch size: it/s x batch in the '1' column."""
    path = perfdata / "elasticflow" / f"throughputs_{gpu}" / f"{model}.csv"
    out: dict[int, float] = {}
    for line, row in _csv_rows(path, ("global_batch_size", "1")):
        batch = int(_number(path, line, row, "global_batch_size", integer=True))
        value = _number(path, line, row, "1", unmeasured=True)
        if math.isfinite(value):
            out[batch] = value * batch
    return out


def bridge(numerator: Mapping[int, float], denominator: Mapping[int, float]) -> float:
    """Median over the denominator's batches of numerator/denominator in samples/s, with the
    numerator interpolated to the same per-GPU batch (never extrapolated)."""
    ratios = []
    for batch, value in sorted(denominator.items()):
        other = interpolate(numerator, batch)
        if other is not None:
            ratios.append(other / value)
    if not ratios:
        raise ValueError("no comparable batch sizes to bridge")
    return median(ratios)


# ----- relative speeds ----------------------------------------------------------------------


def derive_speeds(perfdata: Path, gavel: GavelTable) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per-GPU throughput of each family on each type relative to V100, and how it was got.

    Order matters: Gavel types first, then T4 bridges and the T4 generic figure, then A100
    (whose chained bridge goes through the final T4 figure), then the followers."""
    speed: dict[str, dict[str, float]] = {f: {HUB: 1.0} for f in FAMILIES}
    method: dict[str, dict[str, str]] = {f: {HUB: "hub"} for f in FAMILIES}
    for family in FAMILIES:
        for gpu in ("K80", "P100"):
            speed[family][gpu] = gavel_ratio(gavel, GAVEL_PROXY[family], gpu)
            method[family][gpu] = f"gavel same code: {GAVEL_PROXY[family]}"
    bridges = _t4_bridges(perfdata, gavel, speed, method)
    _fill_generic(speed, method, "T4")
    bridges.update(_a100_bridges(perfdata, gavel, speed, method))
    _fill_generic(speed, method, "A100")
    for family, target in FOLLOWS.items():
        for gpu in ("T4", "A100"):
            speed[family][gpu] = speed[target][gpu]
            method[family][gpu] = f"follows {target} (same Gavel proxy)"
    speed[ANY] = {g: geomean(speed[f][g] for f in FAMILIES) for g in GPU_TYPES}
    method[ANY] = {g: "geometric mean over families" for g in GPU_TYPES}
    rounded = {f: {g: sig(speed[f][g]) for g in GPU_TYPES} for f in speed}
    ordered = {f: {g: method[f][g] for g in GPU_TYPES} for f in method}
    return {"value": rounded, "method": ordered}, bridges


def _t4_bridges(perfdata: Path, gavel: GavelTable, speed: dict[str, dict[str, float]],
                method: dict[str, dict[str, str]]) -> dict[str, float]:
    raw: dict[str, float] = {}
    for family in T4_IDENTICAL:
        t4 = pollux_one_gpu_samples(perfdata, family)
        value = bridge(t4, gavel_v100_samples(gavel, GAVEL_PROXY[family]))
        speed[family]["T4"] = value
        method[family]["T4"] = "bridge: pollux T4 / gavel V100, identical workload"
        raw[f"T4/V100 {family}"] = sig(value)
    return raw


def _a100_bridges(perfdata: Path, gavel: GavelTable, speed: dict[str, dict[str, float]],
                  method: dict[str, dict[str, str]]) -> dict[str, float]:
    raw: dict[str, float] = {}
    for family, model in A100_DIRECT.items():
        a100 = elasticflow_one_gpu_samples(perfdata, "A100", model)
        value = bridge(a100, gavel_v100_samples(gavel, GAVEL_PROXY[family]))
        speed[family]["A100"] = value
        method[family]["A100"] = f"bridge: elasticflow A100 {model} / gavel V100, identical"
        raw[f"A100/V100 {family}"] = sig(value)
    for family, model in A100_VIA_T4.items():
        a100 = elasticflow_one_gpu_samples(perfdata, "A100", model)
        over_t4 = bridge(a100, pollux_one_gpu_samples(perfdata, family))
        speed[family]["A100"] = over_t4 * speed[family]["T4"]
        method[family]["A100"] = f"chain: elasticflow A100 {model} / pollux T4, x T4/V100"
        raw[f"A100/T4 {family}"] = sig(over_t4)
    return raw


def _fill_generic(speed: dict[str, dict[str, float]], method: dict[str, dict[str, str]],
                  gpu: str) -> None:
    """Families with no bridge to ``gpu`` (followers aside) get the geometric mean of the
    bridged families' figures for it: the type's generic factor."""
    bridged = [f for f in FAMILIES if gpu in speed[f] and f not in FOLLOWS]
    generic = geomean(speed[f][gpu] for f in bridged)
    for family in FAMILIES:
        if gpu not in speed[family] and family not in FOLLOWS:
            speed[family][gpu] = generic
            method[family][gpu] = "type-generic: geometric mean of " + ", ".join(bridged)


# ----- spread over nodes --------------------------------------------------------------------


def pollux_spread_points(perfdata: Path, app: str) -> dict[int, tuple[float, int]]:
    """Per-GPU throughput of k-node placements relative to one node with min(n, 4) GPUs at the
    same local batch: median over batches per placement, then median over placements per k."""
    times = pollux_step_times(perfdata, app)
    per_shape: dict[tuple[int, ...], list[float]] = defaultdict(list)
    for (shape, batch), step in times.items():
        nodes, gpus = _nodes_and_gpus(shape)
        reference = times.get(((min(gpus, 4),), batch))
        if nodes >= 2 and reference is not None:
            per_shape[shape].append(reference / step)
    by_k: dict[int, list[float]] = defaultdict(list)
    for shape, ratios in per_shape.items():
        by_k[_nodes_and_gpus(shape)[0]].append(median(ratios))
    return {k: (median(v), len(v)) for k, v in sorted(by_k.items())}


def _nodes_and_gpus(shape: tuple[int, ...]) -> tuple[int, int]:
    if shape[0] == 0:  # a scalability.csv row: (0, nodes, gpus)
        return shape[1], shape[2]
    return len(shape), sum(shape)


def isotonic_spread(points: Mapping[int, tuple[float, int]]) -> dict[int, float]:
    """The weighted least-squares non-increasing fit to the per-k medians (pool adjacent
    violators; weights = number of placements), capped at 1: spreading wider never helps."""
    blocks: list[list[float]] = []  # [weighted sum, weight, number of k values]
    for _, (ratio, count) in sorted(points.items()):
        blocks.append([ratio * count, float(count), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] < blocks[-1][0] / blocks[-1][1]:
            last = blocks.pop()
            blocks[-1] = [a + b for a, b in zip(blocks[-1], last, strict=True)]
    values = [min(1.0, total / weight) for total, weight, n in blocks for _ in range(int(n))]
    return dict(zip(sorted(points), values, strict=True))


def derive_spread(perfdata: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pooled: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for family in FAMILIES:
        points = pollux_spread_points(perfdata, family)
        out[family] = _spread_entry(points)
        for k, point in points.items():
            pooled[k].append(point)
    merged = {k: (geomean(r for r, _ in v), sum(n for _, n in v)) for k, v in pooled.items()}
    out[ANY] = _spread_entry(dict(sorted(merged.items())))
    return out


def _spread_section(by_family: Mapping[str, Any]) -> dict[str, Any]:
    """The fits and ``k_max``, the widest spread measured: the model saturates there."""
    k_max = max(int(k) for entry in by_family.values() for k in entry["table"])
    return {"k_max": k_max, "by_family": by_family}


def _spread_entry(points: Mapping[int, tuple[float, int]]) -> dict[str, Any]:
    return {
        "table": {str(k): sig(v) for k, v in isotonic_spread(points).items()},
        "points": {str(k): sig(r) for k, (r, _) in points.items()},
        "placements": {str(k): n for k, (_, n) in points.items()},
    }


# ----- co-location --------------------------------------------------------------------------


def same_gpu_matrix(table: GavelTable, worker: str) -> dict[str, dict[str, float]]:
    """s[a][b]: median over batch variants of a's throughput when sharing one GPU with b,
    relative to a alone (Gavel pairs; infeasible [0, 0] pairs left out)."""
    rows = table[worker]
    out: dict[str, dict[str, float]] = {}
    for a in FAMILIES:
        out[a] = {}
        for b in FAMILIES:
            ratios = [rows[ka][kb][0] / rows[ka]["null"]
                      for ka in gavel_keys(table, GAVEL_PROXY[a]).values()
                      for kb in gavel_keys(table, GAVEL_PROXY[b]).values()
                      if rows[ka].get(kb) and rows[ka][kb][0] > 0 and rows[ka]["null"] > 0]
            out[a][b] = median(ratios)
    return out


def pollux_node_sharing(perfdata: Path, app: str) -> float:
    """Per-GPU compute time of 1 GPU alone / with the node's other 3 GPUs busy (placement '4'),
    median over batches: how much busy neighbours on *other* GPUs of a node slow a GPU down."""
    times = pollux_step_times(perfdata, app, column="compute_time")
    ratios = [t / times[((4,), b)] for (shape, b), t in times.items()
              if shape == (1,) and ((4,), b) in times]
    return median(ratios)


def derive_colocation(perfdata: Path, sim: GavelTable) -> dict[str, Any]:
    """alpha = median over families of the per-neighbour node-sharing loss (Pollux, 3 busy
    neighbours: 1 - c^(1/3)) divided by the same-GPU loss 1 - s[f][f] (Gavel)."""
    same = same_gpu_matrix(sim, SAME_GPU_WORKER)
    node_share = {f: pollux_node_sharing(perfdata, f) for f in FAMILIES}
    alphas: dict[str, float | None] = {}
    for family in FAMILIES:
        loss = max(0.0, 1.0 - node_share[family] ** (1.0 / 3.0))
        same_loss = 1.0 - same[family][family]
        alphas[family] = loss / same_loss if same_loss >= MIN_SAME_GPU_LOSS else None
    alpha = median(a for a in alphas.values() if a is not None)
    _add_any(same)
    return {
        "alpha": sig(alpha),
        "alpha_by_family": {f: (sig(a) if a is not None else None) for f, a in alphas.items()},
        "pollux_node_sharing_3_neighbours": {f: sig(v) for f, v in node_share.items()},
        "same_gpu": {a: {b: sig(v) for b, v in row.items()} for a, row in same.items()},
    }


def _add_any(same: dict[str, dict[str, float]]) -> None:
    for a in FAMILIES:
        same[a][ANY] = statistics.fmean(same[a][b] for b in FAMILIES)
    same[ANY] = {b: statistics.fmean(same[a][b] for a in FAMILIES) for b in FAMILIES}
    same[ANY][ANY] = statistics.fmean(same[ANY][b] for b in FAMILIES)


# ----- cross-checks (reported, not used) ----------------------------------------------------


def cross_checks(perfdata: Path, phys: GavelTable, sim: GavelTable, speeds: Any) -> dict[str, Any]:
    # ElasticFlow's T4 rows are at global batch 3200+ (accumulated), so compare peak samples/s.
    a100_t4 = max(elasticflow_one_gpu_samples(perfdata, "A100", "resnet50").values()) / max(
        elasticflow_one_gpu_samples(perfdata, "T4", "imagenet").values())
    value = speeds["value"]["imagenet"]
    return {
        "imagenet A100/T4: elasticflow peak samples/s vs our V100-bridged figures": [
            sig(a100_t4), sig(value["A100"] / value["T4"])],
        "gavel sim-table Recommendation K80/V100, P100/V100 (not used: V100 slower than K80)": [
            sig(gavel_ratio(sim, "Recommendation", "K80")),
            sig(gavel_ratio(sim, "Recommendation", "P100"))],
        "gavel unconsolidated/consolidated by scale factor (= nodes)": _gavel_spread(phys),
        "chronus relative throughput {model: {gpus: {nodes: r}}}": _chronus(perfdata),
        "V100 re-measured elsewhere / gavel physical, median over sf-1 jobs": _shockwave(
            perfdata, phys),
    }


def _gavel_spread(table: GavelTable) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for model in ("ResNet-18", "ResNet-50", "Transformer", "LM"):
        for worker in ("k80", "p100", "v100"):
            row = {}
            for sf in (2, 4, 8):
                cons = gavel_isolated(table, worker, model, sf)
                uncons = gavel_isolated(table, worker + "_unconsolidated", model, sf)
                common = [uncons[b] / cons[b] for b in cons if b in uncons]
                if common:
                    row[str(sf)] = sig(median(common), 3)
            out[f"{model} {worker}"] = row
    return out


def _chronus(perfdata: Path) -> Any:
    data = load_json(perfdata / "elasticflow" / "chronus_model_info.json")
    return {m: {g: {k: sig(v, 3) for k, v in d.items()} for g, d in by.items()}
            for m, by in data.items()}


def _shockwave(perfdata: Path, phys: GavelTable) -> dict[str, float]:
    out = {}
    for name in ("tacc", "wisr"):
        other = load_json(perfdata / "shockwave" / f"{name}_throughputs.json.gz")
        mine, base = other["v100"], phys["v100"]
        ratios = [mine[k]["null"] / base[k]["null"] for k in base
                  if ast.literal_eval(k)[1] == 1 and mine[k]["null"] and base[k]["null"]]
        out[name] = sig(median(ratios), 3)
    return out


# ----- assembly -----------------------------------------------------------------------------


def derive(perfdata: Path) -> dict[str, Any]:
    manifest = load_manifest(perfdata)
    verify_files(perfdata, manifest)
    phys = load_json(perfdata / "gavel" / "physical_cluster_throughputs.json.gz")
    sim = load_json(perfdata / "gavel" / "simulation_throughputs.json.gz")
    speeds, bridges = derive_speeds(perfdata, phys)
    return {
        "schema": 1,
        "generated_by": "scripts/derive_perf_tables.py",
        "families": list(FAMILIES),
        "any_family": ANY,
        "gpu_types": list(GPU_TYPES),
        "hub": HUB,
        "aliases": ALIASES,
        "assumed_aliases": {k: {"like": v, "why": why} for k, (v, why) in ASSUMED_ALIASES.items()},
        "proxies": {"gavel": GAVEL_PROXY, "t4_identical": list(T4_IDENTICAL),
                    "a100_direct": A100_DIRECT, "a100_via_t4": A100_VIA_T4, "follows": FOLLOWS},
        "relative_speed": speeds,
        "bridges": bridges,
        "spread": _spread_section(derive_spread(perfdata)),
        "colocation": derive_colocation(perfdata, sim),
        "cross_checks": cross_checks(perfdata, phys, sim, speeds),
        "sources": {k: source_entry(manifest, v) for k, v in used_files().items()},
    }


def render(table: Mapping[str, Any]) -> str:
    return json.dumps(table, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--perfdata", type=Path, default=DEFAULT_PERFDATA)
    parser.add_argument("--out", type=Path, default=OUT_PATH)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    try:
        text = render(derive(args.perfdata))
    except PerfDataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.check:
        same = args.out.is_file() and args.out.read_text() == text
        print(f"{args.out}: {'up to date' if same else 'OUT OF DATE'}")
        return 0 if same else 1
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
