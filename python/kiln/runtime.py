"""The Kiln runtime on PyTorch tensors.

Opens a package written by ``kilnc`` (PTX files plus ``manifest.json``) and
launches its attention kernels on PyTorch CUDA tensors::

    import kiln
    package = kiln.Package("out/model.kiln")
    site = package.site("attention_0")
    out = site.attention(q, k, v)          # on torch.cuda.current_stream()

No compiled extension: the shared library is found at run time (the
``KILN_RUNTIME_LIB`` environment variable, a copy next to this package, or a
build tree), so the package works with any Python 3.9+ and any torch. torch is
imported only when tensors are launched.

The ctypes layer beneath (library loading, C structs, status codes, raw
launches) is ``kiln.capi``; every name it exports is importable from here
too.
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, Optional, Tuple

# Every name of the C API layer is one of kiln.runtime's too (user code and
# tests import them from here), the private struct mirrors included.
from . import capi as _capi
from .capi import *  # noqa: F401,F403
from .capi import (DYNAMIC, _API_VERSION, _KernelInfo, _LaunchConfig,  # noqa: F401
                   _SiteInfo, _Strides, _check, AttentionArgs, DType,
                   KilnError, LaunchConfig, PackageHandle, PackedAttentionArgs,
                   PagedAppendArgs, PagedAttentionArgs, SiteHandle, Status,
                   broadcast_strides, qkv_dims, qkv_strides)

#: kiln.runtime's names (and so kiln's): the C API layer's, less the raw
#: handles and the structs and helpers only tests use, plus Package and Site.
__all__ = [name for name in _capi.__all__
           if name not in ("PackageHandle", "SiteHandle", "PackedAttentionArgs",
                           "PagedAppendArgs", "dtype_size",
                           "library_contiguous_strides")] + ["Package", "Site"]


def _host_array(values: Any) -> Any:
    """A host numpy array of a list, a numpy array or a CPU tensor."""
    import numpy as np

    if hasattr(values, "detach"):
        if values.is_cuda:
            raise KilnError(
                Status.INVALID_ARGUMENT,
                "plan() takes host values (a serving scheduler's own copy): "
                "reading a CUDA tensor back would synchronize")
        return values.detach().numpy()
    return np.asarray(values)


def _torch_dtype_map() -> Dict[Any, DType]:
    import torch

    dtypes = {
        torch.float16: DType.F16,
        torch.bfloat16: DType.BF16,
        torch.float32: DType.F32,
        torch.bool: DType.BOOL,
    }
    # FP8 KV caches (torch 2.1+).
    if hasattr(torch, "float8_e4m3fn"):
        dtypes[torch.float8_e4m3fn] = DType.F8E4M3
    return dtypes



class Site(SiteHandle):
    """An attention site of an open Package: launches on PyTorch tensors."""

    def append_paged_kv(self, key: Any, value: Any, key_cache: Any,
                        value_cache: Any, page_table: Any, kv_lens: Any,
                        new_offsets: Any, stream: Any = None,
                        k_scale: Any = None, v_scale: Any = None) -> None:
        """Writes a step's new keys and values into a paged site's caches:
        key ``[total_new, Hkv, D]`` and value ``[total_new, Hkv, Dv]``
        (sequence b's tokens ``new_offsets[b]`` to ``new_offsets[b + 1]``),
        caches, page_table and kv_lens as paged_attention() takes them
        (kv_lens counting the new tokens), new_offsets ``[B + 1]`` int32 on
        the same device. Asynchronous (capturable in a CUDA graph); a token
        whose place falls outside the caches is not written.

        An FP8 site (``site.cache_dtype == "f8e4m3"``) takes key and value in
        its dtype and float8_e4m3fn caches, and stores ``key / k_scale`` and
        ``value / v_scale`` (saturated to ±448): `k_scale` and `v_scale` as
        paged_attention() takes them."""
        self._require_scales(k_scale, v_scale)
        import torch

        device = key.device
        dtypes = _torch_dtype_map()
        named = (("key", key, 3), ("value", value, 3),
                 ("key_cache", key_cache, 4), ("value_cache", value_cache, 4),
                 ("page_table", page_table, 2), ("kv_lens", kv_lens, 1),
                 ("new_offsets", new_offsets, 1))
        for name, tensor, rank in named:
            if (not isinstance(tensor, torch.Tensor) or tensor.device != device
                    or tensor.dim() != rank):
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"{name} must be a rank-{rank} torch.Tensor on {device}")
        for name, tensor, _ in named[4:]:
            if tensor.dtype != torch.int32:
                raise KilnError(Status.INVALID_ARGUMENT,
                                f"{name} must be int32, got {tensor.dtype}")
        batch = int(kv_lens.shape[0])
        if (new_offsets.shape[0] != batch + 1 or
                page_table.shape[0] != batch):
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"new_offsets {tuple(new_offsets.shape)} and page_table "
                f"{tuple(page_table.shape)} must have kv_lens' {batch} "
                "sequences (new_offsets: B + 1)")
        if tuple(value.shape[:2]) != tuple(key.shape[:2]):
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"value has shape {tuple(value.shape)} but key "
                f"{tuple(key.shape)} (only the head dim may differ)")
        args = PagedAppendArgs()
        for name, tensor in (("key", key), ("value", value),
                             ("key_cache", key_cache),
                             ("value_cache", value_cache)):
            if tensor.dtype not in dtypes:
                raise KilnError(Status.INVALID_ARGUMENT,
                                f"{name} has unsupported dtype {tensor.dtype}")
            setattr(args, name, tensor.data_ptr())
            setattr(args, name + "_dtype", int(dtypes[tensor.dtype]))
            getattr(args, name + "_strides")[:] = [int(x)
                                                   for x in tensor.stride()]
        args.page_table = page_table.data_ptr()
        args.kv_lens = kv_lens.data_ptr()
        args.new_offsets = new_offsets.data_ptr()
        args.page_table_strides[:] = [int(x) for x in page_table.stride()]
        args.batch, args.total_new = batch, int(key.shape[0])
        args.kv_heads, args.head_dim = int(key.shape[1]), int(key.shape[2])
        args.v_head_dim = int(value.shape[2])
        args.num_pages, args.page_size = (int(key_cache.shape[0]),
                                          int(key_cache.shape[1]))
        args.max_pages = int(page_table.shape[1])
        self._set_scales(args, k_scale, v_scale, device)
        if args.total_new == 0:
            return
        launch_stream = _Stream(device, stream)
        with torch.cuda.device(device):
            self.launch_append(args, launch_stream.handle)

    def _set_scales(self, args: Any, k_scale: Any, v_scale: Any,
                    device: Any) -> None:
        """An FP8 site's scales in raw `args`: their pointers, and their
        count as num_kv_scales (which the library checks against the
        site)."""
        if self.cache_dtype != "f8e4m3":
            return
        import torch

        for name, tensor in (("k_scale", k_scale), ("v_scale", v_scale)):
            if (not isinstance(tensor, torch.Tensor) or tensor.device != device
                    or tensor.dtype != torch.float32 or tensor.dim() != 1
                    or not tensor.is_contiguous()):
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"{name} must be a contiguous f32 tensor of rank 1 on "
                    f"{device}")
        if k_scale.numel() != v_scale.numel():
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"k_scale has {k_scale.numel()} scales but v_scale "
                f"{v_scale.numel()}")
        args.k_scale, args.v_scale = k_scale.data_ptr(), v_scale.data_ptr()
        args.num_kv_scales = int(k_scale.numel())

    def _runs_unsplit(self, args: Any, stream: "_Stream") -> bool:
        """Whether the attention launch `args` (its split count the
        launch's choice) runs without splitting its keys however large a
        workspace it is given: the warp-specialised kernel takes it, or the
        kernel's split model gives it one split. Asked before a call's own
        workspace is sized, since the size query compiles the portable
        kernel (its occupancy) for launches the warp-specialised kernel
        takes, which would run nothing of it: that JIT was most of a
        torch.compile graph's first run on sm_90a."""
        if not isinstance(args, AttentionArgs):
            return False
        saved = args.workspace, args.workspace_bytes
        # The split model reads the workspace's presence and size only:
        # any aligned address and a size no launch needs.
        args.workspace, args.workspace_bytes = 256, 1 << 62
        try:
            with _torch_device(stream.device):
                return self.splits(args) == 1
        except KilnError:
            return False  # the launch itself reports what is wrong
        finally:
            args.workspace, args.workspace_bytes = saved

    def _set_workspace(
        self, args: Any, workspace: Any, num_splits: int, stream: "_Stream",
        shape: Tuple[int, int, int, int, int, int],
    ) -> None:
        args.num_splits = int(num_splits)
        if not self.split_kv or num_splits == 1 or shape[0] == 0:
            return
        keep = workspace is not TRANSIENT_WORKSPACE
        if not keep:
            workspace = None
            if num_splits == 0 and self._runs_unsplit(args, stream):
                args.workspace, args.workspace_bytes = None, 0
                return
        if workspace is None:
            batch, q_heads, kv_heads, q_len, max_kv_len, value_dim = shape
            # The size query walks every smaller launch: remember its answer
            # per shape and device (a race only computes it twice).
            sizes = self.__dict__.setdefault("_workspace_sizes", {})
            needed = sizes.get((stream.device, shape))
            if needed is None:
                with _torch_device(stream.device):
                    needed = self.workspace_size(
                        batch, q_len, max_kv_len, q_heads=q_heads,
                        kv_heads=kv_heads
                    )
                sizes[(stream.device, shape)] = needed
            # A forced split count needs its own partial results and
            # statistics (f32) for every row.
            forced = num_splits * batch * q_heads * q_len * (value_dim + 2) * 4
            workspace = self._package._workspace(stream, max(needed, forced),
                                                 keep)
        args.workspace = workspace.data_ptr() if workspace is not None else None
        args.workspace_bytes = (
            workspace.numel() * workspace.element_size()
            if workspace is not None
            else 0
        )

    def plan(self, q_offsets: Any, kv_lens: Any = None, *,
             q_heads: Optional[int] = None, kv_heads: Optional[int] = None,
             capacity: Optional[int] = None, out: Any = None,
             device: Any = None, total_q: Optional[int] = None,
             kv_offsets: Any = None) -> Any:
        """The plan of a ragged batch (a ragged site's launches take one):
        its work items, heaviest first, as an int32 CUDA tensor ``[items,
        2]``. `q_offsets` (``[B + 1]``) and `kv_lens` (``[B]``, optional:
        orders by queries alone without it) are host values (lists, numpy
        arrays or CPU tensors): a serving scheduler knows them, and the plan
        is computed once per step for every layer. With `capacity` the plan
        has that many items, the rest empty (they do nothing), so that every
        step launches the same grid; `out`, an int32 CUDA tensor ``[capacity,
        2]``, receives it (copied on the current stream) for a CUDA graph to
        replay. With `total_q` (the packed query rows the launches will
        have), offsets past it raise KilnError here rather than being
        clamped on the GPU.

        A site of packed sequences (``site.packed``) takes `kv_offsets`
        (``[B + 1]``, host values) instead of `kv_lens`."""
        import numpy as np

        q_heads, kv_heads = self._heads(q_heads, kv_heads)
        offsets = np.ascontiguousarray(
            _host_array(q_offsets), dtype=np.int32)
        if self.packed != (kv_offsets is not None) or (
                self.packed and kv_lens is not None):
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"site {self.name!r}: "
                + ("a site of packed sequences plans from q_offsets and "
                   "kv_offsets" if self.packed else
                   "kv_offsets are for sites of packed sequences; pass "
                   "kv_lens"))
        # The plan's second host array: the key offsets of packed sequences
        # ([B + 1]), else the key counts ([B]) where given.
        keys = kv_offsets if self.packed else kv_lens
        keys = (None if keys is None else
                np.ascontiguousarray(_host_array(keys), dtype=np.int32))
        batch = max(int(offsets.shape[0]) - 1, 0)
        if (keys is not None and self.packed
                and keys.shape[0] != offsets.shape[0]):
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"kv_offsets has {keys.shape[0]} entries; q_offsets has "
                f"{offsets.shape[0]} (both B + 1)")
        if keys is not None and not self.packed and keys.shape[0] != batch:
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"kv_lens has {keys.shape[0]} entries; q_offsets gives "
                f"{batch} sequences")
        if total_q is not None and batch and int(offsets[-1]) > total_q:
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"site {self.name!r}: q_offsets[{batch}] = {int(offsets[-1])} "
                f"is past total_q = {total_q}")
        if capacity is None and out is not None:
            capacity = int(out.shape[0])
        # Without a capacity, the plan is just the batch's items.
        fixed = capacity is not None
        if not fixed:
            capacity = self.plan_capacity(
                batch, int(offsets[-1]) if batch else 0, q_heads, kv_heads)
        host = np.empty((max(int(capacity), 0), 2), np.int32)
        items = ctypes.c_int64()
        pointer = ctypes.POINTER(ctypes.c_int32)
        function = ("kiln_site_plan_packed_attention" if self.packed
                    else "kiln_site_plan_paged_attention")
        _check(getattr(self._package._lib, function)(
            self._handle, offsets.ctypes.data_as(pointer),
            None if keys is None else keys.ctypes.data_as(pointer),
            batch, q_heads, kv_heads, host.ctypes.data_as(pointer),
            int(capacity), ctypes.byref(items)))
        rows = host if fixed else host[:int(items.value)]
        import torch

        tensor = torch.from_numpy(np.ascontiguousarray(rows))
        if out is not None:
            if (out.dtype != torch.int32 or not out.is_cuda or
                    tuple(out.shape) != tuple(host.shape)):
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"out must be an int32 CUDA tensor of shape "
                    f"{tuple(host.shape)}")
            out.copy_(tensor, non_blocking=False)
            return out
        return tensor.to(device or torch.device("cuda"))

    def paged_attention(
        self,
        q: Any,
        key_cache: Any,
        value_cache: Any,
        page_table: Any,
        kv_lens: Any,
        out: Any = None,
        stream: Any = None,
        workspace: Any = None,
        num_splits: int = 0,
        total_kv_len: int = 0,
        check: bool = False,
        q_offsets: Any = None,
        plan: Any = None,
        k_scale: Any = None,
        v_scale: Any = None,
    ) -> Any:
        """Runs a paged site: q ``[B, Hq, Sq, D]``, caches ``[num_pages,
        page_size, Hkv, D]`` (value: ``Dv``), page_table ``[B, max_pages]``
        and kv_lens ``[B]`` int32 CUDA tensors; returns out ``[B, Hq, Sq,
        Dv]``. Asynchronous and never synchronizes (capturable in a CUDA
        graph).

        `workspace` (a CUDA tensor of at least workspace_size() bytes) lets
        the launch split keys over blocks; it is written, so launches that may
        overlap (other streams) must not share one. None uses one the package
        keeps per stream (taken from the caching allocator on the launch's
        stream, grown as shapes need; under CUDA-graph capture, from the
        graph's pool). `num_splits` forces a split count (0: chosen at launch
        from the device and the shape). `total_kv_len`, the sum of kv_lens
        where the caller knows it without reading kv_lens back (0: unknown),
        lets that choice split a batch of uneven lengths more; it changes the
        split count only, never the result.

        On the GPU kv_lens are clamped to ``[0, max_pages * page_size]`` and
        table entries to ``[0, num_pages)``: a bad table reads nothing outside
        the cache but gives wrong answers. `check` (or the environment
        variable ``KILN_CHECK=1``) validates both on the device first and
        raises KilnError naming the first bad entry; it waits for the stream
        (debug use; skipped under CUDA-graph capture). An empty batch returns
        an empty output without a launch.

        A ragged site (``site.ragged``) takes the batch packed: q ``[total_q,
        Hq, D]`` with `q_offsets` ``[B + 1]`` (int32 CUDA tensor; sequence b
        owns rows ``q_offsets[b]`` to ``q_offsets[b + 1]``, its new queries,
        which kv_lens[b] counts) and `plan` from plan(), and returns out
        ``[total_q, Hq, Dv]``: prompt chunks and decodes in one launch.

        An FP8 site (``site.cache_dtype == "f8e4m3"``) takes float8_e4m3fn
        caches and their dequantisation scales `k_scale` and `v_scale`:
        contiguous f32 CUDA tensors of shape ``[1]`` (``site.kv_scales ==
        "per_tensor"``) or ``[Hkv]`` (``"per_kv_head"``); a key of KV head h
        reads ``f32(key) * k_scale[h]`` (``k_scale[0]`` per tensor), values
        likewise. Other sites take none."""
        self._require_scales(k_scale, v_scale)
        import torch

        if self.ragged or q_offsets is not None or plan is not None:
            if not self.ragged:
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"site {self.name!r} takes q [B, Hq, Sq, D]; q_offsets "
                    "and plan are for ragged sites")
            if q_offsets is None or plan is None:
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"site {self.name!r} is ragged: pass q_offsets and plan "
                    "(Site.plan)")
            for name, tensor, rank in (("q_offsets", q_offsets, 1),
                                       ("plan", plan, 2)):
                if (not isinstance(tensor, torch.Tensor) or
                        tensor.device != q.device or
                        tensor.dtype != torch.int32 or tensor.dim() != rank
                        or not tensor.is_contiguous()):
                    raise KilnError(
                        Status.INVALID_ARGUMENT,
                        f"{name} must be a contiguous int32 tensor of rank "
                        f"{rank} on {q.device}")
            if q.dim() != 3:
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"q must be [total_q, Hq, D] for a ragged site, got "
                    f"shape {tuple(q.shape)}")
            if q_offsets.shape[0] != kv_lens.shape[0] + 1:
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"q_offsets has {q_offsets.shape[0]} entries; kv_lens "
                    f"gives {kv_lens.shape[0]} sequences (needs B + 1)")
            # The packed rows as one sequence of total_q queries.
            packed = q.permute(1, 0, 2).unsqueeze(0)
            result = out
            if result is not None:
                result = result.permute(1, 0, 2).unsqueeze(0)
            result = self._paged(
                packed, key_cache, value_cache, page_table, kv_lens, result,
                stream, workspace, num_splits, total_kv_len, check,
                q_offsets=q_offsets, plan=plan, k_scale=k_scale,
                v_scale=v_scale)
            return result[0].permute(1, 0, 2)
        return self._paged(q, key_cache, value_cache, page_table, kv_lens,
                           out, stream, workspace, num_splits, total_kv_len,
                           check, k_scale=k_scale, v_scale=v_scale)

    def _paged(self, q: Any, key_cache: Any, value_cache: Any,
               page_table: Any, kv_lens: Any, out: Any, stream: Any,
               workspace: Any, num_splits: int, total_kv_len: int,
               check: bool, q_offsets: Any = None, plan: Any = None,
               k_scale: Any = None, v_scale: Any = None) -> Any:
        """paged_attention() on q ``[B, Hq, Sq, D]``; a ragged launch's
        packed rows stand as one sequence (B = 1, Sq = total_q)."""
        import torch

        if not self.paged:
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"site {self.name!r} is not a paged-attention site; use attention()",
            )
        device = q.device
        dtypes = _torch_dtype_map()
        for name, tensor in (("q", q), ("key_cache", key_cache),
                             ("value_cache", value_cache),
                             ("page_table", page_table), ("kv_lens", kv_lens)):
            if not isinstance(tensor, torch.Tensor) or tensor.device != device:
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"{name} must be a torch.Tensor on {device}",
                )
        for name, tensor, rank in (("q", q, 4), ("key_cache", key_cache, 4),
                                   ("value_cache", value_cache, 4),
                                   ("page_table", page_table, 2),
                                   ("kv_lens", kv_lens, 1)):
            if tensor.dim() != rank:
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"{name} must have rank {rank}, got shape {tuple(tensor.shape)}",
                )
        for name, tensor in (("page_table", page_table), ("kv_lens", kv_lens)):
            if tensor.dtype != torch.int32:
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"{name} must be int32, got {tensor.dtype}",
                )
        batch, q_heads, q_len, head_dim = (int(x) for x in q.shape)
        num_pages, page_size, kv_heads, key_dim = (int(x) for x in key_cache.shape)
        if tuple(value_cache.shape[:3]) != tuple(key_cache.shape[:3]):
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"value_cache has shape {tuple(value_cache.shape)} but key_cache "
                f"has {tuple(key_cache.shape)} (only the head dim may differ)",
            )
        if key_dim != head_dim:
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"key_cache head dim {key_dim} differs from q's {head_dim}",
            )
        sequences = batch
        if q_offsets is not None:
            sequences = int(kv_lens.shape[0])
        if page_table.shape[0] != sequences or kv_lens.shape[0] != sequences:
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"page_table {tuple(page_table.shape)} and kv_lens "
                f"{tuple(kv_lens.shape)} must have q's batch {sequences} rows",
            )
        value_dim = int(value_cache.shape[3])
        launch_stream = _Stream(device, stream)
        if out is None and q_offsets is not None:
            # Packed [total_q, Hq, Dv], seen as [1, Hq, total_q, Dv].
            out = launch_stream.empty((q_len, q_heads, value_dim),
                                      q.dtype).permute(1, 0, 2).unsqueeze(0)
        if out is None:
            out = launch_stream.empty((batch, q_heads, q_len, value_dim), q.dtype)
        if tuple(out.shape) != (batch, q_heads, q_len, value_dim):
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"out has shape {tuple(out.shape)}; expected "
                f"{(batch, q_heads, q_len, value_dim)}",
            )
        args = PagedAttentionArgs()
        for name, tensor in (("q", q), ("key_cache", key_cache),
                             ("value_cache", value_cache), ("out", out)):
            if tensor.dtype not in dtypes:
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"{name} has unsupported dtype {tensor.dtype}",
                )
            setattr(args, name, tensor.data_ptr())
            setattr(args, name + "_dtype", int(dtypes[tensor.dtype]))
            getattr(args, name + "_strides")[:] = [int(s) for s in tensor.stride()]
        args.page_table = page_table.data_ptr()
        args.kv_lens = kv_lens.data_ptr()
        args.page_table_strides[:] = [int(s) for s in page_table.stride()]
        args.batch, args.q_heads, args.kv_heads = batch, q_heads, kv_heads
        args.q_len, args.head_dim, args.v_head_dim = q_len, head_dim, value_dim
        args.num_pages, args.page_size = num_pages, page_size
        args.max_pages = int(page_table.shape[1])
        args.total_kv_len = int(total_kv_len)
        self._set_scales(args, k_scale, v_scale, device)
        if q_offsets is not None:
            args.batch = sequences
            args.q_offsets = q_offsets.data_ptr()
            args.plan = plan.data_ptr()
            args.plan_items = int(plan.shape[0])
            if sequences == 0 or q_len == 0:
                return out
        if batch == 0:
            return out
        with torch.cuda.device(device):
            self._set_workspace(
                args, workspace, num_splits, launch_stream,
                (batch, q_heads, kv_heads, q_len, args.max_pages * page_size,
                 value_dim),
            )
            if check:
                self.validate_paged(args, launch_stream.handle)
            self.launch_paged(args, launch_stream.handle)
        return out

    def packed_attention(
        self,
        q: Any,
        k: Any,
        v: Any,
        q_offsets: Any,
        kv_offsets: Any,
        plan: Any,
        out: Any = None,
        stream: Any = None,
        workspace: Any = None,
        num_splits: int = 0,
        max_kv_len: int = 0,
    ) -> Any:
        """Runs a site of packed sequences (``site.packed``; FlashAttention's
        varlen form): q ``[total_q, Hq, D]``, k ``[total_kv, Hkv, D]``, v
        ``[total_kv, Hkv, Dv]``, `q_offsets` and `kv_offsets` ``[B + 1]``
        int32 CUDA tensors (sequence b owns query rows ``q_offsets[b]`` to
        ``q_offsets[b + 1]`` and key rows ``kv_offsets[b]`` to
        ``kv_offsets[b + 1]``) and `plan` from ``plan(q_offsets,
        kv_offsets=...)``; returns out ``[total_q, Hq, Dv]``. Each sequence
        is attended as the uniform op attends it alone (causal and windows
        bottom-right aligned on its rows). Rows no sequence owns are not
        written. Asynchronous; never synchronises (capturable).
        `workspace` and `num_splits` are as for paged_attention();
        `max_kv_len`, the longest sequence's keys where the caller knows it
        (0: total_kv), only changes the split count."""
        import torch

        if not self.packed:
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"site {self.name!r} is not a site of packed sequences; use "
                + ("paged_attention()" if self.paged else "attention()"))
        tensors = {"q": q, "k": k, "v": v}
        for name, tensor in tensors.items():
            if not isinstance(tensor, torch.Tensor) or not tensor.is_cuda:
                raise KilnError(Status.INVALID_ARGUMENT,
                                f"{name} must be a CUDA torch.Tensor")
            if tensor.dim() != 3:
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"{name} must be [rows, heads, head_dim], got shape "
                    f"{tuple(tensor.shape)}")
        device = q.device
        for name, tensor, rank in (("q_offsets", q_offsets, 1),
                                   ("kv_offsets", kv_offsets, 1),
                                   ("plan", plan, 2)):
            if (not isinstance(tensor, torch.Tensor) or
                    tensor.device != device or tensor.dtype != torch.int32
                    or tensor.dim() != rank or not tensor.is_contiguous()):
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"{name} must be a contiguous int32 tensor of rank "
                    f"{rank} on {device}")
        if q_offsets.shape[0] != kv_offsets.shape[0]:
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"q_offsets has {q_offsets.shape[0]} entries and kv_offsets "
                f"{kv_offsets.shape[0]} (both B + 1)")
        total_q, q_heads, head_dim = (int(x) for x in q.shape)
        total_kv, kv_heads, key_dim = (int(x) for x in k.shape)
        if tuple(v.shape[:2]) != (total_kv, kv_heads) or key_dim != head_dim:
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"q {tuple(q.shape)}, k {tuple(k.shape)} and v "
                f"{tuple(v.shape)} do not agree (k and v share rows and "
                "heads, q and k the head dim)")
        value_dim = int(v.shape[2])
        launch_stream = _Stream(device, stream)
        if out is None:
            out = launch_stream.empty((total_q, q_heads, value_dim), q.dtype)
        tensors["out"] = out
        if tuple(out.shape) != (total_q, q_heads, value_dim):
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"out has shape {tuple(out.shape)}; expected "
                f"{(total_q, q_heads, value_dim)}")
        dtypes = _torch_dtype_map()
        args = PackedAttentionArgs()
        for name, tensor in tensors.items():
            if tensor.device != device or tensor.dtype not in dtypes:
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"{name} must be on {device} with a supported dtype, got "
                    f"{tensor.dtype} on {tensor.device}")
            setattr(args, name, tensor.data_ptr())
            setattr(args, name + "_dtype", int(dtypes[tensor.dtype]))
            getattr(args, name + "_strides")[:] = [int(x)
                                                   for x in tensor.stride()]
        args.q_offsets = q_offsets.data_ptr()
        args.kv_offsets = kv_offsets.data_ptr()
        args.plan = plan.data_ptr()
        args.plan_items = int(plan.shape[0])
        args.batch = int(q_offsets.shape[0]) - 1
        args.q_heads, args.kv_heads = q_heads, kv_heads
        args.total_q, args.total_kv = total_q, total_kv
        args.head_dim, args.v_head_dim = head_dim, value_dim
        args.max_kv_len = int(max_kv_len)
        if args.batch <= 0 or total_q == 0 or args.plan_items == 0:
            return out
        with torch.cuda.device(device):
            self._set_workspace(
                args, workspace, num_splits, launch_stream,
                (1, q_heads, kv_heads, total_q,
                 int(max_kv_len) or max(total_kv, 1), value_dim))
            self.launch_packed(args, launch_stream.handle)
        return out

    def attention(
        self,
        q: Any,
        k: Any,
        v: Any,
        mask: Any = None,
        bias: Any = None,
        out: Any = None,
        stream: Any = None,
        workspace: Any = None,
        num_splits: int = 0,
        scale_factor: Any = None,
    ) -> Any:
        """Runs the site on torch CUDA tensors in the site's layout and
        returns `out` (allocated like a contiguous `q` when not given).
        `workspace` and `num_splits` are as for paged_attention().
        `scale_factor`: a site whose op takes a run-time scale needs it, a
        one-element f32 tensor on q's device that the kernel reads (the
        scores are scaled by the site's scale times it); for a site whose
        factor is per head (`scale_factor_per_head`), a contiguous f32
        tensor of q_heads elements, head h's scores scaled by element h.

        `mask`/`bias` broadcast to [batch, q_heads, q_len, kv_len] (any rank
        up to 4). `stream` is a torch.cuda.Stream or a raw CUstream int;
        default torch.cuda.current_stream(q.device). The launch is
        asynchronous and never synchronizes."""
        import torch

        launch_stream = (_Stream(q.device, stream)
                         if isinstance(q, torch.Tensor) and q.is_cuda else None)
        if (out is None and stream is not None and launch_stream is not None
                and isinstance(v, torch.Tensor)):
            # The output belongs to the stream that writes it.
            out_shape = list(q.shape)
            out_shape[-1] = v.shape[-1]
            out = launch_stream.empty(out_shape, q.dtype)
        args, out = self.attention_args(q, k, v, mask=mask, bias=bias, out=out,
                                        scale_factor=scale_factor)
        if args.batch == 0:
            return out
        with torch.cuda.device(q.device):
            self._set_workspace(
                args, workspace, num_splits, launch_stream,
                (args.batch, args.q_heads, args.kv_heads, args.q_len,
                 args.kv_len, args.v_head_dim or args.head_dim),
            )
            self.launch(args, launch_stream.handle)
        return out

    def attention_lse(self, q: Any, k: Any, v: Any, mask: Any = None,
                      bias: Any = None, scale_factor: Any = None) -> Any:
        """Runs a site that keeps its log-sum-exp (``site.lse``, a forward
        compiled for training) on the current stream: returns ``(out,
        lse)``, lse f32 ``[batch, q_heads, q_len]`` (-inf for a row that sees
        no key). Arguments as attention()."""
        import torch

        if not self.lse or self.key_pass:
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"site \"{self.name}\" does not write a log-sum-exp (compile "
                f"its forward with the lse result)")
        args, out = self.attention_args(q, k, v, mask=mask, bias=bias,
                                        scale_factor=scale_factor)
        lse = torch.empty((args.batch, args.q_heads, args.q_len),
                          dtype=torch.float32, device=q.device)
        args.lse = lse.data_ptr()
        if args.batch == 0:
            return out, lse
        with torch.cuda.device(q.device):
            self.launch(args, _Stream(q.device, None).handle)
        return out, lse

    def attention_grad(self, grad_out: Any, q: Any, k: Any, v: Any, out: Any,
                       lse: Any, mask: Any = None, bias: Any = None,
                       scale_factor: Any = None) -> Any:
        """Runs a backward site (``site.key_pass`` set) on the current
        stream: the gradients ``(dq, dk, dv)`` of a loss whose gradient with
        respect to the forward's `out` is `grad_out`, from the forward's
        operands, `out` and `lse` (attention_lse()). dK and dV of a KV head
        sum its query heads'. Nothing is synchronised."""
        import torch

        from .capi import AttentionGradArgs

        if not self.key_pass:
            raise KilnError(Status.INVALID_ARGUMENT,
                            f"site \"{self.name}\" is not a backward site")
        for name, tensor, like in (("grad_out", grad_out, out),
                                   ("lse", lse, None)):
            if not isinstance(tensor, torch.Tensor):
                raise KilnError(Status.INVALID_ARGUMENT,
                                f"{name} must be a torch.Tensor")
            if like is not None and (tensor.shape != like.shape
                                     or tensor.dtype != like.dtype):
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"{name} has shape {tuple(tensor.shape)} and dtype "
                    f"{tensor.dtype}; out has {tuple(like.shape)} and "
                    f"{like.dtype}")
        if lse.dtype != torch.float32 or not lse.is_contiguous():
            raise KilnError(Status.INVALID_ARGUMENT,
                            "lse must be a contiguous float32 tensor "
                            "[batch, q_heads, q_len]")
        forward, out = self.attention_args(q, k, v, mask=mask, bias=bias,
                                           out=out, scale_factor=scale_factor)
        if tuple(lse.shape) != (forward.batch, forward.q_heads, forward.q_len):
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"lse has shape {tuple(lse.shape)}; expected "
                f"{(forward.batch, forward.q_heads, forward.q_len)}")
        forward.lse = lse.data_ptr()
        dtypes = _torch_dtype_map()
        grads = {"grad_out": grad_out, "grad_q": torch.empty_like(q),
                 "grad_k": torch.empty_like(k), "grad_v": torch.empty_like(v)}
        args = AttentionGradArgs()
        args.forward = forward
        for name, tensor in grads.items():
            setattr(args, name, tensor.data_ptr())
            setattr(args, name + "_dtype", int(dtypes[tensor.dtype]))
            getattr(args, name + "_strides")[:] = list(
                qkv_strides(tensor.stride(), self.layout))
        if forward.batch == 0:
            return grads["grad_q"], grads["grad_k"], grads["grad_v"]
        workspace = torch.empty(
            max(self.grad_workspace_bytes(forward.batch, forward.q_heads,
                                          forward.q_len), 1),
            dtype=torch.uint8, device=q.device)
        args.workspace = workspace.data_ptr()
        args.workspace_bytes = workspace.numel()
        with torch.cuda.device(q.device):
            self.launch_grad(args, _Stream(q.device, None).handle)
        return grads["grad_q"], grads["grad_k"], grads["grad_v"]

    def attention_args(
        self,
        q: Any,
        k: Any,
        v: Any,
        mask: Any = None,
        bias: Any = None,
        out: Any = None,
        scale_factor: Any = None,
    ) -> Tuple[AttentionArgs, Any]:
        """The raw launch arguments of attention() and its `out` tensor, for
        launching repeatedly with launch() (the caller keeps the tensors
        alive). Checks the tensors, not yet the site (launch() does)."""
        import torch

        dtypes = _torch_dtype_map()
        tensors = {"q": q, "k": k, "v": v}
        for name, tensor in tensors.items():
            if not isinstance(tensor, torch.Tensor):
                raise KilnError(
                    Status.INVALID_ARGUMENT, f"{name} must be a torch.Tensor"
                )
        device = q.device
        if device.type != "cuda":
            raise KilnError(
                Status.INVALID_ARGUMENT, f"q must be a CUDA tensor, got {device}"
            )
        if out is None:
            out_shape = list(q.shape)
            out_shape[-1] = v.shape[-1]
            out = torch.empty(out_shape, dtype=q.dtype, device=device)
        tensors["out"] = out
        if mask is not None:
            tensors["mask"] = mask
        if bias is not None:
            tensors["bias"] = bias
        for name, tensor in tensors.items():
            if not isinstance(tensor, torch.Tensor):
                raise KilnError(
                    Status.INVALID_ARGUMENT, f"{name} must be a torch.Tensor"
                )
            if tensor.device != device:
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"{name} is on {tensor.device} but q is on {device}",
                )
            if tensor.dtype not in dtypes:
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"{name} has unsupported dtype {tensor.dtype}",
                )

        batch, q_heads, q_len, head_dim = qkv_dims(q.shape, self.layout)
        kb, kv_heads, kv_len, kd = qkv_dims(k.shape, self.layout)
        vb, v_heads, v_len, v_head_dim = qkv_dims(v.shape, self.layout)
        if (vb, v_heads, v_len) != (kb, kv_heads, kv_len):
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"v has shape {tuple(v.shape)} but k has {tuple(k.shape)} "
                f"(only the head dim may differ)",
            )
        if kb != batch or kd != head_dim:
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"k of shape {tuple(k.shape)} does not match q of shape "
                f"{tuple(q.shape)} in batch or head_dim ({self.layout} layout)",
            )
        expected_out = list(q.shape)
        expected_out[-1] = v.shape[-1]
        if list(out.shape) != expected_out:
            raise KilnError(
                Status.INVALID_ARGUMENT,
                f"out has shape {tuple(out.shape)}; expected "
                f"{tuple(expected_out)} (q's with v's head dim)",
            )

        args = self.new_args()
        args.batch, args.q_heads, args.kv_heads = batch, q_heads, kv_heads
        args.q_len, args.kv_len, args.head_dim = q_len, kv_len, head_dim
        args.v_head_dim = v_head_dim
        for name in ("q", "k", "v", "out"):
            tensor = tensors[name]
            setattr(args, name, tensor.data_ptr())
            setattr(args, name + "_dtype", int(dtypes[tensor.dtype]))
            getattr(args, name + "_strides")[:] = list(
                qkv_strides(tensor.stride(), self.layout)
            )
        target = (batch, q_heads, q_len, kv_len)
        for name in ("mask", "bias"):
            tensor = tensors.get(name)
            if tensor is None:
                continue
            setattr(args, name, tensor.data_ptr())
            setattr(args, name + "_dtype", int(dtypes[tensor.dtype]))
            getattr(args, name + "_strides")[:] = list(
                broadcast_strides(tensor.shape, tensor.stride(), target, name)
            )
        if scale_factor is not None:
            if not isinstance(scale_factor, torch.Tensor):
                raise KilnError(Status.INVALID_ARGUMENT,
                                "scale_factor must be a torch.Tensor")
            check_scale_factor(scale_factor,
                               per_head=self.scale_factor_per_head,
                               q_heads=q_heads, device=device,
                               float32=torch.float32)
            args.scale_factor = scale_factor.data_ptr()

        return args, out


