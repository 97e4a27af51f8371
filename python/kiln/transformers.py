"""Kiln as a Hugging Face ``transformers`` attention backend.

    import kiln.transformers
    kiln.transformers.register()
    model = AutoModelForCausalLM.from_config(config, attn_implementation="kiln")

``register()`` adds ``"kiln"`` to ``transformers.AttentionInterface`` (and
SDPA's mask format to ``AttentionMaskInterface``). Each call then runs the
model's attention on a Kiln kernel compiled on first use for its
specialisation (dtype, head dims, causal / boolean mask / none, scale; sizes
and head counts stay dynamic) and cached on disk under ``$KILN_CACHE`` (default
``~/.cache/kiln``) in a directory named by Kiln's version and the
specialisation, so later processes load it without ``kilnc``. Masks arrive as
the model builds them: none with causal attention (Kiln's bottom-right
aligned causal, so decoding one token sees the whole cache), or a boolean
``[B, 1|H, Sq, Sk]`` mask (causal, sliding window and padding already in it).
Soft-capping (Gemma 2) runs on Kiln's `softcap`; a sliding window whose
mask is exactly causal with the window (no padding) on Kiln's `window`.
Calls Kiln cannot serve (a head dim without a kernel, dropout while
training, a dtype other than f16/bf16/f32) run PyTorch SDPA instead,
counted in ``fallbacks``; over a ``PagedKVCache`` (left-padded batches and
sliding windows included, see its docstring) they raise, as SDPA cannot read
its pages.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import warnings
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

try:
    import torch

    _assume_constant_result = torch.compiler.assume_constant_result
except ImportError:  # the site cache works without torch (kilnc only)
    torch = None

    def _assume_constant_result(function):
        return function

from . import __version__
from . import torch_ops as kops
from .compiler import compile as kiln_compile
from .compiler import find_kilnc
from .runtime import KilnError, Package, Site, Status

__all__ = ["PagedKVCache", "attention_forward", "cache_directory", "fallbacks",
           "precompile", "register", "site_for"]

_lock = threading.Lock()
_sites: Dict[Tuple, Site] = {}
_packages: list = []
#: Calls that ran PyTorch SDPA instead, by reason.
fallbacks: Dict[str, int] = {}

_TYPES = {"torch.bfloat16": "bf16", "torch.float16": "f16", "torch.float32": "f32"}


def cache_directory() -> Path:
    return Path(os.environ.get("KILN_CACHE",
                               Path.home() / ".cache" / "kiln")) / __version__


def _source(dtype: str, head_dim: int, value_dim: int, kind: str,
            scale: float, window: Optional[int] = None,
            softcap: Optional[float] = None) -> str:
    q = f"tensor<?x?x?x{head_dim}x{dtype}>"
    v = f"tensor<?x?x?x{value_dim}x{dtype}>"
    mask_arg = ", %m: tensor<?x?x?x?xi1>" if kind == "mask" else ""
    mask_use = " mask(%m : tensor<?x?x?x?xi1>)" if kind == "mask" else ""
    causal = "causal, " if kind == "causal" else ""
    # Without a window or softcap the text (and so the cache digest) is what
    # it was before they existed: packages compiled then stay valid.
    extra = "" if softcap is None else f", softcap = {float(softcap)!r} : f32"
    extra += "" if window is None else f", window = {int(window)} : i64"
    return (f"func.func @attention(%q: {q}, %k: {q}, %v: {v}{mask_arg}) -> {v} {{\n"
            f"  %o = kiln.attention %q, %k, %v{mask_use} {{{causal}scale = "
            f"{scale!r} : f32{extra}}} : {q}, {q}, {v} -> {v}\n"
            f"  return %o : {v}\n}}\n")


def _paged_source(dtype: str, head_dim: int, value_dim: int, page_size: int,
                  scale: float, window: Optional[int] = None,
                  fp8_kv_heads: Optional[int] = None,
                  ragged: bool = False) -> str:
    """Causal paged attention over pages of `page_size` tokens; with
    `fp8_kv_heads`, over e4m3 caches of that many KV heads with f32 scales
    per KV head; `ragged`, on packed queries ``[total_q, Hq, D]`` with
    q_offsets."""
    if ragged:
        q = f"tensor<?x?x{head_dim}x{dtype}>"
        out = f"tensor<?x?x{value_dim}x{dtype}>"
    else:
        q = f"tensor<?x?x?x{head_dim}x{dtype}>"
        out = f"tensor<?x?x?x{value_dim}x{dtype}>"
    element, heads = dtype, "?"
    if fp8_kv_heads is not None:
        # The head count is fixed: the scales' size is the site's.
        element, heads = "f8E4M3FN", str(int(fp8_kv_heads))
    kc = f"tensor<?x{page_size}x{heads}x{head_dim}x{element}>"
    vc = f"tensor<?x{page_size}x{heads}x{value_dim}x{element}>"
    table, lens = "tensor<?x?xi32>", "tensor<?xi32>"
    arguments = [f"%q: {q}", f"%kc: {kc}", f"%vc: {vc}", f"%pt: {table}",
                 f"%lens: {lens}"]
    operands, types = "%q, %kc, %vc, %pt, %lens", [q, kc, vc, table, lens]
    if ragged:
        offsets = "tensor<?xi32>"
        arguments.append(f"%offs: {offsets}")
        operands += " q_offsets %offs"
        types.append(offsets)
    if fp8_kv_heads is not None:
        scales = f"tensor<{int(fp8_kv_heads)}xf32>"
        arguments += [f"%ks: {scales}", f"%vs: {scales}"]
        operands += f" scales(%ks, %vs : {scales}, {scales})"
    # Without a window, FP8 or packing the text (and so the cache digest) is
    # what it was before they existed: packages compiled then stay valid.
    window_attr = f"window = {window} : i64, " if window else ""
    return (f"func.func @attention({', '.join(arguments)}) -> {out} {{\n"
            f"  %o = kiln.paged_attention {operands} {{causal, "
            f"{window_attr}scale = {scale!r} : f32}} : {', '.join(types)} "
            f"-> {out}\n  return %o : {out}\n}}\n")


_PAGED_KIND = re.compile(
    r"paged([0-9]+)(?:_window([0-9]+))?(?:_fp8kv([0-9]+))?(_ragged)?")


def _paged_kind(page_size: int, window: Optional[int] = None,
                fp8_kv_heads: Optional[int] = None,
                ragged: bool = False) -> str:
    """The site kind of causal paged attention over pages of `page_size`
    tokens, each query seeing its `window` most recent keys (itself
    included) when a window is given; over e4m3 (FP8) caches of
    `fp8_kv_heads` KV heads with scales per KV head when that is given;
    on packed queries with q_offsets (`ragged`)."""
    kind = f"paged{page_size}"
    if window is not None:
        if window <= 0:
            raise KilnError(Status.INVALID_ARGUMENT,
                            f"a sliding window must be positive, got {window}")
        kind += f"_window{window}"
    if fp8_kv_heads is not None:
        if fp8_kv_heads <= 0:
            raise KilnError(Status.INVALID_ARGUMENT,
                            f"an FP8 cache needs a positive KV head count, "
                            f"got {fp8_kv_heads}")
        kind += f"_fp8kv{int(fp8_kv_heads)}"
    return kind + ("_ragged" if ragged else "")


def _check_fp8_site(dtype: str, head_dim: int, value_dim: int) -> None:
    """Raises unless Kiln's GPU kernels take e4m3 caches of these head dims
    under queries of `dtype`."""
    if dtype not in ("f16", "bf16"):
        raise KilnError(Status.UNSUPPORTED,
                        f"FP8 (e4m3) KV caches take f16 or bf16 queries, "
                        f"not {dtype}")
    if head_dim % 16 or value_dim % 16:
        raise KilnError(Status.UNSUPPORTED,
                        f"FP8 (e4m3) KV caches need head dims that are "
                        f"multiples of 16 on the GPU, got {head_dim}/"
                        f"{value_dim}")


_STAMP_FILE = "kilnc.stamp"


def _compiler_stamp() -> Optional[str]:
    """Identity of the kilnc this process would compile with (its path,
    size and modification time), or None when there is none: a cached
    package built by another kilnc is rebuilt when one is at hand."""
    try:
        path = os.path.realpath(find_kilnc())
        status = os.stat(path)
    except (KilnError, OSError):
        return None
    return f"{path} {status.st_size} {status.st_mtime_ns}"


def _site_text(dtype: str, head_dim: int, value_dim: int, kind: str,
               scale: float) -> str:
    """The MLIR source of a specialisation's one-site package."""
    paged = _PAGED_KIND.fullmatch(kind)
    if paged:
        window = int(paged[2]) if paged[2] else None
        fp8_kv_heads = int(paged[3]) if paged[3] else None
        if fp8_kv_heads is not None:
            _check_fp8_site(dtype, head_dim, value_dim)
        return _paged_source(dtype, head_dim, value_dim, int(paged[1]), scale,
                             window, fp8_kv_heads, bool(paged[4]))
    dense = _DENSE_KIND.fullmatch(kind)
    if dense:
        window = int(dense[2]) if dense[2] else None
        softcap = float(dense[3]) if dense[3] else None
        return _source(dtype, head_dim, value_dim, dense[1], scale, window, softcap)
    raise KilnError(Status.INVALID_ARGUMENT,
                    f"unknown site kind {kind!r} (causal, mask, none, each "
                    f"with _softcapC; causal_windowW; pagedN, then "
                    f"optionally _windowW, _fp8kvH and _ragged in that "
                    f"order)")


