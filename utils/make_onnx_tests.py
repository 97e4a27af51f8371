#!/usr/bin/python3
"""Generates the small ONNX graphs of test/Target/ONNX/Inputs.

Run with a Python that has `onnx` and `numpy` (Debian's /usr/bin/python3 with
python3-onnx). The outputs are committed; rerun this script after changing
it:

    /usr/bin/python3 utils/make_onnx_tests.py
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test",
                   "Target", "ONNX", "Inputs")
RNG = np.random.default_rng(0)


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def weight(name, shape, dtype=np.float32):
    return const(name, (RNG.standard_normal(shape) * 0.1).astype(dtype))


def save(name, nodes, inputs, outputs, inits=(), opset=17, value_info=(),
         out_dir=OUT):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits),
                              value_info=list(value_info))
    model = helper.make_model(graph, producer_name="kiln-tests",
                              opset_imports=[helper.make_opsetid("", opset)])
    # The installed onnx may predate the opset: no checker, and ir_version 8.
    model.ir_version = 8
    onnx.save(model, os.path.join(out_dir, name + ".onnx"))


def tensor(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def node(op, inputs, outputs, name=None, **attrs):
    return helper.make_node(op, inputs, outputs, name=name or outputs[0],
                            **attrs)


def eager_attention():
    """Eager-style attention at opset 17 with a causal mask built from
    Shape/Range/Less/Where and a Trilu, which must fold to constants."""
    f = TensorProto.FLOAT
    nodes = [
        node("MatMul", ["x", "wq"], ["q2"], name="q_proj"),
        node("MatMul", ["x", "wk"], ["k2"], name="k_proj"),
        node("MatMul", ["x", "wv"], ["v2"], name="v_proj"),
        node("Reshape", ["q2", "heads_shape"], ["q3"]),
        node("Reshape", ["k2", "heads_shape"], ["k3"]),
        node("Reshape", ["v2", "heads_shape"], ["v3"]),
        node("Transpose", ["q3"], ["q"], perm=[0, 2, 1, 3]),
        node("Transpose", ["k3"], ["kt"], perm=[0, 2, 3, 1]),
        node("Transpose", ["v3"], ["v"], perm=[0, 2, 1, 3]),
        node("MatMul", ["q", "kt"], ["scores"], name="qk"),
        node("Div", ["scores", "sqrt_d"], ["scaled"], name="scale"),
        # Causal mask: j <= i from the static sequence length.
        node("Shape", ["x"], ["xs"]),
        node("Gather", ["xs", "one"], ["seq"], axis=0),
        node("Range", ["zero", "seq", "one"], ["pos"]),
        node("Unsqueeze", ["pos", "axes0"], ["row"]),
        node("Unsqueeze", ["pos", "axes1"], ["col"]),
        node("Less", ["col", "row"], ["future"]),
        node("Where", ["future", "neg_inf", "zero_f"], ["causal"]),
        node("Add", ["scaled", "causal"], ["masked"]),
        node("Softmax", ["masked"], ["probs"], axis=-1, name="softmax"),
        node("MatMul", ["probs", "v"], ["ctx"], name="pv"),
        node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        node("Reshape", ["ctx_t", "out_shape"], ["y"]),
        # A Trilu of a constant folds too.
        node("ConstantOfShape", ["sq_shape"], ["ones"],
             value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
        node("Trilu", ["ones"], ["tril"], upper=0),
        node("ReduceSum", ["tril", "axes1"], ["rowsum"], keepdims=0),
    ]
    inits = [
        weight("wq", [16, 16]), weight("wk", [16, 16]), weight("wv", [16, 16]),
        const("heads_shape", np.array([1, 8, 2, 8], np.int64)),
        const("out_shape", np.array([0, 0, 16], np.int64)),
        const("sqrt_d", np.array(np.sqrt(8.0), np.float32)),
        const("one", np.array(1, np.int64)),
        const("zero", np.array(0, np.int64)),
        const("axes0", np.array([0], np.int64)),
        const("axes1", np.array([1], np.int64)),
        const("neg_inf", np.array(-np.inf, np.float32)),
        const("zero_f", np.array(0.0, np.float32)),
        const("sq_shape", np.array([8, 8], np.int64)),
    ]
    save("eager_attention", nodes, [tensor("x", f, [1, 8, 16])],
         [tensor("y", f, [1, 8, 16]), tensor("rowsum", f, [8])], inits)


def attention_opset23():
    """The opset-23 Attention op: 4-D with a bool mask, 3-D GQA causal."""
    f = TensorProto.FLOAT
    nodes = [
        node("Attention", ["q", "k", "v", "mask"], ["o4"], name="attn4d",
             scale=0.25),
        node("Attention", ["q3", "k3", "v3"], ["o3"], name="attn3d",
             q_num_heads=4, kv_num_heads=2, is_causal=1, softcap=30.0),
        node("Attention", ["q", "k", "v", "fmask"], ["o4f"], name="attnf"),
    ]
    save("attention_opset23", nodes,
         [tensor("q", f, [2, 4, 8, 16]), tensor("k", f, [2, 4, 8, 16]),
          tensor("v", f, [2, 4, 8, 16]),
          tensor("mask", TensorProto.BOOL, [2, 1, 1, 8]),
          tensor("fmask", f, [8, 8]),
          tensor("q3", f, [1, 8, 64]), tensor("k3", f, [1, 8, 32]),
          tensor("v3", f, [1, 8, 32])],
         [tensor("o4", f, [2, 4, 8, 16]), tensor("o3", f, [1, 8, 64]),
          tensor("o4f", f, [2, 4, 8, 16])], opset=23)


def dynamic_dims():
    """dim_param dims stay dynamic; shape arithmetic on them is tracked."""
    f = TensorProto.FLOAT
    nodes = [
        node("MatMul", ["x", "w"], ["h"], name="proj"),
        node("Shape", ["h"], ["hs"]),
        node("Gather", ["hs", "idx01"], ["bs"], axis=0),
        node("Concat", ["bs", "heads"], ["target"], axis=0),
        node("Reshape", ["h", "target"], ["h4"], name="split_heads"),
        node("Softmax", ["h4"], ["p"], axis=-1),
        node("Add", ["x", "bias"], ["xb"]),
    ]
    inits = [weight("w", [16, 16]),
             const("idx01", np.array([0, 1], np.int64)),
             const("heads", np.array([2, 8], np.int64)),
             weight("bias", [16])]
    save("dynamic_dims", nodes, [tensor("x", f, [1, "seq", 16])],
         [tensor("p", f, None), tensor("xb", f, None)], inits, opset=18)


def mixed_ops():
    """A spread of element-type and shape ops."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    nodes = [
        node("Gemm", ["a", "wg", "bg"], ["g"], transB=1, alpha=0.5),
        node("LayerNormalization", ["g", "ln_s", "ln_b"], ["ln"], axis=-1,
             epsilon=1e-5),
        node("Split", ["ln", "split"], ["s0", "s1"], axis=1),
        node("Pow", ["s0", "two"], ["sq"]),
        node("ReduceMean", ["sq"], ["mean"], axes=[1], keepdims=1),
        node("Sqrt", ["mean"], ["rms"]),
        node("Reciprocal", ["rms"], ["inv"]),
        node("Neg", ["inv"], ["ninv"]),
        node("Mul", ["s1", "ninv"], ["m"]),
        node("Tanh", ["m"], ["t"]),
        node("Erf", ["t"], ["e"]),
        node("Exp", ["e"], ["ex"]),
        node("ReduceMax", ["ex"], ["mx"], axes=[1], keepdims=0),
        node("Slice", ["ex", "st", "en", "ax"], ["sl"]),
        node("Squeeze", ["mx"], ["sqz"]),
        node("Unsqueeze", ["sqz", "ax0"], ["unsq"]),
        node("Expand", ["unsq", "exp_shape"], ["expd"]),
        node("Cast", ["ids"], ["ids_f"], to=TensorProto.FLOAT),
        node("Equal", ["ids", "zero"], ["is_pad"]),
        node("Not", ["is_pad"], ["keep"]),
        node("And", ["keep", "keep"], ["keep2"]),
        node("Where", ["keep2", "ids_f", "zero_f"], ["ids_masked"]),
        node("Identity", ["ids_masked"], ["ids_out"]),
        node("Sub", ["sl", "sl"], ["zsl"]),
        node("Hardmax", ["zsl"], ["hm"], name="kept_opaque"),
        node("Concat", ["expd", "expd"], ["cat"], axis=0),
    ]
    inits = [weight("wg", [8, 4]), weight("bg", [8]),
             const("ln_s", np.ones(8, np.float32)),
             const("ln_b", np.zeros(8, np.float32)),
             const("split", np.array([4, 4], np.int64)),
             const("two", np.array(2.0, np.float32)),
             const("st", np.array([1], np.int64)),
             const("en", np.array([3], np.int64)),
             const("ax", np.array([1], np.int64)),
             const("ax0", np.array([0], np.int64)),
             const("exp_shape", np.array([3, 2], np.int64)),
             const("zero", np.array(0, np.int64)),
             const("zero_f", np.array(0.0, np.float32))]
    save("mixed_ops", nodes,
         [tensor("a", f, [2, 4]), tensor("ids", i64, [2, 5])],
         [tensor("cat", f, [6, 2]), tensor("ids_out", f, [2, 5]),
          tensor("hm", f, [2, 2])], inits)