def check_scale_factor(factor: Any, *, per_head: bool, q_heads: int,
                       device: Any, float32: Any) -> None:
    """Raises unless the tensor `factor` is what a site's run-time scale
    takes: float32 on `device`, one element, or where the site's factor is
    per head (the manifest's "per_head") `q_heads` contiguous elements, the
    kernel reading the one of each query head. `float32` is torch's."""
    count = q_heads if per_head else 1
    if (factor.dtype == float32 and factor.device == device
            and factor.numel() == count
            and (not per_head or factor.is_contiguous())):
        return
    if per_head:
        expected = (f"a contiguous float32 tensor of {q_heads} elements on "
                    f"{device} (one a query head, shape [{q_heads}])")
    else:
        expected = f"a one-element float32 tensor on {device}"
    raise KilnError(
        Status.INVALID_ARGUMENT,
        f"scale_factor must be {expected}, got {factor.dtype} of shape "
        f"{list(factor.shape)} on {factor.device}"
        + ("" if factor.is_contiguous() else " (not contiguous)"),
    )


def _torch_device(device: Any) -> Any:
    import torch

    return torch.cuda.device(device)


class _Stream:
    """The stream a launch goes on: its device, its CUstream handle, and (on
    demand) the torch stream object, for allocating on it."""

    __slots__ = ("device", "handle", "_stream", "_current")

    def __init__(self, device: Any, stream: Any) -> None:
        import torch

        self.device = device
        # Whether the launch goes on the device's current stream.
        self._current = stream is None
        if stream is None:
            self._stream = torch.cuda.current_stream(device)
            self.handle = int(self._stream.cuda_stream)
        elif isinstance(stream, int):
            self._stream = None
            self.handle = stream
        else:
            self._stream = stream
            self.handle = int(stream.cuda_stream)

    @property
    def torch(self) -> Any:
        import torch

        if self._stream is None:
            self._stream = (
                torch.cuda.default_stream(self.device)
                if self.handle == 0
                else torch.cuda.ExternalStream(self.handle, device=self.device)
            )
        return self._stream

    def empty(self, shape: Any, dtype: Any) -> Any:
        """A new tensor from the caching allocator's pool of this stream (or
        of the graph this stream is capturing): its memory is reused only by
        work ordered after the launch on this stream."""
        import torch

        if self._current:
            return torch.empty(shape, dtype=dtype, device=self.device)
        with torch.cuda.stream(self.torch):
            return torch.empty(shape, dtype=dtype, device=self.device)

    def capturing(self) -> bool:
        """Whether this stream is being captured into a CUDA graph."""
        import torch

        if self._current:
            return torch.cuda.is_current_stream_capturing()
        with torch.cuda.stream(self.torch):
            return torch.cuda.is_current_stream_capturing()


