#!/usr/bin/env python3
"""Tunes the schedule of Kiln's warp-specialised sm_90a kernel (consumer
warpgroups, keys a K/V tile, the softmax/P·V overlap, the consumers' turns)
per head dim and causality, and writes the table kilnc ships with
(lib/Conversion/KilnToGPU/WarpScheduleTable.inc). Three steps, the first and
the last where kilnc is, the second on the GPU:

    python3 bench/tune_warp_schedules.py compile DIR
    python3 bench/tune_warp_schedules.py measure DIR --out tuning.json
    python3 bench/tune_warp_schedules.py table tuning.json \\
        > lib/Conversion/KilnToGPU/WarpScheduleTable.inc

`compile` writes, per head dim (64, 128, 192, 256), a bf16 site file with a
causal and a non-causal site, and builds one sm_90a package per candidate
schedule (kilnc --warp-specialize-consumers/-tile-keys/-overlap/-ping-pong);
a candidate whose tiles do not fit in shared memory is recorded as such.
`measure` runs every site of every candidate on the same inputs (bf16,
b·s = 16k tokens, hidden 2048, 4096 tokens a sequence), checks that the
warp-specialised kernel is what ran (a profile of its first launch) and its
output against SDPA (relative L2 error below 2e-2, else the candidate is
out), and times it (median of triton.testing.do_bench); FLOPs = 4·b·h·s²·d,
halved for causal. `table` writes a row per measured (head dim, causal): the
fastest candidate, unless the rules' schedule (what kilnc picks without a
row) is within 2% of it, when the row is the rules' schedule (measuring
confirmed it; re-measuring within noise does not flip the table). Cases not
measured take the rules.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tune_schedules import (design_case, finish,  # noqa: E402
                            measured_cases, measured_on, parse_command)

HEAD_DIMS = (64, 128, 192, 256)


class Candidate(NamedTuple):
    consumers: int
    tile_keys: int
    overlap: bool
    ping_pong: bool

    @property
    def name(self) -> str:
        return (f"c{self.consumers}-t{self.tile_keys}-o{int(self.overlap)}"
                f"-p{int(self.ping_pong)}")

    def flags(self) -> List[str]:
        return [f"--warp-specialize-consumers={self.consumers}",
                f"--warp-specialize-tile-keys={self.tile_keys}",
                f"--warp-specialize-overlap={int(self.overlap)}",
                f"--warp-specialize-ping-pong={int(self.ping_pong)}"]


#: Every schedule the kernel can be built with; the turns need the overlap
#: and two consumers.
CANDIDATES: List[Candidate] = [
    Candidate(consumers, tile_keys, overlap, ping_pong)
    for consumers in (2, 3)
    for tile_keys in (64, 128)
    for overlap in (False, True)
    for ping_pong in (False, True)
    if not ping_pong or (overlap and consumers == 2)
]


def rules(head_dim: int) -> Candidate:
    """What kilnc picks without a table row (chooseWarpSpecializedSchedule
    in WarpSpecialized.cpp)."""
    return Candidate(3 if head_dim <= 64 else 2,
                     128 if head_dim <= 128 else 64, head_dim > 64, False)


def sites_text(head_dim: int) -> str:
    scale = head_dim ** -0.5
    tensor = f"tensor<?x?x?x{head_dim}xbf16>"
    lines = []
    for suffix, causal in (("", ""), ("_causal", "causal, ")):
        lines += [
            f"func.func @d{head_dim}{suffix}(%q: {tensor}, %k: {tensor}, "
            f"%v: {tensor}) -> {tensor} {{",
            f"  %o = kiln.attention %q, %k, %v {{{causal}scale = {scale:.9g} "
            f": f32}} : {tensor}, {tensor}, {tensor} -> {tensor}",
            f"  return %o : {tensor}",
            "}",
        ]
    return "\n".join(lines) + "\n"


def compile_all(out: Path, kilnc: str) -> int:
    out.mkdir(parents=True, exist_ok=True)
    ptxas = shutil.which("ptxas") or (
        "/usr/local/cuda/bin/ptxas"
        if os.access("/usr/local/cuda/bin/ptxas", os.X_OK) else None)
    unfit: Dict[str, str] = {}
    for head_dim in HEAD_DIMS:
        sites = out / f"d{head_dim}.mlir"
        sites.write_text(sites_text(head_dim))
        for candidate in CANDIDATES:
            target = out / f"d{head_dim}" / candidate.name
            command = [kilnc, str(sites), "-o", str(target), "--target=sm_90a",
                       *candidate.flags()]
            print(" ".join(command), flush=True)
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                # Only a schedule that does not fit may fail.
                if "warp-specialised kernel:" not in result.stderr:
                    print(result.stderr, file=sys.stderr)
                    return 1
                unfit[f"d{head_dim}/{candidate.name}"] = (
                    result.stderr.strip().splitlines()[0])
                continue
            # What the driver's JIT would refuse, found here.
            if ptxas:
                check = subprocess.run(
                    [ptxas, "-arch=sm_90a", str(target / "kernels.sm_90a.ptx"),
                     "-o", os.devnull], capture_output=True, text=True)
                if check.returncode != 0:
                    unfit[f"d{head_dim}/{candidate.name}"] = (
                        "ptxas: " + check.stderr.strip().splitlines()[0])
                    shutil.rmtree(target)
    (out / "unfit.json").write_text(json.dumps(unfit, indent=1))
    print(f"{len(unfit)} candidates do not fit; see {out / 'unfit.json'}")
    return 0


def ran_kernels(site, q, k, v, out) -> List[str]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        site.attention(q, k, v, out=out)
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if "kiln" in e.name})


def measure(root: Path) -> List[Dict[str, Any]]:
    import torch
    from triton.testing import do_bench

    sys.path.insert(0, str(ROOT / "python"))
    import kiln

    rows = []
    for head_dim in HEAD_DIMS:
        packages = {c: kiln.Package(str(root / f"d{head_dim}" / c.name))
                    for c in CANDIDATES
                    if (root / f"d{head_dim}" / c.name).is_dir()}
        for causal in (False, True):
            function = f"d{head_dim}{'_causal' if causal else ''}"
            q, k, v, reference, flops = design_case(head_dim, causal,
                                                    head_dim ** -0.5)
            for candidate, package in packages.items():
                site = {s.function: s for s in package.sites}[function]
                out = torch.full_like(q, float("nan"))
                row = dict(d=head_dim, causal=causal, **candidate._asdict())
                try:
                    kernels = ran_kernels(site, q, k, v, out)
                except kiln.KilnError as error:
                    row["rejected"] = f"launch failed: {error}"
                    rows.append(row)
                    print(row, flush=True)
                    continue
                error = float((out.double() - reference).norm() / reference.norm())
                row.update(kernels=kernels, rel_err=error)
                if not any("_ws_" in name for name in kernels):
                    row["rejected"] = "the warp-specialised kernel did not run"
                elif not error < 2e-2:
                    row["rejected"] = "wrong result"
                else:
                    ms = float(do_bench(
                        lambda: site.attention(q, k, v, out=out), warmup=25,
                        rep=100, return_mode="median"))
                    row.update(ms=ms, TFLOPs=flops / ms / 1e9)
                rows.append(row)
                print(row, flush=True)
    return rows


def table(results: Dict[str, Any]) -> str:
    lines = [
        "// Measured sm_90a schedules of the warp-specialised kernel, written",
        "// by bench/tune_warp_schedules.py: KILN_WARP_SCHEDULE(head dim,",
        "// causal, consumers, tile keys, overlap, ping-pong, TFLOP/s of the",
        "// choice, of the rules' schedule).",
    ] + measured_on(results)

    def describe(row: Dict[str, Any]) -> str:
        return (f"{row['consumers']} consumers, {row['tile_keys']} keys, "
                f"overlap {'on' if row['overlap'] else 'off'}, turns "
                f"{'on' if row['ping_pong'] else 'off'}")

    def is_default(row: Dict[str, Any], head_dim: int) -> bool:
        return Candidate(row["consumers"], row["tile_keys"], row["overlap"],
                         row["ping_pong"]) == rules(head_dim)

    for head_dim, causal, best, default, beats in measured_cases(
            results, is_default):
        case = f"d{head_dim}{' causal' if causal else ''}"
        chosen = best
        if not beats:
            # Within noise of the rules: the rules' schedule is the row, so
            # that a re-measurement does not flip it back and forth.
            chosen = default
            lines.append(f"// {case}: the rules' schedule (best "
                         f"{describe(best)}: {best['TFLOPs']:.0f} TFLOP/s)")
        lines.append(
            f"KILN_WARP_SCHEDULE({head_dim}, {str(causal).lower()}, "
            f"{chosen['consumers']}, {chosen['tile_keys']}, "
            f"{str(chosen['overlap']).lower()}, "
            f"{str(chosen['ping_pong']).lower()}, {chosen['TFLOPs']:.0f}, "
            f"{default['TFLOPs'] if default else 0:.0f})")
    return "\n".join(lines) + "\n"


def main() -> int:
    options = parse_command(__doc__.split("\n")[0], ["dir"],
                            "warp-tuning.json")
    if options.command == "compile":
        return compile_all(Path(options.dir), options.kilnc)
    return finish(options, measure, table, "tune_warp_schedules")

if __name__ == "__main__":
    sys.exit(main())
