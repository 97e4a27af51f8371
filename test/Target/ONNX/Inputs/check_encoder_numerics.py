"""Runs the encoder-operator graphs of this directory through kiln-translate
--import-onnx and kiln-cpu-runner on random inputs, and compares every output
with a float64 numpy evaluation of the same ONNX nodes (written from the ONNX
operator specification, not from Kiln's lowering).

    check_encoder_numerics.py KILN_TRANSLATE KILN_CPU_RUNNER WORK_DIR
"""

import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

INPUTS = os.path.dirname(os.path.abspath(__file__))

# Graph -> the shapes of its inputs for this run (dynamic dims bound).
CASES = [
    ("conv1d", {}),
    ("conv1d_dynamic", {"x": [1, 4, 21]}),
    ("conv1d_dynamic", {"x": [1, 4, 20]}),
    ("conv2d_groups", {}),
    ("weight_norm_conv", {}),
    ("instance_norm", {}),
    ("group_norm18", {}),
    ("group_norm21", {}),
    ("batch_norm", {}),
    ("reduce_l2_opset17", {}),
    ("reduce_l2_opset18", {}),
    ("log_domain", {}),
    ("float8_qdq", {}),
]

FLOAT8E4M3FN = 17


def e4m3_value(code):
    """The value of an e4m3fn code (bias 7, no infinities, NaN at S.1111.111)."""
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 0xF, code & 0x7
    if exponent == 0:
        return sign * mantissa * 2.0 ** -9
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


# The non-negative finite e4m3fn values, increasing with their codes.
E4M3_CODES = np.arange(0x7F)
E4M3_VALUES = np.array([e4m3_value(c) for c in E4M3_CODES])


def to_e4m3(x, saturate):
    """x rounded to the nearest e4m3fn value, ties to the even code, as the
    ONNX specification of float8 conversion says; NaN stays NaN; past 448
    the value saturates to ±448 or (without saturation) becomes NaN beyond
    the midpoint 464."""
    x = np.asarray(x, np.float64)
    magnitude = np.abs(x)
    if saturate:
        magnitude = np.minimum(magnitude, 448.0)
    with np.errstate(invalid="ignore"):
        hi = np.clip(np.searchsorted(E4M3_VALUES, magnitude), 1, len(E4M3_VALUES) - 1)
        lo = hi - 1
        d_lo = magnitude - E4M3_VALUES[lo]
        d_hi = E4M3_VALUES[hi] - magnitude
        pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (E4M3_CODES[hi] % 2 == 0))
        rounded = np.where(pick_hi, E4M3_VALUES[hi], E4M3_VALUES[lo])
        rounded = np.where(magnitude > 464.0, np.nan, rounded)
        rounded = np.where(magnitude == 464.0, 448.0, rounded)
        rounded = np.where(np.isnan(x), np.nan, rounded)
    return np.copysign(rounded, x)


def along(scale, axis, ndim):
    scale = np.asarray(scale, np.float64)
    if scale.ndim == 0 or scale.size == 1:
        return scale.reshape(())
    shape = [1] * ndim
    shape[axis] = scale.size
    return scale.reshape(shape)


