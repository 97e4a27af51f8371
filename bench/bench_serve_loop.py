#!/usr/bin/env python3
"""Case (c) of the serving benchmark: examples/serve.py's continuous-batching
loop against transformers' compiled static-cache generation, on the same
requests.

    python3 bench/bench_serve_loop.py --package PKG [--requests 64]
        [--layers 16] [--budget 2048] [--json OUT]

PKG: `kilnc examples/serve_sites.mlir -o PKG`.

Both serve the same requests of a Llama-3.2-1B-shaped model with random
weights (prompts of 32 to 1024 tokens, 16 to 128 new tokens each, all
arriving at once):
  kiln-loop         examples/serve.py's loop: chunked prefill and decodes in
                    ragged launches under a token budget, pages taken and
                    given back, decode-only steps replayed as CUDA graphs.
                    One warm-up pass (graph captures) first, then the timed
                    pass on fresh requests.
  hf-static-compiled  transformers' LlamaForCausalLM, the requests as one
                    batch (prompts left-padded to the longest), `generate`
                    over a static cache with the forward under
                    torch.compile(mode="reduce-overhead", fullgraph=True),
                    as transformers documents it; every row generates the
                    longest request's count, and only each request's own
                    count is useful. One warm-up call (compilation), then
                    the timed call.
Tokens/s counts useful tokens only (each request's own new tokens) over
the wall time from the first prompt token to the last token.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

import kiln  # noqa: E402
from generate import Model, make_weights  # noqa: E402
from serve import (check_against_sdpa, llama_1b, make_requests,  # noqa: E402
                   new_server, serve)


def kiln_loop(options, cfg):
    device = torch.device("cuda")
    model = Model(cfg, make_weights(cfg, device, torch.bfloat16))
    site = next(s for s in kiln.Package(options.package).sites if s.ragged)
    requests = make_requests(cfg, options.requests, options.seed, spread=0)
    server = new_server(model, site, requests, options.max_batch, device)
    serve(server, requests, options.budget, options.max_batch)  # warm-up
    requests = make_requests(cfg, options.requests, options.seed, spread=0)
    result = serve(server, requests, options.budget, options.max_batch)
    checks, _ = check_against_sdpa(model, requests, device)
    useful = sum(r.max_new for r in requests)
    assert result["generated"] == useful, (result["generated"], useful)
    del server, model
    torch.cuda.empty_cache()
    return {"seconds": result["seconds"], "useful": useful,
            "steps": result["steps"], "check": checks,
            "step_times": result["step_times"]}


def hf_static_compiled(options, cfg):
    from bench_e2e import hf_llama

    requests = make_requests(cfg, options.requests, options.seed, spread=0)
    longest = max(len(r.prompt) for r in requests)
    new = max(r.max_new for r in requests)
    model = hf_llama(cfg, longest + new + 16)
    ids = torch.zeros(len(requests), longest, dtype=torch.long)
    mask = torch.zeros(len(requests), longest, dtype=torch.long)
    for row, request in enumerate(requests):
        ids[row, longest - len(request.prompt):] = torch.tensor(request.prompt)
        mask[row, longest - len(request.prompt):] = 1
    ids, mask = ids.cuda(), mask.cuda()
    # transformers compiles the decoding forward itself over a static cache
    # (its compile_config: fullgraph, CUDA graphs); compiling model.forward
    # by hand as well makes generate read CUDA-graph outputs a later replay
    # overwrote.
    extra = {}
    try:
        from transformers import CompileConfig

        extra["compile_config"] = CompileConfig(fullgraph=True,
                                                mode="reduce-overhead")
    except ImportError:
        pass

    def run():
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=new,
                                 min_new_tokens=new, do_sample=False,
                                 cache_implementation="static", pad_token_id=0,
                                 **extra)
        torch.cuda.synchronize()
        return time.perf_counter() - start, out

    warm, _ = run()  # compiles
    seconds, out = run()
    assert out.shape == (len(requests), longest + new), out.shape
    useful = sum(r.max_new for r in requests)
    compiled = bool(getattr(model, "_compiled_call", None))
    return {"seconds": seconds, "useful": useful, "warmup_seconds": warm,
            "generated_rows": len(requests) * new, "compiled": compiled}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--package", required=True)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--budget", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--max-batch", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json")
    options = parser.parse_args()
    cfg = llama_1b(options.layers)
    case = f"serve-{options.requests}req"
    rows = []

    kiln_result = kiln_loop(options, cfg)
    errors = [err for err, _ in kiln_result["check"]]
    ok = all(err < 5e-2 for err in errors)
    print(f"kiln-loop: logits vs SDPA relative errors {errors} "
          f"({'PASS' if ok else 'FAIL'})", flush=True)
    if not ok:
        return 1
    rate = kiln_result["useful"] / kiln_result["seconds"]
    print(f"kiln-loop: {kiln_result['useful']} tokens in "
          f"{kiln_result['seconds']:.3f} s, {rate:.0f} tokens/s, "
          f"{kiln_result['steps']} steps", flush=True)
    rows.append({"case": case, "impl": "kiln-loop",
                 "ms": kiln_result["seconds"] * 1e3, "tokens_per_s": rate,
                 "TBs": None, "TFLOPs": None})
    try:
        hf = hf_static_compiled(options, cfg)
        hf_rate = hf["useful"] / hf["seconds"]
        print(f"hf-static-compiled: {hf['useful']} useful tokens "
              f"({hf['generated_rows']} generated) in {hf['seconds']:.3f} s, "
              f"{hf_rate:.0f} useful tokens/s (warm-up call with "
              f"compilation {hf['warmup_seconds']:.1f} s; forward compiled "
              f"by transformers: {hf['compiled']})", flush=True)
        rows.append({"case": case, "impl": "hf-static-compiled",
                     "ms": hf["seconds"] * 1e3, "tokens_per_s": hf_rate,
                     "TBs": None, "TFLOPs": None})
        print(f"kiln-loop / hf-static-compiled: {rate / hf_rate:.2f}x")
    except Exception as error:  # noqa: BLE001 (report what transformers did)
        print(f"hf-static-compiled: failed: {type(error).__name__}: "
              f"{str(error)[:2000]}", flush=True)
    if options.json:
        Path(options.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
