#!/usr/bin/env python3
"""Where a model's forward spends its GPU time under Inductor alone, under
``torch.compile(backend="kiln")``, and with the graph the backend exports
compiled by Inductor without any site rewritten: the share of the
difference that the exported graph itself costs, apart from Kiln's sites.

    python3 bench/profile_torch_compile.py [--models gemma2,llama] [--seq 1024]
        [--tokens 4096] [--top 12] [--keep DIR]

For each model and variant: the forward's time (the median of 7 rounds of
about 20 ms, every variant in each round, as bench_torch_compile.py) and
(unless --no-profile) the kernels taking the most GPU time in one profiled
call, then the host calls taking the most CPU time.
With --keep, each graph's report, FX code and ONNX without its weights,
and a chrome trace of each variant, are kept in DIR.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import bench_torch_compile as bench  # noqa: E402
from keep_graphs import keep_graphs  # noqa: E402
import kiln.dynamo  # noqa: E402


def top_kernels(function, count: int, trace: Optional[Path] = None) -> str:
    """The kernels taking the most GPU time in one call of `function`, then
    the host calls taking the most CPU time (copies and synchronisations
    that stop the host running ahead of the GPU show here)."""
    from torch.profiler import ProfilerActivity, profile

    function()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        function()
        torch.cuda.synchronize()
    if trace is not None:
        prof.export_chrome_trace(str(trace))
    events = prof.key_averages()
    return (events.table(sort_by="self_cuda_time_total", row_limit=count,
                         max_name_column_width=70)
            + events.table(sort_by="self_cpu_time_total", row_limit=count,
                           max_name_column_width=70))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="gemma2,llama")
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--no-profile", action="store_true",
                        help="time the variants in turns, profile none")
    parser.add_argument("--keep", type=Path, default=None,
                        help="copy each graph's report, FX code and weightless "
                             "ONNX, and a chrome trace of each variant, here")
    options = parser.parse_args()
    os.environ["KILN_VERIFY"] = "0"
    if options.keep:
        os.environ["KILN_KEEP_GRAPHS"] = "1"
    rewrite = kiln.dynamo._rewrite

    def unrewritten(module, report, entry, choose=None):
        return 1  # the exported graph as it is, as if a site were rewritten

    batch = max(options.tokens // options.seq, 1)
    for name in options.models.split(","):
        model = bench.build(name, batch, options.seq)
        inputs = bench.model_inputs(name, batch, options.seq)
        every = {"kiln": {"choose": "kiln"}}
        variants = {
            "inductor": lambda model: torch.compile(model),
            "kiln (every site)": lambda model: torch.compile(
                model, backend="kiln", options=every),
            "kiln (default: timed)": lambda model: torch.compile(
                model, backend="kiln"),
            "exported, not rewritten": lambda model: torch.compile(
                model, backend="kiln", options=every),
        }
        compiled, choices = {}, {}
        with torch.no_grad():
            torch._dynamo.reset()
            for variant, make in variants.items():
                # Each variant on its own copy of the model: Dynamo keeps one
                # compiled frame per module object, so all stay compiled and
                # are timed in turns below.
                copy_of = copy.deepcopy(model)
                kiln.dynamo._rewrite = unrewritten if variant.startswith("exported") else rewrite
                compiled[variant] = make(copy_of)
                compiled[variant](*inputs)
                kiln.dynamo._rewrite = rewrite
                entry = kiln.dynamo.reports[-1] if kiln.dynamo.reports else {}
                choices[variant] = (f"{entry.get('graph_choice') or ''} "
                                    f"{entry.get('fallback') or ''}")
            times = bench.time_interleaved(
                {variant: (lambda f=f: f(*inputs)) for variant, f in compiled.items()})
            for variant, function in compiled.items():
                print(f"== {name} b{batch} s{options.seq} {variant}: "
                      f"{times[variant]:.3f} ms (timed in turns) {choices[variant]}",
                      flush=True)
                if options.no_profile:
                    continue
                trace = None
                if options.keep:
                    options.keep.mkdir(parents=True, exist_ok=True)
                    trace = options.keep / (f"{name}-" + "".join(
                        c if c.isalnum() else "-" for c in variant) + ".trace.json")
                print(top_kernels(lambda: function(*inputs), options.top, trace),
                      flush=True)
        if options.keep:
            keep_graphs(options.keep, name)
        del model
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
