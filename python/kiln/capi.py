"""ctypes bindings of libkilnrt's C API (``include/kiln-c/Runtime.h``).

The layer under ``kiln.runtime``: finding and loading the library, the C
structs and enums, status codes as KilnError, and packages and sites on raw
pointers (`PackageHandle`, `SiteHandle`: open, query, check and launch with
argument structs the caller fills). Neither torch nor numpy is imported
here; ``kiln.runtime`` adds the launches on PyTorch tensors.
"""

from __future__ import annotations

import ctypes
import enum
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = [
    "AttentionArgs",
    "AttentionGradArgs",
    "cuda_driver",
    "PackedAttentionArgs",
    "PagedAppendArgs",
    "PagedAttentionArgs",
    "DType",
    "KernelInfo",
    "KilnError",
    "Layout",
    "LaunchConfig",
    "MaskKind",
    "PackageHandle",
    "SiteHandle",
    "Status",
    "broadcast_strides",
    "contiguous_strides",
    "dtype_size",
    "find_library",
    "library_contiguous_strides",
    "load_library",
    "qkv_dims",
    "qkv_strides",
]

DYNAMIC = -1


class Status(enum.IntEnum):
    """``kiln_status`` of the C API."""

    OK = 0
    INVALID_ARGUMENT = 1
    NOT_FOUND = 2
    IO_ERROR = 3
    FORMAT_ERROR = 4
    CUDA_ERROR = 5
    UNSUPPORTED = 6
    INTERNAL_ERROR = 7


class DType(enum.IntEnum):
    """``kiln_dtype`` of the C API."""

    NONE = 0
    F16 = 1
    BF16 = 2
    F32 = 3
    BOOL = 4
    F8E4M3 = 5

    @property
    def manifest_name(self) -> Optional[str]:
        return {1: "f16", 2: "bf16", 3: "f32", 4: "i1", 5: "f8e4m3"}.get(
            int(self))


class MaskKind(enum.IntEnum):
    NONE = 0
    ADDITIVE = 1
    BOOLEAN = 2


class Layout(enum.IntEnum):
    BHSD = 0
    BSHD = 1


class KilnError(RuntimeError):
    """A failure reported by libkilnrt, with its status and message."""

    def __init__(self, status: int, message: str) -> None:
        try:
            self.status: Any = Status(status)
        except ValueError:
            self.status = status
        self.message = message
        name = self.status.name if isinstance(self.status, Status) else status
        super().__init__(f"[{name}] {message}")


# --------------------------------------------------------------------------
# C structs (must match include/kiln-c/Runtime.h).
# --------------------------------------------------------------------------


class _SiteInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("kernel", ctypes.c_char_p),
        ("function", ctypes.c_char_p),
        ("location", ctypes.c_char_p),
        ("layout", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("window", ctypes.c_int64),
        ("has_softcap", ctypes.c_int32),
        ("softcap", ctypes.c_float),
        ("batch", ctypes.c_int64),
        ("q_heads", ctypes.c_int64),
        ("kv_heads", ctypes.c_int64),
        ("q_len", ctypes.c_int64),
        ("kv_len", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("mask", ctypes.c_int),
        ("mask_dtype", ctypes.c_int),
        ("bias", ctypes.c_int32),
        ("bias_dtype", ctypes.c_int),
        ("v_head_dim", ctypes.c_int64),
        ("paged", ctypes.c_int32),
        ("page_size", ctypes.c_int64),
        ("split_kv", ctypes.c_int32),
        ("ragged", ctypes.c_int32),
        ("cache_dtype", ctypes.c_int),
        ("kv_scales", ctypes.c_int32),
        ("scale_factor", ctypes.c_int32),
        ("lse", ctypes.c_int32),
        ("key_pass", ctypes.c_char_p),
    ]


class _KernelInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("head_dim", ctypes.c_int64),
        ("block", ctypes.c_int32 * 3),
        ("static_shared_bytes", ctypes.c_int64),
        ("dynamic_shared_bytes", ctypes.c_int64),
        ("num_args", ctypes.c_int32),
    ]


_Strides = ctypes.c_int64 * 4


