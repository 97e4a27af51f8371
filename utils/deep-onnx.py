#!/usr/bin/env python3
"""Writes a decoder of N layers as an ONNX graph in the op forms torch's
exporter writes (MatMul projections, Reshape and Transpose into heads, the
scores scaled by Mul, a causal mask added, Softmax, MatMul by V; a SiLU MLP
and residual adds), its weights as initializers, for timing kilnc on a deep
graph (the tree holds no export of 32 layers, and a real one of that depth is
hundreds of MB).

    utils/deep-onnx.py OUT.onnx [--layers 32] [--width 512] [--heads 8] [--seq 128]
"""

from __future__ import annotations

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    options = parser.parse_args()
    width, heads, seq = options.width, options.heads, options.seq
    dim = width // heads
    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def node(op: str, inputs: list, name: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [name], name=f"node_{name}", **attrs))
        return name

    heads_shape = const("heads_shape", np.array([1, seq, heads, dim], np.int64))
    flat_shape = const("flat_shape", np.array([1, seq, width], np.int64))
    scale = const("scale", np.array(dim ** -0.5, np.float32))
    causal = np.triu(np.full((seq, seq), -np.inf, np.float32), 1)
    mask = const("causal_mask", causal[None, None])
    x = "x"
    for layer in range(options.layers):
        p = f"l{layer}"

        def weight(name: str, rows: int, cols: int) -> str:
            value = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
            return const(f"m.layers.{layer}.{name}.weight", value)

        projected = {}
        for role in ("q", "k", "v"):
            linear = node("MatMul", [x, weight(role, width, width)], f"{p}_{role}_linear")
            view = node("Reshape", [linear, heads_shape], f"{p}_{role}_view")
            perm = [0, 2, 3, 1] if role == "k" else [0, 2, 1, 3]
            projected[role] = node("Transpose", [view], f"{p}_{role}_t", perm=perm)
        scores = node("MatMul", [projected["q"], projected["k"]], f"{p}_scores")
        scaled = node("Mul", [scores, scale], f"{p}_scaled")
        masked = node("Add", [scaled, mask], f"{p}_masked")
        probs = node("Softmax", [masked], f"{p}_probs", axis=-1)
        context = node("MatMul", [probs, projected["v"]], f"{p}_context")
        merged = node("Transpose", [context], f"{p}_merged", perm=[0, 2, 1, 3])
        flat = node("Reshape", [merged, flat_shape], f"{p}_flat")
        out = node("MatMul", [flat, weight("o", width, width)], f"{p}_o")
        x = node("Add", [x, out], f"{p}_residual1")
        up = node("MatMul", [x, weight("up", width, 4 * width)], f"{p}_up")
        gate = node("Sigmoid", [up], f"{p}_sigmoid")
        act = node("Mul", [up, gate], f"{p}_silu")
        down = node("MatMul", [act, weight("down", 4 * width, width)], f"{p}_down")
        x = node("Add", [x, down], f"{p}_residual2")
    graph = helper.make_graph(
        nodes, f"decoder_{options.layers}_layers",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, width])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, seq, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    onnx.save(model, options.out)
    print(f"{options.out}: {options.layers} layers, {len(nodes)} nodes, "
          f"{sum(i.ByteSize() for i in inits) / 1e6:.1f} MB of weights")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