def bf16_matmul():
    """Element types are kept: a bf16 batched MatMul with a rank-2 weight."""
    bf = TensorProto.BFLOAT16
    w = helper.make_tensor("w", bf, [8, 4], np.zeros(32, np.uint16).tolist())
    nodes = [node("MatMul", ["x", "w"], ["y"], name="mm")]
    save("bf16_matmul", nodes, [tensor("x", bf, [2, 3, 8])],
         [tensor("y", bf, [2, 3, 4])], [w], opset=18)


def bad_models():
    f = TensorProto.FLOAT
    nodes = [node("Relu", ["x"], ["y"])]
    save("opset12", nodes, [tensor("x", f, [2])], [tensor("y", f, [2])],
         opset=12)
    save("opset24", nodes, [tensor("x", f, [2])], [tensor("y", f, [2])],
         opset=24)
    save("bad_dtype", [node("Identity", ["x"], ["y"])],
         [tensor("x", TensorProto.COMPLEX64, [2])],
         [tensor("y", TensorProto.COMPLEX64, [2])])
    save("undefined_input", [node("Relu", ["nowhere"], ["y"], name="relu")],
         [tensor("x", f, [2])], [tensor("y", f, [2])])
    save("no_outputs", [node("Identity", ["x"], [], name="sink"),
                        node("Relu", ["x"], ["y"], name="relu")],
         [tensor("x", f, [2])], [tensor("y", f, [2])])
    save("custom_domain",
         [helper.make_node("FusedThing", ["x"], ["y"], name="fused",
                           domain="com.example"),
          node("Relu", ["y"], ["z"])],
         [tensor("x", f, [2])], [tensor("z", f, [2])])
    with open(os.path.join(OUT, "not_onnx.onnx"), "wb") as out:
        out.write(b"This is not a protobuf file at all.\n\xff\xfe\x00\x01")
    open(os.path.join(OUT, "empty.onnx"), "wb").close()


