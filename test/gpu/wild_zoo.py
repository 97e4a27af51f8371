"""Attention as public model code writes it, in forms neither of the other
zoos (check_torch_compile.zoo, research_zoo) holds: a third zoo for the
torch.compile backend. Each module is one attention layer with its
projections (research_zoo.Projections). Some forms are attention Kiln must
not fuse (the probabilities also returned, heads mixed before the softmax,
a per-head factor after it): their expected count of rewritten sites is 0,
and the check is that the graph still computes what it wrote.

Imported by test/gpu/check_torch_compile.py (--zoo wild) and
bench/bench_torch_compile.py; nothing here runs by itself.
"""

from __future__ import annotations

import math
from typing import Any, List

import torch
import torch.nn as nn
import torch.nn.functional as F

from research_zoo import Case, Projections


class LengthsMask(Projections):
    """Key padding from each sequence's length (`arange < lengths`), filled
    with -inf through `masked_fill` of the inverted mask."""

    def forward(self, x, lengths):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        keep = torch.arange(s, device=x.device)[None, :] < lengths[:, None]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
        return self.merge(scores.softmax(-1) @ v)


class FinfoMinWhere(Projections):
    """A causal mask applied with `torch.where` and the dtype's most negative
    finite value; the softmax taken in float32 and cast back (Hugging Face's
    newer eager attention)."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = torch.matmul(q, k.transpose(2, 3)) * self.head_dim ** -0.5
        scores = torch.where(causal, scores, torch.finfo(scores.dtype).min)
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.merge(torch.matmul(probs, v))


class TriuFiniteFill(Projections):
    """Q scaled before the product, the future filled with -1e9 (a finite
    value) from a `triu` of booleans."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        q = q * (1.0 / math.sqrt(self.head_dim))
        future = torch.triu(torch.ones(s, s, dtype=torch.bool, device=x.device), 1)
        scores = (q @ k.transpose(-1, -2)).masked_fill(future, -1e9)
        return self.merge(scores.softmax(-1) @ v)


class BaddbmmFloatMask(Projections):
    """GPT-NeoX's form: heads merged into the batch, `baddbmm` over zeros
    with `alpha = 1/sqrt(d)`, then a float causal mask (a buffer of -inf
    above the diagonal, sliced to the length) added."""

    def __init__(self, hidden: int, heads: int, max_len: int):
        super().__init__(hidden, heads)
        self.register_buffer(
            "bias", torch.full((max_len, max_len), float("-inf")).triu(1), persistent=False)

    def forward(self, x):
        q, k, v = self.qkv(x)
        b, h, s, d = q.shape
        zeros = torch.zeros(b * h, s, s, dtype=q.dtype, device=q.device)
        scores = torch.baddbmm(zeros, q.reshape(b * h, s, d),
                               k.reshape(b * h, s, d).transpose(1, 2),
                               beta=1.0, alpha=1.0 / math.sqrt(d))
        scores = scores.view(b, h, s, s) + self.bias[:s, :s].to(q.dtype)
        return self.merge(torch.softmax(scores, dim=-1) @ v)


class MqaUnsqueeze(Projections):
    """Multi-query attention with K and V of no head axis ([B, S, D]),
    broadcast over the heads by `unsqueeze(1)` inside the matmuls."""

    def __init__(self, hidden: int, heads: int):
        super().__init__(hidden, heads, kv_heads=1)

    def forward(self, x):
        q = self.split(self.q(x), self.heads)
        k, v = self.k(x), self.v(x)
        scores = q @ k.unsqueeze(1).transpose(-1, -2) / math.sqrt(self.head_dim)
        return self.merge(scores.softmax(-1) @ v.unsqueeze(1))


class BshdFloatSoftmax(Projections):
    """Q, K, V kept as [B, S, H, D]; einsum to [B, H, Sq, Sk], a causal mask
    from a float `tril`, the softmax in float32, einsum back to
    [B, S, H, D]."""

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, -1)
        k = self.k(x).view(b, s, self.heads, -1)
        v = self.v(x).view(b, s, self.heads, -1)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * self.head_dim ** -0.5
        keep = torch.ones(s, s, device=x.device).tril().bool()
        scores = scores.masked_fill(~keep, float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(v.dtype)
        out = torch.einsum("bhqk,bkhd->bqhd", probs, v)
        return self.o(out.reshape(b, s, -1))


class CosineAttention(Projections):
    """Swin-v2's cosine attention: Q and K normalised, the scores multiplied
    by a learned per-head logit scale, clamped and exponentiated."""

    def __init__(self, hidden: int, heads: int):
        super().__init__(hidden, heads)
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones(heads, 1, 1)))

    def forward(self, x):
        q, k, v = self.qkv(x)
        scores = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        scale = torch.clamp(self.logit_scale, max=math.log(1.0 / 0.01)).exp()
        return self.merge((scores * scale).softmax(-1) @ v)


