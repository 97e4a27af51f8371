#!/usr/bin/env python3
"""Saves the StableHLO text of JAX functions that write attention the ways
JAX code writes it (plain jnp, Flax and Equinox modules; causal and padding
masks, GQA, soft-cap, ALiBi, a GPT-2 block and a BERT block), as
`jax.jit(f).lower(...)` prints it, for the importer's lit tests
(test/Target/StableHLO/Inputs). Weights are arguments of the jitted
function, so the texts stay small. Needs JAX (and Flax, Equinox for their
cases); the suite itself needs none of them.

    python3 utils/save_stablehlo.py OUT_DIR [--only NAME,...]

Each NAME.mlir is the module with its locations (debug info); NAME.json
holds the inputs' shapes and what the function computes, for the record.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import jax
import jax.numpy as jnp

B, S, H, D = 2, 64, 4, 32
E = H * D


def key(i: int) -> Any:
    return jax.random.PRNGKey(i)


def qkv(dtype: Any, heads: int = H, kv_heads: int = H, q_len: int = S,
        kv_len: int = S, layout: str = "bshd") -> Tuple[Any, Any, Any]:
    """Q, K, V in `layout` (JAX code mostly keeps [B, S, H, D])."""
    def make(i: int, h: int, s: int) -> Any:
        shape = (B, s, h, D) if layout == "bshd" else (B, h, s, D)
        return jax.random.normal(key(i), shape, jnp.float32).astype(dtype)

    return make(1, heads, q_len), make(2, kv_heads, kv_len), make(3, kv_heads, kv_len)


# -- Plain jnp, as research code writes it ----------------------------------


def einsum_causal(q: Any, k: Any, v: Any) -> Any:
    """einsum scores, tril mask through where(-inf), jax.nn.softmax."""
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    mask = jnp.tril(jnp.ones((q.shape[1], k.shape[1]), dtype=bool))
    scores = jnp.where(mask, scores, -jnp.inf)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)


def einsum_causal_finfo(q: Any, k: Any, v: Any) -> Any:
    """The causal mask filled with finfo.min, the softmax in f32."""
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32)
    scores = scores * (q.shape[-1] ** -0.5)
    i = jnp.arange(q.shape[1])[:, None]
    j = jnp.arange(k.shape[1])[None, :]
    scores = jnp.where(j <= i, scores, jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v)


def padding_mask(q: Any, k: Any, v: Any, keep: Any) -> Any:
    """BERT's padding: (1 - mask[:, None, None, :]) * -1e9 added."""
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    scores = scores + (1.0 - keep[:, None, None, :].astype(scores.dtype)) * -1e9
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)


def padding_where(q: Any, k: Any, v: Any, keep: Any) -> Any:
    """A boolean padding mask through where(-inf), no scale multiply (the
    scale folded into Q)."""
    q = q * (q.shape[-1] ** -0.5)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k)
    scores = jnp.where(keep[:, None, None, :], scores, -jnp.inf)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)


def gqa_repeat(q: Any, k: Any, v: Any) -> Any:
    """GQA by jnp.repeat of the KV heads, causal."""
    groups = q.shape[2] // k.shape[2]
    k = jnp.repeat(k, groups, axis=2)
    v = jnp.repeat(v, groups, axis=2)
    return einsum_causal(q, k, v)


def gqa_grouped(q: Any, k: Any, v: Any) -> Any:
    """GQA by splitting the query heads into groups in the einsum."""
    b, s, h, d = q.shape
    kv = k.shape[2]
    q = q.reshape(b, s, kv, h // kv, d)
    scores = jnp.einsum("bqkgd,bskd->bkgqs", q, k) / math.sqrt(d)
    weights = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("bkgqs,bskd->bqkgd", weights, v)
    return out.reshape(b, s, h, d)


def softcap(q: Any, k: Any, v: Any) -> Any:
    """Gemma 2's soft-cap: tanh(s / 50) * 50, then the causal mask."""
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (q.shape[-1] ** -0.5)
    scores = jnp.tanh(scores / 50.0) * 50.0
    mask = jnp.tril(jnp.ones((q.shape[1], k.shape[1]), dtype=bool))
    scores = jnp.where(mask, scores, -1e30)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)