# The speech and vision encoder operators (Conv 1-D/2-D with groups, the
# normalisations, ReduceL2) draw their weights from their own generator so
# that the graphs above do not change when these do.
ENCODER_RNG = np.random.default_rng(1)


def encoder_weight(name, shape):
    return const(name, ENCODER_RNG.standard_normal(shape).astype(np.float32))


def conv1d():
    """Conv of rank 1 as wav2vec2 and Whisper use it: plain with bias, pads,
    stride and dilation (the stride leaves one input position unread),
    depthwise with a channel multiplier, grouped, Whisper's second conv
    (stride 2, the end padding unread); and Whisper's first conv over a
    dynamic number of frames."""
    f = TensorProto.FLOAT
    nodes = [
        node("Conv", ["x", "w_plain", "b_plain"], ["plain"], pads=[2, 0],
             strides=[2], dilations=[2], kernel_shape=[3]),
        node("Conv", ["x", "w_depthwise", "b_depthwise"], ["depthwise"],
             group=4, pads=[2, 2]),
        node("Conv", ["x", "w_grouped"], ["grouped"], group=2, pads=[1, 1]),
        node("Conv", ["x", "w_plain"], ["strided"], pads=[1, 1], strides=[2]),
    ]
    inits = [encoder_weight("w_plain", [6, 4, 3]),
             encoder_weight("b_plain", [6]),
             encoder_weight("w_depthwise", [8, 1, 5]),
             encoder_weight("b_depthwise", [8]),
             encoder_weight("w_grouped", [6, 2, 3])]
    save("conv1d", nodes, [tensor("x", f, [2, 4, 20])],
         [tensor("plain", f, [2, 6, 9]), tensor("depthwise", f, [2, 8, 20]),
          tensor("grouped", f, [2, 6, 20]), tensor("strided", f, [2, 6, 10])],
         inits)
    nodes = [node("Conv", ["x", "w", "b"], ["y"], name="conv_frames",
                  pads=[1, 1])]
    save("conv1d_dynamic", nodes, [tensor("x", f, [1, 4, "frames"])],
         [tensor("y", f, [1, 6, None])],
         [encoder_weight("w", [6, 4, 3]), encoder_weight("b", [6])])


