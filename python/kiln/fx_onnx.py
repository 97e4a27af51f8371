"""An exported program's FX graph written as ONNX by Kiln itself, for
kilnc's fusion report, without torch's ONNX exporter (see docs/design.md,
"The backend writes its own ONNX").

torch's exporter (``torch.onnx.export(dynamo=True)``) costs 0.7-2.4 s a graph
on the GPU machine, most of it fixed (its op registry, decompositions to
core ATen, translation and optimisation), where ``torch.export`` itself
takes 0.04-0.35 s. The backend needs from ONNX only what kilnc's fusion
reads: the ops attention is written with, translated exactly, and every
other value typed. So this module writes each node of the graph as:

- the ONNX op(s) computing it exactly, for the ops attention is written
  with (matmuls and einsum, SDPA as ONNX ``Attention``, softmax, scale and
  bias arithmetic, comparisons, masks and ``where``, casts, layout changes,
  factories, gathers, reductions); or
- an opaque node (domain ``pkg.kiln.fx``) with its result's type, for any
  other op (projections, norms, activations, an op translated wrongly would
  change what kilnc fuses, an opaque one cannot): kilnc reads it as a value
  computed elsewhere.

Every ONNX value carrying an FX node's result is named after that node, so
each value a report names is a node of the graph the backend rewrites (no
aliases, no value the exporter made). Graphs with symbolic sizes are left
to torch's exporter (``Unsupported``).

The writer reads only each node's ``op``, ``name``, ``target``, ``args``,
``kwargs`` and ``meta["val"]`` (``shape`` and ``dtype``), so it is tested
on graphs described without torch (test/python/test_fx_onnx.py).
"""

from __future__ import annotations

import operator
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["InPlace", "OnnxGraph", "Unsupported", "write"]

#: The domain of opaque nodes (ops kept whole, typed by their results).
OPAQUE_DOMAIN = "pkg.kiln.fx"

#: Lifted constants up to this many elements are written with their data
#: (kilnc folds masks built from them); larger ones become graph inputs.
MOST_CONSTANT_ELEMENTS = 1 << 24


class Unsupported(Exception):
    """The graph is not one this writer takes (symbolic sizes, an input of
    an unknown type); the backend uses torch's exporter for it."""


class InPlace(Unsupported):
    """The graph writes a tensor in place: functionalised
    (``run_decompositions({})``), it can be written."""


# --------------------------------------------------------------------------
# Element types.
# --------------------------------------------------------------------------

#: torch dtype name -> ONNX TensorProto element type.
_ELEMENT = {
    "float32": 1, "uint8": 2, "int8": 3, "int16": 5, "int32": 6, "int64": 7,
    "bool": 9, "float16": 10, "float64": 11, "bfloat16": 16,
    "float8_e4m3fn": 17, "float8_e4m3fnuz": 18, "float8_e5m2": 19,
    "float8_e5m2fnuz": 20,
}

#: The float8 element types (Cast to them carries `saturate`).
_FLOAT8 = frozenset({17, 18, 19, 20})

#: Complex dtypes, each written as its real pairs (torch.view_as_real's
#: layout: the real type, one more axis of 2). Values of these types are
#: never translated, only carried between opaque nodes (RoPE through
#: `view_as_complex`, a polar table, `view_as_real`): kilnc reads them as
#: values computed elsewhere, as it does every opaque result.
_COMPLEX = {"complex64": "float32", "complex128": "float64", "complex32": "float16"}

_FLOATS = ("float64", "float32", "float16", "bfloat16")
_INTS = ("int64", "int32", "int16", "int8", "uint8")


def dtype_name(dtype: Any) -> str:
    """`torch.float16` (or the string "float16") -> "float16"."""
    return str(dtype).replace("torch.", "")


def _category(dtype: str) -> int:
    if dtype == "bool":
        return 0
    if dtype in _INTS:
        return 1
    return 2


def _size(dtype: str) -> int:
    return {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2,
            "bfloat16": 2, "int16": 2}.get(dtype, 1)


def _promote_pair(a: str, b: str) -> str:
    """torch.promote_types for the dtypes this writer computes in."""
    if a == b:
        return a
    if _category(a) != _category(b):
        return a if _category(a) > _category(b) else b
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    if {a, b} == {"uint8", "int8"}:
        return "int16"
    return a if _size(a) >= _size(b) else b


def result_type(operands: Sequence[Tuple[int, str]]) -> str:
    """torch.result_type of operands given as (priority, dtype): priority 2
    for a tensor with dimensions, 1 for a 0-d tensor, 0 for a Python
    number (whose dtype is "float32", "int64" or "bool" by kind). A lower
    priority group sets the result only where its category is higher."""
    groups: Dict[int, str] = {}
    for priority, dtype in operands:
        groups[priority] = (dtype if priority not in groups
                            else _promote_pair(groups[priority], dtype))
    result = None
    for priority in (2, 1, 0):
        if priority not in groups:
            continue
        if result is None or _category(groups[priority]) > _category(result):
            result = groups[priority]
    if result is None:
        raise Unsupported("an operation without operands")
    return result


# --------------------------------------------------------------------------
# The graph written.
# --------------------------------------------------------------------------


class OnnxGraph:
    """What the writer made: the ONNX model, its user inputs' names (in the
    program's order), and the node names of its opaque nodes."""

    def __init__(self, model: Any, input_names: List[str], opaque: List[str]) -> None:
        self.model, self.input_names, self.opaque = model, input_names, opaque

    def save(self, path: str) -> None:
        import onnx

        onnx.save(self.model, path)


