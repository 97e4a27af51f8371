#!/usr/bin/env python3
"""Decode attention (one query per sequence) of a Kiln package, paged and
contiguous, against PyTorch's kernels on the same keys and values.

    kilnc bench/decode_sites.mlir -o PACKAGE_DIR
    python3 bench/bench_decode.py PACKAGE_DIR [--out decode.json] [--quick]

Decode reads every key and value once per step and does little arithmetic per
byte, so it is judged by memory bandwidth: TB/s = bytes of K and V read
(2 * sum(kv_len) * Hkv * 128 * 2 bytes; Q and the output are left out) over
the median time. Two ceilings: the H200's 4.8 TB/s on paper, and `copy_TBs`,
the measured bandwidth of a 2 GiB device-to-device tensor copy (read plus
written bytes), which is what a kernel can reach in practice.

Cases: bf16, head_dim 128, q_len 1, GQA 32/8 (as Llama-3-8B) and 8/1; (batch,
context) in (1, 32768), (16, 16384), (64, 4096), (128, 2048), (256, 1024),
(8, 1024); and one ragged batch of 32 sequences with contexts drawn uniformly
from 100 to 16384 (fixed seed; the row's kv_len is the mean, its bytes count
the real keys, kv_lens_total their sum). Implementations, one row each:

  kiln-paged   the package's paged sites (paged_h{Hq}_{Hkv}_p{page}), pages
               of 16 and 64 tokens, caches [num_pages, page, Hkv, 128] with
               every page placed at random (a random permutation of page ids)
  kiln         the package's contiguous site on [B, H, S, D] K/V
  sdpa-flash   torch SDPA, flash backend, enable_gqa
  sdpa-cudnn   torch SDPA, cuDNN backend, enable_gqa
  gather+sdpa  the pages of 16 gathered through the page table into dense K/V
               ([B, S, Hkv, D], given to SDPA as its [B, Hkv, S, D] view),
               then SDPA flash

Kiln's paged launches are given the batch's total length (total_kv_len), as
a serving scheduler knows it: it informs only their split count, which for the
ragged batch is then chosen for uneven lengths (docs/runtime.md); the
uniform rows choose as without it. --no-total-kv-len leaves it out.

The ragged batch runs kiln-paged and gather+sdpa only: there gather+sdpa
gathers every sequence to the longest one and passes an additive [B, 1, 1, S]
mask (0 for a sequence's keys, -inf past them) to SDPA's default backend. The
paged caches are scattered from the same K/V that the contiguous
implementations read, so all compute the same attention. Before timing, each
output is checked against a float64 reference of the first and the last
sequence: rel_err = ||out - ref|| / ||ref|| over those rows; ok when below
2e-2 and nothing in the output is NaN (Kiln's outputs are filled with NaN
before the checked call). A row that raises keeps its `error` and null times.

Times: each implementation's call is captured once in a CUDA graph (after
its check and two warm-up calls) and the graph's replay is timed, so that
every implementation is timed on the GPU alone: a decode call is tens of
microseconds of GPU work, about what one Python call costs on the host, and
eager calls timed back to back measure whichever is slower (--launch eager
times the calls themselves, as before). Medians of
triton.testing.do_bench(warmup=25, rep=100) (without triton: CUDA events,
the median of 30 calls after 5 warm-ups); --l2-clear read: CUDA events,
the median of 100 calls, each after a read of a 512 MB buffer, so that no
dirty line of the clearing is written back inside the timed call (see
"How the L2 is cleared before a timed call" in
docs/perf-log/2026-12-01-decode-profile-l2.md for what that moves). No cache
flush is added here; the working sets are larger than the H200's L2 (about 50 MB)
except in the smallest cases (8/1 at batch 1 and 8, 32/8 at batch 8 with 1024
keys). do_bench itself clears L2 before each repetition by writing a large
buffer, which also hides most of the host's launch cost; the CUDA-event
fallback does neither.

Then one decode step of a 32-layer model (GQA 32/8, batch 64, context 2048,
pages of 16, each layer with its own caches): 32 paged launches from a Python
loop (eager) against the same launches captured once in a CUDA graph and
replayed, in microseconds per step (median of 30, CUDA events). The graph's
outputs must equal eager's bit for bit (layers 0 and 31), also after new
kv_lens and a new page table are written into the captured buffers.

--quick: (64, 4096) and (1, 32768) at GQA 32/8, no ragged batch, 4 layers in
the decode step.

Writes {"copy_TBs", "rows", "graph_step", "device", "torch"} to --out after
each case and at the end. Exits 1 when a Kiln row is not ok or the decode
step's graph differs from eager.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import kiln  # noqa: E402
from bench_attention import make_timer  # noqa: E402

HEAD_DIM = 128
DTYPE = torch.bfloat16
SCALE = HEAD_DIM ** -0.5
PEAK_TBS = 4.8
TOLERANCE = 2e-2
GQA = ((32, 8), (8, 1))
SHAPES = ((1, 32768), (16, 16384), (64, 4096), (128, 2048), (256, 1024), (8, 1024))
QUICK_SHAPES = ((64, 4096), (1, 32768))
RAGGED_BATCH = 32
RAGGED_MIN, RAGGED_MAX = 100, 16384
RAGGED_SEED = 2024
PAGES = (16, 64)
COPY_BYTES = 2 << 30
# The decode step: one model's layers, each with its own paged caches.
STEP_HQ, STEP_HKV, STEP_BATCH, STEP_CTX, STEP_PAGE = 32, 8, 64, 2048, 16
STEP_LAYERS, QUICK_STEP_LAYERS = 32, 4
STEP_NEW_LEN = 2000

Row = Dict[str, Any]
Timer = Callable[[Callable[[], Any]], float]
Case = Tuple[int, int, int, List[int], bool]  # hq, hkv, batch, kv_lens, ragged


# --------------------------------------------------------------------------
# Timing.
# --------------------------------------------------------------------------


def event_us(fn: Callable[[], Any], reps: int = 30, warmup: int = 3) -> float:
    """Median microseconds of `fn` between CUDA events, synchronized before
    and after each call (so host work inside `fn` counts)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


