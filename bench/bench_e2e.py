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
  hf-sdpa-compiled  the same model over a transformers StaticCache sized
                batch × (context + new tokens): prefill run eagerly, then a
                greedy decode loop whose steps call the model's forward under
                torch.compile(mode="reduce-overhead", fullgraph=True) with
                static shapes (input ids [B, 1], position ids [B, 1], cache
                position [1]), each step a replayed CUDA graph
  hf-kiln-compiled  the same, attn_implementation="kiln" (Kiln's
                transformers attention backend, kiln.transformers): the
                static cache's boolean mask on Kiln's masked site

hf-sdpa comes from `generate` with two numbers of new tokens, n1 and n2:
tokens/s = batch · (n2 − n1) / (t2 − t1), which removes the prefill (a
warm-up call runs first). hf-sdpa-compiled and Kiln are timed over their
decode steps directly (CUDA events around each step, median), after warm-up
steps that compile and record the graphs. The compiled row carries
`cudagraph_skips` (inductor's count of graphs it ran without CUDA graphs) and
`recompiles` (graphs compiled while timing); either above zero makes the row
`valid: false` with the reason in `why`, and no ratio is printed for it.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402

import kiln  # noqa: E402
import kiln.torch_ops as kops  # noqa: E402
from generate import (Config, DecodeStep, Model, PagedCache,  # noqa: E402
                      kiln_prefill, make_weights)


#: Compiled decode steps run before timing: compilation, CUDA-graph trees'
#: warm-up run and recording, then replays.
COMPILED_WARMUP = 5


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


def hf_llama(cfg, max_positions, attention="sdpa"):
    """transformers' LlamaForCausalLM of `cfg`'s shape, bf16, random
    weights, attention through `attention` (sdpa, or kiln: Kiln's
    transformers attention backend)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(vocab_size=cfg.vocab, hidden_size=cfg.hidden,
                         intermediate_size=cfg.ffn, num_hidden_layers=cfg.layers,
                         num_attention_heads=cfg.q_heads,
                         num_key_value_heads=cfg.kv_heads, head_dim=cfg.head_dim,
                         max_position_embeddings=max_positions,
                         rope_theta=cfg.rope_theta, rms_norm_eps=cfg.eps)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                             attn_implementation=attention)
    return model.to("cuda", torch.bfloat16).eval()


def hf_tokens_per_second(cfg, batch, context, n1, n2):
    model = hf_llama(cfg, context + n2 + 16)
    ids = torch.randint(0, cfg.vocab, (batch, context), device="cuda")

    def run(n):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=n, min_new_tokens=n,
                           do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    run(n1)  # warm-up
    t1, t2 = run(n1), run(n2)
    return batch * (n2 - n1) / (t2 - t1), (t2 - t1) / (n2 - n1) * 1e3


class SkipReasons(logging.Handler):
    """Collects inductor's warnings about CUDA graphs (why it skipped them);
    they still reach stderr."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.reasons = []

    def emit(self, record):
        text = record.getMessage().strip()
        if "cudagraph" in text.lower() and text not in self.reasons:
            self.reasons.append(text)
            print(f"[inductor] {text}", file=sys.stderr, flush=True)

    def attach(self):
        # Inductor's CUDA-graph warnings go to artifact loggers that may not
        # propagate; load the modules that own them so the loggers exist.
        try:
            import torch._inductor.compile_fx  # noqa: F401
            import torch._inductor.cudagraph_trees  # noqa: F401
        except ImportError as error:
            print(f"hf-sdpa-compiled: {error}; skip reasons may go unrecorded",
                  file=sys.stderr)
        self.loggers = [logger for name, logger in
                        logging.root.manager.loggerDict.items()
                        if isinstance(logger, logging.Logger)
                        and name.startswith("torch._inductor")]
        for logger in self.loggers:
            logger.addHandler(self)

    def detach(self):
        for logger in self.loggers:
            logger.removeHandler(self)


def hf_compiled_tokens_per_second(cfg, batch, context, warmup, steps,
                                  attention="sdpa"):
    """Greedy decode over a StaticCache, each step the model's forward under
    torch.compile(mode="reduce-overhead", fullgraph=True): returns tokens/s,
    ms a step (median) and whether CUDA graphs ran throughout
    (cudagraph_skips, recompiles, valid and, when not, why)."""
    import inspect

    from torch._dynamo.utils import counters
    from transformers import StaticCache

    device = torch.device("cuda")
    length = context + warmup + steps  # prefill, then one token a step
    model = hf_llama(cfg, length + 16, attention)
    # The forward takes cache_position up to some transformers 5 release;
    # later caches count their own positions.
    parameters = inspect.signature(model.forward).parameters
    takes_cache_position = "cache_position" in parameters
    print(f"hf-{attention}-compiled: transformers forward takes cache_position: "
          f"{takes_cache_position}", file=sys.stderr, flush=True)

    # One cache for the whole run, created and filled (which allocates its
    # tensors and marks them static addresses) before anything is compiled:
    # the decode graph then updates it in place, as CUDA graphs require.
    cache = StaticCache(config=model.config, max_cache_len=length)

    def forward(input_ids, position_ids, cache_position, **more):
        kwargs = dict(position_ids=position_ids, past_key_values=cache,
                      use_cache=True, **more)
        if takes_cache_position:
            kwargs["cache_position"] = cache_position
        return model(input_ids=input_ids, **kwargs).logits[:, -1].argmax(
            -1, keepdim=True)

    ids = torch.randint(0, cfg.vocab, (batch, context), device=device)
    positions = torch.arange(context, device=device)
    more = {"logits_to_keep": 1} if "logits_to_keep" in parameters else {}
    with torch.no_grad():
        token = forward(ids, positions.expand(batch, -1), positions, **more)
    keys = getattr(cache.layers[0], "keys", None) if hasattr(cache, "layers") else None
    expected = (batch, cfg.kv_heads, length, cfg.head_dim)
    if keys is None or tuple(keys.shape) != expected:
        raise RuntimeError(f"StaticCache layer 0 holds "
                           f"{None if keys is None else tuple(keys.shape)} "
                           f"after prefill, expected {expected}")

    decode = torch.compile(forward, mode="reduce-overhead", fullgraph=True)

    def inputs(step):
        position = context + step
        return (torch.full((batch, 1), position, dtype=torch.long, device=device),
                torch.full((1,), position, dtype=torch.long, device=device))

    def skips():
        return sum(count for key, count in counters["inductor"].items()
                   if "cudagraph" in key and "skip" in key)

    reasons = SkipReasons()
    reasons.attach()
    try:
        skips_before = skips()
        with torch.no_grad():
            tokens = []
            for step in range(warmup):
                position_ids, cache_position = inputs(step)
                torch.compiler.cudagraph_mark_step_begin()
                # Outputs live in the CUDA graph's memory, which the next
                # replay overwrites.
                token = decode(token, position_ids, cache_position).clone()
                tokens.append(token[:8, 0].tolist())
            torch.cuda.synchronize()
            graphs_after_warmup = counters["stats"].get("unique_graphs", 0)
            print(f"hf-{attention}-compiled: after {warmup} warm-up steps, "
                  f"{skips() - skips_before} CUDA-graph skip(s), "
                  f"{graphs_after_warmup} graph(s) compiled",
                  file=sys.stderr, flush=True)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            times = []
            for step in range(warmup, warmup + steps):
                position_ids, cache_position = inputs(step)
                start.record()
                torch.compiler.cudagraph_mark_step_begin()
                out = decode(token, position_ids, cache_position)
                end.record()
                token = out.clone()
                end.synchronize()
                times.append(start.elapsed_time(end))
        cudagraph_skips = skips() - skips_before
        recompiles = counters["stats"].get("unique_graphs", 0) - graphs_after_warmup
    finally:
        reasons.detach()
    why = []
    if cudagraph_skips:
        why.append(f"inductor skipped CUDA graphs {cudagraph_skips} time(s): "
                   + ("; ".join(reasons.reasons) or "no reason logged (rerun "
                      "with TORCH_LOGS=perf_hints,cudagraphs)"))
    if recompiles:
        why.append(f"{recompiles} graph(s) compiled during the timed steps")
    check = dict(cudagraph_skips=cudagraph_skips, recompiles=recompiles,
                 valid=not why, tokens=tokens)
    if why:
        check["why"] = "; ".join(why)
    ms = sorted(times)[len(times) // 2]
    return batch / (ms / 1e3), ms, check


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("package")
    parser.add_argument("--out")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--skip-compiled", action="store_true")
    parser.add_argument("--impls", default="kiln,hf-sdpa,hf-sdpa-compiled,hf-kiln-compiled",
                        help="the rows to run, comma-separated")
    options = parser.parse_args()
    cfg = Config(vocab=32000, hidden=2048, layers=16, q_heads=32, kv_heads=8,
                 head_dim=64, ffn=8192, rope_theta=500000.0)
    rows = []

    wanted = set(options.impls.split(","))
    if options.skip_compiled:
        wanted -= {"hf-sdpa-compiled", "hf-kiln-compiled"}

    def record(impl, fn):
        if impl not in wanted:
            return
        try:
            tps, ms, *checks = fn()
            row = dict(impl=impl, tokens_per_s=tps, ms_per_step=ms)
            for check in checks:
                row.update(check)
        except Exception as error:  # noqa: BLE001
            row = dict(impl=impl, error=f"{type(error).__name__}: {error}")
            traceback.print_exc()
        row.update(b=options.batch, context=options.context, layers=cfg.layers,
                   hidden=cfg.hidden, hq=cfg.q_heads, hkv=cfg.kv_heads,
                   d=cfg.head_dim)
        rows.append(row)
        print(row, flush=True)
        if row.get("valid") is False:
            print(f"WARNING: {impl} is not a valid measurement: {row['why']}",
                  file=sys.stderr, flush=True)
        torch.cuda.empty_cache()

    package = kiln.load(options.package) if "kiln" in wanted else None
    record("kiln", lambda: kiln_tokens_per_second(
        package, cfg, options.batch, options.context, options.steps))
    record("hf-sdpa", lambda: hf_tokens_per_second(
        cfg, options.batch, options.context, 8, 24))
    record("hf-sdpa-compiled", lambda: hf_compiled_tokens_per_second(
        cfg, options.batch, options.context, COMPILED_WARMUP, options.steps))
    if "hf-kiln-compiled" in wanted:
        import kiln.transformers

        kiln.transformers.register()
        record("hf-kiln-compiled", lambda: hf_compiled_tokens_per_second(
            cfg, options.batch, options.context, COMPILED_WARMUP, options.steps,
            attention="kiln"))
    base = {r["impl"]: r.get("tokens_per_s") for r in rows
            if r.get("valid", True)}
    if base.get("hf-kiln-compiled") and base.get("hf-sdpa-compiled"):
        print(f"hf-kiln-compiled / hf-sdpa-compiled: "
              f"{base['hf-kiln-compiled'] / base['hf-sdpa-compiled']:.2f}x")
    if base.get("kiln"):
        for impl in ("hf-sdpa", "hf-sdpa-compiled"):
            if base.get(impl):
                print(f"kiln / {impl}: {base['kiln'] / base[impl]:.2f}x")
            elif any(r["impl"] == impl and r.get("valid") is False for r in rows):
                print(f"kiln / {impl}: none ({impl} is not valid)")
    if options.out:
        Path(options.out).write_text(json.dumps(
            {"rows": rows, "device": torch.cuda.get_device_name(),
             "torch": torch.__version__}, indent=1))
    compiled = {r["impl"]: r.get("tokens") for r in rows if r.get("tokens")}
    if len(compiled) == 2:
        a, b = compiled.values()
        same = sum(x == y for x, y in zip(sum(a, []), sum(b, [])))
        print(f"greedy tokens of the warm-up steps, kiln against sdpa: "
              f"{same} of {len(sum(a, []))} the same")
    return 0 if base.get("kiln") or "kiln" not in wanted else 1


if __name__ == "__main__":
    sys.exit(main())
