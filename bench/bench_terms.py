#!/usr/bin/env python3
"""Attention that reads an additive term or a mask from memory: Kiln beside
SDPA, FlexAttention and Inductor, in one run, on the same inputs.

    python3 bench/bench_terms.py NAME=PACKAGE_DIR [NAME=PACKAGE_DIR ...]
        [--seqs 1024,4096] [--dims 64,128] [--out terms.json]

The packages are compiled from bench/terms_sites.mlir (e.g. once with the
default kernel choice and once with --warp-specialize-stage-terms=0, to put
the two ways of reading a term side by side). Cases, bf16, 16 heads, b*s =
16k tokens: no term (the floor), a dense [B, H, q, k] bias, T5's [1, H, q, k]
bias, a [B, 1, 1, k] key-padding mask, both (T5's encoder), a [B, 1, q, k]
f32 additive mask (Hugging Face's expanded mask) and a [B, 1, q, k] boolean
mask.

Every Kiln variant is first checked against a float64 reference at a small
shape (and at an odd one, whose views the TMA path cannot take), with its
output poisoned before the launch. Times are medians of
triton.testing.do_bench. `term GB/s` counts the bytes of the term as the
kernel reads them (every (batch, head) reads its q x k scores' worth, whatever
the broadcast), over the whole time; `over floor` is the time past the same
package's no-term site at the same shape.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import kiln  # noqa: E402

TOKENS = 16384
HEADS = 16
KINDS = (
    "none",
    "bias_dense",
    "bias_heads",
    "key_mask",
    "bias_heads_key_mask",
    "mask_rows_f32",
    "bool_mask_dense",
)
FILL = torch.finfo(torch.float32).min


def site_of(package: kiln.Package, function: str) -> kiln.Site:
    """The package's site of the function `function` of terms_sites.mlir."""
    for site in package.sites:
        if site.function == function:
            return site
    raise KeyError(f"{package.path} has no site of function @{function}")


def masked_score(kind: str) -> Optional[float]:
    """The site's masked_score (bench/terms_sites.mlir): T5's fill where
    its key mask hides a key, else none (hidden keys drop out)."""
    return FILL if kind == "bias_heads_key_mask" else None


def make_timer() -> Callable[[Callable[[], Any]], float]:
    from triton.testing import do_bench

    def timer(fn: Callable[[], Any]) -> float:
        return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))

    return timer


def make_terms(kind: str, batch: int, seq: int, gen: torch.Generator,
               device: Any) -> Dict[str, torch.Tensor]:
    """The site's term operands, in the shapes its function takes."""
    def bias(shape: Tuple[int, ...]) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=device).to(torch.bfloat16)

    def key_mask() -> torch.Tensor:
        # Every row keeps at least its first quarter of keys.
        lengths = torch.randint(seq // 4, seq + 1, (batch,), generator=gen,
                                device=device)
        return (torch.arange(seq, device=device)[None, :] < lengths[:, None]
                ).view(batch, 1, 1, seq)

    if kind == "none":
        return {}
    if kind == "bias_dense":
        return {"bias": bias((batch, HEADS, seq, seq))}
    if kind == "bias_heads":
        return {"bias": bias((1, HEADS, seq, seq))}
    if kind == "key_mask":
        return {"mask": key_mask()}
    if kind == "bias_heads_key_mask":
        return {"mask": key_mask(), "bias": bias((1, HEADS, seq, seq))}
    if kind == "mask_rows_f32":
        hidden = torch.rand(batch, 1, seq, seq, generator=gen, device=device) < 0.2
        hidden[..., 0] = False
        return {"mask": torch.zeros(batch, 1, seq, seq, device=device).masked_fill(
            hidden, FILL)}
    if kind == "bool_mask_dense":
        keep = torch.rand(batch, 1, seq, seq, generator=gen, device=device) >= 0.2
        keep[..., 0] = True
        return {"mask": keep}
    raise ValueError(kind)