def conv1d_strided_dynamic():
    """Whisper's second conv: stride 2 over the dynamic frame count, which
    imports only with the length bound (kilnc --verify binds it)."""
    f = TensorProto.FLOAT
    nodes = [node("Conv", ["x", "w", "b"], ["y"], name="conv_stride2",
                  pads=[1, 1], strides=[2])]
    save("conv1d_strided_dynamic", nodes, [tensor("x", f, [1, 4, "frames"])],
         [tensor("y", f, [1, 6, None])],
         [encoder_weight("w", [6, 4, 3]), encoder_weight("b", [6])])


def conv2d_groups():
    """Conv of rank 2: depthwise (ConvNeXt), grouped with auto_pad
    SAME_UPPER, and ungrouped with SAME_LOWER."""
    f = TensorProto.FLOAT
    nodes = [
        node("Conv", ["x", "w_depthwise", "b_depthwise"], ["depthwise"],
             group=6, pads=[1, 1, 1, 1], strides=[2, 2]),
        node("Conv", ["x", "w_grouped"], ["grouped"], group=2,
             auto_pad="SAME_UPPER", strides=[2, 2]),
        node("Conv", ["x", "w_same_lower", "b_same_lower"], ["same_lower"],
             auto_pad="SAME_LOWER", dilations=[1, 2]),
    ]
    inits = [encoder_weight("w_depthwise", [6, 1, 3, 3]),
             encoder_weight("b_depthwise", [6]),
             encoder_weight("w_grouped", [4, 3, 3, 3]),
             encoder_weight("w_same_lower", [5, 6, 2, 2]),
             encoder_weight("b_same_lower", [5])]
    save("conv2d_groups", nodes, [tensor("x", f, [1, 6, 9, 9])],
         [tensor("depthwise", f, [1, 6, 5, 5]),
          tensor("grouped", f, [1, 4, 5, 5]),
          tensor("same_lower", f, [1, 5, 9, 9])], inits)


def weight_norm_conv():
    """wav2vec2's positional conv embedding: a weight-normalised (dim=2)
    Conv with groups=4 standing in for 16, the norm a ReduceL2 over the
    other axes."""
    f = TensorProto.FLOAT
    nodes = [
        node("ReduceL2", ["v"], ["norm"], axes=[0, 1], keepdims=1),
        node("Div", ["v", "norm"], ["direction"]),
        node("Mul", ["g", "direction"], ["w"]),
        node("Conv", ["x", "w", "b"], ["y"], name="pos_conv", group=4,
             pads=[2, 2], kernel_shape=[5]),
    ]
    inits = [encoder_weight("v", [8, 2, 5]), encoder_weight("g", [1, 1, 5]),
             encoder_weight("b", [8])]
    save("weight_norm_conv", nodes, [tensor("x", f, [1, 8, 16])],
         [tensor("y", f, [1, 8, 16])], inits)


