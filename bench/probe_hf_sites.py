"""The sites of Hugging Face models under torch.compile(backend="kiln"):
per captured graph, what kilnc fused, which graph values each site reads
and replaces, what was rewritten or left to Inductor and why, and the
model's output against the same model in float64 (eager bf16's error
beside). A diagnostic for models whose output parts from eager.

  KILN_VERIFY=1 python3 bench/probe_hf_sites.py t5 whisper [--keep DIR]

Models are bench_torch_compile.py's (b = 2, s = 256 unless --seq)."""

import argparse
import copy
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "test" / "gpu"))

import torch  # noqa: E402

import bench_torch_compile as models  # noqa: E402
import kiln.dynamo  # noqa: E402
from check_torch_compile import relative_error  # noqa: E402
from keep_graphs import keep_graphs  # noqa: E402

SITE_KEYS = ("dtype", "head_dim", "causal", "scale", "layout", "mask", "bias",
             "masked_score", "window", "softcap")


def probe(name: str, batch: int, seq: int) -> None:
    torch.manual_seed(0)
    model = models.build(name, batch, seq)
    inputs = models.model_inputs(name, batch, seq)
    wide = copy.deepcopy(model).double()
    wide_inputs = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point()
                        else x for x in inputs)
    with torch.no_grad():
        exact = models.tensor_of(wide(*wide_inputs))
        del wide
        want = models.tensor_of(model(*inputs))
        torch._dynamo.reset()
        start = len(kiln.dynamo.reports)
        try:
            got = models.tensor_of(torch.compile(model, backend="kiln")(*inputs))
            print(f"{name}: eager bf16 vs float64 {relative_error(want, exact):.2e}, "
                  f"kiln vs float64 {relative_error(got, exact):.2e}", flush=True)
        except Exception as error:  # noqa: BLE001
            print(f"{name}: raised {error!r}"[:3000], flush=True)
    for entry in kiln.dynamo.reports[start:]:
        print(f" graph {entry['key']}: rewritten {entry['rewritten']} skipped "
              f"{entry['skipped']} fallback {entry['fallback']} verified {entry['verified']}")
        for site in (entry["report"] or {}).get("sites", []):
            names = {role: (operand or {}).get("value")
                     for role, operand in site["operands"].items()}
            print("   site", {key: site.get(key) for key in SITE_KEYS}, names,
                  "out", site["output"]["value"])
        for unfused in (entry["report"] or {}).get("unfused", []):
            print("   unfused", unfused)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="+")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--keep", type=Path, default=None,
                        help="copy each graph's report, FX code and weightless ONNX here")
    options = parser.parse_args()
    if options.keep:
        os.environ["KILN_KEEP_GRAPHS"] = "1"
    for name in options.models:
        probe(name, options.batch, options.seq)
        if options.keep:
            keep_graphs(options.keep, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
