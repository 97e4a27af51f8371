"""Kiln: an MLIR attention-fusion compiler. This package compiles models
(``kiln.compile`` runs ``kilnc``) and holds the runtime bindings: open a
package that ``kilnc`` wrote and launch its kernels on PyTorch tensors (see
docs/python.md)."""

from . import compiler, runtime
from .compiler import CompileError, compile, find_kilnc, load  # noqa: A004
from .runtime import *  # noqa: F401,F403 (the names runtime.__all__ lists)

__version__ = "0.1.0"

__all__ = list(runtime.__all__) + ["CompileError", "compile", "find_kilnc", "load"]


def __getattr__(name: str):
    # kiln.PagedKVCache is kiln.transformers.PagedKVCache, imported on first
    # use (it derives from transformers' Cache).
    if name == "PagedKVCache":
        from . import transformers as _transformers

        return _transformers.PagedKVCache
    raise AttributeError(f"module 'kiln' has no attribute {name!r}")
