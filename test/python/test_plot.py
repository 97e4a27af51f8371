"""bench/plot.py: an SVG with one bar per (case, implementation) that has a
figure, for each kind of record, and a clear error for results it cannot
read."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "plot.py"
SVG = "{http://www.w3.org/2000/svg}"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)],
                          capture_output=True, text=True)


def titles(tmp_path, kind, results):
    source = tmp_path / "r.json"
    source.write_text(json.dumps(results))
    svg = tmp_path / "p.svg"
    done = run(kind, source, svg)
    assert done.returncode == 0, done.stderr
    root = ElementTree.parse(svg).getroot()
    return [t.text for t in root.iter(f"{SVG}title")]


def test_prefill_one_bar_per_timed_row(tmp_path):
    rows = [dict(d=128, s=4096, causal=False, impl="kiln", TFLOPs=310.0),
            dict(d=128, s=4096, causal=False, impl="sdpa-flash", TFLOPs=347.0),
            dict(d=128, s=4096, causal=True, impl="kiln", TFLOPs=273.0),
            dict(d=128, s=4096, causal=True, impl="flex", error="no kernel")]
    assert titles(tmp_path, "prefill", {"device": "GPU", "torch": "2", "rows": rows}) == [
        "kiln d128 s4096: 310", "sdpa-flash d128 s4096: 347",
        "kiln d128 s4096 causal: 273"]


def test_decode_tells_pages_apart(tmp_path):
    case = dict(hq=32, hkv=8, b=64, kv_len=4096)
    rows = [dict(case, impl="kiln-paged", page=16, TBs=4.25),
            dict(case, impl="kiln-paged", page=64, TBs=4.27),
            dict(case, impl="sdpa-flash", page=None, TBs=2.63)]
    assert titles(tmp_path, "decode", {"rows": rows}) == [
        "kiln-paged16 32/8 heads, batch 64, context 4096: 4.25",
        "sdpa-flash 32/8 heads, batch 64, context 4096: 2.63"]


def test_torch_compile_speedup_over_eager(tmp_path):
    rows = [dict(model="llama", s=4096, impl="eager", ms=32.0),
            dict(model="llama", s=4096, impl="inductor", ms=8.0),
            dict(model="llama", s=4096, impl="kiln", ms=3.2),
            dict(model="t5", s=4096, impl="kiln", error="failed", ok=False)]
    assert titles(tmp_path, "torch-compile", rows) == [
        "inductor llama s4096: 4", "kiln llama s4096: 10"]


def test_unreadable_results(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": []}')
    done = run("prefill", bad, tmp_path / "p.svg")
    assert done.returncode == 1
    assert "bad.json" in done.stderr and "no timed rows" in done.stderr
    assert not (tmp_path / "p.svg").exists()
