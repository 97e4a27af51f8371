#!/usr/bin/env python3
"""Checks Kiln's PyTorch custom ops on the GPU.

    python3 test/gpu/check_torch.py PACKAGE_DIR

PACKAGE_DIR: `kilnc examples/llama_sites.mlir -o PACKAGE_DIR` (a causal
prefill site, GQA 8/2, d128, bf16, and a paged decode site, pages of 16).
Checks that `torch.ops.kiln.attention` and `torch.ops.kiln.paged_attention`
give the sites' own results bit for bit; that their fake implementations give
the right shapes on the meta device and under FakeTensorMode; that
`torch.compile(fullgraph=True)` traces a function calling them (inductor) with
the same results; and that a CUDA graph capturing them replays with new
inputs and key counts written into its buffers.
"""

from __future__ import annotations

import math
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402

import kiln  # noqa: E402
import kiln.torch_ops as kops  # noqa: E402

RESULTS = []


def check(name, fn):
    try:
        fn()
        RESULTS.append((name, True, ""))
        print(f"PASS {name}", flush=True)
    except Exception as error:  # noqa: BLE001
        RESULTS.append((name, False, repr(error)))
        print(f"FAIL {name}: {error!r}", flush=True)
        traceback.print_exc()


def main() -> int:
    package = kiln.load(sys.argv[1])
    kops.register(package)
    sites = {s.function: s for s in package.sites}
    prefill, decode = sites["prefill"], sites["decode"]
    device = torch.device("cuda")
    torch.manual_seed(0)
    bf16 = torch.bfloat16
    q = torch.randn(2, 8, 300, 128, dtype=bf16, device=device)
    k = torch.randn(2, 2, 300, 128, dtype=bf16, device=device)
    v = torch.randn(2, 2, 300, 128, dtype=bf16, device=device)
    batch, page, max_pages = 3, 16, 20
    num_pages = batch * max_pages + 3
    kc = torch.randn(num_pages, page, 2, 128, dtype=bf16, device=device)
    vc = torch.randn_like(kc)
    table = torch.randperm(num_pages, device=device)[: batch * max_pages]
    table = table.view(batch, max_pages).to(torch.int32)
    lens = torch.tensor([1, 150, 320], dtype=torch.int32, device=device)
    qd = torch.randn(batch, 8, 1, 128, dtype=bf16, device=device)
    ws = torch.empty(max(decode.workspace_size(batch, 1, max_pages * page), 16),
                     dtype=torch.uint8, device=device)

    def eager_ops():
        got = kops.attention(prefill, q, k, v)
        want = prefill.attention(q, k, v)
        assert torch.equal(got, want), "attention op differs from the site"
        got = kops.paged_attention(decode, qd, kc, vc, table, lens, workspace=ws)
        want = decode.paged_attention(qd, kc, vc, table, lens, workspace=ws)
        assert torch.equal(got, want), "paged op differs from the site"
        # Against float64 for the paged op, one sequence.
        b, n = 2, int(lens[2])
        keys = torch.arange(n, device=device)
        pages = table[b, keys // page].long()
        kk = kc[pages, keys % page].double().permute(1, 0, 2).repeat_interleave(4, 0)
        vv = vc[pages, keys % page].double().permute(1, 0, 2).repeat_interleave(4, 0)
        s = (qd[b].double() @ kk.transpose(-1, -2)) * decode.scale
        ref = torch.softmax(s, -1) @ vv
        rel = float((got[b].double() - ref).norm() / ref.norm())
        assert rel < 1e-2, f"paged op relative error {rel}"

    def fake_shapes():
        meta = dict(device="meta", dtype=bf16)
        out = torch.ops.kiln.attention(
            torch.empty(2, 8, 5, 128, **meta), torch.empty(2, 2, 7, 128, **meta),
            torch.empty(2, 2, 7, 64, **meta), None, None, None,
            kops.handle(prefill), 0)
        assert out.shape == (2, 8, 5, 64) and out.device.type == "meta", out.shape
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            fq = torch.empty(4, 8, 3, 128, dtype=bf16, device=device)
            fk = torch.empty(50, 16, 2, 128, dtype=bf16, device=device)
            ft = torch.empty(4, 7, dtype=torch.int32, device=device)
            fl = torch.empty(4, dtype=torch.int32, device=device)
            out = torch.ops.kiln.paged_attention(fq, fk, fk, ft, fl, None,
                                                 kops.handle(decode), 0)
            assert out.shape == (4, 8, 3, 128), out.shape

    def compiled():
        def layer(q, k, v, qd, lens):
            a = kops.attention(prefill, q * 1.0, k, v)
            d = kops.paged_attention(decode, qd, kc, vc, table, lens,
                                     workspace=ws)
            return a.float().sum(-1), d * 2
        torch._dynamo.reset()
        fn = torch.compile(layer, fullgraph=True)
        got = fn(q, k, v, qd, lens)
        want = layer(q, k, v, qd, lens)
        for g, w in zip(got, want):
            assert torch.allclose(g.float(), w.float(), rtol=1e-3, atol=1e-3), \
                float((g.float() - w.float()).abs().max())

    def cuda_graph():
        package.prepare()
        static_q = qd.clone()
        static_lens = lens.clone()
        kops.paged_attention(decode, static_q, kc, vc, table, static_lens,
                             workspace=ws)  # warm-up
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = kops.paged_attention(decode, static_q, kc, vc, table,
                                       static_lens, workspace=ws)
            pre = kops.attention(prefill, q, k, v)
        new_q = torch.randn_like(qd)
        new_lens = torch.tensor([300, 17, 64], dtype=torch.int32, device=device)
        static_q.copy_(new_q)
        static_lens.copy_(new_lens)
        graph.replay()
        torch.cuda.synchronize()
        want = decode.paged_attention(new_q, kc, vc, table, new_lens, workspace=ws)
        assert torch.equal(out, want), "graph replay differs"
        assert torch.equal(pre, prefill.attention(q, k, v)), "graph prefill differs"

    check("eager ops equal the sites (and float64 for the paged op)", eager_ops)
    check("fake implementations: meta device and FakeTensorMode", fake_shapes)
    check("torch.compile(fullgraph=True) through both ops", compiled)
    check("CUDA graph replay with new q and kv_lens", cuda_graph)
    failed = [r for r in RESULTS if not r[1]]
    print(f"\n{len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
