#!/usr/bin/env python3
"""What a decode call costs at the least under bench_decode.py's timer.

    python3 bench/bench_decode_floor.py [--out floor.json]

Times, captured in a CUDA graph and replayed under triton's do_bench (which
writes 256 MB before every call to clear the L2) exactly as bench_decode.py
times attention:
  launch      one one-thread kernel: what any graph-timed call costs
  copy        a device-to-device copy of the K and V bytes of a decode shape
              (it reads what attention reads, and writes as much again)
  read        a kernel that only reads the K and V bytes (16-byte loads over
              the whole chip, one float written a program): the best of
              several tilings, so a floor for any kernel that reads them
  read+1      the same read followed by a one-thread kernel in the same
              graph: the least a split launch with a second (combine)
              kernel can cost
  gather      the gather of bench_decode.py's gather+sdpa (K and V pages of 16
              through the page table into dense tensors), without the SDPA
for some of bench_decode.py's decode shapes (bf16, d128).
"""

import argparse
import json
import os
import sys
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import bench_decode as decode  # noqa: E402

try:
    import triton
    import triton.language as tl
except ImportError:  # the read rows need triton
    triton = None

if triton is not None:
    @triton.jit
    def read_kernel(source, partial, count, BLOCK: tl.constexpr,
                    ITERS: tl.constexpr):
        base = tl.program_id(0) * BLOCK * ITERS
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for i in tl.static_range(ITERS):
            offsets = base + i * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(source + offsets, mask=offsets < count,
                           other=0.0).to(tl.float32)
        tl.store(partial + tl.program_id(0), tl.sum(acc))

# (elements a load step, steps a program, warps): the read floor is the best.
READ_TILINGS = ((2048, 1, 4), (4096, 1, 4), (4096, 2, 8), (8192, 1, 8),
                (8192, 2, 8), (8192, 4, 8))
from bench_attention import make_timer  # noqa: E402

SHAPES = [(32, 8, 8, 1024), (8, 1, 8, 1024), (8, 1, 16, 16384),
          (8, 1, 64, 4096), (32, 8, 1, 32768)]


def read_floor(timer: Any, source: torch.Tensor, one: torch.Tensor) -> List[Any]:
    """[("read", us, tiling), ("read+1", us, tiling)]: the fastest tiling
    of a read-only kernel over `source`, alone and followed by a one-thread
    kernel."""
    count = source.numel()
    best: Dict[str, Any] = {}
    for block, iters, warps in READ_TILINGS:
        programs = triton.cdiv(count, block * iters)
        partial = torch.empty(programs, device=source.device)

        def read() -> None:
            read_kernel[(programs,)](source, partial, count, BLOCK=block,
                                     ITERS=iters, num_warps=warps)

        def read_then_one() -> None:
            read()
            one.add_(1)

        for impl, run in (("read", read), ("read+1", read_then_one)):
            us = timer(decode.graph_replay(run)) * 1000
            if impl not in best or us < best[impl][0]:
                best[impl] = (us, (block, iters, warps))
    return [(impl, us, tiling) for impl, (us, tiling) in best.items()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    options = parser.parse_args()
    timer = make_timer()
    device = torch.device("cuda")
    rows: List[Dict[str, Any]] = []

    one = torch.zeros(1, device=device)
    launch_us = timer(decode.graph_replay(lambda: one.add_(1))) * 1000
    print(f"launch: {launch_us:.1f} us")
    rows.append({"impl": "launch", "us": launch_us})

    for hq, hkv, batch, keys in SHAPES:
        gen = torch.Generator().manual_seed(7)
        k = torch.randn(batch, hkv, keys, decode.HEAD_DIM, device=device,
                        dtype=decode.DTYPE)
        v = torch.randn_like(k)
        nbytes = 2 * k.numel() * k.element_size()
        kc, vc, table = decode.build_pages(k, v, [keys] * batch, 16, gen)
        index = table.long()
        source = torch.cat([k.flatten(), v.flatten()])
        target = torch.empty_like(source)
        copy_us = timer(decode.graph_replay(lambda: target.copy_(source))) * 1000

        def gather() -> Any:
            return decode.gather(kc, index), decode.gather(vc, index)

        gather_us = timer(decode.graph_replay(gather)) * 1000
        print(f"{hq}/{hkv} {batch} x {keys} ({nbytes / 1e6:.1f} MB): "
              f"copy {copy_us:.1f} us ({nbytes / copy_us / 1e6:.2f} TB/s read), "
              f"gather {gather_us:.1f} us")
        base = {"hq": hq, "hkv": hkv, "b": batch, "kv_len": keys,
                "bytes": nbytes}
        rows.append(dict(base, impl="copy", us=copy_us))
        rows.append(dict(base, impl="gather", us=gather_us))
        if triton is not None:
            for impl, us, tiling in read_floor(timer, source, one):
                print(f"  {impl}: {us:.1f} us (elements {tiling[0]}, steps "
                      f"{tiling[1]}, warps {tiling[2]})")
                rows.append(dict(base, impl=impl, us=us,
                                 tiling=list(tiling)))

    if options.out:
        with open(options.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(),
                       "timer": getattr(timer, "__name__", "timer"),
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
