#!/usr/bin/python3
"""Generates the ONNX graphs of test/tools/kilnc/Inputs/fusion.

Each graph is one way an exporter (Hugging Face models through the PyTorch
TorchScript and dynamo exporters, TF2ONNX, hand-written ONNX) writes
attention, or a look-alike that is not attention. The fusion tests
(test/tools/kilnc/fusion-*.test) run `kilnc X.onnx --report=json` on them.
Graphs are small (batch 1, 2 to 4 heads, 8 to 16 positions, head dim 16) and
their initializers are seeded, so reruns give identical files.

Run with a Python that has `onnx` and `numpy` (Debian's /usr/bin/python3 with
python3-onnx). The outputs are committed; rerun this script after changing
it:

    /usr/bin/python3 utils/make_fusion_onnx_tests.py
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test",
                   "tools", "kilnc", "Inputs", "fusion")
F32 = TensorProto.FLOAT
F16 = TensorProto.FLOAT16
I64 = TensorProto.INT64
BOOL = TensorProto.BOOL
FINFO_MIN = float(np.finfo(np.float32).min)

# Default sizes: batch 1, heads, sequence length, head dim.
B, H, S, D = 1, 2, 8, 16


class Graph:
    """A graph under construction; node outputs are named after the node."""

    def __init__(self, name, opset=17, seed=0):
        self.name = name
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []

    def op(self, op_type, inputs, name, outputs=None, **attrs):
        outputs = outputs or [name]
        self.nodes.append(helper.make_node(op_type, inputs, outputs,
                                           name=name, **attrs))
        return outputs[0] if len(outputs) == 1 else outputs

    def const(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, name, shape, dtype=np.float32):
        data = (self.rng.standard_normal(shape) * 0.1).astype(dtype)
        return self.const(name, data)

    def input(self, name, elem, shape):
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def output(self, name, elem, shape):
        self.outputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def save(self, value_info=False):
        """Writes the graph; with `value_info`, the types and shapes of
        every value, as torch's dynamo exporter records them."""
        graph = helper.make_graph(self.nodes, self.name, self.inputs,
                                  self.outputs, self.inits)
        model = helper.make_model(
            graph, producer_name="kiln-tests",
            opset_imports=[helper.make_opsetid("", self.opset)])
        # The installed onnx may predate the opset: no checker, ir_version 8.
        model.ir_version = 8
        if value_info:
            model = onnx.shape_inference.infer_shapes(model)
        onnx.save(model, os.path.join(OUT, self.name + ".onnx"))


# -- Building blocks ---------------------------------------------------------


def qkv_inputs(g, heads=H, kv_heads=None, q_len=S, kv_len=None, dim=D,
               elem=F32, batch=B):
    """Q [B,H,Sq,D], K and V [B,Hkv,Sk,D] as graph inputs."""
    kv_heads = kv_heads or heads
    kv_len = kv_len or q_len
    q = g.input("q", elem, [batch, heads, q_len, dim])
    k = g.input("k", elem, [batch, kv_heads, kv_len, dim])
    v = g.input("v", elem, [batch, kv_heads, kv_len, dim])
    return q, k, v


def k_transposed(g, k):
    return g.op("Transpose", [k], "k_t", perm=[0, 1, 3, 2])


def scaled_scores(g, q, k):
    """Q·Kᵀ scaled by 0.25 with a splat Mul: where most variants start."""
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    return g.op("Mul", [scores, g.const("scale_factor", np.float32(0.25))],
                "scale")


def hf_projections(g, heads=H, dim=D, k_perm=None, q_factor=None,
                   k_divisor=None):
    """The usual Hugging Face form: x [B,S,E] projected, split into heads by
    Reshape [B,S,H,D] and Transpose [0,2,1,3]. With `k_perm`, K's two
    transposes are written as one (TorchScript's [0,2,3,1])."""
    hidden = heads * dim
    x = g.input("hidden_states", F32, [B, S, hidden])
    split = g.const("split_heads", np.array([B, S, heads, dim], np.int64))
    result = {}
    for which in ("q", "k", "v"):
        w = g.weight(which + "_proj.weight", [hidden, hidden])
        bias = g.weight(which + "_proj.bias", [hidden])
        projected = g.op("MatMul", [x, w], which + "_proj/MatMul")
        projected = g.op("Add", [projected, bias], which + "_proj/Add")
        if which == "q" and q_factor is not None:
            # Whisper and BART: q_proj(x) * scaling, before the split.
            projected = g.op("Mul", [projected, g.const(
                "q_scaling", np.float32(q_factor))], "q_proj/Mul")
        if which == "k" and k_divisor is not None:
            projected = g.op("Div", [projected, g.const(
                "k_divisor", np.float32(k_divisor))], "k_proj/Div")
        heads4 = g.op("Reshape", [projected, split], which + "/Reshape")
        perm = k_perm if (which == "k" and k_perm) else [0, 2, 1, 3]
        result[which] = g.op("Transpose", [heads4], which + "/Transpose",
                             perm=perm)
    if not k_perm:
        result["k"] = g.op("Transpose", [result["k"]], "k/Transpose_1",
                           perm=[0, 1, 3, 2])
    return x, result["q"], result["k"], result["v"]


def hf_output(g, ctx, heads=H, dim=D):
    merged = g.op("Transpose", [ctx], "ctx/Transpose", perm=[0, 2, 1, 3])
    shape = g.const("merge_heads", np.array([B, S, heads * dim], np.int64))
    y = g.op("Reshape", [merged, shape], "ctx/Reshape")
    g.output(y, F32, [B, S, heads * dim])


def softmax_pv(g, scores, v, out_shape, axis=-1, elem=F32):
    probs = g.op("Softmax", [scores], "softmax", axis=axis)
    ctx = g.op("MatMul", [probs, v], "pv")
    if out_shape is not None:
        g.output(ctx, elem, out_shape)
    return probs, ctx


def hf_padding_mask(g, seq=S):
    """HF's extended attention mask: (1 - mask[:, None, None, :]) * min."""
    mask = g.input("attention_mask", I64, [B, seq])
    axes = g.const("mask_axes", np.array([1, 2], np.int64))
    m = g.op("Unsqueeze", [mask, axes], "mask/Unsqueeze")
    m = g.op("Cast", [m], "mask/Cast", to=F32)
    one = g.const("mask_one", np.array(1.0, np.float32))
    m = g.op("Sub", [one, m], "mask/Sub")
    fmin = g.const("mask_min", np.array(FINFO_MIN, np.float32))
    return g.op("Mul", [m, fmin], "mask/Mul")


def static_positions(g, like, axis_len_index=2):
    """Range over the static sequence length of `like` (Shape/Gather/Range),
    as row [S,1] and column [1,S] index vectors."""
    shape = g.op("Shape", [like], "pos/Shape")
    index = g.const("pos_index", np.array(axis_len_index, np.int64))
    seq = g.op("Gather", [shape, index], "pos/Gather", axis=0)
    zero = g.const("pos_zero", np.array(0, np.int64))
    one = g.const("pos_one", np.array(1, np.int64))
    pos = g.op("Range", [zero, seq, one], "pos/Range")
    row = g.op("Unsqueeze", [pos, g.const("axes_1", np.array([1], np.int64))],
               "pos/row")
    col = g.op("Unsqueeze", [pos, g.const("axes_0", np.array([0], np.int64))],
               "pos/col")
    return row, col


def causal_initializer(q_len, kv_len, fill=-np.inf, top_left=False,
                       window=None):
    """0 where key j is visible to query i, `fill` elsewhere, [1,1,Sq,Sk]."""
    i = np.arange(q_len)[:, None]
    j = np.arange(kv_len)[None, :]
    last = i if top_left else i + (kv_len - q_len)
    visible = j <= last
    if window:
        visible &= j > last - window
    return np.where(visible, 0.0, fill).astype(np.float32)[None, None]


# -- Scale -------------------------------------------------------------------


# -- Causal and padding masks combined ----------------------------------------


def padding_keep(g, seq=S):
    """attention_mask [B, S] (1 = token, 0 = padding) as a bool [B,1,1,S]."""
    mask = g.input("attention_mask", I64, [B, seq])
    axes = g.const("pad_axes", np.array([1, 2], np.int64))
    keep = g.op("Unsqueeze", [mask, axes], "pad/Unsqueeze")
    return g.op("Cast", [keep], "pad/Cast", to=BOOL)


def causal_pad(name, form):
    """A causal mask and a padding mask combined, as decoders and CLIP's text
    encoder export them with an attention_mask input:
    - and_add: Where(And(tril, keep), 0, min) added (transformers' masking
      utilities, eager);
    - and_select: Where(And(tril, keep), scores, min);
    - and_sdpa: Where(And(tril, keep), 0, -inf) added (SDPA exports);
    - or_select: Where(Or(future, padded), min, scores);
    - add_add: scores + causal(0/min) + (1 - mask)·min (CLIP, older
      decoders): two finite fills that add up to -inf;
    - min_add: Min(causal(0/min), Where(keep, 0, min)) added: one fill."""
    g = Graph(name)
    q, k, v = qkv_inputs(g)
    scores = scaled_scores(g, q, k)
    fmin = g.const("fmin", np.float32(FINFO_MIN))
    zero = g.const("zero", np.float32(0.0))
    tril = np.tril(np.ones((S, S), bool))[None, None]
    if form == "min_add":
        causal = g.const("causal_mask", causal_initializer(S, S, fill=FINFO_MIN))
        pad = g.op("Where", [padding_keep(g), zero, fmin], "pad/Where")
        mask = g.op("Min", [causal, pad], "mask/Min")
        scores = g.op("Add", [scores, mask], "mask/Add")
    elif form == "add_add":
        causal = g.const("causal_mask", causal_initializer(S, S, fill=FINFO_MIN))
        scores = g.op("Add", [scores, causal], "causal_add")
        scores = g.op("Add", [scores, hf_padding_mask(g)], "pad_add")
    elif form == "or_select":
        future = g.const("future", ~tril)
        padded = g.op("Not", [padding_keep(g)], "pad/Not")
        hide = g.op("Or", [future, padded], "mask/Or")
        scores = g.op("Where", [hide, fmin, scores], "mask/Where")
    else:
        keep = g.op("And", [g.const("tril", tril), padding_keep(g)], "mask/And")
        if form == "and_select":
            scores = g.op("Where", [keep, scores, fmin], "mask/Where")
        else:
            fill = g.const("ninf", np.float32(-np.inf)) if form == "and_sdpa" \
                else fmin
            mask = g.op("Where", [keep, zero, fill], "mask/Where")
            scores = g.op("Add", [scores, mask], "mask/Add")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def local_window(name, built, padding=False, half=2):
    """ModernBERT's local attention: each token sees the keys within `half`
    positions on either side, |i - j| <= half. `built`: from Range, Sub, Abs,
    LessOrEqual; otherwise a constant 0/-inf initializer. `padding`: the
    window is written into the expanded padding mask, as ModernBERT does:
    Where(Not(window), min, Expand((1 - mask)·min))."""
    g = Graph(name)
    q, k, v = qkv_inputs(g)
    scores = scaled_scores(g, q, k)
    if built:
        row, col = static_positions(g, q)
        distance = g.op("Abs", [g.op("Sub", [row, col], "win/Sub")], "win/Abs")
        window = g.op("LessOrEqual", [distance, g.const(
            "half", np.array(half, np.int64))], "win/LessOrEqual")
    else:
        i = np.arange(S)[:, None]
        j = np.arange(S)[None, :]
        window = g.const("window_mask", np.abs(i - j) <= half)
    fmin = g.const("fmin", np.float32(FINFO_MIN))
    if padding:
        pad = hf_padding_mask(g)
        pad = g.op("Expand", [pad, g.const("pad_expand", np.array(
            [B, 1, S, S], np.int64))], "mask/Expand")
        outside = g.op("Not", [window], "win/Not")
        mask = g.op("Where", [outside, fmin, pad], "win/Where")
    else:
        mask = g.op("Where", [window, g.const("zero", np.float32(0.0)), fmin],
                    "win/Where")
    scores = g.op("Add", [scores, mask], "win/Add")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def scale_variant(name, where):
    """Scale 0.25 written after QK^T (Mul or Div), on Q, on K, split as
    sqrt on both, or absent."""
    g = Graph(name)
    q, k, v = qkv_inputs(g)
    if where == "q":
        q = g.op("Mul", [q, g.const("scale_factor", np.float32(0.25))], "q_scale")
    if where in ("k", "split"):
        factor = 0.25 if where == "k" else 0.5
        k = g.op("Mul", [k, g.const("k_factor", np.float32(factor))],
                 "k_scale")
    if where == "split":
        q = g.op("Mul", [q, g.const("q_factor", np.float32(0.5))], "q_scale")
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    if where == "mul":
        scores = g.op("Mul", [scores, g.const("scale_factor", np.float32(0.25))],
                      "scale")
    if where == "div":
        scores = g.op("Div", [scores, g.const("sqrt_d", np.float32(4.0))],
                      "scale")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def scale_irrational():
    """Div by sqrt(head_dim) for head dim 8: scale 1/sqrt(8)."""
    g = Graph("scale_div_sqrt8")
    q, k, v = qkv_inputs(g, dim=8)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    sqrt_d = g.const("sqrt_d", np.float32(np.sqrt(8.0)))
    scores = g.op("Div", [scores, sqrt_d], "scale")
    softmax_pv(g, scores, v, [B, H, S, 8])
    g.save()


