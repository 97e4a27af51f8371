"""The torch.compile backend's choice, per site, between Kiln's kernel and
Inductor's own code for the attention it found (see docs/design.md, "Which
path a site takes").

A site is cut out of the exported graph with what it reads (the sources the
rewrite replays, and any other value the softmax's inputs come from) and
compiled twice by Inductor: as the graph wrote it, and as the rewrite would
make it (the replayed layout ops and the Kiln call). Both run back to back
on the site's own inputs from the model's first call, timed by the wall
clock over many calls with one synchronisation at the end, so that a call's
host cost counts where it is the bound; the faster is kept. Sites of the
same form (every layer of a model) are timed once: the decision is kept by
the site's structure, its inputs' sizes, strides and dtypes and the device,
in memory and in the cache directory, so a later process compiles without
timing again.

A site one of whose values (the scores, where the graph writes attention
out) has SCORES_TIMED elements or more is not timed: Inductor must
materialise them, and Kiln's kernel never loses there in any measurement we
hold; nor is the graph run to capture its values then.

A caller that can use the wait for a site's package (the backend compiles
the whole graph meanwhile) takes prepare()'s Pending where the package is
still being compiled: everything of the timing but the measurement is done,
and Pending.measure() gives the decision later.
"""

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import site_cache as _cache
from .regions import copy_into, graph_module, walk_up
from .site import SiteSpec

__all__ = ["Choice", "Pending", "SCORES_TIMED", "choose", "fused_already", "kept_sdpa",
           "largest_value", "prepare", "sdpa_backend"]

#: From this many score elements (batch x heads x queries x keys) a site
#: is rewritten without timing. Inductor's code for such a site moves at
#: least 8 bytes a score (the scores written in bf16, read and written by the
#: softmax, read by the second matmul): at 2^25 scores that is 268 MB, some
#: 60-80 us of memory traffic on an H100 or H200 before any launch, more than
#: a Kiln call's host cost (about 35 us measured) and its kernel together;
#: timing such a site costs the first call 0.5-1 s and, where the whole
#: graph is near host-bound, measures the host's noise (docs/design.md).
#: At 2^25 itself (b8 x s512 x 16 heads) all 16 sites of the zoos timed on an
#: H100 went to Kiln, saving 68-257 us a call each (Kiln 1.8-7.5x Inductor's
#: code for them), while their timings took 0.7-2.5 s of the first calls.
SCORES_TIMED = 1 << 25

#: Ops that only view or pick their input. A site whose code is one fused
#: attention call (an SDPA op, which Inductor calls as it is) and these is
#: timed as the graph stands, without compiling either path with Inductor
#: first: Inductor would have nothing to fuse in it, and its two compiles
#: were most of such a site's timing (0.8 s of a 1.8 s first call).
_VIEWS = frozenset({
    "view", "_unsafe_view", "reshape", "permute", "transpose", "expand",
    "unsqueeze", "squeeze", "slice", "select", "alias", "t", "detach",
    "getitem"})


def _op_name(target: Any) -> str:
    """An FX call's target by name: an ATen overload's op name, else the
    function's name."""
    return getattr(target, "_opname", None) or getattr(target, "__name__", str(target))


def fused_already(body: Sequence[Any]) -> bool:
    """Whether `body` (a site's nodes) is one SDPA call and views."""
    attention = 0
    for node in body:
        if node.op != "call_function":
            continue
        name = _op_name(node.target)
        if "scaled_dot_product" in name:
            attention += 1
        elif name not in _VIEWS:
            return False
    return attention == 1


#: ATen's SDPBackend numbers, as torch._fused_sdp_choice returns them.
_SDPA_BACKENDS = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}


def _traced(node: Any) -> Any:
    """A node's traced value (an exported graph's `val`, Dynamo's
    `example_value`)."""
    meta = getattr(node, "meta", {})
    value = meta.get("val")
    return value if value is not None else meta.get("example_value")


