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
f32 tensor, or one of q_heads elements for a site whose factor is per head:
the run-time scale of a site whose ``kiln.attention`` takes one, read by
the kernel; checked by the site's first launch of each signature); ``kiln::paged_attention`` ends with optional tensors, each None by default
(schemas written before them still bind): `k_scale` and `v_scale`, the
dequantisation scales of an FP8 site's float8_e4m3fn caches, and
`q_offsets` and `plan`, a ragged site's packing (its q and out are
``[total_q, Hq, D]``; see ``Site.paged_attention``).

The ops allocate their output (as ``Site.attention`` does, contiguous) and
never synchronise. A split-KV launch without a ``workspace`` (a uint8 CUDA
tensor of ``site.workspace_size(...)`` bytes) takes one of its own from the
caching allocator, freed when the op returns, so that nothing the op
allocated outlives it (CUDA graphs, and Inductor's CUDA-graph trees, capture
it like any temporary). A call checks its tensors fully the first time
their sizes, strides and dtypes are seen and then only sets pointers (see
_Launcher). On CUDA that later launch runs no Python at all: libkilnrt's C
kernel of ``kiln::attention`` (kiln-c/Torch.h) launches every call whose
signature the checked launch (``kiln::attention_checked``, Python) has
planned; ``KILN_TORCH_LAUNCH=python`` keeps the Python kernel. Needs torch
2.4 or later (``torch.library.register_fake``).
"""

import ctypes
import threading
import warnings
from pathlib import Path
from typing import Any, List, Tuple

from .capi import _check, load_library
from .runtime import TRANSIENT_WORKSPACE, KilnError, Package, Site, Status

__all__ = ["attention", "attention_trainable", "bind", "define", "handle",
           "launch_counts", "reserve", "paged_attention", "register",
           "register_training"]

_lock = threading.Lock()
_sites: List[Site] = []
_defined = False


def _own(workspace: Any) -> Any:
    """The ops' workspace: the caller's, else one of the call's own (see
    runtime.TRANSIENT_WORKSPACE), never one the package keeps."""
    return TRANSIENT_WORKSPACE if workspace is None else workspace


#: The operators' schemas (defined with torch.library.Library: a call costs
#: the dispatcher's hop and no more, where torch.library.custom_op adds its
#: safety wrappers to every call).
_SCHEMAS = {
    "attention": "attention(Tensor q, Tensor k, Tensor v, Tensor? mask, "
                 "Tensor? bias, Tensor? workspace, int site, int num_splits, "
                 "Tensor? scale_factor=None) -> Tensor",
    # kiln::attention's launch through every check (see _register_c_kernel).
    "attention_checked": "attention_checked(Tensor q, Tensor k, Tensor v, "
                         "Tensor? mask, Tensor? bias, Tensor? workspace, "
                         "int site, int num_splits, Tensor? scale_factor=None) "
                         "-> Tensor",
    "attention_lse": "attention_lse(Tensor q, Tensor k, Tensor v, "
                     "Tensor? mask, Tensor? bias, int site, "
                     "Tensor? scale_factor=None) -> (Tensor, Tensor)",
    "attention_backward": "attention_backward(Tensor grad_out, Tensor q, "
                          "Tensor k, Tensor v, Tensor? mask, Tensor? bias, "
                          "Tensor out, Tensor lse, int site, "
                          "Tensor? scale_factor=None) -> (Tensor, Tensor, "
                          "Tensor)",
    "paged_attention": "paged_attention(Tensor q, Tensor key_cache, "
                       "Tensor value_cache, Tensor page_table, Tensor kv_lens, "
                       "Tensor? workspace, int site, int num_splits, "
                       "int total_kv_len=0, Tensor? k_scale=None, "
                       "Tensor? v_scale=None, Tensor? q_offsets=None, "
                       "Tensor? plan=None) -> Tensor",
}
_library: Any = None


def _define() -> None:
    """Defines the two operators once per process."""
    global _defined, _library
    if _defined:  # without the lock: torch.compile traces through handle()
        return
    with _lock:
        if _defined:
            return
        import torch

        if not hasattr(torch.library, "register_fake"):
            raise KilnError(
                Status.UNSUPPORTED,
                f"Kiln's custom ops need torch 2.4 or later (torch.library."
                f"register_fake); this is torch {torch.__version__}",
            )
        library = torch.library.Library("kiln", "FRAGMENT")
        for schema in _SCHEMAS.values():
            library.define(schema)

        def attention_op(q, k, v, mask, bias, workspace, site, num_splits,
                         scale_factor=None):
            return _launcher(site).attention(q, k, v, mask, bias, workspace,
                                             num_splits, scale_factor)

        def attention_checked_op(q, k, v, mask, bias, workspace, site,
                                 num_splits, scale_factor=None):
            # What the C kernel hands over: launched with every check, the
            # plan filed for the call's signature, an error's text kept for
            # the C kernel to raise (the dispatcher's C shim drops it).
            try:
                launcher = _launcher(site)
                if _c_kernel is None:
                    return launcher.attention(q, k, v, mask, bias, workspace,
                                              num_splits, scale_factor)
                _check(_c_kernel.kiln_torch_bind_site(site, launcher.site._handle))
                return launcher.attention(q, k, v, mask, bias, workspace,
                                          num_splits, scale_factor, file_as=site)
            except Exception as error:
                if _c_kernel is not None:
                    _c_kernel.kiln_torch_set_error(
                        f"{type(error).__name__}: {error}".encode("utf-8", "replace"))
                raise

        def paged_attention_op(q, key_cache, value_cache, page_table, kv_lens,
                               workspace, site, num_splits, total_kv_len=0,
                               k_scale=None, v_scale=None, q_offsets=None,
                               plan=None):
            return _site(site).paged_attention(
                q, key_cache, value_cache, page_table, kv_lens,
                workspace=_own(workspace), num_splits=num_splits,
                total_kv_len=total_kv_len, q_offsets=q_offsets, plan=plan,
                k_scale=k_scale, v_scale=v_scale,
            )

        def attention_lse_op(q, k, v, mask, bias, site, scale_factor=None):
            return _site(site).attention_lse(q, k, v, mask=mask, bias=bias,
                                             scale_factor=scale_factor)

        def attention_backward_op(grad_out, q, k, v, mask, bias, out, lse,
                                  site, scale_factor=None):
            return _site(_backward_of(site)).attention_grad(
                grad_out.contiguous(), q, k, v, out, lse, mask=mask,
                bias=bias, scale_factor=scale_factor)

        # CPU too: a CPU tensor reaches the site's own check, which names
        # it, rather than the dispatcher's "no kernel" error.
        global _c_kernel
        _c_kernel = _register_c_kernel(torch)
        for device in ("CUDA", "CPU"):
            if device == "CPU" or _c_kernel is None:
                library.impl("attention", attention_op, device)
            library.impl("attention_checked", attention_checked_op, device)
            library.impl("attention_lse", attention_lse_op, device)
            library.impl("attention_backward", attention_backward_op, device)
            library.impl("paged_attention", paged_attention_op, device)

        def attention_fake(q, k, v, mask, bias, workspace, site, num_splits,
                           scale_factor=None):
            shape = list(q.shape)
            shape[-1] = v.shape[-1]
            return q.new_empty(shape)

        def paged_attention_fake(q, key_cache, value_cache, page_table, kv_lens,
                                 workspace, site, num_splits, total_kv_len=0,
                                 k_scale=None, v_scale=None, q_offsets=None,
                                 plan=None):
            if q.dim() == 3:  # a ragged site's packed rows [total_q, Hq, D]
                return q.new_empty((q.shape[0], q.shape[1], value_cache.shape[3]))
            return q.new_empty(
                (q.shape[0], q.shape[1], q.shape[2], value_cache.shape[3])
            )

        def attention_lse_fake(q, k, v, mask, bias, site, scale_factor=None):
            out = attention_fake(q, k, v, mask, bias, None, site, 0)
            batch, heads, length = _rows(q, site)
            return out, q.new_empty((batch, heads, length),
                                    dtype=torch.float32)

        def attention_backward_fake(grad_out, q, k, v, mask, bias, out, lse,
                                    site, scale_factor=None):
            return (torch.empty_like(q), torch.empty_like(k),
                    torch.empty_like(v))

        def setup_context(ctx, inputs, output):
            q, k, v, mask, bias, site, scale_factor = inputs
            out, lse = output
            ctx.save_for_backward(q, k, v, mask, bias, scale_factor, out, lse)
            ctx.site = site

        def backward(ctx, grad_out, grad_lse):
            q, k, v, mask, bias, scale_factor, out, lse = ctx.saved_tensors
            dq, dk, dv = torch.ops.kiln.attention_backward(
                grad_out, q, k, v, mask, bias, out, lse, ctx.site,
                scale_factor)
            dfactor = None
            if scale_factor is not None and ctx.needs_input_grad[6]:
                dfactor = scale_factor_grad(dq, q, scale_factor,
                                            _site(ctx.site).layout)
            return dq, dk, dv, None, None, None, dfactor

        torch.library.register_fake("kiln::attention_lse", attention_lse_fake,
                                    lib=library)
        torch.library.register_fake("kiln::attention_backward",
                                    attention_backward_fake, lib=library)
        torch.library.register_autograd("kiln::attention_lse", backward,
                                        setup_context=setup_context,
                                        lib=library)
        torch.library.register_fake("kiln::attention", attention_fake, lib=library)
        torch.library.register_fake("kiln::attention_checked", attention_fake,
                                    lib=library)
        torch.library.register_fake("kiln::paged_attention", paged_attention_fake,
                                    lib=library)
        _library = library  # the definitions last as long as it does
        _defined = True


class _Launcher:
    """A site's launches from ``kiln::attention``. The first call of each
    signature (every tensor's sizes, strides and dtype, the device, the
    split count) goes through ``Site.attention_args``' checks and keeps the
    argument struct it built and the workspace size; a later call of that
    signature only allocates its output (and workspace), sets the data
    pointers and calls the C launch, which checks what a signature cannot
    fix (alignment of the pointers) on every call. Each thread keeps its own
    structs, so concurrent launches never share one."""

    __slots__ = ("site", "_local")

    def __init__(self, site: Site) -> None:
        self.site = site
        self._local = threading.local()

    def attention(self, q: Any, k: Any, v: Any, mask: Any, bias: Any,
                  workspace: Any, num_splits: int, scale_factor: Any,
                  file_as: int = -1) -> Any:
        """The launch; with `file_as` (the op's site handle), its plan is
        also filed with libkilnrt's C kernel (kiln_torch_add_plan), which
        launches later calls of the signature without Python."""
        import torch

        if workspace is not None or not q.is_cuda:
            # The caller's own workspace, or a tensor the site refuses: the
            # full path (and its error).
            return self.site.attention(q, k, v, mask=mask, bias=bias,
                                       workspace=workspace, num_splits=num_splits,
                                       scale_factor=scale_factor)
        key = (q.shape, q.stride(), q.dtype, k.shape, k.stride(), k.dtype,
               v.shape, v.stride(), v.dtype, q.device, num_splits,
               None if mask is None else (mask.shape, mask.stride(), mask.dtype),
               None if bias is None else (bias.shape, bias.stride(), bias.dtype),
               None if scale_factor is None else (
                   scale_factor.shape, scale_factor.dtype, scale_factor.device))
        plans = self._local.__dict__.setdefault("plans", {})
        plan = plans.get(key)
        if plan is None:
            out, plans[key] = self._first(q, k, v, mask, bias, num_splits,
                                          scale_factor)
            if file_as >= 0:
                _file_plan(file_as, plans[key])
            return out
        if file_as >= 0:
            _file_plan(file_as, plan)
        args, out_shape, workspace_bytes = plan
        out = torch.empty(out_shape, dtype=q.dtype, device=q.device)
        if args.batch == 0:
            return out
        args.q, args.k, args.v = q.data_ptr(), k.data_ptr(), v.data_ptr()
        args.out = out.data_ptr()
        if mask is not None:
            args.mask = mask.data_ptr()
        if bias is not None:
            args.bias = bias.data_ptr()
        if scale_factor is not None:
            args.scale_factor = scale_factor.data_ptr()
        if workspace_bytes:
            # The call's own, freed when it returns (TRANSIENT_WORKSPACE).
            workspace = torch.empty(workspace_bytes, dtype=torch.uint8,
                                    device=q.device)
            args.workspace = workspace.data_ptr()
        index = q.device.index
        if torch.cuda.current_device() == index:
            self.site.launch(args, _raw_stream(index))
        else:
            with torch.cuda.device(index):
                self.site.launch(args, _raw_stream(index))
        return out

    def _first(self, q: Any, k: Any, v: Any, mask: Any, bias: Any,
               num_splits: int, scale_factor: Any) -> Any:
        """The first launch of a signature through the site's full checks;
        returns its output and what later launches reuse."""
        import torch

        from .runtime import _Stream

        site = self.site
        args, out = site.attention_args(q, k, v, mask=mask, bias=bias,
                                        scale_factor=scale_factor)
        plan = (args, tuple(out.shape), 0)
        if args.batch == 0:
            return out, plan
        stream = _Stream(q.device, None)
        with torch.cuda.device(q.device):
            site._set_workspace(
                args, TRANSIENT_WORKSPACE, num_splits, stream,
                (args.batch, args.q_heads, args.kv_heads, args.q_len,
                 args.kv_len, args.v_head_dim or args.head_dim))
            site.launch(args, stream.handle)
        return out, (args, tuple(out.shape), int(args.workspace_bytes))


#: libkilnrt when its C kernel serves kiln::attention on CUDA, else None.
_c_kernel: Any = None


def _register_c_kernel(torch: Any) -> Any:
    """Registers libkilnrt's C kernel of kiln::attention for CUDA
    (kiln-c/Torch.h: planned calls launch without Python, others go to
    kiln::attention_checked), unless KILN_TORCH_LAUNCH=python; returns the
    library, or None where the kernel cannot be registered (the Python
    kernel then serves CUDA too)."""
    import os

    if os.environ.get("KILN_TORCH_LAUNCH", "c") == "python":
        return None
    try:
        lib = load_library()
    except (KilnError, OSError):
        return None
    directory = Path(torch.__file__).resolve().parent / "lib"
    status = lib.kiln_torch_register_attention(
        str(directory / "libtorch_cpu.so").encode(),
        str(directory / "libtorch_cuda.so").encode(),
        b"kiln::attention_checked")
    if status != Status.OK:
        warnings.warn("kiln: torch.ops.kiln.attention launches through Python: "
                      + lib.kiln_last_error().decode("utf-8", "replace"))
        return None
    return lib


def _file_plan(index: int, plan: Any) -> None:
    """Files a launch's plan with the C kernel, under the signature of the
    call it handed to kiln::attention_checked (a no-op for other calls)."""
    args, out_shape, workspace_bytes = plan
    sizes = (ctypes.c_int64 * len(out_shape))(*out_shape)
    _check(_c_kernel.kiln_torch_add_plan(index, ctypes.byref(args), len(out_shape),
                                         sizes, workspace_bytes))


def launch_counts() -> Tuple[int, int]:
    """(calls the C kernel launched from a plan, calls it handed to the
    checked Python launch) in this process; (0, 0) without the C kernel."""
    if _c_kernel is None:
        return 0, 0
    planned, checked = ctypes.c_int64(), ctypes.c_int64()
    _c_kernel.kiln_torch_counts(ctypes.byref(planned), ctypes.byref(checked))
    return planned.value, checked.value


def scale_factor_grad(dq: Any, q: Any, factor: Any, layout: str) -> Any:
    """The gradient of a site's run-time scale factor (a learned
    temperature; one value, or one a query head) from dQ. The factor
    multiplies each score product, s = scale · f · q·k, before the softcap,
    bias and masks, so dQ = Σ_j dX_j · scale · f · K_j (dX the gradient at
    the product) and Σ ⟨dQ, Q⟩ over a head's rows is f times the factor's
    gradient: dL/df = Σ ⟨dQ, Q⟩ / f, reduced over every head for one value,
    over each head's rows for one a head. Undefined where f is 0 (inf or
    NaN there, never a silent value)."""
    products = dq.float() * q.float()
    if factor.numel() == 1:
        total = products.sum()
        return (total / factor.float().reshape(())).reshape(factor.shape).to(factor.dtype)
    head_axis = 2 if layout == "bshd" else 1
    per_head = products.sum(dim=[d for d in range(products.dim()) if d != head_axis])
    return (per_head / factor.float().reshape(-1)).reshape(factor.shape).to(factor.dtype)


def _rows(q: Any, site: int) -> Any:
    """(batch, q_heads, q_len) of `q` in site `site`'s layout."""
    layout = _site(site).layout
    if layout == "bshd":
        return q.shape[0], q.shape[2], q.shape[1]
    return q.shape[0], q.shape[1], q.shape[2]


