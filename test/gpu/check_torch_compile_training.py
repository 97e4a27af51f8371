#!/usr/bin/env python3
"""Checks the torch.compile backend on training graphs on the GPU.

    python3 test/gpu/check_torch_compile_training.py [--only a,b] [--seq N] [--json OUT]

Each hand-written module of both zoos (check_torch_compile.py's and
research_zoo.py's) is trained one step under
``torch.compile(backend="kiln", options={"training": "kiln"})``: its sites
run Kiln's forward keeping the log-sum-exp and differentiate through Kiln's
backward kernels. The output and the gradient of every parameter and of the
floating inputs, for ``loss = Σ out·g``, are compared with float64 eager
autograd of the same module (||Δ|| / ||ref|| ≤ 1e-2 in bf16, beside eager
bf16's own error). A module passes when its gradients are within bounds and
every site was rewritten, or was left to Inductor for a reason Kiln's
backward states (a mask or bias that needs a gradient). Prints one
line a module, writes JSON, exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import check_torch_compile as hand  # noqa: E402
import kiln  # noqa: E402,F401
import kiln.dynamo  # noqa: E402
import research_zoo  # noqa: E402

TOLERANCE = 1e-2
#: Why a site may stay in Inductor on a training graph.
ALLOWED = "needs a gradient, which Kiln's backward does not give"


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / max(float(want.norm()), 1e-30))


def step(module: torch.nn.Module, inputs: List[Any], g: torch.Tensor):
    """One forward and backward: the output and every gradient (parameters
    by name, then the floating inputs)."""
    module.zero_grad(set_to_none=True)
    inputs = [x.detach().clone().requires_grad_(True)
              if isinstance(x, torch.Tensor) and x.is_floating_point() else x
              for x in inputs]
    out = module(*inputs)
    (out.double() * g).sum().backward()
    grads = {name.replace("_orig_mod.", ""): p.grad
             for name, p in module.named_parameters() if p.grad is not None}
    grads.update({f"input{i}": x.grad for i, x in enumerate(inputs)
                  if isinstance(x, torch.Tensor) and x.grad is not None})
    return out.detach(), grads


def check(name: str, module: torch.nn.Module, inputs: List[Any]) -> Dict[str, Any]:
    # Eval mode (no dropout draws: the float64 reference must see the same
    # function); the graph still needs gradients, which is what the backend
    # goes by.
    module = module.eval()
    torch.manual_seed(1)
    g = torch.randn(module(*inputs).shape, device="cuda", dtype=torch.float64)
    wide = copy.deepcopy(module).double()
    want_out, want = step(wide, [x.double() if isinstance(x, torch.Tensor)
                                 and x.is_floating_point() else x for x in inputs], g)
    _, eager = step(module, inputs, g)
    start = len(kiln.dynamo.reports)
    torch._dynamo.reset()
    compiled = torch.compile(module, backend="kiln", options={"training": "kiln"})
    got_out, got = step(compiled, inputs, g)
    entries = kiln.dynamo.reports[start:]
    found = sum(len(e["report"]["sites"]) for e in entries if e.get("report"))
    rewritten = sum(len(e["rewritten"]) for e in entries)
    reasons = [e["fallback"] for e in entries if e.get("fallback")]
    reasons += [r for e in entries for r in e.get("skipped", {}).values()]
    errors = {key: relative(got[key], want[key]) for key in want if key in got}
    own = {key: relative(eager[key], want[key]) for key in want if key in eager}
    missing = sorted(set(want) - set(got))
    explained = rewritten + sum(ALLOWED in r for r in reasons) >= found > 0
    ok = (not missing and relative(got_out, want_out) <= TOLERANCE
          and all(errors[k] <= max(TOLERANCE, 2 * own.get(k, 0.0)) for k in errors)
          and explained)
    return {"module": name, "ok": ok, "sites": found, "rewritten": rewritten,
            "out_error": relative(got_out, want_out),
            "worst_grad": max(errors, key=errors.get) if errors else None,
            "worst_error": max(errors.values()) if errors else None,
            "eager_worst_error": max(own.values()) if own else None,
            "missing": missing, "reasons": reasons,
            "training": [e.get("training") for e in entries]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only")
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--json")
    options = parser.parse_args()
    cases = hand.zoo(options.batch, options.seq) + research_zoo.zoo(
        options.batch, options.seq, hand.DEVICE, hand.DTYPE)
    only = set(options.only.split(",")) if options.only else None
    rows = []
    for name, module, make, _ in cases:
        if only and name not in only:
            continue
        try:
            row = check(name, module.to(hand.DEVICE, hand.DTYPE), list(make()))
        except Exception as error:  # noqa: BLE001 (one module's failure is reported)
            row = {"module": name, "ok": False,
                   "error": f"{type(error).__name__}: {str(error)[:400]}"}
        rows.append(row)
        print(f"{'PASS' if row['ok'] else 'FAIL'} {name}: "
              + json.dumps({k: v for k, v in row.items() if k not in ("module", "ok")}),
              flush=True)
    failed = sum(not r["ok"] for r in rows)
    print(f"{len(rows) - failed} passed, {failed} failed")
    if options.json:
        Path(options.json).write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
