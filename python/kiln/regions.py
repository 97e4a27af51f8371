"""Attention regions of a Dynamo graph, cut out to be exported on their own
(see docs/design.md, "A graph the exporter cannot convert is exported by
attention regions").

A region grows from the matmul that reads a softmax's probabilities back up
through the ops attention is written with (matmuls, elementwise arithmetic,
comparisons and masks, layout changes, gathers of a bias table, softmax
itself) and stops at anything else: a projection, a norm, an op the exporter
may not know. Those stops become the region's inputs. So a region holds the
scores, their scale, mask and bias, the softmax and the product with V, and
nothing of the rest of the model that could fail the export.
"""

import operator
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["Region", "regions"]

#: The ops a region may hold, by function or method name.
_ATTENTION_OPS = frozenset("""
    matmul bmm baddbmm einsum softmax _softmax log_softmax scaled_dot_product_attention
    mul truediv div add sub neg rsub masked_fill where tril triu ones ones_like
    zeros zeros_like full full_like new_ones new_zeros new_full arange eq ne lt le gt
    ge logical_not logical_and logical_or invert and_ or_ xor bitwise_not
    transpose permute view reshape expand expand_as unsqueeze squeeze contiguous
    to type type_as float half bfloat16 bool long int repeat repeat_interleave
    getitem tanh clamp clamp_min clamp_max exp sqrt rsqrt reciprocal pow dropout
    flatten unflatten chunk split narrow select abs log log2 minimum maximum min max
    cumsum clone detach sign floor_divide floordiv mod remainder embedding
    gather index_select t mT sum mean amax
""".split())

#: The products that read a softmax's probabilities.
_PRODUCTS = frozenset({"matmul", "bmm", "einsum", "baddbmm"})

#: The most nodes a region may hold (past it, the walk reached far beyond
#: one attention's terms).
_MOST_NODES = 400


def _name(node: Any) -> Optional[str]:
    if node.op == "call_method":
        return str(node.target)
    if node.op == "call_function":
        target = node.target
        if target is operator.getitem:
            return "getitem"
        return getattr(target, "__name__", None) or str(target)
    return None


def _is_softmax(node: Any) -> bool:
    return _name(node) in ("softmax", "_softmax")


class Region:
    """One attention region: `body` (its nodes, in graph order), `leaves`
    (the values it reads, each a node of the graph) and `output` (the node
    of the product with V)."""

    def __init__(self, body: List[Any], leaves: List[Any], output: Any,
                 softmax: Any) -> None:
        self.body, self.leaves, self.output, self.softmax = body, leaves, output, softmax


def _product_of(softmax: Any) -> Optional[Any]:
    """The matmul reading `softmax`'s probabilities through unary ops (a
    cast, eval-mode dropout, a layout change), or None."""
    node, steps = softmax, 0
    while steps < 8:
        users = list(node.users)
        if len(users) != 1:
            return None
        node, steps = users[0], steps + 1
        name = _name(node)
        if name in _PRODUCTS:
            return node
        if name not in _ATTENTION_OPS or name in ("softmax", "_softmax"):
            return None
    return None


def walk_up(output: Any, is_leaf: Callable[[Any], bool],
            most: Optional[int] = None) -> Optional[Tuple[List[Any], List[Any]]]:
    """The nodes `output` is computed from up to the nodes `is_leaf` stops
    at (`output` itself is never a leaf), and those leaves, each in graph
    order; None when more than `most` nodes would be taken."""
    body, leaves, seen = set(), [], set()
    pending = [output]
    while pending:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        if node is not output and is_leaf(node):
            leaves.append(node)
            continue
        body.add(node)
        if most is not None and len(body) > most:
            return None
        pending.extend(node.all_input_nodes)
    order = {node: position for position, node in enumerate(output.graph.nodes)}
    return (sorted(body, key=order.__getitem__),
            sorted(leaves, key=order.__getitem__))


def _grow(output: Any) -> Optional[Tuple[List[Any], List[Any]]]:
    """The attention ops `output` is computed with and the values they
    read, or None when the region grows past _MOST_NODES."""
    def is_leaf(node: Any) -> bool:
        name = _name(node)
        return (name is None or name not in _ATTENTION_OPS
                or name == "scaled_dot_product_attention")

    return walk_up(output, is_leaf, _MOST_NODES)


def regions(graph: Any) -> List[Region]:
    """The attention regions of an FX graph, one per softmax whose
    probabilities a matmul reads."""
    found = []
    for node in graph.nodes:
        if not _is_softmax(node):
            continue
        product = _product_of(node)
        if product is None:
            continue
        grown = _grow(product)
        if grown is None:
            continue
        body, leaves = grown
        found.append(Region(body, leaves, product, node))
    return found


def graph_module(leaves: Sequence[Any], fill: Callable[[Any, Dict[Any, Any]], Any]) -> Any:
    """A graph module taking `leaves` (nodes of another graph, as
    placeholders `in0`, ... with their metadata) and returning what
    `fill(graph, env)` writes, `env` mapping each leaf to its placeholder."""
    import torch

    graph = torch.fx.Graph()
    env: Dict[Any, Any] = {}
    for number, leaf in enumerate(leaves):
        placeholder = graph.placeholder(f"in{number}")
        placeholder.meta = dict(leaf.meta)
        env[leaf] = placeholder
    graph.output(fill(graph, env))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def copy_into(graph: Any, env: Dict[Any, Any], body: Sequence[Any], output: Any) -> Any:
    """Copies `body` (in order) into `graph`, reading `env`; returns the
    copy of `output`."""
    for node in body:
        env[node] = graph.node_copy(node, env.__getitem__)
    return env[output]


def module(region: Region) -> Any:
    """The region as a graph module taking its leaves and returning its
    output."""
    return graph_module(region.leaves, lambda graph, env: copy_into(
        graph, env, region.body, region.output))


def values(graph_module: Any, inputs: Sequence[Any], nodes: Sequence[Any]) -> Dict[str, Any]:
    """The values of `nodes` (by name) when `graph_module` runs on
    `inputs`."""
    import torch

    wanted = {node.name for node in nodes}
    captured: Dict[str, Any] = {}

    class Capture(torch.fx.Interpreter):
        def run_node(self, node: Any) -> Any:
            result = super().run_node(node)
            if node.name in wanted:
                captured[node.name] = result
            return result

    with torch.no_grad():
        Capture(graph_module).run(*inputs)
    return captured
