"""kiln.jax on StableHLO text saved from JAX (test/Target/StableHLO/Inputs):
the fusion report with the user's source lines, the package of the sites, and
errors; none of it needs JAX."""

import json
from pathlib import Path

import pytest

import kiln
import kiln.jax as kjax
from kiln.jax.report import user_lines, where

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


# Attention whose probabilities are also returned (attention weights): not
# fused, and said so at the line of the row max.
RETURNS_WEIGHTS = """
func.func public @main(%q: tensor<1x2x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x4xf32>) {
  %s = stablehlo.dot_general %q, %k, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [3] : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x8xf32> loc("model.py":10:5)
  %c = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %m = stablehlo.reduce(%s init: %c) applies stablehlo.maximum across dimensions = [3] : (tensor<1x2x8x8xf32>, tensor<f32>) -> tensor<1x2x8xf32> loc("model.py":11:5)
  %mb = stablehlo.broadcast_in_dim %m, dims = [0, 1, 2] : (tensor<1x2x8xf32>) -> tensor<1x2x8x8xf32>
  %d = stablehlo.subtract %s, %mb : tensor<1x2x8x8xf32>
  %e = stablehlo.exponential %d : tensor<1x2x8x8xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %t = stablehlo.reduce(%e init: %z) applies stablehlo.add across dimensions = [3] : (tensor<1x2x8x8xf32>, tensor<f32>) -> tensor<1x2x8xf32>
  %tb = stablehlo.broadcast_in_dim %t, dims = [0, 1, 2] : (tensor<1x2x8xf32>) -> tensor<1x2x8x8xf32>
  %p = stablehlo.divide %e, %tb : tensor<1x2x8x8xf32>
  %o = stablehlo.dot_general %p, %v, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<1x2x8x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32>
  return %p, %o : tensor<1x2x8x8xf32>, tensor<1x2x8x4xf32>
}
"""


def test_explain_unfused_softmax_has_its_reason_and_line():
    explanation = kjax.explain_text(RETURNS_WEIGHTS)
    assert explanation.sites == []
    entry, = explanation.unfused
    assert "probabilities have other users" in entry["reason"]
    assert entry["source"] == ["model.py:11"]
    assert "not fused at model.py:11" in str(explanation)


def test_compile_text_writes_the_sites_package(tmp_path):
    package = kjax.compile_text(text("einsum_causal_bf16"), tmp_path / "pkg",
                                target="sm_80")
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    assert len(manifest["sites"]) == 1 and manifest["sites"][0]["causal"]
    assert package.report["sites"][0]["layout"] == "bshd"


def test_unreadable_text_raises_with_the_location():
    bad = ("func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
           "  %0:2 = stablehlo.rng_bit_generator %arg0, algorithm = DEFAULT : "
           "(tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)\n"
           "  return %0#1 : tensor<4xf32>\n}\n")
    with pytest.raises(kiln.CompileError) as raised:
        kjax.explain_text(bad)
    assert "custom op 'stablehlo.rng_bit_generator' is unknown" in raised.value.diagnostics
    assert ":2:" in raised.value.diagnostics


def test_lowering_a_function_needs_jax():
    try:
        import jax  # noqa: F401
    except ImportError:
        with pytest.raises(kiln.KilnError, match="needs jax"):
            kjax.stablehlo_text(lambda x: x, 1.0)
    else:  # pragma: no cover - machines with JAX
        pytest.skip("jax is installed")


# kiln.jax.jit's plan of a site, from the report of a function lowered the
# way it lowers one (every step under a scope of its own): operands and
# output found as program steps or arguments.
def test_jit_plans_sites_from_step_names():
    from kiln.jax.rewrite import _argument_names, _named_arguments, _plan

    # The arguments renamed as kiln.jax.jit renames them (JAX's own names
    # need not differ).
    source = _named_arguments(text("named_steps_f32"))
    main = next(line for line in source.split("\n") if "@main(" in line)
    assert 'loc("kiln.a2")' in main and "leaves[" not in main
    report = kjax.explain_text(source).report
    arguments = _argument_names(source)
    assert {arguments[f"kiln.a{k}"] for k in range(4)} == {0, 1, 2, 3}
    site, = report["sites"]
    assert site["operands"]["key"]["value"] == "kiln.a2"
    planned = _plan(site, arguments, {})
    assert planned.why_not is None
    assert planned.operands["query"].step == 1
    assert planned.operands["key"].argument == 2
    assert planned.operands["value"].argument == 3
    assert planned.output_step == 12 and planned.output_transforms == []
    assert planned.spec.layout == "bshd" and planned.spec.head_dim == 16


