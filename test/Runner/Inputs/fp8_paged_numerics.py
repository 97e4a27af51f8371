# kiln.paged_attention over f8E4M3FN caches with scales: decode and chunked
# prefill, bf16 and f16 queries, per-tensor and per-KV-head scales (one set
# apart by large factors), GQA, a window, a soft-cap, a ragged batch and odd
# sizes, through the CPU path (tiled with and without splits, and
# decomposed), against a float64 numpy reference that decodes the cache
# bytes itself. The caches go in as their raw bytes (a uint8 .npy, or int8
# in one case; float values are refused); the keys of each case's sequences
# cover every e4m3 code but the two NaNs, subnormals and ±0 included (or
# only the smallest codes), or, for "quantised" caches, encode normal draws
# as an FP8 KV cache would.

import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from attention_ref import (E4M3_FINITE_CODES, LOWERINGS, Checker,
                           attention_attrs, e4m3_decode, e4m3_encode,
                           paged_attention, tensor_type, to_dtype)

checker = Checker(sys.argv[1], sys.argv[2])
rng = np.random.default_rng(83)



def fp8_mlir(types, attrs, ragged):
    """@main(q, key_cache, value_cache, page_table, kv_lens[, q_offsets],
    k_scale, v_scale) with one kiln.paged_attention."""
    q_type, k_type, v_type, pt_type, lens_type = types[:5]
    offs_type = types[5] if ragged else None
    ks_type, vs_type = types[-2:]
    q_parts = q_type[len("tensor<"):-1].split("x")
    result = "tensor<" + "x".join(q_parts) + ">"
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types))
    operands = "%a0, %a1, %a2, %a3, %a4"
    op_types = [q_type, k_type, v_type, pt_type, lens_type]
    if ragged:
        operands += " q_offsets %a5"
        op_types.append(offs_type)
    ks, vs = f"%a{len(types) - 2}", f"%a{len(types) - 1}"
    return (f"func.func @main({args}) -> {result} {{\n"
            f"  %o = kiln.paged_attention {operands}"
            f" scales({ks}, {vs} : {ks_type}, {vs_type}) {{{attrs}}}\n"
            f"      : {', '.join(op_types)} -> {result}\n"
            f"  return %o : {result}\n}}\n")


