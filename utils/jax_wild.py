#!/usr/bin/env python3
"""JAX functions that write attention the ways research code does and that
utils/save_stablehlo.py's table does not hold: the softmax written out or
through logsumexp, `jax.nn.softmax(where=)`, `lax.dot_general` called by
hand, MQA with a key that has no head axis, attention mapped over heads with
`jax.vmap`, a learned temperature, T5's bucketed relative-position bias
gathered from a table, a sliding window from iotas, latent queries over
inputs, the layer under `jax.checkpoint`, RoPE with GQA through `jnp.repeat`,
products accumulated in f32 (`preferred_element_type`), a prefix LM's mask,
and Flax's and Equinox's modules called with masks; `library_cases(seq)`:
`jax.nn.dot_product_attention`'s XLA path with each of its arguments,
MaxText's grouped einsum over packed documents and Gemma's [B, T, N, S]
scores.
`cases(seq)` gives each as `(function, args)` at `seq` tokens (at real
lengths the masks are not folded into constants), for
`test/gpu/check_jax.py --zoo wild` and `utils/dump_jax_sites.py wild:NAME`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Tuple

import jax
import jax.numpy as jnp

B, H, D = 2, 4, 32
E = H * D


def key(i: int) -> Any:
    return jax.random.PRNGKey(100 + i)


def normal(i: int, shape: Any, dtype: Any, scale: float = 1.0) -> Any:
    return (jax.random.normal(key(i), shape, jnp.float32) * scale).astype(dtype)


def qkv(dtype: Any, seq: int, heads: int = H, kv_heads: int = H,
        layout: str = "bshd") -> Tuple[Any, Any, Any]:
    def make(i: int, h: int) -> Any:
        shape = (B, seq, h, D) if layout == "bshd" else (B, h, seq, D)
        return normal(i, shape, dtype)
    return make(1, heads), make(2, kv_heads), make(3, kv_heads)


def manual_softmax(q: Any, k: Any, v: Any) -> Any:
    """The softmax written out: exp(s - max) / sum, causal by triu(k=1)."""
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / math.sqrt(D)
    hidden = jnp.triu(jnp.ones((q.shape[1], k.shape[1]), bool), k=1)
    s = jnp.where(hidden, -jnp.inf, s)
    e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    p = e / jnp.sum(e, axis=-1, keepdims=True)
    return jnp.einsum("bhqk,bkhd->bqhd", p.astype(v.dtype), v)


def logsumexp_softmax(q: Any, k: Any, v: Any) -> Any:
    """exp(s - logsumexp(s)), as code that also keeps the LSE writes it."""
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * D ** -0.5
    p = jnp.exp(s - jax.nn.logsumexp(s, axis=-1, keepdims=True))
    return jnp.einsum("bhqk,bkhd->bqhd", p, v)


def softmax_where(q: Any, k: Any, v: Any, keep: Any) -> Any:
    """jax.nn.softmax(s, where=mask): masked keys take no weight."""
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D)
    p = jax.nn.softmax(s, axis=-1, where=keep[:, None, None, :].astype(bool))
    return jnp.einsum("bhqk,bkhd->bqhd", p, v)


def dot_general(q: Any, k: Any, v: Any) -> Any:
    """lax.dot_general called by hand on [B, H, S, D]."""
    s = jax.lax.dot_general(q, k, (((3,), (3,)), ((0, 1), (0, 1))))
    s = s * jnp.asarray(1.0 / math.sqrt(D), s.dtype)
    p = jax.nn.softmax(s.astype(jnp.float32), axis=-1).astype(v.dtype)
    return jax.lax.dot_general(p, v, (((3,), (2,)), ((0, 1), (0, 1))))


def mqa_no_head(q: Any, k: Any, v: Any) -> Any:
    """MQA: one key and value of [B, S, D] (no head axis), causal."""
    k, v = k[:, :, 0], v[:, :, 0]
    s = jnp.einsum("bqhd,bkd->bhqk", q, k) / math.sqrt(D)
    i = jnp.arange(q.shape[1])[:, None]
    j = jnp.arange(k.shape[1])[None, :]
    s = jnp.where(j > i, jnp.finfo(s.dtype).min, s)
    return jnp.einsum("bhqk,bkd->bqhd", jax.nn.softmax(s, axis=-1), v)


def vmap_heads(q: Any, k: Any, v: Any) -> Any:
    """One head's attention written for [S, D], mapped over batch and heads."""
    def head(q1: Any, k1: Any, v1: Any) -> Any:
        s = q1 @ k1.T / math.sqrt(D)
        return jax.nn.softmax(s, axis=-1) @ v1
    per_batch = jax.vmap(head, in_axes=(1, 1, 1), out_axes=1)
    return jax.vmap(per_batch)(q, k, v)


