"""``kiln.jax.jit``: ``jax.jit`` with every attention site Kiln's fusion finds
replaced by a Kiln call.

For each new signature (the arguments' shapes and dtypes) the function is
traced to a jaxpr whose calls (``jit``, ``custom_jvp``/``custom_vjp``,
``checkpoint``) are inlined, so that every primitive is one step of one flat
program. The program is lowered once with each step under a name scope of
its own (``kiln.e<N>``), which JAX writes into each StableHLO op's location;
kilnc's importer names each value by its op's location where no other op
shares it, so the fusion report names each site's operands and output by
program step (or by the function's argument). The program is then run again
under ``jax.jit`` with each rewritable site's output step computed by
``kiln.jax.attention`` from its operands (the report's replayable steps —
transposes, reshapes, casts, slices, constant scalings — applied with jnp);
the steps only the site used are dead and XLA drops them. On the first call
of each signature the outputs are compared with the unfused function's
(``jax.jit(f)``); a site that cannot be rewritten, or outputs that differ
beyond the dtype's bounds, leave that signature to plain ``jax.jit``, and
``explain()`` says why.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..capi import KilnError, Status
from ..compiler import operand_sources, replayable
from ..site import SiteSpec
from .report import where

__all__ = ["jit", "KilnJitted"]

#: Primitives whose body is inlined into the flat program.
_INLINED = {"pjit", "jit", "closed_call", "core_call", "custom_jvp_call",
            "custom_vjp_call", "custom_vjp_call_jaxpr", "remat", "remat2",
            "checkpoint"}

#: Primitives whose lowering kilnc's StableHLO importer reads. Every other
#: step (gathers, dynamic slices, loops, conditionals, random bits, custom
#: calls ...) is cut out of the lowering kilnc reads: its outputs enter it as
#: arguments, so that nothing the importer cannot read stops the analysis.
READABLE = {
    "add", "sub", "mul", "div", "max", "min", "pow", "integer_pow", "square",
    "exp", "exp2", "log", "tanh", "logistic", "rsqrt", "sqrt", "abs", "neg",
    "floor", "ceil", "sin", "cos", "and", "or", "not", "xor", "select_n",
    "convert_element_type", "broadcast_in_dim", "reshape", "transpose",
    "squeeze", "expand_dims", "dot_general", "reduce_sum", "reduce_max",
    "iota", "eq", "ne", "lt", "le", "gt", "ge", "slice", "concatenate",
    "split", "clamp", "copy", "copy_p",
    # The identity in the lowering (jax.nn.softmax stops the gradient of
    # its row maximum with it since JAX 0.11).
    "stop_gradient",
}

#: A step's value name in kilnc's report: its scope, then its primitive.
_STEP = re.compile(r"(?:^|/)kiln\.e(\d+)/[^/]+$")

#: Relative error (Frobenius norm) allowed against the unfused function on
#: first use, by output dtype.
TOLERANCE = {"bfloat16": 3e-2, "float16": 1e-2, "float32": 2e-3}


def _jax() -> Any:
    try:
        import jax
    except ImportError as error:  # pragma: no cover - JAX-less installs
        raise KilnError(Status.UNSUPPORTED, "kiln.jax.jit needs jax") from error
    return jax


def _is_literal(var: Any) -> bool:
    return type(var).__name__ == "Literal"


def _is_drop(var: Any) -> bool:
    return type(var).__name__ == "DropVar"


@functools.lru_cache(maxsize=None)
def _inlined_names() -> frozenset:
    """_INLINED and the name this JAX gives `jax.checkpoint`'s primitive
    (`checkpoint`, `remat2` ...: it has changed between releases)."""
    names = set(_INLINED)
    try:
        from jax._src import ad_checkpoint

        names.add(ad_checkpoint.remat_p.name)
    except (ImportError, AttributeError):  # pragma: no cover - other JAX layouts
        pass
    return frozenset(names)


def _body(eqn: Any) -> Optional[Tuple[Any, List[Any]]]:
    """The (jaxpr, consts) an inlined call's equation runs."""
    if eqn.primitive.name not in _inlined_names():
        return None
    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        inner = eqn.params.get(key)
        if inner is None:
            continue
        if hasattr(inner, "consts") and hasattr(inner, "jaxpr"):
            return inner.jaxpr, list(inner.consts)
        if hasattr(inner, "eqns"):
            return inner, []
    return None