# -- Layout ------------------------------------------------------------------


def k_pretransposed():
    """K given as [B,H,D,S] (GPT-2's TorchScript export keeps K transposed)."""
    g = Graph("k_pretransposed")
    q = g.input("q", F32, [B, H, S, D])
    kt = g.input("k_t", F32, [B, H, D, S])
    v = g.input("v", F32, [B, H, S, D])
    scores = g.op("MatMul", [q, kt], "qk")
    scores = g.op("Mul", [scores, g.const("scale_factor", np.float32(0.25))],
                  "scale")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def hf_projection(name, k_perm=None, prescaled=False):
    """x -> MatMul+Add -> Reshape [B,S,H,D] -> Transpose [0,2,1,3] for Q, K,
    V; the result merged back to [B,S,H*D]. `prescaled`: Q multiplied by
    0.25 and K divided by 2 right after their projections (Whisper's form),
    and no factor after Q·Kᵀ."""
    g = Graph(name)
    _, q, k, v = hf_projections(g, k_perm=k_perm,
                                q_factor=0.25 if prescaled else None,
                                k_divisor=2.0 if prescaled else None)
    scores = g.op("MatMul", [q, k], "qk")
    if not prescaled:
        scores = g.op("Div", [scores, g.const("sqrt_d", np.float32(4.0))],
                      "scale")
    _, ctx = softmax_pv(g, scores, v, None)
    hf_output(g, ctx)
    g.save()


# -- Masks -------------------------------------------------------------------


def hf_padding():
    """BERT: scores / sqrt(d) + (1 - attention_mask) * finfo.min."""
    g = Graph("mask_hf_padding")
    _, q, k, v = hf_projections(g)
    scores = g.op("MatMul", [q, k], "qk")
    scores = g.op("Div", [scores, g.const("sqrt_d", np.float32(4.0))],
                  "scale")
    scores = g.op("Add", [scores, hf_padding_mask(g)], "mask_add")
    _, ctx = softmax_pv(g, scores, v, None)
    hf_output(g, ctx)
    g.save()


def bool_mask_where(name, fill):
    """Where(mask, scores, fill) with a run-time boolean mask [B,1,S,S]."""
    g = Graph(name)
    q, k, v = qkv_inputs(g)
    scores = scaled_scores(g, q, k)
    mask = g.input("mask", BOOL, [B, 1, S, S])
    fill = g.const("fill", np.float32(fill))
    scores = g.op("Where", [mask, scores, fill], "mask_where")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def bool_mask_before_scale(name, replaces):
    """CodeGen's order: the mask applied to QK^T before the Div by sqrt(d),
    as Where(keep, 0, finfo.min) added (`replaces` False) or as
    Where(keep, scores, -inf) (True), with a run-time boolean keep."""
    g = Graph(name)
    q, k, v = qkv_inputs(g)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    keep = g.input("keep", BOOL, [B, 1, S, S])
    if replaces:
        scores = g.op("Where", [keep, scores, g.const("fill", np.float32(-np.inf))],
                      "mask_where")
    else:
        mask = g.op("Where", [keep, g.const("zero", np.float32(0.0)),
                              g.const("fill", np.float32(FINFO_MIN))], "mask_where")
        scores = g.op("Add", [scores, mask], "mask_add")
    scores = g.op("Div", [scores, g.const("sqrt_d", np.float32(np.sqrt(D)))], "scale")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def clamped_mask(name, fill, bound):
    """XGLM's form: the scores plus Where(keep, 0, fill), then
    Max(scores, bound) (`torch.max(w, finfo.min)`), with a run-time keep."""
    g = Graph(name)
    q, k, v = qkv_inputs(g)
    scores = scaled_scores(g, q, k)
    keep = g.input("keep", BOOL, [B, 1, S, S])
    mask = g.op("Where", [keep, g.const("zero", np.float32(0.0)),
                          g.const("fill", np.float32(fill))], "mask_where")
    scores = g.op("Add", [scores, mask], "mask_add")
    scores = g.op("Max", [scores, g.const("bound", np.float32(bound))], "clamp")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def causal_trilu_where():
    """GPT-2 eager: bias = tril(ones(S,S)) as bool; Where(bias, scores, min)."""
    g = Graph("causal_trilu_where")
    q, k, v = qkv_inputs(g)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    scores = g.op("Div", [scores, g.const("sqrt_d", np.float32(4.0))],
                  "scale")
    ones = g.op("ConstantOfShape", [g.const("sq", np.array([S, S], np.int64))],
                "ones", value=helper.make_tensor("one", F32, [1], [1.0]))
    tril = g.op("Trilu", [ones], "tril", upper=0)
    keep = g.op("Cast", [tril], "tril_bool", to=BOOL)
    fmin = g.const("fmin", np.float32(FINFO_MIN))
    scores = g.op("Where", [keep, scores, fmin], "causal_where")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def causal_triu_add():
    """Llama eager: full((S,S), min).triu(1) added to the scores."""
    g = Graph("causal_triu_add")
    q, k, v = qkv_inputs(g)
    scores = scaled_scores(g, q, k)
    full = g.op("ConstantOfShape", [g.const("sq", np.array([S, S], np.int64))],
                "full_min",
                value=helper.make_tensor("min", F32, [1], [FINFO_MIN]))
    triu = g.op("Trilu", [full, g.const("diag", np.array(1, np.int64))],
                "triu", upper=1)
    axes = g.const("axes01", np.array([0, 1], np.int64))
    mask = g.op("Unsqueeze", [triu, axes], "causal_unsqueeze")
    scores = g.op("Add", [scores, mask], "causal_add")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def causal_range_less():
    """Range/Less/Where from the static sequence length, added."""
    g = Graph("causal_range_less")
    q, k, v = qkv_inputs(g)
    scores = scaled_scores(g, q, k)
    row, col = static_positions(g, q)
    future = g.op("Less", [row, col], "future")  # i < j
    mask = g.op("Where", [future, g.const("neg_inf", np.float32(-np.inf)),
                          g.const("zero_f", np.float32(0.0))], "causal_mask")
    scores = g.op("Add", [scores, mask], "causal_add")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def causal_index_compare_large(name, seq=2560, batch=1, compare="LessOrEqual"):
    """Hugging Face's causal mask: LessOrEqual(key positions [1,S], query
    positions [S,1]), expanded over the batch, Where(0, finfo.min), added to
    the scores. At 2560 positions the [S, S] comparison is too large to fold
    into a constant; at short lengths the importer folds it, copied over the
    batch, into a [B, 1, S, S] constant."""
    g = Graph(name)
    q, k, v = (g.input(n, F32, [batch, 1, seq, 16]) for n in ("q", "k", "v"))
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    scores = g.op("Mul", [scores, g.const("scale_factor", np.float32(0.25))],
                  "scale")
    row, col = static_positions(g, q)
    visible = g.op(compare, [col, row], "visible")  # j <= i (or j < i)
    visible = g.op("Expand", [visible, g.const(
        "mask_shape", np.array([batch, 1, seq, seq], np.int64))], "expand")
    mask = g.op("Where", [visible, g.const("zero_f", np.float32(0.0)),
                          g.const("fmin", np.float32(FINFO_MIN))],
                "causal_mask")
    scores = g.op("Add", [scores, mask], "causal_add")
    softmax_pv(g, scores, v, [batch, 1, seq, 16])
    g.save()


def causal_trilu_large(name, seq=2560, form="triu_add"):
    """A causal mask made by Trilu at a length whose [S, S] matrix is too
    large to fold into a constant: full((S, S), -inf).triu(1) added to the
    scores (`triu_add`, research code's form, the [S, S] mask broadcast
    over batch and heads), ones((S, S), bool).tril() selecting the scores
    (`tril_where`, GPT-2's form), or the scores masked_fill'ed with -inf
    where ones((S, S), bool).triu(1) is true (`triu_masked_fill`)."""
    g = Graph(name)
    q, k, v = (g.input(n, F32, [1, 1, seq, 16]) for n in ("q", "k", "v"))
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    scores = g.op("Mul", [scores, g.const("scale_factor", np.float32(0.25))],
                  "scale")
    size = g.const("square", np.array([seq, seq], np.int64))
    if form == "triu_add":
        full = g.op("ConstantOfShape", [size], "full_inf",
                    value=helper.make_tensor("inf", F32, [1], [-np.inf]))
        mask = g.op("Trilu", [full, g.const("diag", np.array(1, np.int64))],
                    "triu", upper=1)
        scores = g.op("Add", [scores, mask], "causal_add")
    elif form == "tril_where":
        ones = g.op("ConstantOfShape", [size], "ones",
                    value=helper.make_tensor("one", BOOL, [1], [True]))
        keep = g.op("Trilu", [ones], "tril", upper=0)
        scores = g.op("Where", [keep, scores, g.const("fmin", np.float32(FINFO_MIN))],
                      "causal_where")
    elif form == "expand_tril_where":
        # Kiln's own ONNX writer: torch.ones((S, S), dtype=bool) as Expand of
        # a one-element constant, then tril, selecting the scores.
        ones = g.op("Expand", [g.const("one_bool", np.array([True])), size], "ones")
        keep = g.op("Trilu", [ones, g.const("diag", np.array(0, np.int64))], "tril", upper=0)
        scores = g.op("Where", [keep, scores, g.const("fmin", np.float32(FINFO_MIN))],
                      "causal_where")
    elif form == "float_tril_eq0":
        # scores.masked_fill(ones((S, S)).tril() == 0, -inf): a float tril
        # compared with zero (research code's einsum attention).
        ones = g.op("ConstantOfShape", [size], "ones",
                    value=helper.make_tensor("one", F32, [1], [1.0]))
        tril = g.op("Trilu", [ones], "tril", upper=0)
        hidden = g.op("Equal", [tril, g.const("zero", np.float32(0.0))], "tril_eq0")
        scores = g.op("Where", [hidden, g.const("ninf", np.float32(-np.inf)), scores],
                      "causal_fill")
    else:  # triu_masked_fill: scores.masked_fill(ones.triu(1), -inf)
        ones = g.op("ConstantOfShape", [size], "ones",
                    value=helper.make_tensor("one", BOOL, [1], [True]))
        future = g.op("Trilu", [ones, g.const("diag", np.array(1, np.int64))],
                      "triu", upper=1)
        scores = g.op("Where", [future, g.const("ninf", np.float32(-np.inf)), scores],
                      "causal_fill")
    softmax_pv(g, scores, v, [1, 1, seq, 16])
    g.save()


