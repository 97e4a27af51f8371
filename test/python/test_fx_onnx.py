"""kiln.fx_onnx without torch: FX graphs described by hand (nodes with the
targets, arguments and result types torch.export writes) are written as
ONNX, and kilnc's fusion report of that ONNX names the graph's own nodes as
each site's operands and output."""

import json
import math
import subprocess
from pathlib import Path
from typing import Any, List, Optional

import pytest

import kiln
from kiln import fx_onnx


class Val:
    """A node's traced value: its shape and dtype, as FakeTensor gives."""

    def __init__(self, shape, dtype: str) -> None:
        self.shape, self.dtype = tuple(shape), dtype


class Node:
    def __init__(self, op: str, name: str, target: Any = None, args=(), kwargs=None,
                 val: Any = None) -> None:
        self.op, self.name, self.target = op, name, target
        self.args, self.kwargs = tuple(args), dict(kwargs or {})
        self.meta = {"val": val}


class Graph:
    def __init__(self) -> None:
        self.nodes: List[Node] = []

    def input(self, name: str, shape, dtype: str) -> Node:
        return self._add(Node("placeholder", name, name, val=Val(shape, dtype)))

    def call(self, name: str, target: str, args=(), kwargs=None, shape=None,
             dtype: Optional[str] = None, val: Any = None) -> Node:
        value = val if val is not None else (
            Val(shape, dtype) if shape is not None else None)
        return self._add(Node("call_function", name, target, args, kwargs, value))

    def output(self, *results: Node) -> None:
        self._add(Node("output", "output", "output", (tuple(results),)))

    def _add(self, node: Node) -> Node:
        self.nodes.append(node)
        return node


