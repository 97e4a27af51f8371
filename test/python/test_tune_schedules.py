"""bench/tune_schedules.py's table step: a row only where a measured schedule
beat the rules' by more than the margin, a comment otherwise."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location(
    "tune_schedules", ROOT / "bench" / "tune_schedules.py")
tune = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tune)


def row(d, causal, variant, blocks, tflops):
    return dict(d=d, causal=causal, variant=variant, blocks_per_sm=blocks,
                TFLOPs=tflops)


def test_rules_match_the_compiler():
    assert tune.rules(64) == ("wgmma", 3)
    assert tune.rules(80) == ("mma", 0)
    assert tune.rules(40) == ("wgmma", 3)
    assert tune.rules(256) == ("wgmma", 0)


def test_rows_only_past_the_margin():
    results = {"device": "GPU", "torch": "2", "rows": [
        row(128, False, "wgmma", 0, 300), row(128, False, "mma", 0, 305),
        row(96, True, "wgmma", 0, 200), row(96, True, "mma", 3, 250),
        dict(d=96, causal=True, variant="wgmma", blocks_per_sm=3,
             rejected="wrong result"),
    ]}
    text = tune.table(results)
    assert "KILN_SCHEDULE(96, true, false, 3, 250, 200)" in text
    assert "// d128: the rules' wgmma, 0 blocks/SM (300 TFLOP/s; best mma, 0: 305)" in text
    assert text.count("KILN_SCHEDULE(") == 2  # the format line and one row
