"""Attention written the way research code writes it: a second zoo for the
torch.compile backend, of forms the first (check_torch_compile.zoo) does not
hold. Each module is one attention layer with its projections; the forms
are the ones hand-written modules use (einsum, bmm over merged heads, masks
and biases built from index arithmetic, learned temperatures and latents,
SDPA with boolean masks, dropout left in the code for eval).

Imported by test/gpu/check_torch_compile.py (--zoo research) and
bench/bench_torch_compile.py; nothing here runs by itself.
"""

from __future__ import annotations

import math
from typing import Any, Callable, List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


class Projections(nn.Module):
    """Q, K, V and output projections; heads split by view + transpose."""

    def __init__(self, hidden: int, heads: int, kv_heads: int = 0):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads or heads
        self.head_dim = hidden // heads
        self.q = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def split(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, heads, -1).transpose(1, 2)

    def qkv(self, x: torch.Tensor, memory: Any = None):
        memory = x if memory is None else memory
        return (self.split(self.q(x), self.heads),
                self.split(self.k(memory), self.kv_heads),
                self.split(self.v(memory), self.kv_heads))

    def merge(self, out: torch.Tensor) -> torch.Tensor:
        b, h, s, d = out.shape
        return self.o(out.transpose(1, 2).reshape(b, s, h * d))


class EinsumTril(Projections):
    """einsum scores divided by sqrt(d), masked_fill where a tril of ones is
    0, softmax, einsum with V."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        scores = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(self.head_dim)
        mask = torch.tril(torch.ones(s, s, device=x.device))
        scores = scores.masked_fill(mask == 0, float("-inf"))
        return self.merge(torch.einsum("bhij,bhjd->bhid", scores.softmax(dim=-1), v))


class AlibiFromOps(Projections):
    """ALiBi whose slopes are computed in forward from arange and pow, the
    bias -m·(i - j) added to the scores, causal through masked_fill."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        exponents = torch.arange(1, self.heads + 1, device=x.device, dtype=torch.float32)
        slopes = torch.pow(2.0, -8.0 * exponents / self.heads)
        positions = torch.arange(s, device=x.device)
        distance = (positions[None, :] - positions[:, None]).float()  # j - i
        bias = (slopes[:, None, None] * distance).to(x.dtype)
        scores = q @ k.transpose(-2, -1) * self.head_dim ** -0.5 + bias
        future = torch.triu(torch.ones(s, s, dtype=torch.bool, device=x.device), 1)
        scores = scores.masked_fill(future, float("-inf"))
        probs = scores.float().softmax(-1).to(x.dtype)
        return self.merge(probs @ v)


class LatentCross(Projections):
    """Perceiver style: learned latent queries (a parameter expanded over
    the batch) attend over the inputs; no mask."""

    def __init__(self, hidden: int, heads: int, latents: int = 256):
        super().__init__(hidden, heads)
        self.latents = nn.Parameter(torch.randn(latents, hidden) * 0.02)

    def forward(self, x):
        b = x.shape[0]
        latents = self.latents[None].expand(b, -1, -1)
        q, k, v = self.qkv(latents, memory=x)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.head_dim ** -0.5
        attended = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.merge(attended).mean(dim=1, keepdim=True) + x


class SdpaBoolPadding(Projections):
    """F.scaled_dot_product_attention with a boolean key-padding mask
    (True: attend) broadcast over heads and queries."""

    def forward(self, x, attention_mask):
        q, k, v = self.qkv(x)
        keep = attention_mask[:, None, None, :].bool()
        return self.merge(F.scaled_dot_product_attention(q, k, v, attn_mask=keep))


class SoftcapDropout(Projections):
    """Soft-capped scores (cap·tanh(s/cap)), causal through an additive
    triu(-inf) mask, dropout on the probabilities (inactive in eval)."""

    def __init__(self, hidden: int, heads: int, cap: float = 30.0, p: float = 0.1):
        super().__init__(hidden, heads)
        self.cap, self.p = cap, p

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        scores = self.cap * torch.tanh(scores / self.cap)
        causal = torch.full((s, s), float("-inf"), device=x.device).triu(1)
        probs = torch.softmax(scores.float() + causal, dim=-1).to(x.dtype)
        probs = F.dropout(probs, p=self.p, training=self.training)
        return self.merge(probs @ v)