def _target_name(target: Any) -> str:
    """"aten.softmax.int" for an op overload, the function's name for a
    Python function (operator.getitem -> "getitem"), the string itself in
    tests."""
    if isinstance(target, str):
        return target
    if target is operator.getitem:
        return "getitem"
    text = str(target)
    if text.startswith("aten.") or text.startswith("prims."):
        return text
    return getattr(target, "__name__", None) or text


def _value(node: Any) -> Any:
    return getattr(node, "meta", {}).get("val")


def _is_node(x: Any) -> bool:
    return hasattr(x, "op") and hasattr(x, "meta") and hasattr(x, "name")


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def _static_shape(value: Any) -> List[int]:
    shape = []
    for size in value.shape:
        if not isinstance(size, int):
            try:
                size = int(size)
            except Exception as error:  # noqa: BLE001 (a symbolic size)
                raise Unsupported(f"a symbolic size {size}") from error
            if type(size) is not int:
                raise Unsupported(f"a symbolic size {size}")
        shape.append(size)
    return shape


class _Writer:
    def __init__(self, opset: int) -> None:
        from onnx import helper

        self.helper = helper
        self.opset = opset
        self.nodes: List[Any] = []
        self.initializers: List[Any] = []
        self.value_info: List[Any] = []
        self.types: Dict[str, Tuple[str, List[int]]] = {}
        self.opaque: List[str] = []
        self.counter = 0
        self.uses_attention = False
        self.uses_float8 = False

    # -- values ------------------------------------------------------------

    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"{base}__k{self.counter}"

    def declare(self, name: str, dtype: str, shape: List[int]) -> None:
        if dtype in _COMPLEX:
            dtype, shape = _COMPLEX[dtype], list(shape) + [2]
        if dtype not in _ELEMENT:
            raise Unsupported(f"element type {dtype}")
        self.types[name] = (dtype, shape)
        self.value_info.append(
            self.helper.make_tensor_value_info(name, _ELEMENT[dtype], shape))

    def emit(self, op: str, inputs: Sequence[str], outputs: Sequence[str],
             name: Optional[str] = None, domain: Optional[str] = None,
             **attributes: Any) -> None:
        if op == "Cast" and attributes.get("to") in _FLOAT8:
            # torch's float8 conversion does not saturate: past the largest
            # finite value it gives NaN (ONNX Cast's saturate=0, opset 19).
            attributes["saturate"] = 0
            self.uses_float8 = True
        self.nodes.append(self.helper.make_node(
            op, list(inputs), list(outputs), name=name or outputs[0],
            domain=domain, **attributes))

    def constant(self, values: Sequence[Any], dtype: str,
                 shape: Optional[List[int]] = None, base: str = "c") -> str:
        """A Constant node of `values` (flat) in `dtype`, of `shape`
        (default: a scalar for one value, else 1-D)."""
        if shape is None:
            shape = [] if len(values) == 1 else [len(values)]
        write_as = "float32" if dtype == "bfloat16" else dtype
        name = self.fresh(base)
        tensor = self.helper.make_tensor(name + "_t", _ELEMENT[write_as], shape,
                                         [_as(v, write_as) for v in values])
        if write_as == dtype:
            self.emit("Constant", [], [name], value=tensor)
            return name
        self.emit("Constant", [], [name + "_f"], value=tensor)
        self.emit("Cast", [name + "_f"], [name], to=_ELEMENT[dtype])
        return name

    def ints(self, values: Sequence[int], base: str = "i") -> str:
        return self.constant([int(v) for v in values], "int64", [len(values)], base)

    def cast(self, name: str, dtype: str) -> str:
        """`name` in `dtype` (itself where it already is)."""
        have = self.types.get(name, (None,))[0]
        if have == dtype:
            return name
        out = self.fresh(name)
        self.emit("Cast", [name], [out], to=_ELEMENT[dtype])
        if have is not None:
            self.types[out] = (dtype, self.types[name][1])
        return out

    def operand(self, x: Any, dtype: str) -> str:
        """An FX argument (a node or a Python number) as a value in
        `dtype`."""
        if _is_node(x):
            return self.cast(self.name_of(x), dtype)
        if isinstance(x, (bool, int, float)):
            return self.constant([x], dtype)
        raise Unsupported(f"operand {x!r}")

    def name_of(self, node: Any) -> str:
        if node.name not in self.types:
            raise Unsupported(f"{node.name} has no tensor value")
        return node.name

    def finish(self, node: Any, name: str) -> None:
        """Gives `name` the node's own name and dtype."""
        dtype, _ = out_type(node)
        if self.types.get(name, (dtype,))[0] != dtype:
            self.emit("Cast", [name], [node.name], to=_ELEMENT[dtype])
        else:
            self.emit("Identity", [name], [node.name])


def _as(value: Any, dtype: str) -> Any:
    if dtype == "bool":
        return bool(value)
    if dtype in _INTS:
        return int(value)
    return float(value)


def out_type(node: Any) -> Tuple[str, List[int]]:
    value = _value(node)
    if not _is_tensor(value):
        raise Unsupported(f"{node.name} is not a tensor")
    return dtype_name(value.dtype), _static_shape(value)


def _operand_type(w: _Writer, x: Any) -> Tuple[int, str]:
    """(priority, dtype) of an FX argument for result_type."""
    if _is_node(x):
        dtype, shape = w.types[w.name_of(x)]
        return (2 if shape else 1), dtype
    if isinstance(x, bool):
        return 0, "bool"
    if isinstance(x, int):
        return 0, "int64"
    if isinstance(x, float):
        return 0, "float32"
    raise Unsupported(f"operand {x!r}")


def _arg(node: Any, index: int, name: str, default: Any = None) -> Any:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


# --------------------------------------------------------------------------
# Translations, by op.
# --------------------------------------------------------------------------