class _Program:
    """A closed jaxpr run step by step, calls inlined (see the module's
    docstring). `run` binds every primitive under its step's name scope, or
    computes the steps in `replace` (step → function of the values so far)
    instead."""

    def __init__(self, closed: Any) -> None:
        self.closed = closed

    def run(self, args: List[Any], replace: Optional[Dict[int, Callable]] = None,
            values: Optional[Dict[int, Any]] = None,
            stand_in: Optional[Callable[[int, Any], Optional[List[Any]]]] = None,
            bodies: Optional[Callable[[Any], Dict[str, Any]]] = None
            ) -> List[Any]:
        jax = _jax()
        step = [0]
        values = {} if values is None else values

        def evaluate(jaxpr: Any, consts: List[Any], inputs: List[Any]) -> List[Any]:
            env: Dict[Any, Any] = {}

            def read(var: Any) -> Any:
                return var.val if _is_literal(var) else env[var]

            for var, value in zip(jaxpr.constvars, consts):
                env[var] = value
            for var, value in zip(jaxpr.invars, inputs):
                env[var] = value
            for eqn in jaxpr.eqns:
                inputs_ = [read(var) for var in eqn.invars]
                body = _body(eqn)
                if body is not None:
                    outputs = evaluate(body[0], body[1], inputs_)
                else:
                    index = step[0]
                    step[0] += 1
                    given = stand_in(index, eqn) if stand_in else None
                    if given is not None:
                        outputs = given
                    elif replace and index in replace:
                        outputs = [replace[index](values)]
                    else:
                        params = bodies(eqn) if bodies else eqn.params
                        with jax.named_scope(f"kiln.e{index}"), _user_frames(eqn):
                            subfuns, params = _bind_params(eqn.primitive, params)
                            result = eqn.primitive.bind(*subfuns, *inputs_, **params)
                        outputs = list(result) if eqn.primitive.multiple_results else [result]
                    values[index] = outputs
                for var, value in zip(eqn.outvars, outputs):
                    if not _is_drop(var):
                        env[var] = value
            return [read(var) for var in jaxpr.outvars]

        return evaluate(self.closed.jaxpr, list(self.closed.consts), list(args))


def _user_frames(eqn: Any) -> Any:
    """The equation's own traceback as the source of what it binds, so that
    each StableHLO op's location (and the report's source lines) is the
    user's line, not this evaluator's."""
    try:
        from jax._src import source_info_util
        return source_info_util.user_context(eqn.source_info.traceback)
    except (ImportError, AttributeError):  # pragma: no cover - other JAX
        return contextlib.nullcontext()


def _bind_params(primitive: Any, params: Dict[str, Any]) -> Tuple[list, Dict[str, Any]]:
    """The sub-functions and parameters `primitive.bind` takes for an
    equation's `params`: get_bind_params gave both before JAX 0.11 and
    gives the parameters alone since."""
    bound = primitive.get_bind_params(params)
    if isinstance(bound, dict):
        return [], bound
    subfuns, bound_params = bound
    return list(subfuns), bound_params


_ARGUMENT = re.compile(r'(%arg(\d+): [^%]*?)loc\((?:"(?:[^"\\]|\\.)*"|#[\w.]+)\)')


def _named_arguments(text: str) -> str:
    """`text` with each argument of its `main` located at a name of Kiln's
    own, ``kiln.a<k>`` (JAX names arguments by the Python signature, which
    need not tell them apart)."""
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if "func.func public @main(" in line:
            lines[index] = _ARGUMENT.sub(lambda m: f'{m.group(1)}loc("kiln.a{m.group(2)}")',
                                         line)
            break
    return "\n".join(lines)


