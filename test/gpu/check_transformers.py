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
Gemma 2 (soft-capping on Kiln's `softcap`, layer 0 of 2 sliding) likewise.
The padded batch's window reaches Kiln through the boolean mask transformers
builds; the unpadded one's on Kiln's `window` attribute (Kiln's mask
function leaves out a mask that is exactly causal with the window), which
the check asserts was used; so
besides the logits, the output of the first sliding layer's attention must
match eager's within 2e-2 and differ from that of the same weights with the
window out of reach by more than 0.1 (else the check could not tell a kernel
that ignores the window). Gemma with head dim 256 (Gemma's own), 150 tokens.

PagedKVCache (bf16, pages of 16), against eager over its dynamic cache, fed
the same tokens with the positions `generate` gives: Llama, two unpadded
prompts (prefill and 8 decode steps, then `generate`); Llama, three prompts
of 37, 30 and 21 tokens left-padded to 37 (logits over the real positions and
8 decode steps within 2e-2; 16 greedy tokens from `generate` equal to eager's,
or parting only where eager's two best logits are within 4% of the logits'
RMS); Mistral with a window of 32, prompts of 40 tokens (unpadded, and one
left-padded by 6) and 40 decode steps (logits within 2e-2, while the window
itself moves eager's logits by more than that).

PagedKVCache's ragged prefill: Llama, the three left-padded prompts, a cache
with `ragged_prefill=True` (the prefill packs the real queries and runs the
ragged twin of the paged site) against one with `ragged_prefill=False` (the
uniform launch over every padded row), fed the same tokens: the first
layer's attention output in the prefill within bf16 rounding (relative
8e-3, two bf16 ulps) and exactly zero at the pads in both, logits of the
prefill's real positions and of 8 decode steps within 1e-2, the ragged site
asked for by the one and not by the other.

PagedKVCache with FP8 pages (`kv_dtype="fp8_e4m3"`, scales per KV head):
Llama, the three left-padded prompts, against the same model over a bf16
PagedKVCache: the prefill's logits over the real positions within 5e-2
(relative), the pages float8_e4m3fn with [2] f32 scales, every call on the
FP8 site; 16 greedy tokens from `generate` with each cache: of the first 8
steps at least half equal, and each sequence parts (if it does) only where
the bf16 run's two best logits are within 5% of the logits' RMS.

No call may fall back to SDPA (each new check asserts it for itself). On
machines without kilnc, DIR must hold the sites compiled beforehand
(`kiln.transformers.precompile`, head dims 64 and 256 here,
`windows=(32,)` for the paged site of Mistral's window, `ragged=True` for
the ragged prefill and `fp8_kv_heads=(2,)` for the FP8 pages).
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
                          BertConfig, GemmaConfig, Gemma2Config, GPT2Config, LlamaConfig,
                          MistralConfig, Qwen2Config)

import kiln.paged_cache as kp  # noqa: E402
import kiln.transformers as kt  # noqa: E402
from kiln.site import SiteSpec  # noqa: E402

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


def padded_batch(side, length):
    """Two sequences of `length` random tokens, the second padded by 5 on
    `side`, and their attention mask."""
    ids = torch.randint(0, 1000, (2, length), device="cuda")
    mask = torch.ones_like(ids)
    if side == "left":
        mask[1, :5] = 0
    else:
        mask[1, -5:] = 0
    return ids, mask


def check_logits(name, config, cls, side, length=37):
    eager, kiln = pair(config, cls, torch.bfloat16)
    ids, mask = padded_batch(side, length)
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


def check_training(name, config, cls, side, length=37):
    """A training step's gradients (dropout set to 0, the one thing that
    would make two runs differ): the loss of a padded batch differentiated through Kiln's training
    sites against eager's, every parameter's gradient within 2e-2
    (relative, over all of them), and no call left to SDPA."""
    config = copy.deepcopy(config)
    for attr in ("attn_pdrop", "resid_pdrop", "embd_pdrop", "attention_dropout",
                 "hidden_dropout_prob", "attention_probs_dropout_prob"):
        if hasattr(config, attr):
            setattr(config, attr, 0.0)
    eager, kiln = pair(config, cls, torch.bfloat16)
    eager.train()
    kiln.train()
    ids, mask = padded_batch(side, length)
    before = dict(kt.fallbacks)
    grads = []
    for model in (eager, kiln):
        model.zero_grad()
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
        logits[mask.bool()].pow(2).mean().backward()
        grads.append(torch.cat([p.grad.float().flatten()
                                for p in model.parameters()
                                if p.grad is not None]))
    a, b = grads
    rel = float((a - b).norm() / a.norm())
    print(f"  {name}: training gradients rel err {rel:.2e}")
    assert new_fallbacks(before) == {}, new_fallbacks(before)
    assert rel < 2e-2, rel


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
        # Gemma 2: soft-capped scores (Kiln's softcap), sliding layers first.
        "gemma2 softcap": lambda: tuple(
            Gemma2Config(**COMMON, head_dim=64, sliding_window=w,
                         attn_logit_softcapping=50.0,
                         layer_types=["sliding_attention", "full_attention"])
            for w in (WINDOW, WIDE)),
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
    specs = []  # the site specs the calls ask for
    site_for = kt.site_for

    def spy(spec):
        specs.append(spec)
        return site_for(spec)
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
        kt.site_for = spy
        try:
            padded, plain, output = run_with_attention(model, layer, ids, mask)
        finally:
            kt.site_for = site_for
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
    # The unpadded batch's mask is exactly causal with the window: Kiln's
    # mask function leaves it out and the layer runs on Kiln's `window`.
    windowed = sorted({spec.label for spec in specs if spec.window})
    print(f"  {name}: sites on Kiln's window: {windowed or 'none'}")
    assert windowed, "no call ran on Kiln's window attribute"
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


def check_static_cache_compiled(batch=4, prompt=45, steps=6):
    """transformers' compiled-decode recipe: Llama bf16 over a StaticCache,
    the prompt run eagerly, then decode steps whose forward runs under
    torch.compile(mode="reduce-overhead", fullgraph=True) (CUDA graphs),
    Kiln's attention against eager's fed the same tokens: logits within
    2e-2 at the prompt's last position and at every step."""
    from transformers import StaticCache

    config = LlamaConfig(**COMMON)
    eager, kiln = pair(config, AutoModelForCausalLM, torch.bfloat16)
    ids = torch.randint(0, 1000, (batch, prompt), device="cuda")
    length = prompt + steps + 3
    logits = {}
    for name, model in (("eager", eager), ("kiln", kiln)):
        cache = StaticCache(config=model.config, max_cache_len=length)

        def forward(input_ids, position_ids, model=model, cache=cache):
            return model(input_ids=input_ids, position_ids=position_ids,
                         past_key_values=cache, use_cache=True).logits[:, -1].float()

        torch._dynamo.reset()
        decode = torch.compile(forward, mode="reduce-overhead", fullgraph=True)
        out = []
        with torch.no_grad():
            positions = torch.arange(prompt, device="cuda").expand(batch, -1)
            out.append(forward(ids, positions))
            token = ids[:, -1:]  # the same tokens for both: eager's choice
            for step in range(steps):
                token = (logits["eager"][step].argmax(-1, keepdim=True)
                         if name == "kiln" else out[-1].argmax(-1, keepdim=True))
                position = torch.full((batch, 1), prompt + step, device="cuda")
                torch.compiler.cudagraph_mark_step_begin()
                out.append(decode(token, position).clone())
        logits[name] = out
    errors = [rel(a, b) for a, b in zip(logits["eager"], logits["kiln"])]
    print(f"  llama bf16 StaticCache, compiled decode: logits rel err per step "
          f"{[f'{e:.1e}' for e in errors]}")
    assert max(errors) < 2e-2, errors


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


def rel(a, b):
    return float((a.float() - b.float()).norm() / a.float().norm())


def step_logits(eager, others, ids, mask, steps):
    """Feeds the left-padded batch `ids` (`mask`) and then `steps` tokens,
    those eager picks greedily, to `eager` over its dynamic cache and to each
    (model, cache) of `others` (cache None: the model's own dynamic cache),
    with the positions `generate` gives (counted from each sequence's first
    real token). Returns, per model of `others`, the worst relative error of
    its logits against eager's: over the prompt's real positions, then at
    each step."""
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    inputs = dict(input_ids=ids, attention_mask=mask, position_ids=positions,
                  use_cache=True)
    ref = eager(**inputs)
    outs = [model(**inputs, past_key_values=cache) for model, cache in others]
    valid = mask.bool()
    worst = [rel(ref.logits[valid], out.logits[valid]) for out in outs]
    for _ in range(steps):
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], -1)
        positions = positions[:, -1:] + 1
        inputs = dict(input_ids=ref.logits[:, -1].argmax(-1, keepdim=True),
                      attention_mask=mask, position_ids=positions,
                      use_cache=True)
        ref = eager(**inputs, past_key_values=ref.past_key_values)
        outs = [model(**inputs, past_key_values=cache if cache is not None
                      else out.past_key_values)
                for (model, cache), out in zip(others, outs)]
        worst = [max(w, rel(ref.logits[:, -1], out.logits[:, -1]))
                 for w, out in zip(worst, outs)]
    return worst


