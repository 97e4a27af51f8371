#!/usr/bin/env python3
"""GPU checks of kiln.jax: ``kiln.jax.attention`` against a float64
reference (forms, odd sizes, layouts, dtypes, vmap, grad, repeated jitted
calls), and ``kiln.jax.jit`` on the JAX functions the importer's tests were
saved from (utils/save_stablehlo.py), each against the function run in
float64: every site found must be rewritten and the outputs within the
dtype's bounds.

    python3 test/gpu/check_jax.py [--only attention|jit] [--json OUT]

Ends with one line ``N passed, N failed``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "utils"))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import kiln.jax as kjax  # noqa: E402
from kiln.jax.ffi import reference, spec_of  # noqa: E402

#: Relative error (Frobenius) against float64, by dtype: the bounds the
#: PyTorch checks use.
BOUND = {"bfloat16": 3e-2, "float16": 1e-2, "float32": 1e-3}

results: List[Dict[str, Any]] = []


def relative_error(got: Any, want: Any) -> float:
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    norm = np.linalg.norm(want)
    return float(np.linalg.norm(got - want) / (norm if norm else 1.0))


def record(name: str, passed: bool, **facts: Any) -> None:
    results.append({"name": name, "passed": bool(passed), **facts})
    detail = " ".join(f"{k}={v:.2e}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in facts.items())
    print(f"{'PASS' if passed else 'FAIL'} {name} {detail}", flush=True)


def run(name: str, body: Callable[[], None]) -> None:
    try:
        body()
    except Exception as error:  # noqa: BLE001 - every case reports
        traceback.print_exc()
        record(name, False, error=f"{type(error).__name__}: {error}"[:400])


def normal(seed: int, shape: Any, dtype: Any) -> Any:
    return jax.random.normal(jax.random.PRNGKey(seed), shape, jnp.float32).astype(dtype)


# --------------------------------------------------------------------------
# kiln.jax.attention
# --------------------------------------------------------------------------


def attention_case(name: str, *, dtype: Any = jnp.bfloat16, batch: int = 2,
                   q_len: int = 77, kv_len: int = 131, heads: int = 8,
                   kv_heads: int = 8, dim: int = 64, value_dim: int = 0,
                   layout: str = "bshd", mask: str = "", bias: bool = False,
                   factor: bool = False, **attributes: Any) -> None:
    def body() -> None:
        dv = value_dim or dim

        def shaped(s: int, h: int, d: int) -> Any:
            return (batch, s, h, d) if layout == "bshd" else (batch, h, s, d)

        q = normal(1, shaped(q_len, heads, dim), dtype)
        k = normal(2, shaped(kv_len, kv_heads, dim), dtype)
        v = normal(3, shaped(kv_len, kv_heads, dv), dtype)
        extra: Dict[str, Any] = {}
        if mask == "padding":
            lengths = jnp.array([kv_len, kv_len // 2 + 1] * batch)[:batch]
            extra["mask"] = (jnp.arange(kv_len)[None, :] < lengths[:, None])[:, None, None, :]
        elif mask == "additive":
            extra["mask"] = normal(4, (batch, 1, q_len, kv_len), dtype)
        if bias:
            extra["bias"] = normal(5, (1, heads, q_len, kv_len), dtype)
        if factor:
            extra["scale_factor"] = jnp.array([0.7], jnp.float32)
        call = jax.jit(lambda q, k, v, extra: kjax.attention(
            q, k, v, layout=layout, **extra, **attributes))
        got = call(q, k, v, extra)
        again = call(q, k, v, extra)  # a second launch of the compiled call
        spec = spec_of(q, k, v, extra.get("mask"), extra.get("bias"),
                       extra.get("scale_factor"), layout=layout, **attributes)
        wide = [x.astype(jnp.float64) if x.dtype != jnp.bool_ else x
                for x in (q, k, v)]
        terms = {key: (x.astype(jnp.float64) if key != "mask" or x.dtype != jnp.bool_
                       else x) for key, x in extra.items()}
        want = reference(spec, *wide, terms.get("mask"), terms.get("bias"),
                         terms.get("scale_factor"), compute=jnp.float64)
        error = relative_error(got, want)
        repeat = relative_error(again, got)
        bound = BOUND[str(jnp.dtype(dtype))]
        record(f"attention/{name}", error <= bound and repeat == 0.0 and
               bool(jnp.all(jnp.isfinite(got.astype(jnp.float32)))),
               error=error, bound=bound, repeat=repeat)
    run(f"attention/{name}", body)


def attention_cases() -> None:
    attention_case("bf16-d64")
    attention_case("bf16-d128-causal", dim=128, causal=True)
    attention_case("bf16-gqa-causal", heads=8, kv_heads=2, causal=True)
    attention_case("bf16-mqa", heads=8, kv_heads=1)
    attention_case("f16-d80-bhsd", dtype=jnp.float16, dim=80, layout="bhsd")
    attention_case("f32-d64-causal", dtype=jnp.float32, causal=True)
    attention_case("bf16-padding", mask="padding")
    attention_case("bf16-additive-bias", mask="additive", bias=True)
    attention_case("bf16-softcap-window", causal=True, window=40, softcap=30.0)
    attention_case("bf16-two-sided", window=16, window_right=8)
    attention_case("bf16-scale-factor", factor=True, causal=True)
    attention_case("bf16-mla", dim=192, value_dim=128, causal=True)
    attention_case("bf16-decode", q_len=1, kv_len=4097, causal=True)
    attention_case("bf16-long", q_len=1024, kv_len=1024, heads=16, kv_heads=16,
                   dim=128, causal=True)

    def vmapped() -> None:
        q = normal(6, (3, 2, 65, 4, 64), jnp.bfloat16)
        k = normal(7, (3, 2, 65, 4, 64), jnp.bfloat16)
        v = normal(8, (3, 2, 65, 4, 64), jnp.bfloat16)
        keep = jnp.arange(65)[None, :] < jnp.array([[65], [30]])
        mask = keep[:, None, None, :]  # [2, 1, 1, 65], not mapped
        got = jax.jit(jax.vmap(lambda q, k, v: kjax.attention(
            q, k, v, mask=mask, causal=True)))(q, k, v)
        spec = spec_of(q[0], k[0], v[0], mask, causal=True)
        want = jax.vmap(lambda q, k, v: reference(
            spec, q, k, v, mask, compute=jnp.float64))(
                *(x.astype(jnp.float64) for x in (q, k, v)))
        error = relative_error(got, want)
        record("attention/vmap", error <= BOUND["bfloat16"], error=error)
    run("attention/vmap", vmapped)

    def gradient() -> None:
        q = normal(9, (1, 33, 2, 64), jnp.float32)
        k = normal(10, (1, 47, 2, 64), jnp.float32)
        v = normal(11, (1, 47, 2, 64), jnp.float32)
        loss = lambda q, k, v: jnp.sum(kjax.attention(q, k, v, causal=True) ** 2)  # noqa: E731
        spec = spec_of(q, k, v, causal=True)
        wanted = lambda q, k, v: jnp.sum(reference(  # noqa: E731
            spec, q, k, v, compute=jnp.float64) ** 2)
        got = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
        want = jax.grad(wanted, argnums=(0, 1, 2))(
            *(x.astype(jnp.float64) for x in (q, k, v)))
        error = max(relative_error(g, w) for g, w in zip(got, want))
        record("attention/grad", error <= 1e-3, error=error)
    run("attention/grad", gradient)

    def kiln_gradient(name: str, dtype: Any, bound: float, vmapped: bool = False,
                      **attributes: Any) -> None:
        # backward="kiln": dQ, dK, dV from Kiln's training kernels (the
        # forward keeps its log-sum-exp), against float64 autograd of the
        # reference; GQA, a padding mask (not differentiated), bshd, vmap.
        def body() -> None:
            shape_q, shape_kv = (2, 70, 4, 64), (2, 70, 2, 64)
            if vmapped:
                shape_q, shape_kv = (3,) + shape_q, (3,) + shape_kv
            q = normal(12, shape_q, dtype)
            k = normal(13, shape_kv, dtype)
            v = normal(14, shape_kv, dtype)
            keep = jnp.arange(70)[None, :] < jnp.array([[70], [41]])
            mask = keep[:, None, None, :]
            g = normal(15, shape_q, jnp.float32)

            def loss(q, k, v):
                def one(q, k, v):
                    return kjax.attention(q, k, v, mask=mask, backward="kiln",
                                          **attributes)
                out = jax.vmap(one)(q, k, v) if vmapped else one(q, k, v)
                return jnp.sum(out.astype(jnp.float32) * g)

            spec = spec_of(q[0] if vmapped else q, k[0] if vmapped else k,
                           v[0] if vmapped else v, mask, **attributes)

            def wanted(q, k, v):
                def one(q, k, v):
                    return reference(spec, q, k, v, mask, compute=jnp.float64)
                out = jax.vmap(one)(q, k, v) if vmapped else one(q, k, v)
                return jnp.sum(out * g.astype(jnp.float64))

            got = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
            want = jax.grad(wanted, argnums=(0, 1, 2))(
                *(x.astype(jnp.float64) for x in (q, k, v)))
            error = max(relative_error(a, b) for a, b in zip(got, want))
            record(f"attention/grad-kiln-{name}", error <= bound, error=error,
                   bound=bound)
        run(f"attention/grad-kiln-{name}", body)

    kiln_gradient("bf16-gqa-causal", jnp.bfloat16, 1e-2, causal=True)
    kiln_gradient("f32-softcap", jnp.float32, 1e-4, softcap=20.0)
    kiln_gradient("bf16-vmap", jnp.bfloat16, 1e-2, vmapped=True, causal=True)

    def command_buffers() -> None:
        # XLA records the call into a CUDA graph (command buffer) where the
        # handler is compatible: a fresh process with custom calls in
        # command buffers from the smallest graph on, run three times.
        import os
        import subprocess

        code = (
            "import jax, jax.numpy as jnp, numpy as np, kiln.jax as kj\n"
            "from kiln.jax.ffi import reference, spec_of\n"
            "q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (2, 96, 4, 64),"
            " jnp.float32).astype(jnp.bfloat16) for i in range(3))\n"
            "f = jax.jit(lambda q, k, v: kj.attention(q, k, v, causal=True) * 2)\n"
            "outs = [np.asarray(f(q, k, v), np.float32) for _ in range(3)]\n"
            "want = np.asarray(reference(spec_of(q, k, v, causal=True), q, k, v), np.float32) * 2\n"
            "err = max(float(np.linalg.norm(o - want) / np.linalg.norm(want)) for o in outs)\n"
            "print('ERROR', err)\n")
        env = dict(os.environ)
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_gpu_enable_command_buffer="
                            "FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1").strip()
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), env.get("PYTHONPATH", "")])
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=300)
        lines = [line for line in done.stdout.splitlines() if line.startswith("ERROR")]
        error = float(lines[-1].split()[1]) if lines else float("nan")
        record("attention/command-buffers", done.returncode == 0 and error <= 3e-2,
               error=error, rc=done.returncode,
               stderr=done.stderr.strip().splitlines()[-1][:200] if done.returncode else "")
    run("attention/command-buffers", command_buffers)

    def bad_input() -> None:
        q = normal(1, (2, 16, 4, 64), jnp.bfloat16)
        k = normal(2, (2, 16, 4, 32), jnp.bfloat16)
        try:
            kjax.attention(q, k, k)
        except Exception as error:  # noqa: BLE001
            record("attention/bad-head-dim", "head dim" in str(error), error=str(error)[:120])
            return
        record("attention/bad-head-dim", False, error="no error raised")
    run("attention/bad-head-dim", bad_input)


# --------------------------------------------------------------------------
# kiln.jax.jit on the saved functions
# --------------------------------------------------------------------------


def widened(tree: Any) -> Any:
    return jax.tree_util.tree_map(
        lambda x: x.astype(jnp.float64)
        if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating) else x, tree)


def jit_cases(zoo: str = "saved", seq: int = 64) -> None:
    """kiln.jax.jit on each function of utils/save_stablehlo.py's table
    (zoo "saved") or utils/jax_wild.py's (zoo "wild", and "library" for
    its library_cases, at `seq` tokens)."""
    if zoo in ("wild", "library"):
        import jax_wild

        table = (jax_wild.cases if zoo == "wild" else jax_wild.library_cases)(seq)
    else:
        import save_stablehlo

        table = save_stablehlo.cases()
    for name, make in table.items():
        def body(name: str = name, make: Callable = make) -> None:
            function, args = make()
            jitted = kjax.jit(function)
            compiled = jitted.compiled(*args)
            print(compiled.explain())
            got = jitted(*args)
            plain = jax.jit(function)(*args)
            try:
                want = jax.jit(function)(*widened(args))
            except Exception:  # noqa: BLE001 - modules fixed to their dtype
                want = plain
            leaves = list(zip(jax.tree_util.tree_leaves(got),
                              jax.tree_util.tree_leaves(want),
                              jax.tree_util.tree_leaves(plain)))
            error = max(relative_error(g, w) for g, w, _ in leaves)
            own = max(relative_error(p, w) for _, w, p in leaves)
            dtype = str(jax.tree_util.tree_leaves(plain)[0].dtype)
            sites = len(compiled.sites)
            rewritten = sum(s.why_not is None for s in compiled.sites)
            ran = compiled.function is not None
            bound = max(BOUND.get(dtype, 1e-3), 2 * own)
            record(f"jit/{name}", sites > 0 and rewritten == sites and ran and
                   error <= bound, sites=sites, rewritten=rewritten, error=error,
                   own=own, fallback=compiled.fallback or "")
        run(f"jit/{name}", body)


def scan_case() -> None:
    """Layers stacked and run by lax.scan (as Flax's nn.scan and most large
    JAX models run them): the attention is in the loop's body."""
    def body() -> None:
        layers, batch, seq, heads, dim = 3, 2, 128, 4, 32
        width = heads * dim
        weights = normal(20, (layers, 3, width, width), jnp.bfloat16) * 0.05
        x = normal(21, (batch, seq, width), jnp.bfloat16)

        def model(weights: Any, x: Any) -> Any:
            def layer(x: Any, w: Any) -> Any:
                q, k, v = ((x @ w[i]).reshape(batch, seq, heads, dim) for i in range(3))
                s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(dim)
                s = jnp.where(jnp.tril(jnp.ones((seq, seq), bool)), s, -jnp.inf)
                a = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)
                return x + a.reshape(x.shape), None
            return jax.lax.scan(layer, x, weights)[0]

        jitted = kjax.jit(model)
        compiled = jitted.compiled(weights, x)
        print(compiled.explain())
        got = jitted(weights, x)
        want = jax.jit(model)(*widened((weights, x)))
        own = relative_error(jax.jit(model)(weights, x), want)
        error = relative_error(got, want)
        in_body = [site for site in compiled.sites if site.loop_body]
        rewritten = sum(site.why_not is None for site in in_body)
        record("jit/scan-layers", len(in_body) == 1 and rewritten == 1 and
               compiled.function is not None and error <= max(3e-2, 2 * own),
               sites=len(in_body), rewritten=rewritten, error=error, own=own,
               fallback=compiled.fallback or "")
    run("jit/scan-layers", body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["attention", "jit"])
    parser.add_argument("--json")
    parser.add_argument("--zoo", choices=["saved", "wild", "library"], default="saved",
                        help="the jit functions: utils/save_stablehlo.py's, "
                        "utils/jax_wild.py's cases or its library_cases")
    parser.add_argument("--seq", type=int, default=64,
                        help="tokens of the wild zoo's functions")
    options = parser.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}", flush=True)
    if options.only in (None, "attention"):
        attention_cases()
    if options.only in (None, "jit"):
        jit_cases(options.zoo, options.seq)
        if options.zoo == "saved":
            scan_case()
    if options.json:
        Path(options.json).write_text(json.dumps(results, indent=1))
    passed = sum(r["passed"] for r in results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