class GqaCosine(Projections):
    """Cosine attention with grouped queries: 16 query heads over 4 K/V
    heads repeated by `repeat_interleave`, the scores causal and multiplied
    by a learned logit scale per query head ([H, 1, 1])."""

    def __init__(self, hidden: int, heads: int):
        super().__init__(hidden, heads, kv_heads=heads // 4)
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones(heads, 1, 1))
                                        + 0.1 * torch.randn(heads, 1, 1))

    def forward(self, x):
        q, k, v = self.qkv(x)
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        s = x.shape[1]
        scores = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        scores = scores * torch.clamp(self.logit_scale, max=math.log(100.0)).exp()
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        return self.merge(scores.masked_fill(future, float("-inf")).softmax(-1) @ v)


class RelativeTable(Projections):
    """A learned relative-position table ([2S-1, H]) gathered by an index
    buffer into a dense [H, S, S] bias (Swin's and many ViTs' form)."""

    def __init__(self, hidden: int, heads: int, seq: int):
        super().__init__(hidden, heads)
        self.table = nn.Parameter(0.02 * torch.randn(2 * seq - 1, heads))
        positions = torch.arange(seq)
        self.register_buffer("index", positions[:, None] - positions[None, :] + seq - 1,
                             persistent=False)

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        bias = self.table[self.index[:s, :s].reshape(-1)].view(s, s, -1).permute(2, 0, 1)
        scores = q @ k.transpose(-2, -1) * self.head_dim ** -0.5 + bias.unsqueeze(0)
        return self.merge(scores.softmax(-1) @ v)


class SwinWindow(nn.Module):
    """Swin's shifted-window attention as its reference code writes it: the
    tokens rolled by half a window, windows folded into the batch, a
    relative-position bias gathered from a table, the scores viewed as
    [B, nW, H, N, N] to add the shifted windows' mask ([nW, N, N], 0 or
    -100, a buffer) and viewed back for the softmax. Windows are runs of N
    tokens here (N the largest of a few sizes that divides the length)."""

    def __init__(self, hidden: int, heads: int, seq: int):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.n = next(n for n in (64, 50, 49, 40, 32, 25, 16, 10, 8, 5, 4, 2, 1)
                      if seq % n == 0)
        self.shift = self.n // 2
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.table = nn.Parameter(0.02 * torch.randn(2 * self.n - 1, heads))
        positions = torch.arange(self.n)
        self.register_buffer("index", positions[:, None] - positions[None, :] + self.n - 1,
                             persistent=False)
        # After the roll, the last window holds the sequence's end and its
        # start: tokens of the two parts do not see each other.
        wrapped = (torch.arange(seq) >= seq - self.shift).view(seq // self.n, self.n)
        mask = wrapped[:, :, None] != wrapped[:, None, :]
        self.register_buffer("window_mask", mask.float() * -100.0, persistent=False)

    def forward(self, x):
        b, s, c = x.shape
        x = torch.roll(x, shifts=-self.shift, dims=1)
        windows = x.reshape(-1, self.n, c)
        b_, n, _ = windows.shape
        qkv = self.qkv(windows).reshape(b_, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * self.head_dim ** -0.5) @ k.transpose(-2, -1)
        bias = self.table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1).contiguous()
        attn = attn + bias.unsqueeze(0)
        nw = self.window_mask.shape[0]
        attn = attn.view(b_ // nw, nw, self.heads, n, n) + self.window_mask.unsqueeze(1).unsqueeze(0)
        attn = attn.view(-1, self.heads, n, n).softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b_, n, c)
        return torch.roll(self.proj(out).view(b, s, c), shifts=self.shift, dims=1)


