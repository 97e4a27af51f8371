#!/usr/bin/env python3
"""Checks every attention site of a Kiln package on the GPU against a float64
reference computed with torch.

    python3 test/gpu/check_attention.py PACKAGE_DIR [--out results.json]
    compute-sanitizer --tool memcheck python3 test/gpu/check_attention.py \\
        PACKAGE_DIR --sanitize

For each site: all pairs of query/key lengths in {1, 17, 128, 1000, 4096}
(lengths the site fixes are kept), batch 2, 8 query heads over 2 KV heads
(unless the site fixes them), the site's head_dim, dtype, causality, mask and
bias; fresh random inputs per case (never zeros); the output poisoned with NaN
before each launch. Also: Q/K/V/out as strided views (transposed and sliced
from packed tensors) and as unaligned views (rows of D + 1 elements, the
first skipped), broadcast masks, one launch captured in a CUDA graph
and replayed, and launches whose Q, K and V are written by the kernels right
before them on their stream, with no synchronisation between (on sm_90a the
attention kernel may start while the kernel before it drains, and must wait
for it before reading). Passes when ||out - ref|| / ||ref|| is below 1e-2 (f16, bf16)
or 1e-5 (f32; 1e-2 for f32 sites on the TF32 kernel, `"math": "tf32"` in the
manifest, whose errors the table reports) and nothing is NaN. Prints a table, writes JSON, exits 1 on any
failure.

Semantics (those of kiln.attention): causal keeps key j for query i iff
j <= i + (Sk - Sq) (bottom-right aligned); window W also hides
j <= i + (Sk - Sq) - W; window_right R (no causal) hides
j > i + (Sk - Sq) + R; a hidden key scores -inf, or the site's
masked_score (a finite fill) when it has one; a query row whose scores are
all -inf gives 0; additive masks are added as given (finfo.min stays
finite, so a row it hides entirely averages V); q head h uses
KV head h // (Hq / Hkv); softcap c maps a score s to c * tanh(s / c) before
mask and bias are added; boolean masks are True where the key takes part.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402

import kiln  # noqa: E402

LENGTHS = (1, 17, 128, 1000, 4096)
# (q_heads, kv_heads) tried on sites whose heads are dynamic: groups of 3, 5,
# 1, 7 and 16 (a decode block of more than 8 rows).
HEAD_PAIRS = ((6, 2), (5, 1), (3, 3), (28, 4), (32, 2))
SANITIZE_CASES = ((1, 17), (17, 17), (33, 128), (128, 40), (130, 200))
TOLERANCE = {"bf16": 1e-2, "f16": 1e-2, "f32": 1e-5}
# TF32 rounds operands to 10 mantissa bits, as f16 does.
TF32_TOLERANCE = 1e-2
# Sites whose kernel runs on TF32 tensor cores.
TF32_SITES: set = set()
# Site name -> masked_score, read from the package's manifest.
MASKED_SCORES: Dict[str, float] = {}
# Site name -> window_right (a two-sided window), from the manifest.
WINDOW_RIGHTS: Dict[str, int] = {}
TORCH_DTYPES = {
    "bf16": torch.bfloat16,
    "f16": torch.float16,
    "f32": torch.float32,
    "i1": torch.bool,
}


class Case:
    """One launch: shapes, the layout of every tensor, and what to vary."""

    def __init__(
        self,
        batch: int,
        q_heads: int,
        kv_heads: int,
        q_len: int,
        kv_len: int,
        variant: str = "contiguous",
        mask_shape: str = "full",
    ) -> None:
        self.batch, self.q_heads, self.kv_heads = batch, q_heads, kv_heads
        self.q_len, self.kv_len = q_len, kv_len
        self.variant = variant
        self.mask_shape = mask_shape


def physical(shape_bhsd: Tuple[int, int, int, int], layout: str) -> Tuple[int, ...]:
    b, h, s, d = shape_bhsd
    return (b, h, s, d) if layout == "bhsd" else (b, s, h, d)


def to_bhsd(tensor: torch.Tensor, layout: str) -> torch.Tensor:
    """A [B, H, S, D] view of a tensor in `layout`."""
    return tensor if layout == "bhsd" else tensor.transpose(1, 2)


def make_qkv(
    shape_bhsd: Tuple[int, int, int, int],
    layout: str,
    dtype: torch.dtype,
    variant: str,
    device: torch.device,
    count: int = 1,
) -> List[torch.Tensor]:
    """`count` random tensors of logical [B, H, S, D] shape, stored in
    `layout`; the "strided" variant builds them as views that are not
    contiguous: the other layout transposed, sliced out of one packed
    tensor."""
    b, h, s, d = shape_bhsd
    if variant == "unaligned":
        # Rows of D + 1 elements, the first one skipped: the base address is
        # off by one element and the row stride is odd, so no row start is
        # 16-byte aligned (the vector loads of the tensor-core kernel must
        # fall back to element loads).
        phys = physical(shape_bhsd, layout)
        return [
            torch.randn(*phys[:-1], phys[-1] + 1, dtype=dtype, device=device)[..., 1:]
            for _ in range(count)
        ]
    if variant == "contiguous":
        return [
            torch.randn(physical(shape_bhsd, layout), dtype=dtype, device=device)
            for _ in range(count)
        ]
    other = "bshd" if layout == "bhsd" else "bhsd"
    # Packed [B, S, count, H, D] (or [B, count, H, S, D]) storage: each tensor
    # is a slice (batch stride covers all of them), in the other layout.
    if other == "bshd":
        packed = torch.randn(b, s, count, h, d, dtype=dtype, device=device)
        views = [packed[:, :, i] for i in range(count)]  # [B, S, H, D]
    else:
        packed = torch.randn(b, count, h, s, d, dtype=dtype, device=device)
        views = [packed[:, i] for i in range(count)]  # [B, H, S, D]
    return [view.transpose(1, 2) for view in views]  # now in `layout`


def make_mask(
    site: kiln.Site, case: Case, device: torch.device
) -> Optional[torch.Tensor]:
    if site.mask == "none":
        return None
    b, hq, sq, sk = case.batch, case.q_heads, case.q_len, case.kv_len
    if case.mask_shape == "padding":
        # Left padding of a random length per sequence, the first sequence
        # all padding: rows that see no key, under causal most of them.
        keep = torch.ones(b, 1, 1, sk, dtype=torch.bool, device=device)
        for batch in range(b):
            padded = sk if batch == 0 else int(torch.randint(0, sk, ()))
            keep[batch, ..., :padded] = False
        if site.mask == "boolean":
            return keep
        dtype = TORCH_DTYPES[site.mask_dtype or "f32"]
        fill = torch.finfo(torch.float32).min
        mask = torch.zeros(b, 1, 1, sk, device=device).masked_fill(~keep, fill)
        return mask.to(dtype)
    shape = {
        "full": (b, hq, sq, sk),
        "batch-keys": (b, 1, 1, sk),
        "rows-keys": (sq, sk),
    }[case.mask_shape]
    hidden = torch.rand(shape, device=device) < 0.25
    # Key 0 is visible to every query that sees any key under causal/window,
    # so keeping it unmasked means no row is fully masked except by causal.
    hidden[..., 0] = False
    if site.mask == "boolean":
        return ~hidden
    dtype = TORCH_DTYPES[site.mask_dtype or "f32"]
    mask = torch.randn(shape, device=device, dtype=torch.float32)
    mask = mask.masked_fill(hidden, float("-inf"))
    return mask.to(dtype)


def make_bias(
    site: kiln.Site, case: Case, device: torch.device
) -> Optional[torch.Tensor]:
    if not site.bias:
        return None
    dtype = TORCH_DTYPES[site.bias_dtype or site.dtype]
    return torch.randn(
        1, case.q_heads, case.q_len, case.kv_len, dtype=dtype, device=device
    )


def reference(
    site: kiln.Site,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    factor: float = 1.0,
) -> torch.Tensor:
    """float64 attention of [B, H, S, D] views; returns [B, Hq, Sq, D].
    `factor`: a run-time scale_factor's value (the scale is site.scale
    times it)."""
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    group = hq // hkv
    device = q.device
    out = torch.empty(b, hq, sq, v.shape[-1], dtype=torch.float64, device=device)
    rows = torch.arange(sq, device=device)[:, None]
    cols = torch.arange(sk, device=device)[None, :]
    hidden = torch.zeros(sq, sk, dtype=torch.bool, device=device)
    fill = MASKED_SCORES.get(site.name)
    fill = float("-inf") if fill is None else fill
    right = 0 if site.causal else WINDOW_RIGHTS.get(site.name)
    if right is not None:
        hidden |= cols > rows + (sk - sq) + right
        if site.window:
            hidden |= cols <= rows + (sk - sq) - site.window
    full = (b, hq, sq, sk)
    mask_full = None if mask is None else mask.broadcast_to(full)
    bias_full = None if bias is None else bias.broadcast_to(full)
    # Bound the float64 score memory: a few heads at a time.
    heads_per_chunk = max(1, min(hq, (1 << 27) // max(1, b * sq * sk)))
    for h0 in range(0, hq, heads_per_chunk):
        h1 = min(hq, h0 + heads_per_chunk)
        qh = q[:, h0:h1].double()
        kv_index = torch.arange(h0, h1, device=device) // group
        kh = k[:, kv_index].double()
        vh = v[:, kv_index].double()
        scores = site.scale * factor * torch.matmul(qh, kh.transpose(-1, -2))
        if site.softcap:
            scores = site.softcap * torch.tanh(scores / site.softcap)
        if bias_full is not None:
            scores = scores + bias_full[:, h0:h1].double()
        if mask_full is not None:
            chunk = mask_full[:, h0:h1]
            if site.mask == "boolean":
                scores = scores.masked_fill(~chunk, fill)
            else:
                scores = scores + chunk.double()
        scores = scores.masked_fill(hidden, fill)
        row_max = scores.amax(dim=-1, keepdim=True)
        row_max = torch.where(torch.isinf(row_max), 0.0, row_max)
        weights = torch.exp(scores - row_max)
        total = weights.sum(dim=-1, keepdim=True)
        weights = weights / torch.where(total == 0, 1.0, total)
        out[:, h0:h1] = torch.matmul(weights, vh)
        del scores, weights
    return out


def run_case(
    site: kiln.Site, case: Case, head_dim: int, device: torch.device
) -> Dict[str, Any]:
    dtype = TORCH_DTYPES[site.dtype]
    layout = site.layout
    q_shape = (case.batch, case.q_heads, case.q_len, head_dim)
    kv_shape = (case.batch, case.kv_heads, case.kv_len, head_dim)
    # V and out have the value head dim (differs in multi-head latent
    # attention).
    value_dim = site.v_head_dim or head_dim
    v_shape = kv_shape[:3] + (value_dim,)
    out_shape = q_shape[:3] + (value_dim,)
    storage = case.variant if case.variant in ("strided", "unaligned") else "contiguous"
    (q,) = make_qkv(q_shape, layout, dtype, storage, device)
    if value_dim == head_dim:
        k, v = make_qkv(kv_shape, layout, dtype, storage, device, count=2)
    else:
        (k,) = make_qkv(kv_shape, layout, dtype, storage, device)
        (v,) = make_qkv(v_shape, layout, dtype, storage, device)
    if storage == "contiguous":
        out = torch.empty(physical(out_shape, layout), dtype=dtype, device=device)
    else:
        (out,) = make_qkv(out_shape, layout, dtype, storage, device)
    mask = make_mask(site, case, device)
    bias = make_bias(site, case, device)
    out.fill_(float("nan"))
    # A site with a run-time scale: a random factor (either sign), read by
    # the kernel from device memory.
    factor = None
    if site.scale_factor:
        value = float(torch.empty(()).uniform_(0.5, 1.5)) * (
            -1.0 if torch.rand(()) < 0.25 else 1.0)
        factor = torch.tensor([value], dtype=torch.float32, device=device)

    result: Dict[str, Any] = {
        "site": site.name,
        "layout": layout,
        "dtype": site.dtype,
        "head_dim": head_dim if value_dim == head_dim else f"{head_dim}/{value_dim}",
        "causal": site.causal,
        "mask": site.mask if site.mask == "none" else f"{site.mask}:{case.mask_shape}",
        "bias": site.bias,
        "batch": case.batch,
        "q_heads": case.q_heads,
        "kv_heads": case.kv_heads,
        "q_len": case.q_len,
        "kv_len": case.kv_len,
        "variant": case.variant,
    }
    # Split-KV: forced split counts beside the launch's own choice.
    splits = {"split3": 3, "split8": 8, "split33": 33,
              "nosplit": 1}.get(case.variant, 0)
    try:
        if case.variant == "produced":
            # Q, K and V in zeroed buffers, each written by a copy right
            # before the launch, behind a long kernel.
            buffers = [torch.zeros_like(t) for t in (q, k, v)]
            busy = torch.empty(1 << 26, dtype=torch.float32, device=device)
            torch.cuda.synchronize()
            busy.uniform_()
            for buffer, source in zip(buffers, (q, k, v)):
                buffer.copy_(source)
            site.attention(*buffers, mask=mask, bias=bias, out=out,
                           scale_factor=factor)
        elif case.variant == "graph":
            static_out = out
            site.package.prepare()  # module loads are not capturable
            # The first launch sizes the package's split-KV workspace (no
            # allocation may happen while capturing).
            site.attention(q, k, v, mask=mask, bias=bias, out=static_out,
                           scale_factor=factor)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                site.attention(q, k, v, mask=mask, bias=bias, out=static_out,
                               scale_factor=factor)
            static_out.fill_(float("nan"))
            if factor is not None:
                # The replay reads the factor's value now, not the capture's.
                factor.mul_(0.75)
            graph.replay()
        else:
            site.attention(q, k, v, mask=mask, bias=bias, out=out,
                           num_splits=splits, scale_factor=factor)
        torch.cuda.synchronize()
    except Exception as error:  # KilnError, or a CUDA error from the kernel
        result.update(ok=False, error=f"{type(error).__name__}: {error}")
        return result

    ref = reference(
        site,
        to_bhsd(q, layout),
        to_bhsd(k, layout),
        to_bhsd(v, layout),
        mask,
        bias,
        1.0 if factor is None else float(factor),
    )
    got = to_bhsd(out, layout).double()
    nan_count = int(torch.isnan(got).sum())
    ref_norm = float(ref.norm())
    err_norm = float((got - ref).nan_to_num(nan=float("inf")).norm())
    rel = err_norm / ref_norm if ref_norm > 0 else err_norm
    tolerance = TF32_TOLERANCE if site.name in TF32_SITES else TOLERANCE[site.dtype]
    ok = nan_count == 0 and math.isfinite(rel) and rel <= tolerance
    result.update(ok=ok, rel_err=rel, tolerance=tolerance, nan=nan_count)
    return result


def cases_for(site: kiln.Site, sanitize: bool) -> List[Case]:
    kv_heads = site.kv_heads or (2 if (site.q_heads or 8) % 2 == 0 else 1)
    q_heads = site.q_heads or 4 * kv_heads
    batch = site.batch or (1 if sanitize else 2)

    def lengths(static: Optional[int], options) -> List[int]:
        return [static] if static else list(options)

    if sanitize:
        pairs = [(site.q_len or sq, site.kv_len or sk) for sq, sk in SANITIZE_CASES]
        pairs = list(dict.fromkeys(pairs))
    else:
        pairs = [
            (sq, sk)
            for sq in lengths(site.q_len, LENGTHS)
            for sk in lengths(site.kv_len, LENGTHS)
        ]
    cases = [Case(batch, q_heads, kv_heads, sq, sk) for sq, sk in pairs]
    # Sites with dynamic heads: other group sizes, including ones that do not
    # divide a block's rows (the tensor-core kernel packs a KV head's query
    # heads into its rows), decode-shaped and prefill-shaped.
    if site.q_heads is None and site.kv_heads is None:
        head_pairs = HEAD_PAIRS[:2] if sanitize else HEAD_PAIRS
        for hq, hkv in head_pairs:
            for sq, sk in [(1, 4096), (17, 128), (1000, 1000)]:
                if (site.q_len in (None, sq)) and (site.kv_len in (None, sk)):
                    cases.append(Case(batch, hq, hkv, sq, sk))
    # Strided views, broadcast masks and a CUDA graph on a few shapes.
    preferred = [(17, 128), (128, 128), (1000, 1000), (17, 17), (33, 128)]
    extra = [pair for pair in preferred if pair in pairs][:3] or pairs[:1]
    for sq, sk in extra:
        cases.append(Case(batch, q_heads, kv_heads, sq, sk, variant="strided"))
        cases.append(Case(batch, q_heads, kv_heads, sq, sk, variant="unaligned"))
        if site.mask != "none":
            for shape in ("batch-keys", "rows-keys", "padding"):
                cases.append(Case(batch, q_heads, kv_heads, sq, sk, mask_shape=shape))
    sq, sk = extra[0]
    cases.append(Case(batch, q_heads, kv_heads, sq, sk, variant="graph"))
    cases.append(Case(batch, q_heads, kv_heads, sq, sk, variant="produced"))
    if site.q_len in (None, 1) and site.kv_len in (None, 4096):
        cases.append(Case(batch, q_heads, kv_heads, 1, 4096, variant="produced"))
    # Keys split over blocks: forced counts (more splits than key tiles
    # included) and none, where the kernel splits.
    if site.split_kv:
        for sq, sk in [(1, 4096), (1, 130), (17, 1000), (200, 1000)]:
            if site.q_len in (None, sq) and site.kv_len in (None, sk):
                for variant in ("split3", "split8", "split33", "nosplit"):
                    cases.append(Case(batch, q_heads, kv_heads, sq, sk,
                                      variant=variant))
    return cases


def head_dim_of(package: kiln.Package, site: kiln.Site) -> int:
    if site.head_dim:
        return site.head_dim
    for kernel in package.kernels:
        if kernel.name == site.kernel and kernel.head_dim:
            return kernel.head_dim
    return 64


HEADER = (
    f"{'site':<16} {'layout':<6} {'dtype':<5} {'D':>7} {'causal':<6} "
    f"{'mask':<18} {'B':>2} {'Hq':>3} {'Hkv':>3} {'Sq':>5} {'Sk':>5} "
    f"{'variant':<10} {'rel_err':>10}  result"
)


def format_row(r: Dict[str, Any]) -> str:
    rel = f"{r['rel_err']:.2e}" if "rel_err" in r else "-"
    verdict = "ok" if r["ok"] else "FAIL"
    if "error" in r:
        verdict += f" ({r['error'].strip().splitlines()[-1][:160]})"
    elif not r["ok"]:
        verdict += f" (nan={r['nan']}, tol={r['tolerance']:.0e})"
    return (
        f"{r['site']:<16} {r['layout']:<6} {r['dtype']:<5} {str(r['head_dim']):>7} "
        f"{str(r['causal']):<6} {r['mask']:<18} {r['batch']:>2} "
        f"{r['q_heads']:>3} {r['kv_heads']:>3} {r['q_len']:>5} "
        f"{r['kv_len']:>5} {r['variant']:<10} {rel:>10}  {verdict}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("package", help="package directory written by kilnc")
    parser.add_argument("--out", help="JSON results file")
    parser.add_argument(
        "--sanitize",
        action="store_true",
        help="a few small cases only (for compute-sanitizer)",
    )
    parser.add_argument(
        "--site", action="append", help="only these sites (names or functions)"
    )
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()

    if not torch.cuda.is_available():
        print("check_attention: no CUDA device", file=sys.stderr)
        return 1
    device = torch.device("cuda")
    torch.manual_seed(options.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    package = kiln.Package(options.package)
    manifest = json.loads((Path(options.package) / "manifest.json").read_text())
    tf32_kernels = {kernel["name"] for kernel in manifest.get("kernels", [])
                    if kernel.get("math") == "tf32"}
    for entry in manifest.get("sites", []):
        if entry.get("kernel") in tf32_kernels:
            TF32_SITES.add(entry["name"])
        if entry.get("masked_score") is not None:
            MASKED_SCORES[entry["name"]] = float(entry["masked_score"])
        if entry.get("window_right") is not None:
            WINDOW_RIGHTS[entry["name"]] = int(entry["window_right"])
    major, minor = torch.cuda.get_device_capability(device)
    print(
        f"device {torch.cuda.get_device_name(device)} (sm_{major}{minor}), "
        f"torch {torch.__version__}, package {options.package}: "
        f"{len(package.sites)} sites, targets {package.targets}, "
        f"loads {package.select_target(major, minor)}",
        flush=True,
    )

    results: List[Dict[str, Any]] = []
    start = time.time()
    print(HEADER)
    print("-" * len(HEADER), flush=True)
    for site in package.sites:
        if options.site and not {site.name, site.function} & set(options.site):
            continue
        if site.paged:
            print(f"{site.name}: a paged-attention site, checked by "
                  f"test/gpu/check_paged.py", flush=True)
            continue
        head_dim = head_dim_of(package, site)
        for case in cases_for(site, options.sanitize):
            try:
                result = run_case(site, case, head_dim, device)
            except Exception:
                result = {
                    "site": site.name,
                    "layout": site.layout,
                    "dtype": site.dtype,
                    "head_dim": head_dim,
                    "causal": site.causal,
                    "mask": site.mask,
                    "batch": case.batch,
                    "q_heads": case.q_heads,
                    "kv_heads": case.kv_heads,
                    "q_len": case.q_len,
                    "kv_len": case.kv_len,
                    "variant": case.variant,
                    "ok": False,
                    "error": traceback.format_exc(limit=3),
                }
            results.append(result)
            print(format_row(result), flush=True)
    failures = [r for r in results if not r["ok"]]
    if failures:
        print(f"\nFailures:\n{HEADER}")
        for r in failures:
            print(format_row(r))
    summary = {
        "device": torch.cuda.get_device_name(device),
        "capability": f"{major}.{minor}",
        "torch": torch.__version__,
        "package": options.package,
        "target": package.select_target(major, minor),
        "sanitize": options.sanitize,
        "seconds": round(time.time() - start, 1),
        "passed": len(results) - len(failures),
        "failed": len(failures),
        "results": results,
    }
    out_path = options.out or os.path.join(
        os.environ.get("OUT", "."), "check_attention.json"
    )
    tf32_errors = [r["rel_err"] for r in results
                   if r["site"] in TF32_SITES and "rel_err" in r]
    if tf32_errors:
        summary["tf32_max_rel_err"] = max(tf32_errors)
        print(f"\nTF32 sites ({len(TF32_SITES)}): relative error against "
              f"float64 up to {max(tf32_errors):.2e} over {len(tf32_errors)} "
              f"cases (median {sorted(tf32_errors)[len(tf32_errors) // 2]:.2e})")
    with open(out_path, "w") as stream:
        json.dump(summary, stream, indent=1)
    print(
        f"\n{summary['passed']} passed, {summary['failed']} failed "
        f"({summary['seconds']} s); results in {out_path}"
    )
    return 1 if failures or not results else 0


if __name__ == "__main__":
    sys.exit(main())
