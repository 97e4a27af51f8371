"""kiln.regions and kiln.choice's graph walks on a small stand-in for an FX
graph (no torch here): which nodes an attention region holds and reads, and
which value a site's timing looks at."""

import operator

from kiln import choice, regions


class Graph:
    def __init__(self):
        self.nodes = []

    def add(self, op, target, *inputs, shape=None):
        node = Node(self, op, target, list(inputs), shape)
        self.nodes.append(node)
        for source in inputs:
            source.users[node] = None
        return node


class Node:
    def __init__(self, graph, op, target, inputs, shape):
        self.graph, self.op, self.target = graph, op, target
        self.all_input_nodes = inputs
        self.users = {}
        self.name = f"n{len(graph.nodes)}"
        self.meta = {} if shape is None else {"val": type("V", (), {"shape": shape})()}


def function(name):
    def f():
        pass
    f.__name__ = name
    return f


def attention_graph(rope=False):
    """x -> three projections -> heads -> (rope) scores, causal mask,
    softmax, @ v -> merge -> projection."""
    g = Graph()
    x = g.add("placeholder", "x")
    weight = g.add("placeholder", "w")
    mask_input = g.add("placeholder", "mask")
    q = g.add("call_function", function("linear"), x, weight)
    k = g.add("call_function", function("linear"), x, weight)
    v = g.add("call_function", function("linear"), x, weight)
    q = g.add("call_method", "transpose", g.add("call_method", "view", q))
    k = g.add("call_method", "transpose", g.add("call_method", "view", k))
    v = g.add("call_method", "transpose", g.add("call_method", "view", v))
    if rope:
        q = g.add("call_method", "type_as", g.add("call_function",
                                                  function("view_as_real"), q), q)
    scores = g.add("call_function", function("matmul"), q,
                   g.add("call_method", "transpose", k), shape=(2, 8, 64, 64))
    scores = g.add("call_function", operator.mul, scores, shape=(2, 8, 64, 64))
    causal = g.add("call_function", function("tril"), g.add("call_function", function("ones")))
    scores = g.add("call_method", "masked_fill", scores, causal, shape=(2, 8, 64, 64))
    scores = g.add("call_function", operator.add, scores, mask_input)
    probs = g.add("call_method", "softmax", scores)
    out = g.add("call_function", function("matmul"), g.add("call_function",
                                                           function("dropout"), probs), v)
    merged = g.add("call_method", "reshape", g.add("call_method", "transpose", out))
    g.add("call_function", function("linear"), merged, weight)
    return g, out, probs, mask_input


def test_region_holds_the_attention_and_reads_the_projections():
    g, out, probs, mask_input = attention_graph()
    found = regions.regions(g)
    assert len(found) == 1
    region = found[0]
    assert region.output is out and region.softmax is probs
    targets = [getattr(n.target, "__name__", n.target) for n in region.leaves]
    assert targets == ["mask", "linear", "linear", "linear"]  # graph order
    assert mask_input in region.leaves
    names = {regions._name(n) for n in region.body}
    assert {"matmul", "softmax", "masked_fill", "tril", "ones", "dropout"} <= names
    assert "linear" not in names and "reshape" not in names  # after the product


def test_an_unknown_op_becomes_an_input():
    g, out, _, _ = attention_graph(rope=True)
    region = regions.regions(g)[0]
    leaf_names = [regions._name(n) for n in region.leaves]
    assert "view_as_real" in leaf_names
    assert all(regions._name(n) != "view_as_real" for n in region.body)


def test_no_region_without_a_product():
    g = Graph()
    x = g.add("placeholder", "x")
    g.add("call_function", function("linear"), g.add("call_method", "softmax", x))
    assert regions.regions(g) == []


def test_choice_walk_stops_at_sources_and_sizes_the_scores():
    g, out, _, mask_input = attention_graph()
    region = regions.regions(g)[0]
    sources = [n for n in region.leaves if n.op != "placeholder"]
    body, leaves = choice._subgraph(out, sources + sources[:1])  # a repeated source
    assert leaves[:3] == sources and mask_input in leaves
    assert len(leaves) == len(set(leaves))
    assert choice.largest_value(body) == 2 * 8 * 64 * 64
    assert choice.largest_value([]) is None