def _raw_stream(index: int) -> int:
    """The CUstream of the current stream of device `index`."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(index)
    return int(torch.cuda.current_stream(index).cuda_stream)


def _launcher(index: int) -> _Launcher:
    site = _site(index)
    launcher = getattr(site, "_torch_launcher", None)
    if launcher is None:
        launcher = site._torch_launcher = _Launcher(site)  # type: ignore[attr-defined]
    return launcher


def _site(index: int) -> Site:
    if not 0 <= index < len(_sites):
        raise KilnError(
            Status.INVALID_ARGUMENT,
            f"no Kiln site has handle {index} (register the package first)",
        )
    site = _sites[index]
    if site is None:  # reserved: its package is waited for on first use
        with _lock:
            resolve = _pending.get(index)
        if resolve is not None:
            bind(index, resolve())
        site = _sites[index]
        if site is None:
            raise KilnError(Status.INVALID_ARGUMENT,
                            f"Kiln site handle {index} was reserved and never bound")
    return site


#: Reserved handles -> what gives their site (see reserve()).
_pending: dict = {}


def reserve(resolve: Any) -> int:
    """A handle for a site whose package is still being compiled:
    `resolve()` gives the site, called when the op first runs with the
    handle (not while a graph holding it is traced or compiled, which
    needs no site), or bind() gives it before. A graph can so be written
    and compiled while its sites' packages compile."""
    _define()
    with _lock:
        _sites.append(None)
        index = len(_sites) - 1
        _pending[index] = resolve
    return index