def sdpa_arguments(node: Any) -> Optional[Dict[str, Any]]:
    """The arguments of `node`, a call of scaled_dot_product_attention
    (aten's or torch.nn.functional's: one signature), by name."""
    if _op_name(getattr(node, "target", None)) != "scaled_dot_product_attention":
        return None  # aten's _scaled_dot_product_*_attention differ
    names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal"]
    arguments: Dict[str, Any] = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False,
                                 "scale": None, "enable_gqa": False}
    if len(node.args) > len(names):
        return None
    arguments.update(zip(names, node.args))
    arguments.update(node.kwargs)
    return arguments if all(n in arguments for n in names[:3]) else None


def sdpa_backend(node: Any) -> Optional[str]:
    """The kernel PyTorch's dispatch takes for `node`, a call of
    scaled_dot_product_attention, on its inputs' traced sizes, strides,
    dtypes and device ("cudnn", "flash", "efficient", "math"): asked of
    torch._fused_sdp_choice on stand-ins of those sizes. None where it
    cannot be told (symbolic sizes, a tensor traced on no CUDA device)."""
    arguments = sdpa_arguments(node)
    if arguments is None:
        return None
    try:
        import torch
    except ImportError:
        return None

    def stand_in(value: Any) -> Any:
        if not isinstance(getattr(value, "meta", None), dict):
            return value
        traced = _traced(value)
        if not isinstance(traced, torch.Tensor) or traced.device.type != "cuda":
            raise ValueError("not a CUDA tensor")
        shape = [int(size) for size in traced.shape]
        stride = [int(step) for step in traced.stride()]
        return torch.empty_strided(shape, stride, dtype=traced.dtype,
                                   device=traced.device)

    try:
        with torch.no_grad():
            values = {name: stand_in(value) for name, value in arguments.items()}
            positional = (values["query"], values["key"], values["value"],
                          values["attn_mask"], float(values["dropout_p"]),
                          bool(values["is_causal"]))
            try:
                choice = torch._fused_sdp_choice(
                    *positional, scale=values["scale"],
                    enable_gqa=bool(values["enable_gqa"]))
            except TypeError:  # a torch whose choice takes neither
                if values["enable_gqa"]:
                    return None
                choice = torch._fused_sdp_choice(*positional)
    except Exception:  # noqa: BLE001 (symbolic sizes, an older torch)
        return None
    return _SDPA_BACKENDS.get(int(choice))


def kept_sdpa(node: Any) -> Optional[str]:
    """Why the SDPA call `node` is left as written without timing, or None:
    one without a mask that PyTorch runs with cuDNN's kernel. Kiln's kernel
    ran 0.92-1.12x cuDNN's from 4k tokens and 0.66-0.97x at 512 and 1k
    (H200, head dims 64-256, causal and not: docs/performance.md); what
    timing could win there is under what it costs the first call (a site
    package and two timings, about 0.4 s, against Inductor's 0.2 s for
    such a graph). With a mask Kiln's kernel ran 1.29-1.40x cuDNN's, and
    against the flash kernel 1.1-2.1x: those are timed."""
    arguments = sdpa_arguments(node)
    if arguments is None or arguments["attn_mask"] is not None:
        return None
    if sdpa_backend(node) != "cudnn":
        return None
    return ("not timed: one SDPA call without a mask, which PyTorch runs with "
            "cuDNN's kernel (Kiln's measured 0.66-1.12x of it)")


def sdpa_node(body: Sequence[Any]) -> Optional[Any]:
    """The SDPA call of `body`, where it holds one."""
    for node in body:
        if node.op == "call_function" and "scaled_dot_product" in _op_name(node.target):
            return node
    return None


#: Decisions of this process, by key.
_decisions: Dict[str, Dict[str, Any]] = {}

#: Bump when the timing method changes: old decisions are then retimed.
_METHOD = "wall-v1"


