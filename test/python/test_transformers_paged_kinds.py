"""kiln.transformers' FP8 and ragged paged sites without a GPU or torch:
the kinds PagedKVCache asks for (`_fp8kvH` for e4m3 pages of H KV heads,
`_ragged` for its packed prefill) compile with kilnc into sites with those
facts, the sources of the kinds before them are unchanged (so their cached
packages stay valid), and head dims the FP8 kernels do not take are refused
before kilnc runs."""

from pathlib import Path

import pytest

import kiln
import kiln.transformers as kt


def test_kinds_name_window_fp8_and_packing_in_order() -> None:
    assert kt._paged_kind(16, None, 8) == "paged16_fp8kv8"
    assert kt._paged_kind(16, ragged=True) == "paged16_ragged"
    assert kt._paged_kind(32, 4096, 2, True) == "paged32_window4096_fp8kv2_ragged"
    paged = kt._PAGED_KIND.fullmatch("paged32_window4096_fp8kv2_ragged")
    assert paged.groups() == ("32", "4096", "2", "_ragged")
    with pytest.raises(kiln.KilnError, match="positive KV head count"):
        kt._paged_kind(16, None, 0)


def test_sources_before_fp8_and_packing_are_unchanged() -> None:
    """The text of a float, uniform paged site is what it was before FP8
    pages and packed prefill existed: the digests of cached packages
    still match."""
    text = kt._site_text("bf16", 64, 64, "paged16_window32", 0.125)
    assert text == (
        "func.func @attention(%q: tensor<?x?x?x64xbf16>, %kc: "
        "tensor<?x16x?x64xbf16>, %vc: tensor<?x16x?x64xbf16>, %pt: "
        "tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x?x?x64xbf16> {\n"
        "  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, "
        "window = 32 : i64, scale = 0.125 : f32} : tensor<?x?x?x64xbf16>, "
        "tensor<?x16x?x64xbf16>, tensor<?x16x?x64xbf16>, tensor<?x?xi32>, "
        "tensor<?xi32> -> tensor<?x?x?x64xbf16>\n"
        "  return %o : tensor<?x?x?x64xbf16>\n}\n")


def test_fp8_and_ragged_sites_compile(cache: Path) -> None:
    fp8 = kt.site_for("bf16", 64, 64, "paged16_fp8kv2", 0.125)
    assert fp8.paged and not fp8.ragged and fp8.causal
    assert fp8.cache_dtype == "f8e4m3" and fp8.kv_scales == "per_kv_head"
    assert fp8.kv_heads == 2 and fp8.q_heads is None and fp8.page_size == 16
    ragged = kt.site_for("f16", 128, 128, "paged16_window32_ragged", 0.125)
    assert ragged.ragged and ragged.window == 32 and ragged.cache_dtype == "f16"
    assert ragged.kv_scales is None and ragged.kv_heads is None
    both = kt.site_for("bf16", 64, 64, "paged16_fp8kv2_ragged", 0.125)
    assert both.ragged and both.cache_dtype == "f8e4m3" and both.kv_heads == 2
    # One KV head: scales of one element, which the manifest calls per
    # tensor; a launch passes one scale either way.
    single = kt.site_for("bf16", 64, 64, "paged16_fp8kv1", 0.125)
    assert single.cache_dtype == "f8e4m3" and single.kv_heads == 1


def test_fp8_head_dims_and_dtypes_are_checked(cache: Path) -> None:
    with pytest.raises(kiln.KilnError, match="multiples of 16"):
        kt.site_for("bf16", 72, 72, "paged16_fp8kv2", 0.125)
    with pytest.raises(kiln.KilnError, match="f16 or bf16"):
        kt.site_for("f32", 64, 64, "paged16_fp8kv2", 0.125)
    for kind in ("paged16_ragged_fp8kv2", "paged16_fp8", "paged16_fp8kv"):
        with pytest.raises(kiln.KilnError, match="unknown site kind"):
            kt.site_for("bf16", 64, 64, kind, 0.125)
    assert not cache.exists()  # refused before kilnc


def test_precompile_takes_fp8_and_ragged_sites(cache: Path) -> None:
    kt.precompile(dtypes=("bf16",), head_dims=(64, 72), page_sizes=(16,),
                  fp8_kv_heads=(2,), ragged=True)
    names = {p.name.rsplit("_", 1)[0] for p in cache.iterdir() if p.is_dir()}
    assert {"bf16_d64_paged16", "bf16_d64_paged16_ragged",
            "bf16_d64_paged16_fp8kv2", "bf16_d64_paged16_fp8kv2_ragged",
            "bf16_d72_paged16", "bf16_d72_paged16_ragged"} <= names
    # Head dim 72 has no FP8 kernel: left out, not an error.
    assert not any(name.startswith("bf16_d72_paged16_fp8") for name in names)
