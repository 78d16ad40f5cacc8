"""Cluster specs: TOML files in ``sim/clusters/`` that describe a simulated cluster.

A spec names its node groups (GPU type, node count, GPUs per node, host groups, price with
the public source of that price) and, optionally, how its machines fluctuate::

    name = "tiny"
    description = "..."

    [[node_groups]]
    prefix = "v100"                 # node names v100-001, v100-002, ... (default: gpu_type)
    gpu_type = "V100"               # a type the performance model knows (K80 P100 V100 T4 A100,
                                    # an alias such as V100M32, or an assumed one such as MISC)
    speed_like = "P100"             # optional, only for hardware without a measurement
    count = 2
    gpus_per_node = 8
    host_group_size = 8             # optional: nodes per host group (rack), default all
    host_groups = ["rack-01"]       # optional: their names, default rack-01, rack-02, ...
    price_per_gpu_hour = 2.48
    price_source = "GCP on-demand list price, us-central1"

    [fluctuation]                   # optional; absent = no fluctuation
    enabled = true
    sigma = 0.05

Unknown keys, wrong types and bad values are refused with one line that names the file and
the key (an :class:`~slurm_rl.errors.InputError`); an unknown spec name raises
:class:`~slurm_rl.errors.UnknownNameError`.
"""

from __future__ import annotations

import math
import re
import reprlib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from slurm_rl.core import MAX_PRICE_PER_GPU_HOUR, Cluster, FrozenDict, Node
from slurm_rl.errors import InputError, UnknownNameError
from slurm_rl.input_files import open_regular
from slurm_rl.paths import shipped
from slurm_rl.simulator.fluctuation import MIN_STRAGGLER_FACTOR, FluctuationConfig
from slurm_rl.simulator.perfmodel import PerformanceModel

SPEC_DIR = shipped("sim/clusters")
_NODE_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
_GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_TOML_LINE = re.compile(r"at line (\d+)")
_DEFAULTS = FluctuationConfig()
# The largest GPU clusters built have some 100,000 GPUs on 12,000-25,000 nodes; 100,000 nodes
# is several times that, per node group and in all. Unbounded, a typo of 1e11 nodes made the
# spec build a list of 1e11 host-group names (MemoryError, after minutes), and a replay keeps
# per-node state and scans the nodes every decision, so even 1e7 would not finish.
MAX_NODES = 100_000
# Bad values are quoted in messages; a 100 kB string or a deep list is cut short.
_QUOTE = reprlib.Repr()
_QUOTE.maxstring = _QUOTE.maxother = 80


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _NodeGroup(_Strict):
    gpu_type: str = Field(min_length=1)
    count: int = Field(ge=1, le=MAX_NODES)
    gpus_per_node: int = Field(ge=1, le=64)
    # Generous for any currency or internal unit, far below where fees overflow to inf.
    price_per_gpu_hour: float = Field(ge=0, le=MAX_PRICE_PER_GPU_HOUR, allow_inf_nan=False)
    price_source: str = Field(min_length=1)
    prefix: str | None = None
    speed_like: str | None = None
    host_group_size: int | None = Field(default=None, ge=1)
    host_groups: list[str] | None = Field(default=None, min_length=1)


class _Fluctuation(_Strict):
    enabled: bool = True
    # Bounds against typos that would not fail but hang or overflow a replay: a log-speed
    # spread above 2 (a machine 7x slower or faster at one sigma), a step under a minute
    # (a month's replay in a million steps) or a straggler over 100x slower (1e-9 hung a
    # replay) is no measured machine behaviour.
    sigma: float = Field(default=_DEFAULTS.sigma, ge=0, le=2, allow_inf_nan=False)
    tau_s: float = Field(default=_DEFAULTS.tau_s, gt=0, allow_inf_nan=False)
    step_s: float = Field(default=_DEFAULTS.step_s, ge=60, allow_inf_nan=False)
    straggler_share: float = Field(default=_DEFAULTS.straggler_share, ge=0, le=1)
    straggler_factor: float = Field(default=_DEFAULTS.straggler_factor,
                                    ge=MIN_STRAGGLER_FACTOR, le=1)
    seed: int = Field(default=0, ge=0)


class _Spec(_Strict):
    name: str = Field(min_length=1)
    description: str = Field(min_length=1)
    node_groups: list[_NodeGroup] = Field(min_length=1)
    fluctuation: _Fluctuation | None = None