#: Dense kinds: causal, mask or none; a causal one may take a sliding
#: window (Kiln's `window`), any a soft-cap (Kiln's `softcap`).
_DENSE_KIND = re.compile(r"(causal|mask|none)(?:(?<=causal)_window([0-9]+))?"
                         r"(?:_softcap([0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?))?")


def _dense_kind(base: str, window: Optional[int] = None,
                softcap: Optional[float] = None) -> str:
    """The site kind of dense attention: `base` (causal, mask, none) with
    Kiln's sliding `window` (causal only) and `softcap`."""
    kind = base
    if window is not None:
        if base != "causal" or window <= 0:
            raise KilnError(Status.INVALID_ARGUMENT,
                            f"a sliding window needs causal attention and a "
                            f"positive size, got {base} and {window}")
        kind += f"_window{int(window)}"
    if softcap is not None:
        if not softcap > 0:
            raise KilnError(Status.INVALID_ARGUMENT,
                            f"a soft-cap must be positive, got {softcap}")
        kind += f"_softcap{float(softcap)!r}"
    return kind


#: The largest finite e4m3 magnitude.
_FP8_MAX = 448.0
#: The least amax an FP8 scale is set from (amax / 448): a KV head whose
#: first stored keys are all zero still gets a finite positive scale.
_FP8_MIN_AMAX = 1e-3


def _fp8_scales(states):
    """Per KV head dequantisation scales of `states` ``[N, Hkv, D]``: their
    largest magnitude over 448 (e4m3's largest finite value), floored;
    [Hkv] f32."""
    amax = states.abs().amax(dim=(0, 2)).float()
    return (amax.clamp(min=_FP8_MIN_AMAX) / _FP8_MAX).contiguous()