def local_band_large(name="local_band_abs_large", seq=2560, half=128, form="abs"):
    """An encoder's local band `|i - j| <= w` from index vectors at a length
    too large to fold (research code's `(rows[:, None] - rows[None, :]).abs()
    <= w`, then where(near, scores, -inf)); `window`: a causal window
    `(i - j >= 0) & (i - j < w)`; `holes`: `|i - j| != 1`, no band."""
    g = Graph(name)
    q, k, v = (g.input(n, F32, [1, 1, seq, 16]) for n in ("q", "k", "v"))
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    scores = g.op("Mul", [scores, g.const("scale_factor", np.float32(0.25))], "scale")
    rows = g.op("Range", [g.const("r_start", np.array(0, np.int64)),
                          g.const("r_limit", np.array(seq, np.int64)),
                          g.const("r_delta", np.array(1, np.int64))], "rows")
    col = g.op("Unsqueeze", [rows, g.const("ax1", np.array([1], np.int64))], "rows_col")
    row = g.op("Unsqueeze", [rows, g.const("ax0", np.array([0], np.int64))], "rows_row")
    distance = g.op("Sub", [col, row], "distance")
    if form == "window":
        seen = g.op("GreaterOrEqual", [distance, g.const("zero_i", np.array(0, np.int64))],
                    "seen")
        recent = g.op("Less", [distance, g.const("half", np.array(half, np.int64))], "recent")
        near = g.op("And", [seen, recent], "near")
    elif form == "holes":
        distance = g.op("Abs", [distance], "distance_abs")
        one = g.op("Equal", [distance, g.const("one_i", np.array(1, np.int64))], "next_to")
        near = g.op("Not", [one], "near")
    else:
        distance = g.op("Abs", [distance], "distance_abs")
        near = g.op("LessOrEqual", [distance, g.const("half", np.array(half, np.int64))],
                    "near")
    scores = g.op("Where", [near, scores, g.const("ninf", np.float32(-np.inf))], "band_where")
    softmax_pv(g, scores, v, [1, 1, seq, 16])
    g.save()


def causal_init(name, q_len, kv_len, top_left=False, window=None):
    """A causal (or band) mask given as an initializer [1,1,Sq,Sk] of
    0 / -inf."""
    g = Graph(name)
    q, k, v = qkv_inputs(g, q_len=q_len, kv_len=kv_len)
    scores = scaled_scores(g, q, k)
    mask = g.const("causal_mask",
                   causal_initializer(q_len, kv_len, top_left=top_left,
                                      window=window))
    scores = g.op("Add", [scores, mask], "causal_add")
    softmax_pv(g, scores, v, [B, H, q_len, D])
    g.save()


def causal_init_batched(name, differs=False, fill=FINFO_MIN):
    """A causal mask given as a [2,1,S,S] initializer, one copy per batch
    row; with `differs`, the second row also hides its last key (padding):
    then no band holds for the whole batch and the mask stays an operand."""
    g = Graph(name)
    q, k, v = qkv_inputs(g, batch=2)
    scores = scaled_scores(g, q, k)
    mask = np.concatenate([causal_initializer(S, S, fill=fill)] * 2)
    if differs:
        mask[1, 0, 1:, S - 1] = fill
    scores = g.op("Add", [scores, g.const("causal_mask", mask)], "causal_add")
    softmax_pv(g, scores, v, [2, H, S, D])
    g.save()


def sliding_window(name, built):
    """Mistral: each query sees its 3 most recent keys (itself included),
    built by Range/Sub/Less/Or/Where or given as an initializer."""
    g = Graph(name)
    q, k, v = qkv_inputs(g)
    scores = scaled_scores(g, q, k)
    if built:
        row, col = static_positions(g, q)
        distance = g.op("Sub", [row, col], "distance")  # i - j
        future = g.op("Less", [distance, g.const("zero_i", np.array(
            0, np.int64))], "future")
        too_old = g.op("GreaterOrEqual", [distance, g.const(
            "window", np.array(3, np.int64))], "too_old")
        hidden = g.op("Or", [future, too_old], "hidden")
        mask = g.op("Where", [hidden, g.const("fmin", np.float32(FINFO_MIN)),
                              g.const("zero_f", np.float32(0.0))],
                    "window_mask")
    else:
        mask = g.const("window_mask", causal_initializer(S, S, window=3))
    scores = g.op("Add", [scores, mask], "window_add")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def gpt_neo_local(name, window=3):
    """Hugging Face's GPT-Neo (eager): the scores without a scale,
    Where(bias, scores, finfo.min) with the layer's band (causal, or causal
    within `window` keys for a local layer), then the model's 4-D causal
    mask added on top (0 or bfloat16's finfo.min, widened to f32): keys past
    the diagonal score min + min = -inf, keys outside the window min."""
    g = Graph(name)
    q, k, v = qkv_inputs(g)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "scores")
    band = causal_initializer(S, S, window=window) == 0
    keep = g.const("neo_bias", band[0, 0][None, None])
    scores = g.op("Where", [keep, scores, g.const(
        "mask_value", np.float32(FINFO_MIN))], "neo/Where")
    bf16_min = float(np.float32(-3.3895313892515355e38))
    causal = g.const("causal_4d", causal_initializer(S, S, fill=bf16_min))
    scores = g.op("Add", [scores, causal], "neo/Add")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


FLOAT8E4M3FN = 17  # ONNX 1.14's enum value; the installed onnx may predate it


def fp8_qdq(name, per_head=False, quantize_probs=False, causal=True,
            f16=False):
    """Attention quantised as FP8 exporters write it (opset 21): Q, K and V
    each through QuantizeLinear to float8 e4m3fn and DequantizeLinear back
    before the matmuls, with per-tensor scales (or per head along axis 1 of
    [B, H, S, D]); `quantize_probs` also quantises the probabilities before
    P·V (TensorRT's FP8 attention); `f16`: f16 inputs and scales."""
    g = Graph(name, opset=21)
    elem = TensorProto.FLOAT16 if f16 else F32
    dtype = np.float16 if f16 else np.float32
    q, k, v = qkv_inputs(g, elem=elem)
    zp = onnx.TensorProto()
    zp.name, zp.data_type = "zp", FLOAT8E4M3FN
    zp.int32_data.append(0)
    g.inits.append(zp)
    dequantized = []
    for index, x in enumerate([q, k, v]):
        if per_head:
            scale = g.const("s%d" % index, np.array(
                [0.02 + 0.01 * h + 0.005 * index for h in range(H)], dtype))
        else:
            scale = g.const("s%d" % index, dtype(0.03 + 0.01 * index))
        q8 = g.op("QuantizeLinear", [x, scale, "zp"], "%s/Quantize" % x,
                  axis=1)
        dequantized.append(g.op("DequantizeLinear", [q8, scale, "zp"],
                                "%s/Dequantize" % x, axis=1))
    scores = g.op("MatMul", [dequantized[0], k_transposed(g, dequantized[1])],
                  "qk")
    scores = g.op("Mul", [scores, g.const("scale_factor", dtype(0.25))],
                  "scale")
    if causal:
        scores = g.op("Add", [scores, g.const("causal", causal_initializer(
            S, S).astype(dtype))], "causal_add")
    probs = g.op("Softmax", [scores], "softmax", axis=-1)
    if quantize_probs:
        p_scale = g.const("p_scale", dtype(1.0 / 448.0))
        p8 = g.op("QuantizeLinear", [probs, p_scale, "zp"], "p/Quantize")
        probs = g.op("DequantizeLinear", [p8, p_scale, "zp"], "p/Dequantize")
    ctx = g.op("MatMul", [probs, dequantized[2]], "pv")
    g.output(ctx, elem, [B, H, S, D])
    g.save()


# -- Biases ------------------------------------------------------------------


def t5_bias(name, combined, zero=False):
    """T5: no scale; a relative position bias [1,H,S,S] and the padding mask.
    `combined`: HF T5 adds them first (position_bias + mask) and the scores
    once; otherwise two Adds on the scores. `zero`: the bias is a zeros
    constant (T5's cross-attention, which has no relative bias); "expand":
    a scalar 0 expanded to [1, H, S, S]."""
    g = Graph(name)
    q, k, v = qkv_inputs(g)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    if zero == "expand":
        # torch.zeros([1, H, S, S]) as torch's exporter writes it.
        bias = g.op("Expand", [g.const("zero", np.array(0.0, np.float32)),
                               g.const("bias_shape", np.array([1, H, S, S], np.int64))],
                    "position_bias")
    elif zero:
        bias = g.const("position_bias", np.zeros([1, H, S, S], np.float32))
    else:
        bias = g.weight("position_bias", [1, H, S, S])
    mask = hf_padding_mask(g)
    if combined:
        both = g.op("Add", [bias, mask], "position_bias_add")
        scores = g.op("Add", [scores, both], "scores_add")
    else:
        scores = g.op("Add", [scores, bias], "bias_add")
        scores = g.op("Add", [scores, mask], "mask_add")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def t5_encoder_two_layers(name="t5_encoder_hf"):
    """T5's encoder as transformers writes it and Dynamo exports it: the
    relative position buckets from ranges (bidirectional, log-spaced far
    away: Log, Div, Cast to int64, Min, Where), the bias gathered from the
    embedding table (a graph input, declared finite), permuted to
    [1, H, S, S]; the padding mask Where(keep, 0, finfo.min) over
    [B, 1, S, S]; position_bias + mask computed once and added to the
    scores of both layers (no scale); softmax in f32 cast back."""
    g = Graph(name, opset=18)
    buckets, max_distance, batch = 32, 128, 2
    table = g.input("relative_attention_bias.weight", F32, [buckets, H])
    attention_mask = g.input("attention_mask", I64, [batch, S])
    positions = g.op("Range", [g.const("r0", np.array(0, np.int64)),
                               g.const("rS", np.array(S, np.int64)),
                               g.const("r1", np.array(1, np.int64))], "arange")
    context = g.op("Unsqueeze", [positions, g.const("ax1", np.array([1], np.int64))],
                   "context_position")
    memory = g.op("Unsqueeze", [positions, g.const("ax0", np.array([0], np.int64))],
                  "memory_position")
    relative = g.op("Sub", [memory, context], "relative_position")
    half = buckets // 2
    positive = g.op("Greater", [relative, g.const("zero_i", np.array(0, np.int64))], "gt")
    positive = g.op("Cast", [positive], "gt_long", to=I64)
    offset = g.op("Mul", [positive, g.const("half_i", np.array(half, np.int64))], "mul_half")
    distance = g.op("Abs", [relative], "abs")
    max_exact = half // 2
    small = g.op("Less", [distance, g.const("max_exact", np.array(max_exact, np.int64))],
                 "is_small")
    far = g.op("Cast", [distance], "distance_f", to=F32)
    far = g.op("Div", [far, g.const("max_exact_f", np.array(max_exact, np.float32))], "div")
    far = g.op("Log", [far], "log")
    far = g.op("Div", [far, g.const("log_ratio", np.array(np.log(max_distance / max_exact),
                                                          np.float32))], "div_1")
    far = g.op("Mul", [far, g.const("span", np.array(half - max_exact, np.float32))], "mul_1")
    far = g.op("Cast", [far], "far_long", to=I64)
    far = g.op("Add", [far, g.const("max_exact_i", np.array(max_exact, np.int64))], "add_far")
    far = g.op("Min", [far, g.const("last_bucket", np.array(half - 1, np.int64))], "minimum")
    chosen = g.op("Where", [small, distance, far], "where")
    bucket = g.op("Add", [offset, chosen], "relative_buckets")
    values = g.op("Gather", [table, bucket], "embedding", axis=0)  # [S, S, H]
    bias = g.op("Transpose", [values], "permute", perm=[2, 0, 1])
    bias = g.op("Unsqueeze", [bias, g.const("ax0b", np.array([0], np.int64))],
                "position_bias")
    keep = g.op("Cast", [attention_mask], "keep_bool", to=BOOL)
    keep = g.op("Unsqueeze", [keep, g.const("ax12", np.array([1, 2], np.int64))], "keep_4d")
    keep = g.op("Expand", [keep, g.const("mask_shape", np.array([batch, 1, S, S], np.int64))],
                "keep_expand")
    mask = g.op("Where", [keep, g.const("zero_f", np.array(0.0, np.float32)),
                          g.const("min_f", np.array(FINFO_MIN, np.float32))], "causal_mask")
    both = g.op("Add", [bias, mask], "position_bias_masked")
    x = g.input("x", F32, [batch, H, S, D])
    for layer in range(2):
        q = g.op("Mul", [x, g.weight(f"wq{layer}", [1, H, 1, D])], f"q{layer}")
        k = g.op("Mul", [x, g.weight(f"wk{layer}", [1, H, 1, D])], f"k{layer}")
        v = g.op("Mul", [x, g.weight(f"wv{layer}", [1, H, 1, D])], f"v{layer}")
        k_t = g.op("Transpose", [k], f"k_t{layer}", perm=[0, 1, 3, 2])
        scores = g.op("MatMul", [q, k_t], f"scores{layer}")
        scores = g.op("Add", [scores, both], f"scores_add{layer}")
        probs = g.op("Softmax", [scores], f"softmax{layer}", axis=-1)
        x = g.op("MatMul", [probs, v], f"pv{layer}")
    g.output(x, F32, [batch, H, S, D])
    g.save(value_info=True)


