"""Packages import downwards only: no import cycle between the parts of ``slurm_rl/``.

The unit is the *part*: each subpackage (``slurm_rl.daemon``, ``slurm_rl.agents``, ...) and
each top-level module (``slurm_rl.scheduler``, ``slurm_rl.config``, ...), plus the package
root (``slurm_rl/__init__.py``, ``slurm_rl``). Imports inside one part are its own business;
an import of another part is an edge. Every ``import``/``from`` of a ``slurm_rl`` module
counts, wherever it sits: at the top, inside a function (a lazy import is still a dependency,
only a later one) or under ``if TYPE_CHECKING``. Relative imports count the same.

:func:`test_no_part_imports_a_part_that_imports_it` fails on any cycle and names it, with the
file and line of each import on it. :func:`test_the_documented_layers_hold` checks the layer
order CONTRIBUTING.md gives ("Import layers", lowest first): no part imports one in a higher
layer, and every part has a layer.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "slurm_rl"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"

# Import sites (file, module imported) that cross the layers only until the files' owners
# change one line each (issue 20): the policy roles moved from slurm_rl.agents.base to
# slurm_rl.policy while scheduler.py and reservation.py were being edited by others. A site
# that no longer exists fails test_pending_sites_still_exist: delete it here then.
PENDING: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Site:
    """One import of another part: where it is and what it imports."""

    file: str
    line: int
    module: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} imports {self.module}"


def part_of(module: str) -> str:
    """``slurm_rl.daemon.runner`` -> ``slurm_rl.daemon``; ``slurm_rl`` stays the root."""
    return ".".join(module.split(".")[:2])


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(node: ast.Import | ast.ImportFrom, path: Path) -> list[str]:
    """The ``slurm_rl`` modules one statement imports (``from slurm_rl import x``: the
    submodule ``x`` when there is one, else the root)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module_name(path).split(".")
        if path.name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, base] if base else package)
    if base == "slurm_rl":
        return [f"slurm_rl.{alias.name}" if _is_module(alias.name) else base
                for alias in node.names]
    return [base]


def _is_module(name: str) -> bool:
    return (PACKAGE / f"{name}.py").exists() or (PACKAGE / name / "__init__.py").exists()


def sites() -> Iterator[tuple[str, Site]]:
    """(importing part, site) for every import of another part under ``slurm_rl/``."""
    for path in sorted(PACKAGE.rglob("*.py")):
        source = part_of(module_name(path))
        file = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(), file)):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for module in imported(node, path):
                if (module == "slurm_rl" or module.startswith("slurm_rl.")) \
                        and part_of(module) != source:
                    yield source, Site(file, node.lineno, module)


def graph() -> dict[str, dict[str, list[Site]]]:
    """part -> imported part -> the sites, pending ones left out."""
    edges: dict[str, dict[str, list[Site]]] = defaultdict(lambda: defaultdict(list))
    for source, site in sites():
        if (site.file, site.module) not in PENDING:
            edges[source][part_of(site.module)].append(site)
    return edges


def cycles(edges: dict[str, dict[str, list[Site]]]) -> list[list[str]]:
    """Cycles (parts, the first repeated last): the shortest back to each part not on an
    earlier one."""
    found, done = [], set()
    for start in sorted(edges):
        if start in done:
            continue
        path = _path_back(edges, start)
        if path:
            found.append(path)
            done.update(path)
    return found


def _path_back(edges: dict[str, dict[str, list[Site]]], start: str) -> list[str] | None:
    """The shortest import path from ``start`` back to itself (breadth first), if any."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for part in frontier:
            for target in sorted(edges.get(part, {})):
                if target == start:
                    path = [part]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if target not in came_from:
                    came_from[target] = part
                    following.append(target)
        frontier = following
    return None


def describe(cycle: list[str], edges: dict[str, dict[str, list[Site]]]) -> str:
    hops = []
    for source, target in zip(cycle, cycle[1:], strict=False):
        shown = "; ".join(str(site) for site in edges[source][target][:3])
        hops.append(f"  {source} -> {target}: {shown}")
    return " -> ".join(cycle) + "\n" + "\n".join(hops)


def documented_layers() -> list[list[str]]:
    """CONTRIBUTING.md's "Import layers" list, lowest first: one numbered line per layer,
    its parts in backquotes (``slurm_rl.`` left off)."""
    text = CONTRIBUTING.read_text()
    section = text.split("## Import layers", 1)[1].split("\n## ", 1)[0]
    layers = []
    for line in section.splitlines():
        if re.match(r"^\d+\. ", line):
            layers.append([f"slurm_rl.{name}" if name != "slurm_rl" else name
                           for name in re.findall(r"`([a-z_0-9]+)`", line)])
    return layers


def all_parts() -> set[str]:
    return {part_of(module_name(path)) for path in PACKAGE.rglob("*.py")}


def test_no_part_imports_a_part_that_imports_it() -> None:
    edges = graph()
    found = cycles(edges)
    assert not found, "import cycles between parts of slurm_rl (move the code that needs " \
        "the upper part up, or what both need down):\n" + "\n".join(
            describe(cycle, edges) for cycle in found)


def test_the_documented_layers_hold() -> None:
    layers = documented_layers()
    layer_of = {part: index for index, names in enumerate(layers) for part in names}
    unplaced = sorted(all_parts() - set(layer_of))
    assert not unplaced, f"parts with no layer in CONTRIBUTING.md (Import layers): {unplaced}"
    upwards = [f"{site} (layer {layer_of[source] + 1} -> {layer_of[part_of(site.module)] + 1})"
               for source, targets in graph().items() for target, found in targets.items()
               for site in found if layer_of[target] > layer_of[source]]
    assert not upwards, "imports of a higher layer:\n" + "\n".join(upwards)


def test_pending_sites_still_exist() -> None:
    present = {(site.file, site.module) for _, site in sites()}
    stale = PENDING - present
    assert not stale, f"no longer imported, delete from PENDING: {sorted(stale)}"


def test_the_graph_sees_lazy_and_relative_imports() -> None:
    """The scanner itself: a function-level import and a relative one are both edges."""
    path = PACKAGE / "daemon" / "probe.py"
    lazy = ast.parse("def f():\n    from slurm_rl.ops import metrics\n").body[0]
    relative = ast.parse("from ..ops import metrics\n").body[0]
    assert isinstance(lazy, ast.FunctionDef) and isinstance(relative, ast.ImportFrom)
    inner = lazy.body[0]
    assert isinstance(inner, ast.ImportFrom)
    assert imported(inner, path) == ["slurm_rl.ops"]
    assert imported(relative, path) == ["slurm_rl.ops"]
    assert part_of("slurm_rl.ops.prometheus") == "slurm_rl.ops"
    fake = {"a": {"b": [Site("a.py", 1, "b")]}, "b": {"a": [Site("b.py", 2, "a")]}}
    assert cycles(fake) == [["a", "b", "a"]]
