#!/usr/bin/env python3
"""Forward (prefill) time of models whose attention is written out, eager,
under ``torch.compile`` (Inductor) and under ``torch.compile(backend="kiln")``.

    python3 bench/bench_torch_compile.py [--seqs 1024,4096] [--tokens 16384]
        [--models llama,gpt2,...] [--out rows.json]

Models: Hugging Face models built from configs with random weights in
``attn_implementation="eager"`` (Llama, Mistral, Qwen2 with GQA, Gemma 2 with
soft-capping, GPT-2, BERT; hidden 1024, 16 heads, 2 layers, vocabulary
1024) and the hand-written modules of test/gpu/check_torch_compile.py; bf16,
b·s = --tokens tokens at each s. Outputs are checked against eager first
(relative error of the last hidden state or logits, bf16 bound 3e-2). Rows:
``{model, s, impl: "eager"|"inductor"|"kiln", ms, sites, fused}`` with
`sites` the sites Kiln's fusion found, `fused` the sites it rewrote (kiln)
or the SDPA calls Inductor's own patterns made (inductor). Times: CUDA
events around 10 calls after 3 warm-ups.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "test" / "gpu"))

import torch  # noqa: E402

import kiln  # noqa: E402
import kiln.dynamo  # noqa: E402
from check_torch_compile import relative_error, time_ms  # noqa: E402

DEVICE = torch.device("cuda")
DTYPE = torch.bfloat16


def hf_models(seq: int) -> Dict[str, Callable[[], torch.nn.Module]]:
    import transformers as tf

    common = dict(hidden_size=1024, num_attention_heads=16, num_hidden_layers=2,
                  intermediate_size=2816, vocab_size=1024,
                  max_position_embeddings=max(seq, 2048))

    def causal(config):
        return lambda: tf.AutoModelForCausalLM.from_config(
            config, attn_implementation="eager", torch_dtype=DTYPE)

    return {
        "llama": causal(tf.LlamaConfig(num_key_value_heads=4, **common)),
        "mistral": causal(tf.MistralConfig(num_key_value_heads=4,
                                           sliding_window=max(seq // 2, 512), **common)),
        "qwen2": causal(tf.Qwen2Config(num_key_value_heads=4, **common)),
        "gemma2": causal(tf.Gemma2Config(num_key_value_heads=4, head_dim=64,
                                         attn_logit_softcapping=50.0,
                                         sliding_window=max(seq // 2, 512), **common)),
        "gpt2": causal(tf.GPT2Config(n_embd=1024, n_head=16, n_layer=2,
                                     vocab_size=1024, n_positions=max(seq, 1024))),
        "bert": lambda: tf.AutoModel.from_config(
            tf.BertConfig(**common), attn_implementation="eager", torch_dtype=DTYPE),
    }


def model_inputs(name: str, batch: int, seq: int) -> Tuple[Any, ...]:
    if name in ("causal-tril", "bert-padding", "gqa-repeat-interleave",
                "cross-attention", "latent-values"):
        import check_torch_compile as zoo

        for case_name, module, make, _ in zoo.zoo(batch, seq):
            if case_name == name:
                return make()
    ids = torch.randint(0, 1024, (batch, seq), device=DEVICE)
    if name == "bert":
        mask = torch.ones(batch, seq, device=DEVICE, dtype=torch.long)
        mask[0, seq - seq // 8:] = 0  # right padding on the first sequence
        return (ids, mask)
    return (ids,)


def build(name: str, batch: int, seq: int) -> torch.nn.Module:
    models = hf_models(seq)
    if name in models:
        return models[name]().to(DEVICE).eval()
    import check_torch_compile as zoo

    for case_name, module, _, _ in zoo.zoo(batch, seq):
        if case_name == name:
            return module.to(DEVICE, DTYPE).eval()
    raise SystemExit(f"unknown model {name}")


def tensor_of(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    for attribute in ("logits", "last_hidden_state"):
        if getattr(output, attribute, None) is not None:
            return getattr(output, attribute)
    return output[0]


def bench(name: str, seq: int, tokens: int, timing: bool) -> List[Dict[str, Any]]:
    from torch._dynamo.utils import counters

    batch = max(tokens // seq, 1)
    torch.manual_seed(0)
    model = build(name, batch, seq)
    inputs = model_inputs(name, batch, seq)
    rows: List[Dict[str, Any]] = []
    with torch.no_grad():
        want = tensor_of(model(*inputs))
        torch._dynamo.reset()
        counters.clear()
        inductor = torch.compile(model)
        got = tensor_of(inductor(*inputs))
        sdpa = int(counters["inductor"].get("fuse_attention", 0))
        inductor_error = relative_error(got, want)
        torch._dynamo.reset()
        start = len(kiln.dynamo.reports)
        compiled = torch.compile(model, backend="kiln")
        got = tensor_of(compiled(*inputs))
        entries = kiln.dynamo.reports[start:]
        sites = sum(len(e["report"]["sites"]) for e in entries if e["report"])
        fused = sum(len(e["rewritten"]) for e in entries)
        notes = sorted({e["fallback"] for e in entries if e["fallback"]}
                       | {r for e in entries for r in e["skipped"].values()})
        unfused = sorted({u["reason"] for e in entries if e["report"]
                          for u in e["report"]["unfused"]})
        kiln_error = relative_error(got, want)
        base = dict(model=name, s=seq, batch=batch)
        times = {}
        if timing:
            times = {"eager": time_ms(lambda: model(*inputs), 10),
                     "inductor": time_ms(lambda: inductor(*inputs), 10),
                     "kiln": time_ms(lambda: compiled(*inputs), 10)}
        rows.append(dict(base, impl="eager", ms=times.get("eager"), sites=sites, fused=0))
        rows.append(dict(base, impl="inductor", ms=times.get("inductor"), sites=sites,
                         fused=sdpa, rel_err=inductor_error))
        rows.append(dict(base, impl="kiln", ms=times.get("kiln"), sites=sites, fused=fused,
                         rel_err=kiln_error, ok=kiln_error < 3e-2, notes=notes,
                         unfused=unfused))
    del model
    torch.cuda.empty_cache()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="llama,mistral,qwen2,gemma2,gpt2,bert,"
                        "causal-tril,bert-padding,gqa-repeat-interleave,cross-attention")
    parser.add_argument("--seqs", default="1024,4096")
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--no-time", action="store_true")
    parser.add_argument("--out")
    options = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    rows: List[Dict[str, Any]] = []
    for seq in (int(s) for s in options.seqs.split(",")):
        for name in options.models.split(","):
            try:
                new = bench(name, seq, options.tokens, not options.no_time)
            except Exception as error:  # noqa: BLE001
                lines = f"{type(error).__name__}: {error}".strip().splitlines()
                message = " | ".join(lines[:2] + lines[-3:])[:1500]
                print(f"{name} s={seq}: ERROR {message}", flush=True)
                rows.append(dict(model=name, s=seq, impl="kiln", error=message, ok=False))
                continue
            rows += new
            eager, inductor, kiln_row = new
            speed = ""
            if kiln_row["ms"]:
                speed = (f" eager {eager['ms']:.2f} ms, inductor {inductor['ms']:.2f}, "
                         f"kiln {kiln_row['ms']:.2f} ({inductor['ms'] / kiln_row['ms']:.2f}x "
                         f"inductor)")
            print(f"{name} s={seq} b={kiln_row['batch']}: sites {kiln_row['sites']} "
                  f"kiln {kiln_row['fused']} inductor-sdpa {inductor['fused']} "
                  f"err {kiln_row['rel_err']:.1e}{speed}"
                  + (f" notes {kiln_row['notes']}" if kiln_row["notes"] else "")
                  + (f" unfused {kiln_row['unfused'][:2]}" if kiln_row["unfused"] else ""),
                  flush=True)
    if options.out:
        Path(options.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
