# kiln.paged_attention (page sizes 1, 16, 64, shuffled page tables, per
# sequence lengths) and split-KV (1 to 8 splits) through the CPU path,
# against a float64 numpy reference.

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from attention_ref import (Checker, attention, attention_attrs, attention_mlir,
                           paged_attention, tensor_type, to_dtype)

checker = Checker(sys.argv[1], sys.argv[2])
rng = np.random.default_rng(11)


def paged_case(name, page, kv_lens, sq=1, hq=4, hkv=2, d=16, dtype="f32",
               scale=0.25, causal=True, window=None, softcap=None,
               spare_pages=3, dynamic=False, flags=None):
    batch = len(kv_lens)
    max_pages = max(-(-n // page) for n in kv_lens) + 1
    num_pages = batch * max_pages + spare_pages
    # Every sequence gets distinct pages, in shuffled order.
    order = rng.permutation(num_pages)
    page_table = order[:batch * max_pages].reshape(batch, max_pages)
    page_table = page_table.astype(np.int32)
    q64, q = to_dtype(rng.standard_normal((batch, hq, sq, d)), dtype)
    kc64, kc = to_dtype(rng.standard_normal((num_pages, page, hkv, d)), dtype)
    vc64, vc = to_dtype(rng.standard_normal((num_pages, page, hkv, d)), dtype)
    lens = np.array(kv_lens, np.int32)
    expected = paged_attention(q64, kc64, vc64, page_table, lens, scale,
                               causal, window, softcap)
    shapes = [q.shape, kc.shape, vc.shape, page_table.shape, lens.shape]
    elements = [dtype, dtype, dtype, "i32", "i32"]
    types = [tensor_type([None] * len(s) if dynamic else s, e)
             for s, e in zip(shapes, elements)]
    mlir = attention_mlir(types, attention_attrs(scale, causal, window, softcap),
                          paged=True)
    checker.run(name, mlir, [q, kc, vc, page_table, lens], expected, dtype,
                flags or [("--kv-block-size=16",),
                          ("--kv-block-size=8", "--num-splits=3"),
                          ("--attention-lowering=decomposed",)])


paged_case("page1-decode", page=1, kv_lens=[5, 17, 1])
paged_case("page16-decode", page=16, kv_lens=[33, 16, 70, 2])
paged_case("page64-decode", page=64, kv_lens=[130, 64, 7])
paged_case("page16-chunk", page=16, kv_lens=[40, 29], sq=6)
paged_case("page16-window", page=16, kv_lens=[50, 70], sq=3, window=9)
paged_case("page64-noncausal-softcap", page=64, kv_lens=[90, 3],
           causal=False, softcap=3.0, scale=1.0)
paged_case("page16-mqa", page=16, kv_lens=[21, 48], hq=4, hkv=1)
paged_case("page16-empty-sequence", page=16, kv_lens=[0, 19])
paged_case("page1-dynamic", page=1, kv_lens=[9, 4], sq=2, dynamic=True)
paged_case("page16-bf16", page=16, kv_lens=[45, 20], dtype="bf16")

# Split-KV: 1 to 8 splits, on decode and on causal prefill.
for name, sq, sk, causal, window in [("split-decode", 1, 150, True, None),
                                     ("split-prefill", 40, 40, True, None),
                                     ("split-window", 24, 60, True, 17),
                                     ("split-full", 9, 70, False, None)]:
    q64, q = to_dtype(rng.standard_normal((1, 4, sq, 16)), "f32")
    k64, k = to_dtype(rng.standard_normal((1, 2, sk, 16)), "f32")
    v64, v = to_dtype(rng.standard_normal((1, 2, sk, 16)), "f32")
    expected = attention(q64, k64, v64, 0.3, causal, window)
    types = [tensor_type(x.shape, "f32") for x in (q, k, v)]
    mlir = attention_mlir(types, attention_attrs(0.3, causal, window, None))
    checker.run(name, mlir, [q, k, v], expected, "f32",
                [("--kv-block-size=8", f"--num-splits={n}")
                 for n in range(1, 9)])

checker.finish()