_Handler = Callable[[_Writer, Any], None]
_HANDLERS: Dict[str, _Handler] = {}


def _handles(*names: str) -> Callable[[_Handler], _Handler]:
    def register(function: _Handler) -> _Handler:
        for name in names:
            _HANDLERS[name] = function
        return function
    return register


@_handles("aten.clone.default", "aten.contiguous.default", "aten.alias.default",
          "aten.detach.default", "aten.detach_.default", "aten.lift_fresh_copy.default",
          "aten._to_copy.default", "aten.to.dtype", "aten.to.dtype_layout",
          "aten.to.device", "aten.to.other", "aten.type_as.default",
          "prims.convert_element_type.default")
def _copy(w: _Writer, node: Any) -> None:
    w.finish(node, w.name_of(node.args[0]))


@_handles("aten.dropout.default")
def _dropout(w: _Writer, node: Any) -> None:
    if _arg(node, 2, "train", False) and _arg(node, 1, "p", 0.0):
        raise _Opaque("dropout while training")
    w.finish(node, w.name_of(node.args[0]))


@_handles("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default",
          "aten.unsqueeze.default", "aten.squeeze.default", "aten.squeeze.dim",
          "aten.squeeze.dims", "aten.flatten.using_ints", "aten.unflatten.int",
          "aten.view_as.default", "aten.reshape_as.default")
def _reshape(w: _Writer, node: Any) -> None:
    _, shape = out_type(node)
    w.emit("Reshape", [w.name_of(node.args[0]), w.ints(shape)], [node.name])


@_handles("aten.permute.default")
def _permute(w: _Writer, node: Any) -> None:
    rank = len(w.types[w.name_of(node.args[0])][1])
    perm = [int(d) % rank for d in node.args[1]] if rank else []
    w.emit("Transpose", [w.name_of(node.args[0])], [node.name], perm=perm)


@_handles("aten.transpose.int", "aten.t.default", "aten.swapaxes.default")
def _transpose(w: _Writer, node: Any) -> None:
    source = w.name_of(node.args[0])
    rank = len(w.types[source][1])
    if rank < 2:
        w.finish(node, source)
        return
    a, b = (node.args[1], node.args[2]) if len(node.args) > 2 else (0, 1)
    perm = list(range(rank))
    perm[int(a) % rank], perm[int(b) % rank] = perm[int(b) % rank], perm[int(a) % rank]
    w.emit("Transpose", [source], [node.name], perm=perm)


@_handles("aten.expand.default", "aten.expand_as.default")
def _expand(w: _Writer, node: Any) -> None:
    _, shape = out_type(node)
    w.emit("Expand", [w.name_of(node.args[0]), w.ints(shape)], [node.name])


@_handles("aten.repeat.default")
def _repeat(w: _Writer, node: Any) -> None:
    source = w.name_of(node.args[0])
    repeats = [int(r) for r in node.args[1]]
    shape = w.types[source][1]
    if len(repeats) > len(shape):
        widened = w.fresh(source)
        w.emit("Reshape", [source, w.ints([1] * (len(repeats) - len(shape)) + shape)],
               [widened])
        source = widened
    w.emit("Tile", [source, w.ints(repeats)], [node.name])


_LAST = (1 << 63) - 1


@_handles("aten.slice.Tensor")
def _slice(w: _Writer, node: Any) -> None:
    dim = _arg(node, 1, "dim", 0)
    start = _arg(node, 2, "start", None)
    end = _arg(node, 3, "end", None)
    step = _arg(node, 4, "step", 1)
    start = 0 if start is None else int(start)
    end = _LAST if end is None else min(int(end), _LAST)
    w.emit("Slice", [w.name_of(node.args[0]), w.ints([start]), w.ints([end]),
                     w.ints([int(dim)]), w.ints([int(step)])], [node.name])


@_handles("aten.narrow.default")
def _narrow(w: _Writer, node: Any) -> None:
    dim, start, length = (int(a) for a in node.args[1:4])
    w.emit("Slice", [w.name_of(node.args[0]), w.ints([start]),
                     w.ints([start + length]), w.ints([dim])], [node.name])


def _take(w: _Writer, source: str, dim: int, index: int, name: str) -> None:
    """Element `index` of `source` along `dim`, the axis dropped: a Slice
    and a Squeeze, which kilnc follows back to `source` (with a Gather of a
    scalar index the operand's sources were lost)."""
    piece = w.fresh(name)
    w.emit("Slice", [source, w.ints([index]), w.ints([index + 1]), w.ints([dim])],
           [piece])
    w.emit("Squeeze", [piece, w.ints([dim])], [name])


@_handles("aten.select.int")
def _select(w: _Writer, node: Any) -> None:
    source = w.name_of(node.args[0])
    shape = w.types[source][1]
    dim = int(node.args[1]) % max(len(shape), 1)
    index = int(node.args[2])
    if index < 0:
        index += int(shape[dim])
    _take(w, source, dim, index, node.name)


@_handles("aten.cat.default", "aten.concat.default")
def _cat(w: _Writer, node: Any) -> None:
    dtype, _ = out_type(node)
    parts = [w.operand(x, dtype) for x in node.args[0]
             if not (_is_node(x) and w.types[w.name_of(x)][1] == [0])]
    w.emit("Concat", parts, [node.name], axis=int(_arg(node, 1, "dim", 0)))