def read_positions(table, kv_lens, new, page, hkv, d):
    """Flat indices into a [pages, page, Hkv, D] cache of the keys of the
    sequences with queries."""
    positions = []
    for b, n in enumerate(kv_lens):
        if new[b] == 0:
            continue
        keys = np.arange(n)
        pages = table[b, keys // page]
        slots = keys % page
        base = (pages * page + slots) * hkv * d
        positions.append((base[:, None] + np.arange(hkv * d)[None]).ravel())
    return np.unique(np.concatenate(positions))


# Subnormals, ±0 and the smallest normals (exponent field 0 or 1): where
# codes reach 448 these are lost beside the large ones.
SMALL_CODES = np.array([c for c in E4M3_FINITE_CODES if (c >> 3) & 0xF <= 1],
                       np.uint8)


def every_code_cache(shape, positions, pool=E4M3_FINITE_CODES):
    """Random codes of `pool`, with every code of it among `positions`."""
    codes = rng.choice(pool, size=shape).astype(np.uint8)
    flat = codes.reshape(-1)
    assert len(positions) >= len(pool), "case too small"
    chosen = rng.choice(positions, len(pool), replace=False)
    flat[chosen] = rng.permutation(pool)
    assert set(np.unique(flat[positions])) == set(pool)
    return codes


def quantised_cache(shape, amplitudes):
    """Normal draws times the per-head `amplitudes`, quantised per KV head
    as an FP8 KV cache is (scale = amax / 448): the codes and the scales."""
    values = rng.standard_normal(shape) * np.asarray(amplitudes)[None, None,
                                                                  :, None]
    amax = np.abs(values).max(axis=(0, 1, 3))
    scales = (amax / 448.0).astype(np.float32)
    codes = e4m3_encode(values / scales.astype(np.float64)[None, None, :,
                                                           None])
    return codes, scales


def fp8_case(name, page, new, kv_lens, hq=4, hkv=2, d=16, dtype="bf16",
             scale=0.25, causal=True, window=None, softcap=None,
             per_head=True, k_scales=None, v_scales=None, ragged=False,
             quantised=None, small_codes=False, int8_bytes=False):
    """Sequence b brings new[b] queries (all equal unless ragged) against
    kv_lens[b] keys. Caches cover every finite e4m3 code, with `k_scales`
    and `v_scales` (random when None), or with `quantised` = (K, V) per-head
    amplitudes, are normal draws quantised per head. With `small_codes`,
    every code of SMALL_CODES and no other. With `int8_bytes` the cache
    bytes go in as an int8 .npy rather than uint8."""
    batch = len(kv_lens)
    max_pages = max(-(-n // page) for n in kv_lens) + 1
    num_pages = batch * max_pages + 2
    table = rng.permutation(num_pages)[:batch * max_pages]
    table = table.reshape(batch, max_pages).astype(np.int32)
    lens = np.array(kv_lens, np.int32)
    shape = (num_pages, page, hkv, d)
    n_scales = hkv if per_head else 1
    if quantised:
        kc, ks = quantised_cache(shape, quantised[0])
        vc, vs = quantised_cache(shape, quantised[1])
    else:
        positions = read_positions(table, kv_lens, new, page, hkv, d)
        pool = SMALL_CODES if small_codes else E4M3_FINITE_CODES
        kc = every_code_cache(shape, positions, pool)
        vc = every_code_cache(shape, positions, pool)
        # Decoded codes reach 448 (2^-5 for small codes): these scales keep
        # values near 1.
        base = 32.0 if small_codes else 1 / 64
        ks = (np.array(k_scales, np.float32) if k_scales is not None else
              (rng.uniform(0.5, 2.0, n_scales) * base).astype(np.float32))
        vs = (np.array(v_scales, np.float32) if v_scales is not None else
              (rng.uniform(0.5, 2.0, n_scales) * base).astype(np.float32))
    assert ks.shape == (n_scales,) and vs.shape == (n_scales,)
    head_of = np.arange(hkv) if per_head else np.zeros(hkv, int)
    k64 = e4m3_decode(kc) * ks.astype(np.float64)[head_of][None, None, :,
                                                            None]
    v64 = e4m3_decode(vc) * vs.astype(np.float64)[head_of][None, None, :,
                                                            None]
    if ragged:
        offsets = np.concatenate([[0], np.cumsum(new)]).astype(np.int32)
        total_q = int(offsets[-1])
        q64, q = to_dtype(rng.standard_normal((total_q, hq, d)), dtype)
        expected = np.zeros((total_q, hq, d))
        for b in range(batch):
            start, end = int(offsets[b]), int(offsets[b + 1])
            if end <= start:
                continue
            rows = q64[start:end].transpose(1, 0, 2)[None]
            out = paged_attention(rows, k64, v64, table[b:b + 1],
                                  lens[b:b + 1], scale, causal, window,
                                  softcap)
            expected[start:end] = out[0].transpose(1, 0, 2)
        inputs = [q, kc, vc, table, lens, offsets, ks, vs]
        elements = [dtype, "f8E4M3FN", "f8E4M3FN", "i32", "i32", "i32",
                    "f32", "f32"]
    else:
        assert len(set(new)) == 1
        q64, q = to_dtype(rng.standard_normal((batch, hq, new[0], d)), dtype)
        expected = paged_attention(q64, k64, v64, table, lens, scale, causal,
                                   window, softcap)
        inputs = [q, kc, vc, table, lens, ks, vs]
        elements = [dtype, "f8E4M3FN", "f8E4M3FN", "i32", "i32", "f32",
                    "f32"]
    types = [tensor_type(a.shape, e) for a, e in zip(inputs, elements)]
    mlir = fp8_mlir(types, attention_attrs(scale, causal, window, softcap),
                    ragged)
    if int8_bytes:
        inputs[1], inputs[2] = kc.view(np.int8), vc.view(np.int8)
    checker.run(name, mlir, inputs, expected, dtype, LOWERINGS)
    return name


def check_refused(name):
    """The runner refuses case `name` with its key cache as float32 values
    rather than bytes, naming the argument."""
    base = os.path.join(checker.workdir, name)
    bad = base + ".float-cache.npy"
    np.save(bad, e4m3_decode(np.load(base + ".in1.npy")).astype(np.float32))
    inputs = [f"--input={base}.in{i}.npy" for i in range(7)]
    inputs[1] = f"--input={bad}"
    proc = subprocess.run([checker.runner, base + ".mlir", *inputs],
                          capture_output=True, text=True)
    checker.count += 1
    want = "error: argument 1 (tensor<"
    if proc.returncode == 0 or want not in proc.stderr or (
            "uint8 or int8" not in proc.stderr):
        checker.failures += 1
        print(f"FAIL {name} float32 cache: not refused as expected\n"
              f"{proc.stderr}")
    else:
        print(f"ok {name} float32 cache refused: {proc.stderr.strip()}")


# Decode, GQA 4/1, per-tensor scales, page 16, lengths off the page.
first = fp8_case("decode-bf16-tensor", page=16, new=[1, 1, 1],
                 kv_lens=[37, 5, 19], hq=8, hkv=2, per_head=False)
# Decode, f16, per-head scales, head dim 24, page 4.
fp8_case("decode-f16-head", page=4, new=[1, 1, 1], kv_lens=[9, 22, 1], hq=8,
         hkv=4, d=24, dtype="f16")
# Chunked prefill (causal, 6 new queries over cached keys), bf16, per head.
fp8_case("prefill-bf16-head", page=16, new=[6, 6], kv_lens=[21, 6], hq=4,
         hkv=2)
# Chunked prefill, f16, per tensor, head dim 24, page 4.
fp8_case("prefill-f16-tensor", page=4, new=[5, 5], kv_lens=[13, 30], hq=6,
         hkv=3, d=24, dtype="f16", per_head=False)
# Sliding window of 5 over a chunk of 3.
fp8_case("window-bf16", page=4, new=[3, 3], kv_lens=[23, 9], window=5)
# Soft-cap, non-causal chunk, f16.
fp8_case("softcap-f16", page=16, new=[4, 4], kv_lens=[35, 18], dtype="f16",
         causal=False, softcap=5.0, scale=1.0)
# Scales per KV head apart by factors up to 2^12 (K) and 3000 (V), GQA 2/1
# and 1/1: a head read with another head's scale is far off.
fp8_case("head-scales-apart-bf16", page=16, new=[3, 3], kv_lens=[29, 17],
         hq=8, hkv=4, k_scales=[2.0**-14, 2.0**-8, 2.0**-2, 1 / 448],
         v_scales=[0.002, 1.0, 0.05, 0.4])
fp8_case("head-scales-apart-f16", page=4, new=[1, 1], kv_lens=[26, 11],
         hq=4, hkv=4, d=24, dtype="f16",
         k_scales=[0.25, 2.0**-9, 0.004, 2.0**-5],
         v_scales=[3.0, 0.01, 0.2, 0.001])
# A normal K/V quantised per KV head, amplitudes apart by 100x.
fp8_case("quantised-bf16", page=16, new=[1, 1, 1, 1], kv_lens=[40, 3, 17, 64],
         hq=8, hkv=2, quantised=([0.5, 50.0], [4.0, 0.04]))
# Only subnormals, ±0 and the smallest normals, scaled up: the decoding of
# subnormals is what the result is made of.
fp8_case("small-codes-bf16", page=4, new=[1, 1], kv_lens=[30, 13], hq=4,
         hkv=2, small_codes=True)
fp8_case("small-codes-f16", page=16, new=[4, 4], kv_lens=[21, 38], hq=6,
         hkv=3, d=24, dtype="f16", small_codes=True, per_head=False)
# A ragged batch: a prompt chunk of 9 beside three decodes, per head.
fp8_case("ragged-bf16-head", page=16, new=[9, 1, 1, 1],
         kv_lens=[15, 33, 1, 70], hq=4, hkv=2, ragged=True)
# Ragged, f16, per tensor, head dim 24, page 4, a sequence with no query;
# the cache bytes as int8.
fp8_case("ragged-f16-tensor", page=4, new=[5, 0, 1, 3], kv_lens=[5, 12, 20, 9],
         hq=6, hkv=2, d=24, dtype="f16", per_head=False, ragged=True,
         int8_bytes=True)
# Cache values rather than bytes are an error naming the argument.
check_refused(first)

checker.finish()