def bind(index: int, site: Site) -> None:
    """Gives reserved handle `index` its site."""
    with _lock:
        _pending.pop(index, None)
        _sites[index] = site
        if getattr(site, "_torch_handle", None) is None:
            site._torch_handle = index  # type: ignore[attr-defined]


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


#: The backward site of each training forward's handle.
_backward_sites: dict = {}


def _backward_of(index: int) -> int:
    backward = _backward_sites.get(index)
    if backward is None:
        raise KilnError(
            Status.INVALID_ARGUMENT,
            f"Kiln site handle {index} has no backward site (register it "
            f"with register_training)")
    return backward


def register_training(forward: Site, backward: Site) -> int:
    """Pairs a forward that keeps its log-sum-exp (``forward.lse``) with its
    backward site (``backward.key_pass``): ``torch.ops.kiln.attention_lse``
    on the forward's handle (returned) then differentiates through the
    backward's kernels."""
    if not forward.lse or forward.key_pass or not backward.key_pass:
        raise KilnError(
            Status.INVALID_ARGUMENT,
            f"sites \"{forward.name}\" and \"{backward.name}\" are not a "
            f"forward that keeps its log-sum-exp and a backward site")
    index = handle(forward)
    _backward_sites[index] = handle(backward)
    return index


def define() -> None:
    """Defines torch.ops.kiln.attention and paged_attention (once; handle()
    does it too): before a graph that calls them is built."""
    _define()


