#!/usr/bin/env python3
"""Trains a GPT-2-small-shaped model whose attention is written by hand
(matmul, a `tril` mask, softmax), three ways on the same token stream:
eager, ``torch.compile`` (Inductor) and ``torch.compile(backend="kiln",
options={"training": "kiln"})`` (Kiln's forward and backward kernels at
each attention site, Inductor for the rest). Prints tokens/s and writes the
loss curves side by side.

    python3 examples/train.py [--steps 300] [--seq 1024] [--batch 8] [--layers 12]
        [--paths eager,inductor,kiln] [--out losses.json] [--plot docs/train-loss.svg]

The token stream is made on the fly: a fixed random bigram table (each
token's successor drawn from a few likely ones), so the loss falls well below
log(vocab) within a few hundred steps and the three curves can be compared.
Every path starts from the same weights and sees the same batches (the
model and AdamW's state in bf16, the loss in f32); the first steps of each
path include its compile time, reported apart from tokens/s.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import kiln.dynamo  # noqa: E402,F401 (registers the "kiln" backend)


class Attention(nn.Module):
    """Causal self-attention as research code writes it."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        q, k, v = self.qkv(x).split(w, dim=-1)
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        mask = torch.tril(torch.ones(s, s, device=x.device, dtype=torch.bool))
        scores = scores.masked_fill(~mask, float("-inf"))
        y = scores.softmax(dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, s, w))


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = Attention(width, heads)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, width: int, heads: int, layers: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def batches(vocab: int, batch: int, seq: int, steps: int, device: torch.device):
    """`steps` batches of (input, target) from a random bigram stream."""
    generator = torch.Generator(device="cpu").manual_seed(0)
    successors = torch.randint(0, vocab, (vocab, 4), generator=generator)
    for _ in range(steps):
        ids = torch.empty(batch, seq + 1, dtype=torch.long)
        ids[:, 0] = torch.randint(0, vocab, (batch,), generator=generator)
        choice = torch.randint(0, 4, (batch, seq), generator=generator)
        for t in range(seq):
            ids[:, t + 1] = successors[ids[:, t], choice[:, t]]
        ids = ids.to(device)
        yield ids[:, :-1], ids[:, 1:]


def train(model: nn.Module, path: str, options: argparse.Namespace,
          vocab: int) -> Dict[str, object]:
    device = torch.device("cuda")
    if path == "inductor":
        step_model = torch.compile(model)
    elif path == "kiln":
        step_model = torch.compile(model, backend="kiln", options={"training": "kiln"})
    else:
        step_model = model
    optimiser = torch.optim.AdamW(model.parameters(), lr=options.lr)
    losses: List[float] = []
    started = None
    first_steps_s = 0.0
    for number, (ids, target) in enumerate(
            batches(vocab, options.batch, options.seq, options.steps, device)):
        begin = time.perf_counter()
        logits = step_model(ids)
        loss = nn.functional.cross_entropy(logits.float().view(-1, vocab), target.reshape(-1))
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        losses.append(float(loss))  # synchronises: each step timed whole
        if number < options.warmup:
            first_steps_s += time.perf_counter() - begin
            if number == options.warmup - 1:
                started = time.perf_counter()
    elapsed = time.perf_counter() - (started or time.perf_counter())
    timed_steps = max(options.steps - options.warmup, 1)
    tokens_per_s = timed_steps * options.batch * options.seq / max(elapsed, 1e-9)
    result: Dict[str, object] = {"path": path, "losses": losses,
                                 "tokens_per_s": tokens_per_s,
                                 "first_steps_s": first_steps_s}
    if path == "kiln":
        result["sites_rewritten"] = sum(len(e["rewritten"]) for e in kiln.dynamo.reports)
        result["fallbacks"] = sorted({e["fallback"] for e in kiln.dynamo.reports
                                      if e.get("fallback")})
    print(f"{path:<9} {tokens_per_s:10.0f} tokens/s   loss {losses[0]:.3f} -> "
          f"{losses[-1]:.3f}   first {options.warmup} steps {first_steps_s:.1f} s"
          + (f"   sites rewritten {result['sites_rewritten']}"
             f"{'   ' + str(result['fallbacks']) if result['fallbacks'] else ''}"
             if path == "kiln" else ""), flush=True)
    return result


def plot(results: List[Dict[str, object]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    for result in results:
        axis.plot(result["losses"], label=f"{result['path']} "
                  f"({result['tokens_per_s']:.0f} tokens/s)", linewidth=1)
    axis.set_xlabel("step")
    axis.set_ylabel("training loss")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=5,
                        help="first steps (compiles) left out of tokens/s")
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--paths", default="eager,inductor,kiln")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot", type=Path)
    options = parser.parse_args()
    torch.manual_seed(0)
    base = GPT(options.vocab, options.seq, options.width, options.heads,
               options.layers).to("cuda", torch.bfloat16)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}: "
          f"{sum(p.numel() for p in base.parameters()) / 1e6:.0f}M parameters, "
          f"b{options.batch} x s{options.seq}", flush=True)
    results = []
    for path in options.paths.split(","):
        torch._dynamo.reset()
        results.append(train(copy.deepcopy(base), path, options, options.vocab))
    if options.out:
        options.out.write_text(json.dumps(results, indent=1))
    if options.plot:
        plot(results, options.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