def _pieces(w: _Writer, node: Any, values: Sequence[Any], dim: int, squeeze: bool) -> None:
    """The outputs of a split-like op (`values`, its results' tensors)
    written as consecutive slices along `dim`, named `<node>__<i>`."""
    source = w.name_of(node.args[0])
    rank = len(w.types[source][1])
    dim %= max(rank, 1)
    start = 0
    for number, value in enumerate(values):
        size = 1 if squeeze else _static_shape(value)[dim]
        name = f"{node.name}__{number}"
        if squeeze:
            _take(w, source, dim, start, name)
        else:
            w.emit("Slice", [source, w.ints([start]), w.ints([start + size]),
                             w.ints([dim])], [name])
        w.declare(name, dtype_name(value.dtype), _static_shape(value))
        start += size


@_handles("aten.split.Tensor", "aten.split_with_sizes.default", "aten.chunk.default",
          "aten.tensor_split.sections", "aten.unbind.int")
def _split(w: _Writer, node: Any) -> None:
    values = list(_value(node))
    squeeze = _target_name(node.target) == "aten.unbind.int"
    dim = _arg(node, 1 if squeeze else 2, "dim", 0)
    _pieces(w, node, values, int(dim), squeeze)


class _Dead(Exception):
    """This node computes nothing the graph reads and is not written (the
    getitem torch.export keeps of a piece no handler wrote)."""


@_handles("getitem")
def _getitem(w: _Writer, node: Any) -> None:
    source, index = node.args
    name = f"{source.name}__{int(index)}"
    if name not in w.types:
        if getattr(node, "users", None) == {}:
            raise _Dead(node.name)
        raise Unsupported(f"{node.name} takes an output that is not a tensor")
    w.finish(node, name)


@_handles("aten.matmul.default", "aten.bmm.default", "aten.mm.default")
def _matmul(w: _Writer, node: Any) -> None:
    dtype, _ = out_type(node)
    w.emit("MatMul", [w.operand(node.args[0], dtype), w.operand(node.args[1], dtype)],
           [node.name])


def explicit_einsum(equation: str, ranks: Sequence[int]) -> str:
    """`equation` with each ellipsis written as letters of its own (the
    operands' `ranks` say how many axes each stands for; they align to the
    right, as numpy's broadcasting does), spaces removed."""
    equation = equation.replace(" ", "")
    if "..." not in equation:
        return equation
    if "->" not in equation:
        raise _Opaque("an implicit einsum output with an ellipsis")
    inputs, output = equation.split("->")
    terms = inputs.split(",")
    if len(terms) != len(ranks):
        raise _Opaque("einsum operands do not match the equation")
    used = set(equation)
    free = [c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
            if c not in used]
    counts = [rank - (len(term) - 3) if "..." in term else 0
              for term, rank in zip(terms, ranks)]
    widest = max(counts)
    if min(counts) < 0 or widest > len(free):
        raise _Opaque("an einsum ellipsis of unknown extent")
    letters = "".join(free[:widest])
    terms = [term.replace("...", letters[widest - n:]) for term, n in zip(terms, counts)]
    return ",".join(terms) + "->" + output.replace("...", letters)


@_handles("aten.einsum.default")
def _einsum(w: _Writer, node: Any) -> None:
    dtype, _ = out_type(node)
    inputs = [w.operand(x, dtype) for x in node.args[1]]
    equation = explicit_einsum(str(node.args[0]),
                               [len(w.types[w.name_of(x)][1]) for x in node.args[1]])
    w.emit("Einsum", inputs, [node.name], equation=equation)


@_handles("aten.baddbmm.default")
def _baddbmm(w: _Writer, node: Any) -> None:
    dtype, _ = out_type(node)
    beta = node.kwargs.get("beta", 1)
    alpha = node.kwargs.get("alpha", 1)
    product = w.fresh(node.name)
    w.emit("MatMul", [w.operand(node.args[1], dtype), w.operand(node.args[2], dtype)],
           [product])
    if alpha != 1:
        scaled = w.fresh(node.name)
        w.emit("Mul", [product, w.constant([alpha], dtype)], [scaled])
        product = scaled
    if beta == 0:
        w.emit("Identity", [product], [node.name])
        return
    base = w.operand(node.args[0], dtype)
    if beta != 1:
        scaled = w.fresh(node.name)
        w.emit("Mul", [base, w.constant([beta], dtype)], [scaled])
        base = scaled
    w.emit("Add", [base, product], [node.name])


@_handles("aten.scaled_dot_product_attention.default")
def _sdpa(w: _Writer, node: Any) -> None:
    query, key, value = node.args[:3]
    mask = _arg(node, 3, "attn_mask", None)
    dropout = _arg(node, 4, "dropout_p", 0.0)
    causal = bool(_arg(node, 5, "is_causal", False))
    scale = node.kwargs.get("scale", node.args[6] if len(node.args) > 6 else None)
    if dropout:
        raise _Opaque("attention dropout")
    names = [w.name_of(query), w.name_of(key), w.name_of(value)]
    ranks = {len(w.types[n][1]) for n in names}
    if ranks != {4}:
        raise _Opaque("SDPA on inputs not of rank 4")
    dtypes = {w.types[n][0] for n in names}
    if len(dtypes) != 1:
        raise _Opaque("SDPA on inputs of different dtypes")
    if mask is not None:
        mask_dtype = w.types[w.name_of(mask)][0]
        names.append(w.name_of(mask) if mask_dtype == "bool"
                     else w.cast(w.name_of(mask), dtypes.pop()))
    attributes: Dict[str, Any] = {"is_causal": int(causal)}
    if scale is not None:
        attributes["scale"] = float(scale)
    w.uses_attention = True
    w.emit("Attention", names, [node.name], **attributes)


@_handles("aten.softmax.int", "aten._softmax.default",
          "aten.log_softmax.int", "aten._log_softmax.default")
