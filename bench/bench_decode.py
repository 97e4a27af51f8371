#!/usr/bin/env python3
"""Decode-shaped attention (one query per sequence) of a Kiln package against
PyTorch, side by side in one run, on the same inputs.

    python3 bench/bench_decode.py PACKAGE_DIR [--out decode.json]

Decode reads every key and value once per step, so it is judged by memory
bandwidth: bytes of K and V read (plus Q and the output) divided by the time,
against the H200's 4.8 TB/s. Cases: bf16, head_dim 128, 32 query heads over
8 KV heads (GQA, as Llama-3-8B), batch 8, key lengths 1024, 4096 and 16384,
contiguous K/V (no paging). The package needs a bf16 d128 site without mask,
bias, window or softcap whose heads and lengths are dynamic (for example
bench/attention_sites.mlir). Compared with SDPA's flash and cuDNN backends
(enable_gqa) and with SDPA after repeating K/V to all heads.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import kiln  # noqa: E402
from bench_attention import make_timer, relative_error  # noqa: E402

HEAD_DIM = 128
Q_HEADS = 32
KV_HEADS = 8
BATCH = 8
KV_LENGTHS = (1024, 4096, 16384)
PEAK_TBS = 4.8


def find_site(package: kiln.Package) -> Optional[kiln.Site]:
    for site in package.sites:
        if (
            site.dtype == "bf16"
            and site.head_dim == HEAD_DIM
            and site.mask == "none"
            and not site.bias
            and site.window is None
            and site.softcap is None
            and site.q_heads is None
            and site.kv_heads is None
            and site.q_len is None
            and site.kv_len is None
            and site.layout == "bhsd"
        ):
            return site
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", help="package directory written by kilnc")
    parser.add_argument("--out", help="JSON results file")
    args = parser.parse_args()

    package = kiln.Package(args.package)
    site = find_site(package)
    if site is None:
        print("no bf16 d128 site with dynamic heads and lengths; nothing to run")
        return 1
    timer = make_timer()
    device = torch.device("cuda")
    dtype = torch.bfloat16
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"timer {timer.__name__}, site {site.name} ({site.kernel})"
    )
    rows: List[Dict[str, Any]] = []
    for kv_len in KV_LENGTHS:
        q = torch.randn(BATCH, Q_HEADS, 1, HEAD_DIM, device=device, dtype=dtype)
        k = torch.randn(BATCH, KV_HEADS, kv_len, HEAD_DIM, device=device, dtype=dtype)
        v = torch.randn_like(k)
        scale = site.scale
        moved = 2 * (2 * k.numel() + 2 * q.numel())
        base = {"b": BATCH, "hq": Q_HEADS, "hkv": KV_HEADS, "d": HEAD_DIM,
                "q_len": 1, "kv_len": kv_len, "bytes": moved}

        def record(impl: str, ms: float, **extra: Any) -> None:
            row = dict(base, impl=impl, ms=ms, TBs=moved / ms / 1e9, **extra)
            rows.append(row)
            err = f"  rel_err {extra['rel_err']:.1e}" if "rel_err" in extra else ""
            print(
                f"kv {kv_len:>6} {impl:<22} {ms * 1000:9.1f} us "
                f"{row['TBs']:6.2f} TB/s ({row['TBs'] / PEAK_TBS:4.0%} of peak){err}",
                flush=True,
            )

        reference = F.scaled_dot_product_attention(
            q.double(), k.double().repeat_interleave(Q_HEADS // KV_HEADS, 1),
            v.double().repeat_interleave(Q_HEADS // KV_HEADS, 1), scale=scale
        )
        for name, backend in (
            ("sdpa-flash", SDPBackend.FLASH_ATTENTION),
            ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION),
        ):
            try:
                with sdpa_kernel(backend):
                    def run() -> torch.Tensor:
                        return F.scaled_dot_product_attention(
                            q, k, v, scale=scale, enable_gqa=True
                        )

                    got = run()
                    record(name, timer(run), rel_err=relative_error(got, reference))
            except Exception as error:
                rows.append(dict(base, impl=name, error=str(error)[:200]))
                print(f"{name}: {str(error)[:200]}")
        try:
            group = Q_HEADS // KV_HEADS

            def repeated() -> torch.Tensor:
                return F.scaled_dot_product_attention(
                    q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                    scale=scale,
                )

            record("sdpa repeat-kv", timer(repeated))
        except Exception as error:
            print(f"sdpa repeat-kv: {str(error)[:200]}")

        out = torch.full_like(q, float("nan"))
        launch_args, out = site.attention_args(q, k, v, out=out)
        stream = torch.cuda.current_stream().cuda_stream
        site.launch(launch_args, stream)
        torch.cuda.synchronize()
        record(
            "kiln",
            timer(lambda: site.launch(launch_args, stream)),
            rel_err=relative_error(out, reference),
        )

    if args.out:
        Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                              "torch": torch.__version__,
                                              "rows": rows}, indent=1))
        print(f"results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
