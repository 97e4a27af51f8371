#!/usr/bin/env python3
"""Checks the FP8 (e4m3) paged sites of a Kiln package on the GPU.

    python3 test/gpu/check_fp8.py PACKAGE_DIR [--out results.json]
        [--sanitize]

Package: `kilnc test/gpu/fp8_sites.mlir -o PACKAGE_DIR`. For every FP8 site:

- attention: keys and values drawn in float32 with scales of their own per
  KV head (factors up to 2^6 apart) or per tensor, quantised to e4m3 by
  torch (`(x / scale).clamp(±448).to(float8_e4m3fn)`), pages scattered at
  random, kv_lens off the page size; decodes (one query), chunked prefill
  (queries that end at their sequence's last key) and, for ragged sites, a
  prompt chunk beside decodes; splits forced to 1 and 3 and chosen at
  launch; the output poisoned with NaN. The reference is float64 attention
  over the dequantised cache (f64(e4m3) · scale): the kernel must match it
  as a bf16/f16 kernel matches its own cache (relative error < 1e-2).
  Beside it, the error of the dequantised cache's attention against the
  float64 attention of the unquantised values (what storing FP8 costs), and
  for the bf16 twin site, the bf16 cache's (what storing bf16 costs).
- the append: new keys and values written by `append_paged_kv` into the
  e4m3 caches must be bit-identical to torch's quantisation of the same
  values with the same scales (values clamped to ±448 first, where torch
  does not saturate), and nothing else in the caches may change.
- bad input refused before any launch: scales missing, scales of the wrong
  size, a bf16 cache given to an FP8 site.

--sanitize: smaller shapes, fewer variants (for compute-sanitizer).
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
E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0


def quantise(x: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """x [..., Hkv, D] (float32) to e4m3 with per-head (or one) scales."""
    scale = scales.view(*([1] * (x.dim() - 2)), -1, 1) if scales.numel() > 1 \
        else scales
    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)


def dequantise(x8: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    scale = scales.double().view(*([1] * (x8.dim() - 2)), -1, 1) \
        if scales.numel() > 1 else scales.double()
    return x8.double() * scale


def make_caches(entry, kv_lens, page, gen, device):
    hkv, d, dv = entry["kv_heads"], entry["head_dim"], entry["v_head_dim"]
    batch = len(kv_lens)
    max_pages = max(math.ceil(max(kv_lens) / page), 1) + 1
    num_pages = batch * max_pages + 3
    perm = torch.randperm(num_pages, generator=gen)
    table = perm[:batch * max_pages].reshape(batch, max_pages).to(torch.int32)
    per_head = entry["kv_scales"] == "per_kv_head"
    # Heads of very different magnitudes, as real caches have.
    magnitude = (2.0 ** torch.arange(hkv).remainder(7)).view(1, 1, hkv, 1) \
        if per_head else torch.ones(1)
    k = torch.randn(num_pages, page, hkv, d, generator=gen) * magnitude
    v = torch.randn(num_pages, page, hkv, dv, generator=gen) * magnitude
    count = hkv if per_head else 1
    k_scale = (k.abs().amax(dim=(0, 1, 3)) / E4M3_MAX) if per_head else \
        (k.abs().amax() / E4M3_MAX).view(1)
    v_scale = (v.abs().amax(dim=(0, 1, 3)) / E4M3_MAX) if per_head else \
        (v.abs().amax() / E4M3_MAX).view(1)
    assert k_scale.numel() == count
    k8, v8 = quantise(k, k_scale), quantise(v, v_scale)
    return dict(k=k.to(device), v=v.to(device), k8=k8.to(device),
                v8=v8.to(device), k_scale=k_scale.float().to(device),
                v_scale=v_scale.float().to(device), table=table.to(device))


def reference(entry, q, caches, kv_lens, offsets, which):
    """float64 attention per sequence over `which` K/V: "deq" (the
    dequantised e4m3), "orig" (the unquantised values), or "bf16" (the
    values rounded to bf16)."""
    if which == "deq":
        kc = dequantise(caches["k8"], caches["k_scale"])
        vc = dequantise(caches["v8"], caches["v_scale"])
    elif which == "bf16":
        kc = caches["k"].to(torch.bfloat16).double()
        vc = caches["v"].to(torch.bfloat16).double()
    else:
        kc, vc = caches["k"].double(), caches["v"].double()
    table = caches["table"]
    page, hkv = kc.shape[1], kc.shape[2]
    group = q.shape[1] // hkv
    out = torch.zeros(q.shape[0], q.shape[1], vc.shape[3], dtype=torch.float64,
                      device=q.device)
    for b, n in enumerate(kv_lens):
        first, end = offsets[b], offsets[b + 1]
        if end <= first or n == 0:
            continue
        keys = torch.arange(n, device=q.device)
        pages = table[b, keys // page].long()
        k = kc[pages, keys % page].permute(1, 0, 2).repeat_interleave(group, 0)
        v = vc[pages, keys % page].permute(1, 0, 2).repeat_interleave(group, 0)
        rows = q[first:end].double().permute(1, 0, 2)
        s = entry["scale"] * rows @ k.transpose(-1, -2)
        out[first:end] = attend(s, v, entry["causal"], entry.get("window"),
                                entry.get("softcap")).permute(1, 0, 2)
    return out


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).norm() / max(float(want.norm()), 1e-30))


def run_site(site, entry, q_packed, caches, kv_lens, offsets, device, splits,
             fp8=True):
    """The site on packed queries (ragged) or, uniform, on [B, Hq, Sq, D]
    queries of equal Sq; returns the output packed [total_q, Hq, Dv]."""
    dtype = TORCH_DTYPES[site.dtype]
    kc, vc = (caches["k8"], caches["v8"]) if fp8 else (
        caches["k"].to(dtype), caches["v"].to(dtype))
    scales = dict(k_scale=caches["k_scale"], v_scale=caches["v_scale"]) \
        if fp8 else {}
    lens = torch.tensor(kv_lens, dtype=torch.int32, device=device)
    dv = entry["v_head_dim"]
    if entry.get("ragged"):
        offs = torch.tensor(offsets, dtype=torch.int32)
        plan = site.plan(offs, torch.tensor(kv_lens, dtype=torch.int32),
                         device=device)
        out = torch.full((q_packed.shape[0], q_packed.shape[1], dv),
                         float("nan"), dtype=dtype, device=device)
        site.paged_attention(q_packed, kc, vc, caches["table"], lens, out=out,
                             num_splits=splits, q_offsets=offs.to(device),
                             plan=plan, check=True, **scales)
        return out
    batch = len(kv_lens)
    sq = offsets[1] - offsets[0]
    q = q_packed.view(batch, sq, q_packed.shape[1], -1).transpose(1, 2)
    out = torch.full((batch, q.shape[1], sq, dv), float("nan"), dtype=dtype,
                     device=device)
    site.paged_attention(q.contiguous(), kc, vc, caches["table"], lens,
                         out=out, num_splits=splits, check=True, **scales)
    return out.transpose(1, 2).reshape(batch * sq, q.shape[1], dv)


def batches(entry, sanitize):
    if entry.get("ragged"):
        if sanitize:
            return [("chunk+decodes", [40, 1, 1], [90, 17, 5])]
        return [("chunk+decodes", [300, 1, 1, 1, 1], [812, 17, 1, 4095, 255]),
                ("decodes", [1] * 19, [int(1 + (i * 997) % 3000)
                                       for i in range(19)])]
    if sanitize:
        return [("decode", [1] * 3, [90, 17, 5])]
    return [("decode", [1] * 8, [1, 17, 100, 1000, 4095, 255, 64, 2000]),
            ("decode-long", [1] * 2, [16383, 9000]),
            ("prefill", [64] * 3, [64, 500, 1100])]


def check_attention(site, entry, twin, device, gen, sanitize) -> List[Dict[str, Any]]:
    results = []
    dtype = TORCH_DTYPES[site.dtype]
    for name, new, kv_lens in batches(entry, sanitize):
        caches = make_caches(entry, kv_lens, entry["page_size"], gen, device)
        offsets = [0]
        for n in new:
            offsets.append(offsets[-1] + n)
        q = torch.randn(offsets[-1], entry["q_heads"], entry["head_dim"],
                        generator=gen).to(dtype).to(device)
        want = reference(entry, q, caches, kv_lens, offsets, "deq")
        storage = reference(entry, q, caches, kv_lens, offsets, "orig")
        deq_vs_orig = rel(want, storage)
        for splits in ((0, 1) if sanitize else (0, 1, 3)):
            got = run_site(site, entry, q, caches, kv_lens, offsets, device,
                           splits)
            torch.cuda.synchronize()
            nan = bool(torch.isnan(got).any())
            err = rel(got, want)
            results.append(dict(site=site.name, batch=name, splits=splits,
                                rel_err=err, vs_unquantised=rel(got, storage),
                                cache_error=deq_vs_orig, nan=nan,
                                ok=(not nan) and err < 1e-2))
        if twin is not None and not sanitize:
            got = run_site(twin, entry, q, caches, kv_lens, offsets, device,
                           0, fp8=False)
            torch.cuda.synchronize()
            bf16_ref = reference(entry, q, caches, kv_lens, offsets, "bf16")
            results.append(dict(site=twin.name, batch=name, splits=0,
                                rel_err=rel(got, bf16_ref),
                                vs_unquantised=rel(got, storage),
                                cache_error=rel(bf16_ref, storage),
                                nan=bool(torch.isnan(got).any()),
                                ok=rel(got, bf16_ref) < 1e-2))
    return results


def check_append(site, entry, device, gen) -> Dict[str, Any]:
    dtype = TORCH_DTYPES[site.dtype]
    kv_lens = [37, 5, 100]
    new = [7, 5, 1]
    caches = make_caches(entry, kv_lens, entry["page_size"], gen, device)
    offsets = torch.tensor([0, 7, 12, 13], dtype=torch.int32)
    hkv = entry["kv_heads"]
    key = (torch.randn(13, hkv, entry["head_dim"], generator=gen) * 3).to(dtype)
    value = (torch.randn(13, hkv, entry["v_head_dim"], generator=gen) * 3).to(dtype)
    # Values past the range saturate: a few far outside it.
    key[0, 0, :4] = torch.tensor([1e6, -1e6, 1e-9, 0.0]).to(dtype)
    k8, v8 = caches["k8"].clone(), caches["v8"].clone()
    before_k, before_v = k8.clone(), v8.clone()
    site.append_paged_kv(key.to(device), value.to(device), k8, v8,
                         caches["table"],
                         torch.tensor(kv_lens, dtype=torch.int32, device=device),
                         offsets.to(device), k_scale=caches["k_scale"],
                         v_scale=caches["v_scale"])
    torch.cuda.synchronize()
    page = entry["page_size"]
    want_k, want_v = before_k.clone(), before_v.clone()
    table = caches["table"].cpu()
    for b, n in enumerate(kv_lens):
        first, end = int(offsets[b]), int(offsets[b + 1])
        for j, token in enumerate(range(first, end)):
            position = n - (end - first) + j
            p, slot = int(table[b, position // page]), position % page
            want_k[p, slot] = quantise(key[token].float().to(device),
                                       caches["k_scale"])
            want_v[p, slot] = quantise(value[token].float().to(device),
                                       caches["v_scale"])
    bad_k = int((k8.view(torch.uint8) != want_k.view(torch.uint8)).sum())
    bad_v = int((v8.view(torch.uint8) != want_v.view(torch.uint8)).sum())
    return dict(site=site.name, batch="append", mismatched_bytes=bad_k + bad_v,
                ok=bad_k + bad_v == 0)


def check_bad_input(site, entry, device, gen) -> Dict[str, Any]:
    caches = make_caches(entry, [5], entry["page_size"], gen, device)
    dtype = TORCH_DTYPES[site.dtype]
    q = torch.randn(1, entry["q_heads"], 1, entry["head_dim"],
                    device=device).to(dtype)
    lens = torch.tensor([5], dtype=torch.int32, device=device)
    bad = {
        "no scales": dict(),
        "scales of 3": dict(k_scale=torch.ones(3, device=device),
                            v_scale=torch.ones(3, device=device)),
    }
    refused = {}
    for name, kwargs in bad.items():
        try:
            site.paged_attention(q, caches["k8"], caches["v8"], caches["table"],
                                 lens, **kwargs)
            torch.cuda.synchronize()
            refused[name] = None
        except Exception as error:  # noqa: BLE001 (the message is the check)
            refused[name] = str(error)[:200]
    try:
        site.paged_attention(q, caches["k"].to(dtype), caches["v"].to(dtype),
                             caches["table"], lens, k_scale=caches["k_scale"],
                             v_scale=caches["v_scale"])
        refused["bf16 cache"] = None
    except Exception as error:  # noqa: BLE001
        refused["bf16 cache"] = str(error)[:200]
    return dict(site=site.name, batch="bad-input", messages=refused,
                ok=all(message for message in refused.values()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("package")
    parser.add_argument("--out")
    parser.add_argument("--sanitize", action="store_true")
    options = parser.parse_args()
    device = torch.device("cuda")
    gen = torch.Generator().manual_seed(8)
    package = kiln.Package(options.package)
    manifest = json.loads((Path(options.package) / "manifest.json").read_text())
    entries = {entry["name"]: entry for entry in manifest["sites"]}
    by_function = {site.function: site for site in package.sites}
    results = []
    for site in package.sites:
        entry = dict(entries[site.name])
        if entry.get("cache_dtype") != "f8e4m3":
            continue
        entry["ragged"] = bool(site.ragged)
        twin = by_function.get("bf16_d128") if site.function == \
            "fp8_bf16_d128_heads" else None
        results += check_attention(site, entry, twin, device, gen,
                                   options.sanitize)
        if not options.sanitize:
            results.append(check_append(site, entry, device, gen))
            if not site.ragged:
                results.append(check_bad_input(site, entry, device, gen))
    for result in results:
        line = " ".join(f"{k}={v:.2e}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in result.items() if k != "ok")
        print(("PASS " if result["ok"] else "FAIL ") + line)
    failed = sum(not r["ok"] for r in results)
    print(f"{len(results) - failed} passed, {failed} failed")
    if options.out:
        Path(options.out).write_text(json.dumps(results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
