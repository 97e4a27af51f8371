#!/usr/bin/env python3
"""Writes Kiln's wheel: the Python package, libkilnrt.so and the bundled
kilnc (utils/bundle-kilnc.sh's directory), so that `pip install` on a
machine with only the CUDA driver and PyTorch gives the compiler, the
runtime and the torch.compile backend.

    utils/make-wheel.py --python python/kiln --runtime LIB --bundle DIR --out DIR

A wheel is a zip archive with its metadata in `<name>-<version>.dist-info`
(PEP 427); it is written here directly, so that building one needs no
packaging tool the machine lacks. The tag is py3-none-linux_x86_64: the
bundled kilnc brings its own loader and C/C++ runtime; libkilnrt.so needs
glibc 2.34 and the C++ runtime of GCC 11 or later (as a machine running
PyTorch has) and, at run time, the CUDA driver.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import stat
import sys
import zipfile
from pathlib import Path
from typing import List, Tuple

NAME = "kiln"
TAG = "py3-none-linux_x86_64"
#: A fixed date for every entry: the same inputs give the same wheel.
DATE = (2026, 1, 1, 0, 0, 0)


def version_of(package: Path) -> str:
    text = (package / "version.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE)
    if not match:
        raise SystemExit(f"make-wheel: no __version__ in {package / 'version.py'}")
    return match.group(1)


def metadata(version: str) -> str:
    return "\n".join([
        "Metadata-Version: 2.1",
        f"Name: {NAME}",
        f"Version: {version}",
        "Summary: Kiln, an MLIR attention-fusion compiler: kilnc, its runtime "
        "and the torch.compile backend",
        "License: Apache-2.0",
        "Requires-Python: >=3.9",
        "Provides-Extra: torch",
        'Requires-Dist: torch>=2.4; extra == "torch"',
        "",
    ])


WHEEL = "\n".join(["Wheel-Version: 1.0", "Generator: kiln make-wheel",
                   "Root-Is-Purelib: false", f"Tag: {TAG}", ""])

# torch.compile(model, backend="kiln") through torch's entry point group, and
# `kilnc` on the environment's PATH.
ENTRY_POINTS = "\n".join([
    "[torch_dynamo_backends]", "kiln = kiln.dynamo:backend", "",
    "[console_scripts]", "kilnc = kiln.compiler:kilnc_main", ""])


def files(package: Path, runtime: Path, bundle: Path) -> List[Tuple[str, Path]]:
    """(path in the wheel, file here) for every file the wheel holds."""
    entries = [(f"{NAME}/{p.relative_to(package).as_posix()}", p)
               for p in sorted(package.rglob("*"))
               if p.suffix in (".py", ".cc", ".h") and "__pycache__" not in p.parts]
    entries.append((f"{NAME}/libkilnrt.so", runtime))
    # The C API's header: kiln.jax builds its XLA FFI handler against it.
    header = package.parents[1] / "include" / "kiln-c" / "Runtime.h"
    entries.append((f"{NAME}/include/kiln-c/Runtime.h", header))
    for p in sorted(bundle.rglob("*")):
        if p.is_file():
            entries.append((f"{NAME}/bin/{p.relative_to(bundle).as_posix()}", p))
    return entries


def digest(data: bytes) -> str:
    raw = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def write(out: Path, package: Path, runtime: Path, bundle: Path) -> Path:
    version = version_of(package)
    info = f"{NAME}-{version}.dist-info"
    wheel = out / f"{NAME}-{version}-{TAG}.whl"
    out.mkdir(parents=True, exist_ok=True)
    record: List[str] = []
    scratch = wheel.with_suffix(".partial")
    with zipfile.ZipFile(scratch, "w", zipfile.ZIP_DEFLATED) as archive:
        def add(name: str, data: bytes, executable: bool) -> None:
            entry = zipfile.ZipInfo(name, DATE)
            mode = 0o755 if executable else 0o644
            entry.external_attr = (stat.S_IFREG | mode) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, data)
            record.append(f"{name},{digest(data)},{len(data)}")

        for name, path in files(package, runtime, bundle):
            add(name, path.read_bytes(), os.access(path, os.X_OK))
        add(f"{info}/METADATA", metadata(version).encode(), False)
        add(f"{info}/WHEEL", WHEEL.encode(), False)
        add(f"{info}/entry_points.txt", ENTRY_POINTS.encode(), False)
        add(f"{info}/top_level.txt", f"{NAME}\n".encode(), False)
        record.append(f"{info}/RECORD,,")
        entry = zipfile.ZipInfo(f"{info}/RECORD", DATE)
        entry.external_attr = (stat.S_IFREG | 0o644) << 16
        archive.writestr(entry, "\n".join(record) + "\n")
    os.replace(scratch, wheel)
    return wheel


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, type=Path, help="python/kiln")
    parser.add_argument("--runtime", required=True, type=Path, help="libkilnrt.so")
    parser.add_argument("--bundle", required=True, type=Path,
                        help="the kilnc bundle's directory (holding kilnc)")
    parser.add_argument("--out", required=True, type=Path)
    options = parser.parse_args()
    for path, what in ((options.python / "__init__.py", "the Python package"),
                       (options.runtime, "libkilnrt.so"),
                       (options.bundle / "kilnc", "the bundled kilnc")):
        if not path.is_file():
            print(f"make-wheel: {what} is missing: {path}", file=sys.stderr)
            return 1
    wheel = write(options.out, options.python, options.runtime, options.bundle)
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