def test_jit_says_why_a_site_is_not_rewritten():
    from kiln.jax.rewrite import _plan

    # JAX's ordinary lowering: the projection's values share names, so the
    # GPT-2 block's operands are no values of the function.
    site, = kjax.explain_text(text("gpt2_block_f32")).report["sites"]
    planned = _plan(site, {}, {})
    assert planned.why_not is not None and "not a value of the function" in planned.why_not


# kiln.jax.attention's site specification, from arrays (numpy stands in for
# JAX's: only shapes and dtypes are read).
def test_attention_spec_from_arrays():
    import numpy as np

    from kiln.jax.ffi import spec_of

    q = np.zeros((2, 77, 8, 64), np.float16)
    k = np.zeros((2, 131, 2, 64), np.float16)
    v = np.zeros((2, 131, 2, 32), np.float16)
    keep = np.ones((2, 1, 1, 131), bool)
    spec = spec_of(q, k, v, keep, causal=True, window=16)
    assert (spec.dtype, spec.head_dim, spec.value_dim) == ("f16", 64, 32)
    assert spec.layout == "bshd" and spec.causal and spec.window == 16
    assert spec.mask.dtype == "i1" and spec.mask.rank == 4
    assert abs(spec.scale - 64 ** -0.5) < 1e-12
    factor = np.ones((1,), np.float32)
    assert spec_of(q, k, k, scale_factor=factor, scale=0.5).scale_factor.dtype == "f32"


@pytest.mark.parametrize("case, message", [
    (dict(layout="sbhd"), "layout"),
    (dict(window=8), "window needs causal"),
    (dict(k_dim=32), "head dim"),
    (dict(dtype="int32"), "not supported"),
])
def test_attention_spec_refuses_what_no_kernel_takes(case, message):
    import numpy as np

    from kiln.jax.ffi import spec_of

    dtype = np.dtype(case.get("dtype", "float32"))
    q = np.zeros((1, 16, 4, 64), dtype)
    k = np.zeros((1, 16, 4, case.get("k_dim", 64)), dtype)
    options = {key: value for key, value in case.items() if key in ("layout", "window")}
    with pytest.raises(kiln.KilnError, match=message):
        spec_of(q, k, k, **options)


def test_arguments_renamed_whatever_their_locations():
    from kiln.jax.rewrite import _argument_names, _named_arguments

    text = ('#loc1 = loc("x")\n'
            'func.func public @main(%arg0: tensor<2xf32> loc("x"), '
            '%arg1: tensor<2xf32> {jax.arg_info = "y"} loc(#loc1), '
            '%arg2: tensor<2xf32> loc("x")) -> tensor<2xf32> {\n')
    renamed = _named_arguments(text)
    assert renamed.count('loc("kiln.a') == 3 and 'loc("kiln.a1")' in renamed
    assert {_argument_names(renamed)[f"kiln.a{k}"] for k in range(3)} == {0, 1, 2}


def test_sites_are_placed_at_the_users_lines_not_kilns():
    """kiln.jax.jit's lowering records the frame of Kiln's own rewrite that
    lowered the function; ALiBi's site lists it first. The site is placed
    at the user's line (the saved text's Kiln lines name this package's
    modules, wherever it was installed)."""
    site, = kjax.explain_text(text("alibi_steps_f32")).sites
    assert site["source"][0].endswith("kiln/jax/rewrite.py:453")
    place = where(site)
    assert "kiln/jax/" not in place and place.startswith(
        site["source"][1].rsplit(":", 1)[0])
    assert place in str(kjax.explain_text(text("alibi_steps_f32")))
    assert user_lines(["/elsewhere/kiln/jax/rewrite.py:1"]) == [
        "/elsewhere/kiln/jax/rewrite.py:1"]  # all Kiln's: kept
