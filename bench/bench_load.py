#!/usr/bin/env python3
"""What loading a package costs on the GPU: the driver's JIT of its PTX.

    python3 bench/bench_load.py PKG [PKG ...] [--out rows.json]

For each package (compiled elsewhere: no kilnc is needed here), each
measurement in a fresh process with the driver's JIT cache off
(CUDA_CACHE_DISABLE=1), so every load compiles:
- ``whole``: the target's PTX loaded as one module (cuModuleLoadDataEx), as
  the runtime loaded a package before it cut the PTX per kernel;
- ``site``: ``Site.prepare()`` of the package's first site: the kernels its
  prefill launches take (the warp-specialised one on sm_90a; a backward
  site's two passes), which is what the torch.compile backend compiles;
- ``prepare``: ``Package.prepare()``: every kernel's module (compiled in
  parallel threads when measured on 2026-12-06; one after another since).
Prints one row per package with the three times in seconds.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]


def _target_ptx(package: Path) -> bytes:
    """The PTX this GPU loads (sm_90a where the package has it)."""
    import torch

    manifest = json.loads((package / "manifest.json").read_text())
    major, minor = torch.cuda.get_device_capability()
    chips = {t["chip"]: t["ptx"] for t in manifest["targets"]}
    chip = f"sm_{major}{minor}a" if f"sm_{major}{minor}a" in chips else next(
        c for c in chips if int(c[3:5]) <= major * 10 + minor)
    return (package / chips[chip]).read_bytes() + b"\0"


def _measure(mode: str, package: Path) -> float:
    """One measurement in this process (CUDA started first, not timed)."""
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    if mode == "whole":
        cuda = ctypes.CDLL("libcuda.so.1")
        ptx = _target_ptx(package)
        module = ctypes.c_void_p()
        start = time.perf_counter()
        status = cuda.cuModuleLoadDataEx(ctypes.byref(module), ptx, 0, None, None)
        seconds = time.perf_counter() - start
        if status != 0:
            raise RuntimeError(f"cuModuleLoadDataEx: {status}")
        return seconds
    sys.path.insert(0, str(ROOT / "python"))
    import kiln

    opened = kiln.Package(str(package))
    if mode == "prepare":
        start = time.perf_counter()
        opened.prepare()
        return time.perf_counter() - start
    # site: the first site's own kernels.
    start = time.perf_counter()
    opened.sites[0].prepare()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("packages", nargs="+")
    parser.add_argument("--out")
    parser.add_argument("--one", nargs=2, metavar=("MODE", "PKG"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=1)
    args, _ = parser.parse_known_args()
    if args.one:
        print(json.dumps(_measure(args.one[0], Path(args.one[1]))))
        return 0
    env = dict(os.environ, CUDA_CACHE_DISABLE="1")
    rows: List[Dict[str, Any]] = []
    for package in args.packages:
        row: Dict[str, Any] = {"package": package}
        for mode in ("whole", "site", "prepare"):
            times = []
            for _ in range(args.repeats):
                done = subprocess.run(
                    [sys.executable, __file__, "x", "--one", mode, package],
                    env=env, capture_output=True, text=True)
                if done.returncode != 0:
                    times = None
                    row[f"{mode}_error"] = done.stderr.strip().splitlines()[-1:]
                    break
                times.append(json.loads(done.stdout.strip().splitlines()[-1]))
            row[mode] = min(times) if times else None
        rows.append(row)
        print(f"{package}: whole {row['whole']}, site {row['site']}, "
              f"prepare {row['prepare']}"
              + "".join(f"; {k}: {v}" for k, v in row.items() if k.endswith("_error")),
              flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
