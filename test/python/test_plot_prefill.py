"""bench/plot_prefill.py: an SVG with one bar per (case, implementation) that
has a time, and a clear error for results it cannot read."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "plot_prefill.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)],
                          capture_output=True, text=True)


def test_one_bar_per_timed_row(tmp_path):
    rows = [dict(d=128, s=4096, causal=False, impl="kiln", TFLOPs=310.0),
            dict(d=128, s=4096, causal=False, impl="sdpa-flash", TFLOPs=347.0),
            dict(d=128, s=4096, causal=True, impl="kiln", TFLOPs=273.0),
            dict(d=128, s=4096, causal=True, impl="flex", error="no kernel")]
    results = tmp_path / "r.json"
    results.write_text(json.dumps({"device": "GPU", "torch": "2", "rows": rows}))
    svg = tmp_path / "p.svg"
    done = run(results, svg)
    assert done.returncode == 0, done.stderr
    root = ElementTree.parse(svg).getroot()
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert titles == ["kiln d128 s4096: 310", "sdpa-flash d128 s4096: 347",
                      "kiln d128 s4096 causal: 273"]


def test_unreadable_results(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": []}')
    done = run(bad, tmp_path / "p.svg")
    assert done.returncode == 1
    assert "bad.json" in done.stderr and "no timed rows" in done.stderr
    assert not (tmp_path / "p.svg").exists()
