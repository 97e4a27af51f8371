#!/usr/bin/env python3
"""Serving batches on the H200: a step's prompt chunks and decodes in one
ragged launch over the paged cache, against the ways to run it without one.

    python3 bench/bench_serving.py PACKAGE_DIR [--out results.json] [--quick]

Package: `kilnc test/gpu/ragged_sites.mlir -o PACKAGE_DIR` (the ragged site
and the uniform paged site, GQA 32/8, head dim 128, bf16, pages of 16).

Mixed batches (fixed seed; decode contexts drawn uniformly from 512 to 16k):
  chunk2048+127dec  one prompt chunk of 2048 queries (against a cached
                    prefix of 2048) and 127 decodes
  4x512+60dec       four chunks of 512 (prefixes 0 to 3.5k) and 60 decodes
  256dec            256 decodes
Implementations, each checked against a float64 reference first:
  kiln-ragged       one ragged launch (the plan computed once per step,
                    outside the timed call, as every layer of a step reuses
                    it)
  kiln-padded       the uniform paged site on the batch padded to its
                    longest chunk (q [B, Hq, Smax, D])
  kiln-separate     the prefill part and the decode part launched one after
                    the other (prefill: a ragged launch of the chunks;
                    decode: the uniform site, q [B, Hq, 1, D])
  kiln-parts-alone  the two parts each timed alone at its best (their sum:
                    what one launch must not exceed by more than 10%)
  sdpa-jagged       the pages gathered per sequence, then SDPA (flash) on
                    jagged nested tensors: the chunks and the decodes
                    bottom-right causal (run as one non-causal call for the
                    decodes and one per chunk with its lower-right mask)
Rows {case, impl, ms, TBs, TFLOPs}: K and V bytes each sequence reads, and
4·Σ(visible keys)·Hq·D flops.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402
from bench_attention import make_timer  # noqa: E402

HQ, HKV, D, PAGE = 32, 8, 128, 16
DTYPE = torch.bfloat16
SCALE = D ** -0.5
SEED = 29
DECODE_MIN, DECODE_MAX = 512, 16384


def cases(quick: bool) -> List[Tuple[str, List[int], List[int]]]:
    """(name, new queries per sequence, kv_lens), chunks first."""
    gen = torch.Generator().manual_seed(SEED)

    def contexts(n):
        return torch.randint(DECODE_MIN, DECODE_MAX + 1, (n,),
                             generator=gen).tolist()

    result = [("chunk2048+127dec", [2048] + [1] * 127, [4096] + contexts(127))]
    prefixes = [0, 1024, 2048, 3584]
    result.append(("4x512+60dec", [512] * 4 + [1] * 60,
                   [512 + p for p in prefixes] + contexts(60)))
    result.append(("256dec", [1] * 256, contexts(256)))
    return result[:1] if quick else result


def build(new: List[int], kv_lens: List[int], device) -> Dict[str, Any]:
    batch = len(new)
    gen = torch.Generator().manual_seed(SEED + batch)
    pages = [math.ceil(n / PAGE) for n in kv_lens]
    max_pages = max(pages)
    num_pages = sum(pages)
    perm = torch.randperm(num_pages, generator=gen)
    table = torch.zeros(batch, max_pages, dtype=torch.int32)
    cursor = 0
    for b, count in enumerate(pages):
        table[b, :count] = perm[cursor:cursor + count].to(torch.int32)
        cursor += count
    key_cache = torch.randn(num_pages, PAGE, HKV, D, device=device).to(DTYPE)
    value_cache = torch.randn(num_pages, PAGE, HKV, D, device=device).to(DTYPE)
    offsets = torch.zeros(batch + 1, dtype=torch.int32)
    offsets[1:] = torch.cumsum(torch.tensor(new), 0)
    q = torch.randn(int(offsets[-1]), HQ, D, device=device).to(DTYPE)
    return dict(new=new, kv_lens=torch.tensor(kv_lens, dtype=torch.int32),
                offsets=offsets, q=q, key_cache=key_cache,
                value_cache=value_cache, table=table.to(device))


def gather_kv(data, b: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sequence b's keys and values, [n, Hkv, D]."""
    n = int(data["kv_lens"][b])
    keys = torch.arange(n, device=data["q"].device)
    pages = data["table"][b, keys // PAGE].long()
    return (data["key_cache"][pages, keys % PAGE],
            data["value_cache"][pages, keys % PAGE])


def reference(data) -> torch.Tensor:
    out = torch.zeros(data["q"].shape, dtype=torch.float64,
                      device=data["q"].device)
    offsets = data["offsets"].tolist()
    for b, n in enumerate(data["kv_lens"].tolist()):
        first, end = offsets[b], offsets[b + 1]
        sq = end - first
        k, v = gather_kv(data, b)
        k = k.double().permute(1, 0, 2).repeat_interleave(HQ // HKV, 0)
        v = v.double().permute(1, 0, 2).repeat_interleave(HQ // HKV, 0)
        s = SCALE * data["q"][first:end].double().permute(1, 0, 2) @ \
            k.transpose(-1, -2)
        rows = torch.arange(sq, device=s.device)[:, None]
        cols = torch.arange(n, device=s.device)[None, :]
        s = s.masked_fill(cols > rows + (n - sq), float("-inf"))
        out[first:end] = (torch.softmax(s, -1) @ v).permute(1, 0, 2)
    return out


def measures(data) -> Tuple[float, float]:
    """K and V bytes read, and flops of the visible scores."""
    bytes_ = 0.0
    visible = 0.0
    for sq, n in zip(data["new"], data["kv_lens"].tolist()):
        bytes_ += 2.0 * n * HKV * D * 2
        # Row i sees n - sq + i + 1 keys.
        visible += sq * (n - sq) + sq * (sq + 1) / 2
    return bytes_, 4.0 * visible * HQ * D


def subset(data, members: List[int], device) -> Dict[str, Any]:
    """The sequences `members` of a batch as a batch of their own (the same
    caches)."""
    offsets = data["offsets"].tolist()
    rows = torch.cat([torch.arange(offsets[b], offsets[b + 1])
                      for b in members]).to(device)
    new = [data["new"][b] for b in members]
    part = dict(data)
    part["new"] = new
    part["kv_lens"] = data["kv_lens"][members]
    part["offsets"] = torch.zeros(len(members) + 1, dtype=torch.int32)
    part["offsets"][1:] = torch.cumsum(torch.tensor(new), 0)
    part["q"] = data["q"][rows]
    part["table"] = data["table"][torch.tensor(members, device=device)]
    return part


def ragged_call(site, data, device) -> Callable[[], Any]:
    plan = site.plan(data["offsets"], data["kv_lens"], device=device)
    offsets = data["offsets"].to(device)
    lens = data["kv_lens"].to(device)
    total = int(data["kv_lens"].sum())
    out = torch.empty(data["q"].shape[0], HQ, D, dtype=DTYPE, device=device)

    def run():
        return site.paged_attention(
            data["q"], data["key_cache"], data["value_cache"], data["table"],
            lens, out=out, q_offsets=offsets, plan=plan, total_kv_len=total)
    return run


def padded_call(site, data, device) -> Tuple[Callable[[], Any], Any]:
    """The uniform site on q [B, Hq, Smax, D]: each sequence's queries at
    the end of its Smax rows (bottom-right, as the ragged form)."""
    smax = max(data["new"])
    batch = len(data["new"])
    q = torch.zeros(batch, HQ, smax, D, dtype=DTYPE, device=device)
    offsets = data["offsets"].tolist()
    for b, sq in enumerate(data["new"]):
        q[b, :, smax - sq:] = data["q"][offsets[b]:offsets[b + 1]].permute(
            1, 0, 2)
    lens = data["kv_lens"].to(device)
    total = int(data["kv_lens"].sum())
    out = torch.empty(batch, HQ, smax, D, dtype=DTYPE, device=device)

    def run():
        return site.paged_attention(q, data["key_cache"], data["value_cache"],
                                    data["table"], lens, out=out,
                                    total_kv_len=total)

    def unpad(result):
        rows = [result[b, :, smax - sq:].permute(1, 0, 2)
                for b, sq in enumerate(data["new"])]
        return torch.cat(rows)
    return run, unpad


def decode_call(site, data, device) -> Callable[[], Any]:
    """The uniform site on a decode-only batch, q [B, Hq, 1, D]."""
    q = data["q"].unsqueeze(2)
    lens = data["kv_lens"].to(device)
    total = int(data["kv_lens"].sum())
    out = torch.empty(q.shape, dtype=DTYPE, device=device)

    def run():
        return site.paged_attention(q, data["key_cache"], data["value_cache"],
                                    data["table"], lens, out=out,
                                    total_kv_len=total)
    return run


def sdpa_jagged_call(data, device) -> Callable[[], Any]:
    """Gather every sequence's pages, then SDPA: the decodes as one call on
    jagged nested tensors (one query each, no mask needed), each chunk as
    its own call with its lower-right causal mask."""
    from torch.nn.attention.bias import causal_lower_right

    offsets = data["offsets"].tolist()
    chunks = [b for b, sq in enumerate(data["new"]) if sq > 1]
    decodes = [b for b, sq in enumerate(data["new"]) if sq == 1]
    group = HQ // HKV

    def run():
        outs = []
        if decodes:
            keys, values = [], []
            for b in decodes:
                k, v = gather_kv(data, b)
                keys.append(k.repeat_interleave(group, 1))
                values.append(v.repeat_interleave(group, 1))
            q = torch.nested.nested_tensor(
                [data["q"][offsets[b]:offsets[b] + 1] for b in decodes],
                layout=torch.jagged)
            k = torch.nested.nested_tensor(keys, layout=torch.jagged)
            v = torch.nested.nested_tensor(values, layout=torch.jagged)
            o = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                scale=SCALE).transpose(1, 2)
            outs.append(o)
        for b in chunks:
            k, v = gather_kv(data, b)
            sq = data["new"][b]
            q = data["q"][offsets[b]:offsets[b + 1]].permute(1, 0, 2)[None]
            mask = causal_lower_right(sq, k.shape[0])
            o = F.scaled_dot_product_attention(
                q, k.permute(1, 0, 2)[None], v.permute(1, 0, 2)[None],
                attn_mask=mask, scale=SCALE, enable_gqa=True)
            outs.append(o)
        return outs

    def assemble(outs):
        result = torch.empty(data["q"].shape, dtype=DTYPE, device=device)
        index = 0
        if decodes:
            nested = outs[0]
            for i, b in enumerate(decodes):
                result[offsets[b]] = nested[i][0]
            index = 1
        for b, o in zip(chunks, outs[index:]):
            result[offsets[b]:offsets[b + 1]] = o[0].permute(1, 0, 2)
        return result
    return run, assemble


def check(name, got, ref) -> float:
    err = float((got.double() - ref).norm() / ref.norm())
    if not math.isfinite(err) or err > 2e-2:
        raise SystemExit(f"{name}: relative error {err:.2e}")
    return err


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("--out")
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args()
    device = torch.device("cuda")
    package = kiln.Package(options.package)
    sites = {site.function: site for site in package.sites}
    ragged = sites["ragged_bf16_d128_p16_causal"]
    uniform = sites["uniform_bf16_d128_p16_causal"]
    timer = make_timer()
    rows: List[Dict[str, Any]] = []
    for name, new, kv_lens in cases(options.quick):
        data = build(new, kv_lens, device)
        ref = reference(data)
        bytes_, flops = measures(data)
        chunks = [b for b, sq in enumerate(new) if sq > 1]
        decodes = [b for b, sq in enumerate(new) if sq == 1]
        impls: Dict[str, float] = {}
        errors: Dict[str, float] = {}

        run = ragged_call(ragged, data, device)
        errors["kiln-ragged"] = check(name + " ragged", run(), ref)
        impls["kiln-ragged"] = timer(run)

        run, unpad = padded_call(uniform, data, device)
        errors["kiln-padded"] = check(name + " padded", unpad(run()), ref)
        impls["kiln-padded"] = timer(run)

        parts = []
        if chunks:
            prefill = subset(data, chunks, device)
            parts.append(ragged_call(ragged, prefill, device))
        if decodes:
            decode = subset(data, decodes, device)
            parts.append(decode_call(uniform, decode, device))

        def separate():
            for part in parts:
                part()
        impls["kiln-separate"] = timer(separate)
        impls["kiln-parts-alone"] = sum(timer(part) for part in parts)

        try:
            run, assemble = sdpa_jagged_call(data, device)
            errors["sdpa-jagged"] = check(name + " sdpa", assemble(run()), ref)
            impls["sdpa-jagged"] = timer(run)
        except Exception as error:  # noqa: BLE001 - reported, not fatal
            print(f"{name}: sdpa-jagged failed: {error}")
        for impl, ms in impls.items():
            row = {"case": name, "impl": impl, "ms": round(ms, 4),
                   "TBs": round(bytes_ / ms / 1e9, 3),
                   "TFLOPs": round(flops / ms / 1e9, 1)}
            if impl in errors:
                row["rel_err"] = errors[impl]
            rows.append(row)
            print(json.dumps(row))
        alone = impls["kiln-parts-alone"]
        print(f"{name}: ragged / parts alone {impls['kiln-ragged'] / alone:.3f}"
              f", padded / ragged {impls['kiln-padded'] / impls['kiln-ragged']:.2f}"
              + (f", sdpa / ragged "
                 f"{impls['sdpa-jagged'] / impls['kiln-ragged']:.2f}"
                 if "sdpa-jagged" in impls else ""))
    if options.out:
        Path(options.out).write_text(json.dumps(
            {"timer": timer.__name__, "device": torch.cuda.get_device_name(),
             "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