READ_CLEAR_BYTES = 512 << 20


def read_clear_timer(reps: int = 100, warmup: int = 10) -> Timer:
    """Median milliseconds of a callable between CUDA events, the L2 cleared
    before each call by reading a 512 MB buffer (a sum): the call then
    starts on a cold L2 of clean lines. do_bench clears it by writing a
    buffer, which leaves up to the L2's size of dirty lines that the timed
    call's reads write back to memory as they evict them."""
    buffer = torch.ones(READ_CLEAR_BYTES // 8, dtype=torch.int64, device="cuda")

    def timer(fn: Callable[[], Any]) -> float:
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for start, end in zip(starts, ends):
            buffer.sum()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))

    timer.__name__ = "CUDA events after an L2 clear by reading"
    return timer


def copy_bandwidth(timer: Timer) -> Optional[float]:
    """TB/s of a device-to-device copy of COPY_BYTES (read + write bytes)."""
    try:
        src = torch.ones(COPY_BYTES, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        ms = timer(lambda: dst.copy_(src))
        return 2 * COPY_BYTES / ms / 1e9
    except Exception as error:
        print(f"copy bandwidth: {type(error).__name__}: {error}")
        return None


# --------------------------------------------------------------------------
# Inputs, reference, checks.
# --------------------------------------------------------------------------


def find_site(sites: Dict[str, kiln.Site], function: str) -> kiln.Site:
    site = sites.get(function)
    if site is None:
        raise RuntimeError(
            f"the package has no site for function {function!r} "
            f"(it has {sorted(sites)})"
        )
    return site


def make_workspace(
    site: kiln.Site, batch: int, max_kv_len: int, hq: int, hkv: int
) -> torch.Tensor:
    """The split-KV workspace of one configuration (16 bytes at least, so a
    site that needs none still gets a valid pointer)."""
    nbytes = site.workspace_size(batch, 1, max_kv_len, q_heads=hq, kv_heads=hkv)
    return torch.empty(max(int(nbytes), 16), dtype=torch.uint8, device="cuda")


def build_pages(
    k: torch.Tensor, v: torch.Tensor, kv_lens: List[int], page: int,
    gen: torch.Generator,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Paged copies of contiguous k, v [B, Hkv, S, D]: caches [num_pages,
    page, Hkv, D] holding each sequence's ceil(kv_len / page) pages at the
    places of a random permutation, and the int32 page table [B, max_pages]
    (entries past a sequence's pages name page 0, never read)."""
    batch, hkv, length, dim = k.shape
    device = k.device
    needed = torch.tensor([-(-n // page) for n in kv_lens])
    max_pages = int(needed.max())
    width = max_pages * page
    if width > length:
        raise ValueError(f"k holds {length} keys, pages of {page} need {width}")
    valid = torch.arange(max_pages)[None, :] < needed[:, None]  # [B, max_pages]
    total = int(needed.sum())
    table = torch.zeros(batch, max_pages, dtype=torch.int32)
    table[valid] = torch.randperm(total, generator=gen).to(torch.int32)
    table = table.to(device)
    valid = valid.to(device)
    index = table[valid].long()  # row-major, as blocks[valid] below
    caches = []
    for source in (k, v):
        blocks = (
            source[:, :, :width]
            .transpose(1, 2)
            .reshape(batch, max_pages, page, hkv, dim)
        )
        cache = torch.empty(total, page, hkv, dim, dtype=source.dtype,
                            device=device)
        cache.index_copy_(0, index, blocks[valid])
        del blocks
        caches.append(cache)
    return caches[0], caches[1], table


def gather(cache: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """[B, Hkv, max_pages * page, D] view of the pages `index` [B, max_pages]
    names, gathered into a dense [B, S, Hkv, D] tensor."""
    batch, max_pages = index.shape
    _, page, hkv, dim = cache.shape
    return cache[index].view(batch, max_pages * page, hkv, dim).transpose(1, 2)


def reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_lens: List[int],
    seqs: List[int],
) -> Dict[int, torch.Tensor]:
    """float64 attention of sequences `seqs`: {b: [Hq, 1, D]}."""
    group = q.shape[1] // k.shape[1]
    refs = {}
    for b in seqs:
        n = kv_lens[b]
        keys = k[b, :, :n].double().repeat_interleave(group, 0)  # [Hq, n, D]
        values = v[b, :, :n].double().repeat_interleave(group, 0)
        scores = SCALE * (q[b].double() @ keys.transpose(-1, -2))  # [Hq, 1, n]
        refs[b] = torch.softmax(scores, dim=-1) @ values
        del keys, values, scores
    return refs


def check_output(
    out: torch.Tensor, refs: Dict[int, torch.Tensor]
) -> Tuple[Optional[float], bool]:
    """(rel_err over the reference rows, ok); rel_err is None when any of
    `out` is NaN."""
    if bool(torch.isnan(out).any()):
        return None, False
    num = den = 0.0
    for b, ref in refs.items():
        num += float((out[b].double() - ref).pow(2).sum())
        den += float(ref.pow(2).sum())
    rel = math.sqrt(num / den) if den > 0 else math.sqrt(num)
    return rel, bool(math.isfinite(rel) and rel < TOLERANCE)


# --------------------------------------------------------------------------
# One case of the matrix.
# --------------------------------------------------------------------------


def planned_impls(ragged: bool) -> List[Tuple[str, Optional[int]]]:
    impls: List[Tuple[str, Optional[int]]] = [("kiln-paged", p) for p in PAGES]
    if not ragged:
        impls += [("kiln", None), ("sdpa-flash", None), ("sdpa-cudnn", None)]
    impls.append(("gather+sdpa", 16))
    return impls


def print_row(row: Row, copy_tbs: Optional[float]) -> None:
    page = "-" if row["page"] is None else str(row["page"])
    rel = "-" if row["rel_err"] is None else f"{row['rel_err']:.1e}"
    status = "ok" if row["ok"] else "FAIL"
    if row["ms"] is None:
        print(f"  {row['impl']:<12} {page:>4} {'-':>10} {'-':>7} {'-':>6} "
              f"{rel:>8}  {status}  {str(row.get('error', ''))[:240]}")
        return
    share = f"{row['TBs'] / copy_tbs:.0%}" if copy_tbs else "-"
    error = f"  {str(row['error'])[:240]}" if row.get("error") else ""
    print(f"  {row['impl']:<12} {page:>4} {row['ms'] * 1000:10.1f} "
          f"{row['TBs']:7.2f} {share:>6} {rel:>8}  {status}{error}")


def graph_replay(run: Callable[[], Any]) -> Callable[[], Any]:
    """`run` captured once in a CUDA graph (after two warm-up calls on the
    capturing stream); returns the graph's replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    torch.cuda.synchronize()
    return graph.replay


def run_case(
    sites: Dict[str, kiln.Site], case: Case, seed: int, timer: Timer,
    copy_tbs: Optional[float], graphs: bool = True, give_total: bool = True,
) -> List[Row]:
    hq, hkv, batch, kv_lens, ragged = case
    device = torch.device("cuda")
    total = sum(kv_lens)
    longest = max(kv_lens)
    padded = -(-longest // max(PAGES)) * max(PAGES)  # room for whole pages
    nbytes = 2 * total * hkv * HEAD_DIM * 2
    kv_len = int(round(total / batch)) if ragged else longest
    base: Row = {"b": batch, "hq": hq, "hkv": hkv, "d": HEAD_DIM,
                 "kv_len": kv_len, "page": None, "bytes": nbytes}
    extra: Row = {"ragged": True, "kv_lens_total": total} if ragged else {}
    rows: List[Row] = []

    print(f"\n== GQA {hq}/{hkv}, batch {batch}, kv_len {kv_len}"
          f"{' (ragged: mean; max ' + str(longest) + ')' if ragged else ''}, "
          f"K+V {nbytes / 1e6:.1f} MB ==")
    print(f"  {'impl':<12} {'page':>4} {'us':>10} {'TB/s':>7} {'copy':>6} "
          f"{'rel_err':>8}  ok")

    def new_row(impl: str, page: Optional[int]) -> Row:
        return dict(base, impl=impl, page=page, TBs=None, ms=None,
                    rel_err=None, ok=False, **extra)

    try:
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        q = torch.randn(batch, hq, 1, HEAD_DIM, device=device, dtype=DTYPE)
        k = torch.randn(batch, hkv, padded, HEAD_DIM, device=device, dtype=DTYPE)
        v = torch.randn_like(k)
        lens = torch.tensor(kv_lens, dtype=torch.int32, device=device)
        refs = reference(q, k, v, kv_lens, sorted({0, batch - 1}))
    except Exception as error:
        message = f"setup: {type(error).__name__}: {error}"[:300]
        for impl, page in planned_impls(ragged):
            row = new_row(impl, page)
            row["error"] = message
            rows.append(row)
            print_row(row, copy_tbs)
        return rows

    def measure(
        impl: str, page: Optional[int],
        prepare: Callable[[], Tuple[Callable[[], Any], Optional[torch.Tensor]]],
        backend: Any = None,
    ) -> None:
        """prepare() -> (run, out to poison or None); checks run() once, then
        times it."""
        row = new_row(impl, page)
        try:
            run, poison = prepare()
            context = (sdpa_kernel(backend) if backend is not None
                       else contextlib.nullcontext())
            with context:
                if poison is not None:
                    poison.fill_(float("nan"))
                got = run()
                torch.cuda.synchronize()
                row["rel_err"], ok = check_output(got, refs)
                del got
                ms = timer(graph_replay(run) if graphs else run)
            row["ms"] = ms
            row["TBs"] = nbytes / ms / 1e9
            row["ok"] = ok
        except Exception as error:
            row["ok"] = False
            row["error"] = f"{type(error).__name__}: {error}"[:300]
        rows.append(row)
        print_row(row, copy_tbs)

    paged: Dict[int, Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    given = total if give_total else 0

    def kiln_paged(page: int) -> Callable[[], Any]:
        def prepare() -> Tuple[Callable[[], torch.Tensor], torch.Tensor]:
            kc, vc, table = build_pages(k, v, kv_lens, page, gen)
            paged[page] = (kc, vc, table)
            site = find_site(sites, f"paged_h{hq}_{hkv}_p{page}")
            workspace = make_workspace(site, batch, table.shape[1] * page, hq, hkv)
            out = torch.empty(batch, hq, 1, HEAD_DIM, device=device, dtype=DTYPE)

            def run() -> torch.Tensor:
                return site.paged_attention(q, kc, vc, table, lens, out=out,
                                            workspace=workspace,
                                            total_kv_len=given)

            return run, out

        return prepare

    for page in PAGES:
        measure("kiln-paged", page, kiln_paged(page))
        if page != 16:
            paged.pop(page, None)  # gather+sdpa reads the pages of 16 only

    if not ragged:
        kd = k[:, :, :longest]
        vd = v[:, :, :longest]

        def kiln_contiguous() -> Tuple[Callable[[], torch.Tensor], torch.Tensor]:
            site = find_site(sites, "contiguous")
            workspace = make_workspace(site, batch, longest, hq, hkv)
            out = torch.empty(batch, hq, 1, HEAD_DIM, device=device, dtype=DTYPE)

            def run() -> torch.Tensor:
                return site.attention(q, kd, vd, out=out, workspace=workspace)

            return run, out

        def sdpa() -> Tuple[Callable[[], torch.Tensor], None]:
            def run() -> torch.Tensor:
                return F.scaled_dot_product_attention(q, kd, vd, scale=SCALE,
                                                      enable_gqa=True)

            return run, None

        measure("kiln", None, kiln_contiguous)
        measure("sdpa-flash", None, sdpa, backend=SDPBackend.FLASH_ATTENTION)
        measure("sdpa-cudnn", None, sdpa, backend=SDPBackend.CUDNN_ATTENTION)

    def gather_sdpa() -> Tuple[Callable[[], torch.Tensor], None]:
        if 16 not in paged:
            raise RuntimeError("the pages of 16 were not built")
        kc, vc, table = paged[16]
        index = table.long()
        mask: Optional[torch.Tensor] = None
        if ragged:
            width = index.shape[1] * 16
            past = torch.arange(width, device=device)[None, :] >= lens.long()[:, None]
            mask = torch.zeros(batch, 1, 1, width, device=device, dtype=DTYPE)
            mask.masked_fill_(past.view(batch, 1, 1, width), float("-inf"))

        def run() -> torch.Tensor:
            return F.scaled_dot_product_attention(
                q, gather(kc, index), gather(vc, index), attn_mask=mask,
                scale=SCALE, enable_gqa=True)

        return run, None

    measure("gather+sdpa", 16, gather_sdpa,
            backend=None if ragged else SDPBackend.FLASH_ATTENTION)
    paged.clear()
    print_ratios(rows, copy_tbs)
    return rows


# --------------------------------------------------------------------------
# Tables.
# --------------------------------------------------------------------------

RATIOS = (
    ("kiln-paged p16 / sdpa-flash", ("kiln-paged", 16), ("sdpa-flash", None)),
    ("kiln-paged p16 / gather+sdpa", ("kiln-paged", 16), ("gather+sdpa", 16)),
    ("p16 / p64", ("kiln-paged", 16), ("kiln-paged", 64)),
    ("kiln / sdpa-flash", ("kiln", None), ("sdpa-flash", None)),
)
TORCH_IMPLS = ("sdpa-flash", "sdpa-cudnn", "gather+sdpa")


def find_row(rows: List[Row], impl: str, page: Optional[int]) -> Optional[Row]:
    for row in rows:
        if row["impl"] == impl and row["page"] == page:
            return row
    return None


def tbs_of(rows: List[Row], impl: str, page: Optional[int]) -> Optional[float]:
    row = find_row(rows, impl, page)
    return row["TBs"] if row is not None and row["TBs"] else None


def label(row: Row) -> str:
    name = f"{row['hq']}/{row['hkv']} b{row['b']} kv{row['kv_len']}"
    return name + (" ragged" if row.get("ragged") else "")


def print_ratios(rows: List[Row], copy_tbs: Optional[float]) -> None:
    """TB/s ratios (above 1: the first is faster) and the case's summary."""
    parts = []
    for name, (impl_a, page_a), (impl_b, page_b) in RATIOS:
        if (find_row(rows, impl_a, page_a) is None
                or find_row(rows, impl_b, page_b) is None):
            continue
        a, b = tbs_of(rows, impl_a, page_a), tbs_of(rows, impl_b, page_b)
        parts.append(f"{name} {a / b:.2f}x" if a and b else f"{name} n/a")
    if parts:
        print("  TB/s ratios (above 1: the first is faster): " + ", ".join(parts))

    def best(impls: Tuple[str, ...]) -> Optional[Row]:
        good = [r for r in rows if r["impl"] in impls and r["ok"] and r["TBs"]]
        return max(good, key=lambda r: r["TBs"]) if good else None

    def name(row: Row) -> str:
        return row["impl"] + (f" p{row['page']}" if row["impl"] == "kiln-paged" else "")

    kiln_best = best(("kiln-paged", "kiln"))
    torch_best = best(TORCH_IMPLS)
    line = f"  summary {label(rows[0])}: "
    if kiln_best is None:
        line += "no Kiln row ok"
    else:
        share = f", {kiln_best['TBs'] / copy_tbs:.0%} of copy" if copy_tbs else ""
        line += f"Kiln {kiln_best['TBs']:.2f} TB/s ({name(kiln_best)}{share})"
    if torch_best is None:
        line += "; no PyTorch row ok"
    else:
        line += f"; PyTorch {torch_best['TBs']:.2f} TB/s ({name(torch_best)})"
    if kiln_best is not None and torch_best is not None:
        line += f"; Kiln / PyTorch {kiln_best['TBs'] / torch_best['TBs']:.2f}x"
    print(line)


def print_summary(cases: List[List[Row]], copy_tbs: Optional[float]) -> None:
    columns = (
        ("p16", "kiln-paged", 16), ("p64", "kiln-paged", 64), ("kiln", "kiln", None),
        ("flash", "sdpa-flash", None), ("cudnn", "sdpa-cudnn", None),
        ("gather", "gather+sdpa", 16),
    )
    copy = f"{copy_tbs:.2f}" if copy_tbs else "?"
    print(f"\nTB/s of K and V read (copy {copy} TB/s, paper peak {PEAK_TBS} TB/s; "
          "- = not run or failed)")
    print(f"{'case':<26}" + "".join(f"{title:>8}" for title, _, _ in columns)
          + f"{'p16/flash':>11}{'p16/gather':>11}")
    for rows in cases:
        if not rows:
            continue
        cells = [tbs_of(rows, impl, page) for _, impl, page in columns]
        line = f"{label(rows[0]):<26}" + "".join(
            f"{c:8.2f}" if c else f"{'-':>8}" for c in cells)
        for other in (cells[3], cells[5]):
            line += f"{cells[0] / other:10.2f}x" if cells[0] and other else f"{'-':>11}"
        print(line)


# --------------------------------------------------------------------------
# A model's decode step: eager launches against a CUDA graph.
# --------------------------------------------------------------------------


def graph_step(package: kiln.Package, sites: Dict[str, kiln.Site],
               layers: int) -> Dict[str, Any]:
    hq, hkv, batch, ctx, page = STEP_HQ, STEP_HKV, STEP_BATCH, STEP_CTX, STEP_PAGE
    result: Dict[str, Any] = {
        "layers": layers, "b": batch, "hq": hq, "hkv": hkv, "kv_len": ctx,
        "page": page, "eager_us": None, "graph_us": None, "equal": None,
        "equal_after_update": None,
    }
    print(f"\n== decode step: {layers} layers, GQA {hq}/{hkv}, batch {batch}, "
          f"kv_len {ctx}, pages of {page} ==")
    device = torch.device("cuda")
    try:
        site = find_site(sites, f"paged_h{hq}_{hkv}_p{page}")
        torch.manual_seed(7)
        max_pages = ctx // page
        num_pages = batch * max_pages
        q = torch.randn(batch, hq, 1, HEAD_DIM, device=device, dtype=DTYPE)
        caches = [
            (torch.randn(num_pages, page, hkv, HEAD_DIM, device=device, dtype=DTYPE),
             torch.randn(num_pages, page, hkv, HEAD_DIM, device=device, dtype=DTYPE))
            for _ in range(layers)
        ]
        table = (torch.randperm(num_pages, device=device).to(torch.int32)
                 .view(batch, max_pages))
        lens = torch.full((batch,), ctx, dtype=torch.int32, device=device)
        workspace = make_workspace(site, batch, max_pages * page, hq, hkv)
        eager_out = [torch.empty(batch, hq, 1, HEAD_DIM, device=device, dtype=DTYPE)
                     for _ in range(layers)]
        graph_out = [torch.empty_like(out) for out in eager_out]

        def step(outs: List[torch.Tensor]) -> None:
            for (kc, vc), out in zip(caches, outs):
                site.paged_attention(q, kc, vc, table, lens, out=out,
                                     workspace=workspace)

        package.prepare()
        step(eager_out)  # warm-up
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step(graph_out)
        torch.cuda.synchronize()

        def replay_equals_eager() -> bool:
            for out in eager_out + graph_out:
                out.fill_(float("nan"))
            graph.replay()
            step(eager_out)
            torch.cuda.synchronize()
            return all(torch.equal(graph_out[i], eager_out[i])
                       for i in (0, layers - 1))

        result["equal"] = replay_equals_eager()
        result["eager_us"] = event_us(lambda: step(eager_out))
        result["graph_us"] = event_us(graph.replay)
        # New lengths and a new page table in the captured buffers.
        lens.fill_(STEP_NEW_LEN)
        table.copy_(torch.randperm(num_pages, device=device).to(torch.int32)
                    .view(batch, max_pages))
        result["equal_after_update"] = replay_equals_eager()
    except Exception as error:
        result["error"] = f"{type(error).__name__}: {error}"[:300]
    if result["eager_us"] is not None and result["graph_us"] is not None:
        print(f"  eager {result['eager_us']:.1f} us/step "
              f"({result['eager_us'] / layers:.1f} per layer), graph "
              f"{result['graph_us']:.1f} us/step ({result['graph_us'] / layers:.1f} "
              f"per layer): {result['eager_us'] / result['graph_us']:.2f}x")
    print(f"  graph == eager: {result['equal']}, after new kv_lens and page "
          f"table: {result['equal_after_update']}")
    if "error" in result:
        print(f"  error: {result['error']}")
    return result


# --------------------------------------------------------------------------
# Driver.
# --------------------------------------------------------------------------


def plan(quick: bool) -> List[Case]:
    if quick:
        return [(32, 8, b, [s] * b, False) for b, s in QUICK_SHAPES]
    gen = torch.Generator().manual_seed(RAGGED_SEED)
    ragged_lens = torch.randint(RAGGED_MIN, RAGGED_MAX + 1, (RAGGED_BATCH,),
                                generator=gen).tolist()
    cases: List[Case] = []
    for hq, hkv in GQA:
        cases += [(hq, hkv, b, [s] * b, False) for b, s in SHAPES]
        cases.append((hq, hkv, RAGGED_BATCH, ragged_lens, True))
    return cases


def finite(value: Any) -> Any:
    """`value` with non-finite floats as None (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite(item) for item in value]
    return value


def write_results(path: str, results: Dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(finite(results), indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", help="package directory written by kilnc "
                        "from bench/decode_sites.mlir")
    parser.add_argument("--out", default="decode.json", help="JSON results file")
    parser.add_argument("--quick", action="store_true",
                        help="two cases at GQA 32/8 and a 4-layer decode step")
    parser.add_argument("--launch", choices=("graph", "eager"), default="graph",
                        help="time each call's CUDA-graph replay (default) or "
                        "the eager call")
    parser.add_argument("--l2-clear", choices=("write", "read"), default="write",
                        help="how the L2 is cleared before each timed call: "
                        "by do_bench's write of a buffer (default, the standing "
                        "record's), or by reading one (CUDA events)")
    parser.add_argument("--no-total-kv-len", action="store_true",
                        help="launch Kiln's paged sites without the batch's "
                        "total length (total_kv_len = 0)")
    options = parser.parse_args()
    try:
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]
    except Exception:
        pass
    if not torch.cuda.is_available():
        print("bench_decode: no CUDA device", file=sys.stderr)
        return 1

    try:
        package = kiln.Package(options.package)
    except Exception as error:
        print(f"bench_decode: cannot open {options.package}: {error}",
              file=sys.stderr)
        write_results(options.out, {"error": f"{type(error).__name__}: {error}",
                                    "rows": [], "graph_step": None})
        return 1
    sites = {site.function: site for site in package.sites}
    timer = make_timer() if options.l2_clear == "write" else read_clear_timer()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"timer {timer.__name__} ({options.launch} launches), "
          f"sites {sorted(sites)}")
    copy_tbs = copy_bandwidth(timer)
    torch.cuda.empty_cache()
    if copy_tbs is not None:
        print(f"copy bandwidth ({COPY_BYTES / 2**30:g} GiB, read + write): "
              f"{copy_tbs:.2f} TB/s "
              f"({copy_tbs / PEAK_TBS:.0%} of the paper {PEAK_TBS} TB/s)")

    rows: List[Row] = []
    results: Dict[str, Any] = {
        "copy_TBs": copy_tbs, "rows": rows, "graph_step": None,
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "launch": options.launch, "l2_clear": options.l2_clear,
        "total_kv_len_given": not options.no_total_kv_len,
    }
    cases: List[List[Row]] = []
    try:
        for index, case in enumerate(plan(options.quick)):
            start = time.time()
            case_rows = run_case(sites, case, 1000 + index, timer, copy_tbs,
                                 graphs=options.launch == "graph",
                                 give_total=not options.no_total_kv_len)
            rows.extend(case_rows)
            cases.append(case_rows)
            gc.collect()
            torch.cuda.empty_cache()
            write_results(options.out, results)
            print(f"  ({time.time() - start:.1f} s)")

        layers = QUICK_STEP_LAYERS if options.quick else STEP_LAYERS
        step = graph_step(package, sites, layers)
        results["graph_step"] = step
        gc.collect()
        torch.cuda.empty_cache()
    finally:
        write_results(options.out, results)

    print_summary(cases, copy_tbs)
    failed = [row for row in rows
              if row["impl"].startswith("kiln") and not row["ok"]]
    step_ok = step["equal"] is True and step["equal_after_update"] is True
    for row in failed:
        print(f"NOT OK: {label(row)} {row['impl']} page {row['page']}: "
              f"rel_err {row['rel_err']} {row.get('error', '')}")
    if not step_ok:
        print("NOT OK: the decode step's graph differs from eager (or failed)")
    print(f"\nresults in {options.out}")
    return 1 if failed or not step_ok else 0


if __name__ == "__main__":
    sys.exit(main())