def temperature(q: Any, k: Any, v: Any, log_tau: Any) -> Any:
    """A learned temperature: s * exp(log_tau), a run-time scalar."""
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * jnp.exp(log_tau).astype(q.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v)


def t5_buckets(relative: Any, buckets: int = 32, max_distance: int = 128) -> Any:
    """T5's bidirectional relative-position bucket of each j - i."""
    half = buckets // 2
    bucket = (relative > 0).astype(jnp.int32) * half
    n = jnp.abs(relative)
    exact = half // 2
    large = exact + (jnp.log(n.astype(jnp.float32) / exact + 1e-6)
                     / math.log(max_distance / exact) * (half - exact)).astype(jnp.int32)
    large = jnp.minimum(large, half - 1)
    return bucket + jnp.where(n < exact, n, large)


def t5_bias(q: Any, k: Any, v: Any, table: Any) -> Any:
    """T5: no scale, a bias gathered from a [buckets, H] table by bucket."""
    i = jnp.arange(q.shape[1])[:, None]
    j = jnp.arange(k.shape[1])[None, :]
    bias = table[t5_buckets(j - i)]                   # [S, S, H]
    bias = jnp.transpose(bias, (2, 0, 1))[None]       # [1, H, S, S]
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) + bias.astype(q.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s.astype(jnp.float32), -1)
                      .astype(v.dtype), v)


def sliding_window(q: Any, k: Any, v: Any, window: int = 48) -> Any:
    """Causal sliding window from two iotas: 0 <= i - j < window."""
    i = jax.lax.broadcasted_iota(jnp.int32, (q.shape[1], k.shape[1]), 0)
    j = jax.lax.broadcasted_iota(jnp.int32, (q.shape[1], k.shape[1]), 1)
    keep = (j <= i) & (i - j < window)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D)
    s = jnp.where(keep[None, None], s, -1e9)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v)


def latents(latent: Any, x: Any, wk: Any, wv: Any) -> Any:
    """Perceiver: learned latent queries [L, E] over the inputs [B, S, E]."""
    b, s, _ = x.shape
    q = latent.reshape(-1, H, D)                       # [L, H, D]
    k = (x @ wk).reshape(b, s, H, D)
    v = (x @ wv).reshape(b, s, H, D)
    scores = jnp.einsum("lhd,bshd->bhls", q, k) / math.sqrt(D)
    out = jnp.einsum("bhls,bshd->blhd", jax.nn.softmax(scores, axis=-1), v)
    return out.reshape(b, -1, E)


