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
of the module's float64 output (eager bf16's own error is printed beside). With --time: forward times of the three, CUDA events.

Without kilnc on the machine, graphs whose reports are not in $KILN_CACHE
run on Inductor alone and are kept for `python3 -m kiln.dynamo
--compile-pending` (rows then say so and fail).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402
import kiln.dynamo  # noqa: E402
import kiln.transformers  # noqa: E402,F401 (the site cache)

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
    """GPT-2 style: a tril buffer sliced to the length, torch.where with
    finfo.min, f32 softmax."""

    def __init__(self, hidden: int, heads: int, max_len: int):
        super().__init__(hidden, heads)
        self.register_buffer("tril", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool)))

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = q.shape[2]
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = torch.where(self.tril[:s, :s], scores,
                             torch.full([], MIN, dtype=scores.dtype, device=scores.device))
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.merge(torch.matmul(probs, v))


class BertMaskedFill(Heads):
    """BERT-style padding through masked_fill of -inf where a 0/1
    attention_mask is 0."""

    def forward(self, x, attention_mask):
        q, k, v = self.qkv(x)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
        return self.merge(torch.matmul(scores.softmax(dim=-1), v))


class T5RelativeBias(Heads):
    """T5 style: no scaling, a learned relative-position bias from bucketed
    distances (bidirectional buckets, log-spaced far away) added to the
    scores, plus an additive padding mask."""

    def __init__(self, hidden: int, heads: int, buckets: int = 32, max_distance: int = 128):
        super().__init__(hidden, heads)
        self.buckets, self.max_distance = buckets, max_distance
        self.relative = nn.Embedding(buckets, heads)

    def bucket(self, relative: torch.Tensor) -> torch.Tensor:
        half = self.buckets // 2
        out = (relative > 0).long() * half
        distance = relative.abs()
        exact = half // 2
        far = exact + (torch.log(distance.float().clamp(min=1) / exact)
                       / math.log(self.max_distance / exact) * (half - exact)).long()
        far = torch.minimum(far, torch.full_like(far, half - 1))
        return out + torch.where(distance < exact, distance, far)

    def forward(self, x, attention_mask):
        q, k, v = self.qkv(x)
        s = q.shape[2]
        positions = torch.arange(s, device=x.device)
        buckets = self.bucket(positions[None, :] - positions[:, None])
        bias = self.relative(buckets).permute(2, 0, 1)[None]  # [1, H, S, S]
        extended = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * MIN
        scores = torch.matmul(q, k.transpose(3, 2)) + (bias + extended)
        probs = F.softmax(scores.float(), dim=-1).type_as(scores)
        return self.merge(torch.matmul(probs, v))


class AlibiBaddbmm(Heads):
    """ALiBi through baddbmm on [B·H, S, D] operands (BLOOM's form), a
    boolean causal mask filled with finfo.min, f32 softmax, bmm with the
    values. The bias is the slope times the distance to the query (the
    paper's form, -m·(i - j)): BLOOM's slope times the key's position
    gives the same softmax in exact arithmetic, but in bf16 scores of
    hundreds lose whole units near the diagonal (eager bf16 itself is then
    0.35 off its float64 output at 1k tokens), which measures nothing."""

    def __init__(self, hidden: int, heads: int):
        super().__init__(hidden, heads)
        slopes = torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)])
        self.register_buffer("slopes", slopes)

    def forward(self, x):
        q, k, v = self.qkv(x)
        b, h, s, d = q.shape
        positions = torch.arange(s, device=x.device, dtype=torch.float32)
        distance = positions[None, :] - positions[:, None]  # j - i
        alibi = (self.slopes[:, None, None] * distance[None]).to(x.dtype)
        alibi = alibi[None].expand(b, h, s, s).reshape(b * h, s, s)
        scores = torch.baddbmm(alibi, q.reshape(b * h, s, d),
                               k.reshape(b * h, s, d).transpose(1, 2),
                               beta=1.0, alpha=d ** -0.5)
        hidden = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.view(b, h, s, s).masked_fill(hidden, MIN)
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(x.dtype)
        out = torch.bmm(probs.view(b * h, s, s), v.reshape(b * h, s, d))
        return self.merge(out.view(b, h, s, d))


