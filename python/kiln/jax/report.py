"""kilnc's fusion report of StableHLO text (``kilnc --report=json``), for
``kiln.jax.explain`` and ``kiln.jax.jit``."""

from __future__ import annotations

import os
import subprocess
import tempfile
from typing import Any, Dict

from ..compiler import find_kilnc, kilnc_arguments, report_of

__all__ = ["run_report"]


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