def alibi(q: Any, k: Any, v: Any) -> Any:
    """ALiBi: slope_h * (j - i) added, with the causal mask."""
    heads = q.shape[2]
    slopes = jnp.array([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)],
                       jnp.float32)
    i = jnp.arange(q.shape[1])[:, None]
    j = jnp.arange(k.shape[1])[None, :]
    bias = slopes[:, None, None] * (j - i)[None].astype(jnp.float32)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32)
    scores = scores / math.sqrt(q.shape[-1]) + bias[None]
    scores = jnp.where(j <= i, scores, -jnp.inf)
    weights = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v)


def bhsd_matmul(q: Any, k: Any, v: Any) -> Any:
    """[B, H, S, D] with matmul and swapaxes, as code ported from PyTorch
    writes it."""
    scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
    return jnp.matmul(jax.nn.softmax(scores, axis=-1), v)


def sdpa_xla(q: Any, k: Any, v: Any) -> Any:
    """jax.nn.dot_product_attention with XLA's implementation, causal."""
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="xla")


# -- Blocks with weights ----------------------------------------------------


def dense(x: Any, w: Any, b: Any = None) -> Any:
    y = x @ w
    return y if b is None else y + b


def layer_norm(x: Any, g: Any, b: Any) -> Any:
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
    return ((x32 - mean) * jax.lax.rsqrt(var + 1e-5) * g + b).astype(x.dtype)


def gpt2_params(dtype: Any) -> Dict[str, Any]:
    names = {"qkv_w": (E, 3 * E), "qkv_b": (3 * E,), "proj_w": (E, E), "proj_b": (E,),
             "ln1_g": (E,), "ln1_b": (E,), "ln2_g": (E,), "ln2_b": (E,),
             "fc_w": (E, 4 * E), "fc_b": (4 * E,), "out_w": (4 * E, E), "out_b": (E,)}
    return {n: (jax.random.normal(key(10 + i), s, jnp.float32) * 0.02).astype(dtype)
            for i, (n, s) in enumerate(names.items())}


def gpt2_block(p: Dict[str, Any], x: Any) -> Any:
    """GPT-2's block: fused QKV projection, split into heads, causal
    attention written with a `bias` buffer (tril) and finfo.min."""
    b, s, _ = x.shape
    h = layer_norm(x, p["ln1_g"], p["ln1_b"])
    q, k, v = jnp.split(dense(h, p["qkv_w"], p["qkv_b"]), 3, axis=-1)
    split = lambda t: t.reshape(b, s, H, D).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    scores = (q @ k.transpose(0, 1, 3, 2)) / jnp.sqrt(jnp.float32(D)).astype(x.dtype)
    causal = jnp.tril(jnp.ones((s, s), dtype=bool))[None, None]
    scores = jnp.where(causal, scores, jnp.finfo(scores.dtype).min)
    attn = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(x.dtype) @ v
    attn = attn.transpose(0, 2, 1, 3).reshape(b, s, E)
    x = x + dense(attn, p["proj_w"], p["proj_b"])
    h = layer_norm(x, p["ln2_g"], p["ln2_b"])
    return x + dense(jax.nn.gelu(dense(h, p["fc_w"], p["fc_b"])), p["out_w"], p["out_b"])


def bert_block(p: Dict[str, Any], x: Any, keep: Any) -> Any:
    """BERT's self-attention block with the extended padding mask."""
    b, s, _ = x.shape
    q, k, v = jnp.split(dense(x, p["qkv_w"], p["qkv_b"]), 3, axis=-1)
    split = lambda t: t.reshape(b, s, H, D).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    extended = (1.0 - keep[:, None, None, :].astype(x.dtype)) * jnp.finfo(x.dtype).min
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D) + extended
    attn = jax.nn.softmax(scores, axis=-1) @ v
    attn = attn.transpose(0, 2, 1, 3).reshape(b, s, E)
    return layer_norm(x + dense(attn, p["proj_w"], p["proj_b"]), p["ln1_g"], p["ln1_b"])


# -- Cases ------------------------------------------------------------------


