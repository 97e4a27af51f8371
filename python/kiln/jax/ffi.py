"""Kiln's attention as a JAX call, through XLA's FFI.

``kiln.jax.attention(q, k, v, ...)`` runs one Kiln site on JAX's stream,
inside ``jax.jit`` and under ``jax.vmap`` (the mapped axis joins the batch)
and XLA's command buffers (CUDA graphs). The site's package is compiled once
per specialisation (``kiln.site.SiteSpec``) into Kiln's site cache, as for
PyTorch. The call goes through a small XLA FFI handler (``kiln_xla.cc``
beside this file) that this module builds on first use against the FFI
headers of the installed JAX (``jax.ffi.include_dir()``) and Kiln's C API,
with the system's C++ compiler (``$CXX``, else ``c++``), into the site cache;
then it registers it as the FFI target ``kiln_attention`` for CUDA.

Gradients: by default (``backward="reference"``) the backward of
``attention`` is the reference attention's (`reference`: scores
materialised in f32), recomputed from the inputs. ``backward="kiln"`` runs
the spec's training package instead (``kiln.site_cache.training_sites_for``):
the forward keeps its log-sum-exp and the backward is Kiln's own kernels
(dQ, dK, dV), through a second handler library (``kiln_xla_train.cc``,
built on the first such call); where the mask, bias or scale factor is
differentiated, that call takes the reference backward, since Kiln's gives
no gradient for them.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any, Dict, Optional

from ..capi import KilnError, Status, cuda_driver, find_library
from ..site import Operand, SiteSpec
from ..site_cache import cache_directory, site_for, training_sites_for

__all__ = ["attention", "attention_site", "call_spec", "reference", "spec_of",
           "training_sites"]

#: The FFI target's name.
TARGET = "kiln_attention"
#: The training handlers' targets (kiln_xla_train.cc).
TARGET_LSE, TARGET_GRAD = "kiln_attention_lse", "kiln_attention_grad"

#: roles bits of the handler (kiln_xla.cc).
_MASK, _BIAS, _SCALE_FACTOR = 1, 2, 4

_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "bool": "i1"}

_lock = threading.Lock()
#: The handler libraries registered in this process.
_registered: set = set()
_prepared: Dict[int, bool] = {}


def _jax() -> Any:
    try:
        import jax
    except ImportError as error:  # pragma: no cover - JAX-less installs
        raise KilnError(Status.UNSUPPORTED, "kiln.jax.attention needs jax") from error
    return jax


def _kiln_include() -> Path:
    """The directory holding kiln-c/Runtime.h: the wheel's, or the source
    tree's."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "include", here.parents[2] / "include"):
        if (candidate / "kiln-c" / "Runtime.h").exists():
            return candidate
    raise KilnError(Status.NOT_FOUND,
                    "kiln.jax: kiln-c/Runtime.h is not installed beside the "
                    "package (reinstall the wheel)")