def _to_fp8(states, scales):
    """`states` ``[N, Hkv, D]`` as e4m3 of states / scales (per KV head),
    saturated to ±448 rather than overflowing to NaN."""
    scaled = states.float() / scales[:, None]
    return scaled.clamp(-_FP8_MAX, _FP8_MAX).to(torch.float8_e4m3fn)


def _is_current(directory: Path, stamp: Optional[str]) -> bool:
    """Whether `directory` holds a whole package that this process may use:
    one built by the kilnc at hand (any, when there is none)."""
    stamp_file = directory / _STAMP_FILE
    try:
        return (directory / "manifest.json").exists() and (
            stamp is None or stamp_file.read_text() == stamp)
    except OSError:
        return False


def _compile_into_cache(text: str, directory: Path,
                        stamp: Optional[str]) -> None:
    """Compiles `text` into `directory` so that other processes never see
    half a package: one process at a time compiles a given site (an
    exclusive lock on a file beside it; the others wait, then find it
    built), into a private directory that is renamed into place whole."""
    import fcntl
    import shutil
    import tempfile

    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f"{directory.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if _is_current(directory, stamp):
                return
            scratch = Path(tempfile.mkdtemp(prefix=f".{directory.name}.",
                                            dir=directory.parent))
            try:
                source = scratch / "site.mlir"
                source.write_text(text)
                built = scratch / "package"
                kiln_compile(source, output=built).close()
                if stamp is not None:
                    (built / _STAMP_FILE).write_text(stamp)
                if directory.exists():
                    # A package another kilnc built: moved aside whole (a
                    # process that opened it keeps its files), then removed.
                    stale = scratch / "stale"
                    os.rename(directory, stale)
                os.rename(built, directory)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def site_for(dtype: str, head_dim: int, value_dim: int, kind: str,
             scale: float) -> Site:
    """The site for a specialisation (kind: causal, mask, none; or pagedN
    for causal attention over a paged cache of pages of N tokens, then
    optionally _windowW for Kiln's `window = W`, _fp8kvH for e4m3 caches of
    H KV heads with scales per KV head, and _ragged for packed queries with
    q_offsets; see _paged_kind): from memory,
    from the disk cache, or compiled now (needs kilnc) into the cache. A
    cached package that another kilnc built is compiled again when kilnc is
    found (without one, the cache is used as it is). Safe from several
    threads and several processes sharing one cache directory; a site
    already in memory is found without a lock (so that torch.compile traces
    through this call)."""
    key = (dtype, head_dim, value_dim, kind, float(scale))
    site = _sites.get(key)
    if site is not None:
        return site
    text = _site_text(dtype, head_dim, value_dim, kind, float(scale))
    site = site_from_source(text, f"{dtype}_d{head_dim}_{kind}")
    _sites[key] = site
    return site


#: Sites by their package directory (site_from_source).
_sites_by_digest: Dict[str, Site] = {}


