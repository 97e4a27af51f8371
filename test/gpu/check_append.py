#!/usr/bin/env python3
"""Checks the paged cache append kernels of a Kiln package on the GPU.

    python3 test/gpu/check_append.py PACKAGE_DIR [--out results.json]
        [--sanitize]

Package: `kilnc test/gpu/ragged_sites.mlir -o PACKAGE_DIR` (every paged
site's kernel names its caches' append kernel). For every paged site:
batches of a prompt chunk beside decodes and an empty sequence, pages
scattered at random, caches filled with random values first; the caches
after Site.append_paged_kv must equal, bit for bit, the caches written by
indexing in PyTorch (every slot the append must not touch unchanged).
Then arguments that name no place in the caches (kv_lens below a
sequence's new tokens, page-table entries outside the pool, offsets past
total_new): nothing outside the valid places is written. A CUDA graph
that captured one append replays a second batch written into the same
buffers. Then the append followed by the ragged attention launch against
float64 attention over the appended cache. With --sanitize, small batches
only (for compute-sanitizer). Prints the append's time for a serving step
(one chunk of 2048 and 127 decodes) beside its bytes.
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
from check_ragged import TORCH_DTYPES, compare, reference  # noqa: E402


def make_step(entry, new, kv_lens, dtype, device, gen):
    page = entry["page_size"]
    hkv = entry["kv_heads"]
    d, dv = entry["head_dim"], entry["v_head_dim"]
    batch = len(new)
    max_pages = max(math.ceil(max(kv_lens + [1]) / page), 1) + 1
    num_pages = batch * max_pages + 3
    perm = torch.randperm(num_pages, generator=gen)
    table = perm[:batch * max_pages].reshape(batch, max_pages).to(torch.int32)
    offsets = torch.zeros(batch + 1, dtype=torch.int32)
    offsets[1:] = torch.cumsum(torch.tensor(new), 0)
    total = int(offsets[-1])
    return dict(
        key=torch.randn(total, hkv, d, generator=gen).to(dtype).to(device),
        value=torch.randn(total, hkv, dv, generator=gen).to(dtype).to(device),
        key_cache=torch.randn(num_pages, page, hkv, d,
                              generator=gen).to(dtype).to(device),
        value_cache=torch.randn(num_pages, page, hkv, dv,
                                generator=gen).to(dtype).to(device),
        table=table.to(device), kv_lens=torch.tensor(kv_lens,
                                                     dtype=torch.int32),
        offsets=offsets)


def expected(step):
    """The caches after the append, written by indexing."""
    key_cache = step["key_cache"].clone()
    value_cache = step["value_cache"].clone()
    page = key_cache.shape[1]
    num_pages, max_pages = key_cache.shape[0], step["table"].shape[1]
    offsets = step["offsets"].tolist()
    total = step["key"].shape[0]
    for b, n_keys in enumerate(step["kv_lens"].tolist()):
        first, end = offsets[b], offsets[b + 1]
        for t in range(first, min(end, total)):
            position = n_keys - (end - first) + (t - first)
            entry = position // page
            if position < 0 or entry >= max_pages:
                continue
            p = int(step["table"][b, entry])
            if not 0 <= p < num_pages:
                continue
            key_cache[p, position % page] = step["key"][t]
            value_cache[p, position % page] = step["value"][t]
    return key_cache, value_cache


def run_append(site, step, device, offsets=None):
    site.append_paged_kv(
        step["key"], step["value"], step["key_cache"], step["value_cache"],
        step["table"], step["kv_lens"].to(device),
        (step["offsets"] if offsets is None else offsets).to(device))


def same(step, want) -> Dict[str, Any]:
    torch.cuda.synchronize()
    k_ok = torch.equal(step["key_cache"].view(torch.int16),
                       want[0].view(torch.int16))
    v_ok = torch.equal(step["value_cache"].view(torch.int16),
                       want[1].view(torch.int16))
    return {"ok": bool(k_ok and v_ok)}


BATCHES = [
    ("chunk+decodes", [300, 1, 1, 0, 1], [812, 17, 1, 40, 4095]),
    ("prompts", [77, 5, 129], [77, 5, 129]),
    ("decodes", [1] * 37, [int(1 + (i * 997) % 3000) for i in range(37)]),
]
SANITIZE_BATCHES = [("chunk+decodes", [40, 1, 0, 1], [90, 17, 5, 1])]


def check_site(site, entry, device, gen, sanitize) -> List[Dict[str, Any]]:
    dtype = TORCH_DTYPES[site.dtype]
    results = []
    for name, new, kv_lens in (SANITIZE_BATCHES if sanitize else BATCHES):
        step = make_step(entry, new, kv_lens, dtype, device, gen)
        want = expected(step)
        run_append(site, step, device)
        result = same(step, want)
        result.update(site=site.name, batch=name, variant="append")
        results.append(result)

        # Places outside the caches: kv_lens short of the new tokens, table
        # entries outside the pool, offsets past total_new.
        bad = make_step(entry, new, kv_lens, dtype, device, gen)
        bad["kv_lens"] = torch.tensor([max(n - 3, 0) if i % 2 else n
                                       for i, n in enumerate(kv_lens)],
                                      dtype=torch.int32)
        bad["table"][0, 0] = -7
        bad["table"][-1, -1] = bad["key_cache"].shape[0] + 5
        offsets = bad["offsets"].clone()
        offsets[-1] += 9
        bad["offsets"] = offsets
        want = expected(bad)
        run_append(site, bad, device)
        result = same(bad, want)
        result.update(site=site.name, batch=name, variant="bad-places")
        results.append(result)
    if not sanitize:
        results.append(check_graph(site, entry, device, gen, dtype))
        if site.ragged:
            results.append(check_attention(site, entry, device, gen, dtype))
    return results


def check_graph(site, entry, device, gen, dtype) -> Dict[str, Any]:
    first = make_step(entry, [30, 1, 1], [60, 9, 200], dtype, device, gen)
    second = make_step(entry, [1, 20, 10], [300, 20, 41], dtype, device, gen)
    # One set of buffers, the larger shape of each.
    keys = torch.zeros(32, *first["key"].shape[1:], dtype=dtype,
                       device=device)
    values = torch.zeros(32, *first["value"].shape[1:], dtype=dtype,
                         device=device)
    pool = max(first["key_cache"].shape[0], second["key_cache"].shape[0])
    key_cache = torch.zeros(pool, *first["key_cache"].shape[1:], dtype=dtype,
                            device=device)
    value_cache = torch.zeros(pool, *first["value_cache"].shape[1:],
                              dtype=dtype, device=device)
    width = max(first["table"].shape[1], second["table"].shape[1])
    table = torch.zeros(3, width, dtype=torch.int32, device=device)
    lens = torch.zeros(3, dtype=torch.int32, device=device)
    offsets = torch.zeros(4, dtype=torch.int32, device=device)

    def load(step):
        n = step["key"].shape[0]
        keys.zero_()
        values.zero_()
        keys[:n] = step["key"]
        values[:n] = step["value"]
        key_cache[:step["key_cache"].shape[0]] = step["key_cache"]
        value_cache[:step["value_cache"].shape[0]] = step["value_cache"]
        table.fill_(pool + 1)  # entries no token may use: outside the pool
        table[:, :step["table"].shape[1]] = step["table"]
        lens.copy_(step["kv_lens"])
        offsets.copy_(step["offsets"])

    def append():
        site.append_paged_kv(keys, values, key_cache, value_cache,
                             table, lens, offsets)

    load(first)
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        append()
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        append()
    ok = True
    for step in (first, second):
        load(step)
        view = dict(step, key=keys, value=values,
                    key_cache=key_cache.clone(),
                    value_cache=value_cache.clone(), table=table)
        want = expected(view)
        graph.replay()
        torch.cuda.synchronize()
        ok &= torch.equal(key_cache.view(torch.int16),
                          want[0].view(torch.int16))
        ok &= torch.equal(value_cache.view(torch.int16),
                          want[1].view(torch.int16))
    return {"site": site.name, "batch": "graph", "variant": "replay",
            "ok": bool(ok)}


def check_attention(site, entry, device, gen, dtype) -> Dict[str, Any]:
    """Append a step's keys and values, then attend to them in one ragged
    launch: the output against float64 attention over the appended
    cache (what a serving step runs, layer by layer)."""
    new, kv_lens = [64, 1, 1, 7], [500, 33, 1, 7]
    step = make_step(entry, new, kv_lens, dtype, device, gen)
    q = torch.randn(sum(new), entry["q_heads"], entry["head_dim"],
                    generator=gen).to(dtype).to(device)
    offsets = step["offsets"].to(device)
    lens = step["kv_lens"].to(device)
    run_append(site, step, device)
    plan = site.plan(step["offsets"], step["kv_lens"], device=device)
    out = torch.full((q.shape[0], q.shape[1], entry["v_head_dim"]),
                     float("nan"), dtype=dtype, device=device)
    site.paged_attention(q, step["key_cache"], step["value_cache"],
                         step["table"], lens, out=out, q_offsets=offsets,
                         plan=plan)
    torch.cuda.synchronize()
    batch = dict(q=q, key_cache=step["key_cache"],
                 value_cache=step["value_cache"], table=step["table"],
                 kv_lens=step["kv_lens"], offsets=step["offsets"])
    result = compare(out, reference(entry, batch), step["offsets"].tolist())
    result.update(site=site.name, batch="append+attention", variant="ragged")
    return result


def time_append(site, entry, device, gen) -> Dict[str, Any]:
    from triton.testing import do_bench

    new = [2048] + [1] * 127
    kv_lens = [4096] + [int(512 + (i * 7919) % 15872) for i in range(127)]
    step = make_step(entry, new, kv_lens, TORCH_DTYPES[site.dtype], device,
                     gen)
    offsets = step["offsets"].to(device)
    lens = step["kv_lens"].to(device)

    def run():
        site.append_paged_kv(step["key"], step["value"], step["key_cache"],
                             step["value_cache"], step["table"], lens,
                             offsets)
    ms = do_bench(run, warmup=25, rep=200)
    moved = 2 * (step["key"].numel() + step["value"].numel()) * \
        step["key"].element_size()
    return {"site": site.name, "tokens": sum(new), "ms": ms,
            "GBs": moved / ms / 1e6}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("--out")
    parser.add_argument("--sanitize", action="store_true",
                        help="small batches only (for compute-sanitizer)")
    options = parser.parse_args()
    device = torch.device("cuda")
    gen = torch.Generator().manual_seed(31)
    package = kiln.Package(options.package)
    manifest = json.loads((Path(options.package) / "manifest.json").read_text())
    entries = {e["name"]: e for e in manifest["sites"]}
    results: List[Dict[str, Any]] = []
    timings = []
    for site in package.sites:
        if not site.paged:
            continue
        entry = dict(entries[site.name])
        entry.setdefault("kv_heads", site.kv_heads)
        results += check_site(site, entry, device, gen, options.sanitize)
        if not options.sanitize and site.function.startswith("uniform"):
            timings.append(time_append(site, entry, device, gen))
    failed = [r for r in results if not r["ok"]]
    for r in results:
        print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['site']} {r['batch']} "
              f"{r['variant']}" + (f": rel err {r['rel_err']:.2e}"
                                   if "rel_err" in r else ""))
    for t in timings:
        print(f"append {t['site']}: {t['tokens']} tokens {t['ms'] * 1e3:.1f} "
              f"us, {t['GBs']:.0f} GB/s read + written")
    print(f"{len(results) - len(failed)} of {len(results)} append checks "
          "passed")
    if options.out:
        Path(options.out).write_text(json.dumps(
            {"checks": results, "timings": timings}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