def normalizations():
    """InstanceNormalization (rank 3 and 4), GroupNormalization at opsets 18
    (scale per group) and 21 (scale per channel), BatchNormalization."""
    f = TensorProto.FLOAT
    nodes = [
        node("InstanceNormalization", ["x3", "s3", "b3"], ["in3"],
             epsilon=1e-3),
        node("InstanceNormalization", ["x4", "s4", "b4"], ["in4"]),
    ]
    inits = [encoder_weight("s3", [3]), encoder_weight("b3", [3]),
             encoder_weight("s4", [4]), encoder_weight("b4", [4])]
    save("instance_norm", nodes,
         [tensor("x3", f, [2, 3, 7]), tensor("x4", f, [2, 4, 3, 5])],
         [tensor("in3", f, [2, 3, 7]), tensor("in4", f, [2, 4, 3, 5])], inits)
    for opset, params in ((18, 3), (21, 6)):
        nodes = [node("GroupNormalization", ["x", "scale", "bias"], ["y"],
                      name="group_norm", num_groups=3, epsilon=1e-4)]
        save("group_norm%d" % opset, nodes, [tensor("x", f, [2, 6, 5])],
             [tensor("y", f, [2, 6, 5])],
             [encoder_weight("scale", [params]),
              encoder_weight("bias", [params])], opset=opset)
    nodes = [node("BatchNormalization", ["x", "scale", "b", "mean", "var"],
                  ["y"], name="batch_norm", epsilon=1e-3)]
    save("batch_norm", nodes, [tensor("x", f, [2, 3, 4, 4])],
         [tensor("y", f, [2, 3, 4, 4])],
         [encoder_weight("scale", [3]), encoder_weight("b", [3]),
          encoder_weight("mean", [3]),
          const("var", ENCODER_RNG.uniform(0.5, 2.0, [3]).astype(np.float32))])


def reductions():
    """ReduceL2 with axes as an attribute (opset 17) and as an input (opset
    18), keepdims on and off; ReduceL1 and ReduceSumSquare."""
    f = TensorProto.FLOAT
    nodes = [
        node("ReduceL2", ["x"], ["l2_keep"], axes=[1]),
        node("ReduceL2", ["x"], ["l2_drop"], axes=[-1, 0], keepdims=0),
        node("ReduceL2", ["x"], ["l2_all"], keepdims=0),
    ]
    save("reduce_l2_opset17", nodes, [tensor("x", f, [2, 3, 4])],
         [tensor("l2_keep", f, [2, 1, 4]), tensor("l2_drop", f, [3]),
          tensor("l2_all", f, [])])
    nodes = [
        node("ReduceL2", ["x", "axes"], ["l2"], keepdims=0),
        node("ReduceL1", ["x", "axes"], ["l1"]),
        node("ReduceSumSquare", ["x", "axes"], ["sum_square"]),
    ]
    save("reduce_l2_opset18", nodes, [tensor("x", f, [2, 3, 4])],
         [tensor("l2", f, [2, 3]), tensor("l1", f, [2, 3, 1]),
          tensor("sum_square", f, [2, 3, 1])],
         [const("axes", np.array([2], np.int64))], opset=18)