def additive(terms: Dict[str, torch.Tensor], masked_score: Optional[float],
             dtype: torch.dtype) -> Optional[torch.Tensor]:
    """The terms as one additive mask (SDPA's and the reference's form)."""
    total: Optional[torch.Tensor] = None
    if "bias" in terms:
        total = terms["bias"].to(dtype)
    mask = terms.get("mask")
    if mask is not None:
        if mask.dtype == torch.bool:
            fill = masked_score if masked_score is not None else -math.inf
            # (Filled in f32: finfo(f32).min overflows bf16 to -inf.)
            add = torch.zeros(mask.shape, device=mask.device
                              ).masked_fill(~mask, fill).to(dtype)
        else:
            add = mask.to(dtype)
        total = add if total is None else total + add
    return total


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              terms: Dict[str, torch.Tensor], scale: float,
              masked_score: Optional[float]) -> torch.Tensor:
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    if "bias" in terms:
        s = s + terms["bias"].double()
    mask = terms.get("mask")
    if mask is not None:
        if mask.dtype == torch.bool:
            s = s.masked_fill(~mask, masked_score if masked_score is not None
                              else -math.inf)
        else:
            s = s + mask.double()
    return torch.softmax(s, dim=-1) @ v.double()


def term_bytes(terms: Dict[str, torch.Tensor], batch: int, seq: int) -> int:
    total = 0
    for t in terms.values():
        rows = seq if t.shape[-2] != 1 else 1
        total += batch * HEADS * rows * seq * t.element_size()
    return total


def check(packages: Dict[str, kiln.Package], dim: int, kind: str) -> List[Dict[str, Any]]:
    """Each package's site against float64 at two small shapes (one odd)."""
    device = torch.device("cuda")
    rows = []
    for batch, seq in ((2, 384), (3, 389)):
        gen = torch.Generator(device=device).manual_seed(seq)
        q, k, v = (torch.randn(batch, HEADS, seq, dim, generator=gen, device=device,
                               dtype=torch.bfloat16) for _ in range(3))
        terms = make_terms(kind, batch, seq, gen, device)
        for name, package in packages.items():
            site = site_of(package, f"d{dim}_{kind}")
            masked = masked_score(kind)
            want = reference(q, k, v, terms, site.scale, masked)
            out = torch.full_like(q, float("nan"))
            site.attention(q, k, v, out=out, **terms)
            torch.cuda.synchronize()
            err = float((out.double() - want).norm() / want.norm())
            ok = math.isfinite(err) and err < 2e-2
            rows.append({"check": f"d{dim}_{kind}", "package": name, "b": batch,
                         "s": seq, "rel_err": err, "ok": ok})
            print(f"check d{dim} {kind:<22} b{batch} s{seq} {name:<12} "
                  f"rel_err {err:.2e} {'ok' if ok else 'FAIL'}", flush=True)
    return rows


