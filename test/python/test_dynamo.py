"""kiln.dynamo's parts that need no GPU or torch: the one-site source it
builds from a fusion report's site compiles with kilnc to a site with the
same attributes, which sites it refuses to rewrite and why, and the offline
compilation of graphs kept without a report."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import kiln
import kiln.dynamo as kd
import kiln.transformers as kt

FUSION_INPUTS = Path(__file__).resolve().parents[1] / "tools" / "kilnc" / "Inputs" / "fusion"


def report_of(name: str) -> dict:
    command = [kiln.find_kilnc(), str(FUSION_INPUTS / name), "--report=json"]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE", str(tmp_path / "cache"))
    kt._packages_by_digest.clear()
    yield tmp_path / "cache" / kiln.__version__
    kt._packages_by_digest.clear()


@pytest.mark.parametrize("name", [
    "gqa_repeat_kv.onnx",           # causal, GQA
    "mask_bool_where_inverted.onnx",  # a boolean mask, masked_score
    "alibi_causal.onnx",            # an additive mask
    "t5_bias_mask.onnx",            # bias and mask
    "swin_window_mask.onnx",        # a window mask tiled over the batch
    "longt5_local_blocks.onnx",     # rank-5 scores merged to rank 4
])
def test_site_sources_compile_to_the_reported_site(cache: Path, name: str) -> None:
    [site] = report_of(name)["sites"]
    compiled = kt.site_from_source(kd.site_source(site), kd._site_label(site))
    assert compiled.dtype == site["dtype"]
    assert compiled.head_dim == site["head_dim"]
    assert compiled.causal == site["causal"]
    assert compiled.mask == site["mask"]
    assert compiled.bias == site["bias"]
    assert compiled.layout == site["layout"]
    assert abs(compiled.scale - site["scale"]) < 1e-6 * abs(site["scale"])
    # Sizes and head counts stay dynamic: one site serves every shape.
    assert compiled.batch is None and compiled.q_heads is None
    assert compiled.q_len is None and compiled.kv_len is None


def test_sites_without_names_are_not_rewritten() -> None:
    [site] = report_of("gqa_repeat_kv.onnx")["sites"]
    assert kd._unrewritable(site) is None
    site["operands"]["key"]["value"] = None
    site["operands"]["key"]["sources"] = []
    assert kd._unrewritable(site) == "its key is not a named graph value"
    [site] = report_of("gqa_repeat_kv.onnx")["sites"]
    # A reshape to dynamic sizes is sized from the graph at rewrite time.
    site["output"]["transforms"] = [{"op": "reshape", "shape": [1, None, 64]}]
    assert kd._unrewritable(site) is None
    # Keys after a past input (a decode step): rewritten from the
    # concatenation, a graph value like any other.
    site["kv_cache"] = {"past_key": "a", "past_value": "b"}
    assert kd._unrewritable(site) is None
    # Q, K and V dequantised from float8 in the graph: an FP8 site, which
    # has no GPU kernel; the report says so and the graph keeps its code.
    [site] = report_of("fp8_qdq_f16.onnx")["sites"]
    assert site["operand_dtype"] == "f8E4M3FN" and site["dtype"] == "f16"
    assert kd._unrewritable(site) == ("its Q, K and V are f8E4M3FN (FP8), for "
                                      "which Kiln has no GPU kernel yet")
    # What the backend asks kilnc for (--fp8=dequantised): the site reads the
    # dequantised values, rewritable from the graph's own nodes.
    result = subprocess.run([kiln.find_kilnc(), str(FUSION_INPUTS / "fp8_qdq_f16.onnx"),
                             "--report=json", "--fp8=dequantised"],
                            capture_output=True, text=True, check=True)
    [site] = json.loads(result.stdout)["sites"]
    assert site["operand_dtype"] == site["dtype"] == "f16"
    assert kd._unrewritable(site) is None
    [site] = report_of("fp8_qdq_probs.onnx")["sites"]
    assert site["prob_scale"] == pytest.approx(1 / 448, rel=1e-6)
    assert kd._unrewritable(site).startswith("it quantises its probabilities")


def test_pending_graphs_compile_offline(cache: Path) -> None:
    graphs = cache / "graphs"
    graphs.mkdir(parents=True)
    onnx = (FUSION_INPUTS / "k_perm_1032.onnx").read_bytes()
    (graphs / "0123abcd.onnx").write_bytes(onnx)
    assert kd.compile_pending() == 1
    report = json.loads((graphs / "0123abcd.report.json").read_text())
    assert not (graphs / "0123abcd.onnx").exists()
    [site] = report["sites"]
    assert site["operands"]["key"]["transforms"][0]["op"] == "transpose"
    # The site is in the cache: the next process finds it without kilnc.
    assert [p for p in cache.iterdir() if p.name.startswith("graph_f32_d16_")
            and p.is_dir()]


def test_rewritten_graphs_are_checked_unless_asked_not_to(monkeypatch) -> None:
    """Unset, KILN_VERIFY checks each rewritten graph and falls back on a
    mismatch; 1 raises; 0 skips the check."""
    monkeypatch.delenv("KILN_VERIFY", raising=False)
    assert kd._verify_mode() == "check"
    monkeypatch.setenv("KILN_VERIFY", "1")
    assert kd._verify_mode() == "raise"
    monkeypatch.setenv("KILN_VERIFY", "0")
    assert kd._verify_mode() == "off"


def test_graphs_that_write_in_place_are_not_run_twice() -> None:
    """The check runs a graph again: not one that writes its tensors in
    place (a cache's index_copy_, item assignment), whose writes would be
    applied again."""
    import operator
    import types

    def graph(*targets):
        nodes = [types.SimpleNamespace(
            op="call_method" if isinstance(t, str) else "call_function", target=t)
            for t in targets]
        return types.SimpleNamespace(graph=types.SimpleNamespace(nodes=nodes))

    assert not kd._writes_in_place(graph("view", "transpose", operator.add))
    assert kd._writes_in_place(graph("view", "index_copy_"))
    assert kd._writes_in_place(graph(operator.setitem))
    assert not kd._writes_in_place(graph(operator.__add__))

    def node(op, target, *args):
        return types.SimpleNamespace(op=op, target=target, args=args)

    def of(*nodes):
        return types.SimpleNamespace(graph=types.SimpleNamespace(nodes=list(nodes)))

    # An in-place write into a value the graph computed changes nothing
    # outside the call; one into an input, or a view of one, does.
    x = node("placeholder", "x")
    cache = node("get_attr", "cache")
    scores = node("call_function", operator.matmul, x, x)
    view = node("call_method", "view", x, -1)
    fill = node("call_method", "masked_fill_", scores, x, 0.0)
    assert not kd._writes_in_place(of(x, scores, fill))
    transposed = node("call_method", "transpose", scores, 1, 2)
    assert not kd._writes_in_place(of(x, scores, transposed,
                                      node("call_method", "masked_fill_", transposed)))
    assert kd._writes_in_place(of(x, view, node("call_method", "add_", view, 1)))
    assert kd._writes_in_place(of(cache, node("call_function", operator.setitem,
                                              cache, 0, x)))
    to = node("call_method", "to", x, "cuda")
    assert kd._writes_in_place(of(x, to, node("call_method", "mul_", to, 2)))


def test_reports_of_bound_sizes_are_freed_where_they_agree() -> None:
    """torch's exporter writes a dynamic graph's shape computations, which
    kilnc imports only with the sizes bound (to 128): a second report with
    other sizes shows which sizes follow them, and those become null."""
    onnx = FUSION_INPUTS.parent / "torch_dynamic_tril.onnx"  # a tril buffer sliced to s
    bound = json.loads(subprocess.run(
        [kiln.find_kilnc(), str(onnx), "--report=json"], capture_output=True,
        text=True, check=True).stdout)
    assert bound["bound_dims"] == {"s31": 128, "s81": 128}
    [site] = bound["sites"]
    assert site["operands"]["mask"]["transforms"] == [
        {"op": "reshape", "shape": [1, 1, 128, 128]}]
    report = kd._run_kilnc(onnx, {})
    assert report["sizes_free"] and report["bound_dims"] == bound["bound_dims"]
    [site] = report["sites"]
    assert site["operands"]["mask"]["transforms"] == [
        {"op": "reshape", "shape": [1, 1, None, None]}]
    assert site["q_len"] is None and site["head_dim"] == 64


def test_reports_that_hold_for_their_bound_sizes_only_say_so(tmp_path: Path) -> None:
    """An export that baked its traced batch into constants imports with
    batch 1 only: the report keeps its bound sizes, without sizes_free."""
    models = Path(__file__).resolve().parents[3] / "shared" / "models"
    if not (models / "vit_eager.onnx").exists():
        pytest.skip("no shared models")
    onnx = tmp_path / "vit.onnx"
    subprocess.run([sys.executable, str(FUSION_INPUTS.parent / "make_dynamic.py"),
                    str(models / "vit_eager.onnx"), str(onnx)], check=True)
    report = kd._run_kilnc(onnx, {})
    assert report["bound_dims"] == {"batch": 1}
    assert "sizes_free" not in report


def test_values_the_exporter_renamed_map_to_their_fx_nodes() -> None:
    """CLIP's padding mask: aten.index became a GatherND whose output the
    exporter's optimizer left as `val_31`; the report names that value, the
    rewrite needs the FX node `index`."""
    from types import SimpleNamespace as Node

    def onnx_node(origin, *outputs):
        fx = f"%{origin} : [num_users=1] = call_function[...]" if origin else ""
        return Node(metadata_props={"pkg.torch.onnx.fx_node": fx} if fx else {},
                    outputs=[Node(name=name) for name in outputs])

    nodes = [
        onnx_node("index", "val_30"),            # an inner node of aten.index
        onnx_node("index", "val_31"),            # its last: the index's value
        onnx_node("bitwise_and_1", "bitwise_and_1"),  # kept its FX name
        onnx_node("view", "val_40"),             # `view` is also an ONNX value:
        onnx_node("view", "view"),               # its name is its own
        onnx_node("", "val_50"),                 # no origin recorded
        onnx_node("gone", "val_60"),             # not a node of this FX graph
    ]
    fx_names = ["index", "bitwise_and_1", "view"]
    assert kd.onnx_aliases(nodes, fx_names) == {"val_31": "index"}


def test_dense_per_head_terms_are_found() -> None:
    """A float bias or mask with its own [q, k] scores for every head (T5's
    position bias) is what the backend leaves to Inductor by default; shared
    ones (a padding mask, ALiBi's [1, H, 1, k]) and boolean masks are not."""
    def site(**operands):
        return {"operands": {role: {"dtype": dtype} for role, dtype in operands.items()}}

    assert kd.dense_term(site(bias="bf16"), {"bias": [1, 16, 4096, 4096]}) == "bias"
    assert kd.dense_term(site(mask="f16"), {"mask": [4, 16, 4096, 4096]}) == "mask"
    assert kd.dense_term(site(bias="bf16"), {"bias": [1, 16, 1, 4096]}) is None
    assert kd.dense_term(site(mask="bf16"), {"mask": [4, 1, 1, 4096]}) is None
    assert kd.dense_term(site(mask="bf16"), {"mask": [4, 1, 4096, 4096]}) is None
    assert kd.dense_term(site(mask="i1"), {"mask": [4, 16, 4096, 4096]}) is None
    assert kd.dense_term(site(bias="bf16"), {"bias": None}) is None
    # A symbolic size (a SymInt) is taken as more than one.
    assert kd.dense_term(site(bias="bf16"), {"bias": [1, 16, object(), object()]}) == "bias"


def test_weights_declared_finite_reach_kilnc() -> None:
    """T5's self-attention: a bias gathered from a weight the graph takes as
    an input fuses beside its finite-fill mask only when the backend passes
    that input as finite (it checks the weight first)."""
    onnx = FUSION_INPUTS / "t5_bias_from_input.onnx"
    assert kd._run_kilnc(onnx, {})["sites"] == []
    report = kd._run_kilnc(onnx, {"finite_inputs": ["relative_attention_bias.weight"]})
    assert report["finite_inputs"] == ["relative_attention_bias.weight"]
    [site] = report["sites"]
    assert site["bias"] and site["mask"] == "boolean" and report["unfused"] == []


def test_operands_are_taken_from_the_nearest_value_the_graph_has() -> None:
    """An operand computed from a value the exporter made (`val_113`, inside
    a decomposed einsum) is taken from the next value up that is an FX
    node, with the ops between replayed; a site none of whose sources the
    graph has says which values it looked for."""
    operand = {"value": "val_113", "transforms": [{"op": "transpose", "perms": [0, 2, 1, 3]}],
               "sources": [
                   {"value": "val_113", "transforms": [{"op": "transpose", "perms": [0, 2, 1, 3]}]},
                   {"value": "view_2", "transforms": [
                       {"op": "reshape", "shape": [2, 64, 16, 64]},
                       {"op": "transpose", "perms": [0, 2, 1, 3]}]},
                   {"value": "linear", "transforms": []}]}
    assert kd._source_in(operand, {"view_2": 1, "linear": 2})["value"] == "view_2"
    assert kd._source_in(operand, {"linear": 2})["value"] == "linear"
    assert kd._source_in(operand, {"other": 3}) is None
    # A slice whose size follows the graph's sizes cannot be replayed: the
    # next source is taken.
    sliced = {"sources": [
        {"value": "tril", "transforms": [{"op": "slice", "start": [0, 0], "size": [None, None]}]},
        {"value": "ones", "transforms": [{"op": "cast", "dtype": "i1"}]}]}
    assert kd._source_in(sliced, {"tril": 1, "ones": 2})["value"] == "ones"
    # A report without sources names one value.
    assert kd._sources({"value": "q", "transforms": []}) == [{"value": "q", "transforms": []}]
    site = {"operands": {"query": operand, "key": {"value": None, "sources": []},
                         "value": {"value": "v", "transforms": []}},
            "output": {"value": "out", "transforms": []}}
    assert kd._unrewritable(site) == "its key is not a named graph value"
    site["operands"]["key"] = {"value": None, "sources": [{"value": "k", "transforms": []}]}
    assert kd._unrewritable(site) is None


def test_sites_and_softmaxes_name_the_users_source_line() -> None:
    """kiln.explain names the line of the user's code a site or an unfused
    softmax came from: the innermost frame of the FX node's stack trace,
    found through the ONNX node's recorded FX origin."""
    from types import SimpleNamespace as Node

    trace = ('  File "/work/train.py", line 88, in forward\n    x = self.attn(x)\n'
             '  File "/work/model.py", line 42, in forward\n'
             '    probs = scores.softmax(dim=-1)\n')
    assert kd.source_line(trace) == (
        "/work/model.py:42 in forward: probs = scores.softmax(dim=-1)")
    assert kd.source_line(None) is None and kd.source_line("no frames") is None

    onnx_nodes = [Node(name="node_Softmax_7", metadata_props={
                      "pkg.torch.onnx.fx_node": "%softmax : [num_users=1] = ..."}),
                  Node(name="node_MatMul_3", metadata_props={})]
    origins = kd.onnx_origins(onnx_nodes)
    assert origins == {"node_Softmax_7": "softmax"}
    fx = {"softmax": Node(meta={"stack_trace": trace}, target="softmax"),
          "matmul": Node(meta={}, target="matmul")}
    report = {"sites": [{"nodes": ["node_MatMul_3", "node_Softmax_7"]}],
              "unfused": [{"node": "node_softmax", "reason": "r"}]}
    fx["softmax"].name = "softmax"
    lines = kd.site_sources(report, origins, fx)
    # node_softmax: no origin recorded, but the exporter's name for the node
    # of the FX node `softmax`'s value.
    assert lines == {"node_Softmax_7": kd.source_line(trace),
                     "node_softmax": kd.source_line(trace)}
    assert kd._site_line(report["sites"][0], lines) == kd.source_line(trace)
    # node_<name>: the exporter's name for the node of an FX node's value.
    fx["softmax_1"] = Node(meta={"stack_trace": trace})
    report["unfused"] = [{"node": "node_softmax_1", "reason": "r"}]
    assert "node_softmax_1" in kd.site_sources(report, {}, fx)
    # The node that stopped the match (kilnc's stopped_at) is named too.
    tanh_trace = trace.replace("probs = scores.softmax(dim=-1)", "s = torch.tanh(s) * 2")
    fx["tanh"] = Node(meta={"stack_trace": tanh_trace})
    report["unfused"] = [{"node": "node_softmax_1", "reason": "r", "stopped_at": "node_tanh"}]
    assert kd.site_sources(report, {}, fx)["node_tanh"].endswith("s = torch.tanh(s) * 2")


def test_keys_contiguous_keeps_broadcast_axes():
    """A mask or bias whose keys are strided (T5's permuted position bias)
    gets contiguous keys with its zero-stride axes still broadcast; one
    already contiguous is passed as is."""
    import numpy as np

    class Strided:  # torch's stride API over a numpy array (in elements)
        def __init__(self, array):
            self.array = array

        def dim(self):
            return self.array.ndim

        def stride(self, axis):
            return self.array.strides[axis] // self.array.itemsize

        def size(self, axis):
            return self.array.shape[axis]

        @property
        def shape(self):
            return self.array.shape

        def __getitem__(self, index):
            return Strided(self.array[index])

        def contiguous(self):
            return Strided(np.ascontiguousarray(self.array))

        def expand(self, shape):
            return Strided(np.broadcast_to(self.array, shape))

    values = np.arange(5 * 6 * 3, dtype=np.float32).reshape(5, 6, 3)
    bias = Strided(np.broadcast_to(values.transpose(2, 0, 1)[None], (4, 3, 5, 6)))
    made = kd.keys_contiguous(bias)
    assert made.stride(3) == 1 and made.stride(0) == 0
    assert (made.array == bias.array).all()
    mask = Strided(np.zeros((2, 1, 1, 7), dtype=bool))
    assert kd.keys_contiguous(mask) is mask


def test_strided_keys_only_from_traced_values():
    """Only an operand taken as is from a node whose traced value has
    strided keys is made key-contiguous."""
    class Value:
        def __init__(self, last_stride):
            self.last_stride = last_stride

        def dim(self):
            return 4

        def size(self, axis):
            return 8

        def stride(self, axis):
            return self.last_stride

    class Node:
        def __init__(self, value):
            self.meta = {"val": value}

    assert kd._strided_keys(Node(Value(16)), {"transforms": []})
    assert not kd._strided_keys(Node(Value(1)), {"transforms": []})
    assert not kd._strided_keys(Node(Value(16)), {"transforms": [{"op": "reshape"}]})
    assert not kd._strided_keys(Node(None), {"transforms": []})


def test_like_strides_copies_only_when_they_differ():
    """The site's result takes the replaced value's strides (later views of
    the graph rely on them): a copy only where they differ."""
    class Result:
        def __init__(self, strides):
            self.strides, self.shape, self.copied = strides, (2, 3), None

        def stride(self):
            return self.strides

        def new_empty_strided(self, shape, strides):
            return Result(tuple(strides))

        def copy_(self, other):
            self.copied = other

    same = Result((3, 1))
    assert kd.like_strides(same, [3, 1]) is same
    moved = kd.like_strides(same, [1, 2])
    assert moved.stride() == (1, 2) and moved.copied is same

    class Node:
        meta = {"val": Result((3, 1))}

    assert kd._traced_strides(Node()) == [3, 1]
    assert kd._traced_strides(None) is None


def test_values_computed_from_inputs_that_need_gradients() -> None:
    """On a training graph, a site's mask, bias or scale computed from an
    input that needs a gradient (a learned bias or temperature) keeps the
    site in Inductor: _needing_grad marks every node computed from such
    inputs."""
    import types

    class Node(types.SimpleNamespace):
        __hash__ = object.__hash__  # FX nodes hash by identity

    def node(name, op="call_function", *inputs):
        return Node(name=name, op=op, all_input_nodes=list(inputs))

    x, tau, table = node("x", "placeholder"), node("tau", "placeholder"), node(
        "table", "placeholder")
    scores = node("scores", "call_function", x)
    scaled = node("scaled", "call_function", scores, tau)
    bias = node("bias", "call_function", table)
    graph = types.SimpleNamespace(nodes=[x, tau, table, scores, scaled, bias])
    marked = kd._needing_grad(graph, ["x", "tau"])
    assert {n.name for n in marked} == {"x", "tau", "scores", "scaled"}
    assert bias not in marked


def test_training_sites_without_a_tensor_core_backward() -> None:
    """The training default ("auto") rewrites a site only where Kiln's
    backward runs on tensor cores (f16/bf16, head dims multiples of 16 up
    to 128): _fma_backward names what keeps the others in Inductor."""
    site = {"dtype": "bf16", "head_dim": 64, "v_head_dim": 64}
    assert kd._fma_backward(site) is None
    assert kd._fma_backward({**site, "head_dim": 128, "v_head_dim": None}) is None
    assert kd._fma_backward({**site, "dtype": "f32"}) == "the site is f32"
    assert kd._fma_backward({**site, "head_dim": 256}) == "its head dim is 256"
    assert kd._fma_backward({**site, "v_head_dim": 40}) == "its head dim is 40"


def test_graph_input_sources_are_named_in_either_form() -> None:
    """Dynamo's Source.name is a method in older torch and a property in
    torch 2.11; reading only one form took no module buffer at all."""

    class MethodSource:
        def name(self) -> str:
            return "L['self']._buffers['bias']"

    class PropertySource:
        @property
        def name(self) -> str:
            return "L['self']._modules['attn']._parameters['tau']"

    class Node:
        def __init__(self, source) -> None:
            self.meta = {"grapharg": type("GraphArg", (), {"source": source})()}

    assert kd._source_name(Node(MethodSource())) == "L['self']._buffers['bias']"
    assert kd._source_name(Node(PropertySource())).endswith("_parameters['tau']")
    assert kd._source_name(Node(None)) == ""
    assert kd._source_name(type("Bare", (), {"meta": {}})()) == ""