def attrs_of(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def conv(x, w, b, a):
    spatial = x.ndim - 2
    kernel = list(w.shape[2:])
    strides = a.get("strides", [1] * spatial)
    dilations = a.get("dilations", [1] * spatial)
    pads = list(a.get("pads", [0] * 2 * spatial))
    auto_pad = a.get("auto_pad", b"NOTSET").decode()
    if auto_pad == "VALID":
        pads = [0] * 2 * spatial
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        for i in range(spatial):
            size = x.shape[2 + i]
            out = -(-size // strides[i])
            total = max(0, (out - 1) * strides[i] +
                        (kernel[i] - 1) * dilations[i] + 1 - size)
            small = total // 2
            begin = small if auto_pad == "SAME_UPPER" else total - small
            pads[i], pads[i + spatial] = begin, total - begin
    group = a.get("group", 1)
    xp = np.pad(x, [(0, 0), (0, 0)] +
                [(pads[i], pads[i + spatial]) for i in range(spatial)])
    out = [(xp.shape[2 + i] - dilations[i] * (kernel[i] - 1) - 1)
           // strides[i] + 1 for i in range(spatial)]
    n, m = x.shape[0], w.shape[0]
    cg, mg = x.shape[1] // group, m // group
    y = np.zeros([n, m] + out)
    for g in range(group):
        for k in np.ndindex(*kernel):
            window = [slice(None), slice(g * cg, (g + 1) * cg)]
            for i in range(spatial):
                start = k[i] * dilations[i]
                window.append(slice(start, start + strides[i] * (out[i] - 1)
                                    + 1, strides[i]))
            patch = xp[tuple(window)]
            weight = w[(slice(g * mg, (g + 1) * mg), slice(None)) + k]
            y[:, g * mg:(g + 1) * mg] += np.einsum("nc...,mc->nm...", patch,
                                                   weight)
    if b is not None:
        y += b.reshape([1, m] + [1] * spatial)
    return y


def channel(v, rank):
    return v.reshape([1, -1] + [1] * (rank - 2))


def normalize(x, axes, epsilon):
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon)


def evaluate(node, inputs, opset):
    a = attrs_of(node)
    op = node.op_type
    if op == "Conv":
        return conv(inputs[0], inputs[1],
                    inputs[2] if len(inputs) > 2 else None, a)
    if op == "InstanceNormalization":
        x, scale, bias = inputs
        y = normalize(x, tuple(range(2, x.ndim)), a.get("epsilon", 1e-5))
        return y * channel(scale, x.ndim) + channel(bias, x.ndim)
    if op == "GroupNormalization":
        x, scale, bias = inputs
        groups = a["num_groups"]
        grouped = x.reshape(x.shape[0], groups, -1)
        y = normalize(grouped, (2,), a.get("epsilon", 1e-5))
        if opset < 21:
            y = y * scale.reshape(1, -1, 1) + bias.reshape(1, -1, 1)
            return y.reshape(x.shape)
        y = y.reshape(x.shape)
        return y * channel(scale, x.ndim) + channel(bias, x.ndim)
    if op == "BatchNormalization":
        x, scale, bias, mean, var = inputs
        r = x.ndim
        return ((x - channel(mean, r)) / np.sqrt(channel(var, r) +
                                                 a.get("epsilon", 1e-5))
                * channel(scale, r) + channel(bias, r))
    if op in ("ReduceL2", "ReduceL1", "ReduceSumSquare"):
        x = inputs[0]
        axes = a.get("axes")
        if axes is None and len(inputs) > 1:
            axes = [int(axis) for axis in inputs[1]]
        axes = tuple(range(x.ndim)) if not axes else tuple(axes)
        keep = bool(a.get("keepdims", 1))
        if op == "ReduceL2":
            return np.sqrt((x * x).sum(axis=axes, keepdims=keep))
        if op == "ReduceL1":
            return np.abs(x).sum(axis=axes, keepdims=keep)
        return (x * x).sum(axis=axes, keepdims=keep)
    if op == "Add":
        return inputs[0] + inputs[1]
    if op == "LogSoftmax":
        x = inputs[0]
        axis = a.get("axis", -1)
        with np.errstate(invalid="ignore", divide="ignore"):
            shifted = x - x.max(axis=axis, keepdims=True)
            return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    if op == "ReduceLogSumExp":
        x = inputs[0]
        axes = tuple(int(axis) for axis in inputs[1])
        with np.errstate(divide="ignore"):
            return np.log(np.exp(x).sum(axis=axes, keepdims=bool(a.get("keepdims", 1))))
    if op == "Div":
        return inputs[0] / inputs[1]
    if op == "QuantizeLinear":
        # f32 division (x and the scale are f32), then float8 rounding.
        x, scale = inputs[0], along(inputs[1], a.get("axis", 1), inputs[0].ndim)
        quotient = (x.astype(np.float32) / scale.astype(np.float32)).astype(np.float64)
        return to_e4m3(quotient, a.get("saturate", 1))
    if op == "DequantizeLinear":
        x, scale = inputs[0], along(inputs[1], a.get("axis", 1), inputs[0].ndim)
        return (x * scale).astype(np.float32).astype(np.float64)
    if op == "Cast":
        if a["to"] == FLOAT8E4M3FN:
            return to_e4m3(inputs[0].astype(np.float32), a.get("saturate", 1))
        return inputs[0]
    if op == "Mul":
        return inputs[0] * inputs[1]
    raise NotImplementedError(op)


def run_case(name, shapes, translate, runner, work, rng):
    model = onnx.load(os.path.join(INPUTS, name + ".onnx"))
    opset = next(o.version for o in model.opset_import if o.domain == "")
    graph = model.graph
    values = {}
    for t in graph.initializer:
        if t.data_type == FLOAT8E4M3FN:
            values[t.name] = np.array([e4m3_value(c) for c in t.int32_data],
                                      np.float64).reshape(tuple(t.dims))
            continue
        array = numpy_helper.to_array(t)
        values[t.name] = (array.astype(np.float64)
                          if array.dtype.kind == "f" else array)
    tag = "-".join([name] + ["x".join(map(str, s)) for s in shapes.values()])
    args = []
    for index, vi in enumerate(graph.input):
        if vi.name in values:
            continue
        shape = shapes.get(vi.name) or [d.dim_value for d in
                                        vi.type.tensor_type.shape.dim]
        data = rng.standard_normal(shape).astype(np.float32)
        values[vi.name] = data.astype(np.float64)
        path = os.path.join(work, "%s.in%d.npy" % (tag, index))
        np.save(path, data)
        args.append("--input=" + path)
    for node in graph.node:
        inputs = [values[i] if i else None for i in node.input]
        values[node.output[0]] = evaluate(node, [i for i in inputs
                                                 if i is not None], opset)
    mlir = os.path.join(work, tag + ".mlir")
    subprocess.run([translate, "--import-onnx",
                    os.path.join(INPUTS, name + ".onnx"), "-o", mlir],
                   check=True)
    outputs = [os.path.join(work, "%s.out%d.npy" % (tag, k))
               for k in range(len(graph.output))]
    subprocess.run([runner, mlir] + args +
                   ["--output=" + o for o in outputs], check=True)
    ok = True
    for out, path in zip(graph.output, outputs):
        expected = values[out.name]
        actual = np.load(path).astype(np.float64)
        if actual.shape != expected.shape:
            print("FAIL %s %s: shape %s, expected %s" %
                  (tag, out.name, actual.shape, expected.shape))
            ok = False
            continue
        # Non-finite values (a row of -inf) must match exactly, place and
        # sign; the finite ones within the tolerance.
        same = (np.isnan(actual) == np.isnan(expected)).all() and (
            actual[np.isinf(expected)] == expected[np.isinf(expected)]).all() and (
            np.isinf(actual) == np.isinf(expected)).all()
        finite = np.isfinite(expected)
        error = np.abs(actual[finite] - expected[finite]).max() if finite.any() else 0.0
        scale = max(np.abs(expected[finite]).max() if finite.any() else 0.0, 1.0)
        passed = same and error <= 1e-5 * scale
        ok &= passed
        print("%s %s %s %s max-abs-error %.2e" %
              ("PASS" if passed else "FAIL", tag, out.name,
               "x".join(map(str, actual.shape)), error))
    return ok


def main():
    translate, runner, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(3)
    results = [run_case(name, shapes, translate, runner, work, rng)
               for name, shapes in CASES]
    print("%d of %d graphs passed" % (sum(results), len(results)))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