def _argument_names(text: str) -> Dict[str, int]:
    """The names kilnc gives the arguments of `main` (see _named_arguments;
    an argument without a location is ``arg<k>``): name → position."""
    signature = re.search(r"func\.func public @main\((.*)$", text, re.MULTILINE)
    names: Dict[str, int] = {}
    if signature:
        for match in re.finditer(r"%arg(\d+): ", signature.group(1)):
            k = int(match.group(1))
            names[f"kiln.a{k}"] = k
            names[f"arg{k}"] = k
    return names


def _replay(x: Any, transforms: List[Dict[str, Any]]) -> Any:
    """A report's replayable steps (kilnc's Report.cpp: replayStep) in jnp."""
    import jax.numpy as jnp

    dtypes = {"f32": jnp.float32, "f16": jnp.float16, "bf16": jnp.bfloat16,
              "i1": jnp.bool_, "i32": jnp.int32, "i64": jnp.int64}
    for t in transforms:
        op = t["op"]
        if op == "transpose":
            x = jnp.transpose(x, t["perms"])
        elif op == "reshape":
            x = x.reshape(tuple(int(s) for s in t["shape"]))
        elif op == "cast":
            x = x.astype(dtypes[t["dtype"]])
        elif op == "not":
            x = jnp.logical_not(x)
        elif op == "mul":
            x = x * jnp.asarray(float(t["value"]), x.dtype)
        elif op == "add":
            x = x + jnp.asarray(float(t["value"]), x.dtype)
        elif op == "where":
            dtype = dtypes[t["dtype"]]
            # Non-finite numbers come as "inf", "-inf" or "nan".
            x = jnp.where(x, jnp.asarray(float(t["true"]), dtype),
                          jnp.asarray(float(t["false"]), dtype))
        elif op == "reciprocal":
            x = 1 / x
        elif op == "neg":
            x = -x
        elif op == "eq":
            x = x == jnp.asarray(float(t["value"]), x.dtype)
        elif op == "slice":
            index = tuple(slice(int(a), int(a) + int(n))
                          for a, n in zip(t["start"], t["size"]))
            x = x[index]
        elif op == "tile":
            x = jnp.tile(x, tuple(int(m) for m in t["multiples"]))
        else:
            raise KilnError(Status.UNSUPPORTED, f"cannot replay '{op}'")
    return x


@dataclass
class _Source:
    """Where a value comes from: a program step's first result, or an
    argument, and the steps that make the operand from it."""

    step: Optional[int]
    argument: Optional[int]
    transforms: List[Dict[str, Any]]
    output: int = 0

    def value(self, values: Dict[int, Any], args: List[Any]) -> Any:
        x = args[self.argument] if self.step is None else values[self.step][self.output]
        return _replay(x, self.transforms)


def _locate(entry: Dict[str, Any], arguments: Dict[str, int],
            cuts: List[Tuple[int, int]] = ()) -> Optional[_Source]:
    for source in operand_sources(entry):
        name = source.get("value")
        if name is None or not replayable(source["transforms"]):
            continue
        match = _STEP.search(name)
        if match:
            return _Source(int(match.group(1)), None, source["transforms"])
        if name in arguments:
            position = arguments[name] - (len(set(arguments.values())) - len(cuts))
            if position >= 0:  # a cut step's output (see READABLE)
                step, output = cuts[position]
                return _Source(step, None, source["transforms"], output)
            return _Source(None, arguments[name], source["transforms"])
    return None


@dataclass
class _Site:
    """A site of the report and how the program computes it."""

    report: Dict[str, Any]
    spec: Optional[SiteSpec] = None
    operands: Dict[str, _Source] = field(default_factory=dict)
    output_step: Optional[int] = None
    output_transforms: List[Dict[str, Any]] = field(default_factory=list)
    why_not: Optional[str] = None
    #: Found in the body of a loop (lax.scan, while_loop).
    loop_body: bool = False

    def compute(self, values: Dict[int, Any], args: List[Any]) -> Any:
        from .ffi import call_spec

        given = {role: source.value(values, args)
                 for role, source in self.operands.items()}
        out = call_spec(self.spec, given["query"], given["key"], given["value"],
                        given.get("mask"), given.get("bias"), given.get("scale_factor"))
        return _replay(out, self.output_transforms)


