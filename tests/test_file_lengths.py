"""The project's rule that no source file grows past 600 lines (CONTRIBUTING.md): two had
crept past it unnoticed (session 41), so the rule is checked."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LONGEST = 600


def test_no_source_file_is_over_600_lines() -> None:
    sources = [path for folder in ("slurm_rl", "tests", "benchmarks", "scripts")
               for path in (ROOT / folder).rglob("*.py")]
    assert len(sources) > 100
    lengths = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in sources}
    too_long = {str(path.relative_to(ROOT)): n for path, n in lengths.items() if n > LONGEST}
    assert not too_long, f"split these: {too_long}"