def keep_mask() -> Any:
    keep = jnp.ones((B, S), jnp.int32)
    return keep.at[0, S - S // 4:].set(0)


def plain(function: Callable, dtype: Any, **shape: Any) -> Callable[[], Tuple]:
    return lambda: (function, qkv(dtype, **shape))


def cases() -> Dict[str, Callable[[], Tuple[Callable, Tuple]]]:
    f32, bf16 = jnp.float32, jnp.bfloat16
    x = lambda dtype: jax.random.normal(key(5), (B, S, E), jnp.float32).astype(dtype)  # noqa: E731
    table: Dict[str, Callable[[], Tuple[Callable, Tuple]]] = {
        "einsum_causal_f32": plain(einsum_causal, f32),
        "einsum_causal_bf16": plain(einsum_causal, bf16),
        "einsum_causal_finfo_bf16": plain(einsum_causal_finfo, bf16),
        "padding_mask_f32": lambda: (padding_mask, qkv(f32) + (keep_mask(),)),
        "padding_where_bf16": lambda: (padding_where, qkv(bf16) + (keep_mask(),)),
        "gqa_repeat_bf16": plain(gqa_repeat, bf16, heads=8, kv_heads=2),
        "gqa_grouped_f32": plain(gqa_grouped, f32, heads=8, kv_heads=2),
        "softcap_bf16": plain(softcap, bf16),
        "alibi_f32": plain(alibi, f32),
        "bhsd_matmul_f32": plain(bhsd_matmul, f32, layout="bhsd"),
        "cross_attention_f32": plain(bhsd_matmul, f32, layout="bhsd", q_len=16, kv_len=S),
        "sdpa_xla_bf16": plain(sdpa_xla, bf16),
        "gpt2_block_bf16": lambda: (gpt2_block, (gpt2_params(bf16), x(bf16))),
        "gpt2_block_f32": lambda: (gpt2_block, (gpt2_params(f32), x(f32))),
        "bert_block_f32": lambda: (bert_block, (gpt2_params(f32), x(f32), keep_mask())),
    }
    try:
        import flax.linen as nn

        def flax_case(causal: bool, dtype: Any) -> Tuple[Callable, Tuple]:
            module = nn.MultiHeadDotProductAttention(num_heads=H, qkv_features=E,
                                                     dtype=dtype, param_dtype=dtype)
            inputs = x(dtype)
            mask = nn.make_causal_mask(jnp.ones((B, S))) if causal else None
            params = module.init(key(7), inputs, inputs, mask=mask)
            return (lambda p, t: module.apply(p, t, t, mask=mask)), (params, inputs)

        table["flax_mha_causal_bf16"] = lambda: flax_case(True, bf16)
        table["flax_mha_f32"] = lambda: flax_case(False, f32)
    except ImportError:
        print("flax not installed: its cases skipped", file=sys.stderr)
    try:
        import equinox as eqx

        def equinox_case(dtype: Any) -> Tuple[Callable, Tuple]:
            module = eqx.nn.MultiheadAttention(H, E, key=key(8), dtype=dtype)
            params, static = eqx.partition(module, eqx.is_array)
            inputs = x(dtype)[0]  # Equinox modules take one sequence

            def call(p: Any, t: Any) -> Any:
                return eqx.combine(p, static)(t, t, t)

            return call, (params, inputs)

        table["equinox_mha_f32"] = lambda: equinox_case(jnp.float32)
    except ImportError:
        print("equinox not installed: its cases skipped", file=sys.stderr)
    return table


def shapes(args: Any) -> List[Any]:
    return [[list(a.shape), str(a.dtype)] for a in jax.tree_util.tree_leaves(args)]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", default="")
    options = parser.parse_args()
    options.out.mkdir(parents=True, exist_ok=True)
    wanted = set(filter(None, options.only.split(",")))
    failed = 0
    for name, make in cases().items():
        if wanted and name not in wanted:
            continue
        try:
            function, args = make()
            lowered = jax.jit(function).lower(*args)
            try:
                text = lowered.as_text(debug_info=True)
            except TypeError:
                text = lowered.as_text()
            (options.out / f"{name}.mlir").write_text(text)
            (options.out / f"{name}.json").write_text(json.dumps(
                {"inputs": shapes(args), "doc": (function.__doc__ or "").strip(),
                 "jax": jax.__version__}, indent=1))
            print(f"{name}: {len(text)} characters", flush=True)
        except Exception as error:  # noqa: BLE001
            failed += 1
            print(f"{name}: FAILED {type(error).__name__}: {error}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
