#!/usr/bin/env python3
"""Every repository file the documentation cites exists: paths inside code
spans or link targets of README.md, docs/*.md and docs/perf-log/*.md that
start with one of the repository's top-level folders (bench/, docs/,
examples/, include/, lib/, python/, test/, tools/, utils/) or name a doc
relative to the page (a link target ending in .md or .svg). Placeholders
(PKG, DIR, a path with a wildcard or an ellipsis) are not paths; a path
without a suffix may be the stem of the files it names.

    check_cited_files.py REPO_ROOT
"""

import re
import sys
from pathlib import Path

TOP = ("bench/", "docs/", "examples/", "include/", "lib/", "python/", "test/",
       "tools/", "utils/")
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
TOKEN = re.compile(r"[A-Za-z0-9_.+/-]+")


def cited(text: str):
    """(path, relative to the page) of each citation in `text`."""
    for span in SPAN.findall(text):
        for token in TOKEN.findall(span):
            if token.startswith(TOP):
                yield token.rstrip(".,:;"), False
    for target in LINK.findall(text):
        if "://" in target:
            continue
        if target.startswith(TOP):
            yield target, False
        elif target.endswith((".md", ".svg")):
            yield target, True


def main() -> int:
    root = Path(sys.argv[1])
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md")),
             *sorted((root / "docs" / "perf-log").glob("*.md"))]
    checked = missing = 0
    for page in pages:
        for path, relative in sorted(set(cited(page.read_text()))):
            if any(mark in path for mark in ("*", "...", "…", "PKG", "DIR", "<")):
                continue
            base = page.parent if relative else root
            checked += 1
            target = base / path
            # A stem without a suffix (`…-ws-` before `{a,b}.log`, say) names
            # the files that start with it.
            stem = not target.suffix and target.parent.is_dir() and any(
                f.name.startswith(target.name) for f in target.parent.iterdir())
            if not (target.exists() or stem):
                missing += 1
                print(f"{page.relative_to(root)}: cites {path}, which is not in the repository")
    print(f"{checked - missing} of {checked} cited files exist")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