def left_padded(real_lengths, generator_seed=0):
    """A batch of random prompts left-padded to the longest: ids, mask."""
    torch.manual_seed(generator_seed)
    length = max(real_lengths)
    ids = torch.randint(0, 1000, (len(real_lengths), length), device="cuda")
    mask = torch.ones_like(ids)
    for row, real in enumerate(real_lengths):
        mask[row, :length - real] = 0
    return ids, mask


def check_paged_padded():
    """Llama bf16 over PagedKVCache with a left-padded batch of three prompts
    (37, 30 and 21 tokens) against eager over its dynamic cache: logits over
    the prompt's real positions and 8 decode steps fed the same tokens, then
    16 greedy tokens from `generate`."""
    config = LlamaConfig(**COMMON)
    before = dict(kt.fallbacks)
    eager, kiln = pair(config, AutoModelForCausalLM, torch.bfloat16)
    ids, mask = left_padded((37, 30, 21))
    layers = config.num_hidden_layers
    cache = kt.PagedKVCache(batch_size=3, max_length=64, num_layers=layers)
    with torch.no_grad():
        (worst,) = step_logits(eager, [(kiln, cache)], ids, mask, steps=8)
        options = dict(attention_mask=mask, max_new_tokens=16, min_new_tokens=16,
                       do_sample=False)
        generated = kiln.generate(
            ids, past_key_values=kt.PagedKVCache(batch_size=3, max_length=64,
                                                 num_layers=layers), **options)
        reference = eager.generate(ids, output_logits=True,
                                   return_dict_in_generate=True, **options)
    fell_back = new_fallbacks(before)
    lengths = cache.sequence_lengths().tolist()
    # Greedy tokens may part where eager's two best logits are closer than
    # bf16 noise; past the first difference the sequences differ anyway.
    new, ref_new = generated[:, ids.shape[1]:], reference.sequences[:, ids.shape[1]:]
    same = int((new == ref_new).sum())
    ties = []
    for row in range(new.shape[0]):
        differ = (new[row] != ref_new[row]).nonzero()
        if len(differ):
            step = int(differ[0])
            logits = reference.logits[step][row].float()
            gap = float(logits[ref_new[row, step]] - logits[new[row, step]])
            noise = 4e-2 * float(logits.pow(2).mean().sqrt())
            ties.append((row, step, round(gap, 4), gap <= noise))
    print(f"  paged cache, left padding: real lengths {lengths}; worst logits "
          f"rel err {worst:.2e}; generate: {same} of {new.numel()} tokens "
          f"equal to eager's; first differences (row, step, eager's gap, "
          f"near tie): {ties or 'none'}; fallbacks {fell_back or 'none'}")
    assert not fell_back, f"fell back to SDPA: {fell_back}"
    assert lengths == [37 + 8, 30 + 8, 21 + 8], lengths
    assert worst < 2e-2, worst
    assert all(tie for *_, tie in ties), f"greedy tokens differ: {ties}"


