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


def _paged_source(dtype: str, head_dim: int, value_dim: int, page_size: int,
                  scale: float) -> str:
    q = f"tensor<?x?x?x{head_dim}x{dtype}>"
    out = f"tensor<?x?x?x{value_dim}x{dtype}>"
    kc = f"tensor<?x{page_size}x?x{head_dim}x{dtype}>"
    vc = f"tensor<?x{page_size}x?x{value_dim}x{dtype}>"
    table, lens = "tensor<?x?xi32>", "tensor<?xi32>"
    return (f"func.func @attention(%q: {q}, %kc: {kc}, %vc: {vc}, %pt: {table}, "
            f"%lens: {lens}) -> {out} {{\n"
            f"  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {{causal, "
            f"scale = {scale!r} : f32}} : {q}, {kc}, {vc}, {table}, {lens} -> "
            f"{out}\n  return %o : {out}\n}}\n")


def site_for(dtype: str, head_dim: int, value_dim: int, kind: str,
             scale: float) -> Site:
    """The site for a specialisation (kind: causal, mask, none, or pagedN for
    causal attention over a paged cache of pages of N tokens): from memory,
    from the disk cache, or compiled now (needs kilnc) into the cache."""
    key = (dtype, head_dim, value_dim, kind, float(scale))
    with _lock:
        site = _sites.get(key)
        if site is not None:
            return site
        if kind.startswith("paged"):
            text = _paged_source(dtype, head_dim, value_dim, int(kind[5:]),
                                 float(scale))
        else:
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
               scales: Optional[Dict[int, float]] = None,
               page_sizes=(16,)) -> None:
    """Compiles the sites for these specialisations into the disk cache
    (each kind: causal, mask, none, and paged attention over pages of each
    size for f16/bf16), for machines without kilnc."""
    for dtype in dtypes:
        for head_dim in head_dims:
            scale = (scales or {}).get(head_dim, head_dim ** -0.5)
            kinds = ["causal", "mask", "none"]
            if dtype != "f32":
                kinds += [f"paged{size}" for size in page_sizes]
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
    elif dtype != "f32" and (head_dim % 8 or head_dim > 256 or value_dim > 256):
        reason = f"head dim {head_dim}"
    if reason:
        return _fallback(reason, module, query, key, value, attention_mask,
                         dropout, scaling, is_causal=is_causal, **kwargs)
    scale = float(scaling if scaling is not None else head_dim ** -0.5)
    paged = getattr(key, "_kiln_paged", None)
    if paged is not None:
        return paged.attend(query, scale, attention_mask), None
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
        page table."""

        is_compileable = False
        is_sliding = False

        def __init__(self, cache: "PagedKVCache"):
            super().__init__()
            self.cache = cache
            self.length = 0

        def lazy_initialization(self, key_states, value_states) -> None:
            cache = self.cache
            _, heads, _, dim = key_states.shape
            shape = (cache.num_pages, cache.page_size, heads, dim)
            self.keys = torch.zeros(shape, dtype=key_states.dtype,
                                    device=key_states.device)
            self.values = torch.zeros(
                shape[:3] + (value_states.shape[-1],), dtype=value_states.dtype,
                device=value_states.device)
            self.keys._kiln_paged = self
            self.values._kiln_paged = self
            self.dtype, self.device = key_states.dtype, key_states.device
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            batch, heads, new, _ = key_states.shape
            cache = self.cache
            if batch != cache.sequences:
                raise KilnError(Status.INVALID_ARGUMENT,
                                f"PagedKVCache holds {cache.sequences} "
                                f"sequences; got a batch of {batch}")
            if self.length + new > cache.tokens_per_sequence:
                raise KilnError(Status.INVALID_ARGUMENT,
                                f"PagedKVCache holds {cache.tokens_per_sequence} tokens "
                                f"a sequence; {self.length + new} needed")
            slots = cache.slots(self.length, new)  # [B, new]
            flat_k = self.keys.view(-1, heads, self.keys.shape[-1])
            flat_v = self.values.view(-1, heads, self.values.shape[-1])
            flat_k.index_copy_(0, slots.reshape(-1),
                               key_states.transpose(1, 2).reshape(-1, heads, key_states.shape[-1]))
            flat_v.index_copy_(0, slots.reshape(-1),
                               value_states.transpose(1, 2).reshape(-1, heads, value_states.shape[-1]))
            self.length += new
            self.kv_lens = torch.full((batch,), self.length, dtype=torch.int32,
                                      device=self.device)
            return self.keys, self.values

        def attend(self, query, scale, attention_mask):
            """Causal attention of `query` (the last q_len positions) over
            this layer's pages."""
            if attention_mask is not None and not bool(attention_mask.all()):
                raise KilnError(
                    Status.UNSUPPORTED,
                    "PagedKVCache serves batches without padding (every "
                    "sequence the same length); this batch has a padding mask")
            dtype = _TYPES[str(query.dtype)]
            site = site_for(dtype, int(query.shape[-1]), int(self.values.shape[-1]),
                            f"paged{self.cache.page_size}", scale)
            out = kops.paged_attention(site, query.contiguous(), self.keys,
                                       self.values, self.cache.table,
                                       self.kv_lens)
            return out.transpose(1, 2).contiguous()

        def get_mask_sizes(self, query_length: int):
            return self.length + query_length, 0

        def get_seq_length(self) -> int:
            return self.length

        def get_max_length(self) -> int:
            return self.cache.tokens_per_sequence

        def reset(self) -> None:
            self.length = 0

        def reorder_cache(self, beam_idx) -> None:
            raise KilnError(Status.UNSUPPORTED,
                            "PagedKVCache does not reorder sequences (beam search)")

    class PagedKVCache(Cache):
        """A ``transformers`` cache whose keys and values live in pages of
        `page_size` tokens (a power of two) handed out at random from one
        pool per layer, with a page table per sequence; attention over it
        runs Kiln's paged decode / chunked-prefill kernel (split-KV chosen
        at launch). For `generate` with `attn_implementation="kiln"`, batches
        whose sequences all have the same length (no padding), up to
        `max_length` tokens each."""

        def __init__(self, batch_size: int, max_length: int, num_layers: int,
                     page_size: int = 16, device: Any = "cuda", seed: int = 0):
            if page_size <= 0 or page_size & (page_size - 1):
                raise KilnError(Status.INVALID_ARGUMENT,
                                f"page_size must be a power of two, got {page_size}")
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
            super().__init__(layers=[PagedLayer(self) for _ in range(num_layers)])

        def slots(self, start: int, count: int):
            """Flat slots (page · page_size + offset) of positions
            [start, start + count) of every sequence: [B, count]."""
            positions = torch.arange(start, start + count,
                                     device=self.table.device)[None]
            pages = self.table[self._rows, positions // self.page_size].long()
            return pages * self.page_size + positions % self.page_size

    return PagedKVCache


def __getattr__(name: str):
    if name == "PagedKVCache":
        cls = _paged_cache_class()
        globals()["PagedKVCache"] = cls
        return cls
    raise AttributeError(name)
