#!/usr/bin/env python3
"""Decode attention per layer inside a captured decode step.

    kilnc bench/decode_sites.mlir -o PACKAGE_DIR
    python3 bench/bench_decode_layers.py PACKAGE_DIR [--layers 32] [--out F]

bench_decode.py times one attention call as a CUDA graph of its own, so every
call there carries what any graph-timed call costs (4.6-4.9 us on the H200 for
a one-thread kernel, bench_decode_floor.py): at the smallest shapes that is
half of a call. A serving decode step runs a model's layers in one graph, so
here each implementation runs LAYERS attention calls, each layer with its own
Q, K and V (paged caches of 16 scattered at random, as bench_decode.py builds
them), captured in one graph and replayed under the same timer
(triton.testing.do_bench, its 256 MB write before every replay); the figure
is the replay's time over LAYERS. The caches of all layers together are
larger than the L2 at every shape here, so no layer reads another replay's
lines. Implementations: kiln-paged (pages of 16), kiln (contiguous cache),
sdpa-cudnn (contiguous), gather+sdpa (pages of 16 gathered, then SDPA); and,
for the floor, with triton: launch (a one-thread kernel a layer), read (a
kernel a layer that only reads that layer's K and V, bench_decode_floor.py's
kernel with 2048 elements a program, four warps) and read+1 (the read and a one-thread kernel a layer,
the least a split launch with a combine kernel costs).
Before timing, the first and the last layer's outputs are checked against
float64 (first and last sequence), Kiln's outputs poisoned with NaN first.

Rows: hq, hkv, b, kv_len, layers, impl, us_per_layer, rel_err, ok. Exits 1
when a row is not ok.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE))

import kiln  # noqa: E402
import bench_decode as decode  # noqa: E402
import bench_decode_floor as floor  # noqa: E402
from bench_attention import make_timer  # noqa: E402

SHAPES = ((32, 8, 8, 1024), (8, 1, 8, 1024), (8, 1, 1, 32768),
          (8, 1, 64, 4096))
PAGE = 16


class Layer:
    """One layer's inputs: q, contiguous k and v, paged caches, table."""

    def __init__(self, hq: int, hkv: int, batch: int, keys: int,
                 gen: torch.Generator) -> None:
        device = torch.device("cuda")
        shape = (batch, hkv, keys, decode.HEAD_DIM)
        self.q = torch.randn(batch, hq, 1, decode.HEAD_DIM, device=device,
                             dtype=decode.DTYPE)
        self.k = torch.randn(shape, device=device, dtype=decode.DTYPE)
        self.v = torch.randn(shape, device=device, dtype=decode.DTYPE)
        self.kc, self.vc, self.table = decode.build_pages(
            self.k, self.v, [keys] * batch, PAGE, gen)
        self.index = self.table.long()
        self.out = torch.empty(batch, hq, 1, decode.HEAD_DIM, device=device,
                               dtype=decode.DTYPE)


