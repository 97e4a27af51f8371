#!/usr/bin/env python3
"""Checks the sites of packed sequences of a Kiln package (kiln.attention's
varlen form) on the GPU against a float64 reference.

    python3 test/gpu/check_packed.py PACKAGE_DIR [--out results.json]
        [--sanitize]

Package: `kilnc test/gpu/packed_sites.mlir -o PACKAGE_DIR`. For every packed
site, batches of what an unpadded server sends: prompts attending to
themselves, chunks against earlier keys, sequences with fewer keys than
queries, with no queries and with no keys, lengths off every tile size; the
output poisoned with NaN (rows past the last offset must stay untouched, a
sequence without keys gives zeros); splits forced to 1, 3 and 16 and chosen
at launch; a plan of fixed capacity; q, k and v as views of one fused
[total, Hq + 2 Hkv, D] projection (strided rows); a CUDA graph replayed with
a second batch in the same buffers; bad offsets and a too-small plan refused
on the host. Passes when ||out - ref|| / ||ref|| < 1e-2 on the owned rows
and nothing there is NaN.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402

import kiln  # noqa: E402

TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def offsets_of(lengths: List[int]) -> torch.Tensor:
    offsets = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    offsets[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int64), 0)
    return offsets


def make_batch(entry, q_lens, kv_lens, dtype, device, gen,
               slack: int = 0) -> Dict[str, Any]:
    """Packed q, k, v (with `slack` unowned query rows at the end) and the
    offsets, on the host and the device."""
    hq, hkv = entry["q_heads"], entry["kv_heads"]
    d, dv = entry["head_dim"], entry["v_head_dim"]
    q_offsets, kv_offsets = offsets_of(q_lens), offsets_of(kv_lens)
    total_q, total_kv = int(q_offsets[-1]) + slack, max(int(kv_offsets[-1]), 1)
    q = torch.randn(total_q, hq, d, generator=gen).to(dtype)
    k = torch.randn(total_kv, hkv, d, generator=gen).to(dtype)
    v = torch.randn(total_kv, hkv, dv, generator=gen).to(dtype)
    return dict(q=q.to(device), k=k.to(device), v=v.to(device),
                q_offsets=q_offsets, kv_offsets=kv_offsets)


def attend_one(entry, q, k, v) -> torch.Tensor:
    """The uniform op on one sequence in float64: q [sq, Hq, D], k and v
    [n, Hkv, *]; bottom-right causal, windows and soft-capping as the op
    defines them; rows that see no key give 0."""
    sq, n = q.shape[0], k.shape[0]
    group = q.shape[1] // k.shape[1]
    qh = q.double().permute(1, 0, 2)
    kh = k.double().permute(1, 0, 2).repeat_interleave(group, 0)
    vh = v.double().permute(1, 0, 2).repeat_interleave(group, 0)
    s = entry["scale"] * qh @ kh.transpose(-1, -2)
    if entry.get("softcap"):
        s = entry["softcap"] * torch.tanh(s / entry["softcap"])
    rows = torch.arange(sq, device=q.device)[:, None] + (n - sq)
    cols = torch.arange(n, device=q.device)[None, :]
    hidden = torch.zeros(sq, n, dtype=torch.bool, device=q.device)
    right = 0 if entry["causal"] else entry.get("window_right")
    if right is not None:
        hidden |= cols > rows + right
    if entry.get("window"):
        hidden |= cols <= rows - entry["window"]
    s = s.masked_fill(hidden, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    total = p.sum(-1, keepdim=True)
    out = (p / torch.where(total == 0, torch.ones_like(total), total)) @ vh
    return out.permute(1, 0, 2)


def reference(entry, batch) -> torch.Tensor:
    q, k, v = batch["q"], batch["k"], batch["v"]
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[2], dtype=torch.float64,
                      device=q.device)
    qo, ko = batch["q_offsets"].tolist(), batch["kv_offsets"].tolist()
    for b in range(len(qo) - 1):
        if qo[b + 1] == qo[b] or ko[b + 1] == ko[b]:
            continue
        out[qo[b]:qo[b + 1]] = attend_one(entry, q[qo[b]:qo[b + 1]],
                                          k[ko[b]:ko[b + 1]],
                                          v[ko[b]:ko[b + 1]])
    return out


def compare(out, ref, q_offsets: List[int]) -> Dict[str, Any]:
    """Owned rows against the reference; rows past the last offset must
    still hold the NaN poison."""
    owned = slice(0, q_offsets[-1])
    got, want = out[owned].double(), ref[owned]
    nan = bool(torch.isnan(got).any())
    err = float((got - want).norm() / max(float(want.norm()), 1e-30))
    untouched = bool(torch.isnan(out[q_offsets[-1]:]).all())
    return {"rel_err": err, "nan": nan, "untouched": untouched,
            "ok": (not nan) and untouched and err < 1e-2}


# (name, queries per sequence, keys per sequence, unowned rows at the end).
BATCHES = [
    ("prompts", [1, 77, 129, 5, 300, 64], [1, 77, 129, 5, 300, 64], 0),
    ("chunks", [64, 65, 200, 3, 1], [1000, 65, 700, 3, 4097], 3),
    ("fewer-keys+empty", [50, 0, 7, 9, 31], [20, 13, 7, 0, 31], 0),
    ("long", [2048, 1000], [2048, 1500], 0),
    ("many", [int(1 + (i * 37) % 300) for i in range(41)],
     [int(1 + (i * 37) % 300) for i in range(41)], 0),
]
SANITIZE_BATCHES = [
    ("prompts", [1, 13, 20], [1, 13, 20], 2),
    ("fewer-keys+empty", [20, 0, 7, 3], [9, 5, 7, 0], 0),
]


def run(site, batch, out, plan, splits=0, q=None, k=None, v=None):
    device = out.device
    return site.packed_attention(
        batch["q"] if q is None else q, batch["k"] if k is None else k,
        batch["v"] if v is None else v, batch["q_offsets"].to(device),
        batch["kv_offsets"].to(device), plan, out=out, num_splits=splits,
        max_kv_len=int((batch["kv_offsets"][1:] -
                        batch["kv_offsets"][:-1]).max()))


def poisoned(batch, entry, dtype, device):
    return torch.full((batch["q"].shape[0], entry["q_heads"],
                       entry["v_head_dim"]), float("nan"), dtype=dtype,
                      device=device)


def check_site(site, entry, device, gen, sanitize) -> List[Dict[str, Any]]:
    dtype = TORCH_DTYPES[site.dtype]
    results = []
    for name, q_lens, kv_lens, slack in (SANITIZE_BATCHES if sanitize
                                         else BATCHES):
        batch = make_batch(entry, q_lens, kv_lens, dtype, device, gen, slack)
        ref = reference(entry, batch)
        plan = site.plan(batch["q_offsets"], kv_offsets=batch["kv_offsets"],
                         device=device)
        variants = [("auto", 0, plan), ("nosplit", 1, plan),
                    ("split3", 3, plan)]
        if not sanitize:
            variants.append(("split16", 16, plan))
            variants.append(("capacity", 0, site.plan(
                batch["q_offsets"], kv_offsets=batch["kv_offsets"],
                device=device, capacity=int(plan.shape[0]) + 9)))
        for variant, splits, this_plan in variants:
            out = poisoned(batch, entry, dtype, device)
            run(site, batch, out, this_plan, splits)
            torch.cuda.synchronize()
            result = compare(out, ref, batch["q_offsets"].tolist())
            result.update(site=site.name, batch=name, variant=variant)
            results.append(result)
    if not sanitize:
        results.append(check_fused_views(site, entry, device, gen, dtype))
        results.append(check_graph(site, entry, device, gen, dtype))
        results.append(check_bad_input(site, entry, device))
    return results


def check_fused_views(site, entry, device, gen, dtype) -> Dict[str, Any]:
    """q, k and v as column slices of one [total, Hq + 2 Hkv, D] tensor (a
    fused QKV projection): rows strided by the whole projection."""
    hq, hkv, d, dv = (entry["q_heads"], entry["kv_heads"], entry["head_dim"],
                      entry["v_head_dim"])
    if d != dv:
        return {"site": site.name, "batch": "fused-qkv", "variant": "views",
                "ok": True, "rel_err": 0.0, "nan": False,
                "skipped": "value head dim differs"}
    lengths = [100, 1, 57, 300]
    total = sum(lengths)
    fused = torch.randn(total, hq + 2 * hkv, d, generator=gen).to(dtype)
    fused = fused.to(device)
    q, k, v = fused[:, :hq], fused[:, hq:hq + hkv], fused[:, hq + hkv:]
    batch = dict(q=q, k=k, v=v, q_offsets=offsets_of(lengths),
                 kv_offsets=offsets_of(lengths))
    ref = reference(entry, batch)
    plan = site.plan(batch["q_offsets"], kv_offsets=batch["kv_offsets"],
                     device=device)
    out = poisoned(batch, entry, dtype, device)
    run(site, batch, out, plan)
    torch.cuda.synchronize()
    result = compare(out, ref, batch["q_offsets"].tolist())
    result.update(site=site.name, batch="fused-qkv", variant="views")
    return result


def check_graph(site, entry, device, gen, dtype) -> Dict[str, Any]:
    """A plan of fixed capacity and every buffer captured once, replayed with
    a second batch of other lengths written into the same buffers."""
    first = make_batch(entry, [50, 1, 1, 7], [300, 20, 1000, 7], dtype,
                       device, gen)
    second = make_batch(entry, [1, 33, 1, 20], [999, 40, 2, 25], dtype,
                        device, gen)
    total_q, total_kv = 80, 1400
    capacity = site.plan_capacity(4, total_q)
    hq, hkv = entry["q_heads"], entry["kv_heads"]
    d, dv = entry["head_dim"], entry["v_head_dim"]
    q = torch.zeros(total_q, hq, d, dtype=dtype, device=device)
    k = torch.zeros(total_kv, hkv, d, dtype=dtype, device=device)
    v = torch.zeros(total_kv, hkv, dv, dtype=dtype, device=device)
    out = torch.zeros(total_q, hq, dv, dtype=dtype, device=device)
    plan = torch.zeros(capacity, 2, dtype=torch.int32, device=device)
    q_offsets = torch.zeros(5, dtype=torch.int32, device=device)
    kv_offsets = torch.zeros(5, dtype=torch.int32, device=device)

    def load(batch):
        for name, buffer in (("q", q), ("k", k), ("v", v)):
            buffer.zero_()
            buffer[:batch[name].shape[0]] = batch[name]
        q_offsets.copy_(batch["q_offsets"])
        kv_offsets.copy_(batch["kv_offsets"])
        site.plan(batch["q_offsets"], kv_offsets=batch["kv_offsets"],
                  out=plan)

    def launch():
        site.packed_attention(q, k, v, q_offsets, kv_offsets, plan, out=out)

    load(first)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        launch()
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    results = []
    for batch in (first, second):
        load(batch)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = reference(entry, dict(batch, q=q, k=k, v=v))
        results.append(compare(out, ref, batch["q_offsets"].tolist()))
    return {"site": site.name, "batch": "graph", "variant": "replay",
            "ok": all(r["ok"] for r in results),
            "rel_err": max(r["rel_err"] for r in results),
            "nan": any(r["nan"] for r in results)}


def check_bad_input(site, entry, device) -> Dict[str, Any]:
    """Decreasing key offsets, a first offset other than 0 and a plan too
    small are refused on the host, with a message."""
    messages: List[Optional[str]] = []
    for q_offsets, kv_offsets, capacity in (([0, 5, 9], [0, 7, 3], None),
                                            ([0, 5, 9], [2, 7, 9], None),
                                            ([0, 600, 601], [0, 600, 601], 1)):
        try:
            site.plan(q_offsets, kv_offsets=kv_offsets, capacity=capacity,
                      device=device)
            messages.append(None)
        except kiln.KilnError as error:
            messages.append(str(error))
    return {"site": site.name, "batch": "bad-input", "variant": "host",
            "ok": all(m is not None for m in messages), "messages": messages,
            "rel_err": 0.0, "nan": False}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("--out")
    parser.add_argument("--sanitize", action="store_true",
                        help="small batches only (for compute-sanitizer)")
    options = parser.parse_args()
    device = torch.device("cuda")
    gen = torch.Generator().manual_seed(30)
    package = kiln.Package(options.package)
    manifest = json.loads((Path(options.package) / "manifest.json").read_text())
    entries = {e["name"]: e for e in manifest["sites"]}
    results: List[Dict[str, Any]] = []
    for site in package.sites:
        if site.packed:
            results += check_site(site, entries[site.name], device, gen,
                                  options.sanitize)
    failed = [r for r in results if not r["ok"]]
    for r in results:
        print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['site']} {r['batch']} "
              f"{r['variant']}: rel err {r['rel_err']:.2e}"
              + (" NaN" if r["nan"] else "")
              + ("" if r.get("untouched", True) else " rows past the end "
                 "written"))
    print(f"{len(results) - len(failed)} of {len(results)} packed checks "
          "passed")
    if options.out:
        Path(options.out).write_text(json.dumps(results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