class Choice:
    """What decides one site: `build` writes the Kiln path of the site into
    a graph (given the graph and its source nodes by role, returns the node
    of the site's output), `compile` compiles a graph module with Inductor
    (given the module and its example inputs, returns a callable). `probe`,
    where given, writes the Kiln path as `build` does but without what may
    still be in the making (the site's compiled package), raising where
    `build` would refuse the site: the site is then refused before anything
    is compiled, and Inductor's path is compiled while the package is
    finished. `dense` names the site's dense per-head term ("bias" or
    "mask"), where it reads one. `meanwhile`, where given, is work the
    caller will need anyway, run before a site timed as written waits for
    its package (nothing else of the timing overlaps that wait there).
    `built`, where given, says whether the site's package is compiled yet:
    prepare() leaves the measurement of a site whose package is not to
    its caller (see Pending)."""

    def __init__(self, build: Callable[[Any, Dict[str, Any]], Any],
                 compile: Callable[[Any, Sequence[Any]], Callable],
                 probe: Optional[Callable[[Any, Dict[str, Any]], Any]] = None,
                 dense: Optional[str] = None,
                 meanwhile: Optional[Callable[[], None]] = None,
                 built: Optional[Callable[[], bool]] = None) -> None:
        self.build = build
        self.compile = compile
        self.probe = probe or build
        self.dense = dense
        self.meanwhile = meanwhile
        self.built = built


class Pending:
    """A site's timing with everything done but the measurement (the site
    probed, both paths compiled), left for later because the site's package
    was still being compiled: `measure()` gives the decision as choose()
    does, and remembers it. Measured once; where a site of the same form
    was decided meanwhile (`key`, another layer's timing), its decision is
    taken instead of timing again."""

    def __init__(self, key: str, run: Callable[[], Dict[str, Any]]) -> None:
        self.key = key
        self._run = run
        self._decision: Optional[Dict[str, Any]] = None

    def measure(self) -> Dict[str, Any]:
        if self._decision is None:
            known = _recall(self.key)
            self._decision = ({**known, "cached": True} if known is not None
                              else self._run())
        return self._decision


def _later_or_now(timing: Pending, pending: Optional[Dict[str, Pending]],
                 built: Optional[Callable[[], bool]]) -> Union[Dict[str, Any], Pending]:
    """`timing` measured now, or returned unmeasured (and kept in `pending`
    by its key) where the caller takes pending timings (`pending` given)
    and the site's package is not compiled yet (`built()` says no): the
    measurement would first wait for the package, which the caller's own
    work can overlap. A package already compiled is not waited for: the
    site is timed at once."""
    if pending is None or built is None or built():
        return timing.measure()
    pending[timing.key] = timing
    return timing


def _directory() -> Path:
    return _cache.cache_directory() / "choices"


def _subgraph(output: Any, stops: Sequence[Any]) -> Tuple[List[Any], List[Any]]:
    """The nodes that compute `output` from `stops` (in graph order) and the
    leaves they read: the stops, then every placeholder or attribute the
    walk reaches without passing a stop."""
    stops = list(dict.fromkeys(stops))
    stop_set = set(stops)
    body, leaves = walk_up(output, lambda node: node in stop_set
                           or node.op in ("placeholder", "get_attr"))
    return body, ([s for s in stops if s in leaves]
                  + [leaf for leaf in leaves if leaf not in stop_set])