def _plan(site: Dict[str, Any], arguments: Dict[str, int],
          steps: Dict[int, Any], cuts: List[Tuple[int, int]] = ()) -> _Site:
    """How to rewrite one report site, or why it cannot be."""
    planned = _Site(site)
    if site.get("kv_cache"):
        planned.why_not = "it reads a KV cache input"
        return planned
    for role, entry in site["operands"].items():
        if entry is None:
            continue
        source = _locate(entry, arguments, cuts)
        if source is None:
            planned.why_not = (f"its {role} is not a value of the function "
                               f"(no op of its own, or reached through ops "
                               f"the rewrite cannot replay)")
            return planned
        planned.operands[role] = source
    output = site.get("output") or {}
    match = _STEP.search(output.get("value") or "")
    if not match:
        planned.why_not = "its result is not a value of the function"
        return planned
    planned.output_step = int(match.group(1))
    planned.output_transforms = output.get("transforms", [])
    if not replayable(planned.output_transforms):
        planned.why_not = "its result is reached through ops the rewrite cannot replay"
        return planned
    aval = steps.get(planned.output_step)
    want = tuple(output.get("shape") or ())
    if aval is not None and want and tuple(aval.shape) != _after(want, planned.output_transforms):
        planned.why_not = (f"its result's shape {tuple(aval.shape)} is not the "
                           f"site's {want}")
        return planned
    try:
        planned.spec = SiteSpec.from_report(site)
    except (KeyError, ValueError, TypeError) as error:
        planned.why_not = f"its report entry is incomplete ({error})"
    return planned


def _after(shape: Tuple[int, ...], transforms: List[Dict[str, Any]]) -> Tuple[int, ...]:
    """`shape` after layout steps (transposes and reshapes)."""
    for t in transforms:
        if t["op"] == "transpose":
            shape = tuple(shape[p] for p in t["perms"])
        elif t["op"] == "reshape":
            shape = tuple(int(s) for s in t["shape"])
    return shape


@dataclass
class Compiled:
    """One signature's compiled form: the rewritten function (or None:
    plain ``jax.jit``), the sites, the report, and what the first call
    measured."""

    function: Optional[Callable]
    sites: List[_Site]
    report: Dict[str, Any]
    error: Optional[float] = None
    fallback: Optional[str] = None
    #: ``jax.jit`` of the function of the traced leaves: the fallback.
    plain: Optional[Callable] = None

    def explain(self) -> str:
        lines = [f"{sum(s.why_not is None for s in self.sites)} of "
                 f"{len(self.sites)} attention sites rewritten, "
                 f"{len(self.report.get('unfused', []))} softmaxes left unfused"]
        for index, site in enumerate(self.sites):
            place = where(site.report)
            state = "rewritten" if site.why_not is None else f"not rewritten: {site.why_not}"
            if site.loop_body:
                state += " (in a loop body)"
            lines.append(f"  site {index} at {place}: {state}")
        for entry in self.report.get("unfused", []):
            lines.append(f"  softmax at {where(entry)} not fused: {entry.get('reason')}")
        if self.fallback:
            lines.append(f"  this signature runs as jax.jit(f): {self.fallback}")
        elif self.error is not None:
            lines.append(f"  first call: relative error {self.error:.2e} against jax.jit(f)")
        return "\n".join(lines)


def _relative_error(got: Any, want: Any) -> float:
    import numpy as np

    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    norm = np.linalg.norm(want)
    return float(np.linalg.norm(got - want) / (norm if norm > 0 else 1.0))