_MODELS: dict[str, type[BaseModel]] = {
    "": _Spec, "node_groups": _NodeGroup, "fluctuation": _Fluctuation
}


@dataclass(frozen=True)
class ClusterSpec:
    """A loaded spec: the cluster, how its machines fluctuate, and where it came from.

    ``speed_like`` maps GPU names the spec declared as "as fast as" a measured type;
    ``price_sources`` maps each node group's prefix to the public source of its price.
    """

    cluster: Cluster
    fluctuation: FluctuationConfig
    description: str
    path: Path
    speed_like: Mapping[str, str] = field(default_factory=dict)
    price_sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "speed_like", FrozenDict(self.speed_like))
        object.__setattr__(self, "price_sources", FrozenDict(self.price_sources))

    @property
    def name(self) -> str:
        return self.cluster.name

    def performance_model(self, base: PerformanceModel | None = None) -> PerformanceModel:
        """``base`` (default: the packaged model) with this spec's ``speed_like`` aliases."""
        return (base or PerformanceModel.default()).with_aliases(self.speed_like)


def list_cluster_specs() -> tuple[str, ...]:
    """Names of the specs in ``sim/clusters/``."""
    return tuple(sorted(p.stem for p in SPEC_DIR.glob("*.toml")))


def spec_path(name_or_path: str | Path) -> Path:
    """The file a spec name (``tiny``) or path (``my/cluster.toml``) refers to."""
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or text.endswith(".toml") or "/" in text:
        path = Path(text)
        try:
            missing = not path.exists()
        except OSError:  # a name too long for the file system: opening it says so
            missing = False
        if missing:  # a FIFO or a directory is named as such when it is opened
            raise InputError("no such cluster spec file", path=path)
        return path
    path = SPEC_DIR / f"{text}.toml"
    try:
        known = path.is_file()
    except OSError:  # a name too long for the file system is no spec's
        known = False
    if not known:
        raise UnknownNameError("cluster spec", text, list_cluster_specs())
    return path


def load_cluster_spec(
    name_or_path: str | Path, perf: PerformanceModel | None = None
) -> ClusterSpec:
    """Read, validate and build a cluster spec; every problem is one line naming file and key."""
    path = spec_path(name_or_path)
    raw = _read_toml(path)
    try:
        spec = _Spec.model_validate(raw)
    except ValidationError as error:
        raise _input_error(error, path) from None
    return _build(spec, path, perf or PerformanceModel.default())


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open_regular(path, "cluster spec file") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        found = _TOML_LINE.search(str(error))
        line = int(found.group(1)) if found else None
        raise InputError(f"not valid TOML: {error}", path=path, line=line) from None
    except RecursionError:  # tomllib recurses once per level of nested arrays and tables
        raise InputError("not valid TOML: arrays or tables nested too deeply",
                         path=path) from None
    except OSError as error:
        raise InputError(f"cannot read: {error.strerror}", path=path) from None
    except UnicodeDecodeError as error:
        raise InputError(f"not UTF-8 text (byte {error.start})", path=path) from None
    except ValueError as error:  # an integer of more than 4300 digits, which int() refuses
        raise InputError(f"not valid TOML: {error}", path=path) from None


def _input_error(error: ValidationError, path: Path) -> InputError:
    """The most telling pydantic error (an unknown key first) as one InputError."""
    errors = sorted(error.errors(), key=lambda e: e["type"] != "extra_forbidden")
    first = errors[0]
    loc = tuple(first["loc"])
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return InputError(_reason(first, loc) + more, path=path, column=_dotted(loc))


def _reason(error: Mapping[str, Any], loc: tuple[Any, ...]) -> str:
    if error["type"] == "extra_forbidden":
        allowed = ", ".join(_MODELS[str(loc[0]) if len(loc) > 1 else ""].model_fields)
        return f"unknown key (allowed here: {allowed})"
    if error["type"] == "missing":
        return "missing required key"
    return f"{error['msg']} (got {_QUOTE.repr(error.get('input'))})"


