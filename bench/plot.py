#!/usr/bin/env python3
"""Draws a benchmark's standing record as an SVG bar chart, one group of bars
per case and one bar per implementation. Plain SVG text, no plotting library
needed.

    python3 bench/plot.py prefill bench/results/prefill-h200.json docs/prefill-h200.svg
    python3 bench/plot.py decode bench/results/decode-h200.json docs/decode-h200.svg
    python3 bench/plot.py torch-compile bench/results/torch-compile-h200.json \\
        docs/torch-compile-h200.svg

prefill: TFLOP/s by (head dim, sequence, causal) from bench_attention.py.
decode: TB/s of K and V read by (query heads/KV heads, batch, context) from
bench_decode.py. torch-compile: each model's speed-up over eager (eager ms /
ms) under Inductor and under Kiln, from bench_torch_compile.py, by (model, s).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

BAR, GAP, LEFT, TOP, HEIGHT, BOTTOM = 9, 14, 56, 46, 300, 92

Case = Tuple[Any, ...]


@dataclass
class Chart:
    """What one kind of record plots: its series (key, legend, colour), the
    case of a row, the case's label under the axis and in a bar's title, the
    value of a row (None: no bar), and the axis."""

    series: List[Tuple[str, str, str]]
    case: Callable[[Dict[str, Any]], Case]
    label: Callable[[Case], str]
    describe: Callable[[Case], str]
    value: Callable[[Dict[str, Any]], Optional[float]]
    axis: str
    title: str
    footnote: str = ""
    #: The series key of a row (decode tells paged rows by page size).
    impl: Callable[[Dict[str, Any]], str] = lambda row: row["impl"]


def _prefill() -> Chart:
    def label(case: Case) -> str:
        d, s, causal = case
        return f"d{d} {s // 1024}k{' c' if causal else ''}"

    def describe(case: Case) -> str:
        d, s, causal = case
        return f"d{d} s{s}{' causal' if causal else ''}"

    return Chart(
        series=[("kiln", "Kiln", "#d95f02"), ("sdpa-flash", "SDPA flash", "#7570b3"),
                ("sdpa-cudnn", "SDPA cuDNN", "#1b9e77"),
                ("flex", "FlexAttention", "#e7298a")],
        case=lambda r: (r["d"], r["s"], bool(r["causal"])), label=label,
        describe=describe, value=lambda r: r.get("TFLOPs"), axis="TFLOP/s",
        title="bf16 prefill, b·s = 16k tokens, hidden 2048: TFLOP/s by case",
        footnote="c = causal")


def _decode() -> Chart:
    def label(case: Case) -> str:
        hq, hkv, b, kv_len, uneven = case
        return f"{hq}/{hkv} b{b} " + ("uneven" if uneven else f"{kv_len / 1024:.3g}k")

    def describe(case: Case) -> str:
        hq, hkv, b, kv_len, uneven = case
        return (f"{hq}/{hkv} heads, batch {b}, context "
                + (f"{kv_len} on average" if uneven else f"{kv_len}"))

    def impl(row: Dict[str, Any]) -> str:
        if row["impl"] == "kiln-paged":
            return f"kiln-paged{row['page']}"
        return row["impl"]

    return Chart(
        series=[("kiln-paged16", "Kiln paged 16", "#d95f02"),
                ("kiln", "Kiln contiguous", "#fdae61"),
                ("sdpa-flash", "SDPA flash", "#7570b3"),
                ("sdpa-cudnn", "SDPA cuDNN", "#1b9e77"),
                ("gather+sdpa", "gather + SDPA", "#e7298a")],
        case=lambda r: (r["hq"], r["hkv"], r["b"], r["kv_len"], bool(r.get("ragged"))),
        label=label,
        describe=describe, value=lambda r: r.get("TBs"),
        axis="TB/s", title="bf16 paged decode, d128: K and V read, TB/s by case",
        impl=impl)


def _torch_compile(rows: List[Dict[str, Any]]) -> Chart:
    eager = {(r["model"], r["s"]): r["ms"] for r in rows
             if r.get("impl") == "eager" and r.get("ms")}

    def value(row: Dict[str, Any]) -> Optional[float]:
        base = eager.get((row["model"], row["s"]))
        if row.get("impl") == "eager" or not base or not row.get("ms"):
            return None
        return base / row["ms"]

    return Chart(
        series=[("inductor", "Inductor", "#7570b3"), ("kiln", "Kiln", "#d95f02")],
        case=lambda r: (r["model"], r["s"]),
        label=lambda c: f"{c[0]} {c[1] // 1024}k",
        describe=lambda c: f"{c[0]} s{c[1]}", value=value, axis="× eager",
        title="torch.compile, bf16, b·s = 16k tokens: speed-up over eager")


def draw(results: Dict[str, Any], kind: str, title: Optional[str] = None) -> str:
    rows = results["rows"] if isinstance(results, dict) else results
    chart = _torch_compile(rows) if kind == "torch-compile" else (
        _prefill() if kind == "prefill" else _decode())
    impl = chart.impl
    keys = {key for key, _, _ in chart.series}
    value: Dict[Tuple[Case, str], float] = {}
    order: Dict[Case, None] = {}
    for row in rows:
        v = chart.value(row) if impl(row) in keys else None
        if v is None:
            continue
        order.setdefault(chart.case(row), None)
        value[(chart.case(row), impl(row))] = v
    if not value:
        raise ValueError("no timed rows in the results")
    top = max(value.values())
    step = 10 ** math.floor(math.log10(top)) if top > 0 else 1
    scale_max = step * (int(top // step) + 1)
    group = len(chart.series) * BAR + GAP
    width = max(LEFT + len(order) * group + 20, LEFT + 130 * len(chart.series))
    height = TOP + HEIGHT + BOTTOM
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
           f'height="{height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="18" font-size="14">'
           f'{escape(title or chart.title)}</text>']
    for i, (_, legend, color) in enumerate(chart.series):
        x = LEFT + i * 130
        out.append(f'<rect x="{x}" y="28" width="10" height="10" fill="{color}"/>'
                   f'<text x="{x + 14}" y="37">{escape(legend)}</text>')

    def y_of(v: float) -> float:
        return TOP + HEIGHT - HEIGHT * v / scale_max

    tick = 0.0
    while tick <= scale_max + 1e-9:
        y = y_of(tick)
        out.append(f'<line x1="{LEFT}" x2="{width - 10}" y1="{y:.1f}" '
                   f'y2="{y:.1f}" stroke="#ddd"/>'
                   f'<text x="{LEFT - 6}" y="{y + 4:.1f}" '
                   f'text-anchor="end">{tick:g}</text>')
        tick += step
    out.append(f'<text x="14" y="{TOP + HEIGHT / 2}" transform="rotate(-90 14 '
               f'{TOP + HEIGHT / 2})" text-anchor="middle">{escape(chart.axis)}</text>')
    for c, case in enumerate(order):
        x0 = LEFT + c * group + GAP / 2
        for i, (key, _, color) in enumerate(chart.series):
            v = value.get((case, key))
            if v is None:
                continue
            y = y_of(v)
            out.append(f'<rect x="{x0 + i * BAR:.1f}" y="{y:.1f}" '
                       f'width="{BAR - 1}" height="{TOP + HEIGHT - y:.1f}" '
                       f'fill="{color}"><title>{escape(key)} '
                       f'{escape(chart.describe(case))}: {v:.3g}</title></rect>')
        cx = x0 + len(chart.series) * BAR / 2
        ly = TOP + HEIGHT + 8
        out.append(f'<text x="{cx:.1f}" y="{ly}" text-anchor="end" '
                   f'transform="rotate(-60 {cx:.1f} {ly})">'
                   f'{escape(chart.label(case))}</text>')
    where = ""
    if isinstance(results, dict):
        where = (f'{results.get("device", "")}, torch {results.get("torch", "")}')
    foot = "; ".join(p for p in (where, chart.footnote) if p)
    out.append(f'<text x="{LEFT}" y="{height - 8}" fill="#555">{escape(foot)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=["prefill", "decode", "torch-compile"])
    parser.add_argument("results", help="JSON written by the benchmark")
    parser.add_argument("svg", help="SVG file to write")
    parser.add_argument("--title", help="the chart's title (default: the kind's)")
    options = parser.parse_args()
    try:
        results = json.loads(Path(options.results).read_text())
        svg = draw(results, options.kind, options.title)
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"plot: {options.results}: {error}", file=sys.stderr)
        return 1
    Path(options.svg).write_text(svg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
