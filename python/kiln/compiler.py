"""Compiling models from Python: ``kiln.compile`` runs ``kilnc`` on an ONNX
file, MLIR text or a ``torch.nn.Module`` (exported through ``torch.onnx``)
and returns the open ``Package``; ``kiln.load`` opens one already written.
See docs/python.md."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from .runtime import KilnError, Package, Status

__all__ = ["CompileError", "compile", "find_kilnc", "kilnc_arguments", "kilnc_main",
           "load", "operand_sources", "replayable"]

_ROOT = Path(__file__).resolve().parent


class CompileError(KilnError):
    """``kilnc`` failed: its exit status and its diagnostics (stderr)."""

    def __init__(self, returncode: int, diagnostics: str, command: List[str]):
        self.returncode = returncode
        self.diagnostics = diagnostics
        self.command = command
        summary = diagnostics_summary(diagnostics) or f"kilnc exited with {returncode}"
        super().__init__(Status.FORMAT_ERROR, f"kilnc failed: {summary}")


def diagnostics_summary(stderr: str, most: int = 3) -> str:
    """kilnc's diagnostics as a reason: its error lines first (at most
    `most`), then, where it printed none, its first other line; warnings
    about nodes kept opaque, which any graph of custom ops prints by the
    dozen, never come before an error."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line or "Assertion" in line
              or "Segmentation" in line or "terminate" in line]
    if errors:
        return "\n".join(errors[:most])
    others = [line for line in lines if "kept opaque" not in line]
    return (others or lines or [""])[0]


def _candidate_kilncs() -> List[Path]:
    # Beside the package (an installed copy), then the build trees of a
    # source checkout (python/kiln -> ../../build*/bin).
    candidates = [_ROOT / "bin" / "kilnc", _ROOT / "kilnc"]
    checkout = _ROOT.parent.parent
    candidates.append(checkout / "build" / "bin" / "kilnc")
    candidates.extend(sorted(checkout.glob("build*/bin/kilnc")))
    return candidates


def find_kilnc() -> str:
    """Path of ``kilnc``: $KILN_KILNC, else one beside the package, else a
    build tree of the source checkout, else the first on PATH."""
    override = os.environ.get("KILN_KILNC")
    if override:
        if not os.access(override, os.X_OK):
            raise KilnError(
                Status.NOT_FOUND, f"KILN_KILNC={override} is not an executable"
            )
        return override
    candidates = _candidate_kilncs()
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    on_path = shutil.which("kilnc")
    if on_path:
        return on_path
    tried = ", ".join(str(c) for c in candidates)
    raise KilnError(
        Status.NOT_FOUND,
        f"cannot find kilnc (tried {tried} and PATH); set KILN_KILNC or build "
        f"Kiln (utils/dev.sh build)",
    )


def kilnc_main() -> None:
    """The ``kilnc`` command an installed wheel puts on PATH: the compiler
    bundled in the package (its own loader and libraries beside it)."""
    import sys

    bundled = _ROOT / "bin" / "kilnc"
    if not os.access(bundled, os.X_OK):
        raise SystemExit(f"kilnc: the bundled compiler is missing ({bundled}); "
                         f"this copy of the package was not installed from "
                         f"Kiln's wheel")
    os.execv(str(bundled), [str(bundled)] + sys.argv[1:])


def kilnc_arguments(options: Dict[str, Any]) -> List[str]:
    """``kilnc`` flags for keyword options: ``padded_rows="free"`` becomes
    ``--padded-rows=free``, ``tensor_cores=False`` ``--tensor-cores=0``,
    ``verify=True`` ``--verify``, ``bind_dims={"batch": 2}``
    ``--bind-dims=batch=2``."""
    arguments: List[str] = []
    for key, value in options.items():
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            arguments.append(flag if value else flag + "=0")
        elif isinstance(value, dict):
            items = ",".join(f"{name}={size}" for name, size in value.items())
            arguments.append(f"{flag}={items}")
        elif isinstance(value, (list, tuple)):
            arguments.append(f"{flag}={','.join(str(v) for v in value)}")
        else:
            arguments.append(f"{flag}={value}")
    return arguments


