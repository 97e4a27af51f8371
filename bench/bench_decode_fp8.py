#!/usr/bin/env python3
"""Case (b) of the serving benchmark: paged decode over an FP8 (e4m3) KV
cache beside the same decode over a bf16 cache.

    kilnc bench/decode_fp8_sites.mlir -o PKG
    python3 bench/bench_decode_fp8.py PKG [--out rows.json] [--quick]

The matrix of bench_decode.py (head dim 128, one query per sequence, GQA
32/8 with per-KV-head scales and 8/1 with one scale, pages of 16 placed at
random): the same float32 keys and values stored once as bf16 and once as
e4m3 with scales (amax / 448 per KV head, or over the cache), Kiln's paged
site on each. Each output is checked first against float64 attention over
the values its cache holds (the dequantised e4m3, or the bf16): rel_err
below 2e-2 and no NaN; `vs_f32` is its error against the float32 values
before storage (what the cache format costs). Times: the call captured in
a CUDA graph and replayed, median of do_bench (as bench_decode.py). TB/s
counts the bytes each cache holds for the keys read (e4m3: half of bf16's),
`speedup` is bf16 ms / fp8 ms. Rows: {case, impl, ms, TBs, TFLOPs (null),
rel_err, vs_f32, bytes}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

import kiln  # noqa: E402
from bench_attention import make_timer  # noqa: E402
from bench_decode import (GQA, QUICK_SHAPES, SHAPES, build_pages,  # noqa: E402
                          graph_replay, make_workspace)

HEAD_DIM = 128
SCALE = HEAD_DIM ** -0.5
E4M3_MAX = 448.0


def reference(q, kc, vc, table, kv_lens, rows, page):
    """float64 attention of sequences `rows` over the paged caches."""
    group = q.shape[1] // kc.shape[2]
    out = {}
    for b in rows:
        n = kv_lens[b]
        keys = torch.arange(n, device=q.device)
        pages = table[b, keys // page].long()
        k = kc[pages, keys % page].double().permute(1, 0, 2).repeat_interleave(group, 0)
        v = vc[pages, keys % page].double().permute(1, 0, 2).repeat_interleave(group, 0)
        s = SCALE * q[b].double() @ k.transpose(-1, -2)
        out[b] = torch.softmax(s, -1) @ v
    return out


def rel(out, refs):
    num = sum(float((out[b].double() - r).pow(2).sum()) for b, r in refs.items())
    den = sum(float(r.pow(2).sum()) for r in refs.values())
    return (num / den) ** 0.5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("package")
    parser.add_argument("--out")
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args()
    device = torch.device("cuda")
    package = kiln.Package(options.package)
    sites = {site.function: site for site in package.sites}
    timer = make_timer()
    rows = []
    page = 16
    failed = 0
    print(f"{'case':<28} {'impl':<5} {'us':>9} {'TB/s':>6} {'rel_err':>8} "
          f"{'vs_f32':>8} {'speedup':>7}")
    for hq, hkv in GQA:
        for batch, context in (QUICK_SHAPES if options.quick else SHAPES):
            case = f"h{hq}/{hkv} b{batch} s{context}"
            gen = torch.Generator().manual_seed(batch * 7 + context)
            torch.manual_seed(batch + context)
            kv_lens = [context] * batch
            q = torch.randn(batch, hq, 1, HEAD_DIM, device=device,
                            dtype=torch.bfloat16)
            k = torch.randn(batch, hkv, context, HEAD_DIM, device=device)
            v = torch.randn(batch, hkv, context, HEAD_DIM, device=device)
            # Heads of different magnitudes, as real caches have.
            k *= (2.0 ** (torch.arange(hkv, device=device) % 5)).view(1, hkv, 1, 1)
            kc32, vc32, table = build_pages(k, v, kv_lens, page, gen)
            del k, v
            per_head = hkv > 1
            dims = (0, 1, 3)
            k_scale = (kc32.abs().amax(dim=dims) if per_head
                       else kc32.abs().amax().view(1)) / E4M3_MAX
            v_scale = (vc32.abs().amax(dim=dims) if per_head
                       else vc32.abs().amax().view(1)) / E4M3_MAX
            view = (1, 1, -1, 1) if per_head else (1,)
            kc8 = (kc32 / k_scale.view(view)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
            vc8 = (vc32 / v_scale.view(view)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
            kc16, vc16 = kc32.to(torch.bfloat16), vc32.to(torch.bfloat16)
            lens = torch.tensor(kv_lens, dtype=torch.int32, device=device)
            check_rows = sorted({0, batch - 1})
            truth = reference(q, kc32, vc32, table, kv_lens, check_rows, page)
            del kc32, vc32
            times = {}
            for impl, kc, vc, extra in (
                    ("bf16", kc16, vc16, {}),
                    ("fp8", kc8, vc8, dict(k_scale=k_scale.float(),
                                           v_scale=v_scale.float()))):
                site = sites[f"{impl}_h{hq}_{hkv}"]
                if impl == "fp8":
                    own = reference(q, kc8.double() * k_scale.double().view(view),
                                    vc8.double() * v_scale.double().view(view),
                                    table, kv_lens, check_rows, page)
                else:
                    own = reference(q, kc, vc, table, kv_lens, check_rows, page)
                workspace = make_workspace(site, batch, table.shape[1] * page,
                                           hq, hkv)
                out = torch.full((batch, hq, 1, HEAD_DIM), float("nan"),
                                 device=device, dtype=torch.bfloat16)

                def run(site=site, kc=kc, vc=vc, extra=extra, out=out,
                        workspace=workspace):
                    return site.paged_attention(q, kc, vc, table, lens, out=out,
                                                workspace=workspace,
                                                total_kv_len=sum(kv_lens),
                                                **extra)
                got = run()
                torch.cuda.synchronize()
                err = rel(got, own) if not torch.isnan(got).any() else float("nan")
                ok = err < 2e-2
                failed += not ok
                ms = timer(graph_replay(run))
                nbytes = 2 * sum(kv_lens) * hkv * HEAD_DIM * (1 if impl == "fp8" else 2)
                times[impl] = ms
                row = dict(case=f"decode {case}", impl=f"kiln-{impl}", ms=ms,
                           TBs=nbytes / ms / 1e9, TFLOPs=None, rel_err=err,
                           vs_f32=rel(got, truth), bytes=nbytes, ok=ok)
                rows.append(row)
                speed = f"{times['bf16'] / ms:.2f}x" if impl == "fp8" else ""
                print(f"{case:<28} {impl:<5} {ms * 1e3:9.1f} {row['TBs']:6.2f} "
                      f"{err:8.1e} {row['vs_f32']:8.1e} {speed:>7}", flush=True)
            del kc8, vc8, kc16, vc16
            torch.cuda.empty_cache()
    if options.out:
        Path(options.out).write_text(json.dumps(rows, indent=1))
    print(f"{len(rows) - failed} ok, {failed} not ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