def _softmax(w: _Writer, node: Any) -> None:
    """Softmax or LogSoftmax over one axis: `dtype` (the `.int` overloads)
    or `half_to_float` (the `_` ones) casts the input first."""
    name = _target_name(node.target)
    op = "LogSoftmax" if "log_softmax" in name else "Softmax"
    source = w.name_of(node.args[0])
    dim = int(node.args[1])
    if name.endswith(".int"):
        dtype = _arg(node, 2, "dtype", None)
        if dtype is not None:
            source = w.cast(source, dtype_name(dtype))
    elif node.args[2]:  # half_to_float
        source = w.cast(source, "float32")
    if w.types[source][0] == out_type(node)[0]:
        w.emit(op, [source], [node.name], axis=dim)
        return
    result = w.fresh(node.name)
    w.emit(op, [source], [result], axis=dim)
    w.types[result] = (w.types[source][0], w.types[source][1])
    w.finish(node, result)


_UNARY = {
    "neg": "Neg", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "reciprocal": "Reciprocal",
    "tanh": "Tanh", "abs": "Abs", "sigmoid": "Sigmoid", "relu": "Relu", "floor": "Floor",
    "ceil": "Ceil", "sin": "Sin", "cos": "Cos", "erf": "Erf",
}


def _unary(op: str) -> _Handler:
    def handler(w: _Writer, node: Any) -> None:
        dtype, _ = out_type(node)
        w.emit(op, [w.operand(node.args[0], dtype)], [node.name])
    return handler


for _name, _op in _UNARY.items():
    _HANDLERS[f"aten.{_name}.default"] = _unary(_op)


@_handles("aten.rsqrt.default")
def _rsqrt(w: _Writer, node: Any) -> None:
    dtype, _ = out_type(node)
    root = w.fresh(node.name)
    w.emit("Sqrt", [w.operand(node.args[0], dtype)], [root])
    w.emit("Reciprocal", [root], [node.name])


@_handles("aten.isinf.default", "aten.isnan.default")
def _is(w: _Writer, node: Any) -> None:
    op = "IsInf" if "isinf" in _target_name(node.target) else "IsNaN"
    w.emit(op, [w.name_of(node.args[0])], [node.name])


#: The ops whose results are probabilities: values in [0, 1], or NaN.
_PROBABILITIES = frozenset({"aten._softmax.default", "aten.softmax.int"})


@_handles("aten.nan_to_num.default")
def _nan_to_num(w: _Writer, node: Any) -> None:
    """`nan_to_num` of a softmax's probabilities (code that zeroes the rows
    which see no key): they hold no infinity, so only the NaN replacement
    acts, written as Where(IsNaN(p), nan, p). Of anything else it is opaque
    (the importer reads IsInf of constants only)."""
    source = node.args[0]
    if _target_name(getattr(source, "target", None)) not in _PROBABILITIES:
        raise _Opaque("nan_to_num of values other than a softmax's")
    dtype, _ = out_type(node)
    nan = _arg(node, 1, "nan", 0.0)
    nan = 0.0 if nan is None else float(nan)
    found = w.fresh(node.name)
    w.emit("IsNaN", [w.name_of(source)], [found])
    w.emit("Where", [found, w.constant([nan], dtype), w.operand(source, dtype)],
           [node.name])


@_handles("aten.logical_not.default", "aten.bitwise_not.default")
def _not(w: _Writer, node: Any) -> None:
    dtype = w.types[w.name_of(node.args[0])][0]
    if "bitwise" in _target_name(node.target) and dtype != "bool":
        raise _Opaque("bitwise not of integers")
    w.emit("Not", [w.operand(node.args[0], "bool")], [node.name])


_ARITHMETIC = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div",
               "true_divide": "Div", "maximum": "Max", "minimum": "Min", "pow": "Pow"}
_ALIASES = {"aten.max.other": "aten.maximum.default", "aten.min.other": "aten.minimum.default"}


def _arithmetic(op: str) -> _Handler:
    def handler(w: _Writer, node: Any) -> None:
        dtype, _ = out_type(node)
        a, b = node.args[0], node.args[1]
        if op in ("Add", "Sub"):
            alpha = node.kwargs.get("alpha", node.args[2] if len(node.args) > 2 else 1)
            if alpha != 1:
                scaled = w.fresh(node.name)
                w.emit("Mul", [w.operand(b, dtype), w.constant([alpha], dtype)], [scaled])
                w.types[scaled] = (dtype, [])
                b = scaled
        mode = node.kwargs.get("rounding_mode")
        if op == "Div" and mode is not None:
            if dtype not in _FLOATS:
                raise _Opaque("integer division with rounding")
            quotient = w.fresh(node.name)
            w.emit("Div", [w.operand(a, dtype), _operand_name(w, b, dtype)], [quotient])
            rounded = w.fresh(node.name)
            if mode != "floor":
                raise _Opaque(f"division rounded by {mode!r}")
            w.emit("Floor", [quotient], [rounded])
            w.emit("Identity", [rounded], [node.name])
            return
        if dtype == "bool":
            # bool * bool is a logical and, bool + bool an or (torch).
            logical = {"Mul": "And", "Add": "Or", "Max": "Or", "Min": "And"}.get(op)
            if logical is None or node.kwargs.get("alpha", 1) != 1:
                raise _Opaque(f"{op} on booleans")
            w.emit(logical, [w.operand(a, "bool"), w.operand(b, "bool")], [node.name])
            return
        if op == "Pow" and _is_node(a) and not _is_node(b):
            # A Python exponent stays exact in the base's dtype.
            w.emit("Pow", [w.operand(a, dtype), w.constant([b], dtype)], [node.name])
            return
        w.emit(op, [w.operand(a, dtype), _operand_name(w, b, dtype)], [node.name])
    return handler