class ConformerRelPos(nn.Module):
    """WeNet's relative-position attention (Transformer-XL's, in a Conformer):
    content scores (q + u)·Kᵀ, position scores (q + v)·Pᵀ over 2T - 1
    sinusoidal positions shifted by a zero column and views, `(AC + BD) /
    sqrt(d)`, the padding filled with -inf and the probabilities zeroed
    again after the softmax (`softmax(...).masked_fill(mask, 0.0)`)."""

    def __init__(self, hidden: int, heads: int, seq: int):
        super().__init__()
        self.heads, self.head_dim, self.max_len = heads, hidden // heads, seq
        self.linear_q = nn.Linear(hidden, hidden)
        self.linear_k = nn.Linear(hidden, hidden)
        self.linear_v = nn.Linear(hidden, hidden)
        self.linear_out = nn.Linear(hidden, hidden)
        self.linear_pos = nn.Linear(hidden, hidden, bias=False)
        self.pos_bias_u = nn.Parameter(0.02 * torch.randn(heads, self.head_dim))
        self.pos_bias_v = nn.Parameter(0.02 * torch.randn(heads, self.head_dim))
        positions = torch.arange(seq - 1, -seq, -1.0)[:, None]
        freqs = torch.exp(torch.arange(0, hidden, 2) * (-math.log(10000.0) / hidden))
        table = torch.zeros(2 * seq - 1, hidden)
        table[:, 0::2] = torch.sin(positions * freqs)
        table[:, 1::2] = torch.cos(positions * freqs)
        self.register_buffer("pos_emb", table[None], persistent=False)

    @staticmethod
    def rel_shift(x):
        zero_pad = torch.zeros((*x.size()[:3], 1), device=x.device, dtype=x.dtype)
        x_padded = torch.cat([zero_pad, x], dim=-1)
        x_padded = x_padded.view(*x.size()[:2], x.size(3) + 1, x.size(2))
        return x_padded[:, :, 1:].view_as(x)[:, :, :, : x.size(-1) // 2 + 1]

    def forward(self, x, padding):
        b, t, _ = x.shape
        h, d = self.heads, self.head_dim
        q = self.linear_q(x).view(b, t, h, d)
        k = self.linear_k(x).view(b, t, h, d).transpose(1, 2)
        v = self.linear_v(x).view(b, t, h, d).transpose(1, 2)
        pos = self.pos_emb[:, self.max_len - t:self.max_len + t - 1]
        p = self.linear_pos(pos).view(1, -1, h, d).transpose(1, 2)
        ac = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))
        bd = self.rel_shift(torch.matmul((q + self.pos_bias_v).transpose(1, 2),
                                         p.transpose(-2, -1)))
        scores = (ac + bd) / math.sqrt(d)
        mask = (padding == 0)[:, None, None, :]
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1).masked_fill(mask, 0.0)
        return self.linear_out(torch.matmul(attn, v).transpose(1, 2).reshape(b, t, h * d))


class ReturnsWeights(Projections):
    """The attention probabilities are used beside the output (their mean
    over heads added to the result, as code that also returns them for
    inspection does): the scores must be materialised, so Kiln must leave
    the site as it is."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        probs = (q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)).softmax(-1)
        out = self.merge(probs @ v)
        return out + probs.mean(dim=1).sum(dim=-1, keepdim=True).to(out.dtype)


class HeadMask(Projections):
    """Hugging Face's `head_mask`: the probabilities multiplied by a per-head
    factor after the softmax (one head switched off)."""

    def __init__(self, hidden: int, heads: int):
        super().__init__(hidden, heads)
        mask = torch.ones(heads)
        mask[1] = 0.0
        self.register_buffer("head_mask", mask, persistent=False)

    def forward(self, x):
        q, k, v = self.qkv(x)
        probs = (q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)).softmax(-1)
        probs = probs * self.head_mask[None, :, None, None].to(probs.dtype)
        return self.merge(probs @ v)


class TalkingHeads(Projections):
    """Talking-heads attention: the scores of all heads mixed by a learned
    [H, H] matrix before the softmax. No head's softmax reads its own
    head's scores alone, so this is no attention site Kiln can take."""

    def __init__(self, hidden: int, heads: int):
        super().__init__(hidden, heads)
        self.mix = nn.Parameter(torch.eye(heads) + 0.05 * torch.randn(heads, heads))

    def forward(self, x):
        q, k, v = self.qkv(x)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(self.head_dim)
        scores = torch.einsum("bhqk,hg->bgqk", scores, self.mix.to(scores.dtype))
        return self.merge(scores.softmax(-1) @ v)