def check_paged_sliding_window():
    """Mistral bf16 with a sliding window of WINDOW over PagedKVCache against
    eager: a 40-token prompt and 40 decode steps (80 tokens, the window
    passed in the prompt already), unpadded and with one sequence
    left-padded by 6; every call on the windowed paged site. The same
    weights with the window out of reach must differ from eager by more
    than the tolerance, or the check could not tell the window."""
    config = MistralConfig(**COMMON, sliding_window=WINDOW)
    before = dict(kt.fallbacks)
    eager, kiln = pair(config, AutoModelForCausalLM, torch.bfloat16)
    assert eager.config.sliding_window == WINDOW, eager.config.sliding_window
    wide = AutoModelForCausalLM.from_config(
        MistralConfig(**COMMON, sliding_window=WIDE),
        attn_implementation="eager").to("cuda", torch.bfloat16).eval()
    wide.load_state_dict(eager.state_dict())
    results = []
    for real_lengths in ((40, 40), (40, 34)):
        ids, mask = left_padded(real_lengths)
        cache = kt.PagedKVCache(batch_size=2, max_length=96,
                                num_layers=config.num_hidden_layers)
        with torch.no_grad():
            worst, effect = step_logits(eager, [(kiln, cache), (wide, None)],
                                        ids, mask, steps=40)
        results.append((real_lengths, worst, effect,
                        cache.sequence_lengths().tolist()))
    fell_back = new_fallbacks(before)
    site = SiteSpec.paged("bf16", 64, 64, 64 ** -0.5, 16, window=WINDOW)
    for real_lengths, worst, effect, lengths in results:
        print(f"  paged cache, window {WINDOW}, prompts {real_lengths} + 40 "
              f"steps: worst logits rel err {worst:.2e}; window's own effect "
              f"{effect:.2e}; real lengths {lengths}")
    print(f"  windowed paged site used: {site in kt._sites}; fallbacks "
          f"{fell_back or 'none'}")
    assert not fell_back, f"fell back to SDPA: {fell_back}"
    assert site in kt._sites, sorted(kt._sites)
    for real_lengths, worst, effect, lengths in results:
        assert lengths == [n + 40 for n in real_lengths], lengths
        assert effect > 2e-2, (
            f"the window moves eager's logits by only {effect:.2e}: this "
            "check could not tell a kernel that ignores it")
        assert worst < 2e-2, (real_lengths, worst)


