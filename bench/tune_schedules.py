#!/usr/bin/env python3
"""Tunes the sm_90a schedule of Kiln's tensor-core kernel (which variant,
wgmma or mma.sync, and how many blocks per SM its registers leave room for)
per head dim and causality, and writes the table kilnc ships with
(lib/Conversion/KilnToGPU/ScheduleTable.inc). Three steps, the first and the
last where kilnc is, the second on the GPU:

    python3 bench/tune_schedules.py compile bench/tune_sites.mlir DIR
    python3 bench/tune_schedules.py measure DIR --out tuning.json
    python3 bench/tune_schedules.py table tuning.json \\
        > lib/Conversion/KilnToGPU/ScheduleTable.inc

`compile` builds one sm_90a package per candidate schedule
(kilnc --schedule=... --blocks-per-sm=...). `measure` runs every site of
every candidate on the same inputs (bf16, b·s = 16k tokens, hidden 2048, 4096
tokens a sequence), checks each output against SDPA (relative L2 error below
2e-2, else the candidate is out) and times it (median of
triton.testing.do_bench); FLOPs = 4·b·h·s²·d, halved for causal. `table`
writes a row per measured (head dim, causal): the fastest candidate, unless
the rules' schedule (what kilnc picks without a row) is within 2% of it, when
the row is the rules' schedule (measuring confirmed it; re-measuring within
noise does not flip the table). Cases not measured take the rules.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]

#: (variant, blocks per SM): 0 leaves registers to ptxas (two blocks of 128
#: threads at up to 255 registers), 3 caps them at 168. (4, a cap of 128,
#: leaves wgmma at d256 too few registers for its accumulators.)
CANDIDATES: List[Tuple[str, int]] = [
    (variant, blocks) for variant in ("wgmma", "mma") for blocks in (0, 3)
]
TOKENS, HIDDEN, SEQ = 16384, 2048, 4096
#: A candidate must beat the rules by more than this to replace them in a row.
MARGIN = 1.02


def candidate_dir(root: Path, variant: str, blocks: int) -> Path:
    return root / f"{variant}-b{blocks}"


def rules(head_dim: int) -> Tuple[str, int]:
    """What kilnc picks for bf16 equal head dims without a table row (see
    chooseSchedule in MmaKernel.cpp)."""
    padded16 = -(-head_dim // 16) * 16
    padded64 = -(-head_dim // 64) * 64
    wgmma = 3 * padded64 <= 4 * padded16
    return ("wgmma" if wgmma else "mma", 3 if head_dim <= 64 else 0)


def compile_all(sites: Path, out: Path, kilnc: str) -> int:
    for variant, blocks in CANDIDATES:
        target = candidate_dir(out, variant, blocks)
        command = [kilnc, str(sites), "-o", str(target), "--target=sm_90a",
                   f"--schedule={variant}", f"--blocks-per-sm={blocks}",
                   # The portable kernel is what is tuned here.
                   "--warp-specialize=0"]
        print(" ".join(command), flush=True)
        if subprocess.run(command).returncode != 0:
            print(f"tune_schedules: kilnc failed for {target}", file=sys.stderr)
            return 1
    return 0


def design_case(head_dim: int, causal: bool, scale: float) -> Tuple[Any, ...]:
    """The tuners' case of one head dim: (q, k, v, SDPA-flash's output in
    f64, FLOPs): TOKENS tokens in sequences of SEQ, HIDDEN / head_dim
    heads, bf16, seed 0."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    heads = HIDDEN // head_dim
    batch = TOKENS // SEQ
    torch.manual_seed(0)
    q = torch.randn(batch, heads, SEQ, head_dim, dtype=torch.bfloat16,
                    device="cuda")
    k, v = torch.randn_like(q), torch.randn_like(q)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        reference = F.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=scale).double()
    flops = 4 * batch * heads * SEQ * SEQ * head_dim / (2 if causal else 1)
    return q, k, v, reference, flops


def measure(root: Path) -> List[Dict[str, Any]]:
    import torch
    from triton.testing import do_bench

    sys.path.insert(0, str(ROOT / "python"))
    import kiln

    packages = {c: kiln.Package(str(candidate_dir(root, *c))) for c in CANDIDATES}
    rows = []
    cases = [(s.function, s) for s in packages[CANDIDATES[0]].sites]
    for function, first in cases:
        head_dim = int(function.split("_")[0][1:])
        causal = function.endswith("_causal")
        q, k, v, reference, flops = design_case(head_dim, causal, first.scale)
        for (variant, blocks), package in packages.items():
            site = {s.function: s for s in package.sites}[function]
            out = torch.full_like(q, float("nan"))
            site.attention(q, k, v, out=out)
            error = float((out.double() - reference).norm() / reference.norm())
            row = dict(d=head_dim, causal=causal, variant=variant,
                       blocks_per_sm=blocks, rel_err=error)
            if not error < 2e-2:
                row["rejected"] = "wrong result"
            else:
                ms = float(do_bench(lambda: site.attention(q, k, v, out=out),
                                    warmup=25, rep=100, return_mode="median"))
                row.update(ms=ms, TFLOPs=flops / ms / 1e9)
            rows.append(row)
            print(row, flush=True)
    return rows