def rope(x: Any) -> Any:
    half = x.shape[-1] // 2
    positions = jnp.arange(x.shape[1], dtype=jnp.float32)[:, None]
    freqs = 1.0 / (10000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
    angle = (positions * freqs)[None, :, None, :]
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    rotated = jnp.concatenate([x1 * jnp.cos(angle) - x2 * jnp.sin(angle),
                               x1 * jnp.sin(angle) + x2 * jnp.cos(angle)], axis=-1)
    return rotated.astype(x.dtype)


def checkpointed_rope_gqa(x: Any, wq: Any, wk: Any, wv: Any) -> Any:
    """A layer under jax.checkpoint: RoPE, GQA 4/2 by jnp.repeat, causal."""
    @jax.checkpoint
    def layer(x: Any) -> Any:
        b, s, _ = x.shape
        q = rope((x @ wq).reshape(b, s, H, D))
        k = rope((x @ wk).reshape(b, s, H // 2, D))
        v = (x @ wv).reshape(b, s, H // 2, D)
        k, v = jnp.repeat(k, 2, axis=2), jnp.repeat(v, 2, axis=2)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D)
        mask = jnp.tril(jnp.ones((s, s), bool))
        scores = jnp.where(mask, scores, -jnp.inf)
        out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
        return x + out.reshape(b, s, E)
    return layer(x)


def softcap_window(q: Any, k: Any, v: Any, window: int = 32) -> Any:
    """Gemma 2's local layer: soft-cap, then a causal window, finfo.min."""
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) * D ** -0.5
    s = 30.0 * jnp.tanh(s / 30.0)
    i = jnp.arange(q.shape[1])[:, None]
    j = jnp.arange(k.shape[1])[None, :]
    keep = (j <= i) & (j > i - window)
    s = jnp.where(keep, s, jnp.finfo(jnp.float32).min)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1).astype(v.dtype), v)


def mixed_precision(q: Any, k: Any, v: Any) -> Any:
    """bf16 products accumulated in f32 (`preferred_element_type`), the
    softmax in f32, P cast back to bf16, causal."""
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
    s = s / math.sqrt(D)
    s = jnp.where(jnp.tril(jnp.ones((q.shape[1], k.shape[1]), bool)), s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1).astype(v.dtype)
    out = jnp.einsum("bhqk,bkhd->bqhd", p, v, preferred_element_type=jnp.float32)
    return out.astype(v.dtype)


def prefix_lm(q: Any, k: Any, v: Any, prefix: int = 16) -> Any:
    """A prefix LM: the first `prefix` keys seen by every query, causal
    after them."""
    i = jnp.arange(q.shape[1])[:, None]
    j = jnp.arange(k.shape[1])[None, :]
    keep = (j <= i) | (j < prefix)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D)
    s = jnp.where(keep, s, -jnp.inf)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v)


#: The fill MaxText and jax.nn.dot_product_attention's XLA path give hidden
#: scores: finite, -0.7 of f32's largest.
LARGE_NEGATIVE = -0.7 * float(jnp.finfo(jnp.float32).max)
#: Gemma's JAX reference: K_MASK.
GEMMA_MASK = -2.3819763e38


def maxtext_segments(q: Any, k: Any, v: Any, segments: Any) -> Any:
    """MaxText's layout: GQA by a grouped einsum (no repeat), packed
    documents (segment ids equal) and causal, the finite fill, the softmax
    in f32."""
    b, t, n, h = q.shape
    groups = n // k.shape[2]
    q = q.reshape(b, t, k.shape[2], groups, h)
    s = jnp.einsum("btkgh,bskh->bkgts", q, k) * h ** -0.5
    causal = jnp.arange(t)[:, None] >= jnp.arange(k.shape[1])[None, :]
    same = segments[:, :, None] == segments[:, None, :]
    mask = (causal[None] & same)[:, None, None]
    s = jnp.where(mask, s, LARGE_NEGATIVE)
    p = jax.nn.softmax(s.astype(jnp.float32), axis=-1).astype(v.dtype)
    return jnp.einsum("bkgts,bskh->btkgh", p, v).reshape(b, t, n, h)


