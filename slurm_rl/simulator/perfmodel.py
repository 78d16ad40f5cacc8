"""The simulator's performance model: how fast a job family runs on a GPU type and placement.

All figures come from ``slurm_rl/data/perf_tables.json``, which
``scripts/derive_perf_tables.py`` derives from the measured data in ``../shared/perfdata``
(Gavel, Pollux, ElasticFlow/Chronus); ``docs/performance-model.md`` gives every proxy,
bridge and assumption. Three independent factors:

* **Type speed** ``s(f, g)``: per-GPU throughput of family ``f`` on type ``g`` relative to
  V100. ``relative_speed(f, g, ref) = s(f, g) / s(f, ref)``.
* **Spread** over ``k`` nodes: ``T_f(k)``, the weighted isotonic (non-increasing) fit to
  Pollux's measured per-GPU throughput of ``k``-node placements relative to one node, at
  ``k`` in {2, 3, 4, 6, 8, 12, 16}; linear in ``log k`` between those, saturating at the
  widest measured spread ``K = 16``::

      spread(f, k) = 1             k = 1
                   = T_f(k)        2 <= k <= K   (interpolated in log k)
                   = T_f(K)        k > K

  A placement crossing host groups (racks) has no measurement; it is modelled as the widest
  measured spread, ``spread(f, K)`` (assumption).
* **Co-location** with other jobs on the same nodes (different GPUs)::

      coloc(f, N) = prod_{b in N} (1 - alpha · (1 - s_same(f, b)))

  ``s_same`` is Gavel's same-GPU pair throughput; ``alpha`` (about 0.03) scales it down to
  node sharing, calibrated on Pollux's one-node placements (assumption: the same-GPU
  interference pattern carries over, much weakened, to sharing a node). ``N`` is the jobs on
  *one* node; a gang spanning several nodes runs at its most crowded node's pace
  (``gang_colocation_factor``).

The empty family ``""`` (a live job whose model is unknown) is the ``any`` pseudo-family:
geometric means over the six families. Every method is cached by its argument tuple: the
simulator calls them for every job start and every speed change.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from slurm_rl.core import FrozenDict
from slurm_rl.errors import InputError, UnknownNameError
from slurm_rl.paths import DATA_DIR

TABLES_PATH = DATA_DIR / "perf_tables.json"
_CACHE_LIMIT = 200_000  # entries per cache before it is cleared (bounds memory, not speed)


def _key(name: str) -> str:
    return name.strip().upper()


class PerformanceModel:
    """Measured speeds, spread and co-location factors; see the module docstring."""

    def __init__(
        self,
        tables: Mapping[str, Any],
        *,
        source: str = "<tables>",
        extra_aliases: Mapping[str, str] | None = None,
    ) -> None:
        self._tables = tables
        self._source = source
        try:
            loaded = self._load(tables)
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"malformed performance table ({error!r})", path=source) from error
        self._aliases: dict[str, str] = {**loaded, **self._checked_aliases(extra_aliases or {})}
        self._extra = FrozenDict(extra_aliases or {})
        self._caches: dict[str, dict[Any, float]] = {
            "speed": {}, "spread": {}, "coloc": {}, "best": {}
        }

    # ----- construction ---------------------------------------------------------------------

    @classmethod
    def default(cls) -> PerformanceModel:
        """The packaged table (one shared, immutable instance)."""
        return _default_model()

    @classmethod
    def from_file(cls, path: str | Path) -> PerformanceModel:
        try:
            tables = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise InputError(f"cannot read performance table: {error}", path=path) from error
        return cls(tables, source=str(path))

    def with_aliases(self, aliases: Mapping[str, str]) -> PerformanceModel:
        """This model, with extra GPU names modelled as measured types (``speed_like``)."""
        if not aliases:
            return self
        return PerformanceModel(
            self._tables, source=self._source, extra_aliases={**self._extra, **aliases}
        )

    def _load(self, tables: Mapping[str, Any]) -> dict[str, str]:
        """Read the tables into typed dicts; returns the GPU names (upper case) -> type."""
        if tables["schema"] != 1:
            raise ValueError(f"schema {tables['schema']} is not 1")
        self.families: tuple[str, ...] = tuple(tables["families"])
        self.gpu_types: tuple[str, ...] = tuple(tables["gpu_types"])
        self._any: str = str(tables["any_family"])
        self._speed: dict[str, dict[str, float]] = {
            f: {g: float(v) for g, v in row.items()}
            for f, row in tables["relative_speed"]["value"].items()
        }
        spread = tables["spread"]
        self._k_max = int(spread["k_max"])
        self._spread: dict[str, tuple[tuple[int, float], ...]] = {
            f: tuple(sorted((int(k), float(v)) for k, v in p["table"].items()))
            for f, p in spread["by_family"].items()
        }
        colocation = tables["colocation"]
        self._alpha = float(colocation["alpha"])
        self._same_gpu: dict[str, dict[str, float]] = {
            a: {b: float(v) for b, v in row.items()} for a, row in colocation["same_gpu"].items()
        }
        aliases: dict[str, str] = {_key(g): g for g in self.gpu_types}
        aliases.update({_key(k): str(v) for k, v in tables["aliases"].items()})
        assumed = tables["assumed_aliases"]
        self._assumed: dict[str, str] = {_key(k): str(v["why"]) for k, v in assumed.items()}
        aliases.update({_key(k): str(v["like"]) for k, v in assumed.items()})
        return aliases

    def _checked_aliases(self, aliases: Mapping[str, str]) -> dict[str, str]:
        out = {}
        for name, like in aliases.items():
            if like not in self.gpu_types:
                raise UnknownNameError("measured GPU type", like, self.gpu_types)
            out[_key(name)] = like
        return out

    # ----- names ----------------------------------------------------------------------------

    def canonical_gpu_type(self, name: str) -> str:
        """The measured type whose speeds ``name`` gets (case-insensitive; aliases resolved)."""
        found = self._aliases.get(_key(name))
        if found is None:
            raise UnknownNameError("GPU type", name, self.known_gpu_names())
        return found

    def known_gpu_names(self) -> tuple[str, ...]:
        """Every GPU name this model accepts: measured types, aliases and assumed aliases."""
        return tuple(sorted(self._aliases))

    def is_measured(self, name: str) -> bool:
        """True for a measured type or a same-chip alias (not an assumption, not speed_like)."""
        key = _key(name)
        return key in self._aliases and key not in self._assumed and key not in self._extra_keys

    def assumption(self, name: str) -> str | None:
        """Why ``name`` gets another type's speeds, when that is an assumption; else None."""
        return self._assumed.get(_key(name))

    @property
    def _extra_keys(self) -> frozenset[str]:
        return frozenset(_key(k) for k in self._extra)

    def canonical_family(self, family: str) -> str:
        """``family`` as a table key: ``""`` is the ``any`` pseudo-family."""
        if not family:
            return self._any
        if family in self._speed:
            return family
        raise UnknownNameError("model family", family, self.families)

    # ----- type speed -----------------------------------------------------------------------

    def relative_speed(self, family: str, gpu_type: str, reference_gpu: str) -> float:
        """Per-GPU throughput of ``family`` on ``gpu_type`` / on ``reference_gpu``."""
        key = (family, gpu_type, reference_gpu)
        cache = self._caches["speed"]
        value = cache.get(key)
        if value is None:
            row = self._speed[self.canonical_family(family)]
            value = row[self.canonical_gpu_type(gpu_type)] / row[
                self.canonical_gpu_type(reference_gpu)
            ]
            self._store(cache, key, value)
        return value

    def best_relative_speed(
        self, family: str, gpu_types: Iterable[str], reference_gpu: str
    ) -> float:
        """The fastest per-GPU speed of ``family`` over ``gpu_types`` (for JCT lower bounds)."""
        types = tuple(gpu_types)
        if not types:
            raise ValueError("best_relative_speed needs at least one GPU type")
        key = (family, types, reference_gpu)
        cache = self._caches["best"]
        value = cache.get(key)
        if value is None:
            value = max(self.relative_speed(family, g, reference_gpu) for g in types)
            self._store(cache, key, value)
        return value

    # ----- spread ---------------------------------------------------------------------------

    def spread_factor(
        self,
        family: str,
        gpus_per_node: tuple[int, ...],
        same_host_group: bool = True,
        node_capacity: int | None = None,
    ) -> float:
        """Per-GPU throughput of this placement shape / all its GPUs on one node (<= 1).

        With ``node_capacity`` (GPUs of the largest node), relative instead to the most
        consolidated shape possible, ``ceil(n / node_capacity)`` nodes in one host group.
        """
        nodes = sum(1 for g in gpus_per_node if g > 0)
        if nodes == 0:
            raise ValueError(f"placement shape {gpus_per_node} has no GPUs")
        consolidated = 1
        if node_capacity is not None:
            consolidated = max(1, math.ceil(sum(gpus_per_node) / node_capacity))
        key = (family, nodes, same_host_group, consolidated)
        cache = self._caches["spread"]
        value = cache.get(key)
        if value is None:
            name = self.canonical_family(family)
            own = self._spread_by_nodes(name, nodes, same_host_group)
            value = min(1.0, own / self._spread_by_nodes(name, consolidated, True))
            self._store(cache, key, value)
        return value

    def _spread_by_nodes(self, family: str, nodes: int, same_host_group: bool) -> float:
        if nodes <= 1 and same_host_group:
            return 1.0
        table = self._spread[family]
        # Beyond the widest measured spread the factor saturates; a cross-group placement is
        # modelled as the widest measured spread (no measurement crosses host groups).
        span = self._k_max if not same_host_group else min(nodes, self._k_max)
        for (k_lo, lo), (k_hi, hi) in zip(table, table[1:], strict=False):
            if k_lo <= span <= k_hi:
                w = math.log(span / k_lo) / math.log(k_hi / k_lo)
                return min(1.0, lo + w * (hi - lo))
        return min(1.0, table[0][1] if span <= table[0][0] else table[-1][1])

    # ----- co-location ----------------------------------------------------------------------

    def colocation_factor(self, family: str, neighbour_families: tuple[str, ...]) -> float:
        """Throughput of ``family`` with these other jobs on its nodes (other GPUs) / alone."""
        if not neighbour_families:
            return 1.0
        key = (family, neighbour_families)
        cache = self._caches["coloc"]
        value = cache.get(key)
        if value is None:
            row = self._same_gpu[self.canonical_family(family)]
            value = 1.0
            for other in neighbour_families:
                value *= 1.0 - self._alpha * (1.0 - row[self.canonical_family(other)])
            self._store(cache, key, value)
        return value

    def gang_colocation_factor(
        self, family: str, neighbours_by_node: Iterable[tuple[str, ...]]
    ) -> float:
        """Co-location of a multi-node gang: interference is a per-node effect and the gang
        runs at the pace of its most crowded node, so the minimum over its nodes of
        ``colocation_factor`` with that node's neighbours (pass one tuple per node)."""
        return min(
            (self.colocation_factor(family, tuple(sorted(n))) for n in neighbours_by_node),
            default=1.0,
        )

    # ----- helpers --------------------------------------------------------------------------

    @staticmethod
    def _store(cache: dict[Any, float], key: Any, value: float) -> None:
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[key] = value

    def speed_table(self) -> dict[str, dict[str, float]]:
        """Per-GPU speed of every family on every measured type relative to V100 (a copy)."""
        return {f: dict(row) for f, row in self._speed.items()}

    @property
    def source(self) -> str:
        return self._source


@functools.cache
def _default_model() -> PerformanceModel:
    return PerformanceModel.from_file(TABLES_PATH)


@functools.cache
def datasheet_gpu_speeds() -> dict[str, float]:
    """A datasheet-like speed per GPU type: the geometric mean over job families of its
    measured speed relative to V100. What fastest-GPU-first ranks by; it knows no machine.
    Every name the model accepts for a type (``A100-80GB``, ``V100M32``, ``NVIDIA-TESLA-T4``,
    and the assumed ones such as ``P40`` as P100) gets that type's speed: a cluster whose
    nodes report such a name had them ranked as the slowest of all."""
    model = PerformanceModel.default()
    by_family = model.speed_table()
    types = {t for row in by_family.values() for t in row}
    speeds = {
        t: math.exp(statistics.fmean(math.log(row[t]) for row in by_family.values() if t in row))
        for t in sorted(types)
    }
    for name in model.known_gpu_names():
        speeds.setdefault(name, speeds.get(model.canonical_gpu_type(name), 0.0))
    return speeds