class ManualSoftmax(Projections):
    """The softmax written out: the row's maximum subtracted, exp, divided
    by the row's sum; a causal mask from comparing two `arange`s."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        positions = torch.arange(s, device=x.device)
        causal = positions[:, None] >= positions[None, :]
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        scores = scores.masked_fill(~causal, float("-inf"))
        weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
        return self.merge((weights / weights.sum(dim=-1, keepdim=True)) @ v)


class UpcastScores(Projections):
    """Q and K upcast to float32 before their product (numerics-minded
    research code), the softmax in float32, the probabilities cast back to
    bf16 for the product with V."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) / math.sqrt(self.head_dim)
        return self.merge(torch.matmul(scores.softmax(-1).to(v.dtype), v))


class WhisperScaled(Projections):
    """Whisper's form: Q and K each multiplied by d^-0.25, K permuted
    straight to [B, H, D, S], a float32 buffer of -inf above the diagonal
    added (the sum promoted to float32), the softmax in float32 cast back."""

    def __init__(self, hidden: int, heads: int, max_len: int):
        super().__init__(hidden, heads)
        self.register_buffer("mask", torch.full((max_len, max_len), float("-inf")).triu(1),
                             persistent=False)

    def forward(self, x):
        b, s, _ = x.shape
        scale = self.head_dim ** -0.25
        q = self.q(x).view(b, s, self.heads, -1).permute(0, 2, 1, 3) * scale
        k = self.k(x).view(b, s, self.heads, -1).permute(0, 2, 3, 1) * scale
        v = self.v(x).view(b, s, self.heads, -1).permute(0, 2, 1, 3)
        qk = (q @ k + self.mask[:s, :s]).float()
        w = F.softmax(qk, dim=-1).to(q.dtype)
        return self.o((w @ v).permute(0, 2, 1, 3).flatten(start_dim=2))


class HeadsInBatchEinsum(Projections):
    """Latent diffusion's CrossAttention: heads folded into the batch
    ([B*H, S, D]), 3-d einsums, the scale multiplied after the product."""

    def forward(self, x):
        b, s, _ = x.shape
        h, d = self.heads, self.head_dim

        def fold(t):
            return t.view(b, s, h, d).permute(0, 2, 1, 3).reshape(b * h, s, d)

        q, k, v = fold(self.q(x)), fold(self.k(x)), fold(self.v(x))
        sim = torch.einsum("b i d, b j d -> b i j", q, k) * d ** -0.5
        out = torch.einsum("b i j, b j d -> b i d", sim.softmax(dim=-1), v)
        return self.o(out.view(b, h, s, d).permute(0, 2, 1, 3).reshape(b, s, h * d))


class MaxValuesSoftmax(Projections):
    """The softmax written out with the row's maximum taken by
    `.max(dim=-1, keepdim=True).values` (a max with indices), a causal
    mask from `tril`."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).tril().logical_not()
        scores = scores.masked_fill(future, float("-inf"))
        weights = (scores - scores.max(dim=-1, keepdim=True).values).exp()
        return self.merge((weights / weights.sum(dim=-1, keepdim=True)) @ v)


class LogsumexpSoftmax(Projections):
    """The softmax as exp(scores - logsumexp(scores)), causal by a `tril`
    of booleans."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = (q @ k.transpose(-2, -1)) * self.head_dim ** -0.5
        scores = scores.masked_fill(~causal, float("-inf"))
        probs = torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))
        return self.merge(probs @ v)


