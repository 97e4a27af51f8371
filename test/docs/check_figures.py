#!/usr/bin/env python3
"""Every figure the documentation ties to a standing record says what the
record holds. A figure is tied by a comment right after it:

    1.36–1.86×<!-- figure prefill-h200.json: ratio sdpa-flash/kiln d=64,128 s=4096..16384 -->
    up to 4.30<!-- figure decode-h200.json: max TBs impl=kiln -->

`ratio REF/IMPL` is, over the rows of IMPL that pass the filters, REF's time
over IMPL's on the row of REF with the same shape (every key but impl, ms
and the measured fields), as "min–max" (or one value when they agree);
`max FIELD` and `min FIELD` are the extreme of FIELD over the rows that pass.
A filter `key=a,b` keeps rows whose key is one of the values, `key=a..b`
rows whose key lies in the range. Figures are compared at two decimals;
the text before the comment must end with the figure (and "×" for a ratio).
Records are read from bench/results/ (a top-level key other than "rows"
is a field of its own: `value copy_TBs`).

    check_figures.py REPO_ROOT [FILE.md ...]
"""

import json
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

MARKER = re.compile(r"<!--\s*figure\s+([\w.-]+\.json):\s*(.*?)\s*-->", re.S)
#: Fields a row measures (not part of its shape).
MEASURED = {"impl", "ms", "TFLOPs", "TBs", "rel_err", "kiln_speedup", "ok", "run"}


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _passes(row: Dict[str, Any], filters: List[Tuple[str, str]]) -> bool:
    for key, wanted in filters:
        if key not in row:
            return False
        if ".." in wanted:
            low, high = (_value(v) for v in wanted.split("..", 1))
            if not low <= row[key] <= high:
                return False
        elif row[key] not in [_value(v) for v in wanted.split(",")]:
            return False
    return True


def _shape(row: Dict[str, Any]) -> Tuple:
    return tuple(sorted((k, str(v)) for k, v in row.items() if k not in MEASURED))


def figure(record: Any, query: str) -> str:
    """The figure `query` asks of `record`, as the docs write it."""
    words = query.split()
    if len(words) < 2:
        raise ValueError(f"a figure needs a kind and a field: {query!r}")
    kind, field, rest = words[0], words[1], words[2:]
    if kind == "value":
        return f"{float(record[field]):.2f}"
    rows = record["rows"] if isinstance(record, dict) else record
    filters = [tuple(word.split("=", 1)) for word in rest]
    if kind in ("max", "min"):
        values = [row[field] for row in rows if _passes(row, filters) and field in row]
        if not values:
            raise ValueError(f"no row passes {query!r}")
        return f"{(max if kind == 'max' else min)(values):.2f}"
    if kind != "ratio" or "/" not in field:
        raise ValueError(f"unknown figure {query!r}")
    reference, impl = field.split("/", 1)
    by_shape = {_shape(row): row for row in rows if row.get("impl") == reference}
    ratios = []
    for row in rows:
        if row.get("impl") != impl or not _passes(row, filters):
            continue
        other = by_shape.get(_shape(row))
        if other is None:
            raise ValueError(f"{query!r}: no {reference} row of the shape of {row}")
        ratios.append(other["ms"] / row["ms"])
    if not ratios:
        raise ValueError(f"no row passes {query!r}")
    low, high = f"{min(ratios):.2f}", f"{max(ratios):.2f}"
    return low if low == high else f"{low}–{high}"


def check(root: Path, page: Path) -> List[str]:
    text = page.read_text(encoding="utf-8")
    errors = []
    for match in MARKER.finditer(text):
        name, query = match.group(1), " ".join(match.group(2).split())
        line = text.count("\n", 0, match.start()) + 1
        where = f"{page.relative_to(root)}:{line}"
        try:
            record = json.loads((root / "bench" / "results" / name).read_text())
            want = figure(record, query)
        except (OSError, ValueError, KeyError, TypeError) as error:
            errors.append(f"{where}: {name}: {error}")
            continue
        before = text[:match.start()]
        suffix = "×" if query.startswith("ratio") else ""
        if not before.endswith(want + suffix):
            written = re.search(r"([\d.]+(?:[–-][\d.]+)?×?)\s*$", before)
            errors.append(f"{where}: the text says {written.group(1) if written else '?'}"
                          f", {name} holds {want}{suffix} ({query})")
    return errors


def main() -> int:
    root = Path(sys.argv[1]).resolve()
    pages = [Path(p) for p in sys.argv[2:]] or [root / "README.md",
                                                 *sorted((root / "docs").glob("*.md"))]
    errors, count = [], 0
    for page in pages:
        page = page if page.is_absolute() else root / page
        count += len(MARKER.findall(page.read_text(encoding="utf-8")))
        errors += check(root, page)
    for error in errors:
        print(error)
    print(f"{count} figures checked, {len(errors)} wrong")
    return 1 if errors or count == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
