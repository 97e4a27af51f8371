#!/usr/bin/env python3
"""The paged kernel on two cache layouts holding the same keys and values:
[num_pages, page_size, Hkv, D] (kiln.paged_attention's) and
[num_pages, Hkv, page_size, D], passed as its permuted view (the kernel reads
caches through their page, slot and head strides). Checks that the outputs
are identical, then times both (median of triton.testing.do_bench); TB/s =
bytes of K and V over the time. bf16, head dim 128, one query a sequence.

    kilnc bench/decode_sites.mlir -o PKG --target=sm_90a
    python3 bench/bench_paged_layout.py PKG [--out layout.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import kiln  # noqa: E402

SHAPES = [(1, 32768), (16, 16384), (64, 4096), (256, 1024), (8, 1024)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("package", help="kilnc bench/decode_sites.mlir -o PKG")
    parser.add_argument("--out", default="layout.json")
    options = parser.parse_args()
    from triton.testing import do_bench

    sites = {s.function: s for s in kiln.Package(options.package).sites}
    rows = []
    for hq, hkv in ((32, 8), (8, 1)):
        for batch, context in SHAPES:
            for page in (16, 64):
                site = sites[f"paged_h{hq}_{hkv}_p{page}"]
                torch.manual_seed(0)
                pages = batch * context // page
                q = torch.randn(batch, hq, 1, 128, dtype=torch.bfloat16,
                                device="cuda")
                table = torch.randperm(pages, device="cuda").to(
                    torch.int32).view(batch, context // page)
                lens = torch.full((batch,), context, dtype=torch.int32,
                                  device="cuda")
                kc = torch.randn(pages, page, hkv, 128, dtype=torch.bfloat16,
                                 device="cuda")
                vc = torch.randn_like(kc)
                # The same caches stored head-major, seen in the op's order.
                k_view = kc.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
                v_view = vc.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
                out = torch.empty(batch, hq, 1, 128, dtype=torch.bfloat16,
                                  device="cuda")
                out_view = torch.full_like(out, float("nan"))
                site.paged_attention(q, kc, vc, table, lens, out=out)
                site.paged_attention(q, k_view, v_view, table, lens,
                                     out=out_view)
                nbytes = 2 * batch * context * hkv * 128 * 2
                slot_major = do_bench(
                    lambda: site.paged_attention(q, kc, vc, table, lens, out=out),
                    warmup=25, rep=100, return_mode="median")
                head_major = do_bench(
                    lambda: site.paged_attention(q, k_view, v_view, table, lens,
                                                 out=out_view),
                    warmup=25, rep=100, return_mode="median")
                row = dict(hq=hq, hkv=hkv, b=batch, kv_len=context, page=page,
                           bytes=nbytes,
                           TBs_page_slot_head=nbytes / slot_major / 1e9,
                           TBs_page_head_slot=nbytes / head_major / 1e9,
                           identical=bool(torch.equal(out, out_view)))
                rows.append(row)
                print(f"{hq}/{hkv} b{batch} kv{context} p{page}: "
                      f"[P,Hkv,D] {row['TBs_page_slot_head']:.2f}  "
                      f"[Hkv,P,D] {row['TBs_page_head_slot']:.2f} TB/s  "
                      f"identical={row['identical']}", flush=True)
    Path(options.out).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