class StableSoftmax(Projections):
    """The row's maximum subtracted (detached) before `softmax` itself,
    as code ported from DALL-E/CogView does ("stable softmax")."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        scores = (q * self.head_dim ** -0.5) @ k.transpose(-2, -1)
        scores = scores - scores.amax(dim=-1, keepdim=True).detach()
        return self.merge(scores.softmax(dim=-1) @ v)


class AdditivePaddingDim3(Projections):
    """BERT's older form: the padding mask made additive as
    (1 - mask) * finfo.min, the softmax over dim=3 (a positive axis) in
    float32, `type_as` back."""

    def forward(self, x, padding):
        q, k, v = self.qkv(x)
        additive = (1.0 - padding[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + additive
        probs = F.softmax(scores, dim=3, dtype=torch.float32).type_as(v)
        return self.merge(torch.matmul(probs, v))


class SdpaEnableGqa(Projections):
    """SDPA on 4 K/V heads for 16 query heads through `enable_gqa=True`,
    causal."""

    def __init__(self, hidden: int, heads: int):
        super().__init__(hidden, heads, kv_heads=heads // 4)

    def forward(self, x):
        q, k, v = self.qkv(x)
        return self.merge(F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                         enable_gqa=True))


class SdpaAlibiMask(Projections):
    """ALiBi passed to SDPA as a float `attn_mask`: the slopes' distance
    term plus -inf above the diagonal, one [H, S, S] tensor."""

    def __init__(self, hidden: int, heads: int):
        super().__init__(hidden, heads)
        self.register_buffer("slopes", 2.0 ** (-8.0 * torch.arange(1, heads + 1) / heads),
                             persistent=False)

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        positions = torch.arange(s, device=x.device)
        distance = (positions[None, :] - positions[:, None]).to(torch.float32)
        bias = self.slopes[:, None, None] * distance
        bias = bias.masked_fill(distance > 0, float("-inf")).to(q.dtype)
        return self.merge(F.scaled_dot_product_attention(q, k, v, attn_mask=bias))


class NeoLocalFloat(Projections):
    """GPT-Neo's form: Q and K upcast to float32, no scale, a causal window
    of 256 keys applied with `torch.where` and float32's most negative
    value, the probabilities cast to V's dtype."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        positions = torch.arange(s, device=x.device)
        distance = positions[:, None] - positions[None, :]
        keep = (distance >= 0) & (distance < 256)
        scores = torch.matmul(q.to(torch.float32), k.to(torch.float32).transpose(-1, -2))
        scores = torch.where(keep, scores, torch.finfo(scores.dtype).min)
        return self.merge(torch.matmul(scores.softmax(dim=-1).to(v.dtype), v))


class NeoBufferBand(Projections):
    """Hugging Face's GPT-Neo local layer as written: the band kept as a
    boolean buffer (`tril` of ones, minus the keys `window` or more behind,
    by `bitwise_xor`), sliced to the length, applied with `torch.where` and
    float32's most negative value as a 0-d tensor; Q and K upcast, no
    scale. Dynamo passes the buffer as a graph input."""

    def __init__(self, hidden: int, heads: int, max_len: int, window: int = 256):
        super().__init__(hidden, heads)
        band = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
        band = torch.bitwise_xor(band, torch.tril(band, -window))
        self.register_buffer("bias", band.view(1, 1, max_len, max_len), persistent=False)

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        scores = torch.matmul(q.to(torch.float32), k.to(torch.float32).transpose(-1, -2))
        keep = self.bias[:, :, 0:s, :s]
        fill = torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype,
                            device=scores.device)
        scores = torch.where(keep, scores, fill)
        return self.merge(torch.matmul(scores.softmax(dim=-1).to(v.dtype), v))


class PastKvConcat(Projections):
    """New tokens attending over a kept prefix: K and V concatenated after a
    buffer of earlier keys and values (half the sequence), the causal mask
    aligned to the bottom right (`tril(diagonal=past)`)."""

    def __init__(self, hidden: int, heads: int, past: int):
        super().__init__(hidden, heads)
        self.register_buffer("past_k", torch.randn(1, heads, past, self.head_dim),
                             persistent=False)
        self.register_buffer("past_v", torch.randn(1, heads, past, self.head_dim),
                             persistent=False)

    def forward(self, x):
        q, k, v = self.qkv(x)
        b, s = x.shape[:2]
        past = self.past_k.shape[2]
        k = torch.cat([self.past_k.expand(b, -1, -1, -1), k], dim=2)
        v = torch.cat([self.past_v.expand(b, -1, -1, -1), v], dim=2)
        keep = torch.ones(s, past + s, dtype=torch.bool, device=x.device).tril(diagonal=past)
        scores = (q @ k.transpose(-2, -1)) * self.head_dim ** -0.5
        return self.merge(scores.masked_fill(~keep, float("-inf")).softmax(-1) @ v)