class PagedAttentionArgs(ctypes.Structure):
    """``kiln_paged_attention_args``: a paged site's pointers, dims, strides."""

    _fields_ = [
        ("q", ctypes.c_void_p),
        ("key_cache", ctypes.c_void_p),
        ("value_cache", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("page_table", ctypes.c_void_p),
        ("kv_lens", ctypes.c_void_p),
        ("q_dtype", ctypes.c_int),
        ("key_cache_dtype", ctypes.c_int),
        ("value_cache_dtype", ctypes.c_int),
        ("out_dtype", ctypes.c_int),
        ("batch", ctypes.c_int64),
        ("q_heads", ctypes.c_int64),
        ("kv_heads", ctypes.c_int64),
        ("q_len", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("v_head_dim", ctypes.c_int64),
        ("num_pages", ctypes.c_int64),
        ("page_size", ctypes.c_int64),
        ("max_pages", ctypes.c_int64),
        ("q_strides", ctypes.c_int64 * 4),
        ("key_cache_strides", ctypes.c_int64 * 4),
        ("value_cache_strides", ctypes.c_int64 * 4),
        ("out_strides", ctypes.c_int64 * 4),
        ("page_table_strides", ctypes.c_int64 * 2),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_int64),
        ("num_splits", ctypes.c_int64),
        ("total_kv_len", ctypes.c_int64),
        ("q_offsets", ctypes.c_void_p),
        ("plan", ctypes.c_void_p),
        ("plan_items", ctypes.c_int64),
        ("k_scale", ctypes.c_void_p),
        ("v_scale", ctypes.c_void_p),
        ("num_kv_scales", ctypes.c_int64),
    ]


class PackedAttentionArgs(ctypes.Structure):
    """``kiln_packed_attention_args``: a launch of packed sequences."""

    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("q_offsets", ctypes.c_void_p),
        ("kv_offsets", ctypes.c_void_p),
        ("plan", ctypes.c_void_p),
        ("plan_items", ctypes.c_int64),
        ("q_dtype", ctypes.c_int),
        ("k_dtype", ctypes.c_int),
        ("v_dtype", ctypes.c_int),
        ("out_dtype", ctypes.c_int),
        ("batch", ctypes.c_int64),
        ("q_heads", ctypes.c_int64),
        ("kv_heads", ctypes.c_int64),
        ("total_q", ctypes.c_int64),
        ("total_kv", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("v_head_dim", ctypes.c_int64),
        ("q_strides", ctypes.c_int64 * 3),
        ("k_strides", ctypes.c_int64 * 3),
        ("v_strides", ctypes.c_int64 * 3),
        ("out_strides", ctypes.c_int64 * 3),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_int64),
        ("num_splits", ctypes.c_int64),
        ("max_kv_len", ctypes.c_int64),
    ]