def _handler_library(name: str = "kiln_xla") -> Path:
    """The FFI handler library `name` (``kiln_xla``: the forward;
    ``kiln_xla_train``: the training handlers) built for this JAX and this
    Kiln (cached)."""
    jax = _jax()
    here = Path(__file__).resolve().parent
    source = here / f"{name}.cc"
    include = _kiln_include()
    runtime = Path(find_library()).resolve()
    jax_include = Path(jax.ffi.include_dir())
    key = hashlib.sha256(b"\0".join([
        source.read_bytes(), (here / "kiln_xla_common.h").read_bytes(),
        (include / "kiln-c" / "Runtime.h").read_bytes(),
        jax.__version__.encode(), str(jax_include).encode(),
        str(runtime).encode()])).hexdigest()[:16]
    library = cache_directory() / "jax-ffi" / f"lib{name}_{key}.so"
    if library.exists():
        return library
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not compiler:
        raise KilnError(Status.UNSUPPORTED,
                        "kiln.jax: building the XLA FFI handler needs a C++17 "
                        "compiler (set CXX or install g++)")
    library.parent.mkdir(parents=True, exist_ok=True)
    partial = library.with_suffix(f".{os.getpid()}.partial")
    command = [compiler, "-std=c++17", "-O2", "-shared", "-fPIC",
               "-I", str(jax_include), "-I", str(include), "-I", str(here),
               str(source), "-o", str(partial), str(runtime),
               f"-Wl,-rpath,{runtime.parent}"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise KilnError(Status.INTERNAL_ERROR,
                        "kiln.jax: building the XLA FFI handler failed:\n"
                        + " ".join(command) + "\n" + result.stderr[-4000:])
    os.replace(partial, library)
    return library


#: Each handler library's FFI targets: target -> the handler's symbol.
_LIBRARIES = {
    "kiln_xla": {TARGET: "KilnAttention"},
    "kiln_xla_train": {TARGET_LSE: "KilnAttentionLse", TARGET_GRAD: "KilnAttentionGrad"},
}


def _register(name: str = "kiln_xla") -> None:
    """Builds (once) and registers handler library `name`'s targets for
    CUDA (the training library after the forward's, so that both bind to
    the same libkilnrt)."""
    if name in _registered:
        return
    if name != "kiln_xla":
        _register()
    with _lock:
        if name in _registered:
            return
        jax = _jax()
        if name == "kiln_xla":
            # libkilnrt first, by the path kiln's ctypes layer uses, so that
            # the handler binds to the same library (and its package
            # handles).
            from ..capi import load_library
            load_library()
        handler = ctypes.CDLL(str(_handler_library(name)))
        for target, symbol in _LIBRARIES[name].items():
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(handler, symbol)),
                                        platform="CUDA")
        _registered.add(name)


def training_sites(spec: SiteSpec) -> Any:
    """The training sites of `spec` (forward keeping its log-sum-exp,
    backward), their handlers registered and their module loaded."""
    _register("kiln_xla_train")
    forward, backward = training_sites_for(spec)
    _prepare(forward)
    return forward, backward


def _prepare(site: Any) -> None:
    """Loads the site's module on every local CUDA device (their primary
    contexts, which XLA runs on) before any launch, so that no module load
    happens while XLA records a command buffer."""
    key = id(site.package)
    if _prepared.get(key):
        return
    jax = _jax()
    cuda = cuda_driver()
    if cuda is None:
        raise KilnError(Status.CUDA_ERROR, "kiln.jax: the CUDA driver cannot be "
                        "loaded or initialised")
    for device in jax.local_devices():
        if device.platform != "gpu":
            continue
        handle, context = ctypes.c_int(), ctypes.c_void_p()
        ordinal = getattr(device, "local_hardware_id", None)
        ordinal = device.id if ordinal is None else ordinal
        if (cuda.cuDeviceGet(ctypes.byref(handle), int(ordinal)) != 0 or
                cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), handle) != 0):
            raise KilnError(Status.CUDA_ERROR,
                            f"kiln.jax: no primary context on device {ordinal}")
        cuda.cuCtxPushCurrent(context)
        try:
            site.package.prepare()
        finally:
            cuda.cuCtxPopCurrent(ctypes.byref(ctypes.c_void_p()))
            cuda.cuDevicePrimaryCtxRelease(handle)
    _prepared[key] = True


def _dtype_name(array: Any) -> str:
    name = str(array.dtype)
    if name not in _DTYPES:
        raise KilnError(Status.UNSUPPORTED,
                        f"kiln.jax.attention: {name} tensors are not supported "
                        f"(bf16, f16, f32; masks bool or float)")
    return _DTYPES[name]