def _operand_name(w: _Writer, x: Any, dtype: str) -> str:
    if isinstance(x, str):  # a value this writer made
        return w.cast(x, dtype)
    return w.operand(x, dtype)


for _name, _op in _ARITHMETIC.items():
    for _overload in ("Tensor", "Scalar", "Tensor_mode", "Scalar_mode", "default",
                      "Tensor_Scalar", "Tensor_Tensor"):
        _HANDLERS[f"aten.{_name}.{_overload}"] = _arithmetic(_op)


for _alias, _name in _ALIASES.items():
    _HANDLERS[_alias] = _HANDLERS[_name]


@_handles("aten.pow.Scalar")
def _pow_scalar(w: _Writer, node: Any) -> None:
    dtype, _ = out_type(node)
    w.emit("Pow", [w.constant([node.args[0]], dtype), w.operand(node.args[1], dtype)],
           [node.name])


@_handles("aten.rsub.Scalar", "aten.rsub.Tensor")
def _rsub(w: _Writer, node: Any) -> None:
    dtype, _ = out_type(node)
    a = w.operand(node.args[0], dtype)
    alpha = node.kwargs.get("alpha", 1)
    if alpha != 1:
        scaled = w.fresh(node.name)
        w.emit("Mul", [a, w.constant([alpha], dtype)], [scaled])
        a = scaled
    w.emit("Sub", [w.operand(node.args[1], dtype), a], [node.name])


@_handles("aten.clamp.default", "aten.clamp_min.default", "aten.clamp_max.default")
def _clamp(w: _Writer, node: Any) -> None:
    dtype, _ = out_type(node)
    name = _target_name(node.target)
    low = high = None
    if name == "aten.clamp.default":
        low, high = _arg(node, 1, "min"), _arg(node, 2, "max")
    elif name == "aten.clamp_min.default":
        low = node.args[1]
    else:
        high = node.args[1]
    inputs = [w.operand(node.args[0], dtype),
              "" if low is None else w.constant([low], dtype),
              "" if high is None else w.constant([high], dtype)]
    while inputs[-1] == "":
        inputs.pop()
    w.emit("Clip", inputs, [node.name])


@_handles("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther",
          "aten.where.Scalar")
def _where(w: _Writer, node: Any) -> None:
    dtype, _ = out_type(node)
    w.emit("Where", [w.operand(node.args[0], "bool"), w.operand(node.args[1], dtype),
                     w.operand(node.args[2], dtype)], [node.name])


@_handles("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def _masked_fill(w: _Writer, node: Any) -> None:
    dtype, _ = out_type(node)
    w.emit("Where", [w.operand(node.args[1], "bool"), w.operand(node.args[2], dtype),
                     w.operand(node.args[0], dtype)], [node.name])


_COMPARE = {"eq": ("Equal", False), "ne": ("Equal", True), "lt": ("Less", False),
            "le": ("LessOrEqual", False), "gt": ("Greater", False),
            "ge": ("GreaterOrEqual", False)}


def _compare(op: str, negate: bool) -> _Handler:
    def handler(w: _Writer, node: Any) -> None:
        a, b = node.args[0], node.args[1]
        dtype = result_type([_operand_type(w, a), _operand_type(w, b)])
        inputs = [w.operand(a, dtype), w.operand(b, dtype)]
        if not negate:
            w.emit(op, inputs, [node.name])
            return
        equal = w.fresh(node.name)
        w.emit(op, inputs, [equal])
        w.emit("Not", [equal], [node.name])
    return handler


for _name, (_op, _negate) in _COMPARE.items():
    for _overload in ("Tensor", "Scalar"):
        _HANDLERS[f"aten.{_name}.{_overload}"] = _compare(_op, _negate)


_LOGICAL = {"logical_and": "And", "logical_or": "Or", "logical_xor": "Xor",
            "bitwise_and": "And", "bitwise_or": "Or", "bitwise_xor": "Xor"}


def _logical(op: str) -> _Handler:
    def handler(w: _Writer, node: Any) -> None:
        dtype, _ = out_type(node)
        if dtype != "bool":
            raise _Opaque("bitwise op on integers")
        w.emit(op, [w.operand(node.args[0], "bool"), w.operand(node.args[1], "bool")],
               [node.name])
    return handler


for _name, _op in _LOGICAL.items():
    for _overload in ("default", "Tensor", "Scalar"):
        _HANDLERS[f"aten.{_name}.{_overload}"] = _logical(_op)


@_handles("aten.tril.default", "aten.triu.default")
def _trilu(w: _Writer, node: Any) -> None:
    diagonal = int(_arg(node, 1, "diagonal", 0))
    w.emit("Trilu", [w.name_of(node.args[0]), w.constant([diagonal], "int64")],
           [node.name], upper=int("triu" in _target_name(node.target)))


_REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "amax": "ReduceMax",
           "amin": "ReduceMin", "logsumexp": "ReduceLogSumExp"}


def _reduce(op: str) -> _Handler:
    def handler(w: _Writer, node: Any) -> None:
        dtype, _ = out_type(node)
        source = w.name_of(node.args[0])
        rank = len(w.types[source][1])
        dims = _arg(node, 1, "dim", None)
        keep = bool(_arg(node, 2, "keepdim", False))
        dims = list(range(rank)) if not dims else [int(d) % rank for d in dims]
        w.emit(op, [w.cast(source, dtype), w.ints(dims)], [node.name], keepdims=int(keep))
    return handler


for _name, _op in _REDUCE.items():
    for _overload in ("dim_IntList", "dim", "default"):
        _HANDLERS[f"aten.{_name}.{_overload}"] = _reduce(_op)


