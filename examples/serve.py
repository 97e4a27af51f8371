#!/usr/bin/env python3
"""A continuous-batching serving loop on Kiln's ragged paged attention.

    python3 examples/serve.py --package PKG [--requests 64] [--budget 2048]
        [--layers 16] [--seed 0]

PKG: `kilnc examples/serve_sites.mlir -o PKG` (one ragged paged site,
Llama-3.2-1B's attention: 32 query heads over 8 KV heads of 64, bf16,
pages of 16, causal).

A Llama-3.2-1B-shaped decoder with random weights (hidden 2048, 16 layers,
SwiGLU 8192, vocabulary 32000 here; `examples/generate.py`'s model). Requests
arrive over the first steps with prompts of random lengths (32 to 1024
tokens) and ask for 16 to 128 new tokens each. Every step spends a token
budget: each running request's next token first (a decode), then chunks of
the waiting prompts (chunked prefill); its tokens run packed, as one ragged
batch, through every layer: the step's new keys and values written into the
pages by the append kernel, attention over each sequence's pages in one
ragged launch (the plan made once a step, on the host, reused by every
layer). Pages come from one pool, taken as sequences grow and given back
when a request finishes. Steps that hold only decodes are replayed as CUDA
graphs, one a batch size rounded up to a power of two (the padding
sequences decode into a scratch page).

On the H200 (64 requests arriving over 40 steps, budget 2048): 4956 tokens
in 2.84 s, 1747 tokens/s, mixed steps 31.9 ms and decode-only steps 4.0 ms
(p50); `bench/bench_serve_loop.py` times it warm with every request at once
beside transformers' compiled generation (docs/performance.md).

Checked: the shortest request's logits from the loop, at its prefill and
at its first decode, against the same tokens through the model with
PyTorch's SDPA on contiguous keys (relative error below 5e-2, bf16 over 16
layers). Reports tokens/s, the steps and their latency (mixed and decode-only).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402
from generate import Config, Model, make_weights  # noqa: E402

PAGE = 16


@dataclass(eq=False)
class Request:
    rid: int
    prompt: List[int]
    max_new: int
    arrival: int
    done_prompt: int = 0  # prompt tokens already in the cache
    generated: List[int] = field(default_factory=list)
    pages: List[int] = field(default_factory=list)
    first_logits: Optional[torch.Tensor] = None
    second_logits: Optional[torch.Tensor] = None

    @property
    def cached(self) -> int:
        """Tokens whose keys are in the cache."""
        return self.done_prompt + max(len(self.generated) - 1, 0)

    @property
    def finished(self) -> bool:
        return len(self.generated) >= self.max_new


class PagePool:
    def __init__(self, num_pages: int):
        self.free = list(range(num_pages - 1, 0, -1))  # page 0: scratch

    def grow(self, request: Request, tokens: int) -> bool:
        need = math.ceil(tokens / PAGE) - len(request.pages)
        if need > len(self.free):
            return False
        for _ in range(need):
            request.pages.append(self.free.pop())
        return True

    def release(self, request: Request) -> None:
        self.free.extend(request.pages)
        request.pages = []


class Server:
    def __init__(self, model: Model, site, num_pages: int, max_pages: int,
                 max_batch: int, device):
        cfg = model.cfg
        self.model, self.site, self.device = model, site, device
        self.max_pages, self.max_batch = max_pages, max_batch
        shape = (num_pages, PAGE, cfg.kv_heads, cfg.head_dim)
        self.k = [torch.zeros(shape, dtype=torch.bfloat16, device=device)
                  for _ in range(cfg.layers)]
        self.v = [torch.zeros(shape, dtype=torch.bfloat16, device=device)
                  for _ in range(cfg.layers)]
        self.graphs: Dict[int, tuple] = {}

    def forward(self, ids, positions, table, kv_lens, offsets, plan):
        """The packed step: ids and positions [T]; returns the hidden
        states [T, hidden]."""
        model, cfg = self.model, self.model.cfg
        x = model.w["embed"][ids][None]
        pos = positions[None]
        for i in range(cfg.layers):
            q, k, v = model.qkv(i, x, pos)  # [1, H, T, D]
            q, k, v = (t[0].transpose(0, 1).contiguous() for t in (q, k, v))
            self.site.append_paged_kv(k, v,
                                      self.k[i], self.v[i], table, kv_lens,
                                      offsets)
            attn = self.site.paged_attention(q, self.k[i], self.v[i], table,
                                             kv_lens, q_offsets=offsets,
                                             plan=plan)
            x = model.finish_layer(i, x, attn.transpose(0, 1)[None])
        return x[0]

    def inputs(self, batch: List[Request], new: List[int], pad_to: int = 0):
        """Host arrays of a step: ids, positions, table rows, kv_lens,
        offsets; padded with one-token sequences on the scratch page."""
        ids, positions, lens, offsets, rows = [], [], [], [0], []
        for request, n in zip(batch, new):
            start = request.cached
            tokens = (request.prompt[start:start + n] if n > 1 or
                      request.done_prompt < len(request.prompt)
                      else [request.generated[-1]])
            ids += tokens
            positions += list(range(start, start + n))
            lens.append(start + n)
            offsets.append(offsets[-1] + n)
            rows.append(request.pages + [0] * (self.max_pages -
                                               len(request.pages)))
        for _ in range(pad_to - len(batch)):
            ids.append(0)
            positions.append(0)
            lens.append(1)
            offsets.append(offsets[-1] + 1)
            rows.append([0] * self.max_pages)
        return ids, positions, rows, lens, offsets

    def run_step(self, batch, new, decode_only: bool):
        """One step; returns each sequence's last row's logits [B, vocab]."""
        device = self.device
        if decode_only:
            size = 1 << max(len(batch) - 1, 0).bit_length()
            size = min(max(size, 1), self.max_batch)
            ids, positions, rows, lens, offsets = self.inputs(batch, new, size)
            entry = self.graphs.get(size)
            if entry is None:
                entry = self.capture(size)
                self.graphs[size] = entry
            graph, bufs = entry
            bufs["ids"].copy_(torch.tensor(ids), non_blocking=True)
            bufs["positions"].copy_(torch.tensor(positions), non_blocking=True)
            bufs["table"].copy_(torch.tensor(rows, dtype=torch.int32),
                                non_blocking=True)
            bufs["lens"].copy_(torch.tensor(lens, dtype=torch.int32),
                               non_blocking=True)
            bufs["offsets"].copy_(torch.tensor(offsets, dtype=torch.int32),
                                  non_blocking=True)
            self.site.plan(offsets, lens, out=bufs["plan"])
            graph.replay()
            return bufs["logits"][:len(batch)]
        ids, positions, rows, lens, offsets = self.inputs(batch, new)
        offsets_t = torch.tensor(offsets, dtype=torch.int32, device=device)
        lens_t = torch.tensor(lens, dtype=torch.int32, device=device)
        plan = self.site.plan(offsets, lens, device=device)
        hidden = self.forward(
            torch.tensor(ids, device=device),
            torch.tensor(positions, device=device),
            torch.tensor(rows, dtype=torch.int32, device=device), lens_t,
            offsets_t, plan)
        last = offsets_t[1:].long() - 1
        return self.model.logits(hidden[last])

    def capture(self, size: int):
        device = self.device
        bufs = {
            "ids": torch.zeros(size, dtype=torch.long, device=device),
            "positions": torch.zeros(size, dtype=torch.long, device=device),
            "table": torch.zeros(size, self.max_pages, dtype=torch.int32,
                                 device=device),
            "lens": torch.ones(size, dtype=torch.int32, device=device),
            "offsets": torch.arange(size + 1, dtype=torch.int32,
                                    device=device),
            "plan": torch.zeros(self.site.plan_capacity(size, size), 2,
                                dtype=torch.int32, device=device),
        }
        self.site.plan(list(range(size + 1)), [1] * size, out=bufs["plan"])

        def step():
            hidden = self.forward(bufs["ids"], bufs["positions"],
                                  bufs["table"], bufs["lens"],
                                  bufs["offsets"], bufs["plan"])
            bufs["logits"] = self.model.logits(hidden)

        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            step()  # warm-up (workspaces, allocator) outside the capture
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        return graph, bufs


def dense_first_logits(model: Model, prompt: List[int], device):
    """The last prompt token's logits with SDPA on contiguous keys."""
    cfg = model.cfg
    ids = torch.tensor(prompt, device=device)[None]
    positions = torch.arange(len(prompt), device=device)[None]
    x = model.w["embed"][ids]
    for i in range(cfg.layers):
        q, k, v = model.qkv(i, x, positions)
        attn = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=True,
            scale=1.0 / math.sqrt(cfg.head_dim))
        x = model.finish_layer(i, x, attn)
    return model.logits(x[:, -1])[0]