def spec_of(q: Any, k: Any, v: Any, mask: Any = None, bias: Any = None,
            scale_factor: Any = None, *, scale: Optional[float] = None,
            causal: bool = False, window: Optional[int] = None,
            window_right: Optional[int] = None, softcap: Optional[float] = None,
            masked_score: Optional[float] = None, layout: str = "bshd") -> SiteSpec:
    """The site specification of an `attention` call."""
    if layout not in ("bshd", "bhsd"):
        raise KilnError(Status.INVALID_ARGUMENT,
                        f"kiln.jax.attention: layout must be 'bshd' or 'bhsd', "
                        f"not {layout!r}")
    dtype = _dtype_name(q)
    for name, array in (("k", k), ("v", v)):
        if str(array.dtype) != str(q.dtype):
            raise KilnError(Status.INVALID_ARGUMENT,
                            f"kiln.jax.attention: {name} is {array.dtype}, q is {q.dtype}")
    if q.ndim < 3 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise KilnError(Status.INVALID_ARGUMENT,
                        f"kiln.jax.attention: q, k, v need the same rank (at "
                        f"least 3), got {q.shape}, {k.shape}, {v.shape}")
    if k.shape[-1] != q.shape[-1]:
        raise KilnError(Status.INVALID_ARGUMENT,
                        f"kiln.jax.attention: q's head dim is {q.shape[-1]}, "
                        f"k's {k.shape[-1]}")
    if window is not None and not causal and window_right is None:
        raise KilnError(Status.INVALID_ARGUMENT,
                        "kiln.jax.attention: window needs causal or window_right")

    def operand(array: Any, role: str) -> Optional[Operand]:
        if array is None:
            return None
        if not 1 <= array.ndim <= 4:
            raise KilnError(Status.INVALID_ARGUMENT,
                            f"kiln.jax.attention: the {role} must have rank 1 "
                            f"to 4 ([batch, q_heads, q_len, kv_len]), got {array.shape}")
        return Operand(_dtype_name(array), array.ndim)

    if scale_factor is not None and (str(scale_factor.dtype) != "float32"
                                     or scale_factor.size != 1):
        raise KilnError(Status.INVALID_ARGUMENT,
                        "kiln.jax.attention: scale_factor must be one f32")
    return SiteSpec(
        dtype=dtype, head_dim=int(q.shape[-1]), value_dim=int(v.shape[-1]),
        scale=float(scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])),
        causal=bool(causal), layout=layout, mask=operand(mask, "mask"),
        bias=operand(bias, "bias"),
        scale_factor=None if scale_factor is None else Operand("f32", scale_factor.ndim),
        masked_score=None if masked_score is None else float(masked_score),
        softcap=None if softcap is None else float(softcap),
        window=None if window is None else int(window),
        window_right=None if window_right is None else int(window_right))


def attention_site(spec: SiteSpec) -> Any:
    """The compiled site of `spec`, its handler registered and its module
    loaded on the local GPUs."""
    _register()
    site = site_for(spec)
    _prepare(site)
    return site


def _workspace_bytes(site: Any, q: Any, k: Any, layout: str) -> int:
    if not site.split_kv:
        return 0
    batch = int(math.prod(q.shape[:-3]))
    if layout == "bshd":
        q_len, q_heads, kv_len, kv_heads = q.shape[-3], q.shape[-2], k.shape[-3], k.shape[-2]
    else:
        q_heads, q_len, kv_heads, kv_len = q.shape[-3], q.shape[-2], k.shape[-3], k.shape[-2]
    try:
        return site.workspace_size(batch, int(q_len), int(kv_len), int(q_heads),
                                   int(kv_heads))
    except KilnError:
        return 0  # no device to size it for: the launch does not split


def _call(spec: SiteSpec, q: Any, k: Any, v: Any, mask: Any, bias: Any,
          factor: Any) -> Any:
    """One FFI call of the site; mask, bias and factor are arrays (one-element
    placeholders where the spec has none)."""
    import numpy as np

    jax = _jax()
    site = attention_site(spec)
    roles = _roles(spec)
    out = jax.ShapeDtypeStruct(q.shape[:-1] + (v.shape[-1],), q.dtype)
    workspace = jax.ShapeDtypeStruct((_workspace_bytes(site, q, k, spec.layout),),
                                     np.uint8)
    call = jax.ffi.ffi_call(TARGET, (out, workspace))
    result, _ = call(q, k, v, mask, bias, factor,
                     site=np.int64(site._handle.value), roles=np.int64(roles))
    return result


