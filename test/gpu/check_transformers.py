#!/usr/bin/env python3
"""Checks `attn_implementation="kiln"` (kiln.transformers) against Hugging
Face's `eager` attention on small random models of each family.

    KILN_CACHE=DIR python3 test/gpu/check_transformers.py

Families: Llama, Mistral, Qwen2, Gemma (GQA, causal), GPT-2 (MHA, causal) and
BERT (bidirectional), 2 layers, head dim 64, random weights. bf16 logits of a
batch of two sequences, one padded (left for decoders, right for BERT), must
agree with eager within 2e-2 (relative, over the positions that are not
padding). Llama in f32: 32 greedy tokens from `generate` must equal eager's.
No call may fall back to SDPA. On machines without kilnc, DIR must hold the
sites compiled beforehand (`kiln.transformers.precompile`).
"""

from __future__ import annotations

import copy
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import (AutoModelForCausalLM, AutoModelForMaskedLM,  # noqa: E402
                          BertConfig, GemmaConfig, GPT2Config, LlamaConfig,
                          MistralConfig, Qwen2Config)

import kiln.transformers as kt  # noqa: E402

RESULTS = []
COMMON = dict(vocab_size=1000, hidden_size=256, intermediate_size=512,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=256)


def configs():
    return {
        "llama": (LlamaConfig(**COMMON), AutoModelForCausalLM, "left"),
        "mistral": (MistralConfig(**COMMON, sliding_window=None),
                    AutoModelForCausalLM, "left"),
        "qwen2": (Qwen2Config(**COMMON), AutoModelForCausalLM, "left"),
        "gemma": (GemmaConfig(**COMMON, head_dim=64), AutoModelForCausalLM, "left"),
        "gpt2": (GPT2Config(vocab_size=1000, n_embd=256, n_layer=2, n_head=4,
                            n_positions=256), AutoModelForCausalLM, "left"),
        "bert": (BertConfig(vocab_size=1000, hidden_size=256, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=512),
                 AutoModelForMaskedLM, "right"),
    }


def pair(config, cls, dtype):
    # Each model its own config: the attention implementation is read from
    # it at run time.
    torch.manual_seed(0)
    eager = cls.from_config(copy.deepcopy(config),
                            attn_implementation="eager").to("cuda", dtype).eval()
    kiln = cls.from_config(copy.deepcopy(config),
                           attn_implementation="kiln").to("cuda", dtype).eval()
    kiln.load_state_dict(eager.state_dict())
    return eager, kiln


def check_logits(name, config, cls, side):
    eager, kiln = pair(config, cls, torch.bfloat16)
    ids = torch.randint(0, 1000, (2, 37), device="cuda")
    mask = torch.ones_like(ids)
    if side == "left":
        mask[1, :5] = 0
    else:
        mask[1, -5:] = 0
    with torch.no_grad():
        a = eager(input_ids=ids, attention_mask=mask).logits.float()
        b = kiln(input_ids=ids, attention_mask=mask).logits.float()
        # No padding at all: the causal (or unmasked) kernel.
        c = eager(input_ids=ids[:1]).logits.float()
        d = kiln(input_ids=ids[:1]).logits.float()
    valid = mask.bool()
    rel = float((a[valid] - b[valid]).norm() / a[valid].norm())
    rel_plain = float((c - d).norm() / c.norm())
    print(f"  {name}: padded batch rel err {rel:.2e}, unpadded {rel_plain:.2e}")
    assert rel < 2e-2 and rel_plain < 2e-2, (rel, rel_plain)


def check_greedy():
    config = LlamaConfig(**COMMON)
    eager, kiln = pair(config, AutoModelForCausalLM, torch.float32)
    ids = torch.randint(0, 1000, (2, 12), device="cuda")
    with torch.no_grad():
        a = eager.generate(ids, max_new_tokens=32, do_sample=False, min_new_tokens=32)
        b = kiln.generate(ids, max_new_tokens=32, do_sample=False, min_new_tokens=32)
    same = torch.equal(a, b)
    print(f"  llama f32: 32 greedy tokens identical: {same}")
    assert same


def check_paged_cache():
    """Llama bf16 over kiln.transformers.PagedKVCache against eager over its
    dynamic cache: prefill and 8 decode steps fed the same tokens."""
    config = LlamaConfig(**COMMON)
    eager, kiln = pair(config, AutoModelForCausalLM, torch.bfloat16)
    ids = torch.randint(0, 1000, (2, 37), device="cuda")
    cache = kt.PagedKVCache(batch_size=2, max_length=64,
                            num_layers=config.num_hidden_layers, page_size=16)
    worst = 0.0
    with torch.no_grad():
        a = eager(input_ids=ids, use_cache=True)
        b = kiln(input_ids=ids, past_key_values=cache, use_cache=True)
        for step in range(9):
            la, lb = a.logits[:, -1].float(), b.logits[:, -1].float()
            worst = max(worst, float((la - lb).norm() / la.norm()))
            nxt = la.argmax(-1, keepdim=True)
            a = eager(input_ids=nxt, past_key_values=a.past_key_values, use_cache=True)
            b = kiln(input_ids=nxt, past_key_values=cache, use_cache=True)
        generated = kiln.generate(
            ids, past_key_values=kt.PagedKVCache(
                batch_size=2, max_length=64, num_layers=config.num_hidden_layers),
            max_new_tokens=16, min_new_tokens=16, do_sample=False)
        reference = eager.generate(ids, max_new_tokens=16, min_new_tokens=16,
                                   do_sample=False)
    same = int((generated[:, 37:] == reference[:, 37:]).sum())
    print(f"  paged cache: worst step logits rel err {worst:.2e}; generate: "
          f"{same} of 32 tokens equal to eager's")
    assert worst < 2e-2 and cache.get_seq_length() == 37 + 9, (worst,
                                                              cache.get_seq_length())


def run(name, fn, *args):
    try:
        fn(*args)
        RESULTS.append((name, True))
        print(f"PASS {name}", flush=True)
    except Exception as error:  # noqa: BLE001
        RESULTS.append((name, False))
        print(f"FAIL {name}: {error!r}", flush=True)
        traceback.print_exc()


def main() -> int:
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    kt.register()
    for name, (config, cls, side) in configs().items():
        run(f"{name} bf16 logits vs eager", check_logits, name, config, cls, side)
    run("llama f32 greedy generation vs eager", check_greedy)
    run("llama bf16 over PagedKVCache vs eager", check_paged_cache)
    run("no fallback to SDPA", lambda: None if not kt.fallbacks else
        (_ for _ in ()).throw(AssertionError(kt.fallbacks)))
    failed = [r for r in RESULTS if not r[1]]
    print(f"\n{len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
