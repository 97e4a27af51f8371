#!/usr/bin/env python3
"""Attention backward throughput of Kiln's training sites against PyTorch's
kernels, side by side in one run, on the same inputs.

    python3 bench/bench_backward.py [--heads-dims 64,128,256] [--seqs 1024,4096,16384]
        [--causal both|yes|no] [--out rows.json]

Cases: bf16, b·s = 16k tokens, hidden 2048 (32 heads at head_dim 64, 16 at
128, 8 at 256), causal and not. For each case the training sites of the
dense spec (``kiln.site_cache.training_sites_for``: the forward keeping its
log-sum-exp and its backward) run through ``kiln.torch_ops.attention_trainable``
(autograd calls Kiln's backward kernels), beside SDPA's flash and cuDNN
backends and torch.compile'd FlexAttention, each timed two ways:

- `fwd+bwd`: the forward and ``autograd.grad`` of ``Σ out·g``;
- `bwd`: ``autograd.grad`` alone on a graph kept from one forward.

Before timing, every implementation's dQ, dK, dV on a small slice of the
case (batch 1, 2 heads, 512 tokens) are checked against float64 autograd of
the attention's definition (||Δ|| / ||ref|| ≤ 1e-2); a failing path is
reported and not timed. FLOPs: the forward 4·b·h·s²·d (halved for causal),
the backward 2.5 times it (FlashAttention's convention). Times are medians of
triton.testing.do_bench (CUDA events without triton). Rows like the prefill
record's (bench/results/backward-h200.json).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import kiln.torch_ops as kops  # noqa: E402
from bench_attention import make_timer  # noqa: E402
from kiln.site import SiteSpec  # noqa: E402
from kiln.site_cache import training_sites_for  # noqa: E402

TOKENS = 16384
HIDDEN = 2048
TOLERANCE = 1e-2


def reference_grads(q, k, v, g, causal: bool, scale: float):
    """dQ, dK, dV of Σ softmax(scale·QKᵀ [causal]) V · g in float64."""
    q, k, v = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    scores = (q @ k.transpose(-2, -1)) * scale
    if causal:
        s = scores.shape[-1]
        keep = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    out = scores.softmax(-1) @ v
    return torch.autograd.grad((out * g.double()).sum(), (q, k, v))


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).norm() / max(float(want.norm()), 1e-30))


def implementations(head_dim: int, causal: bool, seq: int, scale: float,
                    flex: Any, create_block_mask: Any) -> Dict[str, Callable]:
    """Each path as a function of (q, k, v) in [B, H, S, D] returning out."""
    paths: Dict[str, Callable] = {}
    forward, backward = training_sites_for(
        SiteSpec.dense("bf16", head_dim, head_dim, scale, causal=causal))
    paths["kiln"] = lambda q, k, v: kops.attention_trainable(forward, backward, q, k, v)

    def sdpa(backend: Any) -> Callable:
        def run(q, k, v):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                      scale=scale)
        return run

    paths["sdpa-flash"] = sdpa(SDPBackend.FLASH_ATTENTION)
    paths["sdpa-cudnn"] = sdpa(SDPBackend.CUDNN_ATTENTION)
    if flex is not None:
        masks: Dict[int, Any] = {}

        def run_flex(q, k, v):
            s = q.shape[-2]
            if causal and s not in masks:
                masks[s] = create_block_mask(lambda b, h, qi, ki: qi >= ki, None,
                                             None, s, s)
            return flex(q, k, v, block_mask=masks.get(s), scale=scale)
        paths["flex"] = run_flex
    return paths


def bench_case(head_dim: int, causal: bool, seq: int, timer: Callable,
               flex: Any, create_block_mask: Any) -> List[Dict[str, Any]]:
    batch, heads = TOKENS // seq, HIDDEN // head_dim
    scale = 1.0 / math.sqrt(head_dim)
    flops = 4 * batch * heads * seq * seq * head_dim / (2 if causal else 1)
    base = dict(d=head_dim, s=seq, causal=causal, b=batch, h=heads)
    rows: List[Dict[str, Any]] = []
    device, dtype = torch.device("cuda"), torch.bfloat16
    try:
        paths = implementations(head_dim, causal, seq, scale, flex, create_block_mask)
    except Exception as error:  # noqa: BLE001 (no training site for this case)
        print(f"d{head_dim} s{seq} causal={causal}: kiln: {str(error)[:300]}")
        return [dict(base, impl="kiln", error=str(error)[:300])]

    # Correctness first, on a slice of the case.
    torch.manual_seed(0)
    small = [torch.randn(1, 2, 512, head_dim, device=device, dtype=dtype)
             for _ in range(3)]
    g_small = torch.randn(1, 2, 512, head_dim, device=device, dtype=dtype)
    want = reference_grads(*small, g_small, causal, scale)
    errors: Dict[str, float] = {}
    for name, run in list(paths.items()):
        try:
            q, k, v = (t.clone().requires_grad_(True) for t in small)
            got = torch.autograd.grad((run(q, k, v) * g_small).sum(), (q, k, v))
            errors[name] = max(relative(a, b) for a, b in zip(got, want))
        except Exception as error:  # noqa: BLE001 (a path may not take the case)
            rows.append(dict(base, impl=name, error=str(error)[:200]))
            print(f"d{head_dim} s{seq} causal={causal} {name}: {str(error)[:200]}")
            del paths[name]
            continue
        if errors[name] > TOLERANCE:
            rows.append(dict(base, impl=name, error=f"gradient error {errors[name]:.2e}"))
            print(f"d{head_dim} s{seq} causal={causal} {name}: gradient error "
                  f"{errors[name]:.2e} above {TOLERANCE}: not timed")
            del paths[name]

    q, k, v = (torch.randn(batch, heads, seq, head_dim, device=device, dtype=dtype)
               .requires_grad_(True) for _ in range(3))
    g = torch.randn(batch, heads, seq, head_dim, device=device, dtype=dtype)
    for name, run in paths.items():
        def both(run: Callable = run) -> Any:
            return torch.autograd.grad((run(q, k, v) * g).sum(), (q, k, v))

        out = run(q, k, v)
        loss = (out * g).sum()

        def backward_only(loss: Any = loss) -> Any:
            return torch.autograd.grad(loss, (q, k, v), retain_graph=True)

        try:
            fwd_bwd = timer(both)
            bwd = timer(backward_only)
        except Exception as error:  # noqa: BLE001
            rows.append(dict(base, impl=name, error=str(error)[:200]))
            print(f"d{head_dim} s{seq} causal={causal} {name}: {str(error)[:200]}")
            continue
        row = dict(base, impl=name, ms_fwd_bwd=fwd_bwd, ms_bwd=bwd,
                   TFLOPs_bwd=2.5 * flops / bwd / 1e9,
                   TFLOPs_fwd_bwd=3.5 * flops / fwd_bwd / 1e9,
                   grad_rel_err=errors[name])
        rows.append(row)
        print(f"d{head_dim} s{seq} causal={causal!s:<5} {name:<11} fwd+bwd "
              f"{fwd_bwd:8.3f} ms  bwd {bwd:8.3f} ms {row['TFLOPs_bwd']:7.1f} TFLOP/s "
              f"grad err {errors[name]:.1e}", flush=True)
    kiln_rows = [r for r in rows if r.get("impl") == "kiln" and "ms_bwd" in r]
    for row in rows:
        if kiln_rows and "ms_bwd" in row:
            row["kiln_speedup_bwd"] = row["ms_bwd"] / kiln_rows[0]["ms_bwd"]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--head-dims", default="64,128,256")
    parser.add_argument("--seqs", default="1024,4096,16384")
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--out")
    options = parser.parse_args()
    timer = make_timer()
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        flex = torch.compile(flex_attention)
        # The `bwd` timing differentiates one kept graph again and again
        # (retain_graph=True), which AOTAutograd's donated buffers forbid.
        import torch._functorch.config as functorch_config

        functorch_config.donated_buffer = False
    except Exception as error:  # noqa: BLE001 (an older torch)
        print(f"FlexAttention unavailable: {error}")
        flex, create_block_mask = None, None
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, timer "
          f"{timer.__name__}", flush=True)
    causal_values = {"both": (False, True), "yes": (True,), "no": (False,)}[options.causal]
    rows: List[Dict[str, Any]] = []
    for head_dim in (int(d) for d in options.head_dims.split(",")):
        for seq in (int(s) for s in options.seqs.split(",")):
            for causal in causal_values:
                rows += bench_case(head_dim, causal, seq, timer, flex, create_block_mask)
                if options.out:  # a run cut short keeps its rows
                    Path(options.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
