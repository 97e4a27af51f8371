# kiln.paged_attention on ragged batches (q_offsets): prompt chunks beside
# decodes, a sequence with no new queries, offsets that leave rows to no
# sequence, windows, soft-capping, GQA, bf16 and dynamic shapes, through the
# CPU path (tiled with and without splits, and decomposed), against a float64
# numpy reference built sequence by sequence.

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from attention_ref import (LOWERINGS, Checker, attention_attrs,
                           paged_attention, tensor_type, to_dtype)

checker = Checker(sys.argv[1], sys.argv[2])
rng = np.random.default_rng(29)



def ragged_mlir(types, attrs):
    q, kc, vc, pt, lens, offs = types
    q_parts = q[len("tensor<"):-1].split("x")
    v_parts = vc[len("tensor<"):-1].split("x")
    result = "tensor<" + "x".join(q_parts[:2] + [v_parts[-2], q_parts[-1]]) + ">"
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types))
    return (f"func.func @main({args}) -> {result} {{\n"
            f"  %o = kiln.paged_attention %a0, %a1, %a2, %a3, %a4 "
            f"q_offsets %a5 {{{attrs}}}\n"
            f"      : {', '.join(types)} -> {result}\n"
            f"  return %o : {result}\n}}\n")


def ragged_case(name, page, new, kv_lens, hq=4, hkv=2, d=16, dtype="f32",
                scale=0.25, causal=True, window=None, softcap=None,
                offsets=None, dynamic=False):
    """Sequence b brings new[b] queries against kv_lens[b] keys. `offsets`
    overrides the packed offsets (rows past the last one are no sequence's).
    """
    batch = len(kv_lens)
    if offsets is None:
        offsets = np.concatenate([[0], np.cumsum(new)])
    offsets = np.array(offsets, np.int32)
    total_q = max(int(offsets[-1]), int(sum(new)))
    max_pages = max(-(-n // page) for n in kv_lens) + 1
    num_pages = batch * max_pages + 2
    order = rng.permutation(num_pages)
    table = order[:batch * max_pages].reshape(batch, max_pages)
    table = table.astype(np.int32)
    q64, q = to_dtype(rng.standard_normal((total_q, hq, d)), dtype)
    kc64, kc = to_dtype(rng.standard_normal((num_pages, page, hkv, d)), dtype)
    vc64, vc = to_dtype(rng.standard_normal((num_pages, page, hkv, d)), dtype)
    lens = np.array(kv_lens, np.int32)
    expected = np.zeros((total_q, hq, d))
    for b in range(batch):
        start, end = int(offsets[b]), int(offsets[b + 1])
        if end <= start:
            continue
        rows = q64[start:end].transpose(1, 0, 2)[None]
        out = paged_attention(rows, kc64, vc64, table[b:b + 1], lens[b:b + 1],
                              scale, causal, window, softcap)
        expected[start:end] = out[0].transpose(1, 0, 2)
    shapes = [q.shape, kc.shape, vc.shape, table.shape, lens.shape,
              offsets.shape]
    elements = [dtype, dtype, dtype, "i32", "i32", "i32"]
    types = [tensor_type([None] * len(s) if dynamic else s, e)
             for s, e in zip(shapes, elements)]
    mlir = ragged_mlir(types, attention_attrs(scale, causal, window, softcap))
    checker.run(name, mlir, [q, kc, vc, table, lens, offsets], expected,
                dtype, LOWERINGS)


# A prompt chunk of 9 (6 keys already cached) beside three decodes.
ragged_case("chunk-and-decodes", page=16, new=[9, 1, 1, 1],
            kv_lens=[15, 33, 1, 70])
# Whole prompts (no cache yet), a chunk, a decode, and one with no new query.
ragged_case("prompts-empty-sequence", page=4, new=[5, 0, 7, 1, 3],
            kv_lens=[5, 12, 20, 9, 3])
ragged_case("page1-window", page=1, new=[6, 1, 4], kv_lens=[6, 30, 11],
            window=5)
ragged_case("softcap-noncausal", page=16, new=[3, 1, 8], kv_lens=[40, 2, 8],
            causal=False, softcap=3.0, scale=1.0)
ragged_case("mqa", page=8, new=[1, 1, 1, 6], kv_lens=[17, 2, 40, 6], hq=4,
            hkv=1)
ragged_case("bf16", page=16, new=[12, 1, 1], kv_lens=[30, 50, 7],
            dtype="bf16")
ragged_case("dynamic", page=16, new=[4, 1, 2], kv_lens=[20, 9, 2],
            dynamic=True)
# Offsets that stop short of total_q: rows 10.. belong to no sequence and
# come out as zeros.
ragged_case("rows-past-last-offset", page=16, new=[6, 1, 1, 4],
            kv_lens=[6, 20, 3, 9], offsets=[0, 6, 7, 8, 10])

checker.finish()
