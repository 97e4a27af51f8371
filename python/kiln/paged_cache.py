"""PagedKVCache: a ``transformers`` cache whose keys and values live in pages
that Kiln's paged attention kernel reads (see its docstring, and
docs/python.md). Its class derives from transformers' ``Cache``, so it is
built on first use (`paged_cache_class`); users take it as
``kiln.transformers.PagedKVCache`` (or ``kiln.PagedKVCache``).
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, Optional, Tuple

from . import torch_ops as kops
from .runtime import KilnError, Status
from .site import TORCH_DTYPES, SiteSpec, check_fp8_cache
from .site_cache import site_for

__all__ = ["paged_cache_class"]

#: Ragged paged sites that could not be had (PagedKVCache then runs the
#: uniform site), by spec: the reason.
_ragged_unavailable: Dict[SiteSpec, str] = {}


def _boolean_mask(mask):
    """`mask` as booleans (True: the key takes part). An additive mask
    (eager's format) hides the keys filled with -inf or the dtype's most
    negative value."""
    if mask is not None and mask.dtype.is_floating_point:
        import torch

        return mask > torch.finfo(mask.dtype).min / 2
    return mask



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
    import torch

    scaled = states.float() / scales[:, None]
    return scaled.clamp(-_FP8_MAX, _FP8_MAX).to(torch.float8_e4m3fn)



def paged_cache_class():
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
                check_fp8_cache(TORCH_DTYPES.get(str(key_states.dtype),
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
            dtype = TORCH_DTYPES[str(query.dtype)]
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
            site = site_for(SiteSpec.paged(
                dtype, head_dim, value_dim, scale, cache.page_size,
                window=window, fp8_kv_heads=fp8_kv_heads))
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
        Attention runs the FP8 site (SiteSpec.fp8_kv_heads) with those scales; the
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
            spec = SiteSpec.paged(dtype, head_dim, value_dim, scale,
                                  self.page_size, window=window,
                                  fp8_kv_heads=fp8_kv_heads, ragged=True)
            if spec in _ragged_unavailable:
                return None
            try:
                return site_for(spec)
            except KilnError as error:
                _ragged_unavailable[spec] = str(error)
                warnings.warn(f"PagedKVCache: no ragged site {spec.label} ({error}); "
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
