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
Calls Kiln cannot serve (a head dim without a kernel, softcapping, dropout
while training, a dtype other than f16/bf16/f32) run PyTorch SDPA instead,
counted in ``fallbacks``.
"""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from . import __version__
from . import torch_ops as kops
from .compiler import compile as kiln_compile
from .runtime import KilnError, Package, Site

__all__ = ["attention_forward", "cache_directory", "fallbacks", "precompile",
           "register", "site_for"]

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
            scale: float) -> str:
    q = f"tensor<?x?x?x{head_dim}x{dtype}>"
    v = f"tensor<?x?x?x{value_dim}x{dtype}>"
    mask_arg = ", %m: tensor<?x?x?x?xi1>" if kind == "mask" else ""
    mask_use = " mask(%m : tensor<?x?x?x?xi1>)" if kind == "mask" else ""
    causal = "causal, " if kind == "causal" else ""
    return (f"func.func @attention(%q: {q}, %k: {q}, %v: {v}{mask_arg}) -> {v} {{\n"
            f"  %o = kiln.attention %q, %k, %v{mask_use} {{{causal}scale = "
            f"{scale!r} : f32}} : {q}, {q}, {v} -> {v}\n"
            f"  return %o : {v}\n}}\n")


def site_for(dtype: str, head_dim: int, value_dim: int, kind: str,
             scale: float) -> Site:
    """The site for a specialisation: from memory, from the disk cache, or
    compiled now (needs kilnc) into the cache."""
    key = (dtype, head_dim, value_dim, kind, float(scale))
    with _lock:
        site = _sites.get(key)
        if site is not None:
            return site
        text = _source(dtype, head_dim, value_dim, kind, float(scale))
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        directory = cache_directory() / f"{dtype}_d{head_dim}_{kind}_{digest}"
        if (directory / "manifest.json").exists():
            package = Package(directory)
        else:
            directory.parent.mkdir(parents=True, exist_ok=True)
            source = directory.parent / f"{directory.name}.mlir"
            source.write_text(text)
            package = kiln_compile(source, output=directory)
        _packages.append(package)
        site = package.sites[0]
        _sites[key] = site
        return site


def precompile(dtypes=("bf16", "f16"), head_dims=(64, 128),
               scales: Optional[Dict[int, float]] = None) -> None:
    """Compiles the sites for these specialisations into the disk cache
    (each kind: causal, mask, none), for machines without kilnc."""
    for dtype in dtypes:
        for head_dim in head_dims:
            scale = (scales or {}).get(head_dim, head_dim ** -0.5)
            for kind in ("causal", "mask", "none"):
                site_for(dtype, head_dim, head_dim, kind, scale)


def _fallback(reason: str, module, query, key, value, attention_mask,
              dropout, scaling, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if reason not in fallbacks:
        warnings.warn(f"kiln attention: {reason}; running PyTorch SDPA")
    fallbacks[reason] = fallbacks.get(reason, 0) + 1
    return sdpa_attention_forward(module, query, key, value, attention_mask,
                                  dropout=dropout, scaling=scaling, **kwargs)


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
    elif kwargs.get("softcap"):
        reason = "softcapping"
    elif dropout and module.training:
        reason = "dropout while training"
    elif not query.is_cuda:
        reason = "tensors not on a CUDA device"
    elif dtype == "f32" and (head_dim % 32 or head_dim > 128 or head_dim != value_dim):
        reason = f"f32 head dim {head_dim}"
    elif dtype != "f32" and (head_dim % 8 or head_dim > 128 or value_dim > 128):
        reason = f"head dim {head_dim}"
    if reason:
        return _fallback(reason, module, query, key, value, attention_mask,
                         dropout, scaling, is_causal=is_causal, **kwargs)
    scale = float(scaling if scaling is not None else head_dim ** -0.5)
    mask = attention_mask
    if mask is not None and mask.dtype.is_floating_point:
        # An additive mask (eager's format): keys filled with -inf or the
        # dtype's most negative value are hidden.
        import torch

        mask = mask > torch.finfo(mask.dtype).min / 2
    if mask is not None:
        kind = "mask"
    else:
        causal = is_causal if is_causal is not None else getattr(
            module, "is_causal", True)
        kind = "causal" if causal else "none"
    try:
        site = site_for(dtype, head_dim, value_dim, kind, scale)
    except KilnError as error:
        return _fallback(f"no kernel ({error})", module, query, key, value,
                         attention_mask, dropout, scaling, is_causal=is_causal,
                         **kwargs)
    out = kops.attention(site, query, key, value, mask=mask)
    return out.transpose(1, 2).contiguous(), None


def register(name: str = "kiln") -> None:
    """Registers the backend with transformers as `name`."""
    from transformers import AttentionInterface

    AttentionInterface.register(name, attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionMaskInterface.register(name, sdpa_mask)
    except ImportError:  # older transformers build SDPA masks for any name
        pass