def _roles(spec: SiteSpec) -> int:
    return ((_MASK if spec.mask else 0) | (_BIAS if spec.bias else 0)
            | (_SCALE_FACTOR if spec.scale_factor else 0))


def _lse_shape(spec: SiteSpec, q: Any) -> tuple:
    """The log-sum-exp's shape: q's batch axes, then heads and queries."""
    lead = tuple(q.shape[:-3])
    if spec.layout == "bshd":
        return lead + (q.shape[-2], q.shape[-3])
    return lead + (q.shape[-3], q.shape[-2])


def _call_lse(spec: SiteSpec, q: Any, k: Any, v: Any, mask: Any, bias: Any,
              factor: Any) -> Any:
    """The training forward: (out, lse). Under vmap the mapped axis joins
    the batch (the handler folds every leading axis into it)."""
    import numpy as np

    jax = _jax()
    forward, _ = training_sites(spec)
    out = jax.ShapeDtypeStruct(q.shape[:-1] + (v.shape[-1],), q.dtype)
    lse = jax.ShapeDtypeStruct(_lse_shape(spec, q), np.float32)
    call = jax.ffi.ffi_call(TARGET_LSE, (out, lse), vmap_method="broadcast_all")
    return call(q, k, v, mask, bias, factor, site=np.int64(forward._handle.value),
                roles=np.int64(_roles(spec)))


def _call_grad(spec: SiteSpec, q: Any, k: Any, v: Any, mask: Any, bias: Any,
               factor: Any, out: Any, lse: Any, grad: Any) -> Any:
    """Kiln's backward: (dq, dk, dv). Its workspace (one f32 a row) is a
    result, so that under vmap it grows with the batch as the rows do."""
    import numpy as np

    jax = _jax()
    _, backward = training_sites(spec)
    rows = int(math.prod(_lse_shape(spec, q)))
    workspace = jax.ShapeDtypeStruct((max(backward.grad_workspace_bytes(1, 1, rows), 16),),
                                     np.uint8)
    call = jax.ffi.ffi_call(
        TARGET_GRAD, (jax.ShapeDtypeStruct(q.shape, q.dtype),
                      jax.ShapeDtypeStruct(k.shape, q.dtype),
                      jax.ShapeDtypeStruct(v.shape, q.dtype), workspace),
        vmap_method="broadcast_all")
    dq, dk, dv, _ = call(q, k, v, mask, bias, factor, out, lse, grad.astype(q.dtype),
                         site=np.int64(backward._handle.value),
                         roles=np.int64(_roles(spec)))
    return dq, dk, dv


def _fold(x: Any, batched: bool, size: int) -> Any:
    """A Q/K/V operand of a vmapped call with the mapped axis (front)
    merged into its batch axis; unmapped ones broadcast first."""
    import jax.numpy as jnp

    if not batched:
        x = jnp.broadcast_to(x[None], (size,) + x.shape)
    return x.reshape((size * x.shape[1],) + x.shape[2:])


def _fold_term(x: Any, batched: bool, size: int, batch: int) -> Any:
    """A mask or bias of a vmapped call, right-aligned to rank 4, with the
    mapped axis merged into its batch so that entry v·batch + b is (v, b)."""
    import jax.numpy as jnp

    rank = x.ndim - (1 if batched else 0)
    lead = (1,) * (4 - rank)
    if not batched:
        x = x.reshape(lead + x.shape)
        if x.shape[0] == 1:
            return x  # broadcast over every (v, b)
        return jnp.tile(x, (size, 1, 1, 1))
    x = x.reshape((size,) + lead + x.shape[1:])
    x = jnp.broadcast_to(x, (size, batch) + x.shape[2:])
    return x.reshape((size * batch,) + x.shape[2:])