def report_of(graph: Graph, tmp_path: Path, lifted=None, verify: bool = False) -> dict:
    """kilnc's report of the graph as written; with `verify`, kilnc also
    runs the written graph and its fused form on the CPU and compares them
    (the translation's ops executed, not only matched)."""
    written = fx_onnx.write(graph, lifted)
    path = tmp_path / "graph.onnx"
    written.save(str(path))
    command = [kiln.find_kilnc(), str(path), "--report=json"]
    result = subprocess.run(command + (["--verify"] if verify else []),
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    # --verify prints its comparison after the report.
    return json.JSONDecoder().raw_decode(result.stdout.lstrip())[0]


B, H, S, D = 2, 4, 128, 64


def qkv(g: Graph, dtype: str = "bfloat16"):
    return [g.input(name, (B, H, S, D), dtype) for name in ("q", "k", "v")]


def attend(g: Graph, scores: Node, v: Node, dtype: str) -> Node:
    """softmax over the keys of `scores` (the graph's [B, H, S, S]), then
    the product with `v`, written as the graph's output `matmul_1`."""
    probs = g.call("softmax", "aten.softmax.int", (scores, -1),
                   shape=(B, H, S, S), dtype=dtype)
    out = g.call("matmul_1", "aten.matmul.default", (probs, v),
                 shape=(B, H, S, D), dtype=dtype)
    g.output(out)
    return out


def test_einsum_tril_attention_names_the_graph_nodes(tmp_path: Path) -> None:
    """einsum scores / sqrt(d), masked_fill where a tril of ones is 0,
    softmax, einsum with V: one causal site whose operands and output are
    the graph's own nodes."""
    g = Graph()
    q, k, v = qkv(g)
    scores = g.call("einsum", "aten.einsum.default", ("bhid,bhjd->bhij", [q, k]),
                    shape=(B, H, S, S), dtype="bfloat16")
    scaled = g.call("div", "aten.div.Tensor", (scores, math.sqrt(D)),
                    shape=(B, H, S, S), dtype="bfloat16")
    ones = g.call("ones", "aten.ones.default", ([S, S],), {"device": "cuda"},
                  shape=(S, S), dtype="float32")
    tril = g.call("tril", "aten.tril.default", (ones,), shape=(S, S), dtype="float32")
    zero = g.call("eq", "aten.eq.Scalar", (tril, 0), shape=(S, S), dtype="bool")
    filled = g.call("masked_fill", "aten.masked_fill.Scalar",
                    (scaled, zero, float("-inf")), shape=(B, H, S, S), dtype="bfloat16")
    probs = g.call("softmax", "aten.softmax.int", (filled, -1),
                   shape=(B, H, S, S), dtype="bfloat16")
    out = g.call("einsum_1", "aten.einsum.default", ("bhij,bhjd->bhid", [probs, v]),
                 shape=(B, H, S, D), dtype="bfloat16")
    g.output(out)
    report = report_of(g, tmp_path, verify=True)
    [site] = report["sites"]
    assert site["causal"] and site["mask"] == "none" and site["dtype"] == "bf16"
    assert site["scale"] == pytest.approx(1 / math.sqrt(D))
    assert {role: site["operands"][role]["value"] for role in ("query", "key", "value")} \
        == {"query": "q", "key": "k", "value": "v"}
    assert site["output"]["value"] == "einsum_1"
    assert report["unfused"] == []


@pytest.mark.parametrize("form", ["logsumexp", "log_softmax", "log_softmax.int", "stable",
                                  "stable_max_values"])
def test_softmax_written_through_its_logarithm_or_a_row_shift(
        form: str, tmp_path: Path) -> None:
    """exp(scores - logsumexp(scores)), exp(log_softmax(scores)) and
    softmax(scores - amax(scores)) (or the values of `max(scores, -1)`) are
    the softmax of the scores: one site each, verified, its output the
    graph's own product."""
    g = Graph()
    q, k, v = qkv(g)
    kt = g.call("transpose", "aten.transpose.int", (k, -2, -1), shape=(B, H, D, S),
                dtype="bfloat16")
    scores = g.call("matmul", "aten.matmul.default", (q, kt), shape=(B, H, S, S),
                    dtype="bfloat16")
    scaled = g.call("mul", "aten.mul.Tensor", (scores, D ** -0.5), shape=(B, H, S, S),
                    dtype="bfloat16")
    if form == "logsumexp":
        lse = g.call("logsumexp", "aten.logsumexp.default", (scaled, [-1], True),
                     shape=(B, H, S, 1), dtype="bfloat16")
        logs = g.call("sub", "aten.sub.Tensor", (scaled, lse), shape=(B, H, S, S),
                      dtype="bfloat16")
        probs = g.call("exp", "aten.exp.default", (logs,), shape=(B, H, S, S),
                       dtype="bfloat16")
    elif form.startswith("log_softmax"):
        logs = (g.call("_log_softmax", "aten._log_softmax.default", (scaled, -1, False),
                       shape=(B, H, S, S), dtype="bfloat16") if form == "log_softmax" else
                g.call("log_softmax", "aten.log_softmax.int", (scaled, -1),
                       shape=(B, H, S, S), dtype="bfloat16"))
        probs = g.call("exp", "aten.exp.default", (logs,), shape=(B, H, S, S),
                       dtype="bfloat16")
    else:
        if form == "stable_max_values":
            # x.max(-1, keepdim=True).values: a max with indices.
            both = g.call("max_1", "aten.max.dim", (scaled, -1, True),
                          val=(Val((B, H, S, 1), "bfloat16"), Val((B, H, S, 1), "int64")))
            row_max = g.call("getitem", "getitem", (both, 0), shape=(B, H, S, 1),
                             dtype="bfloat16")
            # The indices unread: torch.export keeps their getitem, dead.
            dead = Node("call_function", "getitem_1", "getitem", (both, 1),
                        val=Val((B, H, S, 1), "int64"))
            dead.users = {}
            both.users = {row_max: None, dead: None}
            g._add(dead)
        else:
            row_max = g.call("amax", "aten.amax.default", (scaled, [-1], True),
                             shape=(B, H, S, 1), dtype="bfloat16")
        shifted = g.call("sub", "aten.sub.Tensor", (scaled, row_max), shape=(B, H, S, S),
                         dtype="bfloat16")
        probs = g.call("softmax", "aten._softmax.default", (shifted, -1, False),
                       shape=(B, H, S, S), dtype="bfloat16")
    out = g.call("matmul_1", "aten.matmul.default", (probs, v), shape=(B, H, S, D),
                 dtype="bfloat16")
    g.output(out)
    report = report_of(g, tmp_path, verify=True)
    [site] = report["sites"]
    assert site["scale"] == pytest.approx(D ** -0.5) and not site["causal"]
    assert site["output"]["value"] == "matmul_1"
    assert report["unfused"] == []


def test_nan_to_num_of_the_probabilities_is_the_sites_own_guard(tmp_path: Path) -> None:
    """softmax(masked_fill(scores, ~keep, -inf)).nan_to_num(0.0): rows that
    see no key become zeros, as the fused op makes them; one site. Of a
    value that is not a softmax's, nan_to_num stays opaque."""
    g = Graph()
    q, k, v = qkv(g)
    keep = g.input("keep", (B, 1, 1, S), "bool")
    kt = g.call("transpose", "aten.transpose.int", (k, -2, -1), shape=(B, H, D, S),
                dtype="bfloat16")
    scores = g.call("matmul", "aten.matmul.default", (q, kt), shape=(B, H, S, S),
                    dtype="bfloat16")
    hidden = g.call("bitwise_not", "aten.bitwise_not.default", (keep,),
                    shape=(B, 1, 1, S), dtype="bool")
    filled = g.call("masked_fill", "aten.masked_fill.Scalar",
                    (scores, hidden, float("-inf")), shape=(B, H, S, S), dtype="bfloat16")
    probs = g.call("_softmax", "aten._softmax.default", (filled, -1, False),
                   shape=(B, H, S, S), dtype="bfloat16")
    zeroed = g.call("nan_to_num", "aten.nan_to_num.default", (probs, 0.0),
                    shape=(B, H, S, S), dtype="bfloat16")
    out = g.call("matmul_1", "aten.matmul.default", (zeroed, v), shape=(B, H, S, D),
                 dtype="bfloat16")
    g.output(out)
    report = report_of(g, tmp_path, verify=True)
    [site] = report["sites"]
    assert site["mask"] == "boolean" and site["output"]["value"] == "matmul_1"
    assert report["opaque"] == []

    other = Graph()
    x = other.input("x", (B, S), "float32")
    fixed = other.call("nan_to_num", "aten.nan_to_num.default", (x, 0.0),
                       shape=(B, S), dtype="float32")
    other.output(fixed)
    written = fx_onnx.write(other)
    assert [(n.domain, n.op_type) for n in written.model.graph.node] == [
        ("pkg.kiln.fx", "aten_nan_to_num_default")]


def test_sdpa_with_a_boolean_mask_after_opaque_projections(tmp_path: Path) -> None:
    """A projection (aten.linear, kept opaque) then view and transpose into
    SDPA with a boolean padding mask: the site's query is the transpose
    node, its mask the graph input."""
    g = Graph()
    x = g.input("x", (B, S, H * D), "float16")
    weight = g.input("w", (H * D, H * D), "float16")
    mask = g.input("mask", (B, 1, 1, S), "bool")
    heads = []
    for role in ("q", "k", "v"):
        linear = g.call(f"linear_{role}", "aten.linear.default", (x, weight),
                        shape=(B, S, H * D), dtype="float16")
        view = g.call(f"view_{role}", "aten.view.default", (linear, [B, S, H, D]),
                      shape=(B, S, H, D), dtype="float16")
        heads.append(g.call(f"transpose_{role}", "aten.transpose.int", (view, 1, 2),
                            shape=(B, H, S, D), dtype="float16"))
    out = g.call("sdpa", "aten.scaled_dot_product_attention.default",
                 (*heads,), {"attn_mask": mask}, shape=(B, H, S, D), dtype="float16")
    g.output(out)
    written = fx_onnx.write(g)
    assert written.opaque == ["linear_q", "linear_k", "linear_v"]
    assert written.input_names == ["x", "w", "mask"]
    report = report_of(g, tmp_path)
    [site] = report["sites"]
    assert site["operands"]["query"]["value"] == "transpose_q"
    assert site["operands"]["mask"]["value"] == "mask"
    assert site["mask"] != "none" and not site["causal"]
    assert site["output"]["value"] == "sdpa"


def test_alibi_slopes_from_ops_and_a_learned_temperature(tmp_path: Path) -> None:
    """scores * tau (a weight input: a run-time scale), plus
    slopes[h] * (j - i) built from arange and pow.Scalar, softmax, matmul."""
    g = Graph()
    q, k, v = qkv(g, "float32")
    tau = g.input("tau", (), "float32")
    kt = g.call("transpose", "aten.transpose.int", (k, -2, -1),
                shape=(B, H, D, S), dtype="float32")
    scores = g.call("matmul", "aten.matmul.default", (q, kt),
                    shape=(B, H, S, S), dtype="float32")
    tempered = g.call("mul", "aten.mul.Tensor", (scores, tau),
                      shape=(B, H, S, S), dtype="float32")
    heads = g.call("arange", "aten.arange.start", (1, H + 1), {"dtype": "float32"},
                   shape=(H,), dtype="float32")
    slopes = g.call("pow_1", "aten.pow.Scalar", (0.5, heads), shape=(H,), dtype="float32")
    j = g.call("arange_1", "aten.arange.default", (S,), shape=(S,), dtype="int64")
    i = g.call("unsqueeze", "aten.unsqueeze.default", (j, 1), shape=(S, 1), dtype="int64")
    distance = g.call("sub", "aten.sub.Tensor", (j, i), shape=(S, S), dtype="int64")
    slope4 = g.call("view", "aten.view.default", (slopes, [H, 1, 1]),
                    shape=(H, 1, 1), dtype="float32")
    bias = g.call("mul_1", "aten.mul.Tensor", (slope4, distance),
                  shape=(H, S, S), dtype="float32")
    biased = g.call("add", "aten.add.Tensor", (tempered, bias),
                    shape=(B, H, S, S), dtype="float32")
    attend(g, biased, v, "float32")
    [site] = report_of(g, tmp_path, verify=True)["sites"]
    assert site["operands"]["scale_factor"]["value"] == "tau"
    assert site["output"]["value"] == "matmul_1"
    assert site["operands"]["key"]["value"] == "k"


def test_complex_rope_is_carried_opaque_as_real_pairs(tmp_path: Path) -> None:
    """Rotary embeddings through complex numbers, as Meta's Llama writes
    them: Q and K to float, viewed as complex pairs, times a complex table
    (a polar of angles, and a user input `freqs_cis`), viewed back as real
    and flattened. Every node that computes or reads a complex value is
    written opaque, its complex type as the real pairs; the site's query
    and key are the rotated graph nodes, and the graph is written whole
    (not left to torch's exporter for its complex64 values)."""
    g = Graph()
    q, k, v = qkv(g)
    angles = g.input("angles", (S, D // 2), "float32")
    freqs = g.input("freqs_cis", (S, D // 2), "complex64")
    ones = g.call("ones_like", "aten.ones_like.default", (angles,),
                  shape=(S, D // 2), dtype="float32")
    polar = g.call("polar", "aten.polar.default", (ones, angles),
                   shape=(S, D // 2), dtype="complex64")
    table = g.call("mul_t", "aten.mul.Tensor", (polar, freqs),
                   shape=(S, D // 2), dtype="complex64")
    rotated = []
    for t in (q, k):
        wide = g.call(f"float_{t.name}", "aten._to_copy.default", (t,),
                      {"dtype": "float32"}, shape=(B, H, S, D), dtype="float32")
        pairs = g.call(f"view_{t.name}", "aten.view.default", (wide, [B, H, S, D // 2, 2]),
                       shape=(B, H, S, D // 2, 2), dtype="float32")
        cplx = g.call(f"as_complex_{t.name}", "aten.view_as_complex.default", (pairs,),
                      shape=(B, H, S, D // 2), dtype="complex64")
        turned = g.call(f"mul_{t.name}", "aten.mul.Tensor", (cplx, table),
                        shape=(B, H, S, D // 2), dtype="complex64")
        real = g.call(f"as_real_{t.name}", "aten.view_as_real.default", (turned,),
                      shape=(B, H, S, D // 2, 2), dtype="float32")
        flat = g.call(f"flat_{t.name}", "aten.view.default", (real, [B, H, S, D]),
                      shape=(B, H, S, D), dtype="float32")
        rotated.append(g.call(f"rot_{t.name}", "aten._to_copy.default", (flat,),
                              {"dtype": "bfloat16"}, shape=(B, H, S, D), dtype="bfloat16"))
    kt = g.call("transpose", "aten.transpose.int", (rotated[1], -2, -1),
                shape=(B, H, D, S), dtype="bfloat16")
    scores = g.call("matmul", "aten.matmul.default", (rotated[0], kt),
                    shape=(B, H, S, S), dtype="bfloat16")
    scaled = g.call("div", "aten.div.Tensor", (scores, math.sqrt(D)),
                    shape=(B, H, S, S), dtype="bfloat16")
    attend(g, scaled, v, "bfloat16")
    written = fx_onnx.write(g)
    assert set(written.opaque) == {"polar", "mul_t", "as_complex_q", "mul_q",
                                   "as_real_q", "as_complex_k", "mul_k", "as_real_k"}
    types = {vi.name: vi for vi in list(written.model.graph.value_info)
             + list(written.model.graph.input)}
    dims = [d.dim_value for d in types["mul_q"].type.tensor_type.shape.dim]
    assert dims == [B, H, S, D // 2, 2]
    assert types["freqs_cis"].type.tensor_type.elem_type == 1  # float32 pairs
    [site] = report_of(g, tmp_path)["sites"]
    assert site["operands"]["query"]["value"] == "rot_q"
    assert site["operands"]["key"]["value"] == "rot_k"
    assert site["output"]["value"] == "matmul_1"


def test_tuple_results_and_lifted_constants(tmp_path: Path) -> None:
    """A split's pieces are read through getitem; an op with a tuple result
    that the writer does not know is kept opaque with one output a piece; a
    lifted constant is written with its data."""
    import numpy

    g = Graph()
    x = g.input("x", (B, S, 3 * D), "float32")
    table = g.input("c_lifted_tensor_0", (S, S), "bool")
    split = g.call("split", "aten.split.Tensor", (x, D, -1),
                   val=[Val((B, S, D), "float32")] * 3)
    pieces = [g.call(f"getitem_{i}", "getitem", (split, i), shape=(B, S, D),
                     dtype="float32") for i in range(3)]
    odd = g.call("kthvalue", "aten.kthvalue.default", (pieces[0], 1, -1),
                 val=[Val((B, S), "float32"), Val((B, S), "int64")])
    top = g.call("getitem_3", "getitem", (odd, 0), shape=(B, S), dtype="float32")
    row = g.call("view", "aten.view.default", (top, [B, 1, S]), shape=(B, 1, S),
                 dtype="float32")
    masked = g.call("where", "aten.where.self", (table, row, 0.0),
                    shape=(B, S, S), dtype="float32")
    g.output(masked, *pieces)
    written = fx_onnx.write(g, {"c_lifted_tensor_0": numpy.tril(numpy.ones((S, S), bool))})
    assert written.opaque == ["kthvalue"]
    assert written.input_names == ["x"]
    assert [i.name for i in written.model.graph.initializer] == ["c_lifted_tensor_0"]
    report = report_of(g, tmp_path, {"c_lifted_tensor_0":
                                     numpy.tril(numpy.ones((S, S), bool))})
    assert report["sites"] == []
    assert [o["node"] for o in report["opaque"]] == ["kthvalue"]


def test_symbolic_sizes_are_left_to_torchs_exporter() -> None:
    class Symbol:
        def __int__(self) -> int:
            raise TypeError("symbolic")

    g = Graph()
    g.input("x", (Symbol(), 4), "float32")
    with pytest.raises(fx_onnx.Unsupported, match="symbolic size"):
        fx_onnx.write(g)


@pytest.mark.parametrize("operands,want", [
    ([(2, "bfloat16"), (0, "float32")], "bfloat16"),   # tensor * Python float
    ([(2, "int64"), (0, "float32")], "float32"),       # int tensor * Python float
    ([(2, "bfloat16"), (1, "float32")], "bfloat16"),   # 0-d tensors do not widen
    ([(2, "int64"), (1, "float64")], "float64"),       # ... unless of a higher kind
    ([(2, "float16"), (2, "bfloat16")], "float32"),
    ([(2, "bool"), (0, "int64")], "int64"),
    ([(2, "uint8"), (2, "int8")], "int16"),
])
def test_result_type_follows_torch(operands, want) -> None:
    assert fx_onnx.result_type(operands) == want


def test_a_graph_writing_in_place_is_left_to_torchs_exporter() -> None:
    g = Graph()
    x = g.input("x", (4, 4), "float32")
    mask = g.input("m", (4, 4), "bool")
    g.call("masked_fill_", "aten.masked_fill_.Scalar", (x, mask, 0.0), shape=(4, 4),
           dtype="float32")
    g.output(x)
    with pytest.raises(fx_onnx.Unsupported, match="writes in place"):
        fx_onnx.write(g)
    assert not fx_onnx.mutates("aten._softmax.default")
    assert not fx_onnx.mutates("aten.__and__.Tensor")
    assert not fx_onnx.mutates("aten.detach_.default")  # no value changes


def test_a_folded_constant_bias_is_named_through_its_reshape(tmp_path: Path) -> None:
    """ALiBi built from aranges and pow beside a triu causal mask: kilnc
    folds the bias into a constant and pads its rank for the add; the site
    still names the bias node, through that reshape."""
    g = Graph()
    q, k, v = qkv(g)
    heads = g.call("arange", "aten.arange.start", (1, H + 1), {"dtype": "float32"},
                   shape=(H,), dtype="float32")
    slopes = g.call("pow_1", "aten.pow.Scalar", (2.0, heads), shape=(H,), dtype="float32")
    j = g.call("arange_1", "aten.arange.default", (S,), shape=(S,), dtype="int64")
    row = g.call("unsqueeze", "aten.unsqueeze.default", (j, 0), shape=(1, S), dtype="int64")
    col = g.call("unsqueeze_1", "aten.unsqueeze.default", (j, 1), shape=(S, 1),
                 dtype="int64")
    distance = g.call("sub", "aten.sub.Tensor", (row, col), shape=(S, S), dtype="int64")
    slope3 = g.call("view", "aten.view.default", (slopes, [H, 1, 1]), shape=(H, 1, 1),
                    dtype="float32")
    bias = g.call("mul", "aten.mul.Tensor", (slope3, distance), shape=(H, S, S),
                  dtype="float32")
    bias16 = g.call("_to_copy", "aten._to_copy.default", (bias,), {"dtype": "bfloat16"},
                    shape=(H, S, S), dtype="bfloat16")
    kt = g.call("transpose", "aten.transpose.int", (k, -2, -1), shape=(B, H, D, S),
                dtype="bfloat16")
    scores = g.call("matmul", "aten.matmul.default", (q, kt), shape=(B, H, S, S),
                    dtype="bfloat16")
    biased = g.call("add", "aten.add.Tensor", (scores, bias16), shape=(B, H, S, S),
                    dtype="bfloat16")
    ones = g.call("ones", "aten.ones.default", ([S, S],), {"dtype": "bool"},
                  shape=(S, S), dtype="bool")
    future = g.call("triu", "aten.triu.default", (ones, 1), shape=(S, S), dtype="bool")
    filled = g.call("masked_fill", "aten.masked_fill.Scalar",
                    (biased, future, float("-inf")), shape=(B, H, S, S), dtype="bfloat16")
    probs = g.call("softmax", "aten.softmax.int", (filled, -1), shape=(B, H, S, S),
                   dtype="bfloat16")
    out = g.call("matmul_1", "aten.matmul.default", (probs, v), shape=(B, H, S, D),
                 dtype="bfloat16")
    g.output(out)
    [site] = report_of(g, tmp_path, verify=True)["sites"]
    assert site["causal"]
    [term] = [site["operands"][r] for r in ("mask", "bias") if site["operands"][r]]
    assert term["value"] == "_to_copy"
    assert term["transforms"] == [{"op": "reshape", "shape": [1, H, S, S]}]


@pytest.mark.parametrize("equation,ranks,want", [
    ("... i j, ... j d -> ... i d", [4, 4], "abij,abjd->abid"),
    ("...id,...jd->...ij", [4, 2], "abid,jd->abij"),
    ("bhid,bhjd->bhij", [4, 4], "bhid,bhjd->bhij"),
])
def test_einsum_ellipses_are_written_out(equation, ranks, want) -> None:
    assert fx_onnx.explicit_einsum(equation, ranks) == want


def test_einsum_in_capitals_and_ellipses_fuses_and_verifies(tmp_path: Path) -> None:
    g = Graph()
    q, k, v = qkv(g, "float32")
    scores = g.call("einsum", "aten.einsum.default", ("BHID,BHJD->BHIJ", [q, k]),
                    shape=(B, H, S, S), dtype="float32")
    probs = g.call("softmax", "aten.softmax.int", (scores, -1), shape=(B, H, S, S),
                   dtype="float32")
    out = g.call("einsum_1", "aten.einsum.default", ("... i j, ... j d -> ... i d",
                                                     [probs, v]),
                 shape=(B, H, S, D), dtype="float32")
    both = g.call("mul", "aten.mul.Tensor", (g.input("m1", (4, 4), "bool"),
                                             g.input("m2", (4, 4), "bool")),
                  shape=(4, 4), dtype="bool")
    g.output(out, both)
    written = fx_onnx.write(g)
    assert [n.op_type for n in written.model.graph.node if n.name == "mul"] == ["And"]
    [site] = report_of(g, tmp_path, verify=True)["sites"]
    assert site["output"]["value"] == "einsum_1"


@pytest.mark.parametrize("split", ["unbind", "select"])
def test_fused_qkv_split_by_unbind_or_select_keeps_graph_sources(
        tmp_path: Path, split: str) -> None:
    """One projection viewed as [B, S, 3, H, D] and permuted, its three
    heads taken by unbind (`q, k, v = qkv`) or by select (`qkv[0]`): every
    operand has a source the graph names (the permute, with the slice the
    rewrite replays). A Gather of a scalar index lost them all. In f32:
    the projection of unit-normal inputs makes scores so large that bf16
    rounding alone moves the softmax, which --verify would not accept."""
    g = Graph()
    x = g.input("x", (B, S, H * D), "float32")
    weight = g.input("w", (H * D, 3 * H * D), "float32")
    linear = g.call("linear", "aten.matmul.default", (x, weight),
                    shape=(B, S, 3 * H * D), dtype="float32")
    view = g.call("view", "aten.view.default", (linear, [B, S, 3, H, D]),
                  shape=(B, S, 3, H, D), dtype="float32")
    permute = g.call("permute", "aten.permute.default", (view, [2, 0, 3, 1, 4]),
                     shape=(3, B, H, S, D), dtype="float32")
    if split == "unbind":
        pieces = g.call("unbind", "aten.unbind.int", (permute,),
                        val=tuple(Val((B, H, S, D), "float32") for _ in range(3)))
        q, k, v = (g.call(f"getitem_{i}" if i else "getitem", "getitem", (pieces, i),
                          shape=(B, H, S, D), dtype="float32") for i in range(3))
    else:
        q, k, v = (g.call(f"select_{i}", "aten.select.int", (permute, 0, i - 3 if i == 2 else i),
                          shape=(B, H, S, D), dtype="float32") for i in range(3))
    key_t = g.call("transpose", "aten.transpose.int", (k, -2, -1),
                   shape=(B, H, D, S), dtype="float32")
    scores = g.call("matmul", "aten.matmul.default", (q, key_t),
                    shape=(B, H, S, S), dtype="float32")
    scaled = g.call("div", "aten.div.Tensor", (scores, math.sqrt(D)),
                    shape=(B, H, S, S), dtype="float32")
    attend(g, scaled, v, "float32")
    report = report_of(g, tmp_path, verify=True)
    [site] = report["sites"]
    names = {node.name for node in g.nodes}
    for role in ("query", "key", "value"):
        sources = [s["value"] for s in site["operands"][role]["sources"]]
        assert names & set(sources), (role, sources)
    assert site["output"]["value"] == "matmul_1"


def test_float8_casts_before_the_products_fold_into_an_fp8_site(tmp_path: Path) -> None:
    """Q, K and V cast to float8_e4m3fn and back to bf16 with a scale each
    (FP8 attention as torch code writes it: `x.to(torch.float8_e4m3fn)`,
    then `.to(torch.bfloat16) * scale`): written as Casts that do not
    saturate (torch gives NaN past 448), read by kilnc as one FP8 site on
    the float8 values, verified against the graph on the CPU."""
    g = Graph()
    dequantized = []
    for index, x in enumerate(qkv(g)):
        x8 = g.call(f"to_fp8_{x.name}", "aten._to_copy.default", (x,),
                    {"dtype": "float8_e4m3fn"}, shape=(B, H, S, D), dtype="float8_e4m3fn")
        wide = g.call(f"to_bf16_{x.name}", "aten._to_copy.default", (x8,),
                      {"dtype": "bfloat16"}, shape=(B, H, S, D), dtype="bfloat16")
        dequantized.append(g.call(f"dq_{x.name}", "aten.mul.Tensor", (wide, 0.5 + index),
                                  shape=(B, H, S, D), dtype="bfloat16"))
    q, k, v = dequantized
    kt = g.call("kt", "aten.transpose.int", (k, -2, -1), shape=(B, H, D, S), dtype="bfloat16")
    scores = g.call("matmul", "aten.matmul.default", (q, kt), shape=(B, H, S, S),
                    dtype="bfloat16")
    scaled = g.call("mul", "aten.mul.Tensor", (scores, 0.125), shape=(B, H, S, S),
                    dtype="bfloat16")
    attend(g, scaled, v, "bfloat16")
    written = fx_onnx.write(g)
    casts = [n for n in written.model.graph.node
             if n.op_type == "Cast" and n.input[0] in ("q", "k", "v")]
    assert len(casts) == 3
    assert all({a.name: a.i for a in n.attribute}["saturate"] == 0 for n in casts)
    assert written.model.opset_import[0].version >= 19
    report = report_of(g, tmp_path, verify=True)
    [site] = report["sites"]
    assert site["operand_dtype"] == "f8E4M3FN" and site["dtype"] == "bf16"
    assert {role: site["operands"][role]["value"] for role in ("query", "key", "value")} \
        == {"query": "to_fp8_q", "key": "to_fp8_k", "value": "to_fp8_v"}


@pytest.mark.parametrize("window", [None, 16])
def test_a_mask_buffer_read_at_compile_time_fuses_as_a_band(
        window: Optional[int], tmp_path: Path) -> None:
    """GPT-Neo as Dynamo passes it: the layer's band is the module's `bias`
    buffer (a graph input), sliced to the sequence, and the scores outside
    it are filled with a finite minimum. As a run-time input it may hide
    whole rows, which the finite fill would spread evenly: not fused. Read
    at compile time (the backend's constant_buffers, written with its
    data), it is causal within the window, and the site is exact."""
    import numpy

    M = 2 * S
    band = numpy.tril(numpy.ones((M, M), bool))
    if window is not None:
        band ^= numpy.tril(band, -window)
    g = Graph()
    q, k, v = qkv(g, "float32")
    bias = g.input("bias", (1, 1, M, M), "bool")
    keys = g.call("transpose", "aten.transpose.int", (k, -1, -2),
                  shape=(B, H, D, S), dtype="float32")
    scores = g.call("matmul", "aten.matmul.default", (q, keys),
                    shape=(B, H, S, S), dtype="float32")
    rows = g.call("slice_1", "aten.slice.Tensor", (bias, 2, 0, S),
                  shape=(1, 1, S, M), dtype="bool")
    kept = g.call("slice_2", "aten.slice.Tensor", (rows, 3, 0, S),
                  shape=(1, 1, S, S), dtype="bool")
    filled = g.call("where", "aten.where.ScalarOther",
                    (kept, scores, -3.4028234663852886e38),
                    shape=(B, H, S, S), dtype="float32")
    # The model's 4-D causal mask (0 or bfloat16's minimum), added on top.
    causal = g.input("c_lifted_tensor_0", (1, 1, S, S), "float32")
    masked = g.call("add", "aten.add.Tensor", (filled, causal),
                    shape=(B, H, S, S), dtype="float32")
    attend(g, masked, v, "float32")
    bf16_min = -3.3895313892515355e38
    lifted = {"c_lifted_tensor_0": numpy.where(numpy.tril(numpy.ones((S, S), bool)),
                                               0.0, bf16_min).astype(numpy.float32)
              .reshape(1, 1, S, S)}
    refused = report_of(g, tmp_path, lifted)
    assert refused["sites"] == []
    assert any("no key" in u["reason"] for u in refused["unfused"]), refused["unfused"]
    [site] = report_of(g, tmp_path, {**lifted, "bias": band}, verify=True)["sites"]
    assert site["causal"] and site["mask"] == "none"
    assert site["window"] == window and site["window_right"] is None


def test_keys_after_a_past_input_are_rewritten_from_the_concatenation(
        tmp_path: Path) -> None:
    """A decode-style step under torch.compile: the past keys and values are
    graph inputs, concatenated with the new ones. The report marks the site
    as reading a KV cache input, and its K and V are the graph's own `cat`
    nodes, which the backend rewrites like any other operand."""
    from kiln import dynamo

    past, new = 96, 32
    g = Graph()
    q = g.input("q", (B, H, new, D), "bfloat16")
    pk = g.input("past_k", (B, H, past, D), "bfloat16")
    pv = g.input("past_v", (B, H, past, D), "bfloat16")
    k = g.input("k", (B, H, new, D), "bfloat16")
    v = g.input("v", (B, H, new, D), "bfloat16")
    keys = g.call("cat", "aten.cat.default", ([pk, k], 2), shape=(B, H, S, D),
                  dtype="bfloat16")
    values = g.call("cat_1", "aten.cat.default", ([pv, v], 2), shape=(B, H, S, D),
                    dtype="bfloat16")
    out = g.call("sdpa", "aten.scaled_dot_product_attention.default",
                 (q, keys, values), shape=(B, H, new, D), dtype="bfloat16")
    g.output(out)
    [site] = report_of(g, tmp_path, verify=True)["sites"]
    assert site["kv_cache"] == {"past_key": "past_k", "past_value": "past_v"}
    assert site["operands"]["key"]["value"] == "cat"
    assert site["operands"]["value"]["value"] == "cat_1"
    assert dynamo._unrewritable(site) is None


def test_a_boolean_padding_mask_made_additive_with_infinity_reports_valid_json(
        tmp_path: Path) -> None:
    """`nn.MultiheadAttention`'s key padding: a boolean mask made additive
    (`masked_fill(zeros, pad, -inf)`) before SDPA. The mask operand's replay
    step holds -inf, which JSON cannot spell: the report writes it "-inf"
    (it once wrote a bare -inf, which no JSON reader takes)."""
    g = Graph()
    q, k, v = qkv(g, "float16")
    pad = g.input("pad", (B, 1, 1, S), "bool")
    zeros = g.call("zeros", "aten.zeros.default", ([B, 1, 1, S],), {"dtype": "float16"},
                   shape=(B, 1, 1, S), dtype="float16")
    additive = g.call("masked_fill", "aten.masked_fill.Scalar", (zeros, pad, float("-inf")),
                      shape=(B, 1, 1, S), dtype="float16")
    out = g.call("sdpa", "aten.scaled_dot_product_attention.default", (q, k, v),
                 {"attn_mask": additive}, shape=(B, H, S, D), dtype="float16")
    g.output(out)
    report = report_of(g, tmp_path)
    [site] = report["sites"]
    steps = [step for source in site["operands"]["mask"]["sources"]
             for step in source.get("transforms", [])]
    assert any(step.get("op") == "where" and "-inf" in (step.get("true"), step.get("false"))
               for step in steps), site["operands"]["mask"]
