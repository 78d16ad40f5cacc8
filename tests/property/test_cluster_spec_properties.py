"""Generated and mutated cluster specs through the real loader (``load_cluster_spec``).

A spec either loads into a cluster whose every value is in range (1 to MAX_NODES nodes with
unique names, 1 to 64 GPUs each, finite non-negative prices, fluctuation settings within
their bounds), or is refused with one :class:`InputError` line that names the file. Never
another exception, never a hang.
"""

from __future__ import annotations

import math
import tomllib
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from slurm_rl.core import MAX_PRICE_PER_GPU_HOUR
from slurm_rl.errors import InputError
from slurm_rl.simulator.cluster_spec import MAX_NODES, SPEC_DIR, ClusterSpec, load_cluster_spec
from tests.property._support import assert_one_line, budget, nasty_text, outcome, within

BASES = tuple(tomllib.loads((SPEC_DIR / f"{name}.toml").read_text())
              for name in ("tiny", "venus", "pai-2020"))


# ----- a TOML writer for what the mutations make ------------------------------------------------


def toml_value(value: Any) -> str:
    """``value`` as a TOML value; tables are written inline (``{a = 1}``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") \
            if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_string(k)} = {toml_value(v)}"
                               for k, v in value.items()) + "}"
    raise TypeError(type(value))


def toml_string(text: str) -> str:
    escaped = []
    for char in text:
        if char in '"\\':
            escaped.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def toml_document(doc: dict[str, Any]) -> str:
    return "".join(f"{toml_string(key)} = {toml_value(value)}\n" for key, value in doc.items())


# ----- mutations ---------------------------------------------------------------------------------

_TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=20)
_SCALARS = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, -1, 1, 64, 65, MAX_NODES, MAX_NODES + 1, 10**11, 2**63 - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-300, 1e300, MAX_PRICE_PER_GPU_HOUR * 2]),
    st.booleans(),
    _TEXT,
    nasty_text().filter(lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s)),
    st.sampled_from(["V100", "T4", "A100", "H100", "MISC", "P100", "rack-01", "x" * 5000]),
    st.datetimes(), st.dates(), st.times(),
)
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)), max_leaves=6)
_KEYS = st.sampled_from(["name", "description", "node_groups", "fluctuation", "gpu_type",
                         "count", "gpus_per_node", "price_per_gpu_hour", "price_source",
                         "prefix", "speed_like", "host_group_size", "host_groups", "enabled",
                         "sigma", "tau_s", "step_s", "straggler_share", "straggler_factor",
                         "seed", "colour"])


def _tables(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths of every table and array in ``doc``, itself first."""
    found = [path] if isinstance(doc, dict | list) else []
    children = doc.items() if isinstance(doc, dict) else enumerate(doc) \
        if isinstance(doc, list) else ()
    for key, child in children:
        found.extend(_tables(child, (*path, key)))
    return found


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


@st.composite
def mutated_spec(draw: st.DrawFn) -> dict[str, Any]:
    doc = tomllib.loads(toml_document(draw(st.sampled_from(BASES))))  # a deep copy
    for _ in range(draw(st.integers(1, 3))):
        container = _at(doc, draw(st.sampled_from(_tables(doc))))
        keys = list(container) if isinstance(container, dict) else list(range(len(container)))
        op = draw(st.sampled_from(["replace", "replace", "delete", "add", "repeat"]))
        if op == "add" or not keys:
            if isinstance(container, dict):
                container[draw(_KEYS)] = draw(_VALUES)
            else:
                container.append(draw(_VALUES))
            continue
        key = draw(st.sampled_from(keys))
        if op == "replace":
            container[key] = draw(_VALUES)
        elif op == "delete":
            del container[key]
        elif isinstance(container, list):
            container.insert(key, container[key])
    return doc


@st.composite
def mangled_text(draw: st.DrawFn) -> bytes:
    """A shipped spec's text with bytes cut out, put in or replaced."""
    data = toml_document(draw(st.sampled_from(BASES))).encode()
    for _ in range(draw(st.integers(1, 3))):
        start = draw(st.integers(0, len(data)))
        end = draw(st.integers(start, min(len(data), start + 20)))
        data = data[:start] + draw(st.one_of(
            st.binary(max_size=6), st.sampled_from([b"[", b"{", b"]]", b"\x00", b"=", b"\n",
                                                    b'"', b"'''", b"[[node_groups]]\n"]),
            _TEXT.map(str.encode))) + data[end:]
    return data


# ----- what the loader may answer ----------------------------------------------------------------