def register(package: Package) -> None:
    """Gives every site of `package` a handle (do it before torch.compile,
    so that the traced code only reads them)."""
    for site in package.sites:
        handle(site)


def attention(site: Site, q: Any, k: Any, v: Any, mask: Any = None,
              bias: Any = None, workspace: Any = None,
              num_splits: int = 0, scale_factor: Any = None) -> Any:
    """``torch.ops.kiln.attention`` on `site` (see Site.attention);
    `scale_factor`, a one-element f32 CUDA tensor (q_heads contiguous
    elements where the site's factor is per head), is the run-time scale of
    a site that takes one."""
    import torch

    index = handle(site)  # defines the ops on first use
    return torch.ops.kiln.attention(q, k, v, mask, bias, workspace, index,
                                    num_splits, scale_factor)


def attention_trainable(forward: Site, backward: Site, q: Any, k: Any,
                        v: Any, mask: Any = None, bias: Any = None,
                        scale_factor: Any = None) -> Any:
    """Attention that autograd differentiates through Kiln's backward
    kernels: ``torch.ops.kiln.attention_lse`` on the training sites
    (``kiln.site_cache.training_sites_for``); returns the output (the
    log-sum-exp it keeps for the backward stays inside the graph). Works
    under torch.compile (AOTAutograd traces the op and its backward) and
    CUDA graphs. No gradient reaches `mask` or `bias`; `scale_factor`
    receives Σ⟨dQ, Q⟩ / f (scale_factor_grad)."""
    import torch

    index = register_training(forward, backward)
    out, _ = torch.ops.kiln.attention_lse(q, k, v, mask, bias, index,
                                          scale_factor)
    return out


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
