"""Kiln: an MLIR attention-fusion compiler. This package holds its runtime
bindings: open a package that ``kilnc`` wrote and launch its kernels on
PyTorch tensors (see docs/python.md)."""

from . import runtime
from .runtime import *  # noqa: F401,F403 (the names runtime.__all__ lists)

__version__ = "0.1.0"

__all__ = list(runtime.__all__)
