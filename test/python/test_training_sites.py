"""The training sites without a GPU or torch: kiln.site.training_source
compiles with kilnc into a package of two sites, the forward that keeps its
log-sum-exp and its backward; the site cache keeps them apart from the
forward-only site of the same spec; the runtime checks a backward launch of
them (the C launch's checks need no GPU)."""

from pathlib import Path

import pytest

import kiln
from kiln.runtime import AttentionArgs, AttentionGradArgs, DType
from kiln.site import Operand, SiteSpec, training_source
from kiln.site_cache import site_for, training_sites_for

CAUSAL = SiteSpec.dense("bf16", 64, 64, 0.125, causal=True)
MASKED = SiteSpec("f16", 64, 64, 0.125, mask=Operand("i1", 4),
                  bias=Operand("f32", 4), scale_factor=Operand("f32", 1))


@pytest.mark.parametrize("spec", [CAUSAL, MASKED,
                                  SiteSpec("bf16", 128, 128, 0.1, causal=True,
                                           layout="bshd", softcap=30.0)])
def test_training_sites_compile(cache: Path, spec: SiteSpec) -> None:
    forward, backward = training_sites_for(spec)
    assert forward.lse and forward.key_pass is None
    assert backward.lse and backward.key_pass
    assert backward.kernel.startswith("kiln_attention_grad_q_")
    assert backward.key_pass.startswith("kiln_attention_grad_kv_")
    assert forward.layout == backward.layout == spec.layout
    assert forward.scale_factor == backward.scale_factor == bool(
        spec.scale_factor)
    # The same spec's forward-only site is another package.
    plain = site_for(spec)
    assert not plain.lse and plain.kernel != forward.kernel
    assert training_sites_for(spec) == (forward, backward)


def test_training_source_names_the_operands() -> None:
    text = training_source(MASKED)
    assert "%o, %lse = kiln.attention %q, %k, %v mask(" in text
    assert ("kiln.attention_grad %q, %k, %v, %o, %lse, %do mask(%m"
            in text)
    assert text.count("scale_factor(%f : tensor<1xf32>)") == 2
    with pytest.raises(kiln.KilnError, match="paged site has no backward"):
        training_source(SiteSpec.paged("bf16", 64, 64, 0.125, 16))


def test_backward_launch_is_checked(cache: Path) -> None:
    forward, backward = training_sites_for(CAUSAL)
    shape = [2, 8, 100, 64]
    strides = [8 * 100 * 64, 100 * 64, 64, 1]
    kv_strides = [2 * 100 * 64, 100 * 64, 64, 1]
    a = AttentionArgs()
    for name in ("q", "k", "v", "out"):
        setattr(a, name, 0x1000)
        setattr(a, name + "_dtype", int(DType.BF16))
        getattr(a, name + "_strides")[:] = (
            kv_strides if name in ("k", "v") else strides)
    a.batch, a.q_heads, a.kv_heads = 2, 8, 2
    a.q_len, a.kv_len, a.head_dim = shape[2], 100, 64
    a.lse = 0x2000
    assert forward.check(a).grid[1:] == (2, 2)
    g = AttentionGradArgs()
    g.forward = a
    for name in ("grad_out", "grad_q", "grad_k", "grad_v"):
        setattr(g, name, 0x3000)
        setattr(g, name + "_dtype", int(DType.BF16))
        getattr(g, name + "_strides")[:] = (
            kv_strides if name in ("grad_k", "grad_v") else strides)
    g.workspace = 0x4000
    g.workspace_bytes = backward.grad_workspace_bytes(2, 8, 100)
    assert g.workspace_bytes == 2 * 8 * 100 * 4
    query_pass, key_pass = backward.check_grad(g)
    assert query_pass.grid == (2, 8, 2)  # 64 query rows a block (tensor cores)
    assert key_pass.grid == (2, 2, 2)    # 64 keys a block, KV heads
    g.grad_k_strides[1] = 0
    with pytest.raises(kiln.KilnError, match="grad_k has a zero head stride"):
        backward.check_grad(g)
