#!/usr/bin/env python3
"""Kiln as a torch.compile backend on modules whose attention is written by
hand, the ways real code writes it.

    python3 test/gpu/check_torch_compile.py [--out rows.json] [--time]

For each module of the zoo (bf16, random weights, no_grad): eager output,
``torch.compile(backend="kiln")`` output (Kiln's fusion decides the sites
from the graph Dynamo captures; ``kiln.dynamo.reports`` says which it
rewrote), and ``torch.compile`` default (Inductor's own attention patterns,
counted by its ``fuse_attention`` counter). Passes when Kiln rewrote every
site the module has and its output is within 2e-2 (relative, Frobenius)
of eager in bf16. With --time: forward times of the three, CUDA events.

Without kilnc on the machine, graphs whose reports are not in $KILN_CACHE
run on Inductor alone and are kept for `python3 -m kiln.dynamo
--compile-pending` (rows then say so and fail).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402
import kiln.dynamo  # noqa: E402

DEVICE = torch.device("cuda")
DTYPE = torch.bfloat16
MIN = torch.finfo(DTYPE).min


class Heads(nn.Module):
    """Projections shared by the zoo: fused QKV, output projection."""

    def __init__(self, hidden: int, heads: int, kv_heads: int = 0,
                 head_dim: int = 0, value_dim: int = 0):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads or heads
        self.head_dim = head_dim or hidden // heads
        self.value_dim = value_dim or self.head_dim
        self.q = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(hidden, self.kv_heads * self.value_dim, bias=False)
        self.o = nn.Linear(heads * self.value_dim, hidden, bias=False)

    def split(self, x: torch.Tensor, heads: int, dim: int) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, heads, dim).transpose(1, 2)

    def qkv(self, x: torch.Tensor):
        return (self.split(self.q(x), self.heads, self.head_dim),
                self.split(self.k(x), self.kv_heads, self.head_dim),
                self.split(self.v(x), self.kv_heads, self.value_dim))

    def merge(self, out: torch.Tensor) -> torch.Tensor:
        b, h, s, d = out.shape
        return self.o(out.transpose(1, 2).reshape(b, s, h * d))


class CausalTril(Heads):
    """GPT-2 style: a tril buffer, masked_fill with finfo.min, f32 softmax."""

    def __init__(self, hidden: int, heads: int, max_len: int):
        super().__init__(hidden, heads)
        self.register_buffer("tril", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool)))

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = q.shape[2]
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~self.tril[:s, :s], MIN)
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.merge(torch.matmul(probs, v))


class BertPadding(Heads):
    """BERT style: an additive padding mask from a 0/1 attention_mask."""

    def forward(self, x, attention_mask):
        q, k, v = self.qkv(x)
        extended = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * MIN
        scores = q @ k.transpose(-1, -2) * self.head_dim ** -0.5 + extended
        return self.merge(scores.softmax(-1) @ v)


class GqaRepeat(Heads):
    """Llama style GQA: K and V repeated with repeat_interleave, causal
    through an additive triu(-inf) mask."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        s = q.shape[2]
        causal = torch.full((s, s), float("-inf"), device=x.device, dtype=x.dtype).triu(1)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.head_dim ** -0.5 + causal
        return self.merge(torch.softmax(scores.float(), -1).to(x.dtype) @ v)


class CrossAttention(Heads):
    """Cross-attention over a memory of another length; masked_fill of a
    boolean key-padding mask."""

    def forward(self, x, memory, memory_mask):
        b, s, _ = x.shape
        q = self.split(self.q(x), self.heads, self.head_dim)
        k = self.split(self.k(memory), self.kv_heads, self.head_dim)
        v = self.split(self.v(memory), self.kv_heads, self.value_dim)
        scores = (q @ k.transpose(-2, -1)) * self.head_dim ** -0.5
        scores = scores.masked_fill(~memory_mask[:, None, None, :], MIN)
        return self.merge(scores.softmax(dim=-1) @ v)