@dataclass
class Lowering:
    """A function's flat program and the StableHLO text kilnc reads of it
    (see the module's docstring): `cuts` are the (step, output) pairs whose
    values enter the text as arguments after the function's own, `steps`
    the shape and dtype of each step's first result."""

    program: _Program
    out_tree: Any
    cuts: List[Tuple[int, int]]
    steps: Dict[int, Any]
    text: str


def lowering_of(flat_function: Callable, flat: List[Any]) -> Lowering:
    """The analysed lowering of `flat_function` on the arrays `flat`."""
    jax = _jax()
    closed, shapes = jax.make_jaxpr(flat_function, return_shape=True)(*flat)
    return lowering_of_closed(closed, flat, jax.tree_util.tree_structure(shapes))


def lowering_of_closed(closed: Any, flat: List[Any], out_tree: Any) -> Lowering:
    """The analysed lowering of a closed jaxpr on arguments like `flat`
    (arrays or their shapes and dtypes)."""
    jax = _jax()
    program = _Program(closed)
    # The steps cut out of the lowering kilnc reads, found on a first trace:
    # (step, output) per extra argument of `marked`.
    cuts: List[Tuple[int, int]] = []
    cut_avals: List[Any] = []

    def find_cuts(index: int, eqn: Any) -> Optional[List[Any]]:
        if eqn.primitive.name in READABLE:
            return None
        for k, var in enumerate(eqn.outvars):
            cuts.append((index, k))
            cut_avals.append(jax.ShapeDtypeStruct(var.aval.shape, var.aval.dtype))
        return None

    jax.make_jaxpr(lambda *leaves: program.run(list(leaves), stand_in=find_cuts))(*flat)
    steps: Dict[int, Any] = {}
    cut_steps = {step for step, _ in cuts}

    def marked(*leaves: Any) -> Any:
        leaves = list(leaves)
        given = iter(leaves[len(flat):])

        def stand_in(index: int, eqn: Any) -> Optional[List[Any]]:
            if index not in cut_steps:
                return None
            return [next(given) for _ in eqn.outvars]

        values: Dict[int, Any] = {}
        outputs = program.run(leaves[:len(flat)], values=values, stand_in=stand_in)
        for index, result in values.items():
            steps[index] = jax.ShapeDtypeStruct(result[0].shape, result[0].dtype)
        return outputs

    shapes_in = [jax.ShapeDtypeStruct(x.shape, x.dtype) if hasattr(x, "shape") else x
                 for x in flat]
    text = _named_arguments(jax.jit(marked, keep_unused=True).lower(
        *shapes_in, *cut_avals).as_text(debug_info=True))
    return Lowering(program, out_tree, cuts, steps, text)


def _plan_lowering(lowering: Lowering, count: int, options: Dict[str, Any]) -> Any:
    """kilnc's report of `lowering` (of a program of `count` arguments) and
    the plan of each site: (sites, chosen by output step, report), or a
    Compiled that says why nothing can be rewritten."""
    from ..compiler import CompileError
    from .report import run_report

    try:
        report = run_report(lowering.text, options)
    except CompileError as error:
        reason = str(error).strip().splitlines()
        return Compiled(None, [], {}, fallback="kilnc could not read the function: "
                        + (reason[0] if reason else "no diagnostics"))
    arguments = _argument_names(lowering.text)
    if len(set(arguments.values())) != count + len(lowering.cuts):
        return Compiled(None, [], report, fallback=(
            "the lowered function's arguments could not be counted "
            f"({len(set(arguments.values()))} for {count + len(lowering.cuts)})"))
    sites = [_plan(site, arguments, lowering.steps, lowering.cuts)
             for site in report.get("sites", [])]
    chosen = {site.output_step: site for site in sites if site.why_not is None}
    if len(chosen) < sum(site.why_not is None for site in sites):
        for site in sites:
            if site.why_not is None and chosen.get(site.output_step) is not site:
                site.why_not = "another site replaces the same value"
    return sites, chosen, report


