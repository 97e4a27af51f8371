#!/usr/bin/env python3
"""Checks attention trained through Kiln under PyTorch autograd on the GPU.

    python3 test/gpu/check_autograd.py [--json OUT]

For each case, the training sites of its spec are compiled through the site
cache (kilnc: KILN_KILNC or the wheel's), and
``kiln.torch_ops.attention_trainable`` runs eagerly and under
``torch.compile(fullgraph=True)`` (AOTAutograd traces
``torch.ops.kiln.attention_lse`` and its registered backward). The output
and the gradients of Q, K and V (and of a run-time scale factor, a learned
temperature, scalar or one a head) of ``loss = Σ out·g`` are compared with
float64 autograd of the attention's definition (check_backward.py's
reference): ||Δ|| / ||ref|| ≤ 1e-2 (f16, bf16), 1e-4 (f32). Prints one
line a case and mode, writes JSON, exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import kiln.torch_ops as kops  # noqa: E402
from check_backward import TOLERANCE, _reference, _relative  # noqa: E402
from kiln.site import Operand, SiteSpec  # noqa: E402
from kiln.site_cache import training_sites_for  # noqa: E402

CASES = [
    dict(name="bf16-d64-causal-gqa", dtype="bf16", b=2, hq=8, hkv=2, sq=300,
         sk=300, d=64, causal=True),
    dict(name="f16-d128-key-padding", dtype="f16", b=2, hq=4, hkv=4, sq=130,
         sk=130, d=128, mask="bool-keys"),
    dict(name="bf16-d64-softcap-scale", dtype="bf16", b=1, hq=4, hkv=2,
         sq=200, sk=200, d=64, causal=True, softcap=20.0, scale_factor=[0.8]),
    dict(name="f32-d64-window", dtype="f32", b=1, hq=2, hkv=1, sq=150,
         sk=150, d=64, causal=True, window=40),
]
TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16,
                "f32": torch.float32}


def spec_of(case) -> SiteSpec:
    return SiteSpec(
        case["dtype"], case["d"], case.get("dv", case["d"]),
        1.0 / math.sqrt(case["d"]), causal=bool(case.get("causal")),
        mask=Operand("i1", 4) if case.get("mask") else None,
        scale_factor=Operand("f32", 1) if case.get("scale_factor") else None,
        softcap=case.get("softcap"), window=case.get("window"))


def run_case(case, compiled: bool):
    forward, backward = training_sites_for(spec_of(case))
    dtype = TORCH_DTYPES[case["dtype"]]
    b, hq, hkv, sq, sk, d = (case[k] for k in ("b", "hq", "hkv", "sq", "sk",
                                                "d"))
    dev = "cuda"

    def rand(*shape):
        return (torch.rand(shape, device=dev) * 2 - 1).to(dtype)

    q, k, v = rand(b, hq, sq, d), rand(b, hkv, sk, d), rand(b, hkv, sk, d)
    g = rand(b, hq, sq, d)
    mask = None
    if case.get("mask"):
        mask = torch.rand(b, 1, 1, sk, device=dev) > 0.3
        mask[..., 0] = True
    # A learned temperature: the factor is a leaf that needs a gradient.
    factor = (torch.tensor(case["scale_factor"], device=dev).requires_grad_(True)
              if case.get("scale_factor") else None)

    def step(q, k, v, factor):
        out = kops.attention_trainable(forward, backward, q, k, v, mask=mask,
                                       scale_factor=factor)
        return out, (out.float() * g.float()).sum()

    if compiled:
        step = torch.compile(step, fullgraph=True)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out, loss = step(*leaves, factor)
    loss.backward()
    torch.cuda.synchronize()
    ref = _reference(case, q, k, v, mask, None, factor, g,
                     factor_grad=factor is not None)
    ref_out, _, ref_dq, ref_dk, ref_dv = ref[:5]
    errors = {"out": _relative(out.detach(), ref_out),
              "dq": _relative(leaves[0].grad, ref_dq),
              "dk": _relative(leaves[1].grad, ref_dk),
              "dv": _relative(leaves[2].grad, ref_dv)}
    if factor is not None:
        errors["dfactor"] = (_relative(factor.grad, ref[5]) if factor.grad is not None
                             else math.inf)
    tolerance = TOLERANCE[case["dtype"]]
    return {"case": case["name"], "compiled": compiled, "errors": errors,
            "passed": all(e <= tolerance for e in errors.values())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    for case in CASES:
        for compiled in (False, True):
            try:
                result = run_case(case, compiled)
            except Exception as error:  # reported, never hidden
                import traceback
                traceback.print_exc()
                result = {"case": case["name"], "compiled": compiled,
                          "passed": False,
                          "error": f"{type(error).__name__}: {error}"}
            results.append(result)
            errors = " ".join(f"{k} {v:.2e}" for k, v in
                              result.get("errors", {}).items())
            print(f"{'PASS' if result['passed'] else 'FAIL'} {case['name']} "
                  f"{'compiled' if compiled else 'eager'}: "
                  f"{errors or result.get('error')}", flush=True)
    passed = sum(r["passed"] for r in results)
    print(f"{passed} passed, {len(results) - passed} failed")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