def check_load(path: Path) -> ClusterSpec | None:
    try:
        spec = within(lambda: load_cluster_spec(path), "load_cluster_spec")
    except InputError as error:
        assert_one_line(str(error), str(path))
        assert str(error).startswith(str(path)), str(error)
        assert len(str(error)) < 2000, f"a message of {len(str(error))} characters"
        outcome("refused")
        return None
    outcome("loaded")
    check_spec(spec)
    return spec


def check_spec(spec: ClusterSpec) -> None:
    nodes = spec.cluster.nodes
    assert 1 <= len(nodes) <= MAX_NODES
    assert len({node.name for node in nodes}) == len(nodes)
    for node in nodes:
        assert isinstance(node.gpus, int) and 1 <= node.gpus <= 64, node
        price = node.price_per_gpu_hour
        assert math.isfinite(price) and 0 <= price <= MAX_PRICE_PER_GPU_HOUR, node
        assert node.host_group and node.gpu_type, node
    fluctuation = spec.fluctuation
    for value in (fluctuation.sigma, fluctuation.tau_s, fluctuation.step_s):
        assert math.isfinite(value) and value >= 0, fluctuation
    assert 0 <= fluctuation.straggler_share <= 1 and 0 < fluctuation.straggler_factor <= 1
    assert spec.performance_model() is not None
    assert set(spec.price_sources) == {node.name.rsplit("-", 1)[0] for node in nodes}


@budget(400)
@given(doc=mutated_spec())
def test_mutated_specs_load_in_range_or_fail_in_one_line(
    tmp_path: Path, doc: dict[str, Any]
) -> None:
    path = tmp_path / "spec.toml"
    path.write_text(toml_document(doc), encoding="utf-8")
    check_load(path)


@budget(300)
@given(data=mangled_text())
def test_mangled_spec_text_fails_in_one_line_or_loads_in_range(
    tmp_path: Path, data: bytes
) -> None:
    path = tmp_path / "spec.toml"
    path.write_bytes(data)
    check_load(path)


@budget(30)
@given(depth=st.integers(1, 5000), opener=st.sampled_from(["[", "{a = ", "[{a = "]))
def test_any_nesting_depth_fails_in_one_line(tmp_path: Path, depth: int, opener: str) -> None:
    closer = "".join({"[": "]", "{a = ": "}", "[{a = ": "}]"}[opener] for _ in range(depth))
    path = tmp_path / "spec.toml"
    path.write_text(toml_document(BASES[0]) + "x = " + opener * depth + "1" + closer + "\n")
    assert check_load(path) is None  # x is no key of a spec


# ----- generated valid specs load as written -----------------------------------------------------

_GPU_TYPES = st.sampled_from(["V100", "T4", "A100", "K80", "P100", "v100", "V100M32"])


@st.composite
def valid_specs(draw: st.DrawFn) -> dict[str, Any]:
    groups = []
    for index in range(draw(st.integers(1, 4))):
        group: dict[str, Any] = {
            "prefix": f"g{index}",
            "gpu_type": draw(_GPU_TYPES),
            "count": draw(st.integers(1, 300)),
            "gpus_per_node": draw(st.integers(1, 64)),
            "price_per_gpu_hour": draw(st.floats(0, 1e6)),
            "price_source": draw(st.text(min_size=1, max_size=20).filter(str.strip)),
        }
        if draw(st.booleans()):
            group["host_group_size"] = draw(st.integers(1, 400))
        groups.append(group)
    doc: dict[str, Any] = {"name": "gen", "description": "generated", "node_groups": groups}
    if draw(st.booleans()):
        doc["fluctuation"] = {"sigma": draw(st.floats(0, 2)), "step_s": draw(st.floats(60, 1e6)),
                              "seed": draw(st.integers(0, 2**63 - 1))}
    return doc


@budget(150)
@given(doc=valid_specs())
def test_generated_specs_load_as_written(tmp_path: Path, doc: dict[str, Any]) -> None:
    path = tmp_path / "spec.toml"
    path.write_text(toml_document(doc), encoding="utf-8")
    spec = check_load(path)
    assert spec is not None
    groups = doc["node_groups"]
    assert len(spec.cluster.nodes) == sum(g["count"] for g in groups)
    assert spec.cluster.total_gpus == sum(g["count"] * g["gpus_per_node"] for g in groups)
    for group in groups:
        mine = [n for n in spec.cluster.nodes if n.name.startswith(f"{group['prefix']}-")]
        assert len(mine) == group["count"]
        assert {n.price_per_gpu_hour for n in mine} == {group["price_per_gpu_hour"]}
        size = group.get("host_group_size")
        if size is not None:
            racks = [n.host_group for n in mine]
            assert len(set(racks)) == math.ceil(group["count"] / size)
