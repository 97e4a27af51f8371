#!/usr/bin/env python3
"""Draws bench_attention.py's results as an SVG bar chart: TFLOP/s by case,
one bar per implementation (Kiln, SDPA-flash, SDPA-cuDNN, FlexAttention).
Plain SVG text, no plotting library needed.

    python3 bench/plot_prefill.py bench/results/prefill-h200.json docs/prefill-h200.svg
"""

from __future__ import annotations

import argparse
import json
import sys
from html import escape
from pathlib import Path
from typing import Dict, List, Tuple

IMPLS = [
    ("kiln", "Kiln", "#d95f02"),
    ("sdpa-flash", "SDPA flash", "#7570b3"),
    ("sdpa-cudnn", "SDPA cuDNN", "#1b9e77"),
    ("flex", "FlexAttention", "#e7298a"),
]
BAR, GAP, LEFT, TOP, HEIGHT, BOTTOM = 9, 14, 56, 46, 300, 92


def cases(rows: List[Dict]) -> List[Tuple[int, int, bool]]:
    """The (head dim, sequence, causal) cases in the order they ran."""
    seen: Dict[Tuple[int, int, bool], None] = {}
    for row in rows:
        seen.setdefault((row["d"], row["s"], bool(row["causal"])), None)
    return list(seen)


def draw(results: Dict, title: str) -> str:
    rows = [r for r in results["rows"] if "TFLOPs" in r]
    if not rows:
        raise ValueError("no timed rows in the results")
    order = cases(rows)
    value = {(r["d"], r["s"], bool(r["causal"]), r["impl"]): r["TFLOPs"]
             for r in rows}
    top = max(r["TFLOPs"] for r in rows)
    scale_max = 100 * (int(top) // 100 + 1)
    group = len(IMPLS) * BAR + GAP
    width = LEFT + len(order) * group + 20
    height = TOP + HEIGHT + BOTTOM
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
           f'height="{height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="18" font-size="14">{escape(title)}</text>']
    for i, (_, label, color) in enumerate(IMPLS):
        x = LEFT + i * 130
        out.append(f'<rect x="{x}" y="28" width="10" height="10" fill="{color}"/>'
                   f'<text x="{x + 14}" y="37">{escape(label)}</text>')

    def y_of(tflops: float) -> float:
        return TOP + HEIGHT - HEIGHT * tflops / scale_max

    for tick in range(0, scale_max + 1, 100):
        y = y_of(tick)
        out.append(f'<line x1="{LEFT}" x2="{width - 10}" y1="{y:.1f}" '
                   f'y2="{y:.1f}" stroke="#ddd"/>'
                   f'<text x="{LEFT - 6}" y="{y + 4:.1f}" '
                   f'text-anchor="end">{tick}</text>')
    out.append(f'<text x="14" y="{TOP + HEIGHT / 2}" transform="rotate(-90 14 '
               f'{TOP + HEIGHT / 2})" text-anchor="middle">TFLOP/s</text>')
    for c, (d, s, causal) in enumerate(order):
        x0 = LEFT + c * group + GAP / 2
        for i, (impl, _, color) in enumerate(IMPLS):
            tflops = value.get((d, s, causal, impl))
            if tflops is None:
                continue
            y = y_of(tflops)
            out.append(f'<rect x="{x0 + i * BAR:.1f}" y="{y:.1f}" '
                       f'width="{BAR - 1}" height="{TOP + HEIGHT - y:.1f}" '
                       f'fill="{color}"><title>{impl} d{d} s{s}'
                       f'{" causal" if causal else ""}: {tflops:.0f}</title></rect>')
        label = f"d{d} {s // 1024}k{' c' if causal else ''}"
        cx = x0 + len(IMPLS) * BAR / 2
        ly = TOP + HEIGHT + 8
        out.append(f'<text x="{cx:.1f}" y="{ly}" text-anchor="end" '
                   f'transform="rotate(-60 {cx:.1f} {ly})">{escape(label)}</text>')
    out.append(f'<text x="{LEFT}" y="{height - 8}" fill="#555">'
               f'{escape(results.get("device", ""))}, torch '
               f'{escape(results.get("torch", ""))}; c = causal</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", help="JSON written by bench_attention.py")
    parser.add_argument("svg", help="SVG file to write")
    parser.add_argument("--title", default="bf16 prefill, b·s = 16k tokens, "
                        "hidden 2048: TFLOP/s by case")
    options = parser.parse_args()
    try:
        results = json.loads(Path(options.results).read_text())
        svg = draw(results, options.title)
    except (OSError, ValueError, KeyError) as error:
        print(f"plot_prefill: {options.results}: {error}", file=sys.stderr)
        return 1
    Path(options.svg).write_text(svg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
