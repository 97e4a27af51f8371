"""Writes a copy of an ONNX model whose graph inputs have symbolic batch (and,
with --seq, sequence) dimensions, as exports with dynamic axes have."""

import sys

import onnx

source, target = sys.argv[1], sys.argv[2]
model = onnx.load(source)
for graph_input in model.graph.input:
    dims = graph_input.type.tensor_type.shape.dim
    dims[0].dim_param = "batch"
    if "--seq" in sys.argv and len(dims) == 2:
        dims[1].dim_param = "seq"
del model.graph.value_info[:]
onnx.save(model, target)
