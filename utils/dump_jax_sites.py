#!/usr/bin/env python3
"""Writes what kiln.jax.jit sees of a function of utils/save_stablehlo.py's
table: the StableHLO text it hands kilnc (each op located at its jaxpr
step, ``kiln.e<N>``), kilnc's report of it, and, per site, each operand's
sources and why the rewrite can or cannot take it. For finding why a site
is not rewritten on a machine with JAX.

    python3 utils/dump_jax_sites.py CASE[,CASE...] OUT_DIR

A CASE `bench:NAME:SEQ[:BATCH]` is bench/bench_jax.py's model NAME at SEQ
tokens (and BATCH sequences, default 1) instead; `wild:NAME[:SEQ]` is
utils/jax_wild.py's function NAME (of `cases` or `library_cases`) at SEQ
tokens (default 64).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "utils"))
sys.path.insert(0, str(ROOT / "bench"))

import jax  # noqa: E402

import save_stablehlo  # noqa: E402
from kiln.jax import rewrite  # noqa: E402
from kiln.jax.report import run_report  # noqa: E402


def main() -> int:
    names, out = sys.argv[1].split(","), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    table = save_stablehlo.cases()
    for name in names:
        if name.startswith("bench:"):
            import bench_jax

            _, model, seq, *batch = name.split(":")
            batch = int(batch[0]) if batch else 1
            function, args = bench_jax.model(model, batch, int(seq))
            name = f"{model}-{seq}-b{batch}"
        elif name.startswith("wild:"):
            import jax_wild

            _, case, *seq = name.split(":")
            seq = int(seq[0]) if seq else 64
            table_of = {**jax_wild.cases(seq), **jax_wild.library_cases(seq)}
            function, args = table_of[case]()
            name = f"{case}-{seq}"
        else:
            function, args = table[name]()
        flat, tree = jax.tree_util.tree_flatten(args)

        def flat_function(*leaves, function=function, tree=tree):
            return function(*jax.tree_util.tree_unflatten(tree, list(leaves)))

        lowering = rewrite.lowering_of(flat_function, flat)
        (out / f"{name}.mlir").write_text(lowering.text)
        report = run_report(lowering.text, {})
        (out / f"{name}.report.json").write_text(json.dumps(report, indent=1))
        arguments = rewrite._argument_names(lowering.text)
        print(f"== {name}: {len(report.get('sites', []))} sites, "
              f"{len(lowering.cuts)} cut steps")
        for site in report.get("sites", []):
            planned = rewrite._plan(site, arguments, lowering.steps, lowering.cuts)
            print(f"  site {site.get('location')}: "
                  f"{planned.why_not or 'rewritable'}")
            for role, entry in site["operands"].items():
                if entry is None:
                    continue
                sources = [(s.get("value"), [t["op"] for t in s["transforms"]],
                            rewrite.replayable(s["transforms"]))
                           for s in rewrite.operand_sources(entry)]
                print(f"    {role}: {entry.get('value')} sources {sources}")
            print(f"    output: {site.get('output')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