def _rewriting(program: _Program, chosen: Dict[int, _Site],
               bodies: "_Bodies") -> Callable[..., List[Any]]:
    """`program` as a function of its arguments with each chosen site's
    output step computed by Kiln from its operands, and loop bodies
    rewritten by `bodies`."""
    def run(*leaves: Any) -> List[Any]:
        leaves = list(leaves)
        replace = {step: (lambda values, site=site: site.compute(values, leaves))
                   for step, site in chosen.items()}
        return program.run(leaves, replace=replace, bodies=bodies)

    return run


#: Loop primitives whose bodies are analysed and rewritten, and the
#: parameter holding each one's body (a closed jaxpr).
_LOOP_BODIES = {"scan": "jaxpr", "while": "body_jaxpr"}


class _Bodies:
    """The bodies of loops (``lax.scan``, ``while_loop``: a model that scans
    over its layers) analysed as functions of their own, each once, and
    rewritten where kilnc finds sites in them: `__call__(eqn)` gives the
    parameters to bind the loop with."""

    def __init__(self, options: Dict[str, Any]) -> None:
        self.options = options
        self.done: Dict[int, Dict[str, Any]] = {}
        self.sites: List[_Site] = []
        self.rewritten = 0

    def __call__(self, eqn: Any) -> Dict[str, Any]:
        key = _LOOP_BODIES.get(eqn.primitive.name)
        if key is None or not hasattr(eqn.params.get(key), "jaxpr"):
            return eqn.params
        if id(eqn) not in self.done:
            self.done[id(eqn)] = self._rewrite(eqn.params, key)
        return self.done[id(eqn)]

    def _rewrite(self, params: Dict[str, Any], key: str) -> Dict[str, Any]:
        jax = _jax()
        before = self.rewritten
        closed = params[key]
        avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in closed.in_avals]
        lowering = lowering_of_closed(closed, avals, None)
        planned = _plan_lowering(lowering, len(avals), self.options)
        if isinstance(planned, Compiled):
            return params
        sites, chosen, _ = planned
        for site in sites:
            site.loop_body = True
        self.sites.extend(sites)
        new = jax.make_jaxpr(_rewriting(lowering.program, chosen, self))(*avals)
        if not chosen and self.rewritten == before:
            return params  # nothing rewritten in it, nor in a loop inside it
        if [str(a) for a in new.out_avals] != [str(a) for a in closed.out_avals]:
            for site in sites:
                site.why_not = site.why_not or "the rewritten loop body changed its results"
            return params
        self.rewritten += len(chosen)
        return dict(params, **{key: new})


def _is_array(leaf: Any) -> bool:
    """Whether a pytree leaf is traced (an array); every other leaf (Python
    numbers, strings, functions, an Equinox module's static fields) is
    static, closed over and part of the signature, as ``equinox.filter_jit``
    treats them."""
    import numpy as np

    jax = _jax()
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic)) or (
        hasattr(leaf, "shape") and hasattr(leaf, "dtype"))


