"""Kiln's kernels as PyTorch custom operators.

``kiln::attention`` and ``kiln::paged_attention`` run a package's sites
through the runtime and have fake (meta) implementations, so that
``torch.compile(fullgraph=True)`` traces through them and CUDA graphs capture
them like any op. A site is named by a small integer handle:

    import kiln, kiln.torch_ops as kops
    package = kiln.load("pkg")
    kops.register(package)                      # before torch.compile
    out = kops.attention(package.site("attention_0"), q, k, v)
    out = torch.ops.kiln.attention(q, k, v, None, None, None,
                                   kops.handle(site), 0)

``kiln::attention`` ends with an optional `scale_factor` (a one-element
f32 tensor: the run-time scale of a site whose ``kiln.attention`` takes
one, read by the kernel); ``kiln::paged_attention`` ends with optional tensors, each None by default
(schemas written before them still bind): `k_scale` and `v_scale`, the
dequantisation scales of an FP8 site's float8_e4m3fn caches, and
`q_offsets` and `plan`, a ragged site's packing (its q and out are
``[total_q, Hq, D]``; see ``Site.paged_attention``).

The ops allocate their output (as ``Site.attention`` does, contiguous) and
never synchronise. A split-KV launch without a ``workspace`` (a uint8 CUDA
tensor of ``site.workspace_size(...)`` bytes) takes one of its own from the
caching allocator, freed when the op returns, so that nothing the op
allocated outlives it (CUDA graphs, and Inductor's CUDA-graph trees, capture
it like any temporary). Needs torch 2.4 or later
(``torch.library.custom_op``).
"""

import threading
from typing import Any, List, Optional

from .runtime import TRANSIENT_WORKSPACE, KilnError, Package, Site, Status

__all__ = ["attention", "handle", "paged_attention", "register"]

_lock = threading.Lock()
_sites: List[Site] = []
_defined = False


def _own(workspace: Any) -> Any:
    """The ops' workspace: the caller's, else one of the call's own (see
    runtime.TRANSIENT_WORKSPACE), never one the package keeps."""
    return TRANSIENT_WORKSPACE if workspace is None else workspace


def _define() -> None:
    """Defines the two operators once per process."""
    global _defined
    if _defined:  # without the lock: torch.compile traces through handle()
        return
    with _lock:
        if _defined:
            return
        import torch

        if not hasattr(torch.library, "custom_op"):
            raise KilnError(
                Status.UNSUPPORTED,
                f"Kiln's custom ops need torch 2.4 or later (torch.library."
                f"custom_op); this is torch {torch.__version__}",
            )
        Tensor = torch.Tensor

        @torch.library.custom_op("kiln::attention", mutates_args=())
        def attention_op(
            q: Tensor,
            k: Tensor,
            v: Tensor,
            mask: Optional[Tensor],
            bias: Optional[Tensor],
            workspace: Optional[Tensor],
            site: int,
            num_splits: int,
            scale_factor: Optional[Tensor] = None,
        ) -> Tensor:
            return _site(site).attention(
                q, k, v, mask=mask, bias=bias, workspace=_own(workspace),
                num_splits=num_splits, scale_factor=scale_factor,
            )

        @attention_op.register_fake
        def _(q, k, v, mask, bias, workspace, site, num_splits, scale_factor=None):
            shape = list(q.shape)
            shape[-1] = v.shape[-1]
            return q.new_empty(shape)

        @torch.library.custom_op("kiln::paged_attention", mutates_args=())
        def paged_attention_op(
            q: Tensor,
            key_cache: Tensor,
            value_cache: Tensor,
            page_table: Tensor,
            kv_lens: Tensor,
            workspace: Optional[Tensor],
            site: int,
            num_splits: int,
            total_kv_len: int = 0,
            k_scale: Optional[Tensor] = None,
            v_scale: Optional[Tensor] = None,
            q_offsets: Optional[Tensor] = None,
            plan: Optional[Tensor] = None,
        ) -> Tensor:
            return _site(site).paged_attention(
                q, key_cache, value_cache, page_table, kv_lens,
                workspace=_own(workspace), num_splits=num_splits,
                total_kv_len=total_kv_len, q_offsets=q_offsets, plan=plan,
                k_scale=k_scale, v_scale=v_scale,
            )

        @paged_attention_op.register_fake
        def _(q, key_cache, value_cache, page_table, kv_lens, workspace, site,
              num_splits, total_kv_len=0, k_scale=None, v_scale=None,
              q_offsets=None, plan=None):
            if q.dim() == 3:  # a ragged site's packed rows [total_q, Hq, D]
                return q.new_empty((q.shape[0], q.shape[1], value_cache.shape[3]))
            return q.new_empty(
                (q.shape[0], q.shape[1], q.shape[2], value_cache.shape[3])
            )

        _defined = True


def _site(index: int) -> Site:
    if not 0 <= index < len(_sites):
        raise KilnError(
            Status.INVALID_ARGUMENT,
            f"no Kiln site has handle {index} (register the package first)",
        )
    return _sites[index]


def handle(site: Site) -> int:
    """The integer that names `site` in the ops (registered on first use)."""
    existing = getattr(site, "_torch_handle", None)
    if existing is not None:
        return existing
    _define()
    with _lock:
        site._torch_handle = len(_sites)  # type: ignore[attr-defined]
        _sites.append(site)
    return site._torch_handle  # type: ignore[attr-defined]


def register(package: Package) -> None:
    """Gives every site of `package` a handle (do it before torch.compile,
    so that the traced code only reads them)."""
    for site in package.sites:
        handle(site)


def attention(site: Site, q: Any, k: Any, v: Any, mask: Any = None,
              bias: Any = None, workspace: Any = None,
              num_splits: int = 0, scale_factor: Any = None) -> Any:
    """``torch.ops.kiln.attention`` on `site` (see Site.attention);
    `scale_factor`, a one-element f32 CUDA tensor, is the run-time scale of
    a site that takes one."""
    import torch

    index = handle(site)  # defines the ops on first use
    return torch.ops.kiln.attention(q, k, v, mask, bias, workspace, index,
                                    num_splits, scale_factor)


def paged_attention(site: Site, q: Any, key_cache: Any, value_cache: Any,
                    page_table: Any, kv_lens: Any, workspace: Any = None,
                    num_splits: int = 0, total_kv_len: int = 0,
                    k_scale: Any = None, v_scale: Any = None,
                    q_offsets: Any = None, plan: Any = None) -> Any:
    """``torch.ops.kiln.paged_attention`` on `site` (see
    Site.paged_attention): an FP8 site's float8_e4m3fn caches with their
    f32 dequantisation scales `k_scale` and `v_scale` (``[1]`` or
    ``[Hkv]``), a ragged site's packed q ``[total_q, Hq, D]`` with
    `q_offsets` and `plan` (Site.plan); returns ``[total_q, Hq, Dv]``
    there."""
    import torch

    index = handle(site)  # defines the ops on first use
    return torch.ops.kiln.paged_attention(q, key_cache, value_cache,
                                          page_table, kv_lens, workspace,
                                          index, num_splits, total_kv_len,
                                          k_scale, v_scale, q_offsets, plan)
