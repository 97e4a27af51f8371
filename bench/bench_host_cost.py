#!/usr/bin/env python3
"""The host cost of one Kiln call from PyTorch, and the check of the ops'
launch path that skips the checks a signature already passed.

    python3 bench/bench_host_cost.py [--out rows.json]

1. Checks: sites compiled from bench/host_cost_sites.mlir (bf16 causal GQA,
   an additive f32 mask, a run-time scale), each through
   ``torch.ops.kiln.attention`` three times per shape with fresh random
   inputs (the first call checks and plans, the later ones only set
   pointers) and against float64; the op's output bit for bit equal to
   ``Site.attention``'s on the same inputs; a non-contiguous query; a
   decode shape that splits the keys (the op's own workspace).
2. Host cost: microseconds per call at a shape too small to be bound by
   the GPU (b1, 8 heads, 16 queries and keys), back to back with one
   synchronisation at the end: ``Site.attention`` (the full checks every
   call), ``torch.ops.kiln.attention`` (checks once per signature), and
   ``torch.nn.functional.scaled_dot_product_attention`` beside them.
3. The backend's timed choice (kiln.choice) on a hand-written causal
   attention module at 32 and at 2048 tokens: which path each site took
   and the times it measured.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402
import kiln.dynamo  # noqa: E402
import kiln.torch_ops as kops  # noqa: E402

DEVICE = "cuda"


def reference(q, k, v, scale, causal=False, mask=None):
    """Attention in float64, K and V repeated over each query head group."""
    groups = q.shape[1] // k.shape[1]
    q, k, v = q.double(), k.double(), v.double()
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    s = scale * q @ k.transpose(-1, -2)
    if mask is not None:
        s = s + mask.double()
    if causal:
        rows, cols = s.shape[-2:]
        hidden = torch.ones(rows, cols, dtype=torch.bool, device=s.device).triu(
            cols - rows + 1)
        s = s.masked_fill(hidden, float("-inf"))
    return s.softmax(-1) @ v


def relative(a, b) -> float:
    return float((a.double() - b).norm() / b.norm())


def check(package) -> List[Dict[str, Any]]:
    rows = []
    counts = kops.launch_counts()
    # kilnc names a package's sites attention_N in the order of the source.
    causal, masked, scaled = (package.site(f"attention_{n}") for n in range(3))
    for batch, q_len, kv_len in ((2, 77, 77), (1, 300, 300), (3, 1, 8192), (1, 129, 4000)):
        for site, kind in ((causal, "causal"), (masked, "mask"), (scaled, "scale")):
            if kind == "causal" and q_len > kv_len:
                continue
            errors, equal = [], True
            for call in range(3):
                q = torch.randn(batch, 8, q_len, 64, device=DEVICE, dtype=torch.bfloat16)
                k = torch.randn(batch, 2, kv_len, 64, device=DEVICE, dtype=torch.bfloat16)
                v = torch.randn_like(k)
                mask = factor = None
                scale = site.scale
                if kind == "mask":
                    mask = torch.where(torch.rand(batch, 1, 1, kv_len, device=DEVICE) < 0.2,
                                       -1e4, 0.0).float()
                    mask[..., 0] = 0.0
                if kind == "scale":
                    factor = torch.tensor([0.5 + call], device=DEVICE)
                    scale = site.scale * (0.5 + call)
                if call == 2:  # a query that is a transposed view
                    q = q.transpose(1, 2).contiguous().transpose(1, 2)
                out = torch.ops.kiln.attention(q, k, v, mask, None, None,
                                               kops.handle(site), 0, factor)
                want = reference(q, k, v, scale, causal=kind != "mask", mask=mask)
                errors.append(relative(out, want))
                full = site.attention(q, k, v, mask=mask, scale_factor=factor)
                equal = equal and bool(torch.equal(out, full))
            row = dict(check=kind, batch=batch, q_len=q_len, kv_len=kv_len,
                       rel_err=max(errors), equal_to_site=equal,
                       ok=max(errors) < 2e-2 and equal)
            print(json.dumps(row))
            rows.append(row)
    # The second call of each signature is launched by the C kernel where
    # it is registered: the bit-equality above then checks it.
    planned, checked = (a - b for a, b in zip(kops.launch_counts(), counts))
    row = dict(check="C kernel", registered=kops._c_kernel is not None,
               planned=planned, checked=checked,
               ok=kops._c_kernel is None or planned > 0)
    print(json.dumps(row))
    rows.append(row)
    return rows


def per_call_us(function, calls: int = 2000) -> float:
    for _ in range(20):
        function()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def host_cost(package) -> List[Dict[str, Any]]:
    site = package.site("attention_0")  # causal GQA
    index = kops.handle(site)
    q = torch.randn(1, 8, 16, 64, device=DEVICE, dtype=torch.bfloat16)
    k = torch.randn(1, 2, 16, 64, device=DEVICE, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    kk, vv = k.repeat_interleave(4, 1), v.repeat_interleave(4, 1)
    launcher = kops._launcher(index)
    torch.ops.kiln.attention(q, k, v, None, None, None, index, 0)  # plans it
    args, out = site.attention_args(q, k, v)
    stream = kops._raw_stream(q.device.index)
    noop = _noop_op()
    variants = {
        "Site.attention": lambda: site.attention(q, k, v),
        "torch.ops.kiln.attention": lambda: torch.ops.kiln.attention(
            q, k, v, None, None, None, index, 0),
        # The Python launch the C kernel hands unplanned calls to (and the
        # op's only kernel under KILN_TORCH_LAUNCH=python).
        "torch.ops.kiln.attention_checked (Python launch)":
            lambda: torch.ops.kiln.attention_checked(q, k, v, None, None, None,
                                                     index, 0),
        # The parts of the op's call, to see where its time goes.
        "_Launcher.attention (no dispatcher)": lambda: launcher.attention(
            q, k, v, None, None, None, 0, None),
        "Site.launch (ctypes and the C launch)": lambda: site.launch(args, stream),
        "dispatcher to a Python op doing nothing": lambda: noop(q, k, v, None, None,
                                                              None, index, 0),
        "sdpa": lambda: F.scaled_dot_product_attention(q, kk, vv, is_causal=True),
        "empty (allocation only)": lambda: torch.empty_like(q),
    }
    rows = []
    for name, function in variants.items():
        before = kops.launch_counts()
        row = dict(host=name, us_per_call=round(per_call_us(function), 2))
        after = kops.launch_counts()
        row["c_kernel_planned"] = after[0] - before[0]
        row["c_kernel_checked"] = after[1] - before[1]
        print(json.dumps(row))
        rows.append(row)
    return rows


def _noop_op():
    """An op with kiln::attention's schema whose Python kernel returns its
    query: the dispatcher's own hop into Python, measured apart."""
    library = torch.library.Library("kilnbench", "FRAGMENT")
    library.define("noop(Tensor q, Tensor k, Tensor v, Tensor? mask, Tensor? bias, "
                   "Tensor? workspace, int site, int num_splits) -> Tensor")
    library.impl("noop", lambda q, k, v, mask, bias, workspace, site, splits: q, "CUDA")
    _noop_op.library = library  # lives as long as the process
    return torch.ops.kilnbench.noop


