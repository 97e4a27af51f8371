"""Every file under bench/results/ or docs/ that the documentation cites
exists: paths written out in README.md and docs/**/*.md (`{a,b}` alternatives
and `*` globs expanded) and their relative Markdown links."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A repository path written out in prose or code spans: not part of a longer
# path (build/docs/..., ../shared/docs) and ending before closing punctuation.
CITED_PATH = re.compile(r"(?<![\w./-])((?:bench/results|docs)/[\w.{},*/-]*)")
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def expand_braces(path: str) -> list[str]:
    """`a-{x,y}.json` -> [`a-x.json`, `a-y.json`], innermost group first."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    head, tail = path[: match.start()], path[match.end() :]
    return [
        expanded
        for choice in match.group(1).split(",")
        for expanded in expand_braces(head + choice + tail)
    ]


def exists(path: Path) -> bool:
    if "*" in path.name or "*" in str(path.parent):
        return any(ROOT.glob(str(path.relative_to(ROOT))))
    return path.exists()


def missing_citations(document: Path) -> list[str]:
    text = document.read_text(encoding="utf-8")
    missing = []
    for match in CITED_PATH.finditer(text):
        cited = match.group(1).rstrip(".,")
        for path in expand_braces(cited):
            if not exists(ROOT / path):
                missing.append(path)
    for match in MARKDOWN_LINK.finditer(text):
        target = match.group(1).split("#", 1)[0]
        if not target or re.match(r"[a-z]+:", target):
            continue
        path = (document.parent / target).resolve()
        inside = path.is_relative_to(ROOT / "docs") or path.is_relative_to(
            ROOT / "bench" / "results"
        )
        if inside and not path.exists():
            missing.append(target)
    return missing


@pytest.mark.parametrize(
    "document", documents(), ids=lambda path: str(path.relative_to(ROOT))
)
def test_cited_files_exist(document):
    assert missing_citations(document) == []