class LearnedTemperature(Projections):
    """A learned temperature: scores times a scalar parameter (a run-time
    scale), causal through torch.where on a tril."""

    def __init__(self, hidden: int, heads: int):
        super().__init__(hidden, heads)
        self.tau = nn.Parameter(torch.tensor(1.0 / math.sqrt(hidden // heads)))

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        scores = (q @ k.transpose(-1, -2)) * self.tau
        keep = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = torch.where(keep, scores, torch.finfo(scores.dtype).min)
        return self.merge(scores.softmax(-1) @ v)


class MqaEinsum(nn.Module):
    """Multi-query attention with K and V of one head and no head axis:
    einsum('bhqd,bkd->bhqk'), causal."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.kv = nn.Linear(hidden, 2 * self.head_dim, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x):
        b, s, hidden = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)
        k, v = self.kv(x).split(self.head_dim, dim=-1)
        scores = torch.einsum("bhqd,bkd->bhqk", q, k) * self.head_dim ** -0.5
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        out = torch.einsum("bhqk,bkd->bqhd", scores.softmax(-1), v)
        return self.o(out.reshape(b, s, hidden))


class RuntimeRsqrt(Projections):
    """The scale computed as a tensor at run time from the head size
    (rsqrt of a float tensor of q.size(-1)); no mask."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        scale = torch.rsqrt(torch.tensor(q.size(-1), dtype=torch.float32, device=x.device))
        scores = torch.matmul(q, k.transpose(-1, -2)).float() * scale
        return self.merge(torch.matmul(scores.softmax(-1).to(x.dtype), v))


class QkNormCausal(Projections):
    """QK-norm (LayerNorm over each head's query and key) and SDPA with
    is_causal (OLMo, ViT-22B)."""

    def __init__(self, hidden: int, heads: int):
        super().__init__(hidden, heads)
        self.q_norm = nn.LayerNorm(self.head_dim)
        self.k_norm = nn.LayerNorm(self.head_dim)

    def forward(self, x):
        q, k, v = self.qkv(x)
        q, k = self.q_norm(q), self.k_norm(k)
        return self.merge(F.scaled_dot_product_attention(q, k, v, is_causal=True))


class BmmPrefixLm(Projections):
    """Heads merged into the batch ([B·H, S, D], bmm), a prefix-LM mask:
    the first `prefix` keys seen by every query, causal after."""

    def __init__(self, hidden: int, heads: int, prefix: int = 64):
        super().__init__(hidden, heads)
        self.prefix = prefix

    def forward(self, x):
        q, k, v = self.qkv(x)
        b, h, s, d = q.shape
        rows = torch.arange(s, device=x.device)
        visible = (rows[None, :] <= rows[:, None]) | (rows[None, :] < self.prefix)
        scores = torch.bmm(q.reshape(b * h, s, d), k.reshape(b * h, s, d).transpose(1, 2))
        scores = scores.view(b, h, s, s) * d ** -0.5
        scores = scores.masked_fill(~visible, float("-inf"))
        probs = scores.softmax(-1).view(b * h, s, s)
        return self.merge(torch.bmm(probs, v.reshape(b * h, s, d)).view(b, h, s, d))


class RopeBand(Projections):
    """Rotary embeddings on Q and K, then a causal sliding window as an
    additive float mask built from triu and tril of -inf fills."""

    def __init__(self, hidden: int, heads: int, window: int = 256):
        super().__init__(hidden, heads)
        self.window = window
        inverse = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        self.register_buffer("inverse", inverse, persistent=False)

    def rotate(self, t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        first, second = t.chunk(2, dim=-1)
        return t * cos + torch.cat((-second, first), dim=-1) * sin

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        angles = torch.outer(torch.arange(s, device=x.device).float(), self.inverse)
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        hidden = torch.full((s, s), float("-inf"), device=x.device)
        mask = torch.triu(hidden, 1) + torch.tril(hidden, -self.window)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim) + mask.to(x.dtype)
        return self.merge(scores.softmax(-1) @ v)


class LocalBand(Projections):
    """Bidirectional local attention (an encoder's band |i - j| <= w) from
    an index comparison, torch.where with -inf."""

    def __init__(self, hidden: int, heads: int, window: int = 128):
        super().__init__(hidden, heads)
        self.window = window

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        rows = torch.arange(s, device=x.device)
        near = (rows[:, None] - rows[None, :]).abs() <= self.window
        scores = torch.einsum("bhqd,bhkd->bhqk", q * self.head_dim ** -0.5, k)
        scores = torch.where(near, scores, float("-inf"))
        return self.merge(torch.einsum("bhqk,bhkd->bhqd", scores.softmax(-1), v))


class GqaGroupedEinsum(Projections):
    """GQA without repeating K and V: the query heads grouped per KV head
    ([B, Hkv, G, S, D]) and einsum over the group axis, causal."""

    def __init__(self, hidden: int, heads: int, kv_heads: int = 4):
        super().__init__(hidden, heads, kv_heads)

    def forward(self, x):
        q, k, v = self.qkv(x)
        b, h, s, d = q.shape
        q = q.view(b, self.kv_heads, h // self.kv_heads, s, d)
        scores = torch.einsum("bngqd,bnkd->bngqk", q, k) * d ** -0.5
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
        out = torch.einsum("bngqk,bnkd->bngqd", scores.softmax(-1), v)
        return self.merge(out.reshape(b, h, s, d))


class SdpaScaleCausal(Projections):
    """SDPA with an explicit scale and is_causal, K and V of fewer heads
    (enable_gqa)."""

    def __init__(self, hidden: int, heads: int, kv_heads: int = 4):
        super().__init__(hidden, heads, kv_heads)

    def forward(self, x):
        q, k, v = self.qkv(x)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.1,
                                             enable_gqa=True)
        return self.merge(out)


Case = Tuple[str, nn.Module, Callable[[], Tuple[Any, ...]], int]


class ComplexRope(Projections):
    """Rotary embeddings through complex numbers (view_as_complex times a
    polar table, view_as_real), causal scores from matmul with a triu
    -inf mask added."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        s, d = x.shape[1], self.head_dim
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=x.device).float() / d))
        angles = torch.outer(torch.arange(s, device=x.device).float(), inv)
        rotation = torch.polar(torch.ones_like(angles), angles)

        def rotate(t):
            pairs = torch.view_as_complex(t.float().reshape(*t.shape[:-1], -1, 2))
            return torch.view_as_real(pairs * rotation).flatten(3).type_as(t)

        q, k = rotate(q), rotate(k)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(d)
        mask = torch.full((s, s), float("-inf"), device=x.device).triu(1)
        scores = scores + mask
        return self.merge(torch.matmul(F.softmax(scores.float(), dim=-1).type_as(q), v))


class KthSparseMlp(Projections):
    """A causal attention layer followed by an MLP whose activations are
    sparsified per token with torch.kthvalue (only the largest eighth
    kept): an op outside attention that the ONNX exporter may not know."""

    def __init__(self, hidden: int, heads: int):
        super().__init__(hidden, heads)
        self.up = nn.Linear(hidden, 2 * hidden)
        self.down = nn.Linear(2 * hidden, hidden)

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        scores = q @ k.transpose(-2, -1) * self.head_dim ** -0.5
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        y = x + self.merge(scores.softmax(-1) @ v)
        h = F.gelu(self.up(y))
        threshold = torch.kthvalue(h.float(), h.shape[-1] * 7 // 8, dim=-1,
                                   keepdim=True).values
        return y + self.down(h * (h.float() >= threshold).to(h.dtype))


class FusedQkvUnbind(nn.Module):
    """timm's ViT attention: one qkv projection reshaped to [B, S, 3, H, D],
    permuted to [3, B, H, S, D] and taken apart by `unbind(0)` (or by
    indexing, `qkv[0]`), q scaled before the product, no mask."""

    def __init__(self, hidden: int, heads: int, index: bool = False):
        super().__init__()
        self.heads, self.index = heads, index
        self.scale = (hidden // heads) ** -0.5
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, s, c = x.shape
        qkv = self.qkv(x).reshape(b, s, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = (qkv[0], qkv[1], qkv[2]) if self.index else qkv.unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        out = attn.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, s, c))


def zoo(batch: int, seq: int, device: Any, dtype: Any) -> List[Case]:
    """The research zoo at `batch` × `seq`: (name, module, inputs, sites)."""
    hidden, heads = 1024, 16

    def tokens():
        return (torch.randn(batch, seq, hidden, device=device, dtype=dtype),)

    def padded():
        mask = torch.ones(batch, seq, device=device, dtype=torch.long)
        mask[0, : seq // 4] = 0
        return tokens() + (mask,)

    return [
        ("einsum-tril", EinsumTril(hidden, heads), tokens, 1),
        ("alibi-from-ops", AlibiFromOps(hidden, heads), tokens, 1),
        ("latent-cross", LatentCross(hidden, heads), tokens, 1),
        ("sdpa-bool-padding", SdpaBoolPadding(hidden, heads), padded, 1),
        ("softcap-dropout", SoftcapDropout(hidden, heads), tokens, 1),
        ("learned-temperature", LearnedTemperature(hidden, heads), tokens, 1),
        ("mqa-einsum", MqaEinsum(hidden, heads), tokens, 1),
        ("runtime-rsqrt", RuntimeRsqrt(hidden, heads), tokens, 1),
        ("qk-norm-causal", QkNormCausal(hidden, heads), tokens, 1),
        ("bmm-prefix-lm", BmmPrefixLm(hidden, heads), tokens, 1),
        ("rope-band", RopeBand(hidden, heads), tokens, 1),
        ("local-band", LocalBand(hidden, heads), tokens, 1),
        ("gqa-grouped-einsum", GqaGroupedEinsum(hidden, heads), tokens, 1),
        ("sdpa-scale-causal", SdpaScaleCausal(hidden, heads), tokens, 1),
        ("complex-rope", ComplexRope(hidden, heads), tokens, 1),
        ("kth-sparse-mlp", KthSparseMlp(hidden, heads), tokens, 1),
        ("timm-qkv-unbind", FusedQkvUnbind(hidden, heads), tokens, 1),
        ("timm-qkv-index", FusedQkvUnbind(hidden, heads, index=True), tokens, 1),
    ]
