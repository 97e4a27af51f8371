#!/usr/bin/env python3
"""Checks Kiln's training kernels on the GPU: the forward that keeps its
log-sum-exp, and kiln.attention_grad's two passes, against float64 torch.

    # Where kilnc is (the build machine): one package a case.
    python3 test/gpu/check_backward.py --emit DIR [--kilnc build/bin/kilnc]
    # On the GPU, from those packages:
    python3 test/gpu/check_backward.py --run DIR [--json OUT] [--cases a,b]
    compute-sanitizer --tool memcheck python3 test/gpu/check_backward.py \\
        --run DIR --small

Each case is a function holding `kiln.attention` with its `lse` result and
the `kiln.attention_grad` of it, compiled by kilnc into a package whose
manifest holds the forward's site (which keeps its lse) and the backward's
(kind "attention_grad": the query pass, dQ and D, then the key pass, dK and
dV). Both are launched through the runtime (libkilnrt: KILN_RUNTIME_LIB, or
the build tree's) on torch's current stream, the backward with
kiln_site_launch_attention_grad.

Inputs are fresh random tensors (never zeros), every output is poisoned with
NaN before the launches, and sizes are odd (lengths not multiples of any
tile). The reference is the attention's definition in float64 with
autograd (GQA through repeat_interleave, so dK and dV sum each group);
Kiln's backward takes Kiln's own forward output and lse, as training does.
A case passes when out, lse (its finite entries, and -inf where the
reference has -inf), dQ, dK and dV are within ||Δ|| / ||ref|| ≤ 1e-2 (f16,
bf16) or 1e-4 (f32) and nothing is NaN. Prints one line a case, writes
JSON, exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]

# name: the attention a case computes (bhsd). mask: None, "bool-keys"
# ([B, 1, 1, Sk] key padding), "bool" ([B, 1, Sq, Sk]), "additive"
# ([B, 1, Sq, Sk] f32 with -inf). bias: None, "full" ([1, Hq, Sq, Sk]),
# "alibi" ([1, Hq, 1, Sk]).
CASES: List[Dict[str, Any]] = [
    dict(name="bf16-d64-causal-gqa", dtype="bf16", b=2, hq=8, hkv=2, sq=200,
         sk=200, d=64, causal=True),
    dict(name="f16-d128-full", dtype="f16", b=1, hq=4, hkv=4, sq=77, sk=300,
         d=128),
    dict(name="bf16-d64-window", dtype="bf16", b=1, hq=4, hkv=2, sq=257,
         sk=257, d=64, causal=True, window=32),
    dict(name="f16-d64-two-sided", dtype="f16", b=1, hq=2, hkv=1, sq=100,
         sk=130, d=64, window=16, window_right=8),
    dict(name="bf16-d64-softcap", dtype="bf16", b=1, hq=4, hkv=4, sq=150,
         sk=150, d=64, causal=True, softcap=30.0),
    dict(name="bf16-d64-key-padding", dtype="bf16", b=2, hq=4, hkv=4, sq=90,
         sk=90, d=64, mask="bool-keys"),
    dict(name="f16-d64-additive-bias", dtype="f16", b=2, hq=2, hkv=2, sq=65,
         sk=97, d=64, mask="additive", bias="full"),
    dict(name="bf16-d32-alibi", dtype="bf16", b=1, hq=8, hkv=8, sq=120,
         sk=120, d=32, causal=True, bias="alibi"),
    dict(name="f32-d64-mqa", dtype="f32", b=1, hq=6, hkv=1, sq=70, sk=70,
         d=64, causal=True),
    dict(name="bf16-mla-d96-dv64", dtype="bf16", b=1, hq=4, hkv=4, sq=100,
         sk=100, d=96, dv=64, causal=True),
    dict(name="bf16-d64-fill-empty-rows", dtype="bf16", b=1, hq=2, hkv=2,
         sq=130, sk=100, d=64, causal=True, masked_score=-1.0e4),
    dict(name="f16-d64-fill-min", dtype="f16", b=1, hq=2, hkv=2, sq=64,
         sk=48, d=64, mask="bool", masked_score=-3.4028234663852886e38),
    dict(name="f16-d64-scale-factor", dtype="f16", b=1, hq=4, hkv=2, sq=80,
         sk=80, d=64, causal=True, scale_factor=True),
]
SMALL = ("bf16-d64-causal-gqa", "f16-d64-additive-bias", "f32-d64-mqa")
TOLERANCE = {"bf16": 1e-2, "f16": 1e-2, "f32": 1e-4}


def _case_shapes(case: Dict[str, Any]) -> Dict[str, Any]:
    b, hq, hkv = case["b"], case["hq"], case["hkv"]
    sq, sk, d = case["sq"], case["sk"], case["d"]
    dv = case.get("dv", d)
    shapes = {"q": [b, hq, sq, d], "k": [b, hkv, sk, d], "v": [b, hkv, sk, dv],
              "o": [b, hq, sq, dv], "lse": [b, hq, sq]}
    mask = case.get("mask")
    if mask == "bool-keys":
        shapes["mask"] = [b, 1, 1, sk]
    elif mask in ("bool", "additive"):
        shapes["mask"] = [b, 1, sq, sk]
    bias = case.get("bias")
    if bias == "full":
        shapes["bias"] = [1, hq, sq, sk]
    elif bias == "alibi":
        shapes["bias"] = [1, hq, 1, sk]
    return shapes


def _scale(case: Dict[str, Any]) -> float:
    return 1.0 / math.sqrt(case["d"])


def case_mlir(case: Dict[str, Any]) -> str:
    """The function of a case: the forward with its lse and its gradient."""
    shapes = _case_shapes(case)
    dt = case["dtype"]

    def ty(name: str, element: str = dt) -> str:
        return "tensor<" + "x".join(str(x) for x in shapes[name]) + \
            "x" + element + ">"

    mask_element = "i1" if case.get("mask", "").startswith("bool") else "f32"
    args = [f"%q: {ty('q')}", f"%k: {ty('k')}", f"%v: {ty('v')}"]
    operands = ""
    if "mask" in shapes:
        args.append(f"%mask: {ty('mask', mask_element)}")
        operands += f" mask(%mask : {ty('mask', mask_element)})"
    if "bias" in shapes:
        args.append(f"%bias: {ty('bias', 'f32')}")
        operands += f" bias(%bias : {ty('bias', 'f32')})"
    if case.get("scale_factor"):
        args.append("%sf: tensor<f32>")
        operands += " scale_factor(%sf : tensor<f32>)"
    args.append(f"%do: {ty('o')}")
    attrs = [f"scale = {_scale(case)!r} : f32"]
    if case.get("causal"):
        attrs.append("causal")
    for key in ("window", "window_right"):
        if case.get(key) is not None:
            attrs.append(f"{key} = {case[key]} : i64")
    for key in ("softcap", "masked_score"):
        if case.get(key) is not None:
            attrs.append(f"{key} = {float(case[key])!r} : f32")
    attr_text = "{" + ", ".join(attrs) + "}"
    lse_ty = ty("lse", "f32")
    qkv = f"{ty('q')}, {ty('k')}, {ty('v')}"
    return "\n".join([
        f"// check_backward.py case {case['name']}",
        f"func.func @train({', '.join(args)}) -> ({ty('o')}, {lse_ty}, "
        f"{ty('q')}, {ty('k')}, {ty('v')}) {{",
        f"  %o, %lse = kiln.attention %q, %k, %v{operands} {attr_text} : "
        f"{qkv} -> {ty('o')}, {lse_ty}",
        f"  %dq, %dk, %dv = kiln.attention_grad %q, %k, %v, %o, %lse, %do"
        f"{operands} {attr_text} : {qkv}, {ty('o')}, {lse_ty}, {ty('o')} -> "
        f"{qkv}",
        f"  return %o, %lse, %dq, %dk, %dv : {ty('o')}, {lse_ty}, {qkv}",
        "}",
        "",
    ])


def emit(directory: Path, kilnc: str, names: Optional[List[str]]) -> int:
    failures = 0
    directory.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        if names and case["name"] not in names:
            continue
        source = directory / f"{case['name']}.mlir"
        source.write_text(case_mlir(case))
        (directory / f"{case['name']}.json").write_text(json.dumps(case))
        result = subprocess.run(
            [kilnc, str(source), "-o", str(directory / case["name"])],
            capture_output=True, text=True)
        status = "ok" if result.returncode == 0 else "FAILED"
        failures += result.returncode != 0
        print(f"{case['name']}: {status}")
        if result.returncode:
            print(result.stderr)
    return 1 if failures else 0


# --- On the GPU --------------------------------------------------------------

def _reference(case, q, k, v, mask, bias, factor, do, factor_grad=False):
    """out, lse and the gradients of Q, K, V in float64 (and, with
    `factor_grad`, the gradient of the run-time scale factor)."""
    import torch
    q, k, v = (t.double().detach().requires_grad_(True) for t in (q, k, v))
    group = case["hq"] // case["hkv"]
    ke = k.repeat_interleave(group, dim=1)
    ve = v.repeat_interleave(group, dim=1)
    f = None
    scale = _scale(case)
    if factor is not None:
        f = factor.double().detach().reshape(-1).requires_grad_(factor_grad)
        scale = scale * (f.view(1, -1, 1, 1) if f.numel() > 1 else f.view(()))
    s = (q @ ke.transpose(-1, -2)) * scale
    if case.get("softcap"):
        c = case["softcap"]
        s = c * torch.tanh(s / c)
    if bias is not None:
        s = s + bias.double()
    sq, sk = case["sq"], case["sk"]
    hidden = torch.zeros(sq, sk, dtype=torch.bool, device=q.device)
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    diagonal = i + (sk - sq)
    if case.get("causal"):
        hidden |= j > diagonal
    elif case.get("window_right") is not None:
        hidden |= j > diagonal + case["window_right"]
    if case.get("window") is not None:
        hidden |= j <= diagonal - case["window"]
    hidden = hidden.expand_as(s)
    if mask is not None:
        if mask.dtype == torch.bool:
            hidden = hidden | ~mask.expand_as(s)
        else:
            s = s + mask.double()
    fill = case.get("masked_score")
    s = torch.where(hidden, torch.full_like(s, -math.inf if fill is None
                                            else fill), s)
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    total = e.sum(-1, keepdim=True)
    p = e / torch.where(total == 0, torch.ones_like(total), total)
    out = p @ ve
    lse = (torch.log(total) + m).squeeze(-1)
    out.backward(do.double())
    if factor_grad:
        return out.detach(), lse.detach(), q.grad, k.grad, v.grad, f.grad
    return out.detach(), lse.detach(), q.grad, k.grad, v.grad


def _relative(got, want) -> float:
    import torch
    got, want = got.double(), want.double()
    if torch.isnan(got).any():
        return math.inf
    norm = want.norm().item()
    return (got - want).norm().item() / (norm if norm > 0 else 1.0)


def run_case(case: Dict[str, Any], package_dir: Path, seed: int
             ) -> Dict[str, Any]:
    import torch

    sys.path.insert(0, str(ROOT / "python"))
    import kiln
    from kiln.runtime import AttentionArgs, AttentionGradArgs, DType

    package = kiln.Package(str(package_dir))
    sites = json.loads((package_dir / "manifest.json").read_text())["sites"]
    forward = package.site(next(s["name"] for s in sites
                                if s.get("kind", "attention") == "attention"))
    backward = package.site(next(s["name"] for s in sites
                                 if s.get("kind") == "attention_grad"))

    torch.manual_seed(seed)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16,
             "f32": torch.float32}[case["dtype"]]
    kiln_dtype = {"bf16": DType.BF16, "f16": DType.F16,
                  "f32": DType.F32}[case["dtype"]]
    shapes = _case_shapes(case)
    dev = "cuda"

    def rand(name):
        return (torch.rand(shapes[name], device=dev) * 2 - 1).to(dtype)

    q, k, v, do = rand("q"), rand("k"), rand("v"), rand("o")
    mask = bias = factor = None
    if "mask" in shapes:
        if case["mask"].startswith("bool"):
            mask = torch.rand(shapes["mask"], device=dev) > 0.3
            if case["mask"] == "bool":
                mask[..., :3, :] = False  # rows that see no key
            else:
                mask[..., 0] = True
        else:
            mask = torch.randn(shapes["mask"], device=dev)
            mask[torch.rand(shapes["mask"], device=dev) < 0.2] = -math.inf
            mask[..., 1, :] = -math.inf  # a row hidden completely
    if "bias" in shapes:
        bias = torch.randn(shapes["bias"], device=dev)
    if case.get("scale_factor"):
        factor = torch.tensor(0.7, device=dev)

    nan = float("nan")
    out = torch.full(shapes["o"], nan, device=dev, dtype=dtype)
    lse = torch.full(shapes["lse"], nan, device=dev)
    dq = torch.full_like(q, nan)
    dk = torch.full_like(k, nan)
    dv = torch.full_like(v, nan)
    workspace = torch.full(
        (backward.grad_workspace_bytes(case["b"], case["hq"], case["sq"]) // 4,),
        nan, device=dev)

    def strides(t):
        # {batch, head, seq, dim}; a broadcast axis of a mask or bias is 0.
        return [0 if t.shape[i] == 1 else t.stride(i) for i in range(4)]

    a = AttentionArgs()
    a.q, a.k, a.v, a.out = (t.data_ptr() for t in (q, k, v, out))
    a.q_dtype = a.k_dtype = a.v_dtype = a.out_dtype = int(kiln_dtype)
    a.q_strides[:], a.k_strides[:] = strides(q), strides(k)
    a.v_strides[:], a.out_strides[:] = strides(v), strides(out)
    if mask is not None:
        a.mask = mask.data_ptr()
        a.mask_dtype = int(DType.BOOL if mask.dtype == torch.bool
                           else DType.F32)
        a.mask_strides[:] = strides(mask)
    if bias is not None:
        a.bias, a.bias_dtype = bias.data_ptr(), int(DType.F32)
        a.bias_strides[:] = strides(bias)
    if factor is not None:
        a.scale_factor = factor.data_ptr()
    a.batch, a.q_heads, a.kv_heads = case["b"], case["hq"], case["hkv"]
    a.q_len, a.kv_len, a.head_dim = case["sq"], case["sk"], case["d"]
    a.v_head_dim = case.get("dv", case["d"])
    a.lse = lse.data_ptr()

    g = AttentionGradArgs()
    g.forward = a
    for name, tensor in (("grad_out", do), ("grad_q", dq), ("grad_k", dk),
                         ("grad_v", dv)):
        setattr(g, name, tensor.data_ptr())
        setattr(g, name + "_dtype", int(kiln_dtype))
        getattr(g, name + "_strides")[:] = strides(tensor)
    g.workspace = workspace.data_ptr()
    g.workspace_bytes = workspace.numel() * 4

    stream = torch.cuda.current_stream().cuda_stream
    torch.cuda.synchronize()
    forward.launch(a, stream)
    backward.launch_grad(g, stream)
    torch.cuda.synchronize()

    ref_out, ref_lse, ref_dq, ref_dk, ref_dv = _reference(
        case, q, k, v, mask, bias, factor, do)
    finite = torch.isfinite(ref_lse)
    lse_ok = bool((torch.isinf(lse) == ~finite).all())
    errors = {
        "out": _relative(out, ref_out),
        "lse": _relative(lse[finite], ref_lse[finite]) if lse_ok else math.inf,
        "dq": _relative(dq, ref_dq),
        "dk": _relative(dk, ref_dk),
        "dv": _relative(dv, ref_dv),
    }
    tolerance = TOLERANCE[case["dtype"]]
    passed = all(e <= tolerance for e in errors.values())
    return {"case": case["name"], "passed": passed, "errors": errors,
            "tolerance": tolerance,
            "kernels": [forward.kernel, backward.kernel, backward.key_pass]}


def run(directory: Path, names: Optional[List[str]], out: Optional[Path],
        ) -> int:
    results = []
    for index, case in enumerate(CASES):
        if names and case["name"] not in names:
            continue
        try:
            result = run_case(case, directory / case["name"], seed=index)
        except Exception as error:  # reported, never hidden
            import traceback
            traceback.print_exc()
            result = {"case": case["name"], "passed": False,
                      "error": f"{type(error).__name__}: {error}"}
        results.append(result)
        errors = " ".join(f"{k} {v:.2e}" for k, v in
                          result.get("errors", {}).items())
        print(f"{'PASS' if result['passed'] else 'FAIL'} {case['name']}: "
              f"{errors or result.get('error')}", flush=True)
    passed = sum(r["passed"] for r in results)
    print(f"{passed} passed, {len(results) - passed} failed")
    if out:
        out.write_text(json.dumps(results, indent=1))
    return 0 if passed == len(results) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--emit", type=Path, help="write and compile the cases")
    mode.add_argument("--run", type=Path, help="check compiled cases")
    parser.add_argument("--kilnc", default=str(ROOT / "build" / "bin" /
                                               "kilnc"))
    parser.add_argument("--cases", help="comma-separated case names")
    parser.add_argument("--small", action="store_true",
                        help=f"only {', '.join(SMALL)} (for the sanitizer)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    names = args.cases.split(",") if args.cases else None
    if args.small:
        names = list(SMALL)
    if args.emit:
        return emit(args.emit, args.kilnc, names)
    return run(args.run, names, args.json)


if __name__ == "__main__":
    sys.exit(main())
