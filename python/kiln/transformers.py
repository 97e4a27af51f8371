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
A call whose inputs need gradients (a module training) runs Kiln's
training sites, the forward keeping its log-sum-exp and autograd going
through Kiln's tensor-core backward (f16/bf16, head dims multiples of 16 up
to 128; no gradient reaches the mask). Calls Kiln cannot serve (a head dim
without a kernel, dropout while training, training where the backward has no
tensor-core kernel, a dtype other than f16/bf16/f32) run PyTorch SDPA instead,
counted in ``fallbacks``; over a ``PagedKVCache`` (left-padded batches and
sliding windows included, see its docstring) they raise, as SDPA cannot read
its pages.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, Optional, Tuple

try:
    import torch

    _assume_constant_result = torch.compiler.assume_constant_result
except ImportError:  # the site cache works without torch (kilnc only)
    torch = None

    def _assume_constant_result(function):
        return function

from . import torch_ops as kops
from .runtime import KilnError, Status
from .site import TORCH_DTYPES, SiteSpec, fma_backward_reason

# The site cache and PagedKVCache live in modules of their own; their names
# stay importable from here (public ones, and the tables tests clear).
from .paged_cache import (_boolean_mask, _ragged_unavailable,  # noqa: F401
                          paged_cache_class)
from .site_cache import (_compiler_stamp, _sites, _training_sites,  # noqa: F401
                         _packages_by_digest, cache_directory, site_for,
                         site_from_source, training_sites_for)

__all__ = ["PagedKVCache", "attention_forward", "cache_directory", "fallbacks",
           "precompile", "register", "site_for"]

#: Calls that ran PyTorch SDPA instead, by reason.
fallbacks: Dict[str, int] = {}


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
            dims = (dtype, head_dim, head_dim, scale)
            specs = [SiteSpec.dense(*dims, causal=True),
                     SiteSpec.dense(*dims, mask=True), SiteSpec.dense(*dims)]
            if dtype != "f32":
                caches = [None]
                if head_dim % 16 == 0:
                    caches += list(fp8_kv_heads)
                specs += [SiteSpec.paged(*dims, size, window=window,
                                         fp8_kv_heads=heads, ragged=packed)
                          for size in page_sizes for window in (None, *windows)
                          for heads in caches
                          for packed in ((False, True) if ragged else (False,))]
            for spec in specs:
                site_for(spec)


def _fallback(reason: str, module, query, key, value, attention_mask,
              dropout, scaling, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if reason not in fallbacks:
        warnings.warn(f"kiln attention: {reason}; running PyTorch SDPA")
    fallbacks[reason] = fallbacks.get(reason, 0) + 1
    return sdpa_attention_forward(module, query, key, value, attention_mask,
                                  dropout=dropout, scaling=scaling, **kwargs)


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
    dtype = TORCH_DTYPES.get(str(query.dtype))
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
    causal, window = False, None
    if mask is None:
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
            causal = False
        else:
            # No mask on a layer with a sliding window: either the keys are
            # fewer than the window, or Kiln's mask function (_mask) found
            # the mask to be exactly causal with that window, aligned with
            # the last key; Kiln's `window` then skips the tiles outside it.
            window = _sliding_window(module, kwargs) if causal else None
    # The site's facts cross into _site_handle as plain constants: under
    # torch.compile it runs (and builds the SiteSpec) outside the trace.
    facts = (dtype, head_dim, value_dim, scale, bool(causal), mask is not None,
             window, softcap)
    if torch.is_grad_enabled() and any(
            t.requires_grad for t in (query, key, value)):
        if fma_backward_reason(dtype, head_dim, value_dim):
            return _fallback(f"training a {dtype} site of head dim "
                             f"{head_dim}/{value_dim} (Kiln's backward for it "
                             f"runs on f32 FMAs)", module, query, key, value,
                             attention_mask, dropout, scaling,
                             is_causal=is_causal, **kwargs)
        index = _training_handle(*facts)
        if index < 0:
            return _fallback(f"no training kernels ({_site_error(*facts)})",
                             module, query, key, value, attention_mask, dropout,
                             scaling, is_causal=is_causal, **kwargs)
        out, _ = torch.ops.kiln.attention_lse(query, key, value, mask, None,
                                              index, None)
        return out.transpose(1, 2).contiguous(), None
    index = _site_handle(*facts)
    if index < 0:
        return _fallback(f"no kernel ({_site_error(*facts)})", module, query,
                         key, value,
                         attention_mask, dropout, scaling, is_causal=is_causal,
                         **kwargs)
    out = torch.ops.kiln.attention(query, key, value, mask, None, None, index, 0)
    return out.transpose(1, 2).contiguous(), None


#: Why a specialisation has no site, by its spec.
_site_errors: Dict[SiteSpec, str] = {}


def _dense_spec(dtype: str, head_dim: int, value_dim: int, scale: float,
                causal: bool, mask: bool, window: Optional[int],
                softcap: Optional[float]) -> SiteSpec:
    return SiteSpec.dense(dtype, head_dim, value_dim, scale, causal=causal,
                          mask=mask, window=window, softcap=softcap)


@_assume_constant_result
def _site_handle(*facts: Any) -> int:
    """The torch-op handle of the site of a call's facts (_dense_spec's
    arguments; site_for), or -1 when it has none (the reason in
    _site_errors). Under torch.compile this runs once while tracing and its
    answer is a constant of the graph: the lock, the disk cache and kilnc
    never enter a traced region."""
    spec = _dense_spec(*facts)
    try:
        return kops.handle(site_for(spec))
    except KilnError as error:
        _site_errors[spec] = str(error)
        return -1


@_assume_constant_result
def _training_handle(*facts: Any) -> int:
    """The torch-op handle of the training sites of a call's facts (the
    forward keeping its log-sum-exp, paired with its backward), or -1 (the
    reason in _site_errors), as _site_handle."""
    spec = _dense_spec(*facts)
    try:
        return kops.register_training(*training_sites_for(spec))
    except KilnError as error:
        _site_errors[spec] = str(error)
        return -1


@_assume_constant_result
def _site_error(*facts: Any) -> str:
    """Why _site_handle found no site for these facts."""
    return _site_errors[_dense_spec(*facts)]


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


def __getattr__(name: str):
    if name == "PagedKVCache":
        cls = paged_cache_class()
        globals()["PagedKVCache"] = cls
        return cls
    raise AttributeError(name)
