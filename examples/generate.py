#!/usr/bin/env python3
"""Batched greedy generation with a Llama-style decoder on Kiln's kernels.

    python3 examples/generate.py [--batch 4] [--steps 32] [--layers 4]

A small Llama-style model with random weights (no downloads): RMSNorm, rotary
embeddings, grouped-query attention (8 query heads over 2 KV heads, head dim
128), a SwiGLU MLP; bf16 on one CUDA GPU. Kiln compiles the attention of
`examples/llama_sites.mlir` (`kiln.compile`, which runs kilnc): a causal
prefill site and a paged decode site over a KV cache of pages of 16 tokens.
Each prompt is prefilled on its own (its keys and values written into pages
scattered at random over the cache), then the batch decodes together: every
decode step (embedding, all layers, cache writes, paged attention through the
`kiln::paged_attention` custom op, logits, argmax) is captured once in a CUDA
graph and replayed with the next tokens, positions and key counts written
into the captured buffers.

Checked: the graph's tokens equal those of the same steps launched eagerly;
against the same model run with PyTorch's SDPA on contiguous caches, the
first step's logits agree within bf16 rounding and the greedy tokens are
reported (random weights make near-ties, so late tokens may differ).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402
import kiln.torch_ops as kops  # noqa: E402

PAGE = 16


@dataclass
class Config:
    vocab: int = 32000
    hidden: int = 1024
    layers: int = 4
    q_heads: int = 8
    kv_heads: int = 2
    head_dim: int = 128
    ffn: int = 2816
    rope_theta: float = 10000.0
    eps: float = 1e-5


def make_weights(cfg: Config, device, dtype, seed: int = 0) -> Dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape, std=0.02):
        return (torch.randn(*shape, generator=gen) * std).to(dtype).to(device)

    w = {"embed": normal(cfg.vocab, cfg.hidden, std=1.0),
         "norm": torch.ones(cfg.hidden, dtype=dtype, device=device),
         "lm_head": normal(cfg.hidden, cfg.vocab)}
    for i in range(cfg.layers):
        w[f"{i}.ln1"] = torch.ones(cfg.hidden, dtype=dtype, device=device)
        w[f"{i}.ln2"] = torch.ones(cfg.hidden, dtype=dtype, device=device)
        w[f"{i}.wq"] = normal(cfg.hidden, cfg.q_heads * cfg.head_dim)
        w[f"{i}.wk"] = normal(cfg.hidden, cfg.kv_heads * cfg.head_dim)
        w[f"{i}.wv"] = normal(cfg.hidden, cfg.kv_heads * cfg.head_dim)
        w[f"{i}.wo"] = normal(cfg.q_heads * cfg.head_dim, cfg.hidden)
        w[f"{i}.gate"] = normal(cfg.hidden, cfg.ffn)
        w[f"{i}.up"] = normal(cfg.hidden, cfg.ffn)
        w[f"{i}.down"] = normal(cfg.ffn, cfg.hidden)
    return w


class Model:
    """The decoder's layers around an attention function the caller gives."""

    def __init__(self, cfg: Config, weights: Dict[str, torch.Tensor]):
        self.cfg, self.w = cfg, weights
        d = cfg.head_dim
        device = weights["embed"].device
        self.inv_freq = 1.0 / (cfg.rope_theta ** (
            torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))

    def rms(self, x, weight):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg.eps)
        return xf.to(x.dtype) * weight

    def rope(self, x, positions):
        # x [B, H, S, D], positions [B, S]
        freqs = positions.float()[..., None] * self.inv_freq  # [B, S, D/2]
        emb = torch.cat((freqs, freqs), -1)[:, None]  # [B, 1, S, D]
        cos, sin = emb.cos(), emb.sin()
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
        return (x.float() * cos + rotated.float() * sin).to(x.dtype)

    def qkv(self, i, x, positions):
        cfg, w = self.cfg, self.w
        b, s, _ = x.shape
        h = self.rms(x, w[f"{i}.ln1"])
        q = (h @ w[f"{i}.wq"]).view(b, s, cfg.q_heads, cfg.head_dim).transpose(1, 2)
        k = (h @ w[f"{i}.wk"]).view(b, s, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        v = (h @ w[f"{i}.wv"]).view(b, s, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        return self.rope(q, positions), self.rope(k, positions), v

    def finish_layer(self, i, x, attn):
        # attn [B, Hq, S, D] -> residual, MLP
        cfg, w = self.cfg, self.w
        b, _, s, _ = attn.shape
        x = x + attn.transpose(1, 2).reshape(b, s, -1) @ w[f"{i}.wo"]
        h = self.rms(x, w[f"{i}.ln2"])
        return x + (F.silu(h @ w[f"{i}.gate"]) * (h @ w[f"{i}.up"])) @ w[f"{i}.down"]

    def logits(self, x):
        return (self.rms(x, self.w["norm"]) @ self.w["lm_head"]).float()


# --------------------------------------------------------------------------
# Reference: PyTorch SDPA over contiguous per-sequence caches.
# --------------------------------------------------------------------------


def generate_reference(model: Model, prompts: List[torch.Tensor], steps: int):
    cfg = model.cfg
    tokens, first_logits = [], []
    for prompt in prompts:
        device = prompt.device
        caches = [[None, None] for _ in range(cfg.layers)]
        ids = prompt[None]
        out: List[int] = []
        for step in range(steps):
            start = 0 if step == 0 else prompt.numel() + step - 1
            positions = torch.arange(start, start + ids.shape[1], device=device)[None]
            x = model.w["embed"][ids]
            for i in range(cfg.layers):
                q, k, v = model.qkv(i, x, positions)
                if caches[i][0] is not None:
                    k = torch.cat((caches[i][0], k), 2)
                    v = torch.cat((caches[i][1], v), 2)
                caches[i] = [k, v]
                attn = F.scaled_dot_product_attention(
                    q, k, v, is_causal=step == 0, enable_gqa=True,
                    scale=1.0 / math.sqrt(cfg.head_dim))
                x = model.finish_layer(i, x, attn)
            logits = model.logits(x[:, -1])
            if step == 1:
                first_logits.append(logits[0])
            nxt = int(logits.argmax(-1))
            out.append(nxt)
            ids = torch.tensor([[nxt]], device=device)
        tokens.append(out)
    return tokens, torch.stack(first_logits)


# --------------------------------------------------------------------------
# Kiln: prefill per prompt, then batched paged decode in a CUDA graph.
# --------------------------------------------------------------------------


class PagedCache:
    """K and V caches of pages of PAGE tokens per layer, pages handed out at
    random, and the page table."""

    def __init__(self, cfg: Config, batch: int, max_tokens: int, device, dtype,
                 seed: int = 0):
        self.max_pages = math.ceil(max_tokens / PAGE)
        self.num_pages = batch * self.max_pages + 5
        shape = (self.num_pages, PAGE, cfg.kv_heads, cfg.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.layers)]
        gen = torch.Generator().manual_seed(seed)
        pages = torch.randperm(self.num_pages, generator=gen)[: batch * self.max_pages]
        self.table = pages.view(batch, self.max_pages).to(torch.int32).to(device)

    def slots(self, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Flat slot (page * PAGE + offset) of each (row, position)."""
        pages = self.table[rows, positions // PAGE].long()
        return pages * PAGE + positions % PAGE

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        # k, v [N, Hkv, D] for N slots
        self.k[layer].view(-1, *self.k[layer].shape[2:]).index_copy_(0, slots, k)
        self.v[layer].view(-1, *self.v[layer].shape[2:]).index_copy_(0, slots, v)


def kiln_prefill(model, cache, prefill_site, prompts):
    """Each prompt alone through the causal prefill site; returns the first
    generated token of each and writes the caches."""
    cfg = model.cfg
    first = []
    for b, prompt in enumerate(prompts):
        n = prompt.numel()
        positions = torch.arange(n, device=prompt.device)[None]
        rows = torch.full((n,), b, device=prompt.device)
        slots = cache.slots(rows, positions[0])
        x = model.w["embed"][prompt[None]]
        for i in range(cfg.layers):
            q, k, v = model.qkv(i, x, positions)
            cache.write(i, slots, k[0].transpose(0, 1), v[0].transpose(0, 1))
            attn = kops.attention(prefill_site, q, k, v)
            x = model.finish_layer(i, x, attn)
        first.append(int(model.logits(x[:, -1]).argmax(-1)))
    return first


class DecodeStep:
    """One batched decode step over static buffers (capturable)."""

    def __init__(self, model, cache, decode_site, batch, device):
        self.model, self.cache, self.site = model, cache, decode_site
        self.tokens = torch.zeros(batch, dtype=torch.long, device=device)
        self.positions = torch.zeros(batch, dtype=torch.long, device=device)
        self.kv_lens = torch.zeros(batch, dtype=torch.int32, device=device)
        self.rows = torch.arange(batch, device=device)
        cfg = model.cfg
        self.workspace = torch.empty(
            max(decode_site.workspace_size(batch, 1, cache.max_pages * PAGE,
                                           q_heads=cfg.q_heads,
                                           kv_heads=cfg.kv_heads), 16),
            dtype=torch.uint8, device=device)
        self.next_tokens = torch.zeros(batch, dtype=torch.long, device=device)
        self.logits = None

    def __call__(self):
        model, cache, cfg = self.model, self.cache, self.model.cfg
        slots = cache.slots(self.rows, self.positions)
        x = model.w["embed"][self.tokens][:, None]
        for i in range(cfg.layers):
            q, k, v = model.qkv(i, x, self.positions[:, None])
            cache.write(i, slots, k[:, :, 0], v[:, :, 0])
            attn = kops.paged_attention(self.site, q, cache.k[i], cache.v[i],
                                        cache.table, self.kv_lens,
                                        workspace=self.workspace)
            x = model.finish_layer(i, x, attn)
        self.logits = model.logits(x[:, -1])
        self.next_tokens.copy_(self.logits.argmax(-1))

    def set(self, tokens: List[int], positions: List[int]):
        self.tokens.copy_(torch.tensor(tokens))
        self.positions.copy_(torch.tensor(positions))
        self.kv_lens.copy_(torch.tensor([p + 1 for p in positions], dtype=torch.int32))


def kiln_generate(model, package, prompts, steps, use_graph):
    cfg = model.cfg
    device = prompts[0].device
    sites = {s.function: s for s in package.sites}
    batch = len(prompts)
    lengths = [p.numel() for p in prompts]
    cache = PagedCache(cfg, batch, max(lengths) + steps, device, torch.bfloat16)
    first = kiln_prefill(model, cache, sites["prefill"], prompts)
    step = DecodeStep(model, cache, sites["decode"], batch, device)
    tokens = [[t] for t in first]
    first_logits = None
    graph = None
    times = []
    for s in range(1, steps):
        step.set([t[-1] for t in tokens], [n + s - 1 for n in lengths])
        torch.cuda.synchronize()
        start = time.perf_counter()
        if use_graph and graph is None:
            # The first step runs eagerly (it also warms up cuBLAS); later
            # steps replay its capture (capturing runs nothing).
            step()
            first_logits = step.logits.clone()
            package.prepare()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
        elif graph is not None:
            graph.replay()
        else:
            step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        if s == 1 and first_logits is None:
            first_logits = step.logits.clone()
        for b, t in enumerate(step.next_tokens.tolist()):
            tokens[b].append(t)
    return tokens, first_logits, times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--package", help="reuse a compiled package directory")
    options = parser.parse_args()
    device = torch.device("cuda")
    cfg = Config(layers=options.layers)
    model = Model(cfg, make_weights(cfg, device, torch.bfloat16))
    gen = torch.Generator().manual_seed(1)
    lengths = [17, 40, 9, 64, 33, 5, 128, 21][: options.batch]
    prompts = [torch.randint(0, cfg.vocab, (n,), generator=gen).to(device)
               for n in lengths]

    with tempfile.TemporaryDirectory() as scratch:
        if options.package:
            package = kiln.load(options.package)
        else:
            package = kiln.compile(ROOT / "examples" / "llama_sites.mlir",
                                   output=Path(scratch) / "pkg")
        kops.register(package)
        graph_tokens, graph_logits, graph_times = kiln_generate(
            model, package, prompts, options.steps, use_graph=True)
        eager_tokens, eager_logits, eager_times = kiln_generate(
            model, package, prompts, options.steps, use_graph=False)
    ref_tokens, ref_logits = generate_reference(model, prompts, options.steps)

    same_graph = graph_tokens == eager_tokens
    logit_err = float((graph_logits - ref_logits).norm() / ref_logits.norm())
    agree = [sum(a == b for a, b in zip(k, r)) for k, r in zip(graph_tokens, ref_tokens)]
    prefix = []
    for k, r in zip(graph_tokens, ref_tokens):
        n = 0
        while n < len(k) and k[n] == r[n]:
            n += 1
        prefix.append(n)
    print(f"batch {options.batch}, prompts {lengths}, {options.steps} tokens, "
          f"{cfg.layers} layers")
    for b in range(options.batch):
        print(f"  seq {b}: kiln {graph_tokens[b][:12]}...  sdpa {ref_tokens[b][:12]}...")
    print(f"CUDA graph tokens == eager tokens: {same_graph}")
    print(f"first decode step logits vs SDPA: relative error {logit_err:.2e}")
    print(f"tokens equal to SDPA's: {agree} of {options.steps}; identical "
          f"prefix {prefix}")
    graph_us = 1e6 * sorted(graph_times[1:])[len(graph_times[1:]) // 2]
    eager_us = 1e6 * sorted(eager_times)[len(eager_times) // 2]
    print(f"decode step: eager {eager_us:.0f} us, CUDA graph replay "
          f"{graph_us:.0f} us (median, host-timed with synchronisation)")
    ok = same_graph and logit_err < 2e-2
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