def check_paged_ragged_prefill():
    """Llama bf16, three prompts (37, 30 and 21 tokens) left-padded to 37,
    over a PagedKVCache whose prefill packs the real queries (the ragged
    site) against one that runs every padded row (the uniform site), fed
    the same tokens: the first layer's attention output in the prefill
    within bf16 rounding and zero at the pads, logits of the prefill's real
    positions and of 8 decode steps within 1e-2."""
    config = LlamaConfig(**COMMON)
    before = dict(kt.fallbacks)
    _, kiln = pair(config, AutoModelForCausalLM, torch.bfloat16)
    ids, mask = left_padded((37, 30, 21))
    layers = config.num_hidden_layers
    site_for = kp.site_for
    specs = {True: [], False: []}
    attention = {}
    logits = {True: [], False: []}
    # The same decode tokens for both.
    tokens = torch.randint(0, 1000, (8, 3, 1), device="cuda")
    for ragged in (True, False):
        cache = kt.PagedKVCache(batch_size=3, max_length=64, num_layers=layers,
                                ragged_prefill=ragged)
        outputs = []

        def keep(module, args, output):
            outputs.append(output[0] if isinstance(output, tuple) else output)

        def spy(spec, ragged=ragged):
            specs[ragged].append(spec)
            return site_for(spec)

        hook = kiln.model.layers[0].self_attn.register_forward_hook(keep)
        kp.site_for = spy
        try:
            with torch.no_grad():
                positions = (mask.cumsum(-1) - 1).clamp(min=0)
                step_mask = mask
                out = kiln(input_ids=ids, attention_mask=mask,
                           position_ids=positions, past_key_values=cache,
                           use_cache=True)
                attention[ragged] = outputs[0].float()
                logits[ragged].append(out.logits[mask.bool()].float())
                for token in tokens:
                    step_mask = torch.cat([step_mask, mask.new_ones(3, 1)], -1)
                    positions = positions[:, -1:] + 1
                    out = kiln(input_ids=token, attention_mask=step_mask,
                               position_ids=positions, past_key_values=cache,
                               use_cache=True)
                    logits[ragged].append(out.logits[:, -1].float())
        finally:
            kp.site_for = site_for
            hook.remove()
    fell_back = new_fallbacks(before)
    pads = ~mask.bool()
    rel_attention = rel(attention[False][~pads], attention[True][~pads])
    pad_zero = all(bool((attention[r][pads] == 0).all()) for r in (True, False))
    errors = [rel(a, b) for a, b in zip(logits[False], logits[True])]
    ragged_sites = sorted({s.label for s in specs[True] if s.ragged})
    print(f"  ragged prefill vs uniform: layer 0 attention rel err "
          f"{rel_attention:.2e}, pad rows zero in both: {pad_zero}; logits rel "
          f"err prefill {errors[0]:.1e}, steps "
          f"{[f'{e:.1e}' for e in errors[1:]]}; ragged sites {ragged_sites}; "
          f"unavailable {kt._ragged_unavailable or 'none'}; fallbacks "
          f"{fell_back or 'none'}")
    assert not fell_back, f"fell back to SDPA: {fell_back}"
    assert (len(ragged_sites) == 1
            and ragged_sites[0].endswith("_paged16_ragged")), ragged_sites
    assert not any(s.ragged for s in specs[False]), specs[False]
    assert pad_zero, "pad rows of the attention output are not zero"
    assert rel_attention < 8e-3, rel_attention
    assert max(errors) < 1e-2, errors


