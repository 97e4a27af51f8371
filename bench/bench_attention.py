#!/usr/bin/env python3
"""Prefill attention throughput of a Kiln package against PyTorch's kernels,
side by side in one run, on the same inputs.

    python3 bench/bench_attention.py PACKAGE_DIR [--out bench.json]

Cases (as in "Prefill" of docs/performance.md and shared/tools/anchors.py):
bf16, b*s = 16k tokens, hidden 2048 (32 heads at head_dim 64, 16 at 128, 8 at
256); by default sequence length 4096 (batch 4), head dims 128 and 64,
non-causal and causal;
`--cases design` runs head dims 64, 80, 96, 128 and 256 at 512, 1k, 4k and
16k tokens, causal and not, instead (`design-new`: the head dims 80 and 96 and
the 512-token cases alone). For each case a matching site of the package is used
(bf16, that head_dim, that causality, no mask or bias); a case without one is
reported as skipped. Compared with: SDPA's flash backend (FlashAttention-2),
SDPA's cuDNN backend, and torch.compile'd FlexAttention. FLOPs = 4*b*h*s_q*s_k*d, halved for causal.
Times are medians of triton.testing.do_bench (CUDA events when triton is
missing). Kiln is timed through a raw launch with prebuilt arguments (the
ctypes call is the only host work), and once more through Site.attention()
to show the Python wrapper's cost.
"""

from __future__ import annotations

import argparse
import json
import os
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
HIDDEN = 2048


