"""Kiln: an MLIR attention-fusion compiler. This package compiles models
(``kiln.compile`` runs ``kilnc``) and holds the runtime bindings: open a
package that ``kilnc`` wrote and launch its kernels on PyTorch tensors (see
docs/python.md)."""

from . import compiler, runtime
from .compiler import CompileError, compile, find_kilnc, load  # noqa: A004
from .runtime import *  # noqa: F401,F403 (the names runtime.__all__ lists)
from .version import __version__

__all__ = list(runtime.__all__) + ["CompileError", "compile", "explain",
                                   "find_kilnc", "load", "optimize"]

# torch.compile(backend="kiln"): registered now where torch is already
# imported (otherwise through the package's torch_dynamo_backends entry
# point, or on first use of kiln.optimize / kiln.explain).
import sys as _sys

if "torch" in _sys.modules:
    try:
        from . import dynamo as _dynamo  # noqa: F401
    except Exception:  # noqa: BLE001 (torch without Dynamo: no backend)
        pass


def __getattr__(name: str):
    # kiln.PagedKVCache is kiln.transformers.PagedKVCache, imported on first
    # use (it derives from transformers' Cache).
    if name in ("optimize", "explain"):
        from . import dynamo as _dynamo

        return getattr(_dynamo, name)
    if name == "PagedKVCache":
        from . import transformers as _transformers

        return _transformers.PagedKVCache
    raise AttributeError(f"module 'kiln' has no attribute {name!r}")