class LatentValues(Heads):
    """Query/key head dim apart from the value head dim (MLA-like), causal
    through torch.where on an index comparison."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = q.shape[2]
        rows = torch.arange(s, device=x.device)
        visible = rows[None, :] <= rows[:, None]
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * self.head_dim ** -0.5
        scores = torch.where(visible, scores, torch.tensor(MIN, device=x.device, dtype=x.dtype))
        return self.merge(torch.einsum("bhqk,bhkd->bhqd", scores.softmax(-1), v))


Case = Tuple[str, nn.Module, Callable[[], Tuple[Any, ...]], int]


def zoo(batch: int, seq: int) -> List[Case]:
    hidden, heads = 1024, 16

    def tokens():
        return (torch.randn(batch, seq, hidden, device=DEVICE, dtype=DTYPE),)

    def padded():
        mask = torch.ones(batch, seq, device=DEVICE, dtype=torch.long)
        mask[0, : seq // 4] = 0  # left padding on the first sequence
        return tokens() + (mask,)

    def cross():
        memory = torch.randn(batch, seq // 2 + 3, hidden, device=DEVICE, dtype=DTYPE)
        memory_mask = torch.ones(batch, seq // 2 + 3, device=DEVICE, dtype=torch.bool)
        memory_mask[1, -7:] = False
        return tokens() + (memory, memory_mask)

    return [
        ("causal-tril", CausalTril(hidden, heads, seq), tokens, 1),
        ("bert-padding", BertPadding(hidden, heads), padded, 1),
        ("gqa-repeat-interleave", GqaRepeat(hidden, heads, kv_heads=4), tokens, 1),
        ("cross-attention", CrossAttention(hidden, heads), cross, 1),
        ("latent-values", LatentValues(hidden, heads, head_dim=96, value_dim=64), tokens, 1),
    ]


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm())


def time_ms(fn: Callable[[], Any], repeat: int = 20) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeat):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeat


def run_case(name: str, module: nn.Module, make: Callable, sites: int,
             timing: bool) -> Dict[str, Any]:
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    module = module.to(DEVICE, DTYPE).eval()
    inputs = make()
    row: Dict[str, Any] = {"model": name, "sites": sites}
    with torch.no_grad():
        want = module(*inputs)
        torch._dynamo.reset()
        start = len(kiln.dynamo.reports)
        compiled = torch.compile(module, backend="kiln")
        got = compiled(*inputs)
        entries = kiln.dynamo.reports[start:]
        rewritten = sum(len(e["rewritten"]) for e in entries)
        fused = sum(len(e["report"]["sites"]) for e in entries if e["report"])
        reasons = [e["fallback"] for e in entries if e["fallback"]]
        reasons += [r for e in entries for r in e["skipped"].values()]
        unfused = [u["reason"] for e in entries if e["report"] for u in e["report"]["unfused"]]
        error = relative_error(got, want)
        torch._dynamo.reset()
        counters.clear()
        inductor = torch.compile(module)
        inductor(*inputs)
        sdpa = int(counters["inductor"].get("fuse_attention", 0))
        row.update(fused=fused, rewritten=rewritten, rel_err=error,
                   inductor_sdpa=sdpa, reasons=reasons, unfused=unfused)
        row["ok"] = rewritten == sites and error < 2e-2
        if timing:
            row["eager_ms"] = time_ms(lambda: module(*inputs))
            row["inductor_ms"] = time_ms(lambda: inductor(*inputs))
            row["kiln_ms"] = time_ms(lambda: compiled(*inputs))
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--time", action="store_true")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=1000)
    options = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, cache "
          f"{kiln.transformers.cache_directory()}", flush=True)
    rows = []
    for name, module, make, sites in zoo(options.batch, options.seq):
        try:
            row = run_case(name, module, make, sites, options.time)
        except Exception as error:  # noqa: BLE001
            row = {"model": name, "ok": False, "error": f"{type(error).__name__}: {error}"[:2000]}
        rows.append(row)
        times = ""
        if "kiln_ms" in row:
            times = (f" eager {row['eager_ms']:.3f} ms, inductor {row['inductor_ms']:.3f}, "
                     f"kiln {row['kiln_ms']:.3f} ({row['inductor_ms'] / row['kiln_ms']:.2f}x)")
        detail = row.get("error") or (
            f"sites {row['sites']} fused {row['fused']} rewritten {row['rewritten']} "
            f"rel_err {row['rel_err']:.2e} inductor_sdpa {row['inductor_sdpa']}"
            + (f" reasons {row['reasons']}" if row["reasons"] else "")
            + (f" unfused {row['unfused']}" if row["unfused"] else ""))
        print(f"{name}: {'PASS' if row['ok'] else 'FAIL'} {detail}{times}", flush=True)
    if options.out:
        Path(options.out).write_text(json.dumps(rows, indent=1))
    failed = sum(not row["ok"] for row in rows)
    print(f"{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
