#!/usr/bin/env python3
"""Checks every paged-attention site of a Kiln package on the GPU against a
float64 reference, and times decode against PyTorch.

    python3 test/gpu/check_paged.py PACKAGE_DIR [--out results.json] [--sanitize]
        [--bench]

Package: `kilnc test/gpu/paged_sites.mlir -o PACKAGE_DIR`. For each site:
batches of sequences with kv_lens drawn from {0, 1, page_size - 1, page_size + 1,
odd lengths up to 4096} (0 and non-multiples of the page size included), pages
scattered at random in the cache, some pages shared between sequences; q_len 1
and 3 (decode) and 17 and 200 (chunked prefill against the cached prefix, causal
bottom-right aligned); fresh random inputs, the output poisoned with NaN; a
launch captured in a CUDA graph and replayed with new kv_lens and page tables
in the same buffers; a launch whose every input (Q, both caches, kv_lens, the
page table) is written by the kernels right before it on its stream, with no
synchronisation between (on sm_90a the attention kernel may start while the
kernel before it drains, and must wait for it before reading). Passes when ||out - ref|| / ||ref|| < 1e-2 and nothing is
NaN (rows that see no key are zeros in both).

--bench: decode, GQA 32/8, d128, bf16: Kiln paged (pages of 16 and 64) against
SDPA on a contiguous cache and gather-then-SDPA, TB/s of K and V read.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402

import kiln  # noqa: E402

TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def make_cache(site, batch, kv_lens, page, max_pages, hkv, d, dv, dtype, device,
               gen):
    """Caches with pages scattered at random; sequence 1 (when there are two
    or more) shares its first page with sequence 0."""
    needed = [max(1, math.ceil(n / page)) for n in kv_lens]
    num_pages = sum(needed) + 7
    perm = torch.randperm(num_pages, generator=gen).tolist()
    table = torch.zeros(batch, max_pages, dtype=torch.int32)
    cursor = 0
    for b, count in enumerate(needed):
        for e in range(max_pages):
            table[b, e] = perm[(cursor + e) % num_pages]
        cursor += count
    if batch > 1:
        table[1, 0] = table[0, 0]
    key_cache = torch.randn(num_pages, page, hkv, d, generator=gen).to(dtype)
    value_cache = torch.randn(num_pages, page, hkv, dv, generator=gen).to(dtype)
    return (key_cache.to(device), value_cache.to(device), table.to(device),
            num_pages)


def reference(site, q, key_cache, value_cache, table, kv_lens, window, softcap):
    batch, hq, sq, d = q.shape
    page, hkv = key_cache.shape[1], key_cache.shape[2]
    group = hq // hkv
    out = torch.zeros(batch, hq, sq, value_cache.shape[3], dtype=torch.float64,
                      device=q.device)
    for b in range(batch):
        n = int(kv_lens[b])
        if n == 0:
            continue
        keys = torch.arange(n, device=q.device)
        pages = table[b, keys // page].long()
        k = key_cache[pages, keys % page].double().permute(1, 0, 2)  # [Hkv, n, D]
        v = value_cache[pages, keys % page].double().permute(1, 0, 2)
        k = k.repeat_interleave(group, 0)
        v = v.repeat_interleave(group, 0)
        s = site.scale * q[b].double() @ k.transpose(-1, -2)  # [Hq, sq, n]
        out[b] = attend(s, v, site.causal, window, softcap)
    return out


def attend(s, v, causal, window, softcap):
    """softmax(scores) · v in float64 for one sequence: s [Hq, sq, n] of
    unscaled-by-softcap scores (the scale applied), its new queries the
    last sq of its n keys (bottom-right causal, a window of `window`); rows
    that see no key give 0."""
    sq, n = s.shape[-2], s.shape[-1]
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    rows = torch.arange(sq, device=s.device)[:, None]
    cols = torch.arange(n, device=s.device)[None, :]
    hidden = torch.zeros(sq, n, dtype=torch.bool, device=s.device)
    if causal:
        hidden |= cols > rows + (n - sq)
        if window:
            hidden |= cols <= rows + (n - sq) - window
    s = s.masked_fill(hidden, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    total = p.sum(-1, keepdim=True)
    return (p / torch.where(total == 0, torch.ones_like(total), total)) @ v


def manifest_sites(package_dir: str) -> Dict[str, Dict[str, Any]]:
    manifest = json.loads((Path(package_dir) / "manifest.json").read_text())
    return {entry["name"]: entry for entry in manifest["sites"]}


def check_site(site, entry, device, gen, sanitize) -> List[Dict[str, Any]]:
    dtype = TORCH_DTYPES[site.dtype]
    page = entry["page_size"]
    hq, hkv = entry["q_heads"], entry["kv_heads"]
    d, dv = entry["head_dim"], entry["v_head_dim"]
    window, softcap = entry.get("window"), entry.get("softcap")
    lens_pool = [0, 1, max(page - 1, 1), page + 1, 17, 257, 1000, 4095]
    if sanitize:
        lens_pool = [0, 1, page + 1, 17, 130]
    results = []
    # q_len 3: decode blocks of more than 8 (query, head) rows at GQA 4.
    for q_len in ([1, 3, 17] if sanitize else [1, 3, 17, 200]):
        kv_lens = torch.tensor(
            [lens_pool[i % len(lens_pool)] for i in range(len(lens_pool))],
            dtype=torch.int32)
        batch = len(kv_lens)
        max_pages = max(1, math.ceil(int(kv_lens.max()) / page)) + 1
        key_cache, value_cache, table, num_pages = make_cache(
            site, batch, kv_lens.tolist(), page, max_pages, hkv, d, dv, dtype,
            device, gen)
        q = torch.randn(batch, hq, q_len, d, generator=gen).to(dtype).to(device)
        lens = kv_lens.to(device)
        for variant in ("eager", "nosplit", "split3", "split16", "split40",
                        "split128", "graph", "produced"):
            splits = {"nosplit": 1, "split3": 3, "split16": 16, "split40": 40,
                      "split128": 128}.get(variant, 0)
            out = torch.full((batch, hq, q_len, dv), float("nan"), dtype=dtype,
                             device=device)
            result = dict(site=site.function, dtype=site.dtype, page=page,
                          q_len=q_len, batch=batch, d=d, dv=dv,
                          variant=variant, kv_lens=kv_lens.tolist())
            try:
                if variant == "graph":
                    site.package.prepare()
                    static_lens = torch.zeros_like(lens)
                    static_table = torch.zeros_like(table)
                    # A workspace the caller allocates once, sized for the
                    # largest launch; the split count is chosen at launch.
                    workspace = torch.empty(
                        site.workspace_size(batch, q_len, max_pages * page,
                                            q_heads=hq, kv_heads=hkv),
                        dtype=torch.uint8, device=device)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        site.paged_attention(q, key_cache, value_cache,
                                             static_table, static_lens, out=out,
                                             workspace=workspace)
                    # New lengths and page table, same buffers: replay.
                    static_lens.copy_(lens)
                    static_table.copy_(table)
                    out.fill_(float("nan"))
                    graph.replay()
                elif variant == "produced":
                    # Inputs in zeroed buffers, each written by a copy right
                    # before the launch, behind a long kernel: none is
                    # complete before the launch is queued.
                    given = [q, key_cache, value_cache, table, lens]
                    buffers = [torch.zeros_like(t) for t in given]
                    busy = torch.empty(1 << 26, dtype=torch.float32,
                                       device=device)
                    torch.cuda.synchronize()
                    busy.uniform_()
                    for buffer, source in zip(buffers, given):
                        buffer.copy_(source)
                    site.paged_attention(*buffers, out=out)
                else:
                    site.paged_attention(q, key_cache, value_cache, table, lens,
                                         out=out, num_splits=splits)
                torch.cuda.synchronize()
            except Exception as error:
                result.update(ok=False, error=f"{type(error).__name__}: {error}")
                results.append(result)
                print(result, flush=True)
                continue
            ref = reference(site, q, key_cache, value_cache, table, kv_lens,
                            window, softcap)
            got = out.double()
            nan = int(torch.isnan(got).sum())
            norm = float(ref.norm())
            err = float((got - ref).nan_to_num(nan=float("inf")).norm())
            rel = err / norm if norm > 0 else err
            result.update(ok=nan == 0 and rel <= 1e-2, rel_err=rel, nan=nan)
            results.append(result)
            print({k: v for k, v in result.items() if k != "kv_lens"},
                  flush=True)
    return results


def bench(package, entries, device) -> List[Dict[str, Any]]:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    rows = []
    hq, hkv, d = 32, 8, 128
    sites = {s.function: s for s in package.sites}
    for batch, ctx in [(8, 16384), (64, 4096), (1, 32768), (128, 2048)]:
        torch.manual_seed(0)
        q = torch.randn(batch, hq, 1, d, dtype=torch.bfloat16, device=device)
        k = torch.randn(batch, hkv, ctx, d, dtype=torch.bfloat16, device=device)
        v = torch.randn_like(k)
        nbytes = 2 * batch * hkv * ctx * d * 2
        lens = torch.full((batch,), ctx, dtype=torch.int32, device=device)

        def record(impl, fn, **extra):
            ms = float(do_bench(fn, warmup=25, rep=100, return_mode="median"))
            row = dict(b=batch, hq=hq, hkv=hkv, d=d, kv_len=ctx, bytes=nbytes,
                       impl=impl, ms=ms, TBs=nbytes / ms / 1e9, **extra)
            rows.append(row)
            print(row, flush=True)

        k_full = k.repeat_interleave(hq // hkv, 1)
        v_full = v.repeat_interleave(hq // hkv, 1)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            record("sdpa-flash", lambda: F.scaled_dot_product_attention(
                q, k, v, enable_gqa=True))
        for page, name in [(16, "bf16_d128_p16_causal"),
                           (64, "bf16_d128_p64_causal")]:
            pages_per_seq = ctx // page
            num_pages = batch * pages_per_seq
            perm = torch.randperm(num_pages, device=device).to(torch.int32)
            table = perm.view(batch, pages_per_seq)
            # Scatter the contiguous K/V into the pages the table names.
            kc = torch.empty(num_pages, page, hkv, d, dtype=torch.bfloat16,
                             device=device)
            vc = torch.empty_like(kc)
            kc[table.long().flatten()] = k.permute(0, 2, 1, 3).reshape(
                batch * pages_per_seq, page, hkv, d)
            vc[table.long().flatten()] = v.permute(0, 2, 1, 3).reshape(
                batch * pages_per_seq, page, hkv, d)
            out = torch.empty(batch, hq, 1, d, dtype=torch.bfloat16,
                              device=device)
            site = sites[name]
            got = site.paged_attention(q, kc, vc, table, lens, out=out)
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                ref = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            rel = float((got.double() - ref.double()).norm() / ref.double().norm())
            record("kiln-paged", lambda: site.paged_attention(
                q, kc, vc, table, lens, out=out), page=page, rel_err=rel)

            def gather_sdpa():
                kk = kc[table.long()].reshape(batch, ctx, hkv, d).transpose(1, 2)
                vv = vc[table.long()].reshape(batch, ctx, hkv, d).transpose(1, 2)
                return F.scaled_dot_product_attention(q, kk, vv, enable_gqa=True)
            if page == 16:
                record("gather+sdpa", gather_sdpa, page=page)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("package")
    parser.add_argument("--out")
    parser.add_argument("--sanitize", action="store_true")
    parser.add_argument("--bench", action="store_true")
    options = parser.parse_args()
    device = torch.device("cuda")
    package = kiln.Package(options.package)
    entries = manifest_sites(options.package)
    gen = torch.Generator().manual_seed(1)
    results: List[Dict[str, Any]] = []
    start = time.time()
    for site in package.sites:
        if site.paged:
            results += check_site(site, entries[site.name], device, gen,
                                  options.sanitize)
    failures = [r for r in results if not r.get("ok")]
    print(f"\n{len(results) - len(failures)} passed, {len(failures)} failed "
          f"({time.time() - start:.1f} s)", flush=True)
    rows = bench(package, entries, device) if options.bench else []
    if options.out:
        Path(options.out).write_text(json.dumps(
            {"results": results, "bench": rows}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