class PastInputs(Projections):
    """A step over a KV cache passed in (a legacy tuple cache): the past
    keys and values are arguments, concatenated with the new ones, the
    causal mask aligned to the bottom right. Kiln's report marks the site
    as reading a KV cache input; it is rewritten from the concatenations."""

    def forward(self, x, past_k, past_v):
        q, k, v = self.qkv(x)
        s, past = x.shape[1], past_k.shape[2]
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        keep = torch.ones(s, past + s, dtype=torch.bool, device=x.device).tril(diagonal=past)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
        return self.merge(torch.softmax(scores, dim=-1) @ v)


class Fp8Dequantised(Projections):
    """Q, K and V fake-quantised to float8 e4m3 before the products, as
    FP8-aware training and quantised checkpoints write it: each divided by
    a per-tensor scale (a buffer), clamped, cast to `float8_e4m3fn`, cast
    back and multiplied by the scale; causal by `is_causal` of SDPA's
    reference form written out. Kiln fuses the site on the dequantised
    values (no e4m3 kernel yet)."""

    def __init__(self, hidden: int, heads: int):
        super().__init__(hidden, heads)
        self.register_buffer("scales", torch.tensor([0.02, 0.025, 0.03]), persistent=False)

    def forward(self, x):
        q, k, v = self.qkv(x)

        def fake(t, scale):
            t8 = (t / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
            return t8.to(t.dtype) * scale

        q, k, v = (fake(t, self.scales[i]) for i, t in enumerate((q, k, v)))
        s = x.shape[1]
        scores = (q @ k.transpose(-2, -1)) * self.head_dim ** -0.5
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        return self.merge(torch.softmax(scores.float(), dim=-1).to(v.dtype) @ v)


class InPlaceNullKv(Projections):
    """lucidrains' style: a learned null key and value prepended to every
    sequence, einsum scores, the causal future filled in place
    (`masked_fill_`) with -finfo.max, the row's maximum subtracted
    (detached) before the softmax."""

    def __init__(self, hidden: int, heads: int):
        super().__init__(hidden, heads)
        self.null_kv = nn.Parameter(torch.randn(2, heads, 1, self.head_dim))

    def forward(self, x):
        q, k, v = self.qkv(x)
        b = x.shape[0]
        nk, nv = (t.unsqueeze(0).expand(b, -1, -1, -1) for t in self.null_kv.unbind(0))
        k, v = torch.cat((nk, k), dim=-2), torch.cat((nv, v), dim=-2)
        sim = torch.einsum("b h i d, b h j d -> b h i j", q * self.head_dim ** -0.5, k)
        i, j = sim.shape[-2:]
        future = torch.ones((i, j), dtype=torch.bool, device=x.device).triu(j - i + 1)
        sim.masked_fill_(future, -torch.finfo(sim.dtype).max)
        sim = sim - sim.amax(dim=-1, keepdim=True).detach()
        out = torch.einsum("b h i j, b h j d -> b h i d", sim.softmax(dim=-1), v)
        return self.merge(out)


class XglmClamp(Projections):
    """XGLM's eager attention: Q scaled, a padding-and-causal mask built with
    `where(keep, 0, finfo.min)` and added, then `torch.max(scores,
    finfo.min)` so that no score is -inf."""

    def forward(self, x, padding):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        q = q * self.head_dim ** -0.5
        scores = q @ k.transpose(-1, -2)
        keep = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        keep = keep[None, None] & padding[:, None, None, :].bool()
        low = torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype, device=x.device)
        scores = scores + torch.where(keep, torch.zeros_like(low), low)
        scores = torch.max(scores, low)
        return self.merge(scores.softmax(-1) @ v)


class CodegenOrder(Projections):
    """CodeGen's eager attention: Q rotated in float32 and kept so, K
    rounded to the model's type and both upcast, the mask added before the
    division by sqrt(d), the probabilities cast back for P·V."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        angle = torch.arange(s, device=x.device, dtype=torch.float32)[:, None] * 1e-2
        q = q.float() * torch.cos(angle) + q.float().roll(1, -1) * torch.sin(angle)
        k = (k.float() * torch.cos(angle)).to(x.dtype)
        scores = torch.matmul(q, k.float().transpose(-1, -2))
        keep = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        low = torch.tensor(torch.finfo(x.dtype).min, dtype=x.dtype, device=x.device)
        scores = scores + torch.where(keep, torch.zeros_like(low), low)
        scores = scores / math.sqrt(self.head_dim)
        probs = scores.softmax(-1).to(v.dtype)
        return self.merge(torch.matmul(probs, v))


class TorchMultiheadAttention(nn.Module):
    """`nn.MultiheadAttention` as written most often: the default
    `need_weights=True` (its averaged weights discarded by the caller), a
    boolean causal `attn_mask`."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.attention = nn.MultiheadAttention(hidden, heads, batch_first=True)

    def forward(self, x):
        s = x.shape[1]
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        out, _ = self.attention(x, x, x, attn_mask=future)
        return out


