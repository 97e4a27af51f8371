# kiln.attention on packed sequences (offsets(q_offsets, kv_offsets), the
# varlen form): encoders without padding, prompt chunks over their earlier
# keys, a sequence with no queries and one with no keys, rows past the last
# offset, windows (one- and two-sided), soft-capping, GQA, MLA's value head
# dim, bf16 and dynamic shapes, through the CPU path (tiled with and
# without splits, and decomposed), against a float64 numpy reference built
# sequence by sequence.

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from attention_ref import (LOWERINGS, Checker, attention, attention_attrs,
                           tensor_type, to_dtype)

checker = Checker(sys.argv[1], sys.argv[2])
rng = np.random.default_rng(31)



def packed_mlir(types, attrs):
    q, k, v, qo, ko = types
    q_parts = q[len("tensor<"):-1].split("x")
    v_parts = v[len("tensor<"):-1].split("x")
    result = "tensor<" + "x".join(q_parts[:2] + v_parts[2:]) + ">"
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types))
    return (f"func.func @main({args}) -> {result} {{\n"
            f"  %o = kiln.attention %a0, %a1, %a2 offsets(%a3, %a4 : {qo}, {ko}) "
            f"{{{attrs}}}\n"
            f"      : {q}, {k}, {v} -> {result}\n"
            f"  return %o : {result}\n}}\n")


def packed_case(name, new, keys, hq=4, hkv=2, d=16, dv=None, dtype="f32",
                scale=0.25, causal=False, window=None, window_right=None,
                softcap=None, q_offsets=None, kv_offsets=None, total_q=None,
                total_kv=None, dynamic=False):
    """Sequence b has new[b] queries over keys[b] keys of its own. Offsets
    may be given (rows past the last one are no sequence's; offsets out of
    range are clamped into [0, total] and made non-decreasing)."""
    dv = dv or d
    if q_offsets is None:
        q_offsets = np.concatenate([[0], np.cumsum(new)])
    if kv_offsets is None:
        kv_offsets = np.concatenate([[0], np.cumsum(keys)])
    q_offsets = np.array(q_offsets, np.int32)
    kv_offsets = np.array(kv_offsets, np.int32)
    total_q = total_q or max(int(q_offsets[-1]), int(sum(new)))
    total_kv = total_kv or max(int(kv_offsets[-1]), int(sum(keys)))

    def rows(offsets, b, total):
        start = min(max(int(offsets[b]), 0), total)
        return start, max(min(max(int(offsets[b + 1]), 0), total), start)
    q64, q = to_dtype(rng.standard_normal((total_q, hq, d)), dtype)
    k64, k = to_dtype(rng.standard_normal((total_kv, hkv, d)), dtype)
    v64, v = to_dtype(rng.standard_normal((total_kv, hkv, dv)), dtype)
    expected = np.zeros((total_q, hq, dv))
    for b in range(len(q_offsets) - 1):
        start, end = rows(q_offsets, b, total_q)
        first, last = rows(kv_offsets, b, total_kv)
        if end <= start:
            continue
        as_bhsd = lambda x: x.transpose(1, 0, 2)[None]
        out = attention(as_bhsd(q64[start:end]), as_bhsd(k64[first:last]),
                        as_bhsd(v64[first:last]), scale, causal, window,
                        softcap, window_right=window_right)
        expected[start:end] = out[0].transpose(1, 0, 2)
    shapes = [q.shape, k.shape, v.shape, q_offsets.shape, kv_offsets.shape]
    elements = [dtype, dtype, dtype, "i32", "i32"]
    types = [tensor_type([None] * len(s) if dynamic else s, e)
             for s, e in zip(shapes, elements)]
    attrs = attention_attrs(scale, causal, window, softcap,
                            window_right=window_right)
    checker.run(name, packed_mlir(types, attrs),
                [q, k, v, q_offsets, kv_offsets], expected, dtype, LOWERINGS)


# An encoder batch without padding: three sentences, bidirectional.
packed_case("encoder", new=[7, 3, 12], keys=[7, 3, 12])
# Causal prompts, and a prompt chunk over 9 earlier keys of its sequence.
packed_case("causal-chunk", new=[5, 6, 1], keys=[5, 15, 8], causal=True)
# A sequence with no queries, one with no keys (its rows are zeros).
packed_case("empty-sequences", new=[4, 0, 3, 2], keys=[4, 6, 0, 2],
            causal=True)
packed_case("window", new=[9, 12], keys=[9, 12], causal=True, window=4)
packed_case("two-sided-window", new=[10, 6], keys=[10, 6], window=3,
            window_right=2)
packed_case("softcap-gqa", new=[3, 8], keys=[3, 8], causal=True,
            softcap=3.0, scale=1.0, hq=6, hkv=2)
packed_case("mla-dims", new=[5, 2], keys=[5, 9], causal=True, d=24, dv=16)
packed_case("bf16", new=[11, 4], keys=[11, 4], causal=True, dtype="bf16")
packed_case("dynamic", new=[4, 1, 6], keys=[4, 7, 6], causal=True,
            dynamic=True)
# Offsets that stop short: rows 9.. of Q are no sequence's (zeros); keys
# 10.. are no sequence's either.
packed_case("rows-past-last-offset", new=[5, 4, 2], keys=[5, 5, 3],
            q_offsets=[0, 5, 9], kv_offsets=[0, 5, 10], causal=True)
# Offsets out of range are clamped, never read outside Q, K or V.
packed_case("offsets-clamped", new=[3, 3, 0], keys=[3, 3, 0],
            q_offsets=[0, 3, 40, 2], kv_offsets=[-5, 4, 50, 1], total_q=6,
            total_kv=6)

checker.finish()
