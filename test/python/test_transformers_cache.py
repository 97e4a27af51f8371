"""kiln.transformers' site cache without a GPU or torch: the generated
sources compile with kilnc, packages land under $KILN_CACHE/<version>/, and a
second lookup loads them without compiling."""

from pathlib import Path

import pytest

import kiln
import kiln.transformers as kt


@pytest.fixture
def cache(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE", str(tmp_path / "cache"))
    kt._sites.clear()
    yield tmp_path / "cache" / kiln.__version__
    kt._sites.clear()


def test_sites_compile_into_the_versioned_cache(cache: Path) -> None:
    kt.precompile(dtypes=("bf16",), head_dims=(64,), page_sizes=(16,))
    names = sorted(p.name.rsplit("_", 1)[0] for p in cache.iterdir() if p.is_dir())
    assert names == ["bf16_d64_causal", "bf16_d64_mask", "bf16_d64_none",
                     "bf16_d64_paged16"]
    causal = kt.site_for("bf16", 64, 64, "causal", 0.125)
    assert causal.causal and causal.mask == "none"
    assert causal.q_heads is None and causal.kv_heads is None  # dynamic
    mask = kt.site_for("bf16", 64, 64, "mask", 0.125)
    assert mask.mask == "boolean" and not mask.causal
    paged = kt.site_for("bf16", 64, 64, "paged16", 0.125)
    assert paged.paged and paged.page_size == 16 and paged.causal


def test_a_cached_package_loads_without_kilnc(cache: Path, monkeypatch) -> None:
    kt.site_for("f16", 128, 128, "none", 128 ** -0.5)
    kt._sites.clear()
    monkeypatch.setenv("KILN_KILNC", "/nonexistent/kilnc")  # would fail
    site = kt.site_for("f16", 128, 128, "none", 128 ** -0.5)
    assert site.dtype == "f16" and site.head_dim == 128
