"""kiln.compile and kiln.load on the CPU: the bundled model compiled through
kilnc, the report and options it surfaces, and its errors."""

import os
import stat
from pathlib import Path

import pytest

import kiln

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gpt2_2layer.onnx"


def causal_padding_graph(path, seq=8, dim=32):
    """A decoder's attention with causal and padding masks combined
    (Where(And(tril, keep), 0, finfo.min) added to the scores), f32."""
    onnx = pytest.importorskip("onnx")
    np = pytest.importorskip("numpy")
    from onnx import TensorProto, helper, numpy_helper

    f32 = TensorProto.FLOAT
    inits = [
        numpy_helper.from_array(np.tril(np.ones((seq, seq), bool))[None, None], "tril"),
        numpy_helper.from_array(np.array([1, 2], np.int64), "axes"),
        numpy_helper.from_array(np.float32(0.0), "zero"),
        numpy_helper.from_array(np.float32(np.finfo(np.float32).min), "fill"),
        numpy_helper.from_array(np.float32(dim ** -0.5), "scale"),
    ]
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["qk"]),
        helper.make_node("Mul", ["qk", "scale"], ["scores"]),
        helper.make_node("Unsqueeze", ["attention_mask", "axes"], ["m4"]),
        helper.make_node("Cast", ["m4"], ["keep"], to=TensorProto.BOOL),
        helper.make_node("And", ["tril", "keep"], ["both"]),
        helper.make_node("Where", ["both", "zero", "fill"], ["mask"]),
        helper.make_node("Add", ["scores", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["out"]),
    ]
    shape = [1, 2, seq, dim]
    graph = helper.make_graph(
        nodes, "causal_padding",
        [helper.make_tensor_value_info(n, f32, shape) for n in ("q", "k", "v")]
        + [helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("out", f32, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_compile_bundled_model(tmp_path):
    package = kiln.compile(EXAMPLE, tmp_path / "pkg")
    assert len(package.sites) == 2
    assert len(package.report["sites"]) == 2
    assert package.report["unfused"] == []
    assert all(site.causal for site in package.sites)
    assert (tmp_path / "pkg" / "kernels.sm_90a.ptx").is_file()
    assert (tmp_path / "pkg" / "kernels.sm_80.ptx").is_file()
    again = kiln.load(tmp_path / "pkg")
    assert [s.name for s in again.sites] == [s.name for s in package.sites]


def test_compile_options_become_flags(tmp_path):
    model = causal_padding_graph(tmp_path / "decoder.onnx")
    exact = kiln.compile(model, tmp_path / "exact", target="sm_90a")
    free = kiln.compile(model, tmp_path / "free", target=["sm_90a"],
                        padded_rows="free", verify=True)
    assert exact.report["sites"][0]["masked_score"] is not None
    assert free.report["sites"][0]["masked_score"] is None
    assert free.report["sites"][0]["masking"].startswith("padded rows free")
    assert not (tmp_path / "free" / "kernels.sm_80.ptx").exists()
    assert exact.sites[0].causal and free.sites[0].causal


def plain_attention_graph(path, dim, value_dim, seq=8, heads=2):
    """softmax(Q·Kᵀ·scale)·V in f32 (what torch.onnx.export writes by
    default), with Q and K of head dim `dim` and V of `value_dim`."""
    onnx = pytest.importorskip("onnx")
    np = pytest.importorskip("numpy")
    from onnx import TensorProto, helper, numpy_helper

    f32 = TensorProto.FLOAT
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["qk"]),
        helper.make_node("Mul", ["qk", "scale"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes, "attention",
        [helper.make_tensor_value_info(n, f32, [1, heads, seq, dim])
         for n in ("q", "k")]
        + [helper.make_tensor_value_info("v", f32, [1, heads, seq, value_dim])],
        [helper.make_tensor_value_info("out", f32, [1, heads, seq, value_dim])],
        [numpy_helper.from_array(np.float32(dim ** -0.5), "scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("dim,value_dim", [(256, 256), (192, 128)])
def test_compile_f32_wide_head_dims(tmp_path, dim, value_dim):
    """An f32 export with Gemma's head dim or MLA's pair fuses, verifies on
    the CPU and compiles to the 3xTF32 kernel (it used to stop kilnc)."""
    model = plain_attention_graph(tmp_path / "model.onnx", dim, value_dim)
    package = kiln.compile(model, tmp_path / "pkg", verify=True)
    assert package.report["unfused"] == []
    (site,) = package.sites
    assert (site.head_dim, site.v_head_dim) == (dim, value_dim)
    assert site.kernel.startswith("kiln_attention_3xtf32_f32_")


def test_kilnc_arguments():
    assert kiln.compiler.kilnc_arguments(
        {"padded_rows": "free", "tensor_cores": False, "verify": True,
         "bind_dims": {"batch": 2, "seq": 16}, "seed": None}
    ) == ["--padded-rows=free", "--tensor-cores=0", "--verify",
          "--bind-dims=batch=2,seq=16"]


def test_compile_error_carries_diagnostics(tmp_path):
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(EXAMPLE.read_bytes()[:1000])
    with pytest.raises(kiln.CompileError) as caught:
        kiln.compile(truncated, tmp_path / "pkg")
    assert caught.value.returncode != 0
    assert "truncated.onnx" in caught.value.diagnostics
    assert "kilnc failed" in str(caught.value)
    assert not (tmp_path / "pkg").exists()


def test_bad_option_is_a_compile_error(tmp_path):
    with pytest.raises(kiln.CompileError) as caught:
        kiln.compile(EXAMPLE, tmp_path / "pkg", padded_rows="fast")
    assert "--padded-rows expects 'exact' or 'free'" in caught.value.diagnostics


def test_missing_model(tmp_path):
    with pytest.raises(kiln.KilnError) as caught:
        kiln.compile(tmp_path / "nothing.onnx", tmp_path / "pkg")
    assert caught.value.status == kiln.Status.NOT_FOUND


def test_kilnc_not_found(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_KILNC", str(tmp_path / "no-kilnc"))
    with pytest.raises(kiln.KilnError) as caught:
        kiln.find_kilnc()
    assert caught.value.status == kiln.Status.NOT_FOUND
    assert "KILN_KILNC" in str(caught.value)


def test_kilnc_override(tmp_path, monkeypatch):
    fake = tmp_path / "kilnc"
    fake.write_text("#!/bin/sh\necho 'kilnc: error: broken on purpose' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("KILN_KILNC", str(fake))
    assert kiln.find_kilnc() == str(fake)
    with pytest.raises(kiln.CompileError) as caught:
        kiln.compile(EXAMPLE, tmp_path / "pkg")
    assert caught.value.returncode == 3
    assert "broken on purpose" in str(caught.value)


def test_module_needs_example_inputs(tmp_path):
    torch = pytest.importorskip("torch")
    with pytest.raises(kiln.KilnError) as caught:
        kiln.compile(torch.nn.Linear(4, 4), tmp_path / "pkg")
    assert "example_inputs" in str(caught.value)


def test_compile_a_torch_module(tmp_path) -> None:
    """A torch.nn.Module exported through torch.onnx, fused and packaged."""
    torch = pytest.importorskip("torch")

    class Attention(torch.nn.Module):
        def forward(self, q, k, v):
            scores = torch.matmul(q, k.transpose(-1, -2)) * 0.125
            return torch.matmul(torch.softmax(scores, dim=-1), v)

    q = torch.randn(1, 4, 16, 64)
    try:
        package = kiln.compile(Attention(), output=tmp_path / "pkg",
                               example_inputs=(q, q, q))
    except kiln.KilnError as error:
        if "torch.onnx.export failed" in str(error):
            pytest.skip(f"this torch cannot export ONNX here: {error}")
        raise
    assert len(package.sites) == 1
    assert package.report["sites"][0]["head_dim"] == 64


def test_diagnostics_summary_puts_errors_before_opaque_warnings():
    from kiln.compiler import diagnostics_summary

    stderr = "\n".join(
        [f"g.onnx:0:0: warning: ONNX node 'linear_{i}' (aten_linear_default) is kept "
         "opaque: operator domain 'pkg.kiln.fx' is not supported" for i in range(40)]
        + ["g.onnx:0:0: error: 'tosa.reshape' op cannot reshape 12 elements to 10"])
    summary = diagnostics_summary(stderr)
    assert summary.startswith("g.onnx:0:0: error: 'tosa.reshape'")
    assert "kept opaque" not in summary
    assert diagnostics_summary("") == ""
    assert diagnostics_summary("a note\nanother") == "a note"