def measured_cases(results: Dict[str, Any], is_default: Callable[
        [Dict[str, Any], int], bool]) -> Iterator[
        Tuple[int, bool, Dict[str, Any], Optional[Dict[str, Any]], bool]]:
    """Per (head dim, causal) of the measured rows: the fastest row, the
    rules' row (`is_default(row, head_dim)`; None if not measured), and
    whether the fastest beat the rules' by more than the margin."""
    rows = [r for r in results["rows"] if "TFLOPs" in r]
    for head_dim, causal in sorted({(r["d"], r["causal"]) for r in rows}):
        mine = [r for r in rows if (r["d"], r["causal"]) == (head_dim, causal)]
        best = max(mine, key=lambda r: r["TFLOPs"])
        default = next((r for r in mine if is_default(r, head_dim)), None)
        beats = not (default and best["TFLOPs"] <= MARGIN * default["TFLOPs"])
        yield head_dim, causal, best, default, beats


def measured_on(results: Dict[str, Any]) -> List[str]:
    """The table's comment lines on where and how it was measured."""
    return [
        f"// Measured on {results.get('device', '?')}, torch "
        f"{results.get('torch', '?')}: bf16, b*s = {TOKENS} tokens, "
        f"hidden {HIDDEN}, {SEQ} tokens a sequence.",
        f"// A row per measured case: the fastest schedule where it beat the "
        f"rules' by more",
        f"// than {round((MARGIN - 1) * 100)}%, the rules' schedule otherwise.",
    ]


def table(results: Dict[str, Any]) -> str:
    lines = [
        "// Measured sm_90a schedules of the tensor-core kernel, written by",
        "// bench/tune_schedules.py: KILN_SCHEDULE(head dim, causal, wgmma,",
        "// blocks per SM, TFLOP/s of the choice, of the rules' schedule).",
    ] + measured_on(results)
    for head_dim, causal, best, default, beats in measured_cases(
            results, lambda r, d: (r["variant"], r["blocks_per_sm"]) == rules(d)):
        chosen = best
        if not beats:
            # Within noise of the rules: the rules' schedule is the row, so
            # that a re-measurement does not flip it back and forth.
            chosen = default
            lines.append(f"// d{head_dim}{' causal' if causal else ''}: the "
                         f"rules' schedule (best {best['variant']}, "
                         f"{best['blocks_per_sm']} blocks/SM: "
                         f"{best['TFLOPs']:.0f} TFLOP/s)")
        lines.append(
            f"KILN_SCHEDULE({head_dim}, {str(causal).lower()}, "
            f"{str(chosen['variant'] == 'wgmma').lower()}, "
            f"{chosen['blocks_per_sm']}, {chosen['TFLOPs']:.0f}, "
            f"{default['TFLOPs'] if default else 0:.0f})")
    return "\n".join(lines) + "\n"


def finish(options: Any, measure: Callable[[Path], List[Dict[str, Any]]],
           table: Callable[[Dict[str, Any]], str], name: str) -> int:
    """The measure and table commands: rows written with the device and
    torch version, or the table printed from such a file."""
    if options.command == "measure":
        import torch

        rows = measure(Path(options.dir))
        Path(options.out).write_text(json.dumps(
            {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
             "rows": rows}, indent=1))
        return 0
    try:
        results = json.loads(Path(options.results).read_text())
        sys.stdout.write(table(results))
    except (OSError, ValueError, KeyError) as error:
        print(f"{name}: {options.results}: {error}", file=sys.stderr)
        return 1
    return 0


def parse_command(description: str, compile_args: List[str],
                  default_out: str) -> Any:
    """The tuners' command line: compile COMPILE_ARGS [--kilnc], measure DIR
    [--out], table RESULTS."""
    parser = argparse.ArgumentParser(description=description)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("compile")
    for name in compile_args:
        build.add_argument(name)
    build.add_argument("--kilnc", default=os.environ.get("KILNC", "kilnc"))
    run = commands.add_parser("measure")
    run.add_argument("dir")
    run.add_argument("--out", default=default_out)
    emit = commands.add_parser("table")
    emit.add_argument("results")
    return parser.parse_args()


def main() -> int:
    options = parse_command(__doc__.split("\n")[0], ["sites", "dir"],
                            "tuning.json")
    if options.command == "compile":
        return compile_all(Path(options.sites), Path(options.dir), options.kilnc)
    return finish(options, measure, table, "tune_schedules")

if __name__ == "__main__":
    sys.exit(main())