class _Signature:
    """One call's arguments split into traced leaves and the rest."""

    def __init__(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        jax = _jax()
        self.leaves, self.tree = jax.tree_util.tree_flatten((args, kwargs))
        self.dynamic = [i for i, leaf in enumerate(self.leaves) if _is_array(leaf)]
        self.flat = [self.leaves[i] for i in self.dynamic]

    def key(self) -> Any:
        def static(leaf: Any) -> Any:
            try:
                hash(leaf)
                return (type(leaf).__name__, leaf)
            except TypeError:
                return (type(leaf).__name__, id(leaf))

        dynamic = set(self.dynamic)
        return (self.tree, tuple(
            (tuple(leaf.shape), str(leaf.dtype)) if i in dynamic else static(leaf)
            for i, leaf in enumerate(self.leaves)))

    def function(self, function: Callable) -> Callable:
        """`function` as a function of the traced leaves alone."""
        jax = _jax()
        leaves, tree, dynamic = list(self.leaves), self.tree, self.dynamic

        def flat_function(*traced: Any) -> Any:
            given = list(leaves)
            for i, leaf in zip(dynamic, traced):
                given[i] = leaf
            args, kwargs = jax.tree_util.tree_unflatten(tree, given)
            return function(*args, **kwargs)

        return flat_function


class KilnJitted:
    """What ``kiln.jax.jit(f)`` returns: call it as ``f``."""

    def __init__(self, function: Callable, check: bool = True, **options: Any) -> None:
        self.function = function
        self.check = check
        self.options = options
        self._compiled: Dict[Any, Compiled] = {}
        self._lock = threading.Lock()

    def compiled(self, *args: Any, **kwargs: Any) -> Compiled:
        """This signature's compiled form (made on first use)."""
        signature = _Signature(args, kwargs)
        key = signature.key()
        with self._lock:
            if key not in self._compiled:
                self._compiled[key] = self._compile(signature)
            return self._compiled[key]

    def _compile(self, signature: _Signature) -> Compiled:
        jax = _jax()
        flat_function = signature.function(self.function)
        plain = jax.jit(flat_function)
        flat = signature.flat
        lowering = lowering_of(flat_function, flat)
        bodies = _Bodies(self.options)
        planned = _plan_lowering(lowering, len(flat), self.options)
        if isinstance(planned, Compiled):
            planned.plain = plain
            return planned
        sites, chosen, report = planned
        program, out_tree = lowering.program, lowering.out_tree

        run = _rewriting(program, chosen, bodies)

        def rewritten(*leaves: Any) -> Any:
            return jax.tree_util.tree_unflatten(out_tree, run(*leaves))

        # Trace once: loop bodies are analysed (and rewritten) as the
        # program meets them.
        jax.make_jaxpr(rewritten)(*flat)
        sites = sites + bodies.sites
        if not chosen and not bodies.rewritten:
            return Compiled(None, sites, report, fallback="no site to rewrite", plain=plain)
        compiled = Compiled(jax.jit(rewritten), sites, report, plain=plain)
        if self.check:
            self._first_check(compiled, flat)
        return compiled

    def _first_check(self, compiled: Compiled, flat: List[Any]) -> None:
        jax = _jax()
        try:
            got = jax.tree_util.tree_leaves(compiled.function(*flat))
        except Exception as error:  # noqa: BLE001 - reported, then jax.jit runs
            compiled.function = None
            compiled.fallback = f"the rewritten function failed: {type(error).__name__}: {error}"
            warnings.warn(f"kiln.jax.jit: {compiled.fallback}")
            return
        want = jax.tree_util.tree_leaves(compiled.plain(*flat))
        worst = 0.0
        for g, w in zip(got, want):
            error = _relative_error(g, w)
            worst = max(worst, error)
            if error > TOLERANCE.get(str(w.dtype), 2e-3):
                compiled.function = None
                compiled.fallback = (f"its output differs from jax.jit(f)'s by "
                                     f"{error:.2e} (bound {TOLERANCE.get(str(w.dtype), 2e-3):.0e})")
                warnings.warn(f"kiln.jax.jit: {compiled.fallback}")
                break
        compiled.error = worst

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        compiled = self.compiled(*args, **kwargs)
        flat = _Signature(args, kwargs).flat
        if compiled.function is None:
            return compiled.plain(*flat)
        return compiled.function(*flat)

    def explain(self, *args: Any, **kwargs: Any) -> str:
        """What was rewritten for this signature, and why not the rest."""
        text = self.compiled(*args, **kwargs).explain()
        print(text)
        return text


def jit(function: Callable, *, check: bool = True, **options: Any) -> KilnJitted:
    """``jax.jit(function)`` with its attention sites run by Kiln (see the
    module's docstring). Array leaves of the arguments are traced, every
    other leaf is static (``equinox.filter_jit``'s rule), keyword arguments
    included. `check` compares each signature's first outputs with
    ``jax.jit``'s of the same function; `options` are kilnc's (as for
    ``kiln.jax.explain``)."""
    return KilnJitted(function, check=check, **options)
