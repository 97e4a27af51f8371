"""The identity behind a run-time scale factor's gradient
(kiln.torch_ops.scale_factor_grad): the factor f multiplies each score
product before the softcap, bias and masks, so dL/df = Σ⟨dQ, Q⟩ / f over the
rows it scales. Checked here in float64 by central differences of the op's
definition (docs/reference/KilnOps.md), without torch."""

import numpy as np
import pytest


def attention(q, k, v, f, *, scale, softcap=None, bias=None, causal=False):
    """out[b, h] of kiln.attention, f one value or one a head."""
    f = np.broadcast_to(np.asarray(f, float).reshape(-1), (q.shape[1],))
    s = scale * f[None, :, None, None] * (q @ np.swapaxes(k, -1, -2))
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    if bias is not None:
        s = s + bias
    if causal:
        sq, sk = s.shape[-2:]
        hidden = np.arange(sk)[None, :] > np.arange(sq)[:, None] + (sk - sq)
        s = np.where(hidden, -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def numeric(loss, x, eps=1e-6):
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        saved = x[index]
        x[index] = saved + eps
        up = loss()
        x[index] = saved - eps
        down = loss()
        x[index] = saved
        grad[index] = (up - down) / (2 * eps)
    return grad


@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("softcap,causal,with_bias", [
    (None, False, False), (5.0, True, False), (None, True, True)])
def test_the_factor_gradient_is_dq_dot_q_over_f(per_head, softcap, causal, with_bias):
    rng = np.random.default_rng(7)
    b, h, sq, sk, d = 2, 3, 5, 7, 4
    q, k, v = (rng.standard_normal(shape) for shape in
               [(b, h, sq, d), (b, h, sk, d), (b, h, sk, d)])
    g = rng.standard_normal((b, h, sq, d))
    bias = rng.standard_normal((1, h, sq, sk)) if with_bias else None
    f = np.array([0.7, 1.3, 2.1]) if per_head else np.array([0.8])
    options = dict(scale=d ** -0.5, softcap=softcap, bias=bias, causal=causal)

    def loss():
        return float((attention(q, k, v, f, **options) * g).sum())

    dq = numeric(loss, q)
    df = numeric(loss, f)
    products = dq * q
    if per_head:
        want = products.sum(axis=(0, 2, 3)) / f
    else:
        want = np.array([products.sum() / f[0]])
    np.testing.assert_allclose(df, want, rtol=1e-5, atol=1e-7)