class DiffusersBaddbmm(Projections):
    """Diffusers' attention processor: heads folded into the batch, the
    scores from `baddbmm` over an uninitialised `torch.empty` with beta=0
    and the scale as alpha, the softmax upcast to float32; cross-attention
    to a context of another length (a text encoder's tokens)."""

    def forward(self, x, context):
        b, s, _ = x.shape
        h, d = self.heads, self.head_dim

        def fold(t):
            n = t.shape[1]
            return t.view(b, n, h, d).permute(0, 2, 1, 3).reshape(b * h, n, d)

        q, k, v = fold(self.q(x)), fold(self.k(context)), fold(self.v(context))
        empty = torch.empty(q.shape[0], q.shape[1], k.shape[1], dtype=q.dtype, device=q.device)
        scores = torch.baddbmm(empty, q, k.transpose(-1, -2), beta=0, alpha=d ** -0.5)
        probs = scores.float().softmax(dim=-1).to(q.dtype)
        out = torch.bmm(probs, v)
        return self.o(out.view(b, h, s, d).permute(0, 2, 1, 3).reshape(b, s, h * d))


class XTransformersCausal(Projections):
    """x-transformers' form: `einsum('b h i d, b h j d -> b h i j')`, the
    causal mask as `ones(i, j).triu(j - i + 1)` filled with -finfo.max, the
    softmax in float32."""

    def forward(self, x):
        q, k, v = self.qkv(x)
        dots = torch.einsum("b h i d, b h j d -> b h i j", q, k) * self.head_dim ** -0.5
        i, j = dots.shape[-2:]
        mask_value = -torch.finfo(dots.dtype).max
        causal = torch.ones((i, j), dtype=torch.bool, device=x.device).triu(j - i + 1)
        dots = dots.masked_fill(causal, mask_value)
        attn = dots.softmax(dim=-1, dtype=torch.float32).to(q.dtype)
        return self.merge(torch.einsum("b h i j, b h j d -> b h i d", attn, v))


class SegmentIdsCausal(Projections):
    """Packed documents: a key is seen where its segment id equals the
    query's and it is not in the future; -inf through `masked_fill`."""

    def forward(self, x, segments):
        q, k, v = self.qkv(x)
        s = x.shape[1]
        same = segments[:, :, None] == segments[:, None, :]
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = (q @ k.transpose(-2, -1)) * self.head_dim ** -0.5
        scores = scores.masked_fill(~(same & causal)[:, None], float("-inf"))
        return self.merge(scores.softmax(-1) @ v)


class MhaKeyPadding(nn.Module):
    """`nn.MultiheadAttention` with a boolean `key_padding_mask` and
    `need_weights=False`."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.attention = nn.MultiheadAttention(hidden, heads, batch_first=True)

    def forward(self, x, padding):
        out, _ = self.attention(x, x, x, key_padding_mask=padding == 0, need_weights=False)
        return out


class TorchEncoderLayer(nn.Module):
    """`nn.TransformerEncoderLayer` (pre-norm, batch first) with a causal
    float mask from `nn.Transformer.generate_square_subsequent_mask`."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.1,
                                                batch_first=True, norm_first=True)

    def forward(self, x):
        mask = nn.Transformer.generate_square_subsequent_mask(
            x.shape[1], device=x.device, dtype=x.dtype)
        return self.layer(x, src_mask=mask, is_causal=True)


