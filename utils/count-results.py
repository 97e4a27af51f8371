#!/usr/bin/env python3
"""Adds up JUnit XML results (lit's and pytest's) and prints the closing line
`N passed, N failed` (skipped and unsupported tests are listed apart).

    count-results.py RESULT.xml...

Exits 1 when a test failed, a file is missing, or nothing ran at all.
"""

import sys
import xml.etree.ElementTree as ElementTree


def count(path: str) -> tuple[int, int, int]:
    passed = failed = skipped = 0
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def main() -> int:
    passed = failed = skipped = 0
    missing = False
    for path in sys.argv[1:]:
        try:
            p, f, s = count(path)
        except (OSError, ElementTree.ParseError) as error:
            print(f"count-results: {path}: {error}", file=sys.stderr)
            missing = True
            continue
        print(f"{path}: {p} passed, {f} failed, {s} skipped", file=sys.stderr)
        passed, failed, skipped = passed + p, failed + f, skipped + s
    if missing:
        failed += 1
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
