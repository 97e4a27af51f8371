#!/usr/bin/env python3
"""Checks that Kiln launches from several threads, each on its own CUDA
stream, give bit for bit the results of the same launches run alone.

    python3 test/gpu/check_concurrency.py DENSE_PKG PAGED_PKG [--out log.json]
        [--streams 2,4,8] [--launches 50] [--quick]

DENSE_PKG: `kilnc test/gpu/attention_sites.mlir -o DENSE_PKG --target=sm_90a`;
PAGED_PKG: `kilnc test/gpu/paged_sites.mlir -o PAGED_PKG --target=sm_90a`.

Why: the Python layer used to keep one split-KV workspace per device for
every launch that passed no `workspace=`, so launches on two streams wrote
their partial results over each other's (a few wrong outputs in hundreds of
launches, nothing raised). Kinds of launch: a causal prefill (1000 x 1000),
a contiguous decode (1 x 8191) and a paged decode (4 uneven sequences, pages
scattered at random), the decodes with the split count chosen at launch and
forced to 8 (combine kernel) and 3 (cluster reduction on sm_90a). For each
kind, stream count and workspace mode (none passed / one per thread): every
thread gets its own inputs and NaN-poisoned outputs; each thread's launch is
run alone twice on the default stream (the two must agree bit for bit: the
reference); then the threads start together at a barrier and each queues
`launches` launches on its stream without synchronising. A configuration
passes when every output equals its thread's reference bit for bit. The
decodes are also captured in CUDA graphs (one per stream, after a warm-up)
and replayed concurrently from two threads.

Also: the debug validation of paged launches (`check=True`, KILN_CHECK=1 in a
child process) must name the sequence and value of a bad page-table entry or
kv_len, and leave good launches unchanged; and edge launches: an empty batch
(dense and paged) and a paged decode of 70,000 sequences (past the grid's
65535 limit on y/z), checked against float64 on 64 sampled sequences.
Prints one line per configuration, then `N passed, N failed`; exits 1 on
any failure.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402

import kiln  # noqa: E402

TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16,
                "f32": torch.float32}
DEVICE = torch.device("cuda")
Row = Dict[str, Any]


# --------------------------------------------------------------------------
# Sites and inputs.
# --------------------------------------------------------------------------


def head_dim_of(site: kiln.Site) -> int:
    if site.head_dim:
        return site.head_dim
    for kernel in site.package.kernels:
        if kernel.name == site.kernel and kernel.head_dim:
            return kernel.head_dim
    return 64


def head_counts(site: kiln.Site, q_default: int, kv_default: int) -> Tuple[int, int]:
    """The site's head counts, defaults where they are dynamic."""
    hq, hkv = site.q_heads, site.kv_heads
    if hq and hkv:
        return hq, hkv
    if hkv:
        return hkv * (q_default // kv_default), hkv
    if hq:
        return hq, kv_default if hq % kv_default == 0 else 1
    return q_default, kv_default


def pick(sites: List[kiln.Site], paged: bool, split_kv: bool = False) -> Optional[kiln.Site]:
    """A plain site (no mask, bias, window or softcap; bhsd; V's head dim
    Q's), bf16, causal, head dim 128 and pages of 16 preferred."""
    candidates = [
        s for s in sites
        if s.paged == paged and s.dtype in TORCH_DTYPES and s.mask == "none"
        and not s.bias and s.window is None and s.softcap is None
        and s.layout == "bhsd" and s.v_head_dim in (None, s.head_dim)
        and (s.split_kv or not split_kv)
    ]
    candidates.sort(key=lambda s: (s.dtype != "bf16", not s.causal,
                                   head_dim_of(s) != 128, paged and s.page_size != 16,
                                   not s.split_kv))
    return candidates[0] if candidates else None


def randn(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, device=DEVICE).to(dtype)


def nan_like(shape: Tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def scattered_cache(kv_lens: List[int], page: int, max_pages: int, hkv: int,
                    d: int, dv: int, dtype: torch.dtype):
    """Key/value caches with every sequence's pages scattered at random, and
    its page table (entries past a sequence's pages are valid pages too)."""
    needed = [max(1, math.ceil(n / page)) for n in kv_lens]
    num_pages = sum(needed) + 7
    perm = torch.randperm(num_pages)
    table = torch.empty(len(kv_lens), max_pages, dtype=torch.int32)
    cursor = 0
    for b, count in enumerate(needed):
        table[b] = perm[(cursor + torch.arange(max_pages)) % num_pages]
        cursor += count
    key_cache = randn(num_pages, page, hkv, d, dtype=dtype)
    value_cache = randn(num_pages, page, hkv, dv, dtype=dtype)
    return key_cache, value_cache, table.to(DEVICE), num_pages


def workspace_bytes(site: kiln.Site, batch: int, q_len: int, max_kv_len: int,
                    hq: int, hkv: int, dv: int, num_splits: int) -> int:
    """An explicit workspace for a launch: the size query's, or what a
    forced split count needs when that is more."""
    if not site.split_kv:
        return 0
    size = site.workspace_size(batch, q_len, max_kv_len, q_heads=hq, kv_heads=hkv)
    if num_splits > 1:
        size = max(size, num_splits * batch * hq * q_len * (dv + 2) * 4)
    return size


@dataclass
class Launch:
    """One thread's launch; its inputs live in `run`'s closure."""

    run: Callable[[torch.Tensor, Optional[torch.Tensor]], None]  # (out, workspace)
    out_shape: Tuple[int, ...]
    dtype: torch.dtype
    workspace_bytes: int
    splits: Optional[int] = None  # the split count it takes, where known


@dataclass
class Kind:
    name: str
    site: kiln.Site
    shape: str
    build: Callable[[], Launch]
    graph: bool


def dense_kind(name: str, site: kiln.Site, q_len: int, kv_len: int,
               num_splits: int, graph: bool) -> Kind:
    hq, hkv = head_counts(site, 8, 2)
    d = head_dim_of(site)
    dv = site.v_head_dim or d
    batch, q_len, kv_len = site.batch or 2, site.q_len or q_len, site.kv_len or kv_len
    dtype = TORCH_DTYPES[site.dtype]

    def build() -> Launch:
        q = randn(batch, hq, q_len, d, dtype=dtype)
        k = randn(batch, hkv, kv_len, d, dtype=dtype)
        v = randn(batch, hkv, kv_len, dv, dtype=dtype)

        def run(out: torch.Tensor, workspace: Optional[torch.Tensor]) -> None:
            site.attention(q, k, v, out=out, workspace=workspace,
                           num_splits=num_splits)

        nbytes = workspace_bytes(site, batch, q_len, kv_len, hq, hkv, dv, num_splits)
        splits = None
        try:  # the count a launch with a workspace of that size takes
            args, _ = site.attention_args(q, k, v, out=nan_like((batch, hq, q_len, dv), dtype))
            holder = torch.empty(max(nbytes, 16), dtype=torch.uint8, device=DEVICE)
            args.workspace, args.workspace_bytes = holder.data_ptr(), holder.numel()
            args.num_splits = num_splits
            splits = site.splits(args)
        except Exception:  # noqa: BLE001 (informative only)
            pass
        return Launch(run, (batch, hq, q_len, dv), dtype, nbytes, splits)

    shape = f"B={batch} Hq={hq} Hkv={hkv} q_len={q_len} kv_len={kv_len} num_splits={num_splits}"
    return Kind(name, site, shape, build, graph)


PAGED_LENS = [3000, 4097, 17, 8191]


def paged_kind(name: str, site: kiln.Site, num_splits: int) -> Kind:
    hq, hkv = head_counts(site, 8, 2)
    d = head_dim_of(site)
    dv = site.v_head_dim or d
    page = site.page_size or 16
    max_pages = math.ceil(max(PAGED_LENS) / page)
    batch, dtype = len(PAGED_LENS), TORCH_DTYPES[site.dtype]

    def build() -> Launch:
        key_cache, value_cache, table, _ = scattered_cache(
            PAGED_LENS, page, max_pages, hkv, d, dv, dtype)
        q = randn(batch, hq, 1, d, dtype=dtype)
        lens = torch.tensor(PAGED_LENS, dtype=torch.int32, device=DEVICE)

        def run(out: torch.Tensor, workspace: Optional[torch.Tensor]) -> None:
            site.paged_attention(q, key_cache, value_cache, table, lens, out=out,
                                 workspace=workspace, num_splits=num_splits)

        nbytes = workspace_bytes(site, batch, 1, max_pages * page, hq, hkv, dv,
                                 num_splits)
        return Launch(run, (batch, hq, 1, dv), dtype, nbytes)

    shape = (f"B={batch} Hq={hq} Hkv={hkv} q_len=1 kv_lens={PAGED_LENS} "
             f"page={page} num_splits={num_splits}")
    return Kind(name, site, shape, build, graph=True)


def kinds_of(dense: kiln.Package, paged: kiln.Package) -> List[Kind]:
    kinds: List[Kind] = []
    prefill = pick(dense.sites, paged=False)
    if prefill is None:
        print("note: no plain dense site: prefill skipped")
    else:
        kinds.append(dense_kind("prefill", prefill, 1000, 1000, 0, graph=False))
    decode = pick(dense.sites, paged=False, split_kv=True)
    if decode is None:
        print("note: no dense split_kv site: contiguous decode skipped")
    else:
        for suffix, splits in (("", 0), ("-split8", 8), ("-split3", 3)):
            kinds.append(dense_kind("decode" + suffix, decode, 1, 8191, splits, graph=True))
    site = pick(paged.sites, paged=True)
    if site is None:
        print("note: no plain paged site: paged decode skipped")
    else:
        kinds.append(paged_kind("paged-decode", site, 0))
        if site.split_kv:
            kinds.append(paged_kind("paged-decode-split8", site, 8))
            kinds.append(paged_kind("paged-decode-split3", site, 3))
        else:
            print(f"note: paged site {site.name} does not split: forced splits skipped")
    return kinds


# --------------------------------------------------------------------------
# Concurrent launches.
# --------------------------------------------------------------------------


def prepare(kind: Kind, threads: int, mode: str):
    """Each thread's launch, workspace and reference (run alone twice on the
    default stream); and whether every pair of lone runs agreed."""
    launches = [kind.build() for _ in range(threads)]
    workspaces = [
        torch.empty(max(l.workspace_bytes, 16), dtype=torch.uint8, device=DEVICE)
        if mode == "explicit" else None
        for l in launches
    ]
    refs, stable = [], True
    for launch, workspace in zip(launches, workspaces):
        first, second = (nan_like(launch.out_shape, launch.dtype) for _ in range(2))
        launch.run(first, workspace)
        launch.run(second, workspace)
        torch.cuda.synchronize()
        stable &= same_bits(first, second) and not bool(torch.isnan(first).any())
        refs.append(first)
    return launches, workspaces, refs, stable


def run_threads(count: int, body: Callable[[int], None]) -> List[str]:
    """Runs body(t) on `count` threads released together; their errors."""
    barrier = threading.Barrier(count)
    errors: List[str] = []
    index = torch.cuda.current_device()  # a new thread starts on device 0

    def worker(t: int) -> None:
        try:
            torch.cuda.set_device(index)
            barrier.wait()
            body(t)
        except Exception as error:  # noqa: BLE001
            errors.append(f"thread {t}: {type(error).__name__}: {error}")
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    torch.cuda.synchronize()
    return errors


def finish(row: Row, stable: bool, errors: List[str], mismatches: int) -> Row:
    row.update(mismatches=mismatches, reference_stable=stable, ok=(
        stable and not errors and mismatches == 0))
    if errors:
        row["error"] = errors[0]
    note = "" if stable else " (lone launches differ)"
    note += f" ({errors[0]})" if errors else ""
    print(f"{row['kind']} streams={row['streams']} workspace={row['workspace']} "
          f"launches={row['launches']} mismatches={mismatches} "
          f"{'PASS' if row['ok'] else 'FAIL'}{note}", flush=True)
    return row


def check_streams(kind: Kind, streams: int, mode: str, launches: int) -> Row:
    row: Row = dict(section="concurrency", kind=kind.name, site=kind.site.name,
                    streams=streams, workspace=mode, launches=launches)
    work, workspaces, refs, stable = prepare(kind, streams, mode)
    outs = [[nan_like(l.out_shape, l.dtype) for _ in range(launches)] for l in work]
    cuda_streams = [torch.cuda.Stream() for _ in range(streams)]
    torch.cuda.synchronize()  # inputs and poisoned outputs are written

    def body(t: int) -> None:
        with torch.cuda.stream(cuda_streams[t]):
            for out in outs[t]:
                work[t].run(out, workspaces[t])
        cuda_streams[t].synchronize()

    errors = run_threads(streams, body)
    mismatches = sum(not same_bits(out, refs[t])
                     for t in range(streams) for out in outs[t])
    return finish(row, stable, errors, mismatches)


def check_graphs(kind: Kind, mode: str, launches: int) -> Row:
    """One graph per stream, captured one after another, replayed from two
    threads at once; each replay's output copied out on its stream."""
    streams = 2
    row: Row = dict(section="graph", kind=kind.name + "+graph", site=kind.site.name,
                    streams=streams, workspace=mode, launches=launches)
    work, workspaces, refs, stable = prepare(kind, streams, mode)
    cuda_streams = [torch.cuda.Stream() for _ in range(streams)]
    statics = [nan_like(l.out_shape, l.dtype) for l in work]
    graphs = []
    try:
        kind.site.package.prepare()
        for t in range(streams):
            with torch.cuda.stream(cuda_streams[t]):  # warm-up: sizes workspaces
                work[t].run(statics[t], workspaces[t])
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=cuda_streams[t]):
                work[t].run(statics[t], workspaces[t])
            graphs.append(graph)
        torch.cuda.synchronize()
    except Exception as error:  # noqa: BLE001
        return finish(row, stable, [f"capture: {type(error).__name__}: {error}"], 0)
    copies: List[List[torch.Tensor]] = [[] for _ in range(streams)]

    def body(t: int) -> None:
        with torch.cuda.stream(cuda_streams[t]):
            for _ in range(launches):
                statics[t].fill_(float("nan"))
                graphs[t].replay()
                copies[t].append(statics[t].clone())
        cuda_streams[t].synchronize()

    errors = run_threads(streams, body)
    mismatches = sum(not same_bits(copy, refs[t])
                     for t in range(streams) for copy in copies[t])
    mismatches += sum(launches - len(c) for c in copies)  # replays that never ran
    return finish(row, stable, errors, mismatches)


# --------------------------------------------------------------------------
# Bad inputs under the debug validation, and edge launches.
# --------------------------------------------------------------------------


def mentions(message: str, index: int, value: int) -> bool:
    """Whether `message` names sequence `index` and the bad `value`."""
    def has(number: int) -> bool:
        pattern = rf"(?<![\w.-]){re.escape(str(number))}(?!\w|\.\d)"
        return re.search(pattern, message) is not None
    return has(index) and has(value)


def bad_input_cases(site: kiln.Site):
    """Good paged inputs (4 sequences of 3, 5, 3 and 4 pages, tables 6
    wide) and the bad variants: (name, table, kv_lens, sequence, value)."""
    page = site.page_size or 16
    hq, hkv = head_counts(site, 8, 2)
    d = head_dim_of(site)
    dv, dtype = site.v_head_dim or d, TORCH_DTYPES[site.dtype]
    lens, max_pages = [3 * page - 1, 5 * page, 2 * page + 1, 4 * page], 6
    key_cache, value_cache, table, num_pages = scattered_cache(
        lens, page, max_pages, hkv, d, dv, dtype)
    q = randn(len(lens), hq, 1, d, dtype=dtype)
    kv_lens = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    cases = []
    for name, seq, pos, value in (("negative-entry", 1, 2, -3),
                                  ("entry-past-cache", 2, 0, num_pages + 5)):
        bad = table.clone()
        bad[seq, pos] = value
        cases.append((name, bad, kv_lens, seq, value))
    for name, seq, value in (("kv-len-past-table", 3, max_pages * page + 1),
                             ("negative-kv-len", 0, -1)):
        bad = kv_lens.clone()
        bad[seq] = value
        cases.append((name, table, bad, seq, value))
    return (q, key_cache, value_cache, table, kv_lens), cases


def section_row(section: str, name: str, ok: bool, message: str) -> Row:
    print(f"{section} {name} {'PASS' if ok else 'FAIL'}: {message}", flush=True)
    return dict(section=section, kind=name, ok=ok, message=message)


def check_bad_inputs(site: Optional[kiln.Site], dense_pkg: str, paged_pkg: str) -> List[Row]:
    if site is None:
        return []
    if "check" not in inspect.signature(site.paged_attention).parameters:
        print("note: Site.paged_attention has no check= keyword: bad-input section skipped")
        return []
    rows: List[Row] = []
    good, cases = bad_input_cases(site)
    try:
        plain = site.paged_attention(*good)
        checked = site.paged_attention(*good, check=True)
        torch.cuda.synchronize()
        same = same_bits(plain, checked)
        rows.append(section_row("bad-input", "good-launch-checked", same,
                                "same bits as unchecked" if same else "differs from unchecked"))
    except Exception as error:  # noqa: BLE001
        rows.append(section_row("bad-input", "good-launch-checked", False, repr(error)))
    q, key_cache, value_cache, _, _ = good
    for name, table, kv_lens, seq, value in cases:
        try:
            site.paged_attention(q, key_cache, value_cache, table, kv_lens, check=True)
            torch.cuda.synchronize()
            rows.append(section_row("bad-input", name, False, "no error raised"))
        except kiln.KilnError as error:
            ok = mentions(str(error), seq, value)
            rows.append(section_row("bad-input", name, ok, str(error) + (
                "" if ok else f" (expected sequence {seq} and value {value})")))
        except Exception as error:  # noqa: BLE001
            rows.append(section_row("bad-input", name, False, repr(error)))
    # KILN_CHECK=1: the same validation without check=True (read once per
    # process, so in a child).
    try:
        child = subprocess.run(
            [sys.executable, os.path.abspath(__file__), dense_pkg, paged_pkg,
             "--env-check-child"],
            env=dict(os.environ, KILN_CHECK="1"), capture_output=True, text=True,
            timeout=600)
        lines = (child.stdout + child.stderr).strip().splitlines() or ["(no output)"]
        rows.append(section_row("bad-input", "KILN_CHECK=1", child.returncode == 0, lines[-1]))
    except Exception as error:  # noqa: BLE001
        rows.append(section_row("bad-input", "KILN_CHECK=1", False, repr(error)))
    return rows


def env_check_child(paged_pkg: str) -> int:
    """Run with KILN_CHECK=1: case (a) without check= must raise."""
    torch.manual_seed(2)
    torch.zeros(1, device=DEVICE)
    site = pick(kiln.Package(paged_pkg).sites, paged=True)
    (q, key_cache, value_cache, _, _), cases = bad_input_cases(site)
    _, table, kv_lens, seq, value = cases[0]
    try:
        site.paged_attention(q, key_cache, value_cache, table, kv_lens)
        torch.cuda.synchronize()
    except kiln.KilnError as error:
        ok = mentions(str(error), seq, value)
        print(f"{'raised' if ok else 'raised without sequence/value'}: {error}")
        return 0 if ok else 1
    print("no error raised under KILN_CHECK=1")
    return 1


def paged_reference(site: kiln.Site, q, key_cache, value_cache, table, kv_lens,
                    rows: List[int]) -> torch.Tensor:
    """float64 attention of sequences `rows` of a paged launch."""
    page, hkv = key_cache.shape[1], key_cache.shape[2]
    hq, sq = q.shape[1], q.shape[2]
    out = torch.zeros(len(rows), hq, sq, value_cache.shape[3], dtype=torch.float64,
                      device=DEVICE)
    for i, b in enumerate(rows):
        n = int(kv_lens[b])
        keys = torch.arange(n, device=DEVICE)
        pages = table[b, keys // page].long()
        k = key_cache[pages, keys % page].double().permute(1, 0, 2)
        v = value_cache[pages, keys % page].double().permute(1, 0, 2)
        k, v = k.repeat_interleave(hq // hkv, 0), v.repeat_interleave(hq // hkv, 0)
        s = site.scale * q[b].double() @ k.transpose(-1, -2)  # [Hq, sq, n]
        if site.causal:
            rows_, cols = torch.arange(sq, device=DEVICE)[:, None], keys[None, :]
            s = s.masked_fill(cols > rows_ + (n - sq), float("-inf"))
        out[i] = torch.softmax(s, -1) @ v
    return out


def check_edges(dense: Optional[kiln.Site], paged: Optional[kiln.Site]) -> List[Row]:
    rows: List[Row] = []

    def attempt(name: str, fn: Callable[[], str]) -> None:
        try:
            message = fn()
            torch.cuda.synchronize()
            rows.append(section_row("edge", name, True, message))
        except Exception as error:  # noqa: BLE001
            lines = str(error).strip().splitlines() or [""]
            rows.append(section_row("edge", name, False,
                                    f"{type(error).__name__}: {lines[-1]}"))

    def expect_shape(out: torch.Tensor, shape: Tuple[int, ...]) -> str:
        torch.cuda.synchronize()
        if tuple(out.shape) != shape:
            raise AssertionError(f"output shape {tuple(out.shape)}, expected {shape}")
        return f"empty output {shape}"

    if dense is not None:
        hq, hkv = head_counts(dense, 8, 2)
        d, dtype = head_dim_of(dense), TORCH_DTYPES[dense.dtype]
        dv = dense.v_head_dim or d
        q = randn(0, hq, 1, d, dtype=dtype)
        k, v = randn(0, hkv, 64, d, dtype=dtype), randn(0, hkv, 64, dv, dtype=dtype)
        attempt("empty-batch-attention",
                lambda: expect_shape(dense.attention(q, k, v), (0, hq, 1, dv)))
    if paged is None:
        return rows
    hq, hkv = head_counts(paged, 8, 2)
    d, dtype, page = head_dim_of(paged), TORCH_DTYPES[paged.dtype], paged.page_size or 16
    dv = paged.v_head_dim or d
    key_cache = randn(8, page, hkv, d, dtype=dtype)
    value_cache = randn(8, page, hkv, dv, dtype=dtype)
    empty_q = randn(0, hq, 1, d, dtype=dtype)
    table = torch.zeros(0, 4, dtype=torch.int32, device=DEVICE)
    lens = torch.zeros(0, dtype=torch.int32, device=DEVICE)
    attempt("empty-batch-paged", lambda: expect_shape(
        paged.paged_attention(empty_q, key_cache, value_cache, table, lens), (0, hq, 1, dv)))

    def huge_batch() -> str:
        batch = 70_000
        hq, hkv = head_counts(paged, 8, 1)
        num_pages = batch + 3
        key_cache = torch.randn(num_pages, page, hkv, d, device=DEVICE, dtype=dtype)
        value_cache = torch.randn(num_pages, page, hkv, dv, device=DEVICE, dtype=dtype)
        table = torch.randperm(num_pages, device=DEVICE)[:batch].view(batch, 1).to(torch.int32)
        lens = torch.randint(1, page + 1, (batch,), device=DEVICE, dtype=torch.int32)
        q = torch.randn(batch, hq, 1, d, device=DEVICE, dtype=dtype)
        out = paged.paged_attention(q, key_cache, value_cache, table, lens)
        torch.cuda.synchronize()
        sample = torch.randperm(batch)[:64].tolist()
        ref = paged_reference(paged, q, key_cache, value_cache, table, lens, sample)
        got = out[sample].double()
        rel = float((got - ref).nan_to_num(nan=float("inf")).norm() / ref.norm())
        if not rel < 1e-2:
            raise AssertionError(f"relative error {rel:.2e} on 64 sampled sequences")
        return f"B={batch} Hq={hq} Hkv={hkv} pages of {page}: rel_err {rel:.2e} on 64 sequences"

    attempt("paged-70000-sequences", huge_batch)
    return rows


def check_compile(cache: Optional[str]) -> List[Row]:
    """kiln.transformers' attention under torch.compile(fullgraph=True): the
    site lookup (lock, disk cache) must not break the graph. `cache` is a
    KILN_CACHE holding the bf16 d128 sites (kilnc is not needed)."""
    if not cache:
        print("note: no --kiln-cache: torch.compile section skipped")
        return []
    os.environ["KILN_CACHE"] = cache
    import kiln.transformers as kt

    class Module:
        is_causal = True
        training = False

    def layer(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out, _ = kt.attention_forward(Module(), q, k, v, None)
        return out * 2

    q = randn(2, 8, 300, 128, dtype=torch.bfloat16)
    k = randn(2, 2, 300, 128, dtype=torch.bfloat16)
    v = randn(2, 2, 300, 128, dtype=torch.bfloat16)
    rows: List[Row] = []
    try:
        torch._dynamo.reset()
        kt._sites.clear()  # the first lookup happens while tracing
        kt._packages_by_digest.clear()
        compiled = torch.compile(layer, fullgraph=True)
        got = compiled(q, k, v)
        want = layer(q, k, v)
        torch.cuda.synchronize()
        same = same_bits(got, want)
        rows.append(section_row("compile", "transformers-fullgraph", same,
                                "fullgraph compiled, same bits as eager" if same
                                else "differs from eager"))
    except Exception as error:  # noqa: BLE001
        lines = str(error).strip().splitlines() or [""]
        rows.append(section_row("compile", "transformers-fullgraph", False,
                                f"{type(error).__name__}: {lines[0][:300]}"))
    return rows


def check_disk_cache() -> List[Row]:
    """Two processes asking for the same uncompiled site at once, sharing
    one fresh KILN_CACHE: both must open the whole package (one compiles,
    the other waits for its lock). Needs kilnc here; test/python's
    test_processes_compiling_one_site_share_the_cache runs the same in CI."""
    import tempfile

    try:
        kiln.find_kilnc()
    except kiln.KilnError:
        print("note: no kilnc here: disk-cache section skipped "
              "(test/python covers it)")
        return []
    script = ("import sys; sys.path.insert(0, sys.argv[1]);"
              "import kiln.transformers as kt;"
              "from kiln.site import SiteSpec;"
              "site = kt.site_for(SiteSpec.dense('bf16', 64, 64, 0.125, causal=True));"
              "print(site.name, len(site.package.kernels))")
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, KILN_CACHE=cache)
        workers = [subprocess.Popen([sys.executable, "-c", script, str(ROOT / "python")],
                                    env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
                   for _ in range(2)]
        results = [worker.communicate(timeout=600) for worker in workers]
        ok = all(w.returncode == 0 for w in workers) and len({r[0] for r in results}) == 1
        message = "; ".join((r[0] or r[1]).strip().splitlines()[-1] for r in results)
    return [section_row("disk-cache", "two-processes-one-site", ok, message)]


# --------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dense_package")
    parser.add_argument("paged_package")
    parser.add_argument("--out", help="JSON list of the rows")
    parser.add_argument("--streams", default="2,4,8")
    parser.add_argument("--launches", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="2 streams, 10 launches")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sections",
                        default="concurrency,bad-input,edge,compile,disk-cache",
                        help="comma-separated: concurrency (with the graphs), "
                             "bad-input, edge, compile, disk-cache")
    parser.add_argument("--kiln-cache", help="a KILN_CACHE with the bf16 d128 "
                        "sites, for the torch.compile section")
    parser.add_argument("--env-check-child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if not torch.cuda.is_available():
        print("check_concurrency: no CUDA device", file=sys.stderr)
        return 1
    if options.env_check_child:
        return env_check_child(options.paged_package)
    stream_counts = [int(s) for s in options.streams.split(",") if s.strip()]
    stream_counts = [n for n in stream_counts if n > 0]  # 0 marks graph rows
    launches = options.launches
    if options.quick:
        stream_counts, launches = [2], 10
    torch.manual_seed(options.seed)
    dense, paged = kiln.Package(options.dense_package), kiln.Package(options.paged_package)
    torch.zeros(1, device=DEVICE)  # the device's primary context, current
    dense.prepare()
    paged.prepare()
    major, minor = torch.cuda.get_device_capability(DEVICE)
    print(f"device {torch.cuda.get_device_name(DEVICE)} (sm_{major}{minor}), torch "
          f"{torch.__version__}, loads {dense.select_target(major, minor)}; "
          f"streams {stream_counts}, {launches} launches a thread", flush=True)

    sections = set(options.sections.split(","))
    rows: List[Row] = []
    start = time.time()
    for kind in kinds_of(dense, paged) if "concurrency" in sections else []:
        try:
            splits = kind.build().splits
        except Exception:  # noqa: BLE001
            splits = None
        print(f"== {kind.name}: site {kind.site.name}, {kind.shape}"
              + (f", a launch takes {splits} splits" if splits else ""), flush=True)
        configs = [(s, m) for s in stream_counts for m in ("default", "explicit")]
        graph_modes = ("default", "explicit") if kind.graph else ()
        for streams, mode in configs + [(0, m) for m in graph_modes]:
            try:
                rows.append(check_graphs(kind, mode, launches) if streams == 0
                            else check_streams(kind, streams, mode, launches))
                torch.cuda.synchronize()
            except Exception as error:  # noqa: BLE001
                traceback.print_exc()
                graph = streams == 0
                row = dict(section="graph" if graph else "concurrency",
                           kind=kind.name + ("+graph" if graph else ""),
                           site=kind.site.name, streams=streams or 2,
                           workspace=mode, launches=launches)
                rows.append(finish(row, True, [f"{type(error).__name__}: {error}"], 0))
    paged_site = pick(paged.sites, paged=True)
    if "bad-input" in sections:
        rows += check_bad_inputs(paged_site, options.dense_package,
                                 options.paged_package)
    if "edge" in sections:
        rows += check_edges(pick(dense.sites, paged=False), paged_site)
    if "compile" in sections:
        rows += check_compile(options.kiln_cache)
    if "disk-cache" in sections:
        rows += check_disk_cache()

    failed = [row for row in rows if not row["ok"]]
    if options.out:
        Path(options.out).write_text(json.dumps(rows, indent=1))
        print(f"rows in {options.out} ({time.time() - start:.1f} s)")
    print(f"{len(rows) - len(failed)} passed, {len(failed)} failed", flush=True)
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