def llama_1b(layers: int) -> Config:
    """Llama-3.2-1B's shape (vocabulary 32000 here)."""
    return Config(hidden=2048, layers=layers, q_heads=32, kv_heads=8,
                  head_dim=64, ffn=8192, rope_theta=500000.0)


def make_requests(cfg: Config, count: int, seed: int,
                  spread: int = 40) -> List[Request]:
    """`count` requests: prompts of 32 to 1024 random tokens, 16 to 128 new
    tokens each, arriving over the first `spread` steps (0: all at once)."""
    gen = torch.Generator().manual_seed(seed)
    requests = []
    for rid in range(count):
        length = int(torch.randint(32, 1025, (1,), generator=gen))
        prompt = torch.randint(0, cfg.vocab, (length,), generator=gen).tolist()
        max_new = int(torch.randint(16, 129, (1,), generator=gen))
        arrival = int(torch.randint(0, max(spread, 1), (1,), generator=gen))
        requests.append(Request(rid, prompt, max_new, arrival if spread else 0))
    return requests


def new_server(model: Model, site, requests: List[Request], max_batch: int,
               device) -> Server:
    """A server whose page pool holds half of `max_batch` requests of the
    longest prompt and generation at once."""
    most = max(len(r.prompt) + r.max_new for r in requests)
    max_pages = math.ceil(most / PAGE)
    num_pages = max_batch * max_pages // 2 + 1
    return Server(model, site, num_pages, max_pages, max_batch, device)