def check_paged_fp8():
    """Llama bf16 over a PagedKVCache of FP8 pages (kv_dtype="fp8_e4m3")
    against the same model over a bf16 PagedKVCache, three prompts
    left-padded to 37: prefill logits over the real positions within 5e-2,
    then 16 greedy tokens from `generate` with each (of the first 8 steps at
    least half equal; each sequence parting only at a near tie of the bf16
    run's logits)."""
    config = LlamaConfig(**COMMON)
    before = dict(kt.fallbacks)
    _, kiln = pair(config, AutoModelForCausalLM, torch.bfloat16)
    ids, mask = left_padded((37, 30, 21))
    layers = config.num_hidden_layers
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    caches = {name: kt.PagedKVCache(batch_size=3, max_length=64,
                                    num_layers=layers, kv_dtype=kv_dtype)
              for name, kv_dtype in (("bf16", None), ("fp8", "fp8_e4m3"))}
    prefill = {}
    with torch.no_grad():
        for name, cache in caches.items():
            out = kiln(input_ids=ids, attention_mask=mask, position_ids=positions,
                       past_key_values=cache, use_cache=True)
            prefill[name] = out.logits[mask.bool()].float()
        options = dict(attention_mask=mask, max_new_tokens=16, min_new_tokens=16,
                       do_sample=False, output_logits=True,
                       return_dict_in_generate=True)
        runs = {name: kiln.generate(ids, past_key_values=kt.PagedKVCache(
                    batch_size=3, max_length=64, num_layers=layers,
                    kv_dtype=kv_dtype), **options)
                for name, kv_dtype in (("bf16", None), ("fp8", "fp8_e4m3"))}
    fell_back = new_fallbacks(before)
    layer = caches["fp8"].layers[0]
    storage = (layer.keys.dtype, layer.values.dtype)
    scales = tuple(layer.k_scale.shape), layer.k_scale.dtype
    fp8_sites = sorted({spec.label for spec in kt._sites if spec.fp8_kv_heads})
    prefill_err = rel(prefill["bf16"], prefill["fp8"])
    start = ids.shape[1]
    ours = runs["fp8"].sequences[:, start:]
    reference = runs["bf16"].sequences[:, start:]
    same_first = int((ours[:, :8] == reference[:, :8]).sum())
    ties = []
    for row in range(ours.shape[0]):
        differ = (ours[row] != reference[row]).nonzero()
        if len(differ):
            step = int(differ[0])
            logits = runs["bf16"].logits[step][row].float()
            gap = float(logits[reference[row, step]] - logits[ours[row, step]])
            noise = 5e-2 * float(logits.pow(2).mean().sqrt())
            ties.append((row, step, round(gap, 4), gap <= noise))
    print(f"  paged cache, FP8 pages: {storage[0]} with scales {scales}; "
          f"prefill logits rel err vs bf16 pages {prefill_err:.2e}; first 8 "
          f"greedy steps: {same_first} of {ours[:, :8].numel()} tokens equal; "
          f"first differences (row, step, bf16 run's gap, near tie): "
          f"{ties or 'none'}; FP8 sites {fp8_sites}; fallbacks "
          f"{fell_back or 'none'}")
    assert not fell_back, f"fell back to SDPA: {fell_back}"
    assert storage == (torch.float8_e4m3fn, torch.float8_e4m3fn), storage
    assert scales == ((2,), torch.float32), scales
    assert any(label.endswith("_paged16_fp8kv2") for label in fp8_sites), fp8_sites
    assert prefill_err < 5e-2, prefill_err
    assert 2 * same_first >= ours[:, :8].numel(), same_first
    assert all(tie for *_, tie in ties), f"greedy tokens differ: {ties}"


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
    for name in ("llama", "gpt2", "bert"):
        config, cls, side = configs()[name]
        run(f"{name} bf16 training gradients vs eager, no fallback",
            check_training, name, config, cls, side)
    run("gemma head dim 256 bf16 logits vs eager, no fallback",
        check_head_dim_256)
    for name, build in sliding_configs().items():
        run(f"{name} sliding window {WINDOW} bf16 vs eager, no fallback",
            check_sliding_window, name, build)
    run("llama f32 greedy generation vs eager", check_greedy)
    run("llama bf16 StaticCache, compiled decode (reduce-overhead) vs eager",
        check_static_cache_compiled)
    run("llama bf16 over PagedKVCache vs eager", check_paged_cache)
    run("llama bf16 left-padded batch over PagedKVCache vs eager, no fallback",
        check_paged_padded)
    run(f"mistral sliding window {WINDOW} over PagedKVCache vs eager, no "
        f"fallback", check_paged_sliding_window)
    run("llama bf16 left-padded prefill over PagedKVCache, ragged vs uniform",
        check_paged_ragged_prefill)
    run("llama bf16 over PagedKVCache with FP8 pages vs bf16 pages",
        check_paged_fp8)
    run("no fallback to SDPA", lambda: None if not kt.fallbacks else
        (_ for _ in ()).throw(AssertionError(kt.fallbacks)))
    failed = [r for r in RESULTS if not r[1]]
    print(f"\n{len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
