"""JAX: the attention of a jitted function, found and compiled by Kiln.

``kiln.jax.explain(f, *args)`` lowers ``f`` with ``jax.jit`` to StableHLO
(with the source lines JAX records), runs ``kilnc``'s fusion on it and says,
per softmax, what was fused and why not, at the user's source line;
``kiln.jax.compile(f, *args, output=...)`` writes the package of its sites.
``explain_text`` and ``compile_text`` take StableHLO text already printed
(``jax.jit(f).lower(*args).as_text(debug_info=True)``), so neither needs JAX.
``kiln.jax.attention(q, k, v, ...)`` runs a Kiln kernel as a JAX call (XLA's
FFI) inside ``jit``; ``kiln.jax.jit(f)`` is ``jax.jit(f)`` with every
attention site of ``f`` that Kiln fuses run that way. See docs/jax.md.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, List

from ..compiler import compile as _compile_file
from ..runtime import KilnError, Package, Status
from .report import run_report as _run_report, where

__all__ = ["Explanation", "analysed_text", "attention", "compile", "compile_text",
           "explain", "explain_text", "jit", "stablehlo_text"]


@dataclass
class Explanation:
    """What Kiln's fusion made of one function: ``sites`` (kilnc's JSON
    report entries, each with ``source``: the user's source lines) and
    ``unfused`` (``reason`` and ``source`` per softmax left alone)."""

    sites: List[Dict[str, Any]] = field(default_factory=list)
    unfused: List[Dict[str, Any]] = field(default_factory=list)
    report: Dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"{len(self.sites)} attention sites fused, "
                 f"{len(self.unfused)} softmaxes left unfused"]
        for index, site in enumerate(self.sites):
            form = [f"{site.get('dtype')} q_heads={site.get('q_heads')} "
                    f"kv_heads={site.get('kv_heads')} head_dim={site.get('head_dim')}"]
            for key in ("causal", "window", "softcap"):
                if site.get(key):
                    form.append(f"{key}={site[key]}")
            if site.get("mask") not in (None, "none"):
                form.append(f"mask={site['mask']}")
            if site.get("bias"):
                form.append("bias")
            lines.append(f"  site {index}: {' '.join(form)} at {where(site)}")
        for entry in self.unfused:
            lines.append(f"  not fused at {where(entry)}: {entry['reason']}")
        return "\n".join(lines)




def stablehlo_text(function: Any, *args: Any) -> str:
    """``function`` lowered by ``jax.jit`` for ``args``, as StableHLO text
    with its source lines."""
    try:
        import jax
    except ImportError as error:  # pragma: no cover - JAX-less installs
        raise KilnError(Status.UNSUPPORTED,
                        "kiln.jax needs jax to lower a function; "
                        "explain_text and compile_text take StableHLO text") from error
    jitted = function if hasattr(function, "lower") else jax.jit(function)
    return jitted.lower(*args).as_text(debug_info=True)


def explain_text(text: str, **options: Any) -> Explanation:
    """The fusion report of StableHLO text (see the module's docstring)."""
    report = _run_report(text, options)
    return Explanation(sites=list(report.get("sites", [])),
                       unfused=list(report.get("unfused", [])), report=report)


def analysed_text(function: Any, *args: Any) -> str:
    """``function`` lowered for ``args`` the way ``kiln.jax.jit`` analyses
    it: each step under a name scope of its own, and the steps kilnc's
    importer does not read (gathers, loops, custom calls ...) cut out, their
    outputs entering as arguments (docs/jax.md)."""
    from .rewrite import _Signature, lowering_of
    signature = _Signature(args, {})
    return lowering_of(signature.function(function), signature.flat).text


def explain(function: Any, *args: Any, **options: Any) -> Explanation:
    """Lowers ``function`` for ``args`` (as ``analysed_text``) and returns
    (and prints) what Kiln's fusion made of it."""
    explanation = explain_text(analysed_text(function, *args), **options)
    print(explanation)
    return explanation


def compile_text(text: str, output: "os.PathLike[str] | str",
                 target: str = "sm_90a,sm_80", **options: Any) -> Package:
    """Compiles the attention sites of StableHLO text into the package
    directory ``output`` (as ``kiln.compile`` does for ONNX)."""
    with tempfile.TemporaryDirectory(prefix="kiln-jax-") as scratch:
        path = os.path.join(scratch, "function.mlir")
        with open(path, "w") as handle:
            handle.write(text)
        return _compile_file(path, output, target=target, **options)


def compile(function: Any, *args: Any, output: "os.PathLike[str] | str",  # noqa: A001
            target: str = "sm_90a,sm_80", **options: Any) -> Package:
    """Lowers ``function`` for ``args`` and compiles its attention sites into
    the package directory ``output``."""
    return compile_text(analysed_text(function, *args), output, target=target,
                        **options)



from .ffi import attention  # noqa: E402
from .rewrite import jit  # noqa: E402