@functools.lru_cache(maxsize=None)
def _mapped(spec: SiteSpec, backward: str = "reference") -> Any:
    """The call of `spec`, with a vmap rule that merges the mapped axis into
    the batch (one launch) and a VJP: the reference attention's, or with
    `backward` "kiln" Kiln's training kernels where only q, k and v are
    differentiated."""
    jax = _jax()
    if backward == "kiln":
        return _trained(spec, jax)

    @jax.custom_batching.custom_vmap
    def run(q, k, v, mask, bias, factor):
        return _call(spec, q, k, v, mask, bias, factor)

    @run.def_vmap
    def rule(size, in_batched, q, k, v, mask, bias, factor):
        qb, kb, vb, mb, bb, fb = in_batched
        if fb:
            raise KilnError(Status.UNSUPPORTED,
                            "kiln.jax.attention: a scale_factor mapped by vmap")
        q, k, v = _fold(q, qb, size), _fold(k, kb, size), _fold(v, vb, size)
        batch = q.shape[0] // size
        if spec.mask:
            mask = _fold_term(mask, mb, size, batch)
        if spec.bias:
            bias = _fold_term(bias, bb, size, batch)
        out = run(q, k, v, mask, bias, factor)
        return out.reshape((size, batch) + out.shape[1:]), True

    @jax.custom_vjp
    def call(q, k, v, mask, bias, factor):
        return run(q, k, v, mask, bias, factor)

    def forward(q, k, v, mask, bias, factor):
        return run(q, k, v, mask, bias, factor), (q, k, v, mask, bias, factor)

    def backward(saved, grad):
        _, pullback = jax.vjp(
            lambda *args: reference(spec, *args), *saved)
        return pullback(grad)

    call.defvjp(forward, backward)
    return call


def _trained(spec: SiteSpec, jax: Any) -> Any:
    """The call of `spec` differentiated by Kiln's backward kernels: the
    forward keeps its log-sum-exp; a call whose mask, bias or scale factor
    is differentiated takes the reference backward (symbolic zeros say
    which inputs are)."""
    from jax.custom_derivatives import SymbolicZero

    plain = _mapped(spec, "reference")

    @jax.custom_vjp
    def call(q, k, v, mask, bias, factor):
        return plain(q, k, v, mask, bias, factor)

    def forward(q, k, v, mask, bias, factor):
        values = tuple(x.value for x in (q, k, v, mask, bias, factor))
        if any(x.perturbed for x in (mask, bias, factor)):
            return plain(*values), (values, None, None)
        out, lse = _call_lse(spec, *values)
        return out, (values, out, lse)

    def backward(saved, grad):
        values, out, lse = saved
        if isinstance(grad, SymbolicZero):
            return (None,) * 6
        if lse is None:
            _, pullback = jax.vjp(lambda *args: reference(spec, *args), *values)
            return pullback(grad)
        dq, dk, dv = _call_grad(spec, *values, out, lse, grad)
        return dq, dk, dv, None, None, None

    call.defvjp(forward, backward, symbolic_zeros=True)
    return call


def attention(q: Any, k: Any, v: Any, *, mask: Any = None, bias: Any = None,
              scale: Optional[float] = None, scale_factor: Any = None,
              causal: bool = False, window: Optional[int] = None,
              window_right: Optional[int] = None, softcap: Optional[float] = None,
              masked_score: Optional[float] = None, layout: str = "bshd",
              backward: str = "reference") -> Any:
    """Attention by a Kiln kernel, callable inside ``jax.jit``.

    `q` ``[B, Sq, Hq, D]``, `k` ``[B, Sk, Hkv, D]``, `v` ``[B, Sk, Hkv, Dv]``
    in the default ``"bshd"`` layout (``jax.nn.dot_product_attention``'s);
    ``"bhsd"`` swaps the sequence and head axes. Hq a multiple of Hkv
    (GQA/MQA, K and V never copied). Axes before the last three are batch
    axes. `mask` is boolean (True: the key takes part) or additive, `bias`
    additive, both broadcast from ``[B, Hq, Sq, Sk]``; `scale` defaults to
    ``D ** -0.5`` and `scale_factor` (one f32) multiplies it at run time;
    `causal` is aligned bottom-right (``kiln.attention``'s semantics, see
    docs/jax.md), `window`/`window_right` hide keys outside a band, `softcap`
    caps the scores, `masked_score` is the fill of hidden keys. bf16, f16 or
    f32; the result has q's dtype. `backward`: "reference" (the default:
    the reference attention's VJP, scores materialised) or "kiln" (Kiln's
    backward kernels for dQ, dK, dV; the spec's head dims must be
    multiples of 32 up to 128)."""
    spec = spec_of(q, k, v, mask, bias, scale_factor, scale=scale, causal=causal,
                   window=window, window_right=window_right, softcap=softcap,
                   masked_score=masked_score, layout=layout)
    return call_spec(spec, q, k, v, mask, bias, scale_factor, backward=backward)