class PagedAppendArgs(ctypes.Structure):
    """``kiln_paged_append_args``: new keys and values for a paged site's
    caches."""

    _fields_ = [
        ("key", ctypes.c_void_p),
        ("value", ctypes.c_void_p),
        ("key_cache", ctypes.c_void_p),
        ("value_cache", ctypes.c_void_p),
        ("page_table", ctypes.c_void_p),
        ("kv_lens", ctypes.c_void_p),
        ("new_offsets", ctypes.c_void_p),
        ("key_dtype", ctypes.c_int),
        ("value_dtype", ctypes.c_int),
        ("key_cache_dtype", ctypes.c_int),
        ("value_cache_dtype", ctypes.c_int),
        ("batch", ctypes.c_int64),
        ("kv_heads", ctypes.c_int64),
        ("total_new", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("v_head_dim", ctypes.c_int64),
        ("num_pages", ctypes.c_int64),
        ("page_size", ctypes.c_int64),
        ("max_pages", ctypes.c_int64),
        ("key_strides", ctypes.c_int64 * 3),
        ("value_strides", ctypes.c_int64 * 3),
        ("key_cache_strides", ctypes.c_int64 * 4),
        ("value_cache_strides", ctypes.c_int64 * 4),
        ("page_table_strides", ctypes.c_int64 * 2),
        ("k_scale", ctypes.c_void_p),
        ("v_scale", ctypes.c_void_p),
        ("num_kv_scales", ctypes.c_int64),
    ]


class AttentionArgs(ctypes.Structure):
    """``kiln_attention_args``: device pointers, dtypes, dims, strides."""

    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("mask", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
        ("q_dtype", ctypes.c_int),
        ("k_dtype", ctypes.c_int),
        ("v_dtype", ctypes.c_int),
        ("out_dtype", ctypes.c_int),
        ("mask_dtype", ctypes.c_int),
        ("bias_dtype", ctypes.c_int),
        ("batch", ctypes.c_int64),
        ("q_heads", ctypes.c_int64),
        ("kv_heads", ctypes.c_int64),
        ("q_len", ctypes.c_int64),
        ("kv_len", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("q_strides", _Strides),
        ("k_strides", _Strides),
        ("v_strides", _Strides),
        ("out_strides", _Strides),
        ("mask_strides", _Strides),
        ("bias_strides", _Strides),
        ("v_head_dim", ctypes.c_int64),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_int64),
        ("num_splits", ctypes.c_int64),
        ("scale_factor", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
    ]


class AttentionGradArgs(ctypes.Structure):
    """``kiln_attention_grad_args``: the forward's arguments (with its
    output as ``out`` and its ``lse``), the gradients and the workspace."""

    _fields_ = [
        ("forward", AttentionArgs),
        ("grad_out", ctypes.c_void_p),
        ("grad_q", ctypes.c_void_p),
        ("grad_k", ctypes.c_void_p),
        ("grad_v", ctypes.c_void_p),
        ("grad_out_dtype", ctypes.c_int),
        ("grad_q_dtype", ctypes.c_int),
        ("grad_k_dtype", ctypes.c_int),
        ("grad_v_dtype", ctypes.c_int),
        ("grad_out_strides", _Strides),
        ("grad_q_strides", _Strides),
        ("grad_k_strides", _Strides),
        ("grad_v_strides", _Strides),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_int64),
    ]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [
        ("grid", ctypes.c_uint32 * 3),
        ("block", ctypes.c_uint32 * 3),
        ("dynamic_shared_bytes", ctypes.c_uint32),
    ]


@dataclass(frozen=True)
class LaunchConfig:
    grid: Tuple[int, int, int]
    block: Tuple[int, int, int]
    dynamic_shared_bytes: int


@dataclass(frozen=True)
class KernelInfo:
    name: str
    kind: str
    dtype: str
    head_dim: Optional[int]
    block: Tuple[int, int, int]
    static_shared_bytes: int
    dynamic_shared_bytes: int
    num_args: int


# --------------------------------------------------------------------------
# Loading the library.
# --------------------------------------------------------------------------

_LIBRARY_NAME = "libkilnrt.so"
_lock = threading.Lock()
_library: Optional[ctypes.CDLL] = None


def _candidate_paths() -> List[Path]:
    here = Path(__file__).resolve().parent
    candidates = [here / _LIBRARY_NAME, here / "lib" / _LIBRARY_NAME]
    # A source checkout: python/kiln/ next to build*/lib/.
    root = here.parent.parent
    candidates.append(root / "build" / "lib" / _LIBRARY_NAME)
    candidates.extend(sorted(root.glob("build*/lib/" + _LIBRARY_NAME)))
    return candidates


def find_library() -> str:
    """Path of libkilnrt.so: $KILN_RUNTIME_LIB, else a copy next to this
    package, else a build tree of the source checkout holding it."""
    override = os.environ.get("KILN_RUNTIME_LIB")
    if override:
        if not os.path.isfile(override):
            raise KilnError(
                Status.NOT_FOUND,
                f"KILN_RUNTIME_LIB={override} is not a file",
            )
        return override
    candidates = _candidate_paths()
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    tried = ", ".join(str(c) for c in candidates)
    raise KilnError(
        Status.NOT_FOUND,
        f"cannot find {_LIBRARY_NAME} (tried {tried}); set KILN_RUNTIME_LIB",
    )


def _declare(lib: ctypes.CDLL) -> None:
    c_status = ctypes.c_int
    pkg_p = ctypes.c_void_p
    site_p = ctypes.c_void_p
    i32_p = ctypes.POINTER(ctypes.c_int32)
    # The plan functions: site, two host offset (or length) arrays, batch,
    # heads, the plan buffer and its capacity, the item count.
    plan_signature = (
        c_status,
        [site_p, i32_p, i32_p, ctypes.c_int64, ctypes.c_int64,
         ctypes.c_int64, i32_p, ctypes.c_int64,
         ctypes.POINTER(ctypes.c_int64)],
    )
    signatures: Dict[str, Tuple[Any, List[Any]]] = {
        "kiln_last_error": (ctypes.c_char_p, []),
        "kiln_status_string": (ctypes.c_char_p, [ctypes.c_int]),
        "kiln_dtype_name": (ctypes.c_char_p, [ctypes.c_int]),
        "kiln_dtype_size": (ctypes.c_int64, [ctypes.c_int]),
        "kiln_runtime_api_version": (ctypes.c_int32, []),
        "kiln_cuda_driver_load": (c_status, []),
        "kiln_package_open": (
            c_status,
            [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)],
        ),
        "kiln_package_close": (None, [pkg_p]),
        "kiln_package_producer": (ctypes.c_char_p, [pkg_p]),
        "kiln_package_num_sites": (ctypes.c_int64, [pkg_p]),
        "kiln_package_num_kernels": (ctypes.c_int64, [pkg_p]),
        "kiln_package_num_targets": (ctypes.c_int64, [pkg_p]),
        "kiln_package_get_site": (
            c_status,
            [pkg_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p)],
        ),
        "kiln_package_find_site": (
            c_status,
            [pkg_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)],
        ),
        "kiln_package_get_kernel": (
            c_status,
            [pkg_p, ctypes.c_int64, ctypes.POINTER(_KernelInfo)],
        ),
        "kiln_package_get_target": (
            c_status,
            [pkg_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_char_p)],
        ),
        "kiln_package_select_target": (
            c_status,
            [pkg_p, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_char_p)],
        ),
        "kiln_package_prepare": (c_status, [pkg_p]),
        "kiln_site_prepare": (c_status, [site_p]),
        "kiln_site_get_info": (c_status, [site_p, ctypes.POINTER(_SiteInfo)]),
        "kiln_attention_args_init": (None, [ctypes.POINTER(AttentionArgs)]),
        "kiln_contiguous_strides": (
            c_status,
            [
                ctypes.c_int,
                ctypes.c_int64,
                ctypes.c_int64,
                ctypes.c_int64,
                ctypes.c_int64,
                ctypes.POINTER(ctypes.c_int64),
            ],
        ),
        "kiln_attention_args_set_contiguous": (
            c_status,
            [site_p, ctypes.POINTER(AttentionArgs)],
        ),
        "kiln_site_check_attention": (
            c_status,
            [site_p, ctypes.POINTER(AttentionArgs), ctypes.POINTER(_LaunchConfig)],
        ),
        "kiln_site_launch_attention": (
            c_status,
            [site_p, ctypes.POINTER(AttentionArgs), ctypes.c_void_p],
        ),
        "kiln_attention_grad_workspace_size": (
            ctypes.c_int64,
            [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64],
        ),
        "kiln_site_check_attention_grad": (
            c_status,
            [site_p, ctypes.POINTER(AttentionGradArgs), ctypes.POINTER(_LaunchConfig)],
        ),
        "kiln_site_launch_attention_grad": (
            c_status,
            [site_p, ctypes.POINTER(AttentionGradArgs), ctypes.c_void_p],
        ),
        "kiln_site_check_paged_attention": (
            c_status,
            [
                site_p,
                ctypes.POINTER(PagedAttentionArgs),
                ctypes.POINTER(_LaunchConfig),
            ],
        ),
        "kiln_site_launch_paged_attention": (
            c_status,
            [site_p, ctypes.POINTER(PagedAttentionArgs), ctypes.c_void_p],
        ),
        "kiln_site_validate_paged_attention": (
            c_status,
            [site_p, ctypes.POINTER(PagedAttentionArgs), ctypes.c_void_p],
        ),
        "kiln_site_workspace_size": (
            c_status,
            [site_p] + [ctypes.c_int64] * 5 + [ctypes.POINTER(ctypes.c_int64)],
        ),
        "kiln_site_attention_splits": (
            c_status,
            [site_p, ctypes.POINTER(AttentionArgs), ctypes.POINTER(ctypes.c_int64)],
        ),
        "kiln_site_paged_attention_splits": (
            c_status,
            [
                site_p,
                ctypes.POINTER(PagedAttentionArgs),
                ctypes.POINTER(ctypes.c_int64),
            ],
        ),
        "kiln_site_check_packed_attention": (
            c_status,
            [
                site_p,
                ctypes.POINTER(PackedAttentionArgs),
                ctypes.POINTER(_LaunchConfig),
            ],
        ),
        "kiln_site_launch_packed_attention": (
            c_status,
            [site_p, ctypes.POINTER(PackedAttentionArgs), ctypes.c_void_p],
        ),
        "kiln_site_packed_attention_splits": (
            c_status,
            [
                site_p,
                ctypes.POINTER(PackedAttentionArgs),
                ctypes.POINTER(ctypes.c_int64),
            ],
        ),
        "kiln_site_plan_packed_attention": plan_signature,
        "kiln_site_plan_paged_attention": plan_signature,
        "kiln_site_append_paged_kv": (
            c_status,
            [site_p, ctypes.POINTER(PagedAppendArgs), ctypes.c_void_p],
        ),
        "kiln_site_append_config": (
            c_status,
            [site_p, ctypes.POINTER(PagedAppendArgs),
             ctypes.POINTER(_LaunchConfig)],
        ),
        "kiln_site_plan_capacity": (
            c_status,
            [
                site_p,
                ctypes.c_int64,
                ctypes.c_int64,
                ctypes.c_int64,
                ctypes.c_int64,
                ctypes.POINTER(ctypes.c_int64),
            ],
        ),
    }
    signatures.update({
        "kiln_torch_register_attention": (
            c_status, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p]),
        "kiln_torch_bind_site": (c_status, [ctypes.c_int64, site_p]),
        "kiln_torch_add_plan": (
            c_status,
            [ctypes.c_int64, ctypes.POINTER(AttentionArgs), ctypes.c_int64,
             ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]),
        "kiln_torch_set_error": (None, [ctypes.c_char_p]),
        "kiln_torch_counts": (
            None, [ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64)]),
    })
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes


_API_VERSION = 11


def cuda_driver() -> Optional[ctypes.CDLL]:
    """The CUDA driver (libcuda.so.1), initialised, for the few driver calls
    Python makes itself (a device's compute capability, a primary context);
    None where it cannot be loaded or initialised."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return driver if driver.cuInit(0) == 0 else None


def load_library(path: Optional[str] = None) -> ctypes.CDLL:
    """Loads libkilnrt once (from `path`, or find_library())."""
    global _library
    with _lock:
        if _library is None or path is not None:
            lib = ctypes.CDLL(path or find_library())
            _declare(lib)
            version = lib.kiln_runtime_api_version()
            if version != _API_VERSION:
                raise KilnError(
                    Status.UNSUPPORTED,
                    f"libkilnrt has C API version {version}; this Python "
                    f"package needs {_API_VERSION}",
                )
            _library = lib
        return _library


def _check(status: int) -> None:
    if status != Status.OK:
        lib = load_library()
        message = lib.kiln_last_error().decode("utf-8", "replace")
        raise KilnError(status, message)


def _text(value: Optional[bytes]) -> str:
    return value.decode("utf-8", "replace") if value else ""


def _dim(value: int) -> Optional[int]:
    return None if value == DYNAMIC else int(value)


# --------------------------------------------------------------------------
# Shape and stride helpers (pure Python; no torch needed).
# --------------------------------------------------------------------------


def qkv_dims(shape: Sequence[int], layout: str) -> Tuple[int, int, int, int]:
    """(batch, heads, seq, head_dim) of a Q/K/V/out shape in `layout`."""
    if len(shape) != 4:
        raise KilnError(
            Status.INVALID_ARGUMENT,
            f"expected a 4-D tensor in the {layout} layout, got shape "
            f"{tuple(shape)}",
        )
    b, x, y, d = (int(s) for s in shape)
    if layout == "bhsd":
        return b, x, y, d
    if layout == "bshd":
        return b, y, x, d
    raise KilnError(Status.INVALID_ARGUMENT, f"unknown layout {layout!r}")


def qkv_strides(strides: Sequence[int], layout: str) -> Tuple[int, int, int, int]:
    """Element strides ordered {batch, head, seq, head_dim} (the C API's
    order) of a 4-D tensor with `strides` in `layout`."""
    if len(strides) != 4:
        raise KilnError(
            Status.INVALID_ARGUMENT, f"expected 4 strides, got {tuple(strides)}"
        )
    sb, sx, sy, sd = (int(s) for s in strides)
    if layout == "bhsd":
        return sb, sx, sy, sd
    if layout == "bshd":
        return sb, sy, sx, sd
    raise KilnError(Status.INVALID_ARGUMENT, f"unknown layout {layout!r}")


def contiguous_strides(
    shape: Sequence[int], layout: str = "bhsd"
) -> Tuple[int, int, int, int]:
    """C-API-ordered strides of a contiguous tensor of `shape` in `layout`."""
    strides = [1, 1, 1, 1]
    for axis in range(2, -1, -1):
        strides[axis] = strides[axis + 1] * int(shape[axis + 1])
    return qkv_strides(strides, layout)


def broadcast_strides(
    shape: Sequence[int],
    strides: Sequence[int],
    target: Sequence[int],
    name: str = "mask",
) -> Tuple[int, int, int, int]:
    """Strides of a tensor broadcast numpy-style to the 4-D `target`
    ([batch, q_heads, q_len, kv_len]): a lower rank is padded on the left,
    and axes of size 1 get stride 0."""
    if len(shape) != len(strides):
        raise KilnError(
            Status.INVALID_ARGUMENT, f"{name}: shape and strides differ in rank"
        )
    if len(shape) > 4:
        raise KilnError(
            Status.INVALID_ARGUMENT,
            f"{name} has rank {len(shape)}; at most 4 ([batch, q_heads, q_len, "
            "kv_len])",
        )
    pad = 4 - len(shape)
    full_shape = [1] * pad + [int(s) for s in shape]
    full_strides = [0] * pad + [int(s) for s in strides]
    result = []
    for axis, (size, stride, want) in enumerate(zip(full_shape, full_strides, target)):
        if size == 1:
            result.append(0)
        elif size == int(want):
            result.append(stride)
        else:
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"{name} of shape {tuple(shape)} does not broadcast to "
                f"[batch, q_heads, q_len, kv_len] = {tuple(int(t) for t in target)}"
                f" (axis {axis}: {size} vs {int(want)})",
            )
    return tuple(result)  # type: ignore[return-value]


# --------------------------------------------------------------------------
# Packages and sites.
# --------------------------------------------------------------------------

_LAYOUT_NAMES = {Layout.BHSD: "bhsd", Layout.BSHD: "bshd"}
_MASK_NAMES = {
    MaskKind.NONE: "none",
    MaskKind.ADDITIVE: "additive",
    MaskKind.BOOLEAN: "boolean",
}
# kiln_site_info.kv_scales: an FP8 cache's scales.
_KV_SCALES_NAMES = {0: None, 1: "per_tensor", 2: "per_kv_head"}


class SiteHandle:
    """An attention site of an open package, on raw pointers: its facts
    from the manifest, and checks and launches of argument structs the
    caller fills (kiln.runtime.Site adds launches on tensors)."""

    def __init__(self, package: "PackageHandle", handle: int) -> None:
        self._package = package  # keeps the package (and handle) alive
        self._handle = ctypes.c_void_p(handle)
        info = _SiteInfo()
        _check(package._lib.kiln_site_get_info(self._handle, ctypes.byref(info)))
        self.name: str = _text(info.name)
        self.kernel: str = _text(info.kernel)
        self.function: str = _text(info.function)
        self.location: str = _text(info.location)
        self.layout: str = _LAYOUT_NAMES[Layout(info.layout)]
        self.dtype: str = DType(info.dtype).manifest_name or "none"
        self.scale: float = float(info.scale)
        self.causal: bool = bool(info.causal)
        self.window: Optional[int] = int(info.window) or None
        self.softcap: Optional[float] = (
            float(info.softcap) if info.has_softcap else None
        )
        self.batch: Optional[int] = _dim(info.batch)
        self.q_heads: Optional[int] = _dim(info.q_heads)
        self.kv_heads: Optional[int] = _dim(info.kv_heads)
        self.q_len: Optional[int] = _dim(info.q_len)
        self.kv_len: Optional[int] = _dim(info.kv_len)
        self.head_dim: Optional[int] = _dim(info.head_dim)
        # V's and out's head dim (differs from head_dim in multi-head latent
        # attention).
        self.v_head_dim: Optional[int] = _dim(info.v_head_dim)
        # A kiln.paged_attention site: launched with paged_attention().
        self.paged: bool = bool(info.paged)
        self.page_size: Optional[int] = _dim(info.page_size) if self.paged else None
        # The kernel can split each sequence's keys over several blocks (see
        # workspace_size()).
        self.split_kv: bool = bool(info.split_kv)
        # A site of packed queries (q_offsets), launched with a plan: a
        # ragged paged site, or a site of packed sequences (`packed`: q, k
        # and v packed by q_offsets and kv_offsets; packed_attention()).
        self.ragged: bool = bool(info.ragged)
        self.packed: bool = self.ragged and not self.paged
        # A paged site's KV cache element ("f8e4m3" for FP8 caches, else the
        # site's dtype) and an FP8 cache's scales: "per_tensor",
        # "per_kv_head", or None.
        self.cache_dtype: str = DType(info.cache_dtype).manifest_name or "none"
        self.kv_scales: Optional[str] = _KV_SCALES_NAMES.get(int(info.kv_scales))
        self.mask: str = _MASK_NAMES[MaskKind(info.mask)]
        self.mask_dtype: Optional[str] = DType(info.mask_dtype).manifest_name
        self.bias: bool = bool(info.bias)
        self.bias_dtype: Optional[str] = DType(info.bias_dtype).manifest_name
        # The site's op takes a run-time scale: attention() needs
        # scale_factor, a one-element f32 tensor, or with
        # `scale_factor_per_head` one of q_heads elements (one a query head).
        self.scale_factor: bool = bool(info.scale_factor)
        self.scale_factor_per_head: bool = int(info.scale_factor) == 2
        # The log-sum-exp (a forward that trains, or a backward) and, for a
        # backward site, the key pass launched after its kernel.
        self.lse: bool = bool(info.lse)
        self.key_pass: Optional[str] = _text(info.key_pass) if info.key_pass else None

    @property
    def package(self) -> "PackageHandle":
        """The package this site belongs to."""
        return self._package

    def prepare(self) -> None:
        """Compiles the kernels this site's prefill launches take into the
        current CUDA context now (the warp-specialised kernel where the GPU
        has one; a backward site's two passes); the package's other kernels
        compile when first needed."""
        _check(self._package._lib.kiln_site_prepare(self._handle))

    def __repr__(self) -> str:
        return (
            f"Site({self.name!r}, dtype={self.dtype}, head_dim={self.head_dim}, "
            f"heads={self.q_heads}/{self.kv_heads}, causal={self.causal}, "
            f"mask={self.mask}, layout={self.layout})"
        )

    def new_args(self) -> AttentionArgs:
        """An empty argument struct."""
        args = AttentionArgs()
        self._package._lib.kiln_attention_args_init(ctypes.byref(args))
        return args

    def set_contiguous_strides(self, args: AttentionArgs) -> None:
        """Fills the strides of contiguous tensors in the site's layout."""
        _check(
            self._package._lib.kiln_attention_args_set_contiguous(
                self._handle, ctypes.byref(args)
            )
        )

    def _check_with(self, function: str, args: Any) -> LaunchConfig:
        config = _LaunchConfig()
        _check(
            getattr(self._package._lib, function)(
                self._handle, ctypes.byref(args), ctypes.byref(config)
            )
        )
        return LaunchConfig(
            tuple(config.grid), tuple(config.block), int(config.dynamic_shared_bytes)
        )

    def _launch_with(self, function: str, args: Any, stream: int) -> None:
        _check(
            getattr(self._package._lib, function)(
                self._handle, ctypes.byref(args), ctypes.c_void_p(stream or None)
            )
        )

    def check(self, args: AttentionArgs) -> LaunchConfig:
        """Checks `args` as a launch would (no GPU needed); returns the
        launch configuration. Raises KilnError."""
        return self._check_with("kiln_site_check_attention", args)

    def launch(self, args: AttentionArgs, stream: int = 0) -> None:
        """Launches with raw arguments on a CUstream handle (an int)."""
        self._launch_with("kiln_site_launch_attention", args, stream)

    def check_grad(self, args: AttentionGradArgs) -> Tuple[LaunchConfig, LaunchConfig]:
        """Checks a backward launch's `args` (no GPU needed); returns the
        launch configurations of the query pass and the key pass."""
        configs = (_LaunchConfig * 2)()
        _check(
            self._package._lib.kiln_site_check_attention_grad(
                self._handle, ctypes.byref(args), configs
            )
        )
        return tuple(  # type: ignore[return-value]
            LaunchConfig(tuple(c.grid), tuple(c.block), int(c.dynamic_shared_bytes))
            for c in configs
        )

    def launch_grad(self, args: AttentionGradArgs, stream: int = 0) -> None:
        """Launches a backward site's two passes on a CUstream handle."""
        self._launch_with("kiln_site_launch_attention_grad", args, stream)

    def grad_workspace_bytes(self, batch: int, q_heads: int, q_len: int) -> int:
        """The workspace a backward launch of these sizes needs."""
        return int(
            self._package._lib.kiln_attention_grad_workspace_size(batch, q_heads, q_len)
        )

    def check_paged(self, args: PagedAttentionArgs) -> LaunchConfig:
        """Checks a paged launch's `args` (no GPU needed); returns the launch
        configuration. Raises KilnError."""
        return self._check_with("kiln_site_check_paged_attention", args)

    def launch_paged(self, args: PagedAttentionArgs, stream: int = 0) -> None:
        """Launches a paged site with raw arguments on a CUstream handle."""
        self._launch_with("kiln_site_launch_paged_attention", args, stream)

    def check_packed(self, args: PackedAttentionArgs) -> LaunchConfig:
        """Checks a packed launch's `args` (no GPU needed); returns the
        launch configuration. Raises KilnError."""
        return self._check_with("kiln_site_check_packed_attention", args)

    def launch_packed(self, args: PackedAttentionArgs, stream: int = 0) -> None:
        """Launches a packed site with raw arguments on a CUstream handle."""
        self._launch_with("kiln_site_launch_packed_attention", args, stream)

    def check_append(self, args: PagedAppendArgs) -> LaunchConfig:
        """Checks a cache append's raw `args` (no GPU needed); returns the
        launch configuration. Raises KilnError."""
        return self._check_with("kiln_site_append_config", args)

    def launch_append(self, args: PagedAppendArgs, stream: int = 0) -> None:
        """Launches a cache append with raw arguments on a CUstream handle."""
        self._launch_with("kiln_site_append_paged_kv", args, stream)

    def _require_scales(self, k_scale: Any, v_scale: Any) -> None:
        """Refuses an FP8 site's missing scales and a float site's given
        ones before anything else is looked at (no torch needed)."""
        if self.cache_dtype != "f8e4m3":
            if k_scale is not None or v_scale is not None:
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"site {self.name!r}: k_scale and v_scale are for "
                    f"f8e4m3 caches; its caches hold {self.cache_dtype}")
        elif k_scale is None or v_scale is None:
            shape = ("[1] (per tensor)" if self.kv_scales == "per_tensor"
                     else "[kv_heads] (per KV head)")
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"site {self.name!r} has f8e4m3 caches: pass k_scale and "
                f"v_scale, contiguous f32 CUDA tensors of shape {shape}")

    def validate_paged(self, args: PagedAttentionArgs, stream: int = 0) -> None:
        """The debug check of a paged launch's kv_lens and page table on the
        device (waits for `stream`, a CUstream handle): KilnError names the
        first bad entry. Does nothing while the stream is being captured."""
        self._launch_with("kiln_site_validate_paged_attention", args, stream)

    def workspace_size(
        self,
        batch: int,
        q_len: int,
        max_kv_len: int,
        q_heads: Optional[int] = None,
        kv_heads: Optional[int] = None,
    ) -> int:
        """Bytes of workspace that let every launch of at most `batch`
        sequences, `q_len` queries and `max_kv_len` keys (a paged site:
        max_pages x page_size) split keys as it chooses, on the current CUDA
        device; 0 when the kernel does not split. Heads default to the
        site's."""
        q_heads, kv_heads = self._heads(q_heads, kv_heads)
        size = ctypes.c_int64()
        _check(
            self._package._lib.kiln_site_workspace_size(
                self._handle, batch, q_heads, kv_heads, q_len, max_kv_len,
                ctypes.byref(size),
            )
        )
        return int(size.value)

    def splits(self, args: Any) -> int:
        """The split count a launch with raw `args` (AttentionArgs,
        PagedAttentionArgs or PackedAttentionArgs) uses on the current
        device."""
        result = ctypes.c_int64()
        function = (
            "kiln_site_paged_attention_splits"
            if isinstance(args, PagedAttentionArgs)
            else "kiln_site_packed_attention_splits"
            if isinstance(args, PackedAttentionArgs)
            else "kiln_site_attention_splits"
        )
        _check(
            getattr(self._package._lib, function)(
                self._handle, ctypes.byref(args), ctypes.byref(result)
            )
        )
        return int(result.value)

    def plan_capacity(self, batch: int, total_q: int,
                      q_heads: Optional[int] = None,
                      kv_heads: Optional[int] = None) -> int:
        """The plan items every ragged launch of at most `batch` sequences
        and `total_q` packed queries fits in (a fixed plan buffer, for CUDA
        graphs)."""
        q_heads, kv_heads = self._heads(q_heads, kv_heads)
        capacity = ctypes.c_int64()
        _check(self._package._lib.kiln_site_plan_capacity(
            self._handle, int(batch), int(total_q), q_heads, kv_heads,
            ctypes.byref(capacity)))
        return int(capacity.value)

    def _heads(self, q_heads: Optional[int],
               kv_heads: Optional[int]) -> Tuple[int, int]:
        q_heads = q_heads or self.q_heads
        kv_heads = kv_heads or self.kv_heads
        if not q_heads or not kv_heads:
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"site {self.name!r} has dynamic head counts: pass q_heads "
                "and kv_heads")
        return int(q_heads), int(kv_heads)