def _dotted(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


# ----- building the cluster -------------------------------------------------------------------


def _build(spec: _Spec, path: Path, perf: PerformanceModel) -> ClusterSpec:
    speed_like: dict[str, str] = {}
    sources: dict[str, str] = {}
    prefixes: set[str] = set()
    total = sum(group.count for group in spec.node_groups)
    if total > MAX_NODES:
        raise InputError(f"{total} nodes in all; at most {MAX_NODES} are accepted", path=path,
                         column="node_groups")
    rack_names = _RackNamer(spec.node_groups)
    nodes: list[Node] = []
    for index, group in enumerate(spec.node_groups):
        where = f"node_groups[{index}]"
        _check_gpu_type(group, perf, path, where, speed_like)
        prefix = _prefix(group, path, where, prefixes)
        racks = _host_groups(group, path, where, rack_names)
        nodes.extend(_nodes(group, prefix, racks))
        sources[prefix] = group.price_source
    if not _NODE_NAME.match(spec.name):
        raise InputError("cluster name must be lower-case letters, digits and '-'", path=path,
                         column="name")
    cluster = Cluster(spec.name, tuple(nodes))
    return ClusterSpec(cluster, _fluctuation(spec.fluctuation), spec.description.strip(), path,
                       speed_like, sources)


def _check_gpu_type(
    group: _NodeGroup, perf: PerformanceModel, path: Path, where: str, speed_like: dict[str, str]
) -> None:
    if group.speed_like is None:
        try:
            perf.canonical_gpu_type(group.gpu_type)
        except UnknownNameError as error:
            raise InputError(f"{error}; or add speed_like = \"<measured type>\"", path=path,
                             column=f"{where}.gpu_type") from None
        return
    if group.speed_like not in perf.gpu_types:
        raise InputError(f"speed_like must be a measured type ({', '.join(perf.gpu_types)}), "
                         f"not {group.speed_like!r}", path=path, column=f"{where}.speed_like")
    if perf.is_measured(group.gpu_type):
        raise InputError(f"{group.gpu_type!r} is measured; speed_like is only for hardware "
                         "without a measurement", path=path, column=f"{where}.speed_like")
    speed_like[group.gpu_type] = group.speed_like


def _prefix(group: _NodeGroup, path: Path, where: str, seen: set[str]) -> str:
    prefix = group.prefix if group.prefix is not None else group.gpu_type.lower()
    if not _NODE_NAME.match(prefix):
        raise InputError(f"node name prefix {prefix!r} must be lower-case letters, digits and "
                         "'-', starting with a letter", path=path, column=f"{where}.prefix")
    if prefix in seen:
        raise InputError(f"prefix {prefix!r} is used by another node group (node names would "
                         "clash)", path=path, column=f"{where}.prefix")
    seen.add(prefix)
    return prefix


class _RackNamer:
    """Default host-group names rack-01, rack-02, ... numbered across the whole spec."""

    def __init__(self, groups: list[_NodeGroup]) -> None:
        total = sum(len(_rack_sizes(g)) for g in groups if g.host_groups is None)
        self._width = max(2, len(str(total)))
        self._next = 1

    def take(self, count: int) -> list[str]:
        names = [f"rack-{i:0{self._width}d}" for i in range(self._next, self._next + count)]
        self._next += count
        return names


def _rack_sizes(group: _NodeGroup) -> list[int]:
    """Nodes per host group, in order; the last group may be smaller."""
    size = group.host_group_size
    if size is None:
        parts = len(group.host_groups) if group.host_groups else 1
        size = math.ceil(group.count / parts)
    full, rest = divmod(group.count, size)
    return [size] * full + ([rest] if rest else [])


def _host_groups(group: _NodeGroup, path: Path, where: str, namer: _RackNamer) -> list[str]:
    """The host group of each node of ``group``, in node order."""
    sizes = _rack_sizes(group)
    names = group.host_groups if group.host_groups is not None else namer.take(len(sizes))
    if len(names) != len(sizes):
        raise InputError(f"{group.count} nodes in host groups of {sizes[0]} need {len(sizes)} "
                         f"names, not {len(names)}", path=path, column=f"{where}.host_groups")
    for name in names:
        if not _GROUP_NAME.match(name):
            raise InputError(f"bad host group name {name!r}", path=path,
                             column=f"{where}.host_groups")
    return [name for name, size in zip(names, sizes, strict=True) for _ in range(size)]


def _nodes(group: _NodeGroup, prefix: str, racks: list[str]) -> list[Node]:
    width = max(3, len(str(group.count)))
    return [
        Node(f"{prefix}-{i + 1:0{width}d}", group.gpu_type, group.gpus_per_node, rack,
             group.price_per_gpu_hour)
        for i, rack in enumerate(racks)
    ]


def _fluctuation(section: _Fluctuation | None) -> FluctuationConfig:
    if section is None:
        return FluctuationConfig.disabled()
    return FluctuationConfig(**section.model_dump())
