#!/usr/bin/env python3
"""Fails when two units of the sources include each other.

A unit is a header and its implementation: `X.h` and `X.cpp` of one folder
under lib/, or a public header include/kiln/P/X.h with lib/P/X.cpp. A unit
includes another when one of its files includes the other's header (a
quoted include, looked up beside the file, in the folders above it up to
lib/, as the kernel library's include directory lets its files write
"Schedules/..." for lib/Conversion/KilnToGPU/Schedules/..., and in
include/). Two units that include each other are one circle of code: each
needs the other to build and to be read.

    check_include_cycles.py [ROOT]

Prints each pair and exits 1 when there is one not in KNOWN, or when a
pair in KNOWN no longer includes each other (then drop it from the list);
prints the count of units checked otherwise.
"""

import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = {".h", ".cpp", ".inc"}
# Pairs that include each other by design: the dialect's is MLIR's pattern
# (the dialect registers its ops; the ops name their dialect).
KNOWN = {
    ("Dialect/Kiln/IR/KilnDialect", "Dialect/Kiln/IR/KilnOps"),
}


def unit_of(path: Path, root: Path) -> str:
    """The unit of a file: its path below lib/ (or include/kiln/), less
    the extension."""
    for base in (root / "lib", root / "include" / "kiln"):
        try:
            return str(path.relative_to(base).with_suffix(""))
        except ValueError:
            continue
    return str(path.relative_to(root).with_suffix(""))


def resolve(name: str, source: Path, root: Path):
    """The file a quoted include names, or None (a generated or outside
    header)."""
    folder = source.parent
    lib = root / "lib"
    while True:
        candidate = folder / name
        if candidate.is_file():
            return candidate
        if folder == lib or lib not in folder.parents:
            break
        folder = folder.parent
    candidate = root / "include" / name
    return candidate if candidate.is_file() else None


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else
                Path(__file__).resolve().parent.parent).resolve()
    files = [p for base in (root / "lib", root / "include")
             for p in sorted(base.rglob("*")) if p.suffix in SOURCES]
    edges = {}
    for source in files:
        text = source.read_text(errors="replace")
        here = unit_of(source, root)
        for name in INCLUDE.findall(text):
            target = resolve(name, source, root)
            if target is None or target.suffix == ".inc":
                continue
            there = unit_of(target, root)
            if there != here:
                edges.setdefault(here, {}).setdefault(there, []).append(
                    f"{source.relative_to(root)} includes {name}")
    cycles = []
    for unit, targets in sorted(edges.items()):
        for other, how in sorted(targets.items()):
            back = edges.get(other, {}).get(unit)
            if back and unit < other:
                cycles.append((unit, other, how + back))
    new = [c for c in cycles if (c[0], c[1]) not in KNOWN]
    gone = KNOWN - {(c[0], c[1]) for c in cycles}
    for unit, other, how in new:
        print(f"{unit} and {other} include each other:")
        for line in how:
            print(f"  {line}")
    for unit, other in sorted(gone):
        print(f"{unit} and {other} no longer include each other: drop them "
              "from KNOWN")
    units = {unit_of(p, root) for p in files}
    if new or gone:
        return 1
    print(f"no two of {len(units)} units include each other "
          f"(but the {len(KNOWN)} known pairs)")
    return 0

if __name__ == "__main__":
    sys.exit(main())
