"""bench/tune_schedules.py's table step: a row per measured case, the
fastest schedule where it beat the rules' by more than the margin, the rules'
otherwise; the shipped table is what it writes from the committed
measurements."""

import importlib.util
import json
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


def test_the_shipped_table_is_the_measured_one():
    results = json.loads(
        (ROOT / "bench" / "results" / "tuning-h200.json").read_text())
    shipped = (ROOT / "lib" / "Conversion" / "KilnToGPU" /
               "ScheduleTable.inc").read_text()
    assert tune.table(results) == shipped


def test_rules_kept_within_the_margin():
    results = {"device": "GPU", "torch": "2", "rows": [
        row(128, False, "wgmma", 0, 300), row(128, False, "mma", 0, 305),
        row(96, True, "wgmma", 0, 200), row(96, True, "mma", 3, 250),
        dict(d=96, causal=True, variant="wgmma", blocks_per_sm=3,
             rejected="wrong result"),
    ]}
    text = tune.table(results)
    assert "KILN_SCHEDULE(96, true, false, 3, 250, 200)" in text
    assert "KILN_SCHEDULE(128, false, true, 0, 300, 300)" in text
    assert "// d128: the rules' schedule (best mma, 0 blocks/SM: 305 TFLOP/s)" in text
    # The format line and a row per measured case.
    assert text.count("KILN_SCHEDULE(") == 3
