"""Shared helpers of the attention numerics tests: a float64 numpy reference
of kiln.attention / kiln.paged_attention, MLIR text for one op, and a driver
that runs kiln-cpu-runner on .npy inputs and compares."""

import os
import subprocess
import sys

import numpy as np

TOLERANCE = {"f32": 1e-4, "f16": 2e-2, "bf16": 2e-2}


def round_bf16(x):
    """Rounds float32 values to bf16 (nearest-even), returned as float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def to_dtype(x, dtype):
    """The values as the runner sees them (rounded), and the array to save."""
    if dtype == "f32":
        arr = x.astype(np.float32)
        return arr.astype(np.float64), arr
    if dtype == "f16":
        arr = x.astype(np.float16)
        return arr.astype(np.float64), arr
    arr = round_bf16(x)
    return arr.astype(np.float64), arr


def e4m3_values():
    """The float64 value of each of the 256 f8E4M3FN (e4m3 "FN") codes:
    sign bit 7, exponent bits 6..3 with bias 7, mantissa bits 2..0;
    subnormals m·2^-9; no infinities; NaN at 0x7F and 0xFF."""
    codes = np.arange(256)
    exponent = (codes >> 3) & 0xF
    mantissa = codes & 0x7
    magnitude = np.where(exponent == 0, mantissa * 2.0**-9,
                         (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7))
    values = np.where(codes & 0x80, -magnitude, magnitude)
    values[(codes & 0x7F) == 0x7F] = np.nan
    return values


# Every e4m3 code but the two NaNs.
E4M3_FINITE_CODES = np.array([c for c in range(256) if c & 0x7F != 0x7F],
                             np.uint8)


def e4m3_decode(codes):
    """float64 values of an array of e4m3 codes (uint8)."""
    return e4m3_values()[np.asarray(codes, np.uint8)]


def e4m3_encode(x):
    """The e4m3 codes (uint8) nearest to float64 values, ties to the even
    code, saturating at ±448."""
    x = np.asarray(x, np.float64)
    positive = e4m3_values()[:0x7F]  # codes 0x00..0x7E, ascending
    magnitude = np.minimum(np.abs(x), positive[-1])
    hi = np.clip(np.searchsorted(positive, magnitude), 1, len(positive) - 1)
    lo = hi - 1
    below = magnitude - positive[lo]
    above = positive[hi] - magnitude
    code = np.where((below < above) | ((below == above) & (lo % 2 == 0)), lo,
                    hi)
    code = np.where(magnitude >= positive[-1], 0x7E, code)
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def softmax_rows(s, v):
    m = s.max(axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isneginf(m), 0.0, m)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    out = p @ v
    return np.where(l > 0, out / np.where(l > 0, l, 1.0), 0.0)


def hide(s, sq, sk, causal, window, fill=-np.inf, window_right=None):
    """causal is a right bound of 0; window_right R hides keys past the
    diagonal by more than R; window W hides keys W or more before it."""
    right = 0 if causal else window_right
    if right is None:
        return s
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    edge = i + (sk - sq)
    hidden = j > edge + right
    if window:
        hidden |= j <= edge - window
    return np.where(hidden, fill, s)


def attention(q, k, v, scale, causal=False, window=None, softcap=None,
              mask=None, bias=None, masked_score=None, window_right=None):
    """q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D], float64."""
    groups = q.shape[1] // k.shape[1]
    k = np.repeat(k, groups, axis=1)
    v = np.repeat(v, groups, axis=1)
    s = scale * (q @ k.transpose(0, 1, 3, 2))
    if softcap:
        s = softcap * np.tanh(s / softcap)
    if bias is not None:
        s = s + bias
    # A hidden key scores masked_score (the graph's finite fill) or -inf.
    fill = -np.inf if masked_score is None else masked_score
    if mask is not None:
        if mask.dtype == np.bool_:
            s = np.where(mask, s, fill)
        else:
            s = s + mask
    s = hide(s, q.shape[2], k.shape[2], causal, window, fill, window_right)
    return softmax_rows(s, v)


def paged_attention(q, key_cache, value_cache, page_table, kv_lens, scale,
                    causal=False, window=None, softcap=None):
    batch, heads, sq, d = q.shape
    page = key_cache.shape[1]
    out = np.zeros(q.shape)
    for b in range(batch):
        n = int(kv_lens[b])
        keys = np.arange(n)
        pages = page_table[b, keys // page]
        k = key_cache[pages, keys % page].transpose(1, 0, 2)[None]
        v = value_cache[pages, keys % page].transpose(1, 0, 2)[None]
        out[b] = attention(q[b:b + 1], k, v, scale, causal, window,
                           softcap)[0]
    return out


# The CPU lowerings a numerics test runs each case through: tiled, tiled
# with splits, and decomposed.
LOWERINGS = [("--kv-block-size=16",),
             ("--kv-block-size=8", "--q-block-size=4", "--num-splits=3"),
             ("--attention-lowering=decomposed",)]


def tensor_type(shape, dtype):
    dims = "x".join("?" if s is None else str(s) for s in shape)
    return f"tensor<{dims}x{dtype}>"


def attention_attrs(scale, causal=False, window=None, softcap=None,
                    layout=None, masked_score=None, window_right=None):
    """The attribute dictionary body of a kiln attention op."""
    attrs = [f"scale = {scale} : f32"]
    if window_right is not None:
        attrs.append(f"window_right = {window_right} : i64")
    if masked_score is not None:
        attrs.append(f"masked_score = {masked_score!r} : f32")
    if causal:
        attrs.append("causal")
    if window:
        attrs.append(f"window = {window} : i64")
    if softcap:
        attrs.append(f"softcap = {softcap} : f32")
    if layout == "bshd":
        attrs.append("layout = #kiln.layout<bshd>")
    return ", ".join(attrs)


def attention_mlir(types, attrs, mask_type=None, bias_type=None,
                   paged=False, factor_type=None):
    """A @main with one kiln.attention (or paged_attention) over `types`
    (q, k, v[, page_table, kv_lens]), then mask, bias and the run-time
    scale_factor."""
    args = [f"%a{i}: {t}" for i, t in enumerate(types)]
    operands = [f"%a{i}" for i in range(len(types))]
    extra = ""
    n = len(types)
    if mask_type:
        args.append(f"%m: {mask_type}")
        extra += f" mask(%m : {mask_type})"
    if bias_type:
        args.append(f"%bias: {bias_type}")
        extra += f" bias(%bias : {bias_type})"
    if factor_type:
        args.append(f"%f: {factor_type}")
        extra += f" scale_factor(%f : {factor_type})"
    op = "kiln.paged_attention" if paged else "kiln.attention"
    # Q's shape with V's head dim (they differ in multi-head latent
    # attention).
    q_parts = types[0][len("tensor<"):-1].split("x")
    v_parts = types[2][len("tensor<"):-1].split("x")
    result = "tensor<" + "x".join(q_parts[:-2] + [v_parts[-2], q_parts[-1]]) + ">"
    return (f"func.func @main({', '.join(args)}) -> {result} {{\n"
            f"  %o = {op} {', '.join(operands)}{extra} {{{attrs}}}\n"
            f"      : {', '.join(types)} -> {result}\n"
            f"  return %o : {result}\n}}\n")


class Checker:
    def __init__(self, runner, workdir):
        self.runner = runner
        self.workdir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.count = 0
        self.failures = 0

    def run(self, name, mlir, inputs, expected, dtype="f32", flags=()):
        """Runs @main of `mlir` on `inputs` (arrays) with each flag set of
        `flags` and compares with `expected` (float64)."""
        base = os.path.join(self.workdir, name)
        with open(base + ".mlir", "w") as f:
            f.write(mlir)
        input_args = []
        for i, arr in enumerate(inputs):
            path = f"{base}.in{i}.npy"
            np.save(path, arr)
            input_args.append(f"--input={path}")
        for flag_set in flags or [()]:
            self.count += 1
            out_path = base + ".out.npy"
            cmd = [self.runner, base + ".mlir", *input_args,
                   f"--output={out_path}", *flag_set]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            label = f"{name} {' '.join(flag_set)}"
            if proc.returncode != 0:
                print(f"FAIL {label}: runner failed\n{proc.stderr}")
                self.failures += 1
                continue
            out = np.load(out_path).astype(np.float64)
            if out.shape != expected.shape:
                print(f"FAIL {label}: shape {out.shape} != {expected.shape}")
                self.failures += 1
                continue
            if not np.all(np.isfinite(out)):
                print(f"FAIL {label}: non-finite output")
                self.failures += 1
                continue
            err = np.abs(out - expected).max() if out.size else 0.0
            ref = max(np.abs(expected).max() if out.size else 0.0, 1e-6)
            rel = err / ref
            ok = rel <= TOLERANCE[dtype]
            print(f"{'ok' if ok else 'FAIL'} {label}: max rel err {rel:.2e}")
            if not ok:
                self.failures += 1

    def finish(self):
        print(f"{self.count - self.failures} of {self.count} passed")
        sys.exit(1 if self.failures else 0)