def t5_bias_from_input():
    """T5's self-attention as torch's exporter writes it under Dynamo: the
    relative position bias gathered from the embedding table, which the
    graph takes as an input (Dynamo lifts parameters into inputs), over
    buckets of j - i computed from the sequence length, plus the padding
    mask, a boolean through Where(keep, 0, finfo.min) added after the bias.
    A table from an input may hold -inf, so the site fuses only
    where the input is declared finite (--finite-inputs)."""
    g = Graph("t5_bias_from_input", opset=18)
    q, k, v = qkv_inputs(g)
    buckets = 8
    table = g.input("relative_attention_bias.weight", F32, [buckets, H])
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    length = g.op("Shape", [q], "q_len", start=2, end=3)
    length = g.op("Squeeze", [length], "q_len_scalar")
    zero = g.const("range_start", np.array(0, np.int64))
    one = g.const("range_step", np.array(1, np.int64))
    positions = g.op("Range", [zero, length, one], "positions")
    rows = g.op("Unsqueeze", [positions, g.const("row_axis", np.array([1], np.int64))],
                "context_position")
    cols = g.op("Unsqueeze", [positions, g.const("col_axis", np.array([0], np.int64))],
                "memory_position")
    relative = g.op("Sub", [cols, rows], "relative_position")
    shifted = g.op("Add", [relative, g.const("half", np.array(buckets // 2, np.int64))],
                   "relative_shift")
    bucket = g.op("Clip", [shifted, g.const("lo", np.array(0, np.int64)),
                           g.const("hi", np.array(buckets - 1, np.int64))], "bucket")
    values = g.op("Gather", [table, bucket], "bias_lookup", axis=0)
    bias = g.op("Transpose", [values], "bias_heads", perm=[2, 0, 1])
    bias = g.op("Unsqueeze", [bias, g.const("bias_axis", np.array([0], np.int64))],
                "position_bias")
    scores = g.op("Add", [scores, bias], "bias_add")
    keep = g.input("attention_mask", BOOL, [B, 1, 1, S])
    mask = g.op("Where", [keep, g.const("keep_zero", np.array(0.0, np.float32)),
                          g.const("mask_min", np.array(FINFO_MIN, np.float32))],
                "mask_where")
    scores = g.op("Add", [scores, mask], "mask_add")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def t5_bias_float_mask_sum():
    """position_bias + (1 - m) * min with m = sigmoid(x) a float: (1 - m) is
    not an integer, so the fusion cannot prove the sum adds only zeros or
    absorbing fills, and it stays one additive mask (not split into bias and
    mask)."""
    g = Graph("t5_bias_float_mask_sum")
    q, k, v = qkv_inputs(g)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    bias = g.weight("position_bias", [1, H, S, S])
    keep = g.op("Sigmoid", [g.input("x", F32, [B, 1, 1, S])], "keep")
    m = g.op("Sub", [g.const("one", np.array(1.0, np.float32)), keep], "keep/Sub")
    m = g.op("Mul", [m, g.const("fmin", np.array(FINFO_MIN, np.float32))], "keep/Mul")
    both = g.op("Add", [bias, m], "position_bias_add")
    scores = g.op("Add", [scores, both], "scores_add")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def alibi():
    """BLOOM: scores * inv_norm + alibi[1,H,1,S] (slope_h * j), then a
    constant causal bool mask through Where(.., min)."""
    g = Graph("alibi_causal")
    heads = 4
    q, k, v = qkv_inputs(g, heads=heads)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    scores = g.op("Mul", [scores, g.const("inv_norm", np.float32(0.25))],
                  "scale")
    slopes = 2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)
    table = (slopes[:, None] * np.arange(S)[None, :]).astype(np.float32)
    scores = g.op("Add", [scores, g.const("alibi", table[None, :, None, :])],
                  "alibi_add")
    keep = np.tril(np.ones((S, S), bool))[None, None]
    scores = g.op("Where", [g.const("causal_keep", keep), scores,
                            g.const("fmin", np.float32(FINFO_MIN))],
                  "causal_where")
    softmax_pv(g, scores, v, [B, heads, S, D])
    g.save()


def alibi_from_padding(name="alibi_bloom_padding", elem=F32):
    """BLOOM as transformers writes it (build_alibi_tensor, baddbmm): the
    ALiBi bias slope_h · position_j with positions counted over the padding
    mask ((cumsum(m) - 1) · m, an integer tensor cast to float), reshaped to
    [B·H, 1, S] and added by baddbmm (beta 1, alpha 1/sqrt(d)) to Q·Kᵀ over
    merged heads; then the scores viewed as [B, H, S, S] plus an additive
    causal-and-padding mask of finfo.min, computed from the mask too."""
    g = Graph(name, opset=18)
    heads, batch = 4, 2
    np_elem = np.float32
    mask = g.input("attention_mask", I64, [batch, S])
    q = g.input("q", elem, [batch * heads, S, D])
    k = g.input("k", elem, [batch * heads, S, D])
    v = g.input("v", elem, [batch * heads, S, D])
    # arange_tensor = ((mask.cumsum(-1) - 1) * mask)[:, None, :]
    counted = g.op("CumSum", [mask, g.const("cumsum_axis", np.array(1, np.int64))], "cumsum")
    shifted = g.op("Sub", [counted, g.const("one_i64", np.array(1, np.int64))], "sub")
    positions = g.op("Mul", [shifted, mask], "mul")
    positions = g.op("Unsqueeze", [positions, g.const("axis1", np.array([1], np.int64))],
                     "unsqueeze")
    positions = g.op("Cast", [positions], "positions_f", to=F32)
    slopes = 2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)
    alibi = g.op("Mul", [g.const("slopes", slopes.astype(np_elem)[:, None]), positions],
                 "alibi_mul")  # [B, H, S]
    alibi = g.op("Reshape", [alibi, g.const("alibi_shape",
                                            np.array([batch * heads, 1, S], np.int64))],
                 "alibi")
    # baddbmm(alibi, q, kᵀ, beta=1, alpha=1/sqrt(d))
    k_t = g.op("Transpose", [k], "k_t", perm=[0, 2, 1])
    product = g.op("MatMul", [q, k_t], "bmm")
    product = g.op("Mul", [product, g.const("alpha", np.float32(0.25))], "alpha_mul")
    scores = g.op("Add", [alibi, product], "baddbmm")
    scores = g.op("Reshape", [scores, g.const("scores_shape",
                                              np.array([batch, heads, S, S], np.int64))],
                  "view")
    # The 4-D mask: 0 where key j <= i and m[b, j] = 1, else finfo.min.
    causal = g.const("causal_keep", np.tril(np.ones((S, S), bool))[None, None])
    padding = g.op("Cast", [mask], "mask_bool", to=BOOL)
    padding = g.op("Unsqueeze", [padding, g.const("axes12", np.array([1, 2], np.int64))],
                   "mask_4d")
    keep = g.op("And", [causal, padding], "keep")
    additive = g.op("Where", [keep, g.const("zero_f", np.array(0.0, np.float32)),
                              g.const("min_f", np.array(FINFO_MIN, np.float32))],
                    "causal_mask")
    scores = g.op("Add", [scores, additive], "masked")
    probs = g.op("Softmax", [scores], "softmax", axis=-1)
    probs = g.op("Reshape", [probs, g.const("probs_shape",
                                            np.array([batch * heads, S, S], np.int64))],
                 "probs_view")
    ctx = g.op("MatMul", [probs, v], "pv")
    g.output(ctx, elem, [batch * heads, S, D])
    g.save(value_info=True)


def softcap():
    """Gemma 2: scores * scaling / 50 -> tanh -> * 50, + causal mask."""
    g = Graph("softcap_gemma2")
    q, k, v = qkv_inputs(g)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    scores = g.op("Mul", [scores, g.const("scaling", np.float32(0.25))],
                  "scale")
    cap = g.const("softcap", np.float32(50.0))
    scores = g.op("Div", [scores, cap], "softcap_div")
    scores = g.op("Tanh", [scores], "softcap_tanh")
    scores = g.op("Mul", [scores, cap], "softcap_mul")
    mask = g.const("causal_mask", causal_initializer(S, S, fill=FINFO_MIN))
    scores = g.op("Add", [scores, mask], "causal_add")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def softcap_half(name, cap_div, cap_mul):
    """Gemma 2's softcap in f16, as an f16 export writes it: x / c is
    imported as x · (1/c) with 1/c rounded to f16, so the two constants
    agree only to f16's precision."""
    g = Graph(name)
    q, k, v = qkv_inputs(g, elem=F16)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    scores = g.op("Mul", [scores, g.const("scaling", np.float16(0.25))],
                  "scale")
    scores = g.op("Div", [scores, g.const("cap_div", np.float16(cap_div))],
                  "softcap_div")
    scores = g.op("Tanh", [scores], "softcap_tanh")
    scores = g.op("Mul", [scores, g.const("cap_mul", np.float16(cap_mul))],
                  "softcap_mul")
    softmax_pv(g, scores, v, [B, H, S, D], elem=F16)
    g.save()


def bmm_view_mask_view(name="bmm_view_mask_view"):
    """OPT's and BART's older eager attention: heads folded into the batch
    ([B·H, S, D]), bmm scores viewed as [B, H, S, S] to add the padding mask,
    viewed back to [B·H, S, S] for the softmax and the bmm with V."""
    g = Graph(name, opset=17)
    q, k, v = qkv_inputs(g)
    mask = g.input("mask", F32, [B, 1, 1, S])
    folded = g.const("folded", np.array([B * H, S, D], np.int64))
    q3 = g.op("Reshape", [q, folded], "q_fold")
    k3 = g.op("Reshape", [k, folded], "k_fold")
    v3 = g.op("Reshape", [v, folded], "v_fold")
    kt = g.op("Transpose", [k3], "k_t", perm=[0, 2, 1])
    scores = g.op("MatMul", [q3, kt], "bmm_scores")
    scores = g.op("Mul", [scores, g.const("scale_factor", np.float32(0.25))], "scale")
    split = g.const("split", np.array([B, H, S, S], np.int64))
    scores4 = g.op("Reshape", [scores, split], "view_split")
    scores4 = g.op("Add", [scores4, mask], "mask_add")
    merged = g.const("merged", np.array([B * H, S, S], np.int64))
    scores3 = g.op("Reshape", [scores4, merged], "view_merge")
    probs = g.op("Softmax", [scores3], "softmax", axis=-1)
    ctx = g.op("MatMul", [probs, v3], "bmm_pv")
    out = g.op("Reshape", [ctx, g.const("unfold", np.array([B, H, S, D], np.int64))],
               "ctx_unfold")
    g.output(out, F32, [B, H, S, D])
    g.save()


def swin_window(name="swin_window_mask", shifted=True, scaled_at_rank5=False):
    """Swin's window attention (the original code, timm's and transformers'):
    windows folded into the batch ([B·nW, H, N, D]), a relative-position
    bias [1, H, N, N] added, then the scores viewed as [B, nW, H, N, N] to
    add the shifted windows' mask [1, nW, 1, N, N] (0 or -100), and viewed
    back to [B·nW, H, N, N] for the softmax; with `scaled_at_rank5`, the
    scores also halved before they are viewed back."""
    g = Graph(name, opset=17)
    batch, windows, heads, n, dim = 2, 4, 2, 9, 16
    q, k, v = qkv_inputs(g, heads=heads, q_len=n, dim=dim, batch=batch * windows)
    scaled = g.op("Mul", [q, g.const("scale_factor", np.float32(0.25))], "q_scale")
    scores = g.op("MatMul", [scaled, k_transposed(g, k)], "qk")
    bias = g.weight("relative_position_bias", [1, heads, n, n])
    scores = g.op("Add", [scores, bias], "bias_add")
    if shifted:
        rng = np.random.default_rng(3)
        mask = np.where(rng.random((windows, n, n)) < 0.3, -100.0, 0.0)
        np.fill_diagonal(mask[0], 0.0)
        mask = mask.astype(np.float32).reshape(1, windows, 1, n, n)
        split = g.const("split", np.array([batch, windows, heads, n, n], np.int64))
        scores5 = g.op("Reshape", [scores, split], "view_windows")
        scores5 = g.op("Add", [scores5, g.const("window_mask", mask)], "mask_add")
        if scaled_at_rank5:
            # A product inside the detour (its shift operand is no term).
            scores5 = g.op("Mul", [scores5, g.const("half", np.float32(0.5))], "rank5_scale")
        merged = g.const("merged", np.array([-1, heads, n, n], np.int64))
        scores = g.op("Reshape", [scores5, merged], "view_back")
    softmax_pv(g, scores, v, [batch * windows, heads, n, dim])
    g.save()


def longt5_local(name="longt5_local_blocks"):
    """LongT5's local attention as transformers writes it: Q split into
    blocks [B, n, blk, H, D], K and V the three neighbouring blocks
    concatenated [B, n, 3·blk, H, D], scores by Einsum
    `...qhd,...khd->...hqk` of rank 5, a relative-position bias gathered
    from a table [1, 1, H, blk, 3·blk] plus the local mask
    `where(mask > 0, 0, -1e10)` [B, n, 1, blk, 3·blk]; no scale."""
    g = Graph(name, opset=17)
    batch, blocks, blk, heads, dim = 2, 3, 4, 2, 8
    q = g.input("q", F32, [batch, blocks, blk, heads, dim])
    k = g.input("k", F32, [batch, blocks, 3 * blk, heads, dim])
    v = g.input("v", F32, [batch, blocks, 3 * blk, heads, dim])
    keep = g.input("local_mask", F32, [batch, blocks, blk, 3 * blk])
    table = g.input("relative_attention_bias", F32, [7, heads])
    rel = np.arange(3 * blk)[None, :] - (np.arange(blk)[:, None] + blk)
    buckets = np.clip(rel, -3, 3) + 3
    gathered = g.op("Gather", [table, g.const("buckets", buckets.astype(np.int64))],
                    "bias_gather", axis=0)
    bias = g.op("Transpose", [gathered], "bias_permute", perm=[2, 0, 1])
    bias = g.op("Unsqueeze", [bias, g.const("bias_axes", np.array([0, 1], np.int64))],
                "bias_unsqueeze")
    mask = g.op("Unsqueeze", [keep, g.const("mask_axes", np.array([1], np.int64))],
                "mask_unsqueeze")
    mask = g.op("Greater", [mask, g.const("zero", np.float32(0.0))], "mask_greater")
    mask = g.op("Where", [mask, g.const("visible", np.float32(0.0)),
                          g.const("hidden", np.float32(-1e10))], "mask_where")
    mask = g.op("Transpose", [mask], "mask_transpose", perm=[0, 2, 1, 3, 4])
    position_bias = g.op("Add", [bias, mask], "position_bias")
    scores = g.op("Einsum", [q, k], "scores", equation="abqhd,abkhd->abhqk")
    scores = g.op("Add", [scores, position_bias], "scores_add")
    probs = g.op("Softmax", [scores], "softmax", axis=-1)
    ctx = g.op("Einsum", [probs, v], "pv", equation="abhqk,abkhd->abqhd")
    g.output(ctx, F32, [batch, blocks, blk, heads, dim])
    g.save()


def relative_shift(name="conformer_rel_shift", post_guard=False, fill=-np.inf,
                   relative=True):
    """Transformer-XL's and Conformer's relative-position attention (ESPnet's
    RelPositionMultiHeadedAttention): content scores AC = (q + u)·Kᵀ and
    position scores BD = (q + v)·Pᵀ over 2T - 1 relative positions, BD
    shifted (a zero column concatenated, viewed [2T, T], the first row
    dropped, viewed back, the first T columns kept), then (AC + BD)/sqrt(d),
    the padding mask filled with -inf, the softmax and P·V; with
    `post_guard`, the guard after the softmax that WeNet and ESPnet write
    (`softmax(...).masked_fill(mask, 0)`), over a fill of -inf or
    (ESPnet) finfo.min; without `relative`, the content scores alone."""
    g = Graph(name, opset=17)
    batch, heads, t, dim = 2, 2, 6, 16
    q, k, v = qkv_inputs(g, heads=heads, q_len=t, dim=dim, batch=batch)
    pos = g.input("pos", F32, [1, heads, 2 * t - 1, dim])
    u = g.input("pos_bias_u", F32, [1, heads, 1, dim])
    w = g.input("pos_bias_v", F32, [1, heads, 1, dim])
    keep = g.input("mask", BOOL, [batch, 1, 1, t])
    ac = g.op("MatMul", [g.op("Add", [q, u], "q_u"), k_transposed(g, k)], "matrix_ac")
    p_t = g.op("Transpose", [pos], "pos_t", perm=[0, 1, 3, 2])
    bd = g.op("MatMul", [g.op("Add", [q, w], "q_v"), p_t], "matrix_bd")
    zero = g.const("zero_pad", np.zeros([batch, heads, t, 1], np.float32))
    padded = g.op("Concat", [zero, bd], "pad_cat", axis=-1)
    padded = g.op("Reshape", [padded, g.const("shift_view_shape", np.array(
        [batch, heads, 2 * t, t], np.int64))], "shift_view")
    shifted = g.op("Slice", [padded, g.const("s_start", np.array([1], np.int64)),
                             g.const("s_end", np.array([2 * t], np.int64)),
                             g.const("s_axes", np.array([2], np.int64))], "shift_slice")
    shifted = g.op("Reshape", [shifted, g.const("shift_back_shape", np.array(
        [batch, heads, t, 2 * t - 1], np.int64))], "shift_back")
    bd = g.op("Slice", [shifted, g.const("k_start", np.array([0], np.int64)),
                        g.const("k_end", np.array([t], np.int64)),
                        g.const("k_axes", np.array([3], np.int64))], "shift_keep")
    scores = g.op("Add", [ac, bd], "ac_bd") if relative else ac
    scores = g.op("Div", [scores, g.const("sqrt_d", np.float32(np.sqrt(dim)))], "scale")
    hidden = g.op("Not", [keep], "mask_not")
    scores = g.op("Where", [hidden, g.const("fill", np.float32(fill)), scores], "mask_fill")
    probs = g.op("Softmax", [scores], "softmax", axis=-1)
    if post_guard:
        probs = g.op("Where", [hidden, g.const("zero", np.float32(0.0)), probs], "guard")
    ctx = g.op("MatMul", [probs, v], "pv")
    g.output(ctx, F32, [batch, heads, t, dim])
    g.save()


def einsum_bqhk_masked():
    """Scores laid out [B, Sq, H, Sk] by einsum with a causal mask added in
    that layout ([Sq, 1, Sk]): a term on the permuted scores, not taken."""
    g = Graph("neg_einsum_bqhk_masked", opset=17)
    q = g.input("q", F32, [B, S, H, D])
    k = g.input("k", F32, [B, S, H, D])
    v = g.input("v", F32, [B, S, H, D])
    scores = g.op("Einsum", [q, k], "scores", equation="bqhd,bkhd->bqhk")
    causal = causal_initializer(S, S)[0, 0][:, None, :]
    scores = g.op("Add", [scores, g.const("causal", causal)], "causal_add")
    probs = g.op("Softmax", [scores], "softmax", axis=-1)
    ctx = g.op("Einsum", [probs, v], "pv", equation="bqhk,bkhd->bqhd")
    g.output(ctx, F32, None)
    g.save()


def einsum_attention(name, scores_eq, values_eq, q_layout="bhsd"):
    """Research code's attention through Einsum: scores, softmax, values;
    Q (and K, V) given as [B,H,S,D] or [B,S,H,D], or (mqa) Q [B,H,S,D] with
    one K/V head written without a head axis, K and V [B,S,D]."""
    g = Graph(name, opset=17)
    if q_layout == "bshd":
        q = g.input("q", F32, [B, S, H, D])
        k = g.input("k", F32, [B, S, H, D])
        v = g.input("v", F32, [B, S, H, D])
    elif q_layout == "mqa":  # one K/V head, written without a head axis
        q = g.input("q", F32, [B, H, S, D])
        k = g.input("k", F32, [B, S, D])
        v = g.input("v", F32, [B, S, D])
    else:
        q, k, v = qkv_inputs(g)
    scores = g.op("Einsum", [q, k], "scores", equation=scores_eq)
    scores = g.op("Mul", [scores, g.const("scale_factor", np.float32(0.25))],
                  "scale")
    probs = g.op("Softmax", [scores], "softmax", axis=-1)
    ctx = g.op("Einsum", [probs, v], "pv", equation=values_eq)
    g.output(ctx, F32, None)
    g.save()


# -- GQA / MQA ---------------------------------------------------------------


def repeat_kv(name, kv_heads, heads=4):
    """Llama's repeat_kv: [B,Hkv,S,D] -> Unsqueeze(2) -> Expand
    [B,Hkv,G,S,D] -> Reshape [B,Hkv*G,S,D], for K and V."""
    g = Graph(name)
    q, k, v = qkv_inputs(g, heads=heads, kv_heads=kv_heads)
    groups = heads // kv_heads
    axes = g.const("axes_2", np.array([2], np.int64))
    expand = g.const("expand_shape",
                     np.array([B, kv_heads, groups, S, D], np.int64))
    merge = g.const("merge_shape", np.array([B, heads, S, D], np.int64))
    repeated = []
    for which, x in (("k", k), ("v", v)):
        x = g.op("Unsqueeze", [x, axes], which + "/Unsqueeze")
        x = g.op("Expand", [x, expand], which + "/Expand")
        repeated.append(g.op("Reshape", [x, merge], which + "/Reshape"))
    k, v = repeated
    scores = scaled_scores(g, q, k)
    mask = g.const("causal_mask", causal_initializer(S, S))
    scores = g.op("Add", [scores, mask], "causal_add")
    softmax_pv(g, scores, v, [B, heads, S, D])
    g.save()


def gqa_single_kv_reshaped_v(name="gqa_single_kv_reshaped_v", heads=4,
                             dim=32):
    """Gemma-3 style, one KV head: K split into heads by Reshape+Transpose,
    normalised (a weight per dim) and rotated (x·cos + rotate_half(x)·sin);
    V's head transpose written as a Reshape [B,S,D] -> [B,1,S,D]; both
    repeated by Unsqueeze/Expand/Reshape; a causal mask."""
    g = Graph(name)
    hidden = 64
    x = g.input("hidden_states", F32, [B, S, hidden])
    def proj(which, out):
        w = g.weight(which + "_proj.weight", [hidden, out])
        return g.op("MatMul", [x, w], which + "_proj/MatMul")
    q = g.op("Reshape", [proj("q", heads * dim), g.const(
        "q_split", np.array([B, S, heads, dim], np.int64))], "q/Reshape")
    q = g.op("Transpose", [q], "q/Transpose", perm=[0, 2, 1, 3])
    k = g.op("Reshape", [proj("k", dim), g.const(
        "k_split", np.array([B, S, 1, dim], np.int64))], "k/Reshape")
    k = g.op("Transpose", [k], "k/Transpose", perm=[0, 2, 1, 3])
    k = g.op("Mul", [k, g.weight("k_norm.weight", [dim])], "k_norm/Mul")
    cos = g.weight("rope_cos", [S, dim])
    sin = g.weight("rope_sin", [S, dim])
    half = dim // 2
    x1 = g.op("Slice", [k, g.const("s0", np.array([0], np.int64)),
                        g.const("s1", np.array([half], np.int64)),
                        g.const("s_axis", np.array([3], np.int64))], "rope/x1")
    x2 = g.op("Slice", [k, g.const("s2", np.array([half], np.int64)),
                        g.const("s3", np.array([dim], np.int64)),
                        g.const("s_axis2", np.array([3], np.int64))], "rope/x2")
    neg = g.op("Neg", [x2], "rope/neg")
    rotated = g.op("Concat", [neg, x1], "rope/cat", axis=3)
    k = g.op("Add", [g.op("Mul", [k, cos], "rope/cos"),
                     g.op("Mul", [rotated, sin], "rope/sin")], "rope/add")
    v = g.op("Reshape", [proj("v", dim), g.const(
        "v_split", np.array([B, 1, S, dim], np.int64))], "v/Reshape")
    axes = g.const("axes_2", np.array([2], np.int64))
    expand = g.const("expand_shape", np.array([B, 1, heads, S, dim], np.int64))
    merge = g.const("merge_shape", np.array([B, heads, S, dim], np.int64))
    repeated = []
    for which, t in (("k", k), ("v", v)):
        t = g.op("Unsqueeze", [t, axes], which + "/Unsqueeze")
        t = g.op("Expand", [t, expand], which + "/Expand")
        repeated.append(g.op("Reshape", [t, merge], which + "/Repeat"))
    k, v = repeated
    scores = g.op("MatMul", [q, g.op("Transpose", [k], "k_t",
                                     perm=[0, 1, 3, 2])], "qk")
    scores = g.op("Mul", [scores, g.const("scale_factor",
                                          np.float32(dim ** -0.5))], "scale")
    mask = g.const("causal_mask", causal_initializer(S, S, fill=FINFO_MIN))
    scores = g.op("Add", [scores, mask], "causal_add")
    softmax_pv(g, scores, v, [B, heads, S, dim])
    g.save()


def mla(name="mla_head_dims", nope=16, rope=8, value_dim=16):
    """DeepSeek's multi-head latent attention: Q and K are the concatenation
    of a no-position part and a rotary part (K's rotary part shared by the
    heads, expanded), V has its own head dim (here 24 for Q/K, 16 for V)."""
    g = Graph(name)
    q_nope = g.input("q_nope", F32, [B, H, S, nope])
    q_pe = g.input("q_pe", F32, [B, H, S, rope])
    k_nope = g.input("k_nope", F32, [B, H, S, nope])
    k_pe = g.input("k_pe", F32, [B, 1, S, rope])
    v = g.input("v", F32, [B, H, S, value_dim])
    k_pe = g.op("Expand", [k_pe, g.const("pe_expand", np.array(
        [B, H, S, rope], np.int64))], "k_pe/Expand")
    q = g.op("Concat", [q_nope, q_pe], "q/Concat", axis=-1)
    k = g.op("Concat", [k_nope, k_pe], "k/Concat", axis=-1)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    scores = g.op("Mul", [scores, g.const(
        "softmax_scale", np.float32((nope + rope) ** -0.5))], "scale")
    mask = g.const("causal_mask", causal_initializer(S, S, fill=FINFO_MIN))
    scores = g.op("Add", [scores, mask], "causal_add")
    softmax_pv(g, scores, v, [B, H, S, value_dim])
    g.save()


def mqa_broadcast():
    """MQA with one KV head left to MatMul's broadcasting (no repeat)."""
    g = Graph("mqa_broadcast")
    q, k, v = qkv_inputs(g, heads=4, kv_heads=1)
    scores = scaled_scores(g, q, k)
    softmax_pv(g, scores, v, [B, 4, S, D])
    g.save()


def mqa_broadcast_causal():
    """MQA left to MatMul's broadcasting (Falcon's form), with the scale on Q
    and a constant causal mask added to the scores."""
    g = Graph("mqa_broadcast_causal")
    q, k, v = qkv_inputs(g, heads=4, kv_heads=1)
    q = g.op("Mul", [q, g.const("q_scale", np.float32(0.25))], "q_scaled")
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    scores = g.op("Add", [scores, g.const("causal", causal_initializer(S, S))],
                  "mask")
    softmax_pv(g, scores, v, [B, 4, S, D])
    g.save()


def mqa_broadcast_v_only():
    """Look-alike: K has every head, only V is broadcast. Not the MQA form
    (the scores are not a broadcast product): left unfused."""
    g = Graph("mqa_broadcast_v_only")
    q = g.input("q", F32, [B, 4, S, D])
    k = g.input("k", F32, [B, 4, S, D])
    v = g.input("v", F32, [B, 1, S, D])
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    softmax_pv(g, scores, v, [B, 4, S, D])
    g.save()


# -- Precision ---------------------------------------------------------------


def f16_upcast():
    """An f16 graph whose softmax runs in f32: Cast(f32) .. Cast(f16)."""
    g = Graph("f16_softmax_upcast")
    q, k, v = qkv_inputs(g, elem=F16)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    scores = g.op("Mul", [scores, g.const("scale_factor", np.float16(0.25))],
                  "scale")
    scores = g.op("Cast", [scores], "upcast", to=F32)
    probs = g.op("Softmax", [scores], "softmax", axis=-1)
    probs = g.op("Cast", [probs], "downcast", to=F16)
    ctx = g.op("MatMul", [probs, v], "pv")
    g.output(ctx, F16, [B, H, S, D])
    g.save()


def f32_query_f16_kv():
    """CodeGen's precision: Q computed in f32 (its rotary embedding), K
    rounded to f16 and widened for the f32 product, V left in f16, the
    probabilities cast to f16 for P.V. The site runs in f32 (K and V
    widened, exactly); rounding Q would change the graph."""
    g = Graph("f32_query_f16_kv")
    q = g.input("q", F32, [B, H, S, D])
    k = g.input("k", F16, [B, H, S, D])
    v = g.input("v", F16, [B, H, S, D])
    k = g.op("Cast", [k], "k_widen", to=F32)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    scores = g.op("Div", [scores, g.const("sqrt_d", np.float32(np.sqrt(D)))], "scale")
    probs = g.op("Softmax", [scores], "softmax", axis=-1)
    probs = g.op("Cast", [probs], "downcast", to=F16)
    ctx = g.op("MatMul", [probs, v], "pv")
    g.output(ctx, F16, [B, H, S, D])
    g.save()


# -- Opset 23 Attention ------------------------------------------------------


def attention23(name, mask=None, q_len=S, kv_len=S, three_d=False, **attrs):
    g = Graph(name, opset=23)
    heads, kv_heads = (4, 2) if three_d else (H, H)
    if three_d:
        q = g.input("q", F32, [B, q_len, heads * D])
        k = g.input("k", F32, [B, kv_len, kv_heads * D])
        v = g.input("v", F32, [B, kv_len, kv_heads * D])
        out_shape = [B, q_len, heads * D]
        attrs.update(q_num_heads=heads, kv_num_heads=kv_heads)
    else:
        q, k, v = qkv_inputs(g, q_len=q_len, kv_len=kv_len)
        out_shape = [B, H, q_len, D]
    inputs = [q, k, v]
    if mask == "bool":
        inputs.append(g.input("attn_mask", BOOL, [B, 1, q_len, kv_len]))
    elif mask == "float":
        inputs.append(g.input("attn_mask", F32, [B, 1, q_len, kv_len]))
    y = g.op("Attention", inputs, "attention", **attrs)
    g.output(y, F32, out_shape)
    g.save()


def stable_softmax(name="stable_softmax", causal=False):
    """The row's maximum subtracted before Softmax ("stable softmax" by
    hand): fused, the shift dropped (the softmax's own maximum undoes it)."""
    g = Graph(name)
    _, _, v, scores = plain_scores(g)
    if causal:
        mask = g.const("causal", causal_initializer(S, S))
        scores = g.op("Add", [scores, mask], "causal_add")
    row_max = g.op("ReduceMax", [scores], "stable_max", axes=[-1], keepdims=1)
    shifted = g.op("Sub", [scores, row_max], "stable_sub")
    softmax_pv(g, shifted, v, [B, H, S, D])
    g.save()


def log_domain_softmax(name, form, causal=True, keep_lse=False):
    """The softmax through its logarithm: Exp(LogSoftmax(x)) ("log_softmax"),
    or Exp(x - ReduceLogSumExp(x)) ("logsumexp", axes an input from opset
    18): the softmax of x, fused. With `keep_lse`, the log-sum-exp is also
    returned: a value the graph keeps, so the site is not fused."""
    g = Graph(name, opset=18)
    _, _, v, scores = plain_scores(g)
    if causal:
        mask = g.const("causal", causal_initializer(S, S))
        scores = g.op("Add", [scores, mask], "causal_add")
    if form == "log_softmax":
        logs = g.op("LogSoftmax", [scores], "log_softmax", axis=-1)
    else:
        axes = g.const("lse_axes", np.array([-1], np.int64))
        lse = g.op("ReduceLogSumExp", [scores, axes], "lse", keepdims=1)
        logs = g.op("Sub", [scores, lse], "lse_sub")
    probs = g.op("Exp", [logs], "probs")
    ctx = g.op("MatMul", [probs, v], "pv")
    g.output(ctx, F32, [B, H, S, D])
    if keep_lse:
        g.output(lse, F32, [B, H, S, 1])
    g.save()


# -- Not attention, or not fusable -------------------------------------------


def plain_scores(g, heads=H):
    q, k, v = qkv_inputs(g, heads=heads)
    scores = scaled_scores(g, q, k)
    return q, k, v, scores


def softmax_axis(name, axis):
    """Softmax over the queries (-2) or the heads (1), not the keys."""
    g = Graph(name)
    _, _, v, scores = plain_scores(g)
    softmax_pv(g, scores, v, [B, H, S, D], axis=axis)
    g.save()


def probs_output():
    """The attention probabilities are a graph output too."""
    g = Graph("neg_probs_output")
    _, _, v, scores = plain_scores(g)
    probs, _ = softmax_pv(g, scores, v, [B, H, S, D])
    g.output(probs, F32, [B, H, S, S])
    g.save()


def scores_used_elsewhere():
    """The scaled scores also feed a ReduceMean that is returned."""
    g = Graph("neg_scores_used")
    _, _, v, scores = plain_scores(g)
    softmax_pv(g, scores, v, [B, H, S, D])
    mean = g.op("ReduceMean", [scores], "scores_mean", axes=[-1], keepdims=0)
    g.output(mean, F32, [B, H, S])
    g.save()


def pv_wrong_side():
    """MatMul(Vt, P): the probabilities are the right-hand operand."""
    g = Graph("neg_pv_wrong_side")
    _, _, _, scores = plain_scores(g)
    vt = g.input("v_t", F32, [B, H, D, S])
    probs = g.op("Softmax", [scores], "softmax", axis=-1)
    ctx = g.op("MatMul", [vt, probs], "vp")
    g.output(ctx, F32, [B, H, D, S])
    g.save()


def scale_from_input():
    """The scale is a graph input, not a constant: a run-time scale."""
    g = Graph("scale_input")
    q, k, v = qkv_inputs(g)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    scale = g.input("scale", F32, [1])
    scores = g.op("Mul", [scores, scale], "scale_mul")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def scale_runtime(name, form):
    """A scale known only at run time: a learned temperature (a graph input,
    as Dynamo lifts a parameter) times Q·Kᵀ after a constant 1/sqrt(d)
    ("temperature"), or 1/sqrt of the head size computed from Q's shape
    ("size", Shape -> Gather -> Cast -> Sqrt -> Div)."""
    g = Graph(name)
    q, k, v = qkv_inputs(g)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    if form == "temperature":
        scores = g.op("Div", [scores, g.const("sqrt_d", np.float32(4.0))], "scale")
        tau = g.input("tau", F32, [])
        scores = g.op("Mul", [tau, scores], "temperature")
    elif form == "size":
        shape = g.op("Shape", [q], "q_shape")
        dim = g.op("Gather", [shape, g.const("last", np.int64(3))], "head_size", axis=0)
        size = g.op("Cast", [dim], "head_size_f", to=F32)
        root = g.op("Sqrt", [size], "root")
        scores = g.op("Div", [scores, root], "scale")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def cosine_attention(name, elem=F32):
    """Swin-v2's cosine attention: Q and K normalised along the head dim
    (F.normalize), a learned logit scale per head ([H, 1, 1], a graph input
    as Dynamo lifts a parameter) clamped to log(100) and exponentiated,
    multiplied into the [B, H, S, S] scores before the relative position
    bias is added; in f32, or all in f16 (`elem`)."""
    heads, batch = 4, 2
    dtype = np.float16 if elem == F16 else np.float32
    g = Graph(name)
    q, k, v = qkv_inputs(g, heads=heads, batch=batch, elem=elem)

    def normalize(x, name):
        norm = g.op("ReduceL2", [x], name + "_norm", axes=[-1], keepdims=1)
        norm = g.op("Clip", [norm, g.const(name + "_eps", dtype(1e-12))],
                    name + "_clip")
        return g.op("Div", [x, norm], name + "_normalized")

    scores = g.op("MatMul", [normalize(q, "q"), k_transposed(g, normalize(k, "k"))],
                  "qk")
    logit_scale = g.input("logit_scale", elem, [heads, 1, 1])
    clamped = g.op("Clip", [logit_scale, "",
                            g.const("max_logit", dtype(np.log(100.0)))],
                   "clamp")
    factor = g.op("Exp", [clamped], "logit_scale_exp")
    scores = g.op("Mul", [scores, factor], "scale")
    bias = g.input("relative_position_bias", elem, [1, heads, S, S])
    scores = g.op("Add", [scores, bias], "bias_add")
    softmax_pv(g, scores, v, [batch, heads, S, D], elem=elem)
    g.save()


def scale_per_query():
    """The scores times a graph input of one value a query row."""
    g = Graph("neg_scale_per_query")
    q, k, v = qkv_inputs(g)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    factor = g.input("row_scale", F32, [1, 1, S, 1])
    scores = g.op("Mul", [scores, factor], "scale")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def mask_after_softmax():
    """A mask added to the probabilities, after the softmax."""
    g = Graph("neg_mask_after_softmax")
    _, _, v, scores = plain_scores(g)
    probs = g.op("Softmax", [scores], "softmax", axis=-1)
    mask = g.input("mask", F32, [B, 1, S, S])
    probs = g.op("Add", [probs, mask], "mask_add")
    ctx = g.op("MatMul", [probs, v], "pv")
    g.output(ctx, F32, [B, H, S, D])
    g.save()


def mask_before_scale():
    """(QK^T + mask) * c: the mask is scaled too."""
    g = Graph("neg_mask_before_scale")
    q, k, v = qkv_inputs(g)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    mask = g.input("mask", F32, [B, 1, S, S])
    scores = g.op("Add", [scores, mask], "mask_add")
    scores = g.op("Mul", [scores, g.const("scale_factor", np.float32(0.25))],
                  "scale")
    softmax_pv(g, scores, v, [B, H, S, D])
    g.save()


def shared_scores():
    """Two softmaxes (with different masks) over the same scaled scores."""
    g = Graph("neg_shared_scores")
    _, _, v, scores = plain_scores(g)
    m1 = g.input("mask1", F32, [B, 1, S, S])
    m2 = g.input("mask2", F32, [B, 1, S, S])
    s1 = g.op("Add", [scores, m1], "mask1_add")
    s2 = g.op("Add", [scores, m2], "mask2_add")
    p1 = g.op("Softmax", [s1], "softmax1", axis=-1)
    p2 = g.op("Softmax", [s2], "softmax2", axis=-1)
    g.output(g.op("MatMul", [p1, v], "pv1"), F32, [B, H, S, D])
    g.output(g.op("MatMul", [p2, v], "pv2"), F32, [B, H, S, D])
    g.save()


def shared_exp():
    """A softmax written out by hand whose exponentials also feed a second,
    unnormalised product."""
    g = Graph("neg_shared_exp")
    _, _, v, scores = plain_scores(g)
    axes = g.const("last", np.array([-1], np.int64))
    rowmax = g.op("ReduceMax", [scores], "rowmax", axes=[-1], keepdims=1)
    shifted = g.op("Sub", [scores, rowmax], "shift")
    e = g.op("Exp", [shifted], "exp")
    rowsum = g.op("ReduceSum", [e, axes], "rowsum", keepdims=1)
    p = g.op("Div", [e, rowsum], "normalise")
    g.output(g.op("MatMul", [p, v], "pv"), F32, [B, H, S, D])
    g.output(g.op("MatMul", [e, v], "ev"), F32, [B, H, S, D])
    g.save()


def projection_lookalike():
    """softmax(x W) V with W [E,S] a weight: the scores are a projection of
    one activation, not Q K^T of two. It is still attention with K = W^T
    (a constant key matrix), so fusing is allowed if exact."""
    g = Graph("lookalike_projection")
    x = g.input("x", F32, [B, S, D])
    w = g.weight("w", [D, S])
    v = g.input("v", F32, [B, S, D])
    scores = g.op("MatMul", [x, w], "xw")
    softmax_pv(g, scores, v, [B, S, D])
    g.save()


# -- More look-alikes: almost a scale, a mask, a causal mask or a repeat -----


def scores_then(name, build, heads=H, batch_heads_swap=False):
    """Q, K, V inputs, scores = Q K^T, then `build(g, scores)` up to the
    softmax, then P V."""
    g = Graph(name)
    q, k, v = qkv_inputs(g, heads=heads)
    scores = g.op("MatMul", [q, k_transposed(g, k)], "qk")
    scores = build(g, scores)
    softmax_pv(g, scores, v, [B, heads, S, D])
    g.save()


def div_reversed(g, scores):
    return g.op("Div", [g.const("four", np.float32(4.0)), scores],
                "reversed_div")


def per_head_scale(g, scores):
    factor = np.array([0.25, 0.5], np.float32).reshape(1, H, 1, 1)
    return g.op("Mul", [scores, g.const("head_scale", factor)], "scale")


def mask_add_swapped(g, scores):
    mask = g.input("mask", F32, [B, 1, S, S])
    return g.op("Add", [mask, scores], "mask_add")


def sub_reversed(g, scores):
    mask = g.input("mask", F32, [B, 1, S, S])
    return g.op("Sub", [mask, scores], "mask_sub")


def where_inverted(g, scores):
    hide = g.input("hide", BOOL, [B, 1, S, S])
    return g.op("Where", [hide, g.const("neg_inf", np.float32(-np.inf)),
                          scores], "mask_where")


def where_fill_zero(g, scores):
    keep = g.input("keep", BOOL, [B, 1, S, S])
    return g.op("Where", [keep, scores, g.const("zero_f", np.float32(0.0))],
                "mask_where")


def mask_from_scores(g, scores):
    positive = g.op("Greater", [scores, g.const("zero_f", np.float32(0.0))],
                    "positive")
    return g.op("Where", [positive, scores,
                          g.const("neg_inf", np.float32(-np.inf))],
                "mask_where")


def constant_mask(array):
    def build(g, scores):
        scores = g.op("Mul", [scores, g.const("scale_factor",
                                              np.float32(0.25))], "scale")
        return g.op("Add", [scores, g.const("const_mask", array)], "mask_add")
    return build


def causal_where_inverted(g, scores):
    future = np.triu(np.ones((S, S), bool), 1)[None, None]
    return g.op("Where", [g.const("future", future),
                          g.const("neg_inf", np.float32(-np.inf)), scores],
                "causal_where")


def softcap_then_mask(cap_div, cap_mul, mask_first):
    def build(g, scores):
        scores = g.op("Mul", [scores, g.const("scale_factor",
                                              np.float32(0.25))], "scale")
        mask = g.const("causal_mask", causal_initializer(S, S))
        if mask_first:
            scores = g.op("Add", [scores, mask], "causal_add")
        scores = g.op("Div", [scores, g.const("cap_div", np.float32(
            cap_div))], "softcap_div")
        scores = g.op("Tanh", [scores], "softcap_tanh")
        scores = g.op("Mul", [scores, g.const("cap_mul", np.float32(
            cap_mul))], "softcap_mul")
        if not mask_first:
            scores = g.op("Add", [scores, mask], "causal_add")
        return scores
    return build


def gqa_tile(name, k_mode, v_mode):
    """K/V [B,2,S,D] repeated to 4 heads by Tile [1,2,1,1] (head h reads KV
    head h % 2) or by Llama's Unsqueeze/Expand/Reshape (h / 2)."""
    g = Graph(name)
    heads, kv_heads = 4, 2
    q, k, v = qkv_inputs(g, heads=heads, kv_heads=kv_heads)
    repeats = g.const("repeats", np.array([1, 2, 1, 1], np.int64))
    axes = g.const("axes_2", np.array([2], np.int64))
    expand = g.const("expand_shape", np.array([B, 2, 2, S, D], np.int64))
    merge = g.const("merge_shape", np.array([B, heads, S, D], np.int64))
    out = []
    for which, x, mode in (("k", k, k_mode), ("v", v, v_mode)):
        if mode == "tile":
            out.append(g.op("Tile", [x, repeats], which + "/Tile"))
        else:
            x = g.op("Unsqueeze", [x, axes], which + "/Unsqueeze")
            x = g.op("Expand", [x, expand], which + "/Expand")
            out.append(g.op("Reshape", [x, merge], which + "/Reshape"))
    k, v = out
    scores = scaled_scores(g, q, k)
    softmax_pv(g, scores, v, [B, heads, S, D])
    g.save()


def k_batch_head_swap():
    """K transposed with perm [1,0,3,2]: batch and heads swapped as well as
    S and D (B = H = 2), so query (b, h) reads K[h, b]."""
    g = Graph("k_perm_1032")
    q = g.input("q", F32, [2, 2, S, D])
    k = g.input("k", F32, [2, 2, S, D])
    v = g.input("v", F32, [2, 2, S, D])
    kt = g.op("Transpose", [k], "k_t", perm=[1, 0, 3, 2])
    scores = g.op("MatMul", [q, kt], "qk")
    softmax_pv(g, scores, v, [2, 2, S, D])
    g.save()


def projection_lookalike_batched():
    """softmax(x W) V with batch 2: the importer folds the batch into the
    rows of the x W product."""
    g = Graph("lookalike_projection_b2")
    x = g.input("x", F32, [2, S, D])
    w = g.weight("w", [D, S])
    v = g.input("v", F32, [2, S, D])
    scores = g.op("MatMul", [x, w], "xw")
    softmax_pv(g, scores, v, [2, S, D])
    g.save()


def attention23_causal_padding(name, fill):
    """Opset-23 Attention whose attn_mask combines a causal constant with a
    padding mask, as exporters write it: a bool And(tril, keep) (fill None),
    or a float Where(And(tril, keep), 0, fill)."""
    g = Graph(name, opset=23)
    q, k, v = qkv_inputs(g)
    tril = np.tril(np.ones((S, S), bool))[None, None]
    keep = g.op("And", [g.const("tril", tril), padding_keep(g)], "mask/And")
    if fill is not None:
        keep = g.op("Where", [keep, g.const("zero", np.float32(0.0)),
                              g.const("fill", np.float32(fill))], "mask/Where")
    y = g.op("Attention", [q, k, v, keep], "attention")
    g.output(y, F32, [B, H, S, D])
    g.save()


def attention23_past():
    """Opset-23 Attention with past_key/past_value and is_causal: the causal
    mask is offset by the past length (query i sees past + i + 1 keys)."""
    g = Graph("attn23_past_causal", opset=23)
    q, k, v = qkv_inputs(g, q_len=4)
    pk = g.input("past_key", F32, [B, H, 4, D])
    pv = g.input("past_value", F32, [B, H, 4, D])
    y, pk_out, pv_out = g.op("Attention", [q, k, v, "", pk, pv], "attention",
                             outputs=["y", "present_key", "present_value"],
                             is_causal=1)
    g.output(y, F32, [B, H, 4, D])
    g.output(pk_out, F32, [B, H, 8, D])
    g.output(pv_out, F32, [B, H, 8, D])
    g.save()


def main():
    os.makedirs(OUT, exist_ok=True)
    for where in ("mul", "div", "q", "k", "split", "none"):
        scale_variant("scale_" + where, where)
    scale_irrational()
    k_pretransposed()
    hf_projection("hf_projection")
    hf_projection("hf_projection_k0231", k_perm=[0, 2, 3, 1])
    hf_projection("scale_before_heads", prescaled=True)
    hf_padding()
    bool_mask_where("mask_bool_where_inf", -np.inf)
    bool_mask_where("mask_bool_where_min", FINFO_MIN)
    bool_mask_before_scale("mask_added_before_scale", replaces=False)
    bool_mask_before_scale("mask_where_before_scale", replaces=True)
    clamped_mask("mask_clamped_min", FINFO_MIN, FINFO_MIN)
    clamped_mask("mask_inf_clamped_min", -np.inf, FINFO_MIN)
    clamped_mask("mask_clamped_small", FINFO_MIN, -1e4)
    causal_trilu_where()
    causal_triu_add()
    causal_range_less()
    causal_index_compare_large("causal_compare_large")
    causal_index_compare_large("causal_compare_large_batch2", batch=2)
    causal_index_compare_large("causal_compare_large_strict", compare="Less")
    causal_index_compare_large("causal_compare_folded_batch4", seq=64, batch=4)
    causal_trilu_large("causal_triu_large")
    causal_trilu_large("causal_tril_where_large", form="tril_where")
    causal_trilu_large("causal_triu_masked_fill_large", form="triu_masked_fill")
    causal_trilu_large("causal_float_tril_eq0_large", form="float_tril_eq0")
    causal_trilu_large("causal_expand_tril_where_large", form="expand_tril_where")
    local_band_large()
    local_band_large("local_window_large", form="window")
    local_band_large("local_holes_large", form="holes")
    causal_init_batched("causal_init_batched")
    causal_init_batched("causal_init_batched_differs", differs=True)
    causal_init("causal_initializer", S, S)
    causal_init("causal_rect_bottom_right", 4, S)
    causal_init("causal_rect_top_left", 4, S, top_left=True)
    sliding_window("window_built", built=True)
    sliding_window("window_initializer", built=False)
    gpt_neo_local("gpt_neo_local_hf", window=3)
    gpt_neo_local("gpt_neo_global_hf", window=None)
    fp8_qdq("fp8_qdq_attention")
    fp8_qdq("fp8_qdq_per_head", per_head=True, causal=False)
    fp8_qdq("fp8_qdq_f16", f16=True)
    fp8_qdq("fp8_qdq_probs", quantize_probs=True)
    t5_bias("t5_bias_mask", combined=False)
    t5_bias("t5_bias_combined", combined=True)
    t5_bias("t5_zero_bias", combined=False, zero=True)
    t5_bias("t5_zero_bias_expand", combined=False, zero="expand")
    t5_bias_float_mask_sum()
    t5_bias_from_input()
    t5_encoder_two_layers()
    alibi()
    alibi_from_padding()
    softcap()
    softcap_half("softcap_f16", 50.0, 50.0)
    einsum_attention("einsum_bhsd", "bhqd,bhkd->bhqk", "bhqk,bhkd->bhqd")
    einsum_attention("einsum_bshd", "bqhd,bkhd->bhqk", "bhqk,bkhd->bqhd",
                     q_layout="bshd")
    einsum_attention("einsum_summed", "bhqd,bhkd->bhqk", "bhqk,bhkd->bhq")
    einsum_bqhk_masked()
    bmm_view_mask_view()
    swin_window()
    swin_window("swin_window_mask_scaled", scaled_at_rank5=True)
    longt5_local()
    relative_shift()
    relative_shift("conformer_rel_shift_guarded", post_guard=True)
    relative_shift("conformer_rel_shift_guarded_min", post_guard=True, fill=FINFO_MIN)
    relative_shift("espnet_guarded_min", post_guard=True, fill=FINFO_MIN, relative=False)
    einsum_attention("einsum_scores_bqhk", "bqhd,bkhd->bqhk", "bqhk,bkhd->bqhd",
                     q_layout="bshd")
    einsum_attention("einsum_mqa", "bhqd,bkd->bhqk", "bhqk,bkd->bhqd",
                     q_layout="mqa")
    einsum_attention("einsum_mqa_bqhd", "bhqd,bkd->bhqk", "bhqk,bkd->bqhd",
                     q_layout="mqa")
    softcap_half("softcap_f16_mismatch", 50.0, 49.0)
    repeat_kv("gqa_repeat_kv", kv_heads=2)
    repeat_kv("mqa_repeat_kv", kv_heads=1)
    mqa_broadcast()
    gqa_single_kv_reshaped_v()
    mla()
    mqa_broadcast_causal()
    mqa_broadcast_v_only()
    f16_upcast()
    f32_query_f16_kv()
    attention23("attn23_causal", is_causal=1)
    attention23("attn23_causal_rect", q_len=4, is_causal=1)
    attention23("attn23_bool_mask", mask="bool")
    attention23("attn23_float_mask", mask="float")
    attention23("attn23_scale", scale=0.125)
    attention23("attn23_3d_gqa", three_d=True, is_causal=1)
    attention23("attn23_softcap", softcap=30.0)
    stable_softmax()
    log_domain_softmax("log_softmax_exp", "log_softmax")
    log_domain_softmax("logsumexp_softmax", "logsumexp")
    log_domain_softmax("neg_logsumexp_output", "logsumexp", causal=False, keep_lse=True)
    stable_softmax("stable_softmax_causal", causal=True)
    softmax_axis("neg_softmax_axis_m2", -2)
    softmax_axis("neg_softmax_axis_1", 1)
    probs_output()
    scores_used_elsewhere()
    pv_wrong_side()
    scale_from_input()
    scale_runtime("scale_runtime_temperature", "temperature")
    scale_runtime("scale_runtime_size", "size")
    cosine_attention("scale_per_head_cosine")
    cosine_attention("scale_per_head_cosine_f16", F16)
    scale_per_query()
    mask_after_softmax()
    mask_before_scale()
    shared_scores()
    shared_exp()
    projection_lookalike()
    scores_then("neg_div_reversed", div_reversed)
    scores_then("scale_per_head_const", per_head_scale)
    scores_then("mask_add_swapped", mask_add_swapped)
    scores_then("neg_sub_reversed", sub_reversed)
    scores_then("mask_bool_where_inverted", where_inverted)
    scores_then("neg_where_fill_zero", where_fill_zero)
    scores_then("neg_mask_from_scores", mask_from_scores)
    scores_then("causal_where_inverted", causal_where_inverted)
    scores_then("causal_small_fill",
                constant_mask(causal_initializer(S, S, fill=-100.0)))
    scores_then("causal_anti", constant_mask(
        causal_initializer(S, S)[..., ::-1, ::-1].copy()))
    almost = causal_initializer(S, S)
    almost[0, 0, 5, 2] = 0.5
    scores_then("causal_almost", constant_mask(almost))
    causal_init("window_rect_bottom_right", 4, S, window=3)
    scores_then("softcap_mask_first", softcap_then_mask(50.0, 50.0, True))
    scores_then("softcap_mismatch", softcap_then_mask(50.0, 30.0, False))
    gqa_tile("gqa_tile_interleaved", "tile", "tile")
    gqa_tile("gqa_mixed_repeat", "expand", "tile")
    k_batch_head_swap()
    projection_lookalike_batched()
    attention23_past()
    attention23_causal_padding("attn23_causal_padding_bool", None)
    attention23_causal_padding("attn23_causal_padding_min", FINFO_MIN)
    local_window("local_window_built", built=True)
    local_window("local_window_initializer", built=False)
    local_window("local_window_padding", built=True, padding=True)
    for form in ("and_add", "and_select", "and_sdpa", "or_select", "add_add",
                 "min_add"):
        causal_pad("causal_pad_" + form, form)
    return 0


if __name__ == "__main__":
    sys.exit(main())
