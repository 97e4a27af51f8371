#!/usr/bin/env python3
"""Checks `attn_implementation="kiln"` (kiln.transformers) against Hugging
Face's `eager` attention on small random models of each family.

    KILN_CACHE=DIR python3 test/gpu/check_transformers.py

Families: Llama, Mistral, Qwen2, Gemma (GQA, causal), GPT-2 (MHA, causal) and
BERT (bidirectional), 2 layers, head dim 64, random weights. bf16 logits of a
batch of two sequences, one padded (left for decoders, right for BERT), must
agree with eager within 2e-2 (relative, over the positions that are not
padding). Llama in f32: 32 greedy tokens from `generate` must equal eager's.

Sliding windows, active: Mistral (every layer), Qwen2 (layer 1 of 2 through
`use_sliding_window` / `max_window_layers`) and Gemma 3 (head dim 256, layer 0
of 2 through `layer_types`), window 32 over 100 tokens, padded and unpadded.
Kiln sees the window only through the boolean mask transformers builds; so
besides the logits, the output of the first sliding layer's attention must
match eager's within 2e-2 and differ from that of the same weights with the
window out of reach by more than 0.1 (else the check could not tell a kernel
that ignores the window). Gemma with head dim 256 (Gemma's own), 150 tokens.

No call may fall back to SDPA (each new check asserts it for itself). On
machines without kilnc, DIR must hold the sites compiled beforehand
(`kiln.transformers.precompile`, head dims 64 and 256 here).
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


def check_logits(name, config, cls, side, length=37):
    eager, kiln = pair(config, cls, torch.bfloat16)
    ids = torch.randint(0, 1000, (2, length), device="cuda")
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


def new_fallbacks(before):
    """The SDPA fallbacks, by reason, counted since `before`."""
    return {reason: count - before.get(reason, 0)
            for reason, count in kt.fallbacks.items()
            if count != before.get(reason, 0)}


def check_head_dim_256():
    """Gemma at its real head dim, 256, over 150 tokens (several key
    blocks): logits against eager, and Kiln serving every call."""
    before = dict(kt.fallbacks)
    check_logits("gemma d256", GemmaConfig(**COMMON, head_dim=256),
                 AutoModelForCausalLM, "left", length=150)
    fell_back = new_fallbacks(before)
    assert not fell_back, f"fell back to SDPA: {fell_back}"


WINDOW = 32
#: A window no sequence here reaches: the same layers without the window.
WIDE = 4096


def sliding_configs():
    """Per family, a builder of (config with a window of WINDOW, the same
    model with the window out of reach)."""

    def gemma3(window):
        from transformers import Gemma3TextConfig

        return Gemma3TextConfig(**COMMON, head_dim=256, sliding_window=window,
                                layer_types=["sliding_attention",
                                             "full_attention"])

    return {
        "mistral": lambda: tuple(MistralConfig(**COMMON, sliding_window=w)
                                 for w in (WINDOW, WIDE)),
        "qwen2": lambda: tuple(Qwen2Config(**COMMON, use_sliding_window=True,
                                           sliding_window=w, max_window_layers=1)
                               for w in (WINDOW, WIDE)),
        "gemma3 d256": lambda: (gemma3(WINDOW), gemma3(WIDE)),
    }


def run_with_attention(model, layer, ids, mask):
    """Logits of the padded batch and of its first (unpadded) sequence alone,
    and the output of layer `layer`'s attention in the latter: [S, hidden]."""
    outputs = []

    def keep(module, args, output):
        outputs.append((output[0] if isinstance(output, tuple) else output).float())

    hook = model.model.layers[layer].self_attn.register_forward_hook(keep)
    try:
        with torch.no_grad():
            padded = model(input_ids=ids, attention_mask=mask).logits.float()
            plain = model(input_ids=ids[:1]).logits.float()
    finally:
        hook.remove()
    return padded, plain, outputs[-1][0]


def check_sliding_window(name, build, length=100):
    """Logits against eager with the window active (padded and unpadded
    batches), and the first sliding layer's attention output against
    eager's and against that of the same weights without the window."""
    config, wide_config = build()
    before = dict(kt.fallbacks)
    eager, kiln = pair(config, AutoModelForCausalLM, torch.bfloat16)
    assert eager.config.sliding_window == WINDOW < length, (
        f"{name}: the model's sliding_window is {eager.config.sliding_window}")
    layer_types = getattr(eager.config, "layer_types", None) or []
    layer = (layer_types.index("sliding_attention")
             if "sliding_attention" in layer_types else 0)
    wide = AutoModelForCausalLM.from_config(
        copy.deepcopy(wide_config),
        attn_implementation="eager").to("cuda", torch.bfloat16).eval()
    wide.load_state_dict(eager.state_dict())

    ids = torch.randint(0, 1000, (2, length), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    logits, attention = {}, {}
    for key, model in (("eager", eager), ("kiln", kiln), ("wide", wide)):
        padded, plain, output = run_with_attention(model, layer, ids, mask)
        logits[key] = padded, plain
        attention[key] = output[WINDOW:]  # the positions the window cuts

    def rel(a, b):
        return float((a - b).norm() / a.norm())

    valid = mask.bool()
    (a, c), (b, d) = logits["eager"], logits["kiln"]
    rel_padded, rel_plain = rel(a[valid], b[valid]), rel(c, d)
    rel_layer = rel(attention["eager"], attention["kiln"])
    window_effect = rel(attention["eager"], attention["wide"])
    fell_back = new_fallbacks(before)
    print(f"  {name}: window {WINDOW} over {length} tokens, sliding layer "
          f"{layer}: logits rel err padded {rel_padded:.2e}, unpadded "
          f"{rel_plain:.2e}; attention rel err {rel_layer:.2e}, window's own "
          f"effect {window_effect:.2e}; fallbacks {fell_back or 'none'}")
    assert not fell_back, f"fell back to SDPA: {fell_back}"
    assert window_effect > 0.1, (
        f"the window changes eager's attention by only {window_effect:.2e}: "
        "it is not active, so this check proves nothing")
    assert rel_padded < 2e-2 and rel_plain < 2e-2 and rel_layer < 2e-2, (
        rel_padded, rel_plain, rel_layer)


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
    run("gemma head dim 256 bf16 logits vs eager, no fallback",
        check_head_dim_256)
    for name, build in sliding_configs().items():
        run(f"{name} sliding window {WINDOW} bf16 vs eager, no fallback",
            check_sliding_window, name, build)
    run("llama f32 greedy generation vs eager", check_greedy)
    run("llama bf16 over PagedKVCache vs eager", check_paged_cache)
    run("no fallback to SDPA", lambda: None if not kt.fallbacks else
        (_ for _ in ()).throw(AssertionError(kt.fallbacks)))
    failed = [r for r in RESULTS if not r[1]]
    print(f"\n{len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
