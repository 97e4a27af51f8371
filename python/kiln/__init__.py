"""Kiln: an MLIR attention-fusion compiler. This package holds its runtime
bindings: open a package that ``kilnc`` wrote and launch its kernels on
PyTorch tensors (see docs/python.md)."""

from .runtime import (
    AttentionArgs,
    DType,
    KernelInfo,
    KilnError,
    Layout,
    LaunchConfig,
    MaskKind,
    Package,
    Site,
    Status,
    broadcast_strides,
    contiguous_strides,
    find_library,
    load_library,
    qkv_dims,
    qkv_strides,
)

__version__ = "0.1.0"

__all__ = [
    "AttentionArgs",
    "DType",
    "KernelInfo",
    "KilnError",
    "Layout",
    "LaunchConfig",
    "MaskKind",
    "Package",
    "Site",
    "Status",
    "broadcast_strides",
    "contiguous_strides",
    "find_library",
    "load_library",
    "qkv_dims",
    "qkv_strides",
]
