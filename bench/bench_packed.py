#!/usr/bin/env python3
"""Packed sequences (kiln.attention's varlen form) on the GPU: Kiln's packed
launch beside PyTorch's SDPA on jagged nested tensors (FlashAttention's varlen
kernels) and SDPA on the batch padded to its longest sequence with a mask.

    python3 bench/bench_packed.py PACKAGE_DIR [--out rows.json] [--quick]

Package: `kilnc test/gpu/packed_sites.mlir -o PACKAGE_DIR`. Cases: a BERT-
shaped encoder batch (12/12 heads, d64, f16, not causal, 64 sequences of 32
to 512 tokens), Llama-3-8B-shaped prompts (32/8, d128, bf16, causal, 16
prompts of 128 to 4096 tokens) and many short prompts (128 of 16 to 256).
Each implementation is first checked against a float64 reference (relative
error < 2e-2 on every owned row). Timed: the attention call alone; the
anchors' layout work (GQA heads expanded for the jagged call, padding and
its mask) is done once outside the timing. Rows: {case, impl, ms, TFLOPs}
with the FLOPs of the visible (query, key) pairs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402
from bench_attention import make_timer  # noqa: E402

CASES = [
    # (case, site function, q heads, kv heads, head dim, dtype, causal,
    #  sequence lengths)
    ("encoder-64x32..512", "packed_f16_d64_encoder", 12, 12, 64,
     torch.float16, False, [32 + (i * 173) % 481 for i in range(64)]),
    ("prompts-16x128..4096", "packed_bf16_d128_causal", 32, 8, 128,
     torch.bfloat16, True, [128 + (i * 1531) % 3969 for i in range(16)]),
    ("prompts-128x16..256", "packed_bf16_d128_causal", 32, 8, 128,
     torch.bfloat16, True, [16 + (i * 97) % 241 for i in range(128)]),
]


def visible_pairs(lengths: List[int], causal: bool) -> int:
    return sum(n * (n + 1) // 2 if causal else n * n for n in lengths)


def reference(q, k, v, lengths, scale, causal) -> torch.Tensor:
    """float64, sequence by sequence, a few heads at a time."""
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[2], dtype=torch.float64,
                      device=q.device)
    group = q.shape[1] // k.shape[1]
    first = 0
    for n in lengths:
        rows = slice(first, first + n)
        for h0 in range(0, q.shape[1], 4):
            heads = slice(h0, h0 + 4)
            qh = q[rows, heads].double().permute(1, 0, 2)
            kv_heads = [h // group for h in range(h0, min(h0 + 4, q.shape[1]))]
            kh = k[rows][:, kv_heads].double().permute(1, 0, 2)
            vh = v[rows][:, kv_heads].double().permute(1, 0, 2)
            s = scale * qh @ kh.transpose(-1, -2)
            if causal:
                s = s.masked_fill(torch.ones(n, n, dtype=torch.bool,
                                             device=q.device).triu(1),
                                  float("-inf"))
            out[rows, heads] = (s.softmax(-1) @ vh).permute(1, 0, 2)
        first += n
    return out


def rel_err(got, ref) -> float:
    return float((got.double() - ref).norm() / ref.norm())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("--out")
    parser.add_argument("--quick", action="store_true",
                        help="the first case only")
    options = parser.parse_args()
    device = torch.device("cuda")
    package = kiln.Package(options.package)
    sites = {site.function: site for site in package.sites}
    timer = make_timer()
    gen = torch.Generator().manual_seed(31)
    rows: List[Dict[str, Any]] = []
    for case, function, hq, hkv, d, dtype, causal, lengths in (
            CASES[:1] if options.quick else CASES):
        site = sites[function]
        scale = site.scale
        total, batch, longest = sum(lengths), len(lengths), max(lengths)
        q = torch.randn(total, hq, d, generator=gen).to(dtype).to(device)
        k = torch.randn(total, hkv, d, generator=gen).to(dtype).to(device)
        v = torch.randn(total, hkv, d, generator=gen).to(dtype).to(device)
        offsets = torch.zeros(batch + 1, dtype=torch.int32)
        offsets[1:] = torch.cumsum(torch.tensor(lengths), 0)
        offsets_dev = offsets.to(device)
        ref = reference(q, k, v, lengths, scale, causal)
        flops = 4.0 * visible_pairs(lengths, causal) * hq * d
        impls: Dict[str, float] = {}
        errors: Dict[str, float] = {}

        plan = site.plan(offsets, kv_offsets=offsets, device=device)
        out = torch.empty(total, hq, d, dtype=dtype, device=device)

        def kiln_packed():
            return site.packed_attention(q, k, v, offsets_dev, offsets_dev,
                                         plan, out=out, max_kv_len=longest)
        errors["kiln-packed"] = rel_err(kiln_packed(), ref)
        impls["kiln-packed"] = timer(kiln_packed)

        # SDPA on jagged nested tensors: views of the packed tensors (K and V
        # with their heads expanded for the group, once).
        group = hq // hkv
        jagged_offsets = offsets_dev.long()
        kx = k.repeat_interleave(group, 1) if group > 1 else k
        vx = v.repeat_interleave(group, 1) if group > 1 else v
        # (The sequence bounds given, so that no call reads them back.)
        nq, nk, nv = (torch.nested.nested_tensor_from_jagged(
            t, jagged_offsets, min_seqlen=min(lengths),
            max_seqlen=longest).transpose(1, 2) for t in (q, kx, vx))

        def sdpa_jagged():
            return F.scaled_dot_product_attention(nq, nk, nv, is_causal=causal,
                                                  scale=scale)
        try:
            got = sdpa_jagged().transpose(1, 2).values()
            errors["sdpa-jagged"] = rel_err(got, ref)
            impls["sdpa-jagged"] = timer(sdpa_jagged)
        except Exception as error:  # noqa: BLE001 - reported, not fatal
            print(f"{case}: sdpa-jagged failed: {error}")

        # SDPA on the padded batch with a key-padding (and causal) mask.
        pq = torch.zeros(batch, hq, longest, d, dtype=dtype, device=device)
        pk = torch.zeros(batch, hkv, longest, d, dtype=dtype, device=device)
        pv = torch.zeros(batch, hkv, longest, d, dtype=dtype, device=device)
        mask = torch.zeros(batch, 1, longest, longest, dtype=torch.bool,
                           device=device)
        for b, n in enumerate(lengths):
            rows_b = slice(int(offsets[b]), int(offsets[b + 1]))
            pq[b, :, :n] = q[rows_b].permute(1, 0, 2)
            pk[b, :, :n] = k[rows_b].permute(1, 0, 2)
            pv[b, :, :n] = v[rows_b].permute(1, 0, 2)
            visible = torch.ones(n, n, dtype=torch.bool, device=device)
            mask[b, 0, :n, :n] = visible.tril() if causal else visible
            # Padded query rows see one key, to stay finite.
            mask[b, 0, n:, 0] = True

        def sdpa_padded():
            return F.scaled_dot_product_attention(pq, pk, pv, attn_mask=mask,
                                                  scale=scale,
                                                  enable_gqa=group > 1)
        padded = sdpa_padded()
        got = torch.cat([padded[b, :, :n].permute(1, 0, 2)
                         for b, n in enumerate(lengths)])
        errors["sdpa-padded"] = rel_err(got, ref)
        impls["sdpa-padded"] = timer(sdpa_padded)
        del pq, pk, pv, mask, padded

        for impl, ms in impls.items():
            if not errors[impl] < 2e-2:
                raise SystemExit(f"{case} {impl}: relative error "
                                 f"{errors[impl]:.2e}")
            row = {"case": case, "impl": impl, "ms": round(ms, 4),
                   "TFLOPs": round(flops / ms / 1e9, 1),
                   "rel_err": errors[impl]}
            rows.append(row)
            print(json.dumps(row))
        print(f"{case}: " + ", ".join(
            f"{impl} / kiln {ms / impls['kiln-packed']:.2f}"
            for impl, ms in impls.items() if impl != "kiln-packed"))
    if options.out:
        Path(options.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
