#!/usr/bin/env python3
"""Checks the ragged paged-attention sites of a Kiln package on the GPU
against a float64 reference.

    python3 test/gpu/check_ragged.py PACKAGE_DIR [--out results.json]
        [--sanitize]

Package: `kilnc test/gpu/ragged_sites.mlir -o PACKAGE_DIR`. For every ragged
site, batches that mix what a serving step holds: whole prompts (no cached
keys), prompt chunks against a cached prefix, decodes of one query, sequences
with no new query, kv_lens that are not multiples of the page size, pages
scattered at random; the output poisoned with NaN (rows no sequence owns
must stay untouched); splits forced to 1, 3 and 16 and chosen at launch; a
plan of fixed capacity (empty items) replayed in a CUDA graph with a new
batch of the same capacity in the same buffers (rows past its last
sequence left as they were); a plan ordered by queries
alone (no kv_lens); bad inputs (decreasing offsets, a too-small plan,
offsets past total_q)
refused with a message. Passes when ||out - ref|| / ||ref|| < 1e-2 on the
owned rows and nothing there is NaN.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import kiln  # noqa: E402
from check_paged import attend  # noqa: E402

TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def make_batch(entry, new, kv_lens, dtype, device, gen):
    """Packed queries, caches with scattered pages, a page table, offsets."""
    page = entry["page_size"]
    hq, hkv = entry["q_heads"], entry["kv_heads"]
    d, dv = entry["head_dim"], entry["v_head_dim"]
    batch = len(new)
    max_pages = max(math.ceil(max(kv_lens) / page), 1) + 1
    num_pages = batch * max_pages + 5
    perm = torch.randperm(num_pages, generator=gen)
    table = perm[:batch * max_pages].reshape(batch, max_pages).to(torch.int32)
    key_cache = torch.randn(num_pages, page, hkv, d, generator=gen).to(dtype)
    value_cache = torch.randn(num_pages, page, hkv, dv, generator=gen).to(dtype)
    offsets = torch.zeros(batch + 1, dtype=torch.int32)
    offsets[1:] = torch.cumsum(torch.tensor(new), 0)
    q = torch.randn(int(offsets[-1]), hq, d, generator=gen).to(dtype)
    return dict(q=q.to(device), key_cache=key_cache.to(device),
                value_cache=value_cache.to(device), table=table.to(device),
                kv_lens=torch.tensor(kv_lens, dtype=torch.int32),
                offsets=offsets)


def reference(entry, batch) -> torch.Tensor:
    q, table = batch["q"], batch["table"]
    key_cache, value_cache = batch["key_cache"], batch["value_cache"]
    page, hkv = key_cache.shape[1], key_cache.shape[2]
    group = q.shape[1] // hkv
    window, softcap = entry.get("window"), entry.get("softcap")
    out = torch.zeros(q.shape[0], q.shape[1], value_cache.shape[3],
                      dtype=torch.float64, device=q.device)
    offsets = batch["offsets"].tolist()
    for b, n in enumerate(batch["kv_lens"].tolist()):
        first, end = offsets[b], offsets[b + 1]
        sq = end - first
        if sq == 0 or n == 0:
            continue
        keys = torch.arange(n, device=q.device)
        pages = table[b, keys // page].long()
        k = key_cache[pages, keys % page].double().permute(1, 0, 2)
        v = value_cache[pages, keys % page].double().permute(1, 0, 2)
        k = k.repeat_interleave(group, 0)
        v = v.repeat_interleave(group, 0)
        rows_q = q[first:end].double().permute(1, 0, 2)  # [Hq, sq, D]
        s = entry["scale"] * rows_q @ k.transpose(-1, -2)
        out[first:end] = attend(s, v, entry["causal"], window,
                                softcap).permute(1, 0, 2)
    return out


def compare(out, ref, offsets) -> Dict[str, Any]:
    owned = torch.zeros(out.shape[0], dtype=torch.bool, device=out.device)
    for b in range(len(offsets) - 1):
        owned[offsets[b]:offsets[b + 1]] = True
    got = out[owned].double()
    want = ref[owned]
    nan = bool(torch.isnan(got).any())
    err = float((got - want).norm() / max(float(want.norm()), 1e-30))
    return {"rel_err": err, "nan": nan, "ok": (not nan) and err < 1e-2}


BATCHES = [
    # (new queries per sequence, kv_lens): a prompt chunk beside decodes.
    ("chunk+decodes", [300, 1, 1, 1, 1, 1, 1, 1],
     [812, 17, 1, 4095, 255, 1000, 64, 2]),
    ("prompts", [1, 77, 0, 129, 5], [1, 77, 40, 129, 5]),
    ("decodes", [1] * 37, [int(1 + (i * 997) % 3000) for i in range(37)]),
    ("chunks", [64, 65, 200, 3], [1000, 65, 700, 3]),
]
SANITIZE_BATCHES = [
    ("chunk+decodes", [40, 1, 1, 0], [90, 17, 1, 5]),
    ("prompts", [1, 13, 0, 20], [1, 13, 4, 25]),
]


def check_site(package, site, entry, device, gen, sanitize):
    dtype = TORCH_DTYPES[site.dtype]
    results = []
    for name, new, kv_lens in (SANITIZE_BATCHES if sanitize else BATCHES):
        batch = make_batch(entry, new, kv_lens, dtype, device, gen)
        ref = reference(entry, batch)
        offsets_dev = batch["offsets"].to(device)
        lens_dev = batch["kv_lens"].to(device)
        plan = site.plan(batch["offsets"], batch["kv_lens"], device=device)
        variants = [("auto", 0, plan), ("nosplit", 1, plan),
                    ("split3", 3, plan)]
        if not sanitize:
            variants.append(("split16", 16, plan))
            variants.append(("by-queries", 0,
                             site.plan(batch["offsets"], device=device)))
            variants.append(("capacity", 0, site.plan(
                batch["offsets"], batch["kv_lens"], device=device,
                capacity=int(plan.shape[0]) + 9)))
        for variant, splits, this_plan in variants:
            out = torch.full((batch["q"].shape[0], batch["q"].shape[1],
                              entry["v_head_dim"]), float("nan"),
                             dtype=dtype, device=device)
            site.paged_attention(
                batch["q"], batch["key_cache"], batch["value_cache"],
                batch["table"], lens_dev, out=out, num_splits=splits,
                q_offsets=offsets_dev, plan=this_plan, check=True)
            torch.cuda.synchronize()
            result = compare(out, ref, batch["offsets"].tolist())
            result.update(site=site.name, batch=name, variant=variant)
            results.append(result)
    if not sanitize:
        results.append(check_graph(site, entry, device, gen, dtype))
        results.append(check_bad_input(site, entry, device, gen, dtype))
    return results


def check_graph(site, entry, device, gen, dtype) -> Dict[str, Any]:
    """A plan of fixed capacity and every buffer captured once, replayed with
    a second batch of other lengths written into the same buffers."""
    first = make_batch(entry, [50, 1, 1, 7], [300, 20, 1000, 7], dtype,
                       device, gen)
    second = make_batch(entry, [1, 33, 1, 20], [999, 40, 2, 25], dtype,
                        device, gen)
    capacity = site.plan_capacity(4, 80)
    total = 80
    hq, dv = entry["q_heads"], entry["v_head_dim"]
    q = torch.zeros(total, hq, entry["head_dim"], dtype=dtype, device=device)
    out = torch.zeros(total, hq, dv, dtype=dtype, device=device)
    plan = torch.zeros(capacity, 2, dtype=torch.int32, device=device)
    offsets = torch.zeros(5, dtype=torch.int32, device=device)
    lens = torch.zeros(4, dtype=torch.int32, device=device)
    # The caches and tables of the two batches have their own sizes: the
    # graph takes the larger of each.
    key_cache = torch.cat([first["key_cache"], second["key_cache"]])
    value_cache = torch.cat([first["value_cache"], second["value_cache"]])
    pages_first = first["key_cache"].shape[0]
    width = max(first["table"].shape[1], second["table"].shape[1])
    table = torch.zeros(4, width, dtype=torch.int32, device=device)

    def load(batch, shift):
        n = batch["q"].shape[0]
        q.zero_()
        q[:n] = batch["q"]
        table.zero_()
        table[:, :batch["table"].shape[1]] = batch["table"] + shift
        offsets.copy_(batch["offsets"])
        lens.copy_(batch["kv_lens"])
        site.plan(batch["offsets"], batch["kv_lens"], out=plan)

    load(first, 0)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        site.paged_attention(q, key_cache, value_cache, table, lens, out=out,
                             q_offsets=offsets, plan=plan)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        site.paged_attention(q, key_cache, value_cache, table, lens, out=out,
                             q_offsets=offsets, plan=plan)
    results = []
    for batch, shift in ((first, 0), (second, pages_first)):
        load(batch, shift)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        shifted = dict(batch)
        shifted["key_cache"], shifted["value_cache"] = key_cache, value_cache
        shifted["table"] = table
        ref = reference(entry, shifted)
        n = batch["q"].shape[0]
        result = compare(out[:n], ref[:n], batch["offsets"].tolist())
        # Rows past the last sequence stay as they were (split or not).
        result["ok"] = result["ok"] and bool(torch.isnan(out[n:]).all())
        results.append(result)
    ok = all(r["ok"] for r in results)
    return {"site": site.name, "batch": "graph", "variant": "replay",
            "ok": ok, "rel_err": max(r["rel_err"] for r in results),
            "nan": any(r["nan"] for r in results)}


def check_bad_input(site, entry, device, gen, dtype) -> Dict[str, Any]:
    """Decreasing offsets, a plan too small and offsets past total_q are
    refused on the host."""
    messages = []
    for offsets, capacity, total_q in (([0, 5, 3], None, None),
                                       ([0, 60, 61], 1, None),
                                       ([0, 5, 9], None, 8)):
        try:
            site.plan(offsets, [10, 10], capacity=capacity, device=device,
                      total_q=total_q)
            messages.append(None)
        except kiln.KilnError as error:
            messages.append(str(error))
    ok = all(m is not None for m in messages)
    return {"site": site.name, "batch": "bad-input", "variant": "host",
            "ok": ok, "messages": messages, "rel_err": 0.0, "nan": False}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("--out")
    parser.add_argument("--sanitize", action="store_true",
                        help="small batches only (for compute-sanitizer)")
    options = parser.parse_args()
    device = torch.device("cuda")
    gen = torch.Generator().manual_seed(29)
    package = kiln.Package(options.package)
    manifest = json.loads((Path(options.package) / "manifest.json").read_text())
    entries = {e["name"]: e for e in manifest["sites"]}
    results: List[Dict[str, Any]] = []
    for site in package.sites:
        if not site.ragged:
            continue
        results += check_site(package, site, entries[site.name], device, gen,
                              options.sanitize)
    failed = [r for r in results if not r["ok"]]
    for r in results:
        print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['site']} {r['batch']} "
              f"{r['variant']}: rel err {r['rel_err']:.2e}"
              + (" NaN" if r["nan"] else ""))
    print(f"{len(results) - len(failed)} of {len(results)} ragged checks passed")
    if options.out:
        Path(options.out).write_text(json.dumps(results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