def serve(server: Server, requests: List[Request], budget: int,
          max_batch: int) -> Dict[str, object]:
    """Runs `requests` to completion through `server`: returns the wall time,
    the steps, the tokens generated and each step's latency by kind."""
    pool = PagePool(server.k[0].shape[0])
    waiting = sorted(requests, key=lambda r: r.arrival)
    running: List[Request] = []
    step_times: Dict[str, List[float]] = {"mixed": [], "decode": []}
    generated = 0
    step = 0
    torch.cuda.synchronize()
    start = time.perf_counter()
    while waiting or running:
        # Decodes first (every running request whose prompt is cached),
        # then prompt chunks in the budget that is left.
        batch, new = [], []
        left_budget = budget
        for request in running:
            if request.done_prompt == len(request.prompt):
                if not pool.grow(request, request.cached + 1):
                    continue  # no page: waits a step
                batch.append(request)
                new.append(1)
                left_budget -= 1
        for request in running + [r for r in waiting if r.arrival <= step]:
            if left_budget <= 0 or len(batch) >= max_batch:
                break
            left = len(request.prompt) - request.done_prompt
            if left == 0 or request in batch:
                continue
            n = min(left, left_budget)
            if not pool.grow(request, request.done_prompt + n):
                continue
            if request not in running:
                waiting.remove(request)
                running.append(request)
            batch.append(request)
            new.append(n)
            left_budget -= n
        if not batch:
            if not any(r.arrival > step for r in waiting):
                raise SystemExit("the page pool cannot hold the running "
                                 "requests: raise --max-batch")
            step += 1
            continue
        decode_only = len(batch) <= max_batch and all(
            n == 1 and r.done_prompt == len(r.prompt)
            for r, n in zip(batch, new))
        t0 = time.perf_counter()
        logits = server.run_step(batch, new, decode_only)
        tokens = logits.argmax(-1).tolist()
        step_times["decode" if decode_only else "mixed"].append(
            time.perf_counter() - t0)
        for b, (request, n) in enumerate(zip(batch, new)):
            if request.done_prompt < len(request.prompt):
                request.done_prompt += n
                if request.done_prompt < len(request.prompt):
                    continue  # a chunk short of the prompt's end
                if request.first_logits is None:
                    request.first_logits = logits[b].clone()
            elif len(request.generated) == 1:
                request.second_logits = logits[b].clone()
            request.generated.append(tokens[b])
            generated += 1
        for request in [r for r in running if r.finished]:
            running.remove(request)
            pool.release(request)
        step += 1
    torch.cuda.synchronize()
    return {"seconds": time.perf_counter() - start, "steps": step,
            "generated": generated, "step_times": step_times}


