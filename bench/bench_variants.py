#!/usr/bin/env python3
"""Throughput of Kiln's newer attention variants against PyTorch's SDPA
backends, side by side in one run, on the same inputs.

    python3 bench/bench_variants.py PACKAGE_DIR [--out variants.json]

PACKAGE_DIR is `kilnc test/gpu/attention_sites.mlir -o DIR`; its sites are
looked up by function name. Cases (bf16/f16, b*s = 16k tokens):

- mla: multi-head latent attention, q/k head dim 192, v head dim 128, at 1k,
  4k and 16k tokens, causal with Hq 8 / Hkv 2 and not with 16 / 16 (SDPA with
  K/V repeated per head: flash needs equal head dims, so cuDNN and
  memory-efficient are tried);
- window: a two-sided local window (65 keys back, 64 ahead; ModernBERT), d64,
  against SDPA with the band as a boolean mask (memory-efficient, cuDNN);
- d40, d72, d120: head dims that are multiples of 8, not of 16 (d40 causal),
  against SDPA-flash and cuDNN.

Correctness first: each implementation is compared with the first one that ran
(relative L2), and Kiln with a float64 reference on a slice. Times are medians
of triton.testing.do_bench. FLOPs: 2*b*h*s_q*s_k*(d + dv) over the keys each
query sees.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import kiln  # noqa: E402

TOKENS = 16384


def timer(fn: Callable[[], Any]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    got, ref = got.double(), ref.double()
    return float((got - ref).norm() / ref.norm().clamp_min(1e-30))


def band_mask(s: int, left: int, right: int, device) -> torch.Tensor:
    i = torch.arange(s, device=device)[:, None]
    j = torch.arange(s, device=device)[None, :]
    return (j > i - left) & (j <= i + right)


def run_case(site: kiln.Site, name: str, dtype: torch.dtype, hq: int, hkv: int,
             d: int, dv: int, seq: int, causal: bool = False,
             window: Optional[tuple] = None) -> List[Dict[str, Any]]:
    device = torch.device("cuda")
    batch = TOKENS // seq
    torch.manual_seed(0)
    q = torch.randn(batch, hq, seq, d, dtype=dtype, device=device)
    k = torch.randn(batch, hkv, seq, d, dtype=dtype, device=device)
    v = torch.randn(batch, hkv, seq, dv, dtype=dtype, device=device)
    scale = site.scale
    group = hq // hkv
    k_full = k.repeat_interleave(group, dim=1)
    v_full = v.repeat_interleave(group, dim=1)
    mask = None
    if window is not None:
        mask = band_mask(seq, window[0], window[1], device)
        visible = float(mask.sum())
    elif causal:
        visible = seq * (seq + 1) / 2
    else:
        visible = float(seq * seq)
    flops = 2.0 * batch * hq * visible * (d + dv)
    rows: List[Dict[str, Any]] = []

    def record(impl: str, fn: Callable[[], torch.Tensor], ref) -> torch.Tensor:
        out = fn()
        torch.cuda.synchronize()
        ms = timer(fn)
        row = dict(case=name, impl=impl, batch=batch, seq=seq, hq=hq, hkv=hkv,
                   d=d, dv=dv, ms=ms, tflops=flops / ms / 1e9,
                   rel_err=None if ref is None else relative_error(out, ref))
        rows.append(row)
        print(row, flush=True)
        return out

    out = torch.empty(batch, hq, seq, dv, dtype=dtype, device=device)
    kiln_out = record("kiln", lambda: site.attention(q, k, v, out=out), None)
    # float64 reference on the first sequence's first heads.
    q64, k64, v64 = q[:1, :2].double(), k_full[:1, :2].double(), v_full[:1, :2].double()
    s64 = scale * q64 @ k64.transpose(-1, -2)
    if window is not None:
        s64 = s64.masked_fill(~mask, float("-inf"))
    elif causal:
        s64 = s64.masked_fill(torch.ones(seq, seq, dtype=torch.bool,
                                         device=device).triu(1), float("-inf"))
    ref64 = torch.softmax(s64, -1) @ v64
    rows[-1]["rel_err_f64"] = relative_error(kiln_out[:1, :2], ref64)
    print("kiln vs float64", rows[-1]["rel_err_f64"], flush=True)
    for impl, backend in [("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                          ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("sdpa-efficient", SDPBackend.EFFICIENT_ATTENTION)]:
        def sdpa(backend=backend) -> torch.Tensor:
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(
                    q, k_full, v_full, attn_mask=mask,
                    is_causal=causal and mask is None, scale=scale)
        try:
            record(impl, sdpa, kiln_out)
        except Exception as error:  # a backend that does not take the case
            rows.append(dict(case=name, impl=impl, skipped=str(error)[:200]))
            print(impl, "skipped:", str(error)[:120], flush=True)
    kiln_ms = rows[0]["ms"]
    for row in rows[1:]:
        if "ms" in row:
            row["kiln_speedup"] = row["ms"] / kiln_ms
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("package")
    parser.add_argument("--out")
    parser.add_argument("--cases", action="append",
                        help="only the cases whose name holds this text")
    options = parser.parse_args()
    package = kiln.Package(options.package)
    sites = {site.function: site for site in package.sites}
    cases = [
        (f"mla 192/128{' causal' if causal else ''} s{seq // 1024}k",
         "bf16_mla_192_128_causal" if causal else "bf16_mla_192_128_full",
         torch.bfloat16, 8 if causal else 16, 2 if causal else 16, 192, 128,
         seq, causal, None)
        for causal in (True, False) for seq in (1024, 4096, 16384)
    ] + [
        ("window 65/64 d64 s4k", "bf16_d64_two_sided_window", torch.bfloat16,
         8, 2, 64, 64, 4096, False, (65, 64)),
        ("d40 causal s4k", "bf16_d40_causal", torch.bfloat16, 8, 2, 40, 40,
         4096, True, None),
        ("d120 s4k", "bf16_d120_full", torch.bfloat16, 8, 2, 120, 120, 4096,
         False, None),
    ]
    rows: List[Dict[str, Any]] = []
    for name, function, dtype, hq, hkv, d, dv, seq, causal, window in cases:
        if options.cases and not any(c in name for c in options.cases):
            continue
        if function not in sites:
            print(f"{name}: no site {function} in the package, skipped")
            continue
        rows += run_case(sites[function], name, dtype, hq, hkv, d, dv, seq,
                         causal, window)
    if options.out:
        Path(options.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
