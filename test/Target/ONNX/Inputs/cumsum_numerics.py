"""CumSum imported (kiln-translate --import-onnx) and run on the CPU
(kiln-cpu-runner) against numpy, for each attribute and axis: f32 and int64
(position counts over a padding mask), exclusive, reverse, both, the first
and a middle axis of a 3-D tensor.

    cumsum_numerics.py KILN_TRANSLATE KILN_CPU_RUNNER WORKDIR
"""

import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

translate, runner, workdir = sys.argv[1:4]
os.makedirs(workdir, exist_ok=True)
rng = np.random.default_rng(3)
failures = count = 0


def case(name, x, axis, exclusive=0, reverse=0):
    global failures, count
    count += 1
    elem = TensorProto.INT64 if x.dtype == np.int64 else TensorProto.FLOAT
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive,
                            reverse=reverse)
    graph = helper.make_graph(
        [node], name, [helper.make_tensor_value_info("x", elem, list(x.shape))],
        [helper.make_tensor_value_info("y", elem, list(x.shape))],
        [numpy_helper.from_array(np.array(axis, np.int64), "axis")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    base = os.path.join(workdir, name)
    onnx.save(model, base + ".onnx")
    np.save(base + ".in.npy", x)
    steps = [[translate, "--import-onnx", base + ".onnx", "-o", base + ".mlir"],
             [runner, base + ".mlir", f"--input={base}.in.npy", f"--output={base}.out.npy"]]
    for step in steps:
        result = subprocess.run(step, capture_output=True, text=True)
        if result.returncode != 0:
            print(f"FAIL {name}: {' '.join(step[:2])}: {result.stderr.strip()}")
            failures += 1
            return
    got = np.load(base + ".out.npy")
    moved = np.moveaxis(x, axis, -1)
    if reverse:
        moved = moved[..., ::-1]
    want = np.cumsum(moved, axis=-1)
    if exclusive:
        want = np.concatenate([np.zeros_like(want[..., :1]), want[..., :-1]], axis=-1)
    if reverse:
        want = want[..., ::-1]
    want = np.moveaxis(want, -1, axis)
    ok = got.shape == want.shape and np.allclose(got, want, rtol=1e-6, atol=1e-5)
    print(f"{'ok' if ok else 'FAIL'} {name}")
    failures += not ok


mask = (rng.random((3, 9)) < 0.7).astype(np.int64)
case("int64-mask", mask, 1)
case("f32", rng.standard_normal((2, 7)).astype(np.float32), 1)
case("f32-exclusive", rng.standard_normal((2, 7)).astype(np.float32), -1, exclusive=1)
case("f32-reverse", rng.standard_normal((2, 7)).astype(np.float32), 1, reverse=1)
case("f32-reverse-exclusive", rng.standard_normal((2, 7)).astype(np.float32), 1,
     exclusive=1, reverse=1)
case("f32-3d-axis0", rng.standard_normal((5, 3, 4)).astype(np.float32), 0)
case("int64-3d-axis1", rng.integers(-50, 50, (2, 6, 3)).astype(np.int64), 1)
print(f"{count - failures} of {count} passed")
sys.exit(1 if failures else 0)