def gemma_btns(q: Any, k: Any, v: Any) -> Any:
    """Gemma's JAX reference: the query pre-scaled, scores laid out
    [B, T, N, S], soft-capped, a [B, T, S] causal mask with K_MASK."""
    t = q.shape[1]
    logits = jnp.einsum("BTNH,BSNH->BTNS", q * D ** -0.5, k)
    logits = jnp.tanh(logits / 50.0) * 50.0
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, k.shape[1]), bool)), (q.shape[0], t, k.shape[1]))
    logits = jnp.where(mask[:, :, None, :], logits, GEMMA_MASK)
    probs = jax.nn.softmax(logits, axis=-1).astype(k.dtype)
    return jnp.einsum("BTNS,BSNH->BTNH", probs, v)


def library_cases(seq: int = 64) -> Dict[str, Callable[[], Tuple[Callable, Tuple]]]:
    """Attention through `jax.nn.dot_product_attention`'s XLA path (the
    path JAX takes where cuDNN's is not asked for) with each of its
    arguments, and two production code bases' own forms."""
    bf16 = jnp.bfloat16
    lengths = jnp.array([seq, seq - seq // 4], jnp.int32)[:B]
    keep = jnp.ones((B, seq), bool).at[0, seq - seq // 4:].set(False)
    segments = (jnp.arange(seq)[None, :] >= jnp.array([[seq // 3], [seq // 2]])[:B]
                ).astype(jnp.int32) + 1

    def dpa(**options: Any) -> Callable:
        return lambda q, k, v: jax.nn.dot_product_attention(
            q, k, v, implementation="xla", **options)

    def with_bias(q: Any, k: Any, v: Any, keep: Any) -> Any:
        slopes = 2.0 ** (-8.0 * jnp.arange(1, q.shape[2] + 1, dtype=jnp.float32) / q.shape[2])
        distance = jnp.arange(k.shape[1])[None, :] - jnp.arange(q.shape[1])[:, None]
        bias = (slopes[:, None, None] * distance[None])[None].astype(q.dtype)
        mask = keep[:, None, None, :]
        return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask,
                                            implementation="xla")

    def cross(q: Any, k: Any, v: Any, lengths: Any) -> Any:
        return jax.nn.dot_product_attention(q[:, : q.shape[1] // 2], k, v,
                                            key_value_seq_lengths=lengths,
                                            implementation="xla")

    def padded(q: Any, k: Any, v: Any, lengths: Any) -> Any:
        return jax.nn.dot_product_attention(q, k, v, query_seq_lengths=lengths,
                                            key_value_seq_lengths=lengths,
                                            implementation="xla")

    return {
        "dpa_causal_gqa_bf16": lambda: (dpa(is_causal=True), qkv(bf16, seq, H, H // 2)),
        "dpa_scale_bf16": lambda: (dpa(scale=0.1), qkv(bf16, seq)),
        "dpa_window_bf16": lambda: (dpa(is_causal=True, local_window_size=(32, 0)),
                                    qkv(bf16, seq)),
        "dpa_lengths_bf16": lambda: (padded, qkv(bf16, seq) + (lengths,)),
        "dpa_cross_lengths_bf16": lambda: (cross, qkv(bf16, seq) + (lengths,)),
        "dpa_bias_mask_bf16": lambda: (with_bias, qkv(bf16, seq) + (keep,)),
        "maxtext_segments_bf16": lambda: (maxtext_segments,
                                          qkv(bf16, seq, H, H // 2) + (segments,)),
        "gemma_btns_bf16": lambda: (gemma_btns, qkv(bf16, seq)),
    }


def cases(seq: int = 64) -> Dict[str, Callable[[], Tuple[Callable, Tuple]]]:
    f32, bf16 = jnp.float32, jnp.bfloat16
    keep = jnp.ones((B, seq), jnp.int32).at[0, seq - seq // 4:].set(0)
    x = lambda dtype: normal(5, (B, seq, E), dtype)  # noqa: E731
    w = lambda i, cols, dtype: normal(20 + i, (E, cols), dtype, 0.05)  # noqa: E731
    table: Dict[str, Callable[[], Tuple[Callable, Tuple]]] = {
        "manual_softmax_bf16": lambda: (manual_softmax, qkv(bf16, seq)),
        "logsumexp_softmax_f32": lambda: (logsumexp_softmax, qkv(f32, seq)),
        "softmax_where_bf16": lambda: (softmax_where, qkv(bf16, seq) + (keep,)),
        "dot_general_bf16": lambda: (dot_general, qkv(bf16, seq, layout="bhsd")),
        "mqa_no_head_bf16": lambda: (mqa_no_head, qkv(bf16, seq)),
        "vmap_heads_f32": lambda: (vmap_heads, qkv(f32, seq)),
        "temperature_bf16": lambda: (temperature, qkv(bf16, seq) + (jnp.float32(-2.5),)),
        "t5_bias_bf16": lambda: (t5_bias, qkv(bf16, seq) + (normal(6, (32, H), f32),)),
        "sliding_window_bf16": lambda: (sliding_window, qkv(bf16, seq)),
        "latents_bf16": lambda: (latents, (normal(7, (16, E), bf16), x(bf16),
                                           w(1, E, bf16), w(2, E, bf16))),
        "checkpointed_rope_gqa_bf16": lambda: (checkpointed_rope_gqa, (
            x(bf16), w(3, E, bf16), w(4, E // 2, bf16), w(5, E // 2, bf16))),
        "softcap_window_bf16": lambda: (softcap_window, qkv(bf16, seq)),
        "mixed_precision_bf16": lambda: (mixed_precision, qkv(bf16, seq)),
        "prefix_lm_bf16": lambda: (prefix_lm, qkv(bf16, seq)),
    }
    try:
        import flax.linen as nn

        def linen_bias_mask(q: Any, k: Any, v: Any, keep: Any) -> Any:
            """flax.linen.dot_product_attention with a bias and a mask."""
            slopes = 2.0 ** (-8.0 * jnp.arange(1, H + 1, dtype=jnp.float32) / H)
            distance = (jnp.arange(seq)[None, :] - jnp.arange(seq)[:, None])
            # In f32: in bf16 the distances' products lose whole units at
            # 2k tokens, which no path could match.
            bias = (slopes[:, None, None] * distance[None])[None]
            mask = nn.make_attention_mask(keep, keep, dtype=bool)
            return nn.dot_product_attention(q, k, v, bias=bias, mask=mask)

        table["linen_bias_mask_bf16"] = lambda: (linen_bias_mask, qkv(bf16, seq) + (keep,))
    except ImportError:
        pass
    try:
        from flax import nnx

        def nnx_case() -> Tuple[Callable, Tuple]:
            module = nnx.MultiHeadAttention(num_heads=H, in_features=E, qkv_features=E,
                                            decode=False, dtype=bf16, param_dtype=bf16,
                                            rngs=nnx.Rngs(0))
            graph, state = nnx.split(module)
            mask = nnx.make_causal_mask(jnp.ones((B, seq)))

            def call(state: Any, t: Any) -> Any:
                return nnx.merge(graph, state)(t, mask=mask)

            return call, (state, x(bf16))

        table["nnx_mha_causal_bf16"] = nnx_case
    except ImportError:
        pass
    try:
        import equinox as eqx

        def equinox_causal() -> Tuple[Callable, Tuple]:
            module = eqx.nn.MultiheadAttention(H, E, key=key(8), dtype=bf16)
            params, static = eqx.partition(module, eqx.is_array)
            mask = jnp.tril(jnp.ones((seq, seq), bool))

            def call(p: Any, t: Any) -> Any:
                attend = eqx.combine(p, static)
                return jax.vmap(lambda one: attend(one, one, one, mask=mask))(t)

            return call, (params, x(bf16))

        table["equinox_causal_bf16"] = equinox_causal
    except ImportError:
        pass
    return table