class Causal(torch.nn.Module):
    def __init__(self, width: int = 512, heads: int = 8) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        y = scores.softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, s, -1))


def choices() -> List[Dict[str, Any]]:
    rows = []
    module = Causal().to(DEVICE, torch.bfloat16).eval()
    for seq in (32, 2048):
        x = torch.randn(2, seq, 512, device=DEVICE, dtype=torch.bfloat16)
        torch._dynamo.reset()
        start = len(kiln.dynamo.reports)
        began = time.perf_counter()
        with torch.no_grad():
            compiled = torch.compile(module, backend="kiln")
            got = compiled(x)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - began
            want = module.double()(x.double())
            module.to(torch.bfloat16)
        entries = kiln.dynamo.reports[start:]
        row = dict(choice=seq, compile_s=round(seconds, 2),
                   rewritten=sum(len(e["rewritten"]) for e in entries),
                   choices=[c for e in entries for c in e.get("choices", {}).values()],
                   fallback=[e["fallback"] for e in entries if e["fallback"]],
                   sites=sum(len((e["report"] or {}).get("sites", [])) for e in entries),
                   unfused=[u for e in entries
                            for u in (e["report"] or {}).get("unfused", [])],
                   skipped=[r for e in entries for r in e["skipped"].values()],
                   rel_err=relative(got, want))
        row["ok"] = row["rel_err"] < 3e-2 and bool(row["choices"])
        print(json.dumps(row))
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        package = kiln.compile(ROOT / "bench" / "host_cost_sites.mlir",
                               Path(directory) / "package")
        kops.register(package)
        rows = check(package) + host_cost(package)
    rows += choices()
    failed = [row for row in rows if row.get("ok") is False]
    if options.out:
        Path(options.out).write_text(json.dumps(rows, indent=1))
    print(f"{len(failed)} checks failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