def site_from_source(text: str, label: str) -> Site:
    """The one site of the package compiled from MLIR `text`: from memory,
    from the disk cache (``$KILN_CACHE/<version>/<label>_<digest>``), or
    compiled now into it (needs kilnc; see site_for for rebuilds). Safe from
    several threads and processes sharing one cache directory."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    directory = cache_directory() / f"{label}_{digest}"
    site = _sites_by_digest.get(str(directory))
    if site is not None:
        return site
    with _lock:
        site = _sites_by_digest.get(str(directory))
        if site is not None:
            return site
        stamp = _compiler_stamp()
        if not _is_current(directory, stamp):
            _compile_into_cache(text, directory, stamp)
        package = Package(directory)
        _packages.append(package)
        site = package.sites[0]
        _sites_by_digest[str(directory)] = site
        return site


def precompile(dtypes=("bf16", "f16"), head_dims=(64, 128),
               scales: Optional[Dict[int, float]] = None,
               page_sizes=(16,), windows=(), fp8_kv_heads=(),
               ragged: bool = False) -> None:
    """Compiles the sites for these specialisations into the disk cache
    (each kind: causal, mask, none, and for f16/bf16 paged attention over
    pages of each size, without a window and with each of `windows`, the
    models' `sliding_window`s), for machines without kilnc. With
    `fp8_kv_heads` (the models' KV head counts) also the paged sites over
    FP8 caches (PagedKVCache's kv_dtype="fp8_e4m3"; head dims that are
    multiples of 16); with `ragged` each paged site's packed-query twin,
    which PagedKVCache's prefill of a left-padded batch runs (without it,
    that prefill runs the uniform site)."""
    for dtype in dtypes:
        for head_dim in head_dims:
            scale = (scales or {}).get(head_dim, head_dim ** -0.5)
            kinds = ["causal", "mask", "none"]
            if dtype != "f32":
                caches = [None]
                if head_dim % 16 == 0:
                    caches += list(fp8_kv_heads)
                kinds += [_paged_kind(size, window, heads, packed)
                          for size in page_sizes for window in (None, *windows)
                          for heads in caches
                          for packed in ((False, True) if ragged else (False,))]
            for kind in kinds:
                site_for(dtype, head_dim, head_dim, kind, scale)


def _fallback(reason: str, module, query, key, value, attention_mask,
              dropout, scaling, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if reason not in fallbacks:
        warnings.warn(f"kiln attention: {reason}; running PyTorch SDPA")
    fallbacks[reason] = fallbacks.get(reason, 0) + 1
    return sdpa_attention_forward(module, query, key, value, attention_mask,
                                  dropout=dropout, scaling=scaling, **kwargs)


def _boolean_mask(mask):
    """`mask` as booleans (True: the key takes part). An additive mask
    (eager's format) hides the keys filled with -inf or the dtype's most
    negative value."""
    if mask is not None and mask.dtype.is_floating_point:
        import torch

        return mask > torch.finfo(mask.dtype).min / 2
    return mask


def _sliding_window(module, kwargs: Dict[str, Any]) -> Optional[int]:
    """The sliding window of this attention layer, None for full attention.
    Attention modules pass `sliding_window` to the attention function
    (Mistral its config's, Qwen2 and Gemma 3 their own layer's, None on
    full-attention layers); otherwise it is the module's attribute."""
    if "sliding_window" in kwargs:
        window = kwargs["sliding_window"]
    else:
        window = getattr(module, "sliding_window", None)
    return int(window) if window else None


def attention_forward(module, query, key, value, attention_mask,
                      dropout: float = 0.0, scaling: Optional[float] = None,
                      is_causal: Optional[bool] = None, **kwargs) -> Tuple[Any, None]:
    """The AttentionInterface function: query ``[B, Hq, Sq, D]``, key and
    value ``[B, Hkv, Sk, D]``; returns ``[B, Sq, Hq, Dv]`` and no weights."""
    dtype = _TYPES.get(str(query.dtype))
    head_dim, value_dim = int(query.shape[-1]), int(value.shape[-1])
    reason = None
    if dtype is None:
        reason = f"dtype {query.dtype}"
    elif dropout and module.training:
        reason = "dropout while training"
    elif not query.is_cuda:
        reason = "tensors not on a CUDA device"
    elif (head_dim % 8 or value_dim % 8 or max(head_dim, value_dim) > 256
          or (dtype != "f32" and min(head_dim, value_dim) < 16)):
        # The tensor-core kernels' head dims (f32's on TF32).
        reason = f"head dim {head_dim}/{value_dim}"
    paged = getattr(key, "_kiln_paged", None)
    if reason and paged is not None:
        # SDPA would read the page pools as if they were keys.
        raise KilnError(Status.UNSUPPORTED,
                        f"PagedKVCache needs Kiln's paged kernel, and this call "
                        f"cannot run on Kiln: {reason}")
    if reason:
        return _fallback(reason, module, query, key, value, attention_mask,
                         dropout, scaling, is_causal=is_causal, **kwargs)
    scale = float(scaling if scaling is not None else head_dim ** -0.5)
    if paged is not None:
        window = _sliding_window(module, kwargs)
        return paged.attend(query, scale, attention_mask, window), None
    softcap = kwargs.get("softcap")
    softcap = float(softcap) if softcap else None
    mask = _boolean_mask(attention_mask)
    if mask is not None:
        kind = _dense_kind("mask", softcap=softcap)
    else:
        causal = is_causal if is_causal is not None else getattr(
            module, "is_causal", True)
        queries, keys = query.shape[2], key.shape[2]
        if causal and queries > 1 and queries != keys:
            # transformers leaves out the mask where SDPA's own causal
            # serves, which is aligned top-left (query i sees keys up to
            # i): a static cache's first prompt, whose keys run past it.
            # Kiln's causal is aligned bottom-right; say top-left as a mask.
            mask = torch.ones(queries, keys, dtype=torch.bool,
                              device=query.device).tril()
            kind = _dense_kind("mask", softcap=softcap)
        else:
            # No mask on a layer with a sliding window: either the keys are
            # fewer than the window, or Kiln's mask function (_mask) found
            # the mask to be exactly causal with that window, aligned with
            # the last key; Kiln's `window` then skips the tiles outside it.
            window = _sliding_window(module, kwargs) if causal else None
            kind = _dense_kind("causal" if causal else "none", window, softcap)
    index = _site_handle(dtype, head_dim, value_dim, kind, scale)
    if index < 0:
        error = _site_errors[(dtype, head_dim, value_dim, kind, scale)]
        return _fallback(f"no kernel ({error})", module, query, key, value,
                         attention_mask, dropout, scaling, is_causal=is_causal,
                         **kwargs)
    out = torch.ops.kiln.attention(query, key, value, mask, None, None, index, 0)
    return out.transpose(1, 2).contiguous(), None


#: Why a specialisation has no site, by _site_handle's key.
_site_errors: Dict[Tuple, str] = {}
#: Ragged paged sites that could not be had (PagedKVCache then runs the
#: uniform site), by site_for's key: the reason.
_ragged_unavailable: Dict[Tuple, str] = {}


@_assume_constant_result
def _site_handle(dtype: str, head_dim: int, value_dim: int, kind: str,
                 scale: float) -> int:
    """The torch-op handle of a specialisation's site (site_for), or -1 when
    it has none (the reason in _site_errors). Under torch.compile this runs
    once while tracing and its answer is a constant of the graph: the
    lock, the disk cache and kilnc never enter a traced region."""
    try:
        return kops.handle(site_for(dtype, head_dim, value_dim, kind, scale))
    except KilnError as error:
        _site_errors[(dtype, head_dim, value_dim, kind, scale)] = str(error)
        return -1


def _mask(*args: Any, **kwargs: Any) -> Any:
    """SDPA's mask function (boolean masks, None where causal attention
    needs none), which also leaves out a sliding-window mask that is
    exactly causal with its window and aligned with the last key (no
    padding, the keys all the sequence's): Kiln's `window` then serves
    it, skipping the tiles outside the window instead of reading a mask.
    Checked on the device when not tracing (transformers' own SDPA mask
    checks its padding there too); under torch.compile the mask is kept."""
    from transformers.masking_utils import sdpa_mask

    mask = sdpa_mask(*args, **kwargs)
    window = kwargs.get("local_size")
    if (mask is None or not window or mask.dtype != torch.bool
            or torch.compiler.is_compiling()):
        return mask
    padding = kwargs.get("attention_mask")
    if padding is not None and not bool(padding.all()):
        return mask  # padded: a PagedKVCache reads its pads from the mask
    queries, keys = mask.shape[-2], mask.shape[-1]
    rows = torch.arange(queries, device=mask.device)[:, None] + (keys - queries)
    columns = torch.arange(keys, device=mask.device)[None, :]
    exact = (columns <= rows) & (rows - columns < int(window))
    return None if bool((mask == exact).all()) else mask


def register(name: str = "kiln") -> None:
    """Registers the backend with transformers as `name`."""
    from transformers import AttentionInterface

    AttentionInterface.register(name, attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface

        AttentionMaskInterface.register(name, _mask)
    except ImportError:  # older transformers build SDPA masks for any name
        pass


# --------------------------------------------------------------------------
# A paged KV cache for generate().
# --------------------------------------------------------------------------


def _paged_cache_class():
    """PagedKVCache's base classes come from transformers, imported late."""
    from transformers.cache_utils import Cache, CacheLayerMixin
    import torch

    class PagedLayer(CacheLayerMixin):
        """One layer's keys and values in pages of the cache's page size:
        `[num_pages, page_size, Hkv, D]`, addressed through the cache's
        page table. A sequence's real tokens lie from position 0 of its
        pages on; its pads are never stored. With the cache's kv_dtype
        "fp8_e4m3" the pages hold float8_e4m3fn and `k_scale`, `v_scale`
        ([Hkv] f32) dequantise them."""

        is_compileable = False
        is_sliding = False

        def __init__(self, cache: "PagedKVCache"):
            super().__init__()
            self.cache = cache
            # Tokens seen, pads included: positions as transformers counts
            # them in its masks and cache positions.
            self.length = 0
            # This step's keys and values, stored by attend(): update()
            # does not see the mask that tells pads from real tokens.
            self.pending = None
            # An FP8 layer's scales ([Hkv] f32), set by the first step that
            # stores keys.
            self.k_scale = self.v_scale = None

        def lazy_initialization(self, key_states, value_states) -> None:
            cache = self.cache
            _, heads, _, dim = key_states.shape
            value_dim = value_states.shape[-1]
            shape = (cache.num_pages, cache.page_size, heads, dim)
            if cache.kv_dtype == "fp8_e4m3":
                _check_fp8_site(_TYPES.get(str(key_states.dtype),
                                           str(key_states.dtype)),
                                dim, value_dim)
                # Zero bytes are e4m3 zeros.
                self.keys = torch.zeros(
                    shape, dtype=torch.uint8,
                    device=key_states.device).view(torch.float8_e4m3fn)
                self.values = torch.zeros(
                    shape[:3] + (value_dim,), dtype=torch.uint8,
                    device=value_states.device).view(torch.float8_e4m3fn)
            else:
                self.keys = torch.zeros(shape, dtype=key_states.dtype,
                                        device=key_states.device)
                self.values = torch.zeros(
                    shape[:3] + (value_dim,), dtype=value_states.dtype,
                    device=value_states.device)
            self.keys._kiln_paged = self
            self.values._kiln_paged = self
            self.dtype, self.device = key_states.dtype, key_states.device
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            batch = key_states.shape[0]
            cache = self.cache
            if batch != cache.sequences:
                raise KilnError(Status.INVALID_ARGUMENT,
                                f"PagedKVCache holds {cache.sequences} "
                                f"sequences; got a batch of {batch}")
            if self.pending is not None:
                raise KilnError(
                    Status.UNSUPPORTED,
                    "PagedKVCache: the last step's keys were never attended "
                    "to; attention over this cache must run through "
                    "attn_implementation=\"kiln\"")
            self.pending = (self.length, key_states, value_states)
            self.length += key_states.shape[2]
            return self.keys, self.values

        def attend(self, query, scale, attention_mask,
                   window: Optional[int] = None):
            """Stores this step's keys and values, then runs causal
            attention of `query` (this step's tokens) over the layer's
            pages; with a sliding `window` (transformers' `sliding_window`)
            each query sees only its `window` most recent keys."""
            if self.pending is None:
                raise KilnError(Status.INVALID_ARGUMENT,
                                "PagedLayer.attend() without update()")
            start, key_states, value_states = self.pending
            self.pending = None
            cache = self.cache
            new = key_states.shape[2]
            if query.shape[2] != new:
                raise KilnError(Status.INVALID_ARGUMENT,
                                f"{query.shape[2]} queries for {new} new keys")
            real = cache.admit(start, new, attention_mask, window)
            longest = self.length - min(cache.pad_counts)
            if longest > cache.tokens_per_sequence:
                raise KilnError(Status.INVALID_ARGUMENT,
                                f"PagedKVCache holds {cache.tokens_per_sequence} "
                                f"tokens a sequence; {longest} needed")
            self.store(start, key_states, value_states, real)
            # Pad queries (the first ones of a left-padded prompt) sit before
            # their sequence's first key: they see none and come out zero.
            self.kv_lens = (self.length - cache.pads).to(torch.int32)
            # transformers' window W keeps key k for query q when
            # q - k < W (besides causal); Kiln's `window = W` hides
            # `j <= i + (kv_lens[b] - Sq) - W`, "each query sees its W most
            # recent keys, itself included": the same W. The pads, removed
            # before the first real token, shift q and k alike.
            dtype = _TYPES[str(query.dtype)]
            head_dim, value_dim = int(query.shape[-1]), int(self.values.shape[-1])
            extra = {}
            fp8_kv_heads = None
            if cache.kv_dtype == "fp8_e4m3":
                fp8_kv_heads = int(self.keys.shape[2])
                k_scale, v_scale = self.k_scale, self.v_scale
                if k_scale is None:  # nothing stored yet: no key is read
                    k_scale = v_scale = torch.ones(
                        fp8_kv_heads, dtype=torch.float32, device=query.device)
                extra = dict(k_scale=k_scale, v_scale=v_scale)
            # The batch's total length, known here on the host (the pads'
            # counts are mirrored there): the launch splits a batch of
            # uneven lengths by it rather than by its longest sequence.
            total = sum(max(self.length - pads, 0) for pads in cache.pad_counts)
            if real is not None and cache.ragged_prefill:
                site = cache.ragged_site(dtype, head_dim, value_dim, window,
                                         fp8_kv_heads, scale)
                if site is not None:
                    return self._attend_packed(site, query, total, extra)
            site = site_for(dtype, head_dim, value_dim,
                            _paged_kind(cache.page_size, window, fp8_kv_heads),
                            scale)
            out = kops.paged_attention(site, query.contiguous(), self.keys,
                                       self.values, cache.table, self.kv_lens,
                                       total_kv_len=total, **extra)
            return out.transpose(1, 2).contiguous()

        def _attend_packed(self, site, query, total: int, extra):
            """A step with pads on the ragged `site`: only the real queries
            of each sequence run, packed [total_q, Hq, D]; the pad rows of
            the [B, Sq, Hq, Dv] result are zeros, as the uniform launch
            gives them (they see no key)."""
            cache = self.cache
            batch, q_heads, new, head_dim = query.shape
            value_dim = self.values.shape[-1]
            q_offsets, rows, total_q = cache.packing(query.device)
            out = query.new_zeros(batch * new, q_heads, value_dim)
            if total_q == 0:
                return out.view(batch, new, q_heads, value_dim)
            plan = cache.plan_for(site, self.length, q_heads,
                                  int(self.keys.shape[2]), query.device)
            packed = query.transpose(1, 2).reshape(
                batch * new, q_heads, head_dim).index_select(0, rows)
            result = kops.paged_attention(
                site, packed, self.keys, self.values, cache.table,
                self.kv_lens, total_kv_len=total, q_offsets=q_offsets,
                plan=plan, **extra)
            out.index_copy_(0, rows, result)
            return out.view(batch, new, q_heads, value_dim)

        def store(self, start: int, key_states, value_states, real) -> None:
            """Writes the keys and values of positions [start, start + new)
            (pads included) at their sequences' compacted positions, leaving
            out the pads (`real`: [B, new], None when there are none). An
            FP8 layer stores them as e4m3 of key / k_scale (value / v_scale)
            saturated to ±448, its scales set by the first step that stores
            any key."""
            cache = self.cache
            _, heads, new, _ = key_states.shape
            steps = torch.arange(new, device=cache.table.device)
            positions = start + steps[None] - cache.pads[:, None]  # a pad's < 0
            slots = cache.slots(positions.clamp(min=0))
            keys = key_states.transpose(1, 2)  # [B, new, Hkv, D]
            values = value_states.transpose(1, 2)
            if real is not None:
                slots, keys, values = slots[real], keys[real], values[real]
            keys = keys.reshape(-1, heads, keys.shape[-1])
            values = values.reshape(-1, heads, values.shape[-1])
            flat_k = self.keys.view(-1, heads, self.keys.shape[-1])
            flat_v = self.values.view(-1, heads, self.values.shape[-1])
            if cache.kv_dtype == "fp8_e4m3":
                if keys.shape[0] == 0:
                    return
                if self.k_scale is None:
                    self.k_scale = _fp8_scales(keys)
                    self.v_scale = _fp8_scales(values)
                # Copied as bytes: index_copy_ need not know float8.
                keys = _to_fp8(keys, self.k_scale).view(torch.uint8)
                values = _to_fp8(values, self.v_scale).view(torch.uint8)
                flat_k, flat_v = flat_k.view(torch.uint8), flat_v.view(torch.uint8)
            flat_k.index_copy_(0, slots.reshape(-1), keys)
            flat_v.index_copy_(0, slots.reshape(-1), values)

        def get_mask_sizes(self, query_length) -> Tuple[int, int]:
            if not isinstance(query_length, int):  # older: cache positions
                query_length = int(query_length.shape[0])
            return self.length + query_length, 0

        def get_seq_length(self) -> int:
            return self.length

        def get_max_length(self) -> int:
            return self.cache.tokens_per_sequence

        def reset(self) -> None:
            self.length = 0
            self.pending = None
            # An FP8 layer's next first step sets its scales anew.
            self.k_scale = self.v_scale = None
            self.cache.forget_pads()

        def reorder_cache(self, beam_idx) -> None:
            raise KilnError(Status.UNSUPPORTED,
                            "PagedKVCache does not reorder sequences (beam search)")

    class PagedKVCache(Cache):
        """A ``transformers`` cache whose keys and values live in pages of
        `page_size` tokens (a power of two) handed out at random from one
        pool per layer, with a page table per sequence; attention over it
        runs Kiln's paged decode / chunked-prefill kernel (split-KV chosen
        at launch). For `generate` with `attn_implementation="kiln"`, up to
        `max_length` real tokens a sequence.

        Batches may be left-padded (as `generate` pads them): the pads are
        read off the attention mask of the first step (`pads`, per
        sequence) and never stored, each sequence's tokens lie from
        position 0 of its pages, and the kernel sees each sequence's own
        length (`sequence_lengths()`). Layers with a sliding window run
        the kernel with that window. Every mask must be exactly left
        padding + causal (+ the layer's window); any other raises a
        KilnError. `get_seq_length()` counts pads, as transformers does.

        Ragged prefill (`ragged_prefill`; by default on for a cache on a
        CUDA device): a step whose batch has pads (a left-padded prompt)
        runs only the real queries, each sequence's packed into one
        ``[total_q, Hq, D]`` launch of the site's ragged twin
        (``q_offsets``, and a plan made once per step on the host from the
        pads' counts), and the pad rows of its result are zeros, exactly
        what the uniform launch gives them (a pad query sees no key). Steps
        without pads (decoding) run the uniform site. Where the ragged site
        cannot be had (no kilnc, not precompiled) the step runs the uniform
        site, with a warning.

        FP8 pages (`kv_dtype="fp8_e4m3"`; f16/bf16 models, head dims that
        are multiples of 16, else a KilnError at the first step): each
        layer's pages hold float8_e4m3fn with f32 scales per KV head, set
        by the first step that stores keys in that layer (that step's
        largest magnitude over its real keys, and values, per KV head,
        over 448; floored at 1e-3 / 448 so an all-zero head still has a
        positive scale) and fixed afterwards: later keys or values beyond
        448 · scale saturate to ±448 · scale, the trade-off of scales that
        never rewrite the pages. A layer's `reset()` forgets its scales.
        Attention runs the FP8 site (``_fp8kvH``) with those scales; the
        pages take half the memory of bf16's."""

        def __init__(self, batch_size: int, max_length: int, num_layers: int,
                     page_size: int = 16, device: Any = "cuda", seed: int = 0,
                     kv_dtype: Optional[str] = None,
                     ragged_prefill: Optional[bool] = None):
            if page_size <= 0 or page_size & (page_size - 1):
                raise KilnError(Status.INVALID_ARGUMENT,
                                f"page_size must be a power of two, got {page_size}")
            if kv_dtype not in (None, "fp8_e4m3"):
                raise KilnError(Status.INVALID_ARGUMENT,
                                f"kv_dtype must be None (the model's dtype) or "
                                f"\"fp8_e4m3\", got {kv_dtype!r}")
            if kv_dtype is not None and not hasattr(torch, "float8_e4m3fn"):
                raise KilnError(Status.UNSUPPORTED,
                                f"kv_dtype=\"fp8_e4m3\" needs torch.float8_e4m3fn "
                                f"(torch 2.1 or later); this is torch "
                                f"{torch.__version__}")
            #: None (pages in the model's dtype) or "fp8_e4m3".
            self.kv_dtype = kv_dtype
            #: Whether a step with pads runs only its real queries, packed
            #: (by default where the cache is on a CUDA device, the only
            #: place the ragged kernel and its plan run).
            if ragged_prefill is None:
                ragged_prefill = torch.device(device).type == "cuda"
            self.ragged_prefill = bool(ragged_prefill)
            # (Cache has batch_size and length properties of its own.)
            self.sequences, self.tokens_per_sequence = batch_size, max_length
            self.page_size = page_size
            self.max_pages = -(-max_length // page_size)
            self.num_pages = batch_size * self.max_pages
            generator = torch.Generator().manual_seed(seed)
            pages = torch.randperm(self.num_pages, generator=generator)
            self.table = pages.view(batch_size, self.max_pages).to(
                torch.int32).to(device)
            self._rows = torch.arange(batch_size, device=device)[:, None]
            #: Left pads of each sequence ([B], on the device), and the same
            #: on the host.
            self.pads = torch.zeros(batch_size, dtype=torch.int64, device=device)
            self.pad_counts = [0] * batch_size
            # The step being attended (start, new), whether its new tokens
            # are real, and the masks already checked in it.
            self._step: Optional[Tuple[int, int]] = None
            self._real = None
            self._checked: list = []
            # This step's pads per sequence (host; None without pads), and
            # its packing and plans for ragged sites, shared by its layers.
            self._step_pads: Optional[list] = None
            self._packing = None
            self._plans: Dict[Tuple, Any] = {}
            super().__init__(layers=[PagedLayer(self) for _ in range(num_layers)])

        def slots(self, positions):
            """Flat slots (page · page_size + offset) of `positions` [B, n]
            of each sequence (position 0: its first real token)."""
            pages = self.table[self._rows, positions // self.page_size].long()
            return pages * self.page_size + positions % self.page_size

        def sequence_lengths(self, layer_idx: int = 0):
            """The real tokens each sequence holds in layer `layer_idx`:
            [B] int32, the kernel's kv_lens."""
            return (self.layers[layer_idx].length - self.pads).to(torch.int32)

        def forget_pads(self) -> None:
            self.pads.zero_()
            self.pad_counts = [0] * self.sequences
            self._step, self._real, self._checked = None, None, []
            self._step_pads, self._packing, self._plans = None, None, {}

        def ragged_site(self, dtype: str, head_dim: int, value_dim: int,
                        window: Optional[int], fp8_kv_heads: Optional[int],
                        scale: float):
            """The ragged twin of a layer's paged site, or None where it
            cannot be had (no kilnc and not precompiled): the step then
            runs the uniform site, whose answer is the same."""
            kind = _paged_kind(self.page_size, window, fp8_kv_heads, ragged=True)
            key = (dtype, head_dim, value_dim, kind, float(scale))
            if key in _ragged_unavailable:
                return None
            try:
                return site_for(dtype, head_dim, value_dim, kind, scale)
            except KilnError as error:
                _ragged_unavailable[key] = str(error)
                warnings.warn(f"PagedKVCache: no ragged site {kind} ({error}); "
                              f"padded steps run every query row")
                return None

        def _step_offsets(self) -> list:
            """This step's q_offsets on the host: sequence b's real queries
            are the last new - pads[b] of the step's (pads lead)."""
            new = self._step[1]
            offsets = [0]
            for pads in self._step_pads:
                offsets.append(offsets[-1] + new - pads)
            return offsets

        def packing(self, device):
            """This step's packing of real queries: q_offsets ([B + 1]
            int32 on `device`), the rows of the [B · Sq] queries that are
            real (int64, in packed order) and their count total_q; computed
            on the host from the pads that admit() read."""
            if self._packing is None:
                new = self._step[1]
                offsets = self._step_offsets()
                rows = [row for sequence, pads in enumerate(self._step_pads)
                        for row in range(sequence * new + pads,
                                         (sequence + 1) * new)]
                self._packing = (
                    torch.tensor(offsets, dtype=torch.int32, device=device),
                    torch.tensor(rows, dtype=torch.int64, device=device),
                    offsets[-1])
            return self._packing

        def plan_for(self, site, length: int, q_heads: int, kv_heads: int,
                     device):
            """`site`'s plan of this step's packed batch (Site.plan), each
            sequence's keys counted on the host: `length` (pads included)
            less its pads."""
            key = (id(site), q_heads, kv_heads)
            plan = self._plans.get(key)
            if plan is None:
                offsets = self._step_offsets()
                lens = [max(length - pads, 0) for pads in self.pad_counts]
                plan = site.plan(offsets, lens, q_heads=q_heads,
                                 kv_heads=kv_heads, device=device,
                                 total_q=offsets[-1])
                self._plans[key] = plan
            return plan

        def admit(self, start: int, new: int, mask, window: Optional[int]):
            """Checks one layer's mask for the step that adds positions
            [start, start + new) (pads included) and returns which of them
            are real tokens ([B, new] bool, None when all are). The step's
            first call reads the new pads off its mask; each distinct mask
            of the step (and window) must then be exactly left padding +
            causal (+ the window)."""
            if self._step != (start, new):
                self._step, self._checked = (start, new), []
                self._step_pads, self._packing, self._plans = None, None, {}
                self._real = self._read_pads(start, new, mask)
            if not any(seen is mask and seen_window == window
                       for seen, seen_window in self._checked):
                self._check(start, new, mask, window)
                self._checked.append((mask, window))
            return self._real

        def _mask_view(self, start: int, new: int, mask):
            """`mask` as booleans after checking its shape."""
            if not isinstance(mask, torch.Tensor) or mask.dim() != 4:
                raise KilnError(
                    Status.UNSUPPORTED,
                    f"PagedKVCache takes SDPA-format masks [B, 1, Sq, Sk]; got "
                    f"{getattr(mask, 'shape', type(mask).__name__)}")
            batch, _, queries, keys = mask.shape
            if (batch not in (1, self.sequences) or queries != new
                    or keys != start + new):
                raise KilnError(
                    Status.INVALID_ARGUMENT,
                    f"the attention mask has shape {tuple(mask.shape)}; this "
                    f"step of PagedKVCache needs [{self.sequences}, 1, {new}, "
                    f"{start + new}]")
            return _boolean_mask(mask)

        def _read_pads(self, start: int, new: int, mask):
            """Finds the pads among this step's tokens: the tokens whose
            query does not see its own key (nor, as transformers makes it
            on torch < 2.5 for queries that see nothing, every key). They
            must lead, and only in sequences with no real token yet."""
            if mask is None:
                return None
            full = self._mask_view(start, new, mask)[:, 0].expand(
                self.sequences, new, start + new)
            device = full.device
            rows = torch.arange(new, device=device)
            positions = start + rows
            keys = torch.arange(start + new, device=device)
            sees_itself = full[:, rows, positions]
            sees_ahead = (full & (keys[None, None] > positions[None, :, None])).any(-1)
            real = sees_itself & ~sees_ahead
            pad_rows = (~real).sum(-1)
            leading = (real == (rows[None] >= pad_rows[:, None])).all(-1)
            unstarted = (pad_rows == 0) | (start - self.pads.to(device) == 0)
            counts, leading, unstarted = torch.stack(
                [pad_rows, leading.long(), unstarted.long()]).tolist()
            if not all(leading) or not all(unstarted):
                raise KilnError(
                    Status.UNSUPPORTED,
                    "PagedKVCache serves left-padded batches: the attention "
                    "mask may hide a sequence's tokens only before its first "
                    "real one, and this mask hides others")
            if not any(counts):
                return None
            self.pads += pad_rows.to(self.pads.device)
            self.pad_counts = [old + more for old, more in zip(self.pad_counts, counts)]
            self._step_pads = counts
            return real.to(self.table.device)

        def _check(self, start: int, new: int, mask, window: Optional[int]) -> None:
            """Raises unless `mask` is what the kernel applies: for each real
            query, the keys from its sequence's first real token up to
            itself, and within `window` of it. Pad queries are left free
            (transformers ignores their outputs)."""
            what = "causal" + (f" with a sliding window of {window}" if window else "")
            if mask is None:
                if any(self.pad_counts):
                    raise KilnError(
                        Status.INVALID_ARGUMENT,
                        "PagedKVCache holds left-padded sequences but this step "
                        "has no attention mask: pass the batch's attention_mask "
                        "at every step")
                # With a window, no mask is causal with that window: what
                # transformers leaves out when the window hides nothing, and
                # what Kiln's mask function (_mask) leaves out once it has
                # checked the mask is exactly that.
                return
            mask = self._mask_view(start, new, mask)
            device = mask.device
            positions = start + torch.arange(new, device=device)[:, None]
            keys = torch.arange(start + new, device=device)[None]
            pads = self.pads.to(device)[:, None, None]
            visible = (keys <= positions) & (keys >= pads)  # [B, new, Sk]
            if window is not None:
                visible &= positions - keys < window
            real = positions[None] >= pads  # [B, new, 1]
            if not bool(((mask == visible[:, None]) | ~real[:, None]).all()):
                raise KilnError(
                    Status.UNSUPPORTED,
                    f"PagedKVCache: this attention mask is not left padding + "
                    f"{what} attention, the only masking Kiln's paged kernel "
                    f"applies here")

    return PagedKVCache


def __getattr__(name: str):
    if name == "PagedKVCache":
        cls = _paged_cache_class()
        globals()["PagedKVCache"] = cls
        return cls
    raise AttributeError(name)