@_handles("aten.max.dim", "aten.min.dim")
def _extremum_dim(w: _Writer, node: Any) -> None:
    """`x.max(dim, keepdim)`'s values (`<node>__0`) as ReduceMax (ReduceMin
    for `min`), the translation `amax` takes: a softmax stabilised by hand
    with `.max(-1, keepdim=True).values` is read as with `amax`. Its indices
    (`<node>__1`) are written whole, as an opaque node of their own, where
    the graph reads them."""
    values, indices = _value(node)
    source = w.name_of(node.args[0])
    rank = len(w.types[source][1])
    dim = int(_arg(node, 1, "dim", 0)) % max(rank, 1)
    keep = bool(_arg(node, 2, "keepdim", False))
    dtype = dtype_name(values.dtype)
    op = "ReduceMax" if _target_name(node.target) == "aten.max.dim" else "ReduceMin"
    w.emit(op, [w.cast(source, dtype), w.ints([dim])], [f"{node.name}__0"],
           keepdims=int(keep))
    w.declare(f"{node.name}__0", dtype, _static_shape(values))
    users = getattr(node, "users", None)
    if users is not None and all(
            _target_name(u.target) == "getitem"
            and (u.args[1] == 0 or not getattr(u, "users", None)) for u in users):
        return  # the indices are not read (torch.export keeps a dead getitem)
    op_name = re.sub(r"[^A-Za-z0-9_]", "_", _target_name(node.target))
    w.emit(f"{op_name}_indices", [source], [f"{node.name}__1"],
           name=f"{node.name}__indices", domain=OPAQUE_DOMAIN)
    w.opaque.append(f"{node.name}__indices")
    w.declare(f"{node.name}__1", dtype_name(indices.dtype), _static_shape(indices))


@_handles("aten.cumsum.default")
def _cumsum(w: _Writer, node: Any) -> None:
    dtype, _ = out_type(node)
    w.emit("CumSum", [w.operand(node.args[0], dtype),
                      w.constant([int(node.args[1])], "int64")], [node.name])


@_handles("aten.embedding.default")
def _embedding(w: _Writer, node: Any) -> None:
    w.emit("Gather", [w.name_of(node.args[0]), w.name_of(node.args[1])], [node.name],
           axis=0)


@_handles("aten.index_select.default")
def _index_select(w: _Writer, node: Any) -> None:
    w.emit("Gather", [w.name_of(node.args[0]), w.name_of(node.args[2])], [node.name],
           axis=int(node.args[1]))


@_handles("aten.gather.default")
def _gather(w: _Writer, node: Any) -> None:
    w.emit("GatherElements", [w.name_of(node.args[0]), w.name_of(node.args[2])],
           [node.name], axis=int(node.args[1]))


