"""kiln.jax on StableHLO text saved from JAX (test/Target/StableHLO/Inputs):
the fusion report with the user's source lines, the package of the sites, and
errors; none of it needs JAX."""

import json
from pathlib import Path

import pytest

import kiln
import kiln.jax as kjax

INPUTS = Path(__file__).resolve().parents[1] / "Target" / "StableHLO" / "Inputs"


def text(name):
    return (INPUTS / f"{name}.mlir").read_text()


def test_explain_names_sites_at_source_lines():
    explanation = kjax.explain_text(text("padding_where_bf16"))
    assert len(explanation.sites) == 1 and explanation.unfused == []
    site = explanation.sites[0]
    assert site["mask"] == "boolean" and site["q_heads"] == 4
    # JAX's debug info: the line of the function that wrote the attention.
    assert site["source"] and all(":" in line for line in site["source"])
    assert any(line.endswith(".py:" + line.rsplit(":", 1)[1])
               for line in site["source"])
    described = str(explanation)
    assert "1 attention sites fused, 0 softmaxes left unfused" in described
    assert "mask=boolean" in described and site["source"][0] in described


def test_explain_gqa_with_a_group_axis():
    site, = kjax.explain_text(text("gqa_grouped_f32")).sites
    assert (site["q_heads"], site["kv_heads"]) == (8, 2)


def test_explain_unfused_softmax_has_its_reason_and_line():
    explanation = kjax.explain_text(text("sdpa_xla_bf16"))
    assert explanation.sites == []
    entry, = explanation.unfused
    assert "rank 5" in entry["reason"]
    assert entry["source"] and entry["source"][0].rsplit(":", 1)[1].isdigit()
    assert "not fused at " + entry["source"][0] in str(explanation)


def test_compile_text_writes_the_sites_package(tmp_path):
    package = kjax.compile_text(text("einsum_causal_bf16"), tmp_path / "pkg",
                                target="sm_80")
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    assert len(manifest["sites"]) == 1 and manifest["sites"][0]["causal"]
    assert package.report["sites"][0]["layout"] == "bshd"


def test_unreadable_text_raises_with_the_location():
    bad = ("func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
           "  %0 = stablehlo.custom_call @foo(%arg0) : (tensor<4xf32>) -> tensor<4xf32>\n"
           "  return %0 : tensor<4xf32>\n}\n")
    with pytest.raises(kiln.CompileError) as raised:
        kjax.explain_text(bad)
    assert "custom op 'stablehlo.custom_call' is unknown" in raised.value.diagnostics
    assert ":2:" in raised.value.diagnostics


def test_lowering_a_function_needs_jax():
    try:
        import jax  # noqa: F401
    except ImportError:
        with pytest.raises(kiln.KilnError, match="needs jax"):
            kjax.stablehlo_text(lambda x: x, 1.0)
    else:  # pragma: no cover - machines with JAX
        pytest.skip("jax is installed")
