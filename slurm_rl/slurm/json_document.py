"""One JSON document from a Slurm command: decoded, Slurm's own errors raised, its meta read.

Shared by the job and node parsers (:mod:`slurm_rl.slurm.parse`): truncated output, an empty
answer or a non-empty ``errors`` list raise :class:`SlurmOutputError` naming the command.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec

from slurm_rl.slurm.errors import SlurmOutputError, SlurmReportedError
from slurm_rl.slurm.records import SlurmMeta

JsonObject = Mapping[str, Any]


class Where:
    """Which command and record a parse error belongs to."""

    def __init__(self, source: str, record: str = "") -> None:
        self.source = source
        self.record = record

    def error(self, message: str, field: str | None = None) -> SlurmOutputError:
        reason = f"{self.record}: {message}" if self.record else message
        return SlurmOutputError(reason, path=self.source, column=field)


# -- documents ----------------------------------------------------------------------------


def load_document(text: str, source: str) -> JsonObject:
    """Decode one JSON document; truncated output and Slurm-reported errors raise."""
    where = Where(source)
    if not text.strip():
        raise where.error("empty output")
    try:
        doc = _decode(text)
    except json.JSONDecodeError as exc:
        raise where.error(f"invalid or truncated JSON at line {exc.lineno}: {exc.msg}") from exc
    except RecursionError:  # thousands of nested brackets: no squeue writes that
        raise where.error("JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise where.error(f"expected a JSON object, got {type(doc).__name__}")
    _raise_reported_errors(doc, where)
    return doc


def _decode(text: str) -> object:
    """msgspec decodes twice as fast as json; it is also stricter (no NaN, no lone surrogate,
    no number beyond a float), so what it refuses goes to json, which reads it as before or
    words the error (with a line number)."""
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return json.loads(text)


def _raise_reported_errors(doc: JsonObject, where: Where) -> None:
    errors = doc.get("errors") or []
    if not isinstance(errors, list) or not errors:
        return
    first = errors[0] if isinstance(errors[0], dict) else {"error": str(errors[0])}
    text = first.get("description") or first.get("error") or json.dumps(first)
    raise SlurmReportedError(f"Slurm reported an error: {text}", path=where.source, entry=first)


def parse_meta(doc: JsonObject, source: str) -> SlurmMeta:
    meta = doc.get("meta")
    where = Where(source, "meta")
    if not isinstance(meta, dict):
        raise where.error("missing 'meta' object")
    slurm = meta.get("Slurm") or meta.get("slurm") or {}
    version = slurm.get("version") if isinstance(slurm, dict) else None
    if not isinstance(version, dict):
        raise where.error("missing Slurm version", "meta.slurm.version")
    parts = tuple(_int_text(version.get(k), where, k) for k in ("major", "minor", "micro"))
    plugin = meta.get("plugin")
    if not isinstance(plugin, dict):
        plugin = {}
    data_format = str(plugin.get("data_parser") or plugin.get("type") or "")
    cluster = str(slurm.get("cluster") or "") if isinstance(slurm, dict) else ""
    return SlurmMeta((parts[0], parts[1], parts[2]), data_format, cluster)


def _int_text(value: object, where: Where, field: str) -> int:
    # 22.05 gives ints, 23.11+ strings such as "23".
    if isinstance(value, int) or (isinstance(value, str) and value.isascii()
                                  and value.isdigit()):
        return int(value)
    raise where.error(f"version part {value!r} is not a number", field)
