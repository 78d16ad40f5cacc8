"""Slurm host lists (``a100-[01-04],v100-01``) expanded with ClusterShell, with a bound.

ClusterShell expands a range into every name it holds, so ``x[1-100000000]`` in one job's
record took 46 s and gigabytes before. The size of an expression is worked out from its
bracket ranges first, and one larger than :data:`MAX_HOSTS` is refused.
"""

from __future__ import annotations

import functools
import math
import re

from ClusterShell.NodeSet import NodeSet, NodeSetException

MAX_HOSTS = 100_000  # far more nodes than any Slurm cluster has (the largest run ~10,000)
_BRACKET = re.compile(r"\[([^\[\]]*)\]")


class HostlistError(ValueError):
    """A host list that does not parse, or names more than :data:`MAX_HOSTS` hosts."""


def size_bound(text: str) -> int:
    """An upper bound on how many names ``text`` expands to, without expanding it."""
    total = 0
    for pattern in _top_level_parts(text):
        count = 1
        for ranges in _BRACKET.findall(pattern):
            count *= sum(_range_size(item) for item in ranges.split(",") if item)
        total += count
    return total


def _top_level_parts(text: str) -> list[str]:
    """``a[1,2],b`` -> ``["a[1,2]", "b"]`` (commas inside brackets do not split)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p]


def _range_size(item: str) -> int:
    low, dash, high = item.replace(" ", "").partition("-")  # ClusterShell allows "1 - 9"
    high, _, step = high.partition("/")
    if not dash:
        return 1
    if not (_digits(low) and _digits(high)):
        return 1  # not a range ClusterShell reads: it says so itself
    stride = int(step) if _digits(step) and int(step) > 0 else 1
    return max(0, math.floor((int(high) - int(low)) / stride) + 1)


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()  # "²".isdigit() is true, int("²") fails


def expand(text: str) -> tuple[str, ...]:
    """The names in ``text`` (:class:`HostlistError` for a bad or oversized one)."""
    if size_bound(text) > MAX_HOSTS:
        raise HostlistError(f"more than {MAX_HOSTS:,} hosts")
    return _expand(text)


@functools.lru_cache(maxsize=8192)
def _expand(text: str) -> tuple[str, ...]:
    try:
        return tuple(NodeSet(text))
    except (NodeSetException, ValueError) as exc:  # ValueError: digits ClusterShell cannot int()
        raise HostlistError(str(exc)) from None