def make_timer() -> Callable[[Callable[[], Any]], float]:
    """Median milliseconds of a callable."""
    try:
        from triton.testing import do_bench

        def timer(fn: Callable[[], Any]) -> float:
            return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))

        timer.__name__ = "triton.testing.do_bench"
        return timer
    except Exception:  # triton missing or too old for return_mode

        def timer(fn: Callable[[], Any]) -> float:
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            times = []
            for _ in range(30):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            times.sort()
            return times[len(times) // 2]

        timer.__name__ = "cuda events"
        return timer


def find_site(
    package: kiln.Package, head_dim: int, causal: bool, heads: int, seq: int
) -> Optional[kiln.Site]:
    def fits(site: kiln.Site) -> bool:
        return (
            site.dtype == "bf16"
            and site.head_dim == head_dim
            and site.causal == causal
            and site.mask == "none"
            and not site.bias
            and site.window is None
            and site.softcap is None
            and site.q_len in (None, seq)
            and site.kv_len in (None, seq)
        )

    candidates = [s for s in package.sites if fits(s)]
    # Prefer a site that takes the benchmark's MHA shape as is.
    for site in candidates:
        if site.q_heads in (None, heads) and site.kv_heads in (None, site.q_heads):
            return site
    return candidates[0] if candidates else None


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    ref64 = ref.double()
    return float((got.double() - ref64).norm() / ref64.norm())


def bench_case(
    package: kiln.Package,
    head_dim: int,
    causal: bool,
    seq: int,
    timer: Callable[[Callable[[], Any]], float],
    flex: Any,
    create_block_mask: Any,
) -> List[Dict[str, Any]]:
    batch = TOKENS // seq
    heads = HIDDEN // head_dim
    site = find_site(package, head_dim, causal, heads, seq)
    base = {"d": head_dim, "s": seq, "causal": causal}
    if site is None:
        print(f"d{head_dim} s{seq} causal={causal}: no matching site, skipped")
        return [dict(base, impl="kiln", skipped="no matching site")]
    q_heads = site.q_heads or heads
    kv_heads = site.kv_heads or q_heads
    batch = site.batch or batch
    device = torch.device("cuda")
    dtype = torch.bfloat16
    flops = 4 * batch * q_heads * seq * seq * head_dim / (2 if causal else 1)
    base.update(b=batch, hq=q_heads, hkv=kv_heads, site=site.name)

    # Inputs in the site's layout; torch gets [B, H, S, D] views of them.
    def tensor(h: int) -> torch.Tensor:
        if site.layout == "bhsd":
            return torch.randn(batch, h, seq, head_dim, device=device, dtype=dtype)
        return torch.randn(batch, seq, h, head_dim, device=device, dtype=dtype)

    def bhsd(t: torch.Tensor) -> torch.Tensor:
        return t if site.layout == "bhsd" else t.transpose(1, 2)

    q, k, v = tensor(q_heads), tensor(kv_heads), tensor(kv_heads)
    tq, tk, tv = bhsd(q), bhsd(k), bhsd(v)
    gqa = q_heads != kv_heads
    rows: List[Dict[str, Any]] = []

    def record(impl: str, ms: float, **extra: Any) -> None:
        row = dict(base, impl=impl, ms=ms, TFLOPs=flops / ms / 1e9, **extra)
        rows.append(row)
        err = f"  rel_err {extra['rel_err']:.1e}" if "rel_err" in extra else ""
        print(
            f"d{head_dim} s{seq} causal={causal!s:<5} {impl:<22} "
            f"{ms:8.3f} ms {row['TFLOPs']:7.1f} TFLOP/s{err}",
            flush=True,
        )

    # Reference for correctness: SDPA's math on float32 would be slow at this
    # size; compare against the flash/cuDNN result instead (both bf16).
    sdpa_out: Optional[torch.Tensor] = None

    def sdpa() -> torch.Tensor:
        return F.scaled_dot_product_attention(
            tq, tk, tv, is_causal=causal, scale=site.scale, enable_gqa=gqa
        )

    for name, backend in (
        ("sdpa-flash", SDPBackend.FLASH_ATTENTION),
        ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION),
    ):
        try:
            with sdpa_kernel(backend):
                result = sdpa()
                if sdpa_out is None:
                    sdpa_out = result
                record(name, timer(sdpa))
        except Exception as error:
            rows.append(dict(base, impl=name, error=str(error)[:200]))
            print(f"{name}: {str(error)[:200]}")

    if flex is not None:
        try:
            block_mask = (
                create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, seq, seq)
                if causal
                else None
            )

            def run_flex() -> torch.Tensor:
                return flex(
                    tq, tk, tv, block_mask=block_mask, scale=site.scale, enable_gqa=gqa
                )

            run_flex()
            record("flex", timer(run_flex))
        except Exception as error:
            rows.append(dict(base, impl="flex", error=str(error)[:200]))
            print(f"flex: {str(error)[:200]}")

    try:
        out = torch.empty_like(q)
        args, out = site.attention_args(q, k, v, out=out)
        stream = torch.cuda.current_stream().cuda_stream
        site.launch(args, stream)
        torch.cuda.synchronize()
        extra = {}
        if sdpa_out is not None:
            extra["rel_err"] = relative_error(bhsd(out), sdpa_out)
        record("kiln", timer(lambda: site.launch(args, stream)), **extra)
        record("kiln (Site.attention)", timer(lambda: site.attention(q, k, v, out=out)))
    except Exception as error:
        rows.append(dict(base, impl="kiln", error=str(error)[:300]))
        print(f"kiln: {str(error)[:300]}")

    kiln_rows = [r for r in rows if r.get("impl") == "kiln" and "ms" in r]
    if kiln_rows:
        for row in rows:
            if "ms" in row:
                row["kiln_speedup"] = row["ms"] / kiln_rows[0]["ms"]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("package", help="package directory written by kilnc")
    parser.add_argument("--out", help="JSON results file")
    parser.add_argument("--no-flex", action="store_true", help="skip FlexAttention")
    parser.add_argument(
        "--cases",
        default="d128:4096,d128c:4096,d64:4096,d64c:4096",
        help="comma-separated dHEAD[c]:SEQ (c = causal); 'design' for head "
        "dims 64, 80, 96, 128 and 256 at 512, 1k, 4k and 16k tokens, causal "
        "and not; 'design-new' for its cases with head dim 80 or 96 or 512 "
        "tokens",
    )
    options = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_attention: no CUDA device", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    package = kiln.Package(options.package)
    timer = make_timer()

    flex = create_block_mask = None
    if not options.no_flex:
        try:
            from torch import _dynamo
            from torch.nn.attention.flex_attention import (
                create_block_mask,
                flex_attention,
            )

            _dynamo.config.cache_size_limit = 64
            flex = torch.compile(flex_attention, dynamic=False)
        except Exception as error:
            print(f"FlexAttention unavailable: {error}")

    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"timer {timer.__name__}, package {options.package}",
        flush=True,
    )
    rows: List[Dict[str, Any]] = []
    # The design cases: head dims 64, 80, 96, 128 and 256, 512, 1k, 4k and
    # 16k tokens, causal and not; and those added to the first set (head
    # dims 64, 128 and 256 at 1k to 16k).
    design_cases = [
        (d, s, c)
        for d in (64, 80, 96, 128, 256)
        for s in (512, 1024, 4096, 16384)
        for c in ("", "c")
    ]
    new_cases = [(d, s, c) for d, s, c in design_cases
                 if d in (80, 96) or s == 512]
    def spell(cases):
        return ",".join(f"d{d}{c}:{s}" for d, s, c in cases)
    items = (options.cases.replace("design-new", spell(new_cases))
             .replace("design", spell(design_cases)).split(","))
    for item in items:
        shape, seq = item.split(":")
        causal = shape.endswith("c")
        head_dim = int(shape[1:].rstrip("c"))
        rows.extend(
            bench_case(
                package, head_dim, causal, int(seq), timer, flex, create_block_mask
            )
        )

    print("\nTFLOP/s (x = Kiln's speed relative to each):")
    cases = list(dict.fromkeys((r["d"], r["s"], r["causal"]) for r in rows))
    impls = ["kiln", "sdpa-flash", "sdpa-cudnn", "flex"]
    print(f"{'case':<22}" + "".join(f"{name:>16}" for name in impls))
    for d, seq, causal in cases:
        line = f"{f'd{d} s{seq}' + (' causal' if causal else ''):<22}"
        for impl in impls:
            row = next(
                (
                    r
                    for r in rows
                    if (r["d"], r["s"], r["causal"]) == (d, seq, causal)
                    and r.get("impl") == impl
                ),
                None,
            )
            if row is None or "ms" not in row:
                cell = "-"
            elif impl == "kiln":
                cell = f"{row['TFLOPs']:.0f}"
            else:
                cell = f"{row['TFLOPs']:.0f} ({row.get('kiln_speedup', 0):.2f}x)"
            line += f"{cell:>16}"
        print(line)

    summary = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "timer": timer.__name__,
        "package": options.package,
        "rows": rows,
    }
    out_path = options.out or os.path.join(
        os.environ.get("OUT", "."), "bench_attention.json"
    )
    with open(out_path, "w") as stream:
        json.dump(summary, stream, indent=1)
    print(f"\nresults in {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
