"""Kiln's PyTorch custom ops without a GPU: their fake implementations on the
meta device and under torch.compile. Skipped without torch 2.4 or later."""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "register_fake"):
    pytest.skip("torch.library.register_fake needs torch 2.4 or later",
                allow_module_level=True)

import kiln  # noqa: E402
import kiln.torch_ops as kops  # noqa: E402

from package_util import valid_manifest, write_package  # noqa: E402


@pytest.fixture
def package(tmp_path: Path):
    with kiln.Package(write_package(tmp_path / "pkg", valid_manifest())) as opened:
        kops.register(opened)
        yield opened


def test_fake_attention_shapes(package) -> None:
    site = package.site("attention_0")
    meta = dict(device="meta", dtype=torch.bfloat16)
    q = torch.empty(2, 8, 5, 64, **meta)
    k = torch.empty(2, 2, 9, 64, **meta)
    v = torch.empty(2, 2, 9, 32, **meta)
    out = torch.ops.kiln.attention(q, k, v, None, None, None, kops.handle(site), 0)
    assert out.shape == (2, 8, 5, 32)
    assert out.device.type == "meta" and out.dtype == torch.bfloat16


def test_fake_paged_attention_shapes(package) -> None:
    site = package.site("attention_1")
    meta = dict(device="meta", dtype=torch.float16)
    q = torch.empty(3, 8, 1, 128, **meta)
    cache = torch.empty(40, 16, 2, 128, **meta)
    table = torch.empty(3, 5, dtype=torch.int32, device="meta")
    lens = torch.empty(3, dtype=torch.int32, device="meta")
    out = kops.paged_attention(site, q, cache, cache, table, lens)
    assert out.shape == (3, 8, 1, 128)


def test_handles_are_stable(package) -> None:
    site = package.site("attention_2")
    assert kops.handle(site) == kops.handle(site)
    with pytest.raises(kiln.KilnError, match="no Kiln site has handle"):
        kops._site(10 ** 6)


def test_compile_traces_through_the_op(package) -> None:
    site = package.site("attention_0")

    def layer(q, k, v):
        return kops.attention(site, q * 2, k, v).sum(-1)

    compiled = torch.compile(layer, fullgraph=True, backend="eager")
    meta = dict(device="meta", dtype=torch.bfloat16)
    out = compiled(torch.empty(1, 8, 4, 64, **meta), torch.empty(1, 2, 4, 64, **meta),
                   torch.empty(1, 2, 4, 64, **meta))
    assert out.shape == (1, 8, 4)
