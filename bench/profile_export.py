#!/usr/bin/env python3
"""Where the `torch.compile(backend="kiln")` export step spends its time:
Dynamo's graph of each model is captured once, then exported in the ways
the backend could export it, each timed on its own in this process:

- `onnx`: ``torch.onnx.export(dynamo=True)`` as the backend calls it;
- `onnx-noopt`: the same with ``optimize=False``;
- `export`: ``torch.export.export(strict=False)`` alone;
- `decompose`: ``run_decompositions()`` of that program;
- `onnx-from-ep`: ``torch.onnx.export`` of the exported program (the
  translation and optimisation without the trace).

The first model pays the exporter's imports; each way is timed twice per
model (first and second call), and with --profile the first model's `onnx`
export is profiled (cProfile, the top functions by cumulative time).

    python3 bench/profile_export.py [--models a,b] [--seq 4096] [--tokens 16384]
        [--profile 30] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import bench_torch_compile as bench  # noqa: E402
import kiln.dynamo  # noqa: E402


def captured(name: str, batch: int, seq: int) -> List[Any]:
    """Dynamo's graphs of the model (gm, example inputs), as the backend
    would receive them."""
    model = bench.build(name, batch, seq)
    inputs = bench.model_inputs(name, batch, seq)
    graphs: List[Any] = []

    def record(gm: Any, example_inputs: Any) -> Callable:
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=record, dynamic=False)(*inputs)
    return graphs


def timed(function: Callable[[], Any]) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    with warnings.catch_warnings(), kiln.dynamo._outside_dynamo():
        warnings.simplefilter("ignore")
        function()
    return time.perf_counter() - start


def ways(gm: Any, example_inputs: List[Any]) -> Dict[str, Callable[[], Any]]:
    source, positions, _ = kiln.dynamo._sizes_from_tensors(gm, example_inputs)
    tensors = tuple(example_inputs[i].detach().clone() for i in positions)
    state: Dict[str, Any] = {}

    def export() -> Any:
        state["ep"] = torch.export.export(source, tensors, strict=False)
        return state["ep"]

    def decompose() -> Any:
        return state["ep"].run_decompositions()

    return {
        "onnx": lambda: torch.onnx.export(source, tensors, dynamo=True, verbose=False),
        "onnx-noopt": lambda: torch.onnx.export(source, tensors, dynamo=True,
                                                verbose=False, optimize=False),
        "export": export,
        "decompose": decompose,
        "onnx-from-ep": lambda: torch.onnx.export(state["ep"], tensors, dynamo=True,
                                                  verbose=False),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="mqa-einsum,einsum-tril,t5_encoder")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--profile", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    batch = max(1, args.tokens // args.seq)
    rows = []
    profiled = False
    for name in args.models.split(","):
        for number, (gm, example_inputs) in enumerate(captured(name, batch, args.seq)):
            if not kiln.dynamo.may_hold_attention(gm):
                continue
            row: Dict[str, Any] = {"model": name, "graph": number,
                                   "nodes": len(gm.graph.nodes)}
            if not profiled and args.profile:
                profiler = cProfile.Profile()
                profiler.enable()
                first = timed(ways(gm, example_inputs)["onnx"])
                profiler.disable()
                text = io.StringIO()
                pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(
                    args.profile)
                print(f"profile of the first export ({name}, {first:.2f} s):")
                print(text.getvalue())
                profiled = True
            for round_ in ("first", "second"):
                for way, function in ways(gm, example_inputs).items():
                    try:
                        row[f"{way} {round_}"] = round(timed(function), 3)
                    except Exception as error:  # noqa: BLE001 (a way may not apply)
                        row[f"{way} {round_}"] = f"{type(error).__name__}: {str(error)[:120]}"
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
