"""kilnc's fusion report of StableHLO text (``kilnc --report=json``), for
``kiln.jax.explain`` and ``kiln.jax.jit``."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, List

from ..compiler import find_kilnc, kilnc_arguments, report_of

__all__ = ["run_report", "where"]

#: The kiln package's directory: source lines in it are Kiln's own.
_PACKAGE = Path(__file__).resolve().parents[1]


def _kilns_own(line: str) -> bool:
    """Whether a report's source line ("path:line") is in a module of the
    kiln package (wherever that package was installed when the text was
    lowered): JAX records the frame that lowered the function too."""
    path = line.rsplit(":", 1)[0]
    if "/kiln/" not in path:
        return False
    return (_PACKAGE / path.rsplit("/kiln/", 1)[1]).is_file()


def user_lines(source: List[str]) -> List[str]:
    """A report entry's source lines without Kiln's own (all of them where
    every one is Kiln's)."""
    theirs = [line for line in source if not _kilns_own(line)]
    return theirs or list(source)


def where(entry: Dict[str, Any]) -> str:
    """Where a report entry (a site or an unfused softmax) is in the user's
    code: its first source line not in Kiln's own package, with the count
    of the others; else its node's name."""
    source = user_lines(entry.get("source") or [])
    if source:
        return source[0] + (f" (+{len(source) - 1} lines)" if len(source) > 1 else "")
    nodes = entry.get("nodes") or ([entry["node"]] if entry.get("node") else [])
    return nodes[0] if nodes else "<unknown>"


def run_report(text: str, options: Dict[str, Any]) -> Dict[str, Any]:
    """The JSON report of kilnc on StableHLO `text` with keyword `options`
    (kiln.compiler.kilnc_arguments), or CompileError with its diagnostics."""
    kilnc = find_kilnc()
    with tempfile.TemporaryDirectory(prefix="kiln-jax-") as scratch:
        path = os.path.join(scratch, "function.mlir")
        with open(path, "w") as handle:
            handle.write(text)
        command = [kilnc, path, "--report=json", "--emit=mlir", "-o",
                   os.path.join(scratch, "fused.mlir")]
        command += kilnc_arguments(options)
        result = subprocess.run(command, capture_output=True, text=True)
    return report_of(result, command)
