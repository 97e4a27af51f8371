# Every kiln.attention variant through the CPU path, tiled (several block
# sizes) and decomposed, against a float64 numpy reference.

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from attention_ref import (Checker, attention, attention_attrs, attention_mlir,
                           tensor_type, to_dtype)

checker = Checker(sys.argv[1], sys.argv[2])
rng = np.random.default_rng(7)

TILED = [("--kv-block-size=8", "--q-block-size=4"),
         ("--kv-block-size=32", "--q-block-size=16")]
DECOMPOSED = [("--attention-lowering=decomposed",)]


def case(name, b=2, hq=4, hkv=4, sq=37, sk=53, d=16, dtype="f32",
         scale=0.25, causal=False, window=None, softcap=None, mask=None,
         bias=None, layout="bhsd", dynamic=False, flags=None,
         masked_score=None, window_right=None, dv=None, factor=None):
    q64, q = to_dtype(rng.standard_normal((b, hq, sq, d)), dtype)
    k64, k = to_dtype(rng.standard_normal((b, hkv, sk, d)), dtype)
    v64, v = to_dtype(rng.standard_normal((b, hkv, sk, dv or d)), dtype)
    # A run-time scale_factor multiplies the scale (the op's and the
    # reference's).
    expected = attention(q64, k64, v64,
                         scale * (1.0 if factor is None else np.float32(factor)),
                         causal, window, softcap,
                         None if mask is None else
                         (mask if mask.dtype == np.bool_ else
                          mask.astype(np.float64)),
                         None if bias is None else bias.astype(np.float64),
                         masked_score, window_right)
    inputs = [q, k, v]
    if layout == "bshd":
        inputs = [x.transpose(0, 2, 1, 3).copy() for x in inputs]
        expected = expected.transpose(0, 2, 1, 3)
    types = [tensor_type([None] * 4 if dynamic else x.shape, dtype)
             for x in inputs]
    mask_type = bias_type = None
    if mask is not None:
        inputs.append(mask)
        mask_type = tensor_type(mask.shape,
                                "i1" if mask.dtype == np.bool_ else "f32")
    if bias is not None:
        inputs.append(bias)
        bias_type = tensor_type(bias.shape, "f32")
    factor_type = None
    if factor is not None:
        inputs.append(np.array([factor], np.float32))
        factor_type = "tensor<1xf32>"
    mlir = attention_mlir(types,
                          attention_attrs(scale, causal, window, softcap, layout,
                                          masked_score, window_right),
                          mask_type, bias_type, factor_type=factor_type)
    checker.run(name, mlir, inputs, expected, dtype,
                flags or TILED + DECOMPOSED)


case("plain")
case("causal", sq=45, sk=45, causal=True)
case("causal-offset", sq=7, sk=50, causal=True)
# More queries than keys: the first rows see no key and give 0.
case("causal-more-queries", sq=20, sk=10, causal=True)
case("window", sq=40, sk=40, causal=True, window=5)
case("window-offset", sq=9, sk=41, causal=True, window=12)
case("window-one", sq=17, sk=17, causal=True, window=1)
case("softcap", scale=1.5, softcap=5.0)
case("softcap-causal", sq=33, sk=33, scale=1.0, softcap=2.0, causal=True)
case("bias", bias=rng.standard_normal((1, 4, 37, 53)).astype(np.float32))
case("bias-broadcast-rank2",
     bias=rng.standard_normal((37, 53)).astype(np.float32))
padding = np.zeros((2, 1, 1, 53), np.float32)
padding[0, ..., 40:] = -np.inf
padding[1, ..., :3] = -1e9
case("additive-mask", mask=padding)
case("additive-mask-full",
     mask=rng.standard_normal((2, 4, 37, 53)).astype(np.float32))
bool_mask = rng.random((2, 1, 37, 53)) < 0.7
bool_mask[0, 0, 5, :] = False  # a row that sees no key
case("boolean-mask", mask=bool_mask)
case("boolean-mask-causal", sq=37, sk=53, causal=True,
     mask=rng.random((1, 1, 1, 53)) < 0.8)
case("mask-and-bias", mask=padding,
     bias=rng.standard_normal((1, 1, 37, 53)).astype(np.float32))
case("gqa", hq=8, hkv=2, causal=True, sq=29, sk=29)
case("mqa", hq=6, hkv=1)
case("decode", sq=1, sk=77, causal=True)
case("decode-window", sq=1, sk=77, causal=True, window=20)
case("block-multiples", sq=32, sk=64, causal=True)
case("bshd", layout="bshd", causal=True, sq=21, sk=30, hq=4, hkv=2)
case("dynamic", dynamic=True, causal=True, sq=19, sk=23)
case("f16", dtype="f16", causal=True, sq=30, sk=30)
case("bf16", dtype="bf16", hq=4, hkv=2, sq=12, sk=40, causal=True)
case("d-odd", d=5, sq=13, sk=11)

# Finite fills (masked_score, and finfo.min in an additive mask): rows that
# see no key average V over every key, as the graph's softmax does.
FINFO_MIN = float(np.finfo(np.float32).min)
left_padding = np.ones((2, 1, 1, 53), bool)
left_padding[0, ..., :20] = False
left_padding[1] = False  # every key padded
case("masked-score-causal-padding", sq=53, sk=53, causal=True,
     mask=left_padding, masked_score=FINFO_MIN)
case("masked-score-window-padding", sq=40, sk=53, causal=True, window=9,
     mask=left_padding, masked_score=FINFO_MIN)
case("masked-score-boolean", mask=bool_mask, masked_score=-1e4)
additive_min = np.where(left_padding, 0.0, FINFO_MIN).astype(np.float32)
case("additive-min-full-rows", mask=additive_min)
# Multi-head latent attention: V's head dim differs from Q's and K's.
case("mla-192-128", d=24, dv=16, causal=True, sq=21, sk=30, hq=4, hkv=4)
case("mla-bshd-gqa", d=12, dv=20, layout="bshd", sq=9, sk=13, hq=4, hkv=2)
case("mla-bf16", d=24, dv=8, dtype="bf16", causal=True, sq=12, sk=40)

# Two-sided windows (window_right): ModernBERT's local layers, a look-ahead
# band, Sq != Sk, and one with masked_score over a padding mask.
case("two-sided-window", sq=45, sk=45, window=7, window_right=6)
case("two-sided-window-offset", sq=9, sk=41, window=12, window_right=3)
case("right-bound-only", sq=30, sk=30, window_right=4)
case("two-sided-window-padding", sq=53, sk=53, window=9, window_right=8,
     mask=left_padding, masked_score=FINFO_MIN)
case("additive-min-plus-causal", sq=53, sk=53, causal=True, mask=additive_min)

# A run-time scale (scale_factor): a learned temperature times the constant
# scale, with a soft-cap, a mask and causal; a negative factor (the graph's
# sign is kept: the largest score then comes from the smallest product).
case("scale-factor", factor=0.7)
case("scale-factor-softcap-causal", sq=33, sk=33, scale=1.0, softcap=5.0,
     causal=True, factor=1.9)
case("scale-factor-mask-bf16", dtype="bf16", mask=padding, factor=0.3)
case("scale-factor-negative", factor=-0.8, causal=True, sq=21, sk=21)

checker.finish()
