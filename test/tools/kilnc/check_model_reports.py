#!/usr/bin/env python3
"""Runs `kilnc MODEL --report=json` on the graphs of ../shared/models and checks
each report against what the model is (from the models' README): exactly two
sites with the right heads, KV heads, head dim, lengths, scale and causal flag,
no causal mask left as an operand, BERT's padding mask kept, no unfused softmax.

    check_model_reports.py KILNC MODELS_DIR
"""

import json
import math
import subprocess
import sys
from pathlib import Path

# prefix: (q_heads, kv_heads, head_dim, q_len, causal, mask kinds allowed)
EXPECTED = {
    "bert": (2, 2, 64, 64, False, {"boolean", "additive"}),
    "gpt2": (2, 2, 64, 64, True, {"none"}),
    "llama_gqa": (4, 2, 64, 64, True, {"none"}),
    "vit": (2, 2, 64, 65, False, {"none"}),
}


def check(kilnc: str, model: Path) -> list:
    prefix = next(p for p in sorted(EXPECTED, key=len, reverse=True)
                  if model.name.startswith(p))
    q_heads, kv_heads, head_dim, q_len, causal, masks = EXPECTED[prefix]
    run = subprocess.run([kilnc, str(model), "--report=json"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        return [f"exit {run.returncode}: {run.stderr.strip()}"]
    report = json.loads(run.stdout)
    problems = []
    sites = report["sites"]
    if len(sites) != 2:
        problems.append(f"{len(sites)} sites, expected 2")
    for index, site in enumerate(sites):
        got = (site["q_heads"], site["kv_heads"], site["head_dim"],
               site["q_len"], site["kv_len"], site["causal"])
        want = (q_heads, kv_heads, head_dim, q_len, q_len, causal)
        if got != want:
            problems.append(f"site {index}: (Hq, Hkv, D, Sq, Sk, causal) = {got}, expected {want}")
        if not math.isclose(site["scale"], 1 / math.sqrt(head_dim), rel_tol=1e-6):
            problems.append(f"site {index}: scale {site['scale']}")
        if site["mask"] not in masks:
            problems.append(f"site {index}: mask {site['mask']}, expected one of {sorted(masks)}")
        if not site["nodes"]:
            problems.append(f"site {index}: no node names")
    if report["unfused"]:
        problems.append(f"unfused softmaxes: {report['unfused']}")
    return problems


def main() -> int:
    kilnc, models = sys.argv[1], Path(sys.argv[2])
    failures = 0
    files = sorted(models.glob("*.onnx"))
    for model in files:
        problems = check(kilnc, model)
        print(f"{model.name}: {'ok' if not problems else '; '.join(problems)}")
        failures += bool(problems)
    print(f"{len(files) - failures} of {len(files)} models ok")
    return 1 if failures or not files else 0


if __name__ == "__main__":
    sys.exit(main())