def zoo(batch: int, seq: int, device: Any, dtype: Any) -> List[Case]:
    """The wild zoo at `batch` × `seq`: (name, module, inputs, sites
    expected rewritten)."""
    hidden, heads = 1024, 16

    def tokens():
        return (torch.randn(batch, seq, hidden, device=device, dtype=dtype),)

    def with_lengths():
        lengths = torch.full((batch,), seq, device=device, dtype=torch.long)
        lengths[0] = max(1, seq * 3 // 4)
        return tokens() + (lengths,)

    def with_padding():
        padding = torch.ones(batch, seq, device=device, dtype=torch.long)
        padding[0, seq - seq // 8:] = 0  # right padding on the first sequence
        return tokens() + (padding,)

    def with_context():
        return tokens() + (torch.randn(batch, 77, hidden, device=device, dtype=dtype),)

    def with_segments():
        segments = torch.ones(batch, seq, device=device, dtype=torch.long)
        segments[:, seq // 3:] = 2  # two documents a row
        segments[0, seq * 2 // 3:] = 3  # three in the first
        return tokens() + (segments,)

    def with_past():
        past = max(seq // 2, 32)
        shape = (batch, heads, past, hidden // heads)
        return tokens() + (torch.randn(shape, device=device, dtype=dtype),
                           torch.randn(shape, device=device, dtype=dtype))

    return [
        ("lengths-mask", LengthsMask(hidden, heads), with_lengths, 1),
        ("finfo-min-where", FinfoMinWhere(hidden, heads), tokens, 1),
        ("triu-finite-fill", TriuFiniteFill(hidden, heads), tokens, 1),
        ("baddbmm-float-mask", BaddbmmFloatMask(hidden, heads, max(seq, 64)), tokens, 1),
        ("mqa-unsqueeze", MqaUnsqueeze(hidden, heads), tokens, 1),
        ("bshd-float-softmax", BshdFloatSoftmax(hidden, heads), tokens, 1),
        ("cosine-attention", CosineAttention(hidden, heads), tokens, 1),
        ("gqa-cosine", GqaCosine(hidden, heads), tokens, 1),
        ("relative-table", RelativeTable(hidden, heads, max(seq, 64)), tokens, 1),
        ("manual-softmax", ManualSoftmax(hidden, heads), tokens, 1),
        ("upcast-scores", UpcastScores(hidden, heads), tokens, 1),
        ("whisper-scaled", WhisperScaled(hidden, heads, max(seq, 64)), tokens, 1),
        ("heads-in-batch-einsum", HeadsInBatchEinsum(hidden, heads), tokens, 1),
        ("logsumexp-softmax", LogsumexpSoftmax(hidden, heads), tokens, 1),
        ("max-values-softmax", MaxValuesSoftmax(hidden, heads), tokens, 1),
        ("stable-softmax", StableSoftmax(hidden, heads), tokens, 1),
        ("additive-padding-dim3", AdditivePaddingDim3(hidden, heads), with_padding, 1),
        ("sdpa-enable-gqa", SdpaEnableGqa(hidden, heads), tokens, 1),
        ("sdpa-alibi-mask", SdpaAlibiMask(hidden, heads), tokens, 1),
        ("neo-local-float", NeoLocalFloat(hidden, heads), tokens, 1),
        ("neo-buffer-band", NeoBufferBand(hidden, heads, max(2 * seq, 64)), tokens, 1),
        ("past-kv-concat", PastKvConcat(hidden, heads, max(seq // 2, 32)), tokens, 1),
        ("in-place-null-kv", InPlaceNullKv(hidden, heads), tokens, 1),
        ("past-inputs", PastInputs(hidden, heads), with_past, 1),
        ("fp8-dequantised", Fp8Dequantised(hidden, heads), tokens, 1),
        ("xglm-clamp", XglmClamp(hidden, heads), with_padding, 1),
        ("codegen-order", CodegenOrder(hidden, heads), tokens, 1),
        ("swin-window", SwinWindow(hidden, heads, seq), tokens, 1),
        ("conformer-relpos", ConformerRelPos(hidden, heads, max(seq, 64)), with_padding, 1),
        ("torch-mha", TorchMultiheadAttention(hidden, heads), tokens, 1),
        ("diffusers-baddbmm", DiffusersBaddbmm(hidden, heads), with_context, 1),
        ("xtransformers-causal", XTransformersCausal(hidden, heads), tokens, 1),
        ("segment-ids-causal", SegmentIdsCausal(hidden, heads), with_segments, 1),
        ("mha-key-padding", MhaKeyPadding(hidden, heads), with_padding, 1),
        ("torch-encoder-layer", TorchEncoderLayer(hidden, heads), tokens, 1),
        ("returns-weights", ReturnsWeights(hidden, heads), tokens, 0),
        ("head-mask", HeadMask(hidden, heads), tokens, 0),
        ("talking-heads", TalkingHeads(hidden, heads), tokens, 0),
    ]