class PackageHandle:
    """An open Kiln package (a directory with manifest.json and PTX files),
    its sites made as `site_type` (kiln.runtime.Package's are
    kiln.runtime.Site)."""

    site_type = SiteHandle

    def __init__(self, path: "os.PathLike[str] | str", library: Optional[str] = None):
        self._lib = load_library(library)
        self.path = str(path)
        handle = ctypes.c_void_p()
        _check(
            self._lib.kiln_package_open(os.fsencode(self.path), ctypes.byref(handle))
        )
        self._handle: Optional[ctypes.c_void_p] = handle
        count = self._lib.kiln_package_num_sites(handle)
        self._sites: List[SiteHandle] = []
        for index in range(count):
            site = ctypes.c_void_p()
            _check(self._lib.kiln_package_get_site(handle, index, ctypes.byref(site)))
            self._sites.append(self.site_type(self, site.value or 0))
        self._by_name = {site.name: site for site in self._sites}
        # Set by kiln.compile: kilnc's JSON fusion report and its warnings.
        self.report: Optional[Dict[str, Any]] = None
        self.diagnostics: str = ""

    # -- lifetime ------------------------------------------------------------

    def close(self) -> None:
        """Closes the package; its sites must not be used afterwards."""
        if self._handle is not None:
            self._lib.kiln_package_close(self._handle)
            self._handle = None

    def __enter__(self) -> "PackageHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def _live(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise KilnError(Status.INVALID_ARGUMENT, f"package {self.path} is closed")
        return self._handle

    # -- queries -------------------------------------------------------------

    @property
    def producer(self) -> str:
        return _text(self._lib.kiln_package_producer(self._live()))

    @property
    def sites(self) -> List[SiteHandle]:
        return list(self._sites)

    def site(self, name: str) -> SiteHandle:
        """The site called `name`; KilnError (NOT_FOUND) lists the others."""
        site = ctypes.c_void_p()
        _check(
            self._lib.kiln_package_find_site(
                self._live(), name.encode("utf-8"), ctypes.byref(site)
            )
        )
        return self._by_name[name]

    def __getitem__(self, name: str) -> SiteHandle:
        return self.site(name)

    @property
    def kernels(self) -> List[KernelInfo]:
        handle = self._live()
        result = []
        for index in range(self._lib.kiln_package_num_kernels(handle)):
            info = _KernelInfo()
            _check(self._lib.kiln_package_get_kernel(handle, index, ctypes.byref(info)))
            result.append(
                KernelInfo(
                    name=_text(info.name),
                    kind=_text(info.kind),
                    dtype=DType(info.dtype).manifest_name or "none",
                    head_dim=_dim(info.head_dim),
                    block=tuple(info.block),  # type: ignore[arg-type]
                    static_shared_bytes=int(info.static_shared_bytes),
                    dynamic_shared_bytes=int(info.dynamic_shared_bytes),
                    num_args=int(info.num_args),
                )
            )
        return result

    @property
    def targets(self) -> List[str]:
        handle = self._live()
        chips = []
        for index in range(self._lib.kiln_package_num_targets(handle)):
            chip = ctypes.c_char_p()
            _check(self._lib.kiln_package_get_target(handle, index, ctypes.byref(chip)))
            chips.append(_text(chip.value))
        return chips

    def select_target(self, major: int, minor: int) -> str:
        """The target chip a device of compute capability major.minor loads."""
        chip = ctypes.c_char_p()
        _check(
            self._lib.kiln_package_select_target(
                self._live(), major, minor, ctypes.byref(chip)
            )
        )
        return _text(chip.value)

    def prepare(self) -> None:
        """Compiles every kernel into the current CUDA context now (do this
        before capturing launches in a CUDA graph)."""
        _check(self._lib.kiln_package_prepare(self._live()))

    def __repr__(self) -> str:
        names = ", ".join(site.name for site in self._sites)
        return f"Package({self.path!r}, sites=[{names}])"


def dtype_size(dtype: DType) -> int:
    return int(load_library().kiln_dtype_size(int(dtype)))


def library_contiguous_strides(
    layout: str, batch: int, heads: int, seq: int, head_dim: int
) -> Tuple[int, int, int, int]:
    """contiguous_strides() as computed by libkilnrt (for cross-checks)."""
    strides = _Strides()
    lay = Layout.BHSD if layout == "bhsd" else Layout.BSHD
    _check(
        load_library().kiln_contiguous_strides(
            int(lay), batch, heads, seq, head_dim, strides
        )
    )
    return tuple(strides)  # type: ignore[return-value]