def log_domain():
    """LogSoftmax (opset 13 semantics) and ReduceLogSumExp (axes as an input,
    keepdims on and off, two axes), on inputs with a constant -inf added:
    one row all -inf (LogSumExp -inf, LogSoftmax NaN), one partly -inf."""
    f = TensorProto.FLOAT
    hidden = np.zeros([2, 3, 4], np.float32)
    hidden[0, 1, :] = -np.inf
    hidden[1, 2, 1:3] = -np.inf
    nodes = [
        node("Add", ["x", "hide"], ["xm"]),
        node("LogSoftmax", ["xm"], ["log_softmax"], axis=-1),
        node("LogSoftmax", ["x"], ["log_softmax_1"], axis=1),
        node("ReduceLogSumExp", ["xm", "last"], ["lse_keep"], keepdims=1),
        node("ReduceLogSumExp", ["xm", "last"], ["lse_drop"], keepdims=0),
        node("ReduceLogSumExp", ["x", "two"], ["lse_two"], keepdims=0),
    ]
    save("log_domain", nodes, [tensor("x", f, [2, 3, 4])],
         [tensor("log_softmax", f, [2, 3, 4]), tensor("log_softmax_1", f, [2, 3, 4]),
          tensor("lse_keep", f, [2, 3, 1]), tensor("lse_drop", f, [2, 3]),
          tensor("lse_two", f, [3])],
         [const("hide", hidden), const("last", np.array([-1], np.int64)),
          const("two", np.array([0, 2], np.int64))], opset=18)


FLOAT8E4M3FN = 17  # ONNX 1.14's enum value; the installed onnx may predate it


def float8_tensor(name, bits, shape):
    """An e4m3fn initializer from raw bit patterns (one an element, in
    int32_data, as ONNX stores 8-bit floats)."""
    t = onnx.TensorProto()
    t.name = name
    t.data_type = FLOAT8E4M3FN
    t.dims.extend(shape)
    t.int32_data.extend(int(b) for b in np.asarray(bits).reshape(-1))
    return t


def float8_qdq():
    """QuantizeLinear/DequantizeLinear to and from float8 e4m3fn (opset 21):
    a per-tensor scale with a zero point (saturating, values past 448·s
    clamped), a per-axis scale given by output_dtype, a non-saturating Cast
    (past 464 -> NaN) and back, and quantised constant weights (every
    e4m3 code but NaN) dequantised."""
    f = TensorProto.FLOAT
    codes = np.array([c for c in range(256) if c & 0x7F != 0x7F], np.uint8)
    nodes = [
        node("Mul", ["x", "gain"], ["xs"]),
        node("QuantizeLinear", ["xs", "s", "zp"], ["q1"]),
        node("DequantizeLinear", ["q1", "s", "zp"], ["per_tensor"]),
        node("QuantizeLinear", ["xs", "s_axis"], ["q2"], axis=1,
             output_dtype=FLOAT8E4M3FN),
        node("DequantizeLinear", ["q2", "s_axis"], ["per_axis"], axis=1),
        node("Cast", ["xs"], ["c8"], to=FLOAT8E4M3FN, saturate=0),
        node("Cast", ["c8"], ["cast"], to=f),
        node("DequantizeLinear", ["w8", "sw"], ["weights"]),
        # Edge values made at run time (edge + 0·x): ties, the 448/464/480
        # boundary, subnormals and their midpoints, infinities, NaN, -0.
        node("Mul", ["x", "zero"], ["x0"]),
        node("Add", ["edge", "x0"], ["edge_rt"]),
        node("Cast", ["edge_rt"], ["e8"], to=FLOAT8E4M3FN, saturate=0),
        node("Cast", ["e8"], ["edges"], to=f),
        node("Cast", ["edge_rt"], ["s8"], to=FLOAT8E4M3FN),
        node("Cast", ["s8"], ["edges_saturated"], to=f),
    ]
    tiny = 2.0 ** -9
    edge = np.array([0.0, -0.0, 448.0, 463.9, 464.0, 464.1, 479.0, 480.0,
                     -500.0, np.inf, -np.inf, np.nan, tiny, tiny / 2,
                     tiny * 1.5, tiny * 2.5, tiny * 3.5, tiny * 7.5,
                     2.0 ** -6 - tiny / 2, 2.0 ** -6, 1.0625, 1.1875, 1.0624,
                     -1.0625, 1e-20, -1e-20, 3.0e-3, 0.1, 0.3, 17.0, 19.0,
                     -240.0, 248.0, 232.0, 2.0 ** -10, 2.0 ** -11, 255.9,
                     1.0 + 2 ** -4, 1.0 + 3 * 2 ** -4, 2.0 ** 8 * 1.0625,
                     5.0, 6.5, 7.5, -7.5, 0.0078125, 0.01, 100.0, 200.0],
                    np.float32).reshape(2, 3, 8)
    save("float8_qdq", nodes, [tensor("x", f, [2, 3, 8])],
         [tensor("per_tensor", f, [2, 3, 8]), tensor("per_axis", f, [2, 3, 8]),
          tensor("cast", f, [2, 3, 8]), tensor("weights", f, [len(codes)]),
          tensor("edges", f, [2, 3, 8]),
          tensor("edges_saturated", f, [2, 3, 8])],
         [const("gain", np.float32(120.0)), const("s", np.float32(0.25)),
          float8_tensor("zp", [0], []),
          const("s_axis", np.array([0.5, 0.3, 2.0], np.float32)),
          float8_tensor("w8", codes, [len(codes)]),
          const("sw", np.float32(0.75)), const("zero", np.float32(0.0)),
          const("edge", edge)], opset=21)