class SoftcapWindow(Heads):
    """Gemma 2 style written out: scores soft-capped as c·tanh(s/c), then a
    causal sliding window from index comparisons through torch.where."""

    def __init__(self, hidden: int, heads: int, window: int, cap: float = 50.0):
        super().__init__(hidden, heads)
        self.window, self.cap = window, cap

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = q.shape[2]
        scores = torch.matmul(q, k.transpose(2, 3)) * self.head_dim ** -0.5
        scores = torch.tanh(scores / self.cap) * self.cap
        rows = torch.arange(s, device=x.device)
        distance = rows[:, None] - rows[None, :]
        visible = (distance >= 0) & (distance < self.window)
        scores = torch.where(visible, scores, torch.finfo(scores.dtype).min)
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(x.dtype)
        return self.merge(torch.matmul(probs, v))


class FusedQkv(nn.Module):
    """One Linear for Q, K and V, split with chunk (or split), heads by
    view + permute, causal through a boolean tril from torch.ones."""

    def __init__(self, hidden: int, heads: int, use_split: bool = False):
        super().__init__()
        self.heads, self.head_dim, self.use_split = heads, hidden // heads, use_split
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=True)
        self.o = nn.Linear(hidden, hidden, bias=True)

    def forward(self, x):
        b, s, hidden = x.shape
        fused = self.qkv(x)
        parts = fused.split(hidden, dim=2) if self.use_split else fused.chunk(3, dim=-1)
        q, k, v = (t.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3) for t in parts)
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(self.head_dim))
        keep = torch.ones(s, s, device=x.device, dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
        out = scores.softmax(dim=-1) @ v
        return self.o(out.permute(0, 2, 1, 3).reshape(b, s, hidden))


class GqaExpand(Heads):
    """Hugging Face's repeat_kv: K and V expanded over a new group axis and
    reshaped to the query heads; an additive padding mask, no causality."""

    def forward(self, x, attention_mask):
        q, k, v = self.qkv(x)
        b, kv_heads, s, d = k.shape
        group = self.heads // kv_heads

        def repeat(t):
            t = t[:, :, None, :, :].expand(b, kv_heads, group, s, t.shape[-1])
            return t.reshape(b, kv_heads * group, s, t.shape[-1])

        extended = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * MIN
        scores = torch.matmul(q, repeat(k).transpose(2, 3)) * self.head_dim ** -0.5 + extended
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(x.dtype)
        return self.merge(torch.matmul(probs, repeat(v)))


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
        memory_mask[-1, -7:] = False  # the last sequence (batch may be 1)
        return tokens() + (memory, memory_mask)

    return [
        ("causal-tril", CausalTril(hidden, heads, seq), tokens, 1),
        ("bert-padding", BertPadding(hidden, heads), padded, 1),
        ("bert-masked-fill", BertMaskedFill(hidden, heads), padded, 1),
        ("t5-relative-bias", T5RelativeBias(hidden, heads), padded, 1),
        ("alibi-baddbmm", AlibiBaddbmm(hidden, heads), tokens, 1),
        ("softcap-window", SoftcapWindow(hidden, heads, window=max(seq // 4, 64)), tokens, 1),
        ("fused-qkv-chunk", FusedQkv(hidden, heads), tokens, 1),
        ("fused-qkv-split", FusedQkv(hidden, heads, use_split=True), tokens, 1),
        ("gqa-repeat-interleave", GqaRepeat(hidden, heads, kv_heads=4), tokens, 1),
        ("gqa-expand", GqaExpand(hidden, heads, kv_heads=4), padded, 1),
        ("cross-attention", CrossAttention(hidden, heads), cross, 1),
        ("latent-values", LatentValues(hidden, heads, head_dim=96, value_dim=64), tokens, 1),
    ]


def case(name: str, batch: int, seq: int) -> Case:
    """The zoo's case `name` at `batch` × `seq`."""
    return next(c for c in zoo(batch, seq) if c[0] == name)


#: The names of the hand-written modules, in zoo order (main() checks it
#: against the zoo).
NAMES = [
    "causal-tril", "bert-padding", "bert-masked-fill", "t5-relative-bias",
    "alibi-baddbmm", "softcap-window", "fused-qkv-chunk", "fused-qkv-split",
    "gqa-repeat-interleave", "gqa-expand", "cross-attention", "latent-values"]


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm())


def time_interleaved(functions: Dict[str, Callable[[], Any]], rounds: int = 7,
                     round_ms: float = 20.0) -> Dict[str, float]:
    """Milliseconds per call of each function, timed in turns: each round
    times every function over enough back-to-back calls to last about
    `round_ms` (CUDA events), and each function's figure is its median
    round. Turns spread drift (clocks, other work on the host) over all of
    them alike; the median drops a round a pause spoilt."""
    calls: Dict[str, int] = {}
    for name, fn in functions.items():
        once = time_ms(fn, 2)
        calls[name] = max(3, min(2000, int(round_ms / max(once, 1e-3))))
    samples: Dict[str, List[float]] = {name: [] for name in functions}
    for _ in range(rounds):
        for name, fn in functions.items():
            samples[name].append(time_ms(fn, calls[name], warm=1))
    return {name: sorted(values)[len(values) // 2] for name, values in samples.items()}


def time_ms(fn: Callable[[], Any], repeat: int = 20, warm: int = 3) -> float:
    for _ in range(warm):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeat):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeat


#: Tokens (batch x sequence) from which the float64 reference runs a
#: sequence at a time: at b16 x s4096 its whole-batch scores alone would
#: take 32 GiB (16 heads, 8 bytes a score).
REFERENCE_CHUNKED_TOKENS = 1 << 15


def reference(module: nn.Module, inputs: Tuple[Any, ...]) -> torch.Tensor:
    """The module's output in float64 (weights and floating inputs): what
    both eager bf16 and Kiln are measured against. From
    REFERENCE_CHUNKED_TOKENS tokens it runs one sequence at a time (every
    input whose first axis is the batch is sliced; the zoo's modules treat
    sequences independently) and concatenates the outputs."""
    import copy

    wide = copy.deepcopy(module).double()
    inputs = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point()
                   else x for x in inputs)
    first = inputs[0]
    batch = first.shape[0] if isinstance(first, torch.Tensor) and first.dim() >= 2 else 1
    tokens = batch * first.shape[1] if batch > 1 else 0
    if tokens < REFERENCE_CHUNKED_TOKENS:
        return wide(*inputs)

    def row(x: Any, b: int) -> Any:
        if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == batch:
            return x[b:b + 1]
        return x
    return torch.cat([wide(*[row(x, b) for x in inputs]) for b in range(batch)])


def run_case(name: str, module: nn.Module, make: Callable, sites: int,
             timing: bool, inductor_too: bool = True) -> Dict[str, Any]:
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    module = module.to(DEVICE, DTYPE).eval()
    inputs = make()
    row: Dict[str, Any] = {"model": name, "sites": sites}
    with torch.no_grad():
        want = module(*inputs)
        exact = reference(module, inputs)
        torch._dynamo.reset()
        start = len(kiln.dynamo.reports)
        # Every site rewritten, dense per-head biases too (by default the
        # backend leaves those to Inductor, which is faster there) and
        # wherever Inductor's own code measures faster: the check is that
        # each rewrite is exact. bench_torch_compile.py times the defaults.
        compiled = torch.compile(module, backend="kiln",
                                 options={"kiln": {"dense_bias": "kiln",
                                                   "choose": "kiln"}})
        got = compiled(*inputs)
        entries = kiln.dynamo.reports[start:]
        rewritten = sum(len(e["rewritten"]) for e in entries)
        fused = sum(len(e["report"]["sites"]) for e in entries if e["report"])
        reasons = [e["fallback"] for e in entries if e["fallback"]]
        reasons += [r for e in entries for r in e["skipped"].values()]
        unfused = [u["reason"] for e in entries if e["report"] for u in e["report"]["unfused"]]
        error = relative_error(got, exact)
        eager_error = relative_error(want, exact)
        sdpa = None
        if inductor_too or timing:
            torch._dynamo.reset()
            counters.clear()
            inductor = torch.compile(module)
            inductor(*inputs)
            sdpa = int(counters["inductor"].get("fuse_attention", 0))
        row.update(fused=fused, rewritten=rewritten, rel_err=error,
                   eager_rel_err=eager_error,
                   kiln_vs_eager=relative_error(got, want),
                   inductor_sdpa=sdpa, reasons=reasons, unfused=unfused,
                   onnx=sorted({str(e.get("onnx")) for e in entries if e.get("onnx")}))
        row["ok"] = rewritten == sites and error < 2e-2
        if timing:
            row["eager_ms"] = time_ms(lambda: module(*inputs))
            row["inductor_ms"] = time_ms(lambda: inductor(*inputs))
            row["kiln_ms"] = time_ms(lambda: compiled(*inputs))
    return row


def run_buffer_guard(batch: int, seq: int) -> Dict[str, Any]:
    """A mask buffer read at compile time (GPT-Neo's band, wild_zoo's
    neo-buffer-band) and then changed in place: the compiled graph must
    see the change (it runs uncompiled, with a warning) and agree with
    eager before and after."""
    import warnings

    import wild_zoo

    torch.manual_seed(0)
    module = wild_zoo.NeoBufferBand(1024, 16, 2 * seq, window=seq // 4).to(DEVICE, DTYPE).eval()
    x = torch.randn(batch, seq, 1024, device=DEVICE, dtype=DTYPE)
    row: Dict[str, Any] = {"model": "neo-buffer-band (buffer changed)"}
    with torch.no_grad():
        torch._dynamo.reset()
        start = len(kiln.dynamo.reports)
        compiled = torch.compile(module, backend="kiln", options={"kiln": {"choose": "kiln"}})
        before = relative_error(compiled(x), module(x))
        entries = kiln.dynamo.reports[start:]
        read = [e.get("constant_buffers") for e in entries]
        rewritten = sum(len(e["rewritten"]) for e in entries)
        module.bias.copy_(torch.tril(torch.ones_like(module.bias)))  # the window dropped
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = compiled(x)
        after = relative_error(got, module(x))
        warned = any("buffer read at compile time changed" in str(w.message) for w in caught)
    row.update(rewritten=rewritten, constant_buffers=read, rel_err_before=before,
               rel_err_after=after, warned=warned)
    row["ok"] = (rewritten == 1 and any(read) and before < 2e-2 and after < 2e-2 and warned)
    return row


def run_dynamic(name: str, module: nn.Module, makes: List[Callable],
                sites: int) -> Dict[str, Any]:
    """torch.compile(backend="kiln", dynamic=True) on inputs of several
    lengths: one graph compiled for all of them (Kiln's sites and the
    rewrite reused), every output within bf16 tolerance of eager."""
    torch.manual_seed(0)
    module = module.to(DEVICE, DTYPE).eval()
    row: Dict[str, Any] = {"model": f"{name} (dynamic)", "sites": sites}
    with torch.no_grad():
        torch._dynamo.reset()
        start = len(kiln.dynamo.reports)
        compiled = torch.compile(module, backend="kiln", dynamic=True,
                                 options={"kiln": {"choose": "kiln"}})
        errors, graphs = [], []
        for make in makes:
            inputs = make()
            errors.append(relative_error(compiled(*inputs), reference(module, inputs)))
            graphs.append(len(kiln.dynamo.reports) - start)
        entries = kiln.dynamo.reports[start:]
    rewritten = sum(len(e["rewritten"]) for e in entries)
    reasons = [e["fallback"] for e in entries if e["fallback"]]
    reasons += [r for e in entries for r in e["skipped"].values()]
    # A graph whose shape computations kilnc must bind is rewritten once per
    # length (its sites, compiled for every size, are reused): each length
    # must then have been served by Kiln.
    per_shape = [e for e in entries if e.get("per_shape")]
    for entry in per_shape:
        reasons += [s["fallback"] for s in entry["shapes"] if s["fallback"]]
    row.update(fused=sum(len(e["report"]["sites"]) for e in entries if e["report"]),
               rewritten=rewritten, rel_err=max(errors), errors=errors,
               graphs=graphs, dynamic=[e["dynamic"] or "per shape" for e in entries],
               per_shape=[[len(s["rewritten"]) for s in e["shapes"]] for e in per_shape],
               reasons=reasons, unfused=[], inductor_sdpa=None)
    # One Dynamo graph for every length: the later lengths compiled no new
    # graph, and no length ran without Kiln.
    row["ok"] = (rewritten == sites and max(errors) < 2e-2
                 and graphs[-1] == graphs[0] and all(row["dynamic"])
                 and all(all(row_ == sites for row_ in shapes) for shapes in row["per_shape"])
                 and all(len(shapes) == len(makes) for shapes in row["per_shape"]))
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--time", action="store_true")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=1000)
    parser.add_argument("--no-inductor", action="store_true",
                        help="skip torch.compile default (its SDPA count)")
    parser.add_argument("--only", help="comma-separated module names")
    parser.add_argument("--zoo", choices=("hand", "research", "wild", "all"), default="hand",
                        help="hand: this file's zoo; research: research_zoo.py's "
                        "(forms this zoo does not hold); wild: wild_zoo.py's "
                        "(forms neither holds, some Kiln must leave alone); all: the three")
    parser.add_argument("--dynamic", default="causal-tril,bert-padding,alibi-baddbmm,"
                        "gqa-expand,latent-values,cross-attention",
                        help="modules also run under dynamic=True at three lengths "
                        "(none: no module)")
    options = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, cache "
          f"{kiln.transformers.cache_directory()}", flush=True)
    rows = []
    cases = zoo(options.batch, options.seq)
    assert [c[0] for c in cases] == NAMES, "NAMES is not the zoo's names"
    if options.zoo != "hand":
        import research_zoo
        import wild_zoo

        others = {"research": research_zoo.zoo(options.batch, options.seq, DEVICE, DTYPE),
                  "wild": wild_zoo.zoo(options.batch, options.seq, DEVICE, DTYPE)}
        cases = (others[options.zoo] if options.zoo in others
                 else cases + others["research"] + others["wild"])
    only = set(options.only.split(",")) if options.only else None
    dynamic = [name for name in options.dynamic.split(",") if name and name != "none"]
    unknown = sorted(set(dynamic) - set(NAMES))
    if unknown:
        print(f"check_torch_compile: --dynamic: no module {unknown[0]!r}", file=sys.stderr)
        return 2
    for name, module, make, sites in cases:
        if only and name not in only:
            continue
        began = time.perf_counter()
        try:
            row = run_case(name, module, make, sites, options.time,
                           not options.no_inductor)
        except Exception as error:  # noqa: BLE001
            row = {"model": name, "ok": False, "error": f"{type(error).__name__}: {error}"[:2000]}
        rows.append(row)
        times = ""
        if "kiln_ms" in row:
            times = (f" eager {row['eager_ms']:.3f} ms, inductor {row['inductor_ms']:.3f}, "
                     f"kiln {row['kiln_ms']:.3f} ({row['inductor_ms'] / row['kiln_ms']:.2f}x)")
        detail = row.get("error") or (
            f"sites {row['sites']} fused {row['fused']} rewritten {row['rewritten']} "
            f"rel_err {row['rel_err']:.2e} (eager bf16 {row['eager_rel_err']:.2e}) "
            f"inductor_sdpa {row['inductor_sdpa']}"
            + (f" onnx {row['onnx']}" if row.get("onnx") else "")
            + (f" reasons {row['reasons']}" if row["reasons"] else "")
            + (f" unfused {row['unfused']}" if row["unfused"] else ""))
        row["wall_s"] = time.perf_counter() - began
        print(f"{name}: {'PASS' if row['ok'] else 'FAIL'} {detail}{times} "
              f"[{row['wall_s']:.0f} s]", flush=True)
    if options.zoo in ("wild", "all") and (not only or "neo-buffer-band" in only):
        try:
            row = run_buffer_guard(options.batch, options.seq)
        except Exception as error:  # noqa: BLE001
            row = {"model": "neo-buffer-band (buffer changed)", "ok": False,
                   "error": f"{type(error).__name__}: {error}"[:2000]}
        rows.append(row)
        print(f"{row['model']}: {'PASS' if row['ok'] else 'FAIL'} "
              f"{row.get('error') or {k: v for k, v in row.items() if k != 'model'}}",
              flush=True)
    lengths = [options.seq, options.seq - 37, options.seq + 129]
    for name in dynamic:
        began = time.perf_counter()
        cases = [case(name, options.batch, n) for n in lengths]
        # The module sized past the longest length (a causal buffer, say, as
        # GPT-2's holds n_positions): no length is its edge case.
        _, module, _, sites = case(name, options.batch, 2 * max(lengths))
        try:
            row = run_dynamic(name, module, [case[2] for case in cases], sites)
        except Exception as error:  # noqa: BLE001
            row = {"model": f"{name} (dynamic)", "ok": False,
                   "error": f"{type(error).__name__}: {error}"[:2000]}
        rows.append(row)
        detail = row.get("error") or (
            f"lengths {lengths} rewritten {row['rewritten']} of {row['sites']} "
            f"errors {[f'{e:.1e}' for e in row['errors']]} graphs after each "
            f"length {row['graphs']} dynamic {row['dynamic']}"
            + (f" sites rewritten per length {row['per_shape']}" if row["per_shape"] else "")
            + (f" reasons {row['reasons']}" if row["reasons"] else ""))
        print(f"{row['model']}: {'PASS' if row['ok'] else 'FAIL'} {detail} "
              f"[{time.perf_counter() - began:.0f} s]", flush=True)
    if options.out:
        Path(options.out).write_text(json.dumps(rows, indent=1))
    failed = sum(not row["ok"] for row in rows)
    print(f"{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
