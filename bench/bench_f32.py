#!/usr/bin/env python3
"""f32 attention: Kiln's f32 kernels (3xTF32, TF32, scalar) and SDPA in f32.

    kilnc test/gpu/attention_sites.mlir -o SPLIT --target=sm_90a
    kilnc test/gpu/attention_sites.mlir -o TF32 --allow-tf32 --target=sm_90a
    kilnc F32_SITES -o SCALAR --tensor-cores=0 --target=sm_90a   # its f32 functions
    python3 bench/bench_f32.py kiln-3xtf32=SPLIT kiln-tf32=TF32 \
        kiln-scalar=SCALAR [--out f32.json]
    python3 bench/bench_f32.py --wide kiln-3xtf32=WIDE kiln-tf32=WIDE_TF32
        (packages of test/gpu/f32_wide_sites.mlir)

Sites f32_d64_full, f32_d64_causal, f32_d128_full and f32_d128_causal (GQA
8/2) at 1k and 4k tokens, batch · tokens = 16k. For each: the relative error
of every implementation against a float64 reference (||out - ref|| /
||ref||, Kiln's outputs poisoned with NaN first), then TFLOP/s (4·b·h·s²·d,
halved when causal; 2·b·h·s²·(d + dv) with V's own head dim) from the median of triton.testing.do_bench. SDPA runs
with TF32 matmuls off (torch's default), so it is exact f32.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import kiln  # noqa: E402

# (function, head dim, value head dim, query heads, KV heads, causal).
SITES = (("f32_d64_full", 64, 64, 8, 2, False),
         ("f32_d64_causal", 64, 64, 8, 2, True),
         ("f32_d128_full", 128, 128, 8, 2, False),
         ("f32_d128_causal", 128, 128, 8, 2, True))
# `--wide`: the sites of test/gpu/f32_wide_sites.mlir past head dim 128.
WIDE_SITES = (("f32_d256_causal", 256, 256, 8, 4, True),
              ("f32_mla_causal", 192, 128, 8, 8, True))
TOKENS = 16384


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="+",
                        help="NAME=DIR: packages of test/gpu/attention_sites.mlir")
    parser.add_argument("--out", default="f32.json")
    parser.add_argument("--wide", action="store_true",
                        help="the sites of test/gpu/f32_wide_sites.mlir")
    options = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    packages = {}
    for item in options.packages:
        name, _, directory = item.partition("=")
        packages[name] = kiln.Package(directory)
    rows = []
    for function, dim, vdim, q_heads, kv_heads, causal in (
            WIDE_SITES if options.wide else SITES):
        for seq in (1024, 4096):
            batch = TOKENS // seq
            q = torch.randn(batch, q_heads, seq, dim, device="cuda")
            k = torch.randn(batch, kv_heads, seq, dim, device="cuda")
            v = torch.randn(batch, kv_heads, seq, vdim, device="cuda")
            flops = (2 * batch * q_heads * seq * seq * (dim + vdim) *
                     (0.5 if causal else 1.0))

            def sdpa(dtype=None):
                args = (q, k, v) if dtype is None else (q.to(dtype), k.to(dtype),
                                                         v.to(dtype))
                return F.scaled_dot_product_attention(
                    *args, is_causal=causal, scale=dim ** -0.5, enable_gqa=True)

            ref = sdpa(torch.float64)
            implementations = {}
            for name, package in packages.items():
                site = {s.function: s for s in package.sites}[function]
                out = q.new_full((batch, q_heads, seq, vdim), float("nan"))
                implementations[name] = (
                    lambda site=site, out=out: site.attention(q, k, v, out=out))
            implementations["sdpa-f32"] = sdpa
            for name, run in implementations.items():
                got = run()
                torch.cuda.synchronize()
                error = float((got.double() - ref).norm() / ref.norm())
                ms = do_bench(run, warmup=10, rep=50, return_mode="median")
                row = {"site": function, "d": dim, "causal": causal, "s": seq,
                       "b": batch, "impl": name, "rel_err": error, "ms": ms,
                       "TFLOPs": flops / ms / 1e9}
                rows.append(row)
                print(f"{function:<16} s{seq:<5} {name:<12} {row['TFLOPs']:7.1f} "
                      f"TFLOP/s  rel_err {error:.1e}", flush=True)
    Path(options.out).write_text(json.dumps(
        {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
         "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