def bench(packages: Dict[str, kiln.Package], dim: int, kind: str, seq: int,
          timer: Callable[[Callable[[], Any]], float], flex: Any,
          create_block_mask: Any, floors: Dict[Tuple[str, int, int], float],
          with_inductor: bool = True) -> List[Dict[str, Any]]:
    device = torch.device("cuda")
    batch = TOKENS // seq
    gen = torch.Generator(device=device).manual_seed(1)
    q, k, v = (torch.randn(batch, HEADS, seq, dim, generator=gen, device=device,
                           dtype=torch.bfloat16) for _ in range(3))
    terms = make_terms(kind, batch, seq, gen, device)
    nbytes = term_bytes(terms, batch, seq)
    scale = 1 / math.sqrt(dim)
    base = {"d": dim, "s": seq, "b": batch, "kind": kind, "term_bytes": nbytes}
    rows: List[Dict[str, Any]] = []

    def record(impl: str, ms: float) -> None:
        row = dict(base, impl=impl, ms=ms)
        if nbytes:
            row["term_GBps"] = nbytes / ms / 1e6
        floor = floors.get((impl, dim, seq))
        if floor is not None and kind != "none":
            row["over_floor_ms"] = ms - floor
        if kind == "none":
            floors[(impl, dim, seq)] = ms
        rows.append(row)
        extra = f" term {row['term_GBps']:7.1f} GB/s" if nbytes else ""
        print(f"d{dim} s{seq} {kind:<22} {impl:<18} {ms:8.3f} ms{extra}", flush=True)

    def attempt(impl: str, fn: Callable[[], Any]) -> None:
        try:
            fn()
            torch.cuda.synchronize()
            record(impl, timer(fn))
        except Exception as error:  # an anchor without this form
            rows.append(dict(base, impl=impl, error=str(error)[:200]))
            print(f"d{dim} s{seq} {kind:<22} {impl:<18} error: {str(error)[:160]}",
                  flush=True)

    for name, package in packages.items():
        site = site_of(package, f"d{dim}_{kind}")
        out = torch.empty_like(q)
        args, out = site.attention_args(q, k, v, out=out, **terms)
        stream = torch.cuda.current_stream().cuda_stream
        attempt(f"kiln-{name}", lambda: site.launch(args, stream))
    masked = masked_score(kind)

    combined = additive(terms, masked, torch.bfloat16)
    if combined is not None and "mask" in terms and "bias" not in terms and \
            terms["mask"].dtype == torch.bool:
        sdpa_mask: Optional[torch.Tensor] = terms["mask"]
    else:
        sdpa_mask = combined
    for impl, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                          ("sdpa-efficient", SDPBackend.EFFICIENT_ATTENTION),
                          ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
        def run_sdpa(backend: Any = backend) -> torch.Tensor:
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask,
                                                      scale=scale)
        attempt(impl, run_sdpa)

    def eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              bias: Optional[torch.Tensor], mask: Optional[torch.Tensor]) -> torch.Tensor:
        # Scores in f32, as Hugging Face's eager attention takes them to
        # its softmax (finfo(f32).min does not fit bf16).
        s = (q @ k.transpose(-1, -2)).float() * scale
        if bias is not None:
            s = s + bias
        if mask is not None:
            s = s.masked_fill(~mask, FILL) if mask.dtype == torch.bool else s + mask
        return torch.softmax(s, dim=-1).to(q.dtype) @ v

    if with_inductor:
        inductor = torch.compile(eager, dynamic=False)
        attempt("inductor", lambda: inductor(q, k, v, terms.get("bias"),
                                             terms.get("mask")))

    if flex is not None:
        bias_t = terms.get("bias")
        mask_t = terms.get("mask")

        def score_mod(score: Any, b: Any, h: Any, qi: Any, ki: Any) -> Any:
            if bias_t is not None:
                score = score + bias_t[b if bias_t.shape[0] > 1 else 0, h, qi, ki]
            if mask_t is not None and mask_t.dtype != torch.bool:
                score = score + mask_t[b, 0, qi, ki]
            return score

        block_mask = None
        if mask_t is not None and mask_t.dtype == torch.bool:
            rows_of = mask_t.shape[-2]
            block_mask = create_block_mask(
                (lambda b, h, qi, ki: mask_t[b, 0, 0, ki]) if rows_of == 1 else
                (lambda b, h, qi, ki: mask_t[b, 0, qi, ki]),
                batch, None, seq, seq)
        attempt("flex", lambda: flex(q, k, v, score_mod=score_mod,
                                     block_mask=block_mask, scale=scale))
    best_anchor = min((r["ms"] for r in rows if "ms" in r and not
                       r["impl"].startswith("kiln")), default=None)
    for row in rows:
        if "ms" in row and best_anchor:
            row["vs_best_anchor"] = best_anchor / row["ms"]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("packages", nargs="+", help="NAME=PACKAGE_DIR")
    parser.add_argument("--seqs", default="1024,4096")
    parser.add_argument("--dims", default="64,128")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--no-flex", action="store_true")
    parser.add_argument("--check-only", action="store_true")
    parser.add_argument("--no-inductor", action="store_true",
                        help="skip Inductor (its compile per case is slow)")
    parser.add_argument("--out", help="JSON results file")
    options = parser.parse_args()
    packages = {}
    for spec in options.packages:
        name, _, path = spec.partition("=")
        packages[name] = kiln.Package(path)
    dims = [int(d) for d in options.dims.split(",")]
    kinds = options.kinds.split(",")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows: List[Dict[str, Any]] = []
    failed = 0
    for dim in dims:
        for kind in kinds:
            checked = check(packages, dim, kind)
            failed += sum(not r["ok"] for r in checked)
            rows += checked
    flex = create_block_mask = None
    if not options.no_flex:
        try:
            from torch.nn.attention.flex_attention import (create_block_mask,
                                                           flex_attention)
            torch._dynamo.config.cache_size_limit = 256
            flex = torch.compile(flex_attention, dynamic=False)
        except Exception as error:
            print(f"FlexAttention unavailable: {error}")
    timer = make_timer()
    floors: Dict[Tuple[str, int, int], float] = {}
    if not options.check_only:
        for seq in (int(s) for s in options.seqs.split(",")):
            for dim in dims:
                for kind in (["none"] if "none" not in kinds else []) + kinds:
                    rows += bench(packages, dim, kind, seq, timer, flex,
                                  create_block_mask, floors,
                                  not options.no_inductor)
                    torch.cuda.empty_cache()
    print(f"checks: {sum(r.get('ok', False) for r in rows)} passed, {failed} failed")
    if options.out:
        Path(options.out).write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