@_handles("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def _arange(w: _Writer, node: Any) -> None:
    dtype, _ = out_type(node)
    name = _target_name(node.target)
    if name == "aten.arange.default":
        start, end, step = 0, node.args[0], 1
    else:
        start, end = node.args[0], node.args[1]
        step = _arg(node, 2, "step", 1) if name == "aten.arange.start_step" else 1
    if any(_is_node(x) for x in (start, end, step)):
        raise _Opaque("arange of a computed size")
    w.emit("Range", [w.constant([start], dtype), w.constant([end], dtype),
                     w.constant([step], dtype)], [node.name])


_FILL = {"aten.ones.default": 1, "aten.zeros.default": 0, "aten.ones_like.default": 1,
         "aten.zeros_like.default": 0, "aten.new_ones.default": 1,
         "aten.new_zeros.default": 0}


@_handles(*_FILL, "aten.full.default", "aten.full_like.default",
          "aten.new_full.default", "aten.scalar_tensor.default")
def _filled(w: _Writer, node: Any) -> None:
    dtype, shape = out_type(node)
    name = _target_name(node.target)
    if name in _FILL:
        value = _FILL[name]
    elif name == "aten.scalar_tensor.default":
        value = node.args[0]
    elif name == "aten.full.default":
        value = node.args[1]
    else:  # full_like, new_full
        value = node.args[1] if name == "aten.full_like.default" else node.args[2]
    if _is_node(value):
        raise _Opaque("a fill of a computed value")
    filled = w.constant([value], dtype)
    w.emit("Expand", [filled, w.ints(shape)], [node.name])


# --------------------------------------------------------------------------
# The graph.
# --------------------------------------------------------------------------


class _Opaque(Exception):
    """This node is written as an opaque node (the reason, for the report)."""


def _opaque(w: _Writer, node: Any) -> None:
    inputs = []
    for x in list(node.args) + list(node.kwargs.values()):
        for y in (x if isinstance(x, (list, tuple)) else [x]):
            if _is_node(y) and y.name in w.types:
                inputs.append(y.name)
    value = _value(node)
    if _is_tensor(value):
        outputs = [node.name]
    elif isinstance(value, (list, tuple)):
        outputs = [f"{node.name}__{i}" if _is_tensor(v) else ""
                   for i, v in enumerate(value)]
    else:
        return
    op = re.sub(r"[^A-Za-z0-9_]", "_", _target_name(node.target))
    w.emit(op or "op", inputs, outputs, name=node.name, domain=OPAQUE_DOMAIN)
    w.opaque.append(node.name)
    if isinstance(value, (list, tuple)):
        for name, v in zip(outputs, value):
            if name:
                w.declare(name, dtype_name(v.dtype), _static_shape(v))


def write(graph: Any, lifted: Optional[Dict[str, Any]] = None,
          opset: int = 18) -> OnnxGraph:
    """The FX `graph` (an exported program's, static sizes) as ONNX.
    `lifted`: placeholder name -> the tensor a lifted parameter, buffer or
    constant holds (written as an initializer, or as an input when large);
    every other placeholder is a user input. Raises Unsupported for a graph
    this writer does not take."""
    from onnx import helper

    lifted = lifted or {}
    w = _Writer(opset)
    inputs, input_names, outputs = [], [], []
    for node in graph.nodes:
        if node.op == "placeholder":
            value = _value(node)
            if not _is_tensor(value):
                raise Unsupported(f"the input {node.name} is not a tensor")
            dtype, shape = out_type(node)
            data = lifted.get(node.name)
            if dtype in _COMPLEX:
                # A complex table (RoPE's `freqs_cis`) as its real pairs.
                dtype, shape = _COMPLEX[dtype], shape + [2]
                if data is not None:
                    import torch

                    data = torch.view_as_real(data.detach())
            if dtype not in _ELEMENT:
                raise Unsupported(f"the input {node.name} is {dtype}")
            w.types[node.name] = (dtype, shape)
            if data is not None and _numel(shape) <= MOST_CONSTANT_ELEMENTS:
                w.initializers.append(_tensor_proto(node.name, data, dtype, shape))
                continue
            inputs.append(helper.make_tensor_value_info(node.name, _ELEMENT[dtype], shape))
            if data is None:
                input_names.append(node.name)
        elif node.op == "call_function":
            _write_node(w, node)
        elif node.op == "output":
            results = node.args[0]
            for x in (results if isinstance(results, (list, tuple)) else [results]):
                if _is_node(x) and x.name in w.types and x.name not in outputs:
                    outputs.append(x.name)
        elif node.op == "get_attr":
            raise Unsupported(f"the graph reads an attribute ({node.target})")
        else:
            raise Unsupported(f"a {node.op} node ({node.name})")
    opset = max(opset, 23) if w.uses_attention else opset
    opset = max(opset, 19) if w.uses_float8 else opset
    graph_proto = helper.make_graph(
        w.nodes, "kiln_fx", inputs,
        [helper.make_tensor_value_info(name, _ELEMENT[w.types[name][0]], w.types[name][1])
         for name in outputs],
        initializer=w.initializers,
        value_info=[vi for vi in w.value_info if vi.name not in outputs])
    model = helper.make_model(graph_proto, producer_name="kiln.fx_onnx",
                              opset_imports=[helper.make_opsetid("", opset),
                                             helper.make_opsetid(OPAQUE_DOMAIN, 1)])
    model.ir_version = 11 if opset >= 23 else 8
    return OnnxGraph(model, input_names, w.opaque)


#: In-place ops that change no value (autograd metadata only): written as
#: an identity.
_METADATA_ONLY = frozenset({"aten.detach_.default"})


def mutates(target: Any) -> bool:
    """Whether an op writes one of its inputs (`aten.masked_fill_.Scalar`,
    `aten.copy_.default`): its users then read the input node for the
    written value, which a data-flow graph cannot say. `detach_` (Hugging
    Face's T5 and BLOOM call it) changes no value and does not count."""
    if _target_name(target) in _METADATA_ONLY:
        return False
    schema = getattr(target, "_schema", None)
    if schema is not None and getattr(schema, "is_mutable", False):
        return True
    parts = _target_name(target).split(".")
    return (len(parts) >= 2 and parts[0] in ("aten", "prims")
            and parts[1].endswith("_") and not parts[1].endswith("__")
            and not parts[1].startswith("_"))


def _is_complex(value: Any) -> bool:
    return _is_tensor(value) and dtype_name(value.dtype) in _COMPLEX


def _touches_complex(node: Any) -> bool:
    """Whether `node` computes or reads a complex value: it is then written
    opaque (no handler translates complex arithmetic)."""
    if _is_complex(_value(node)):
        return True
    for x in list(node.args) + list(node.kwargs.values()):
        for y in (x if isinstance(x, (list, tuple)) else [x]):
            if _is_node(y) and _is_complex(_value(y)):
                return True
    return False


def _write_node(w: _Writer, node: Any) -> None:
    if mutates(node.target):
        raise InPlace(f"{node.name} writes in place ({_target_name(node.target)})")
    value = _value(node)
    handler = (None if _touches_complex(node)
               else _HANDLERS.get(_target_name(node.target)))
    if handler is not None:
        marks = len(w.nodes), len(w.value_info), set(w.types)
        try:
            handler(w, node)
        except _Dead:
            return
        except (_Opaque, Unsupported, KeyError, TypeError, ValueError, IndexError):
            # Written whole instead: what the handler made goes.
            del w.nodes[marks[0]:]
            del w.value_info[marks[1]:]
            for name in set(w.types) - marks[2]:
                del w.types[name]
            handler = None
    if handler is None:
        _opaque(w, node)
        if not _is_tensor(value):
            return
    if _is_tensor(value) and node.name not in w.types:
        dtype, shape = out_type(node)
        w.declare(node.name, dtype, shape)


def _numel(shape: Sequence[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _tensor_proto(name: str, data: Any, dtype: str, shape: List[int]) -> Any:
    """An initializer of `data` (a torch tensor, or anything numpy takes)."""
    from onnx import TensorProto

    proto = TensorProto()
    proto.name = name
    proto.data_type = _ELEMENT[dtype]
    proto.dims.extend(shape)
    if hasattr(data, "detach"):  # a torch tensor
        data = data.detach().to("cpu").contiguous()
        if dtype == "bfloat16":
            import torch

            data = data.view(torch.int16)
        proto.raw_data = data.numpy().tobytes()
    else:
        import numpy

        proto.raw_data = numpy.ascontiguousarray(data).tobytes()
    return proto