def report_of(result: "subprocess.CompletedProcess[str]",
              command: List[str]) -> Dict[str, Any]:
    """The JSON report of a ``kilnc --report=json`` run, or CompileError with
    its diagnostics."""
    if result.returncode != 0:
        raise CompileError(result.returncode, result.stderr, command)
    try:
        # The JSON report comes first; --verify's lines may follow it.
        report, _ = json.JSONDecoder().raw_decode(result.stdout.lstrip())
    except ValueError as error:
        raise CompileError(
            result.returncode,
            f"kilnc printed no JSON report: {error}\n{result.stdout}",
            command,
        ) from error
    return report


#: The steps kilnc's report lists from a graph value to a site's operand
#: (Report.cpp's replayStep), which a frontend replays on its own values.
REPLAY_STEPS = frozenset({"transpose", "reshape", "cast", "not", "mul", "add",
                          "where", "reciprocal", "neg", "slice", "tile", "eq"})


def operand_sources(entry: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The graph values a report's operand can be computed from, nearest
    first, each with the steps that compute the operand from it (kilnc's
    `sources`; a report without them names one value)."""
    return entry.get("sources") or [{"value": entry.get("value"),
                                     "transforms": entry.get("transforms", [])}]


def replayable(transforms: List[Dict[str, Any]]) -> bool:
    """Whether a frontend can replay a source's steps: known steps, and no
    slice whose size follows the graph's sizes (null; not known there)."""
    return all(t["op"] in REPLAY_STEPS and not (t["op"] == "slice" and None in t["size"])
               for t in transforms)


def _export_module(model: Any, example_inputs: Optional[Sequence[Any]],
                   directory: str) -> str:
    try:
        import torch
    except ImportError as error:  # pragma: no cover - torch-less installs
        raise KilnError(
            Status.UNSUPPORTED, "compiling a torch.nn.Module needs torch"
        ) from error
    if example_inputs is None:
        raise KilnError(
            Status.INVALID_ARGUMENT,
            "compiling a torch.nn.Module needs example_inputs (a tuple of the "
            "tensors its forward takes)",
        )
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    path = os.path.join(directory, "model.onnx")
    try:
        torch.onnx.export(model, tuple(example_inputs), path)
    except Exception as error:
        raise KilnError(
            Status.FORMAT_ERROR, f"torch.onnx.export failed: {error}"
        ) from error
    return path


def compile(  # noqa: A001 (the name users expect)
    model: Union[str, "os.PathLike[str]", Any],
    output: Union[str, "os.PathLike[str]"],
    target: Union[str, Sequence[str]] = "sm_90a,sm_80",
    example_inputs: Optional[Sequence[Any]] = None,
    **options: Any,
) -> Package:
    """Compiles `model` (an .onnx or .mlir path, or a ``torch.nn.Module``
    exported with `example_inputs`) into the package directory `output` and
    opens it. Keyword options become ``kilnc`` flags (see kilnc_arguments).
    The fusion report is ``package.report`` (kilnc's JSON) and kilnc's
    warnings ``package.diagnostics``; a failure raises CompileError with
    kilnc's diagnostics."""
    kilnc = find_kilnc()
    targets = target if isinstance(target, str) else ",".join(target)
    with tempfile.TemporaryDirectory(prefix="kiln-compile-") as scratch:
        if isinstance(model, (str, os.PathLike)):
            source = os.fspath(model)
            if not os.path.exists(source):
                raise KilnError(Status.NOT_FOUND, f"no model at {source}")
        else:
            source = _export_module(model, example_inputs, scratch)
        command = [kilnc, source, "-o", os.fspath(output),
                   f"--target={targets}", "--report=json"]
        command += kilnc_arguments(options)
        result = subprocess.run(command, capture_output=True, text=True)
    report = report_of(result, command)
    package = Package(output)
    package.report = report
    package.diagnostics = result.stderr
    return package


def load(path: Union[str, "os.PathLike[str]"]) -> Package:
    """Opens a package directory that kilnc (or kiln.compile) wrote."""
    return Package(path)