#: A launch's `workspace` argument asking for one of its own, taken from the
#: caching allocator on the launch's stream and freed when the call returns
#: (the stream's next allocations reuse it in stream order). PyTorch's custom
#: ops pass it: under Inductor's CUDA-graph trees a workspace the package
#: kept would outlive the warm-up run in the graphs' memory pool, where every
#: live tensor must be an output.
TRANSIENT_WORKSPACE = object()

# Streams whose split-KV workspace a package keeps (the oldest goes first).
_STREAM_WORKSPACES = 64


class Package(PackageHandle):
    """An open Kiln package (a directory with manifest.json and PTX files)."""

    site_type = Site

    def _workspace(self, stream: _Stream, nbytes: int, keep: bool = True) -> Any:
        """A split-KV workspace of at least `nbytes` for a launch on `stream`
        (None when no bytes are needed). Launches that may overlap never
        share one: each stream has its own, which only launches ordered on
        that stream reuse; one that grows is freed into that stream's pool of
        the caching allocator, so no other stream gets its memory while a
        launch may still read it. Under CUDA-graph capture each launch takes
        a new one from the graph's pool, which the graph keeps for its
        replays. Without `keep` (TRANSIENT_WORKSPACE: PyTorch's custom ops)
        each launch takes a new one that is freed when the call returns."""
        import torch

        if nbytes <= 0:
            return None
        if not keep or stream.capturing():
            return stream.empty(nbytes, torch.uint8)
        key = (stream.device, stream.handle)
        cache = self.__dict__.setdefault("_workspaces", {})
        current = cache.get(key)
        if current is not None and current.numel() >= nbytes:
            return current
        # 16-byte aligned: the caching allocator aligns to 512 bytes.
        workspace = stream.empty(nbytes, torch.uint8)
        cache.pop(key, None)
        while len(cache) >= _STREAM_WORKSPACES:
            # The oldest stream's: freed into its stream's pool.
            cache.pop(next(iter(cache)), None)
        cache[key] = workspace
        return workspace