def check_against_sdpa(model: Model, requests: List[Request], device):
    """The shortest prompt's logits from the loop (its prefill, then its
    first decode) against SDPA on contiguous keys: [(relative error, same
    argmax)] for the two, and the request."""
    probe = min(requests, key=lambda r: len(r.prompt))
    checks = []
    for got, tokens in ((probe.first_logits, probe.prompt),
                        (probe.second_logits,
                         probe.prompt + probe.generated[:1])):
        want = dense_first_logits(model, tokens, device)
        err = float((got - want).norm() / want.norm())
        checks.append((err, int(got.argmax()) == int(want.argmax())))
    return checks, probe


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--package", required=True)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--budget", type=int, default=2048,
                        help="tokens a step (decodes first, then chunks)")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--max-batch", type=int, default=128)
    parser.add_argument("--spread", type=int, default=40,
                        help="requests arrive over this many steps (0: all "
                             "at once)")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    device = torch.device("cuda")
    cfg = llama_1b(options.layers)
    model = Model(cfg, make_weights(cfg, device, torch.bfloat16))
    package = kiln.Package(options.package)
    site = next(s for s in package.sites if s.ragged)

    requests = make_requests(cfg, options.requests, options.seed, options.spread)
    server = new_server(model, site, requests, options.max_batch, device)
    result = serve(server, requests, options.budget, options.max_batch)
    checks, probe = check_against_sdpa(model, requests, device)
    for err, _ in checks:
        if not (err < 5e-2 and math.isfinite(err)):
            print(f"FAIL: request {probe.rid}'s logits differ from SDPA's "
                  f"(relative error {err:.2e})")
            return 1

    def ms(values, q):
        if not values:
            return float("nan")
        return 1e3 * sorted(values)[min(int(q * len(values)),
                                        len(values) - 1)]
    elapsed, generated = result["seconds"], result["generated"]
    print(f"{options.requests} requests, prompts 32-1024 tokens, 16-128 new "
          f"tokens each, budget {options.budget} tokens a step, "
          f"{cfg.layers} layers")
    print(f"request {probe.rid} ({len(probe.prompt)} prompt tokens) vs SDPA: "
          f"prefill logits relative error {checks[0][0]:.2e} (same argmax "
          f"{checks[0][1]}), first decode {checks[1][0]:.2e} (same argmax "
          f"{checks[1][1]})")
    print(f"{result['steps']} steps in {elapsed:.2f} s: {generated} tokens "
          f"generated, {generated / elapsed:.0f} tokens/s; prompt tokens "
          f"{sum(len(r.prompt) for r in requests)}")
    for kind, values in result["step_times"].items():
        print(f"{kind} steps: {len(values)}, latency p50 {ms(values, 0.5):.2f} "
              f"ms, p90 {ms(values, 0.9):.2f} ms")
    print(f"CUDA graphs captured for decode batches of {sorted(server.graphs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
