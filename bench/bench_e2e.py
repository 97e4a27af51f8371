#!/usr/bin/env python3
"""Decode throughput of a Llama-style model of about 1B parameters: Kiln
against Hugging Face transformers, in one run.

    kilnc bench/e2e_sites.mlir -o PKG
    python3 bench/bench_e2e.py PKG [--out e2e.json] [--batch 64] [--context 2048]

Model: Llama-3.2-1B's shape (16 layers, hidden 2048, 32 query heads over 8 KV
heads of 64, MLP 8192, vocab 32000 here), bf16, random weights. Workload:
batch 64, prompts of `context` tokens, then greedy decode; the figure is
decode tokens per second (batch × steps / time of the decode steps).

  kiln          the model of examples/generate.py (the same computation as
                Llama: RMSNorm, rotary embeddings, GQA, SwiGLU) with Kiln's
                causal prefill site and paged decode site (pages of 16,
                scattered at random), each decode step a replayed CUDA graph
  hf-sdpa       transformers' LlamaForCausalLM, attn_implementation="sdpa",
                eager, its dynamic cache
  hf-sdpa-compiled  the same with a static cache, generate compiling its
                decoding forward with torch.compile(mode="reduce-overhead",
                fullgraph=True) (CUDA graphs)

The HF figures come from `generate` with two numbers of new tokens, n1 and
n2: tokens/s = batch · (n2 − n1) / (t2 − t1), which removes the prefill and
the compilation (a warm-up call runs first). Kiln's are timed over its decode
steps directly (CUDA events around the replays).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402

import kiln  # noqa: E402
import kiln.torch_ops as kops  # noqa: E402
from generate import (Config, DecodeStep, Model, PagedCache,  # noqa: E402
                      kiln_prefill, make_weights)


def kiln_tokens_per_second(package, cfg, batch, context, steps):
    device = torch.device("cuda")
    model = Model(cfg, make_weights(cfg, device, torch.bfloat16))
    kops.register(package)
    sites = {s.function: s for s in package.sites}
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, cfg.vocab, (context,), generator=gen).to(device)
               for _ in range(batch)]
    cache = PagedCache(cfg, batch, context + steps + 1, device, torch.bfloat16)
    first = kiln_prefill(model, cache, sites["prefill"], prompts)
    step = DecodeStep(model, cache, sites["decode"], batch, device)
    tokens = first
    step.set(tokens, [context] * batch)
    step()  # eager first step (warms up cuBLAS)
    package.prepare()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for s in range(1, steps):
        step.set(step.next_tokens.tolist(), [context + s] * batch)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    ms = sorted(times)[len(times) // 2]
    return batch / (ms / 1e3), ms


def hf_tokens_per_second(cfg, batch, context, compiled, n1, n2):
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(vocab_size=cfg.vocab, hidden_size=cfg.hidden,
                         intermediate_size=cfg.ffn, num_hidden_layers=cfg.layers,
                         num_attention_heads=cfg.q_heads,
                         num_key_value_heads=cfg.kv_heads, head_dim=cfg.head_dim,
                         max_position_embeddings=context + n2 + 16,
                         rope_theta=cfg.rope_theta, rms_norm_eps=cfg.eps)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                             attn_implementation="sdpa")
    model = model.to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, cfg.vocab, (batch, context), device="cuda")
    kwargs = dict(do_sample=False, pad_token_id=0)
    if compiled:
        # generate compiles the decoding forward itself with a static cache
        # (torch.compile, mode="reduce-overhead", fullgraph), marking each
        # CUDA-graph step as that mode requires.
        model.generation_config.cache_implementation = "static"
        try:
            from transformers import CompileConfig

            model.generation_config.compile_config = CompileConfig(
                mode="reduce-overhead", fullgraph=True)
        except ImportError:
            pass

    def run(n):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kwargs)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    run(n1)  # warm-up (and compilation)
    t1, t2 = run(n1), run(n2)
    return batch * (n2 - n1) / (t2 - t1), (t2 - t1) / (n2 - n1) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("package")
    parser.add_argument("--out")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--skip-compiled", action="store_true")
    options = parser.parse_args()
    cfg = Config(vocab=32000, hidden=2048, layers=16, q_heads=32, kv_heads=8,
                 head_dim=64, ffn=8192, rope_theta=500000.0)
    rows = []

    def record(impl, fn):
        try:
            tps, ms = fn()
            row = dict(impl=impl, tokens_per_s=tps, ms_per_step=ms)
        except Exception as error:  # noqa: BLE001
            row = dict(impl=impl, error=f"{type(error).__name__}: {error}")
        row.update(b=options.batch, context=options.context, layers=cfg.layers,
                   hidden=cfg.hidden, hq=cfg.q_heads, hkv=cfg.kv_heads,
                   d=cfg.head_dim)
        rows.append(row)
        print(row, flush=True)
        torch.cuda.empty_cache()

    package = kiln.load(options.package)
    record("kiln", lambda: kiln_tokens_per_second(
        package, cfg, options.batch, options.context, options.steps))
    record("hf-sdpa", lambda: hf_tokens_per_second(
        cfg, options.batch, options.context, False, 8, 24))
    if not options.skip_compiled:
        record("hf-sdpa-compiled", lambda: hf_tokens_per_second(
            cfg, options.batch, options.context, True, 8, 24))
    base = {r["impl"]: r.get("tokens_per_s") for r in rows}
    if base.get("kiln"):
        for impl in ("hf-sdpa", "hf-sdpa-compiled"):
            if base.get(impl):
                print(f"kiln / {impl}: {base['kiln'] / base[impl]:.2f}x")
    if options.out:
        Path(options.out).write_text(json.dumps(
            {"rows": rows, "device": torch.cuda.get_device_name(),
             "torch": torch.__version__}, indent=1))
    return 0 if base.get("kiln") else 1


if __name__ == "__main__":
    sys.exit(main())