def _structure(body: Sequence[Any], leaves: Sequence[Any], values: Sequence[Any],
               site: Dict[str, Any], device: Any) -> str:
    """The key of a site's decision: its ops (targets, constant arguments,
    which value each reads), its inputs' sizes, strides and dtypes, the
    site's attributes and the device."""
    import torch

    index = {node: f"%{n}" for n, node in enumerate(list(leaves) + list(body))}

    def argument(value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            return index.get(value, "?")
        if isinstance(value, (list, tuple)):
            return [argument(v) for v in value]
        if isinstance(value, dict):
            return {k: argument(v) for k, v in sorted(value.items())}
        return repr(value)

    ops = [[node.op, str(node.target), argument(node.args), argument(node.kwargs)]
           for node in body]
    inputs = [[list(v.shape), list(v.stride()), str(v.dtype)] for v in values]
    name = torch.cuda.get_device_name(device)
    # The site's attributes, not its value names (which differ per layer).
    attributes = repr(SiteSpec.from_report(site))
    text = json.dumps([_METHOD, ops, inputs, attributes, name, torch.__version__],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def seconds(function: Callable, inputs: Sequence[Any]) -> float:
    """Wall-clock seconds per call of `function` on `inputs`, back to back:
    the best of five rounds, each long enough (about 2 ms or 8 calls) to
    hide the one synchronisation that ends it."""
    import torch

    function(*inputs)
    torch.cuda.synchronize()
    start = time.perf_counter()
    function(*inputs)
    torch.cuda.synchronize()
    once = max(time.perf_counter() - start, 1e-6)
    calls = max(8, min(200, int(2e-3 / once)))
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            function(*inputs)
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def _recall(key: str) -> Optional[Dict[str, Any]]:
    decision = _decisions.get(key)
    if decision is not None:
        return decision
    try:
        decision = json.loads((_directory() / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    _decisions[key] = decision
    return decision


def _remember(key: str, decision: Dict[str, Any]) -> None:
    _decisions[key] = decision
    try:
        directory = _directory()
        directory.mkdir(parents=True, exist_ok=True)
        partial = directory / f".{key}.{os.getpid()}.tmp"
        partial.write_text(json.dumps(decision))
        os.replace(partial, directory / f"{key}.json")
    except OSError:
        pass  # a read-only cache times again next time


def largest_value(body: Sequence[Any]) -> Optional[int]:
    """The most elements any of `body`'s values has, from the graph's
    metadata (the materialised scores, where the graph writes attention
    out), or None when no node records a static size."""
    sizes = []
    for node in body:
        value = node.meta.get("val")
        shape = getattr(value, "shape", None)
        if shape is None:
            continue
        try:
            count = 1
            for size in shape:
                count *= int(size)
        except TypeError:  # a symbolic size
            continue
        sizes.append(count)
    return max(sizes) if sizes else None


#: Bytes each score costs Inductor's code at the least where it
#: materialises the scores: written by the first matmul, read and written by
#: the softmax, read by the second matmul, each in a 16-bit type.
SCORE_BYTES = 8


def dram_bytes_per_s(device: Any) -> Optional[float]:
    """The device's peak DRAM bandwidth (the driver's memory clock and bus
    width, through Triton), or None where it cannot be read."""
    try:
        from triton.testing import get_dram_gbps

        import torch

        with torch.cuda.device(device):
            gbps = float(get_dram_gbps())
    except Exception:  # noqa: BLE001 (no bound then: the caller times)
        return None
    return gbps * 1e9 if gbps > 0 else None


def _site_values(leaves: Sequence[Any], value_of: Callable[[Any], Any]
                 ) -> Tuple[List[Any], Any]:
    """The values of a site's `leaves` on the model's first inputs and the
    one CUDA device they are on; in place of the device, why the site
    cannot be timed (a str)."""
    import torch

    values = [value_of(leaf) for leaf in leaves]
    if not all(isinstance(v, torch.Tensor) for v in values):
        return values, "an input of the site is not a tensor"
    devices = {v.device for v in values if v.device.type == "cuda"}
    if len(devices) != 1:
        return values, "the site's inputs are on no one CUDA device"
    return values, devices.pop()


def _distinct_bytes(value: Any) -> int:
    """The bytes of `value`'s distinct elements (a broadcast axis, stride
    0, counted once): what reading it costs at the least."""
    count = 1
    for size, stride in zip(value.shape, value.stride()):
        if stride != 0:
            count *= int(size)
    return count * value.element_size()


def _kiln_call(kiln: Any, values: Sequence[Any]) -> Optional[Callable[[], Any]]:
    """The one Kiln op call of `kiln` (a site's Kiln path as a graph
    module), on its operands as `kiln` computes them from `values`, or
    None. Timed alone it leaves out the layout ops before it, which run
    eagerly here but which Inductor fuses into the ops that make the
    operands (a term made contiguous in its keys is written so by its
    producer): timed with them, the site of T5's encoder at b4 x s4k
    took 4.2 ms a call (H100), over Inductor's bound of 2.8 ms, in a graph
    that ran 4x Inductor's."""
    from .regions import values as values_of

    calls = [node for node in kiln.graph.nodes if node.op == "call_function"
             and getattr(node.target, "namespace", None) == "kiln"]
    if len(calls) != 1:
        return None
    call = calls[0]
    nodes = [a for a in call.args if hasattr(a, "op") and hasattr(a, "name")]
    captured = values_of(kiln, values, nodes)
    args = tuple(captured[a.name] if a in nodes else a for a in call.args)
    return lambda: call.target(*args)


def _against_bound(untimed: Dict[str, Any], elements: int, body: Sequence[Any],
                   leaves: Sequence[Any], site: Dict[str, Any], output: Any,
                   sources: Dict[str, Any], value_of: Callable[[Any], Any],
                   choice: Choice) -> Dict[str, Any]:
    """The decision of a site too large to time both ways that reads a
    dense per-head term (`untimed`, the size's decision, with "dense"):
    Kiln's path alone is timed (as the graph stands, no Inductor compile)
    against the least time Inductor's code can take where it materialises
    the scores: their traffic (SCORE_BYTES each) and one read of each of
    the site's inputs, at the device's peak bandwidth.
    "inductor_bound_us" is kept where measured: the backend then needs no
    timing of the whole graph where Kiln's time is well under the bound
    (dynamo.sites_saving_us). Kiln's kernel reads such a term at memory
    speed where it stages it beside K, but at a few hundred GB/s where it
    reads it score by score (keys strided, an unaligned view, a device
    without TMA): only a time shows which."""
    import torch

    untimed = {**untimed, "dense": choice.dense}
    values, device = _site_values(leaves, value_of)
    if isinstance(device, str):
        return untimed
    bandwidth = dram_bytes_per_s(device)
    if bandwidth is None:
        return untimed
    key = _structure(body, leaves, values, site, device) + "-bound"
    decision = _recall(key)
    if decision is not None:
        return {**decision, "cached": True}
    bound_s = (elements * SCORE_BYTES + sum(map(_distinct_bytes, values))) / bandwidth

    def operands(env: Dict[Any, Any]) -> Dict[str, Any]:
        return {role: env[node] for role, node in sources.items() if role != "output"}

    try:
        with torch.no_grad():
            kiln = graph_module(leaves, lambda graph, env: choice.build(graph, operands(env)))
            call = _kiln_call(kiln, values)
            kiln_s = seconds(call, []) if call is not None else seconds(kiln, values)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return untimed
    decision = {**untimed, "kiln_us": round(kiln_s * 1e6, 2),
                "inductor_bound_us": round(bound_s * 1e6, 2),
                "why": (f"{untimed['why']}; Kiln {kiln_s * 1e6:.1f} us a call "
                        f"with its {choice.dense}, Inductor at least "
                        f"{bound_s * 1e6:.1f} us (its scores' traffic at the "
                        f"device's peak bandwidth)")}
    _remember(key, decision)
    return decision


def choose(site: Dict[str, Any], output: Any, sources: Dict[str, Any],
           value_of: Callable[[Any], Any], choice: Choice) -> Dict[str, Any]:
    """Which path a site takes: {"path": "kiln" | "inductor", "why": ...,
    and the times in microseconds where measured}. `output` is the node the
    site's result replaces, `sources` its operands' source nodes by role,
    `value_of(node)` a node's value on the model's first inputs."""
    decision = prepare(site, output, sources, value_of, choice)
    return decision.measure() if isinstance(decision, Pending) else decision


def prepare(site: Dict[str, Any], output: Any, sources: Dict[str, Any],
            value_of: Callable[[Any], Any], choice: Choice,
            pending: Optional[Dict[str, Pending]] = None
            ) -> Union[Dict[str, Any], Pending]:
    """choose()'s decision, or, where `pending` is given (the timings the
    caller has left for later, by key) and the site would be measured while
    its package is still being compiled (`choice.built()` says no), a
    Pending holding everything but the measurement, also kept in `pending`.
    A site of the same form as one already pending follows that one's
    timing (nothing compiled again)."""
    import torch

    stops = list(dict.fromkeys(node for role, node in sources.items() if role != "output"))
    body, leaves = _subgraph(output, stops)
    # One SDPA call (and views) materialises no scores: the size rule below
    # does not apply to it, whatever its operands' sizes.
    as_written = fused_already(body)
    if as_written:
        kept = kept_sdpa(sdpa_node(body))
        if kept is not None:
            return {"path": "inductor", "untimed": "sdpa", "why": kept}
    elements = None if as_written else largest_value(body)
    # An f32 site runs Kiln's f32 kernel, which size alone does not put
    # ahead of Inductor's f32 code (CodeGen's f32 queries at b4 x s2048 ran
    # 0.83x Inductor untimed): it is timed whatever its size.
    if elements is not None and elements >= SCORES_TIMED and site.get("dtype") != "f32":
        untimed = {"path": "kiln", "untimed": "size",
                   "why": f"not timed: a value of {elements} elements "
                          f"(the scores Inductor would materialise)"}
        if choice.dense is None:
            return untimed
        return _against_bound(untimed, elements, body, leaves, site, output,
                              sources, value_of, choice)
    values, device = _site_values(leaves, value_of)
    if isinstance(device, str):
        return {"path": "kiln", "why": f"not timed: {device}"}
    key = _structure(body, leaves, values, site, device)
    decision = _recall(key)
    if decision is not None:
        return {**decision, "cached": True}
    if pending is not None and key in pending:
        # Another layer of a form whose timing waits: its decision is
        # this site's too (as a cached one would be).
        return Pending(key, pending[key].measure)

    def graph_as_written(graph: Any, env: Dict[Any, Any]) -> Any:
        return copy_into(graph, env, body, output)

    def operands(env: Dict[Any, Any]) -> Dict[str, Any]:
        return {role: env[node] for role, node in sources.items() if role != "output"}

    # Raises first if Kiln cannot take the site; Inductor's path is then
    # compiled while the site's package may still be in the making.
    graph_module(leaves, lambda graph, env: choice.probe(graph, operands(env)))
    compile = (lambda module, inputs: module) if as_written else choice.compile
    if as_written and choice.meanwhile is not None:
        choice.meanwhile()
    try:
        with torch.no_grad():
            inductor = compile(graph_module(leaves, graph_as_written), values)
            with_kiln = graph_module(
                leaves, lambda graph, env: choice.build(graph, operands(env)))
            kiln = compile(with_kiln, values)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {"path": "kiln", "why": "not timed: out of memory while timing"}
    timing = Pending(key, lambda: _measured(key, inductor, kiln, values, as_written))
    return _later_or_now(timing, pending, choice.built)


def _measured(key: str, inductor: Callable, kiln: Callable, values: Sequence[Any],
              as_written: bool) -> Dict[str, Any]:
    """The decision between a site's two compiled paths, `inductor` and
    `kiln`, timed now on `values` (the first run of `kiln` waits for the
    site's package where it is still being compiled), and remembered."""
    import torch

    try:
        with torch.no_grad():
            inductor_s = seconds(inductor, values)
            kiln_s = seconds(kiln, values)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {"path": "kiln", "why": "not timed: out of memory while timing"}
    path = "kiln" if kiln_s <= inductor_s else "inductor"
    decision = {"path": path, "kiln_us": round(kiln_s * 1e6, 2),
                "inductor_us": round(inductor_s * 1e6, 2),
                "why": (f"timed: Kiln {kiln_s * 1e6:.1f} us, Inductor "
                        f"{inductor_s * 1e6:.1f} us a call"
                        + (" (one SDPA call, timed as written)" if as_written
                           else ""))}
    _remember(key, decision)
    return decision
