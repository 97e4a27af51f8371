#!/usr/bin/env python3
"""JAX models with attention written by hand, ``jax.jit`` against
``kiln.jax.jit``, and attention alone, ``kiln.jax.attention`` against
``jax.nn.dot_product_attention`` (``implementation="cudnn"`` and ``"xla"``).

    python3 bench/bench_jax.py [--seqs 1024,4096] [--tokens 16384]
        [--models gpt,llama,...] [--no-attention] [--out rows.json]

Models (bf16, 2 layers, width 1024, 16 heads of 64, b·s = --tokens): `gpt`
(einsum attention, causal mask through ``jnp.tril`` and ``where(-inf)``),
`gpt-scan` (the same layers stacked and run by ``lax.scan``),
`llama` (RMSNorm, RoPE, GQA 16/4 with the query heads grouped in the einsum,
SwiGLU), `bert` (bidirectional, BERT's additive padding mask ``(1 - keep)
· -1e9``), `alibi` (slopes and distances built from ops, causal), `softcap`
(Gemma 2's ``tanh(s / 50) · 50``, causal), `flax` (``flax.linen``'s
``MultiHeadDotProductAttention`` with a causal mask) and `equinox`
(``equinox.nn.MultiheadAttention`` mapped over the batch with ``jax.vmap``);
`encoder` is bert without its mask (what the mask costs, beside bert).
Each model's output under ``kiln.jax.jit`` is first checked against the
model run in float64 (``jax_enable_x64``), beside ``jax.jit``'s own error.
Attention alone: bf16 ``[B, S, 16, D]``, D 64 and 128, causal and not,
checked against float64 up to 4k tokens. Times: the paths in turns, 7 rounds
of about 20 ms each, the median round (ms a call). Rows: ``{kind, name, s,
impl, ms, error, sites, rewritten}``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import kiln.jax as kjax  # noqa: E402
from kiln.jax.ffi import reference, spec_of  # noqa: E402

DTYPE = jnp.bfloat16
WIDTH, HEADS, DIM, LAYERS, KV_HEADS = 1024, 16, 64, 2, 4


def key(i: int) -> Any:
    return jax.random.PRNGKey(i)


def normal(i: int, shape: Any, scale: float = 1.0) -> Any:
    return (jax.random.normal(key(i), shape, jnp.float32) * scale).astype(DTYPE)


def relative_error(got: Any, want: Any) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


# -- The models ---------------------------------------------------------------


def layer_norm(x: Any, g: Any) -> Any:
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
    return ((x32 - mean) * jax.lax.rsqrt(var + 1e-5)).astype(x.dtype) * g


def rms_norm(x: Any, g: Any) -> Any:
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt((x32 ** 2).mean(-1, keepdims=True) + 1e-6)).astype(x.dtype) * g


def rope(x: Any) -> Any:
    """[B, S, H, D] rotated by position, the halves-split form."""
    s, d = x.shape[1], x.shape[-1]
    freq = 1.0 / (10000 ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    angle = jnp.arange(s, dtype=jnp.float32)[:, None] * freq[None, :]
    cos = jnp.cos(angle)[None, :, None, :].astype(x.dtype)
    sin = jnp.sin(angle)[None, :, None, :].astype(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def params(kv_heads: int = HEADS) -> List[Dict[str, Any]]:
    kv = kv_heads * DIM
    return [{"q": normal(10 * i + 1, (WIDTH, WIDTH), 0.02),
             "k": normal(10 * i + 2, (WIDTH, kv), 0.02),
             "v": normal(10 * i + 3, (WIDTH, kv), 0.02),
             "o": normal(10 * i + 4, (WIDTH, WIDTH), 0.02),
             "up": normal(10 * i + 5, (WIDTH, 2816), 0.02),
             "gate": normal(10 * i + 6, (WIDTH, 2816), 0.02),
             "down": normal(10 * i + 7, (2816, WIDTH), 0.02),
             "n1": jnp.ones((WIDTH,), DTYPE), "n2": jnp.ones((WIDTH,), DTYPE)}
            for i in range(LAYERS)]


def heads(x: Any, w: Any, n: int) -> Any:
    b, s, _ = x.shape
    return (x @ w).reshape(b, s, n, DIM)


def block(p: Dict[str, Any], x: Any, attend: Callable, norm: Callable = layer_norm,
          kv_heads: int = HEADS, positions: bool = False) -> Any:
    h = norm(x, p["n1"])
    q, k, v = heads(h, p["q"], HEADS), heads(h, p["k"], kv_heads), heads(h, p["v"], kv_heads)
    if positions:
        q, k = rope(q), rope(k)
    a = attend(q, k, v)
    x = x + a.reshape(x.shape) @ p["o"]
    h = norm(x, p["n2"])
    return x + (jax.nn.silu(h @ p["gate"]) * (h @ p["up"])) @ p["down"]


def causal_einsum(q: Any, k: Any, v: Any) -> Any:
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(DIM)
    mask = jnp.tril(jnp.ones((q.shape[1], k.shape[1]), bool))
    s = jnp.where(mask, s, -jnp.inf)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v)


def grouped_causal(q: Any, k: Any, v: Any) -> Any:
    b, s, h, d = q.shape
    g = h // k.shape[2]
    q = q.reshape(b, s, k.shape[2], g, d)
    scores = jnp.einsum("bqngd,bknd->bngqk", q, k) * d ** -0.5
    mask = jnp.tril(jnp.ones((s, k.shape[1]), bool))
    scores = jnp.where(mask, scores.astype(jnp.float32), jnp.finfo(jnp.float32).min)
    p = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bngqk,bknd->bqngd", p, v).reshape(b, s, h, d)


def alibi_causal(q: Any, k: Any, v: Any) -> Any:
    h, s = q.shape[2], q.shape[1]
    slopes = 2.0 ** (-8.0 * jnp.arange(1, h + 1, dtype=jnp.float32) / h)
    distance = jnp.arange(s)[None, :] - jnp.arange(s)[:, None]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / math.sqrt(DIM)
    scores = scores + slopes[:, None, None] * distance[None].astype(jnp.float32)
    scores = jnp.where(distance[None] <= 0, scores, -jnp.inf)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, -1).astype(v.dtype), v)


def softcap_causal(q: Any, k: Any, v: Any) -> Any:
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * DIM ** -0.5
    scores = jnp.tanh(scores / 50.0) * 50.0
    s = q.shape[1]
    scores = jnp.where(jnp.tril(jnp.ones((s, s), bool)), scores, -jnp.inf)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, -1), v)


def model(name: str, batch: int, seq: int) -> Tuple[Callable, Tuple]:
    x = normal(99, (batch, seq, WIDTH))
    if name in ("gpt", "alibi", "softcap"):
        attend = {"gpt": causal_einsum, "alibi": alibi_causal,
                  "softcap": softcap_causal}[name]
        return (lambda p, x: _stack(p, x, lambda p, x: block(p, x, attend))), (params(), x)
    if name == "encoder":
        # bert without its padding mask: what the mask costs, beside bert.
        def plain(q: Any, k: Any, v: Any) -> Any:
            s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(DIM)
            return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)

        return (lambda p, x: _stack(p, x, lambda p, x: block(p, x, plain))), (params(), x)
    if name == "gpt-scan":
        # The layers stacked and run by lax.scan: the attention is in the
        # loop's body.
        stacked = jax.tree_util.tree_map(lambda *ws: jnp.stack(ws), *params())

        def scanned(p: Any, x: Any) -> Any:
            return jax.lax.scan(lambda x, w: (block(w, x, causal_einsum), None), x, p)[0]

        return scanned, (stacked, x)
    if name == "llama":
        return (lambda p, x: _stack(p, x, lambda p, x: block(
            p, x, grouped_causal, rms_norm, KV_HEADS, positions=True))), (params(KV_HEADS), x)
    if name == "bert":
        lengths = jnp.array([seq, seq - seq // 4] * batch)[:batch]
        keep = (jnp.arange(seq)[None, :] < lengths[:, None]).astype(DTYPE)

        def padded(q: Any, k: Any, v: Any, keep: Any) -> Any:
            s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(DIM)
            s = s + ((1.0 - keep) * -1e9)[:, None, None, :].astype(s.dtype)
            return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)

        return (lambda p, x, keep: _stack(p, x, lambda p, x: block(
            p, x, lambda q, k, v: padded(q, k, v, keep))), (params(), x, keep))
    if name == "flax":
        import flax.linen as nn

        layer = nn.MultiHeadDotProductAttention(num_heads=HEADS, qkv_features=WIDTH,
                                                dtype=DTYPE, param_dtype=DTYPE)
        weights = [layer.init(key(40 + i), x[:1, :16], x[:1, :16]) for i in range(LAYERS)]

        def forward(ws: Any, x: Any) -> Any:
            # Made inside the function, as a model makes it: a constant made
            # outside would be baked into the program, [B, 1, S, S] of it.
            mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
            for w in ws:
                x = x + layer.apply(w, x, x, mask=mask)
            return x

        return forward, (weights, x)
    if name == "equinox":
        import equinox as eqx

        layers = [eqx.nn.MultiheadAttention(HEADS, WIDTH, key=key(50 + i), dtype=DTYPE)
                  for i in range(LAYERS)]
        arrays, static = eqx.partition(layers, eqx.is_array)

        def forward(arrays: Any, x: Any) -> Any:
            modules = eqx.combine(arrays, static)
            for module in modules:
                x = x + jax.vmap(lambda t: module(t, t, t))(x)
            return x

        return forward, (arrays, x)
    raise SystemExit(f"unknown model {name}")


def _stack(ps: List[Dict[str, Any]], x: Any, layer: Callable) -> Any:
    for p in ps:
        x = layer(p, x)
    return x


def widened(tree: Any) -> Any:
    return jax.tree_util.tree_map(
        lambda a: a.astype(jnp.float64)
        if hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


# -- Timing --------------------------------------------------------------------


def time_in_turns(functions: Dict[str, Callable[[], Any]], rounds: int = 7,
                  round_ms: float = 20.0) -> Dict[str, float]:
    """ms a call of each function: in turns, `rounds` rounds of about
    `round_ms`, the median round."""
    counts = {}
    for name, fn in functions.items():
        jax.block_until_ready(fn())
        start = time.perf_counter()
        jax.block_until_ready(fn())
        once = max(time.perf_counter() - start, 1e-6)
        counts[name] = max(1, int(round_ms / 1000 / once))
    samples: Dict[str, List[float]] = {name: [] for name in functions}
    for _ in range(rounds):
        for name, fn in functions.items():
            start = time.perf_counter()
            for _ in range(counts[name]):
                out = fn()
            jax.block_until_ready(out)
            samples[name].append((time.perf_counter() - start) * 1000 / counts[name])
    return {name: statistics.median(values) for name, values in samples.items()}


# -- Runs ----------------------------------------------------------------------


def run_model(name: str, seq: int, tokens: int, rows: List[Dict[str, Any]]) -> None:
    batch = max(tokens // seq, 1)
    function, args = model(name, batch, seq)
    plain = jax.jit(function)
    kiln = kjax.jit(function)
    compiled = kiln.compiled(*args)
    print(compiled.explain(), flush=True)
    got = kiln(*args)
    mine = plain(*args)
    try:
        want = jax.jit(function)(*widened(args))
        error, own = relative_error(got, want), relative_error(mine, want)
    except Exception as failure:  # noqa: BLE001 - a module fixed to its dtype
        print(f"{name}: no float64 run ({type(failure).__name__}); against jax.jit")
        error, own = relative_error(got, mine), 0.0
    times = time_in_turns({"jax.jit": lambda: plain(*args), "kiln": lambda: kiln(*args)})
    sites = len(compiled.sites)
    rewritten = sum(s.why_not is None for s in compiled.sites) if compiled.function else 0
    for impl, ms in times.items():
        rows.append({"kind": "model", "name": name, "s": seq, "batch": batch,
                     "impl": impl, "ms": ms, "error": error if impl == "kiln" else own,
                     "sites": sites, "rewritten": rewritten,
                     "fallback": compiled.fallback})
    print(f"{name} s={seq}: jax.jit {times['jax.jit']:.3f} ms, kiln "
          f"{times['kiln']:.3f} ms ({times['jax.jit'] / times['kiln']:.2f}x), "
          f"{rewritten}/{sites} rewritten, error {error:.2e} (jax.jit's {own:.2e})",
          flush=True)


def run_attention(seq: int, tokens: int, dim: int, causal: bool,
                  rows: List[Dict[str, Any]]) -> None:
    batch = max(tokens // seq, 1)
    q, k, v = (normal(60 + i, (batch, seq, HEADS, dim)) for i in range(3))
    paths = {
        "kiln": jax.jit(lambda q, k, v: kjax.attention(q, k, v, causal=causal)),
        "cudnn": jax.jit(lambda q, k, v: jax.nn.dot_product_attention(
            q, k, v, is_causal=causal, implementation="cudnn")),
        "xla": jax.jit(lambda q, k, v: jax.nn.dot_product_attention(
            q, k, v, is_causal=causal, implementation="xla")),
    }
    errors: Dict[str, float] = {}
    if seq <= 4096:
        spec = spec_of(q, k, v, causal=causal)
        want = jax.jit(lambda q, k, v: reference(spec, q, k, v, compute=jnp.float64))(
            *(x[:1] for x in (q, k, v)))
        for name, fn in list(paths.items()):
            try:
                errors[name] = relative_error(fn(q[:1], k[:1], v[:1]), want)
            except Exception as failure:  # noqa: BLE001 - a path jax lacks
                print(f"attention {name}: {type(failure).__name__}: {failure}"[:300])
                del paths[name]
    times = time_in_turns({name: (lambda fn=fn: fn(q, k, v)) for name, fn in paths.items()})
    flops = 4 * batch * HEADS * seq * seq * dim * (0.5 if causal else 1.0)
    for name, ms in times.items():
        rows.append({"kind": "attention", "name": f"d{dim}{'-causal' if causal else ''}",
                     "s": seq, "batch": batch, "impl": name, "ms": ms,
                     "tflops": flops / ms / 1e9, "error": errors.get(name)})
    print(f"attention d{dim} causal={causal} s={seq}: " + ", ".join(
        f"{n} {ms:.3f} ms" for n, ms in times.items()) + (
        f" (kiln/cudnn {times['cudnn'] / times['kiln']:.2f}x)" if "cudnn" in times else ""),
        flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqs", default="4096")
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--models", default="gpt,gpt-scan,llama,bert,alibi,softcap,flax,equinox")
    parser.add_argument("--no-attention", action="store_true")
    parser.add_argument("--no-models", action="store_true")
    parser.add_argument("--out")
    options = parser.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}", flush=True)
    rows: List[Dict[str, Any]] = []

    def save() -> None:
        if options.out:
            Path(options.out).write_text(json.dumps(rows, indent=1))

    for seq in (int(s) for s in options.seqs.split(",")):
        if not options.no_models:
            for name in options.models.split(","):
                try:
                    run_model(name, seq, options.tokens, rows)
                except Exception as failure:  # noqa: BLE001 - the rest still run
                    import traceback
                    traceback.print_exc()
                    rows.append({"kind": "model", "name": name, "s": seq,
                                 "error_text": f"{type(failure).__name__}: {failure}"[:400]})
                save()
        if not options.no_attention:
            for dim in (64, 128):
                for causal in (False, True):
                    try:
                        run_attention(seq, options.tokens, dim, causal, rows)
                    except Exception as failure:  # noqa: BLE001
                        import traceback
                        traceback.print_exc()
                        rows.append({"kind": "attention", "name": f"d{dim}", "s": seq,
                                     "error_text": f"{type(failure).__name__}: {failure}"[:400]})
                    save()
    save()
    print("\nsummary (ratio: the other path's ms over Kiln's)")
    by: Dict[Tuple, Dict[str, float]] = {}
    for r in rows:
        if "ms" in r:
            by.setdefault((r["kind"], r["name"], r["s"]), {})[r["impl"]] = r["ms"]
    for (kind, name, seq), times in by.items():
        base = "jax.jit" if kind == "model" else "cudnn"
        if base in times and "kiln" in times:
            print(f"  {kind:9s} {name:14s} s={seq:6d} kiln {times['kiln']:8.3f} ms  "
                  f"{base} {times[base]:8.3f} ms  {times[base] / times['kiln']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
