#!/usr/bin/env python3
"""Decode with every forced split count beside the launch's own choice, for
the split model's shapes: bf16, d128, one query per sequence, Kiln paged
(pages of 16) and contiguous, graph-timed like bench_decode.py (a CUDA graph
of one call, do_bench with its L2 clear).

    kilnc bench/decode_sites.mlir -o PACKAGE_DIR
    python3 bench/sweep_splits.py PACKAGE_DIR [--out sweep.json]

Rows: hq, hkv, b, kv_len, impl (paged16 or kiln), splits (0 = chosen at
launch), us, TBs (bytes of K and V read over the time). Outputs are not
checked here: bench_decode.py and test/gpu/check_paged.py check every split
count's results.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE))

import kiln  # noqa: E402
import bench_decode as decode  # noqa: E402
from bench_attention import make_timer  # noqa: E402

SHAPES = ((8, 1, 1, 32768), (8, 1, 16, 16384), (8, 1, 64, 4096),
          (8, 1, 128, 2048), (8, 1, 8, 1024), (32, 8, 1, 32768),
          (32, 8, 8, 1024), (32, 8, 16, 16384))
SPLITS = (0, 1, 2, 4, 8, 16, 32, 64, 128)
HEAD_DIM = 128


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("package")
    parser.add_argument("--out", default="sweep.json")
    options = parser.parse_args()
    package = kiln.Package(options.package)
    sites = {site.function: site for site in package.sites}
    timer = make_timer()
    device = torch.device("cuda")
    rows = []
    for hq, hkv, batch, keys in SHAPES:
        gen = torch.Generator().manual_seed(7)
        q = torch.randn(batch, hq, 1, HEAD_DIM, device=device,
                        dtype=torch.bfloat16)
        k = torch.randn(batch, hkv, keys, HEAD_DIM, device=device,
                        dtype=torch.bfloat16)
        v = torch.randn_like(k)
        lens = torch.full((batch,), keys, dtype=torch.int32, device=device)
        key_cache, value_cache, table = decode.build_pages(
            k, v, [keys] * batch, 16, gen)
        nbytes = 2 * batch * keys * hkv * HEAD_DIM * 2
        paged = decode.find_site(sites, f"paged_h{hq}_{hkv}_p16")
        contiguous = decode.find_site(sites, "contiguous")
        line = []
        for splits in SPLITS:
            if splits > -(-keys // 64):
                continue
            for name, site in (("paged16", paged), ("kiln", contiguous)):
                out = torch.empty(batch, hq, 1, HEAD_DIM, device=device,
                                  dtype=torch.bfloat16)
                # The chosen count's workspace, and room for a forced one's
                # partial results and statistics.
                nws = site.workspace_size(batch, 1, keys, q_heads=hq,
                                          kv_heads=hkv)
                nws += max(splits, 1) * batch * hq * (HEAD_DIM + 2) * 4 + 16
                workspace = torch.zeros(nws, dtype=torch.uint8, device=device)
                if name == "paged16":
                    def run(site=site, out=out, workspace=workspace,
                            splits=splits):
                        return site.paged_attention(
                            q, key_cache, value_cache, table, lens, out=out,
                            workspace=workspace, num_splits=splits)
                else:
                    def run(site=site, out=out, workspace=workspace,
                            splits=splits):
                        return site.attention(q, k, v, out=out,
                                              workspace=workspace,
                                              num_splits=splits)
                us = timer(decode.graph_replay(run)) * 1000.0
                tbs = nbytes / us / 1e6
                rows.append(dict(hq=hq, hkv=hkv, b=batch, kv_len=keys,
                                 impl=name, splits=splits, us=us, TBs=tbs))
                line.append(f"{name[0]}{splits}={tbs:.2f}")
        print(f"{hq}/{hkv} b{batch} s{keys}:", " ".join(line), flush=True)
    Path(options.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
