"""Opens copies of a package whose manifest's append kernels are corrupted
(package-append.test): each is refused with a message naming the place."""

import json
import shutil
import sys
import tempfile
from pathlib import Path

import kiln

source = Path(sys.argv[1])
manifest = json.loads((source / "manifest.json").read_text())


def first(kind):
    return next(i for i, k in enumerate(manifest["kernels"])
                if k["kind"] == kind)


def mutate(name, change):
    m = json.loads(json.dumps(manifest))
    change(m)
    with tempfile.TemporaryDirectory() as scratch:
        target = Path(scratch) / "pkg"
        shutil.copytree(source, target)
        (target / "manifest.json").write_text(json.dumps(m))
        try:
            kiln.Package(str(target))
            print(name, "-> opened")
        except kiln.KilnError as error:
            print(name, "->", str(error).replace(str(target), "PKG"))


append = first("paged_append")
paged = first("paged_attention")
combine = first("split_combine")
mutate("grid", lambda m: m["kernels"][append].__setitem__(
    "grid", [{"dim": "batch"}, 1, 1]))
mutate("missing arg", lambda m: m["kernels"][append]["args"].pop(6))
mutate("unknown arg", lambda m: m["kernels"][append]["args"][0].__setitem__(
    "name", "keys"))
mutate("pointer kind", lambda m: m["kernels"][append]["args"][0].__setitem__(
    "kind", "i64"))
mutate("names a combine kernel", lambda m: m["kernels"][paged].__setitem__(
    "paged_append", m["kernels"][combine]["name"]))
mutate("names no kernel", lambda m: m["kernels"][paged].__setitem__(
    "paged_append", "kiln_nothing"))
mutate("other head dim", lambda m: m["kernels"][append].__setitem__(
    "head_dim", 64))
mutate("site on an append kernel", lambda m: m["sites"][0].__setitem__(
    "kernel", m["kernels"][append]["name"]))
