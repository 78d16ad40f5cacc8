"""GPU counts from Slurm's GRES and TRES strings, across versions.

Forms seen in the wild (22.05 .. 24.x):

* node gres: ``gpu:a100:8``, ``gpu:a100:8(S:0-1)``, ``gpu:8``, ``gpu:a100:4,gpu:v100:4``,
  ``tmpsize:7T,gpu:l40s:4(S:0-1)``, ``(null)``, ``N/A``, empty;
* node gres_used: ``gpu:a100:4(IDX:0-3)``, ``gpu:a100:0(IDX:N/A)``, ``gpu:(null):0(IDX:N/A)``;
* job requests: ``gres:gpu:a100:4`` (22.05), ``gres/gpu:a100:4`` and ``gres/gpu=4`` (23.02+),
  ``gpu:2``; several comma-separated entries may appear, other GRES (``gres:shard:2``) too;
* job gres_detail (per allocated node): ``gpu:a100:4(IDX:0-3)``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass

_PARENS = re.compile(r"\([^)]*\)")
_EMPTY = {"", "(null)", "N/A", "none", "None"}


@dataclass(frozen=True, slots=True)
class GpuCount:
    """``count`` GPUs of ``gpu_type`` (None when the string names no type)."""

    gpu_type: str | None
    count: int


class GresFormatError(ValueError):
    """A GPU entry whose count is not a number (the caller names the field)."""


def _entries(text: str) -> Iterator[str]:
    """Comma-separated entries with parenthesised details removed.

    Details such as ``(IDX:0,2-3)`` contain commas, so they go before splitting.
    """
    for raw in _PARENS.sub("", text.strip()).split(","):
        entry = raw.strip()
        if entry and entry not in _EMPTY:
            yield entry


def _strip_prefix(entry: str) -> str:
    for prefix in ("gres:", "gres/"):
        if entry.startswith(prefix):
            return entry[len(prefix) :]
    return entry


def _parse_gpu_entry(entry: str) -> GpuCount | None:
    """``gpu[:type][:count]`` or ``gpu[:type]=count``; None for other GRES names."""
    body = _strip_prefix(entry)
    name, _, rest = body.partition(":")
    if "=" in name:
        name, _, count_text = name.partition("=")
        return GpuCount(None, _count(count_text, entry)) if name == "gpu" else None
    if name != "gpu":
        return None
    if "=" in rest:
        gpu_type, _, count_text = rest.partition("=")
        return GpuCount(_type_or_none(gpu_type), _count(count_text, entry))
    parts = rest.split(":") if rest else []
    if not parts:
        return GpuCount(None, 1)
    if parts[-1].isdigit():  # "²" too: _count refuses it, and bounds the count
        return GpuCount(_type_or_none(":".join(parts[:-1])), _count(parts[-1], entry))
    if len(parts) == 1:
        # ``gpu:a100`` asks for one GPU of that type.
        return GpuCount(_type_or_none(parts[0]), 1)
    raise GresFormatError(f"GPU count {parts[-1]!r} in {entry!r} is not a number")


def _type_or_none(text: str) -> str | None:
    return None if text in _EMPTY or not text else text


MAX_GPU_COUNT = 1_000_000  # GPUs in one GRES entry: more than any node or job has


def _count(text: str, entry: str) -> int:
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()):  # "²".isdigit() is true
        raise GresFormatError(f"GPU count {text!r} in {entry!r} is not a number")
    if len(digits) > 7 or int(digits) > MAX_GPU_COUNT:
        raise GresFormatError(f"GPU count {text!r} in {entry!r} is more than "
                              f"{MAX_GPU_COUNT:,}")
    return int(digits)


@functools.lru_cache(maxsize=4096)
def gpu_counts(text: str | None) -> tuple[GpuCount, ...]:
    """Every GPU entry in a GRES/TRES string, in order; other GRES are skipped."""
    if text is None:
        return ()
    found = (_parse_gpu_entry(entry) for entry in _entries(text))
    return tuple(item for item in found if item is not None)


def total_gpus(text: str | None) -> int:
    return sum(item.count for item in gpu_counts(text))


def gpu_types(text: str | None) -> tuple[str, ...]:
    """The distinct GPU types named, in first-seen order."""
    seen: list[str] = []
    for item in gpu_counts(text):
        if item.gpu_type is not None and item.gpu_type not in seen:
            seen.append(item.gpu_type)
    return tuple(seen)


@functools.lru_cache(maxsize=4096)
def single_request(text: str | None) -> GpuCount | None:
    """A job's GPU request as one count (types merged; the first type named wins)."""
    items = gpu_counts(text)
    if not items:
        return None
    types = [item.gpu_type for item in items if item.gpu_type is not None]
    return GpuCount(types[0] if types else None, sum(item.count for item in items))
