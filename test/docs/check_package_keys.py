#!/usr/bin/env python3
"""Every key of the given manifests (manifest.json as kilnc writes it) is
named in the part of docs/package.md that describes its object: as a word
inside a code span or block of that part. The top level and the targets in
"manifest.json" and "targets"; attention kernels in "kernels", paged ones
there or in "Paged kernels and sites", combine kernels there or in "Split-KV
kernels" (which also names the keys of kernels that split); sites in "sites",
paged ones there or in "Paged kernels and sites". Keys nested in an object
(arguments, grid rules, schedules) count as its own; the chips a schedule is
keyed by are values, not keys.

    check_package_keys.py PACKAGE_MD MANIFEST...
"""

import json
import re
import sys
from pathlib import Path

# Object kind -> the headings of the parts of package.md that may name its keys.
SCOPES = {
    "manifest": ["manifest.json"],
    "target": ["manifest.json", "targets"],
    "attention kernel": ["kernels"],
    "paged_attention kernel": ["kernels", "Paged kernels and sites"],
    "split_combine kernel": ["kernels", "Split-KV kernels"],
    "paged_append kernel": ["kernels", "Paged-append kernels"],
    "attention site": ["sites"],
    "paged_attention site": ["sites", "Paged kernels and sites"],
}
# Keys of any kernel that can split its keys, described in "Split-KV kernels".
SPLIT_KEYS = {"split_combine", "times_splits"}


def sections(doc: str) -> dict:
    """The code words of each `##`/`###` part of the document, by heading."""
    parts = re.split(r"^#{2,3} (.*)$", doc, flags=re.M)
    words = {}
    for heading, text in zip(parts[1::2], parts[2::2]):
        spans = re.findall(r"```.*?```|`[^`\n]+`", text, re.S)
        words[heading.strip()] = {
            word for span in spans for word in re.findall(r"\w+", span)
        }
    return words


def keys(value) -> set:
    """The keys of `value` and of every object nested in it."""
    if isinstance(value, dict):
        own = {key for key in value if not re.fullmatch(r"sm_\d+[af]?", key)}
        return own.union(*(keys(item) for item in value.values()))
    if isinstance(value, list):
        return set().union(*(keys(item) for item in value))
    return set()


def objects(manifest: dict):
    """(kind, name, keys) of the manifest, each target, kernel and site."""
    yield "manifest", "manifest", set(manifest)
    for target in manifest["targets"]:
        yield "target", target["chip"], keys(target)
    for kernel in manifest["kernels"]:
        yield f"{kernel['kind']} kernel", kernel["name"], keys(kernel)
    for site in manifest["sites"]:
        kind = site.get("kind", "attention")
        yield f"{kind} site", site["name"], keys(site)


def main() -> int:
    words = sections(Path(sys.argv[1]).read_text(encoding="utf-8"))
    missing, checked = {}, set()
    for path in sys.argv[2:]:
        for kind, name, names in objects(json.loads(Path(path).read_text())):
            scope = set().union(*(words.get(part, set()) for part in SCOPES[kind]))
            split = words.get("Split-KV kernels", set()) & SPLIT_KEYS
            if kind.endswith("kernel"):
                scope |= split
            for key in names:
                checked.add((kind, key))
                if key not in scope:
                    missing.setdefault((kind, key), name)
    for (kind, key), name in sorted(missing.items()):
        parts = " or ".join(f'"{part}"' for part in SCOPES[kind])
        print(f"{kind} key '{key}' (of {name}) is not in {parts} of docs/package.md")
    print(f"{len(checked) - len(missing)} of {len(checked)} manifest keys documented")
    return 1 if missing or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