def calls(impl: str, layers: List[Layer], sites: Dict[str, kiln.Site],
          hq: int, hkv: int, batch: int, keys: int
          ) -> Callable[[], List[torch.Tensor]]:
    """A step of `impl` over every layer; returns the layers' outputs."""
    lens = torch.full((batch,), keys, dtype=torch.int32, device="cuda")
    if impl == "kiln-paged":
        site = decode.find_site(sites, f"paged_h{hq}_{hkv}_p{PAGE}")
        workspace = decode.make_workspace(
            site, batch, layers[0].table.shape[1] * PAGE, hq, hkv)

        def step() -> List[torch.Tensor]:
            return [site.paged_attention(
                layer.q, layer.kc, layer.vc, layer.table, lens, out=layer.out,
                workspace=workspace, total_kv_len=batch * keys)
                for layer in layers]
        return step
    if impl == "kiln":
        site = decode.find_site(sites, "contiguous")
        workspace = decode.make_workspace(site, batch, keys, hq, hkv)

        def step() -> List[torch.Tensor]:
            return [site.attention(layer.q, layer.k, layer.v, out=layer.out,
                                   workspace=workspace) for layer in layers]
        return step
    if impl == "sdpa-cudnn":
        def step() -> List[torch.Tensor]:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return [F.scaled_dot_product_attention(
                    layer.q, layer.k, layer.v, scale=decode.SCALE,
                    enable_gqa=True) for layer in layers]
        return step
    if impl == "gather+sdpa":
        def step() -> List[torch.Tensor]:
            return [F.scaled_dot_product_attention(
                layer.q, decode.gather(layer.kc, layer.index),
                decode.gather(layer.vc, layer.index), scale=decode.SCALE,
                enable_gqa=True) for layer in layers]
        return step
    if impl in ("launch", "read", "read+1"):
        one = torch.zeros(1, device="cuda")
        sources = [torch.cat([layer.k.flatten(), layer.v.flatten()])
                   for layer in layers]
        count = sources[0].numel()
        block, iters, warps = 2048, 1, 4
        programs = -(-count // (block * iters))
        partial = torch.empty(programs, device="cuda")

        def step() -> List[torch.Tensor]:
            for source in sources:
                if impl != "launch":
                    floor.read_kernel[(programs,)](
                        source, partial, count, BLOCK=block, ITERS=iters,
                        num_warps=warps)
                if impl != "read":
                    one.add_(1)
            return []
        return step
    raise ValueError(impl)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--out")
    options = parser.parse_args()
    sites = {site.function: site for site in kiln.Package(options.package).sites}
    timer = make_timer()
    rows: List[Dict[str, Any]] = []
    failed = False
    for hq, hkv, batch, keys in SHAPES:
        gen = torch.Generator().manual_seed(11)
        torch.manual_seed(11)
        layers = [Layer(hq, hkv, batch, keys, gen)
                  for _ in range(options.layers)]
        checked = (layers[0], layers[-1])
        refs = [decode.reference(layer.q, layer.k, layer.v, [keys] * batch,
                                 [0, batch - 1]) for layer in checked]
        nbytes = 2 * batch * hkv * keys * decode.HEAD_DIM * 2
        print(f"== GQA {hq}/{hkv}, batch {batch}, {keys} keys, "
              f"{options.layers} layers of {nbytes / 1e6:.1f} MB")
        impls = ["kiln-paged", "kiln", "sdpa-cudnn", "gather+sdpa"]
        if floor.triton is not None:
            impls += ["launch", "read", "read+1"]
        for impl in impls:
            row: Dict[str, Any] = {
                "hq": hq, "hkv": hkv, "b": batch, "kv_len": keys,
                "layers": options.layers, "impl": impl, "bytes": nbytes,
                "us_per_layer": None, "rel_err": None, "ok": False}
            try:
                step = calls(impl, layers, sites, hq, hkv, batch, keys)
                for layer in layers:
                    layer.out.fill_(float("nan"))
                outs = step()
                torch.cuda.synchronize()
                worst: Optional[float] = 0.0
                ok = True
                for out, ref in zip((outs[:1] + outs[-1:]), refs):
                    rel, good = decode.check_output(out, ref)
                    ok = ok and good
                    worst = None if rel is None or worst is None else max(worst, rel)
                if not outs:
                    worst = None  # the floor's kernels compute no attention
                del outs
                us = timer(decode.graph_replay(step)) * 1000 / options.layers
                row.update(us_per_layer=us, rel_err=worst, ok=ok)
            except Exception as error:
                row["error"] = f"{type(error).__name__}: {error}"[:300]
            failed = failed or not row["ok"]
            rows.append(row)
            us_text = ("-" if row["us_per_layer"] is None
                       else f"{row['us_per_layer']:8.2f} us/layer")
            print(f"  {impl:<12} {us_text}  rel_err {row['rel_err']}  "
                  f"{'ok' if row['ok'] else 'FAIL ' + row.get('error', '')}",
                  flush=True)
        del layers
        torch.cuda.empty_cache()
        if options.out:
            with open(options.out, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(),
                           "timer": getattr(timer, "__name__", "timer"),
                           "rows": rows}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