def encoder_unsupported():
    """Forms of the encoder operators that stay opaque, each with a reason."""
    f = TensorProto.FLOAT
    nodes = [
        node("Conv", ["x5", "w3d"], ["conv3d"]),
        node("Conv", ["xd", "w1d"], ["conv_two_dynamic"]),
        node("Conv", ["xs", "w1d"], ["conv_dynamic_stride"], strides=[2]),
        node("InstanceNormalization", ["xl", "s", "b"], ["in_dynamic"]),
        node("ReduceL2", ["x3"], ["l2_noop"], noop_with_empty_axes=1),
        node("BatchNormalization", ["x3", "s", "b", "s", "s"],
             ["bn_train", "running_mean", "running_var"], training_mode=1),
    ]
    inits = [encoder_weight("w3d", [2, 2, 1, 1, 1]),
             encoder_weight("w1d", [3, 4, 3]), encoder_weight("s", [3]),
             encoder_weight("b", [3])]
    save("encoder_unsupported", nodes,
         [tensor("x5", f, [1, 2, 3, 4, 5]), tensor("xd", f, ["batch", 4, "len"]),
          tensor("xs", f, [1, 4, "len"]), tensor("xl", f, [1, 3, "len"]),
          tensor("x3", f, [1, 3, 4])],
         [tensor("conv3d", f, [1, 2, 3, 4, 5]),
          tensor("conv_two_dynamic", f, ["batch", 3, None]),
          tensor("conv_dynamic_stride", f, [1, 3, None]),
          tensor("in_dynamic", f, [1, 3, "len"]),
          tensor("l2_noop", f, [1, 3, 4]), tensor("bn_train", f, [1, 3, 4])],
         inits, opset=18)


def verify_opaque():
    """A graph kilnc --verify cannot run: a custom-domain node and an
    operator without a lowering between supported ones."""
    f = TensorProto.FLOAT
    nodes = [
        node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Swizzle", ["r"], ["s"], name="swizzle",
                         domain="com.example"),
        node("Hardmax", ["x"], ["h"], name="hardmax"),
        node("Add", ["s", "h"], ["y"], name="add"),
    ]
    out_dir = os.path.join(OUT, "..", "..", "..", "tools", "kilnc", "Inputs")
    save("verify_opaque", nodes, [tensor("x", f, [2, 4])],
         [tensor("y", f, [2, 4])],
         value_info=[tensor("s", f, [2, 4]), tensor("h", f, [2, 4])],
         out_dir=out_dir)


def main():
    os.makedirs(OUT, exist_ok=True)
    eager_attention()
    attention_opset23()
    dynamic_dims()
    mixed_ops()
    bf16_matmul()
    bad_models()
    conv1d()
    conv2d_groups()
    weight_norm_conv()
    normalizations()
    reductions()
    log_domain()
    float8_qdq()
    encoder_unsupported()
    verify_opaque()
    conv1d_strided_dynamic()
    return 0


if __name__ == "__main__":
    sys.exit(main())
