"""No document or module cites a file the repository does not have (issue 20): every relative
Markdown link in the docs resolves, and every ``docs/<name>.md`` or upper-case ``<NAME>.md``
named in the docs, ``slurm_rl/`` or ``tests/`` exists (a ``DESIGN.md`` that lives only outside
the repository, say, is cited by what it says, or by the document in the repository that says
it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_NAMED = re.compile(r"(?<![\w/.-])(docs/[\w./-]+\.md|[A-Z][A-Z_]+\.md)\b")


def documents() -> list[Path]:
    return sorted([*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md")])


def broken_links(document: Path) -> list[str]:
    broken = []
    for number, line in enumerate(document.read_text().splitlines(), 1):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z+.-]*:", target) or target.startswith("#"):
                continue  # a URL or an anchor in the same page
            if not (document.parent / target.split("#")[0]).exists():
                broken.append(f"{document.relative_to(ROOT)}:{number}: {target}")
    return broken


def missing_named(path: Path) -> list[str]:
    missing = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for name in _NAMED.findall(line):
            if not (ROOT / name).exists() and not any(ROOT.glob(f"**/{name}")):
                missing.append(f"{path.relative_to(ROOT)}:{number}: {name}")
    return missing


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = [entry for document in documents() for entry in broken_links(document)]
    assert not broken, "links to files that are not in the repository:\n" + "\n".join(broken)


def test_every_document_named_exists() -> None:
    sources = [*documents(), *ROOT.glob("slurm_rl/**/*.py"), *ROOT.glob("tests/**/*.py")]
    missing = [entry for path in sorted(sources) if path != Path(__file__).resolve()
               for entry in missing_named(path)]
    assert not missing, "documents named that are not in the repository:\n" + "\n".join(missing)