def call_spec(spec: SiteSpec, q: Any, k: Any, v: Any, mask: Any = None,
              bias: Any = None, scale_factor: Any = None,
              backward: str = "reference") -> Any:
    """`spec`'s site on these operands (kiln.jax.jit's rewrite calls it)."""
    if backward not in ("reference", "kiln"):
        raise KilnError(Status.INVALID_ARGUMENT,
                        f"kiln.jax.attention: backward must be 'reference' or "
                        f"'kiln', not {backward!r}")
    import jax.numpy as jnp

    def given(array: Any, dtype: Any) -> Any:
        # The handler takes six buffers: one element where a role is absent.
        return jnp.zeros((1,), dtype) if array is None else array

    factor = None if scale_factor is None else jnp.reshape(scale_factor, (1,))
    return _mapped(spec, backward)(q, k, v, given(mask, q.dtype), given(bias, q.dtype),
                                   given(factor, jnp.float32))


def reference(spec: SiteSpec, q: Any, k: Any, v: Any, mask: Any = None,
              bias: Any = None, factor: Any = None, *, compute: Any = None) -> Any:
    """`spec`'s attention in plain jnp, scores materialised in `compute`
    (f32 by default; float64 for checks): the semantics of
    ``kiln.attention`` (KilnOps.td), for checks and for the backward.
    Placeholders of absent operands are ignored."""
    import jax.numpy as jnp

    if spec.layout == "bshd":
        q, k, v = (jnp.swapaxes(x, -3, -2) for x in (q, k, v))
    group = q.shape[-3] // k.shape[-3]
    k = jnp.repeat(k, group, axis=-3)
    v = jnp.repeat(v, group, axis=-3)
    f32 = jnp.float32 if compute is None else compute
    s = jnp.einsum("...hqd,...hkd->...hqk", q.astype(f32), k.astype(f32)) * spec.scale
    if spec.scale_factor and factor is not None:
        s = s * factor.reshape(()).astype(f32)
    if spec.softcap is not None:
        s = spec.softcap * jnp.tanh(s / spec.softcap)
    if spec.bias and bias is not None:
        s = s + bias.astype(f32)
    hidden = jnp.zeros(s.shape[-2:], bool)
    sq, sk = s.shape[-2], s.shape[-1]
    i = jnp.arange(sq)[:, None] + (sk - sq)
    j = jnp.arange(sk)[None, :]
    right = 0 if spec.causal else spec.window_right
    if right is not None:
        hidden = hidden | (j > i + right)
    if spec.window is not None:
        hidden = hidden | (j <= i - spec.window)
    if spec.mask and mask is not None:
        if mask.dtype == bool:
            hidden = hidden | ~mask
        else:
            s = s + mask.astype(f32)
    fill = -jnp.inf if spec.masked_score is None else spec.masked_score
    s = jnp.where(hidden, fill, s)
    top = jnp.max(s, axis=-1, keepdims=True)
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    p = jnp.exp(s - top)
    total = jnp.sum(p, axis=-1, keepdims=True)
    p = jnp.where(total > 0, p / jnp.where(total > 0, total, 1.0), 0.0)
    out = jnp.einsum("...hqk,...hkd->...hqd", p, v.astype(f32))
    if spec.layout == "bshd":
        out = jnp.swapaxes(out, -3, -2)
    return out.astype(q.dtype)
