"""Kiln's fusion as a ``torch.compile`` backend.

    import kiln.dynamo
    compiled = torch.compile(model, backend="kiln")
    compiled = kiln.optimize(model, *example_inputs)

Dynamo hands the backend each FX graph it captures. The backend exports the
graph with ``torch.export`` and writes it as ONNX itself (``kiln.fx_onnx``:
attention's ops translated exactly, every other op opaque and typed, each
ONNX value named after its node of the exported program; graphs with
symbolic sizes, or that the writer does not take, go through torch's own
exporter, ``torch.onnx.export(dynamo=True)``), runs Kiln's fusion on it (``kilnc --report=json``:
the same ``kiln-fuse-attention`` that serves ONNX models decides the sites,
exactly), and rewrites the exported program's graph: each fused site's
output node is replaced by one ``torch.ops.kiln.attention`` call on the
values the report names, through the layout ops it lists. Every other node
goes to Inductor (``compile_fx``). Each site is compiled once for its
specialisation (dtype, head dims, mask and bias kinds, scale, causal,
window, softcap, layout), with sizes and head counts dynamic, and cached on
disk like ``kiln.transformers``' sites.

Where ``kilnc`` is not installed, a graph whose report is not in the cache
runs on Inductor alone, and its ONNX is kept in the cache's ``graphs/``
folder: ``python3 -m kiln.dynamo --compile-pending`` on a machine with
``kilnc`` fills in the reports and sites, so that the next run of the same
graph uses Kiln (the cache directory may be copied between machines).

``kiln.dynamo.reports`` holds, per compiled graph, the fusion report, the
sites rewritten and why any other was not; ``kiln.explain`` prints them.
Each rewritten graph is run beside the original on its first inputs: where
a floating output differs beyond the dtype's rounding (3e-2 relative in
bf16/f16, 1e-3 in f32) the graph runs on Inductor alone, with a warning and
the reason in its report. ``KILN_VERIFY=1`` raises instead, naming the
sites; ``KILN_VERIFY=0`` skips the check (it costs one eager run of each
graph when it is compiled). ``KILN_KEEP_GRAPHS=1``
keeps each graph's ONNX beside its report in the cache's ``graphs/`` (to
run ``kilnc --verify`` on it by hand).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
import operator
import os
import re
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from .compiler import find_kilnc, operand_sources, replayable
from .runtime import KilnError, Status
from .site import SiteSpec, package_source
from . import site_cache as _cache

__all__ = ["backend", "compile_pending", "explain", "optimize", "reports",
           "site_source"]

#: One entry per graph the backend compiled: {"key", "report", "rewritten":
#: [site indices], "skipped": {index: reason}, "fallback": reason or None}.
reports: List[Dict[str, Any]] = []


#: Per thread, the seconds of the steps nested in each open step.
_open_steps = threading.local()


@contextlib.contextmanager
def _step(entry: Dict[str, Any], name: str) -> Any:
    """Adds the wall-clock seconds of the block to the entry's
    `seconds[name]`, less those of the steps nested in it (a wait for a
    site's package inside its timing counts as "site kernels" only): where
    a graph's first call spends its time, each second in one step."""
    stack = _open_steps.__dict__.setdefault("stack", [])
    stack.append(0.0)
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        nested = stack.pop()
        if stack:
            stack[-1] += elapsed
        seconds = entry.setdefault("seconds", {})
        seconds[name] = round(seconds.get(name, 0.0) + elapsed - nested, 3)


def _graphs_directory() -> Path:
    return _cache.cache_directory() / "graphs"


# --------------------------------------------------------------------------
# Sites.
# --------------------------------------------------------------------------


def site_source(site: Dict[str, Any]) -> str:
    """The MLIR source of a one-site package for a report's site: its
    attributes as the fusion found them, every size and head count
    dynamic."""
    return package_source(SiteSpec.from_report(site))


def _site_label(site: Dict[str, Any]) -> str:
    return f"graph_{site['dtype']}_d{site['head_dim']}"


def _unrewritable(site: Dict[str, Any]) -> Optional[str]:
    """Why a report's site cannot be rewritten from its names, or None."""
    if site.get("prob_scale") is not None:
        return ("it quantises its probabilities to float8 before P·V, which no "
                "Kiln GPU kernel does yet")
    if site.get("operand_dtype", site.get("dtype")) != site.get("dtype"):
        return (f"its Q, K and V are {site['operand_dtype']} (FP8), for which "
                f"Kiln has no GPU kernel yet")
    roles = [("output", site.get("output"))] + list(site["operands"].items())
    for role, entry in roles:
        if entry is None:
            continue
        if not any(source.get("value") is not None for source in _sources(entry)):
            return f"its {role} is not a named graph value"
    return None


_sources = operand_sources


def _source_in(entry: Dict[str, Any], nodes: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The nearest of an operand's sources that is a node of the FX graph
    (`nodes`, by name and by the exporter's aliases), or None."""
    for source in _sources(entry):
        if source.get("value") in nodes and _replayable(source["transforms"]):
            return source
    return None


_replayable = replayable


# --------------------------------------------------------------------------
# The fusion report of a graph.
# --------------------------------------------------------------------------


def _graph_key(module: Any, example_inputs: Sequence[Any]) -> str:
    """What identifies a graph across processes: its code and its inputs'
    shapes, strides and dtypes."""
    import torch

    def size(value: Any) -> Any:
        return str(value) if isinstance(value, torch.SymInt) else int(value)

    signature = [
        (tuple(map(size, x.shape)), tuple(map(size, x.stride())), str(x.dtype))
        if isinstance(x, torch.Tensor) else type(x).__name__
        for x in example_inputs
    ]
    text = module.code + repr(signature) + torch.__version__
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class _KilncRun:
    """A `kilnc --report=json` run on an ONNX file, started in the
    background: the caller goes on with work that does not need the report
    and takes it with `result()` (kilnc is a subprocess, so the wait
    overlaps whatever the process does meanwhile). Its output goes to files,
    not pipes, so a large report never stalls kilnc before it is read."""

    def __init__(self, onnx_path: Path, options: Dict[str, Any],
                 bind: Optional[Dict[str, int]] = None) -> None:
        import tempfile

        self.onnx_path, self.options, self.bind = onnx_path, options, bind
        # FP8 sites on their dequantised values: no GPU kernel reads e4m3
        # Q, K and V yet, and the graph computes those values anyway.
        command = [find_kilnc(), str(onnx_path), "--report=json", "--fp8=dequantised"]
        if options.get("padded_rows"):
            command.append(f"--padded-rows={options['padded_rows']}")
        if bind:
            command.append("--bind-dims=" + ",".join(f"{k}={v}" for k, v in bind.items()))
        if options.get("finite_inputs"):
            command.append("--finite-inputs=" + ",".join(options["finite_inputs"]))
        self.stdout = tempfile.TemporaryFile(mode="w+")
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.started = time.perf_counter()
        #: Wall-clock seconds kilnc ran (its first report), once finished.
        self.seconds: Optional[float] = None
        self.process = subprocess.Popen(command, stdout=self.stdout,
                                        stderr=self.stderr, text=True)

    def result(self) -> Dict[str, Any]:
        """kilnc's report (waiting for it), its symbolic dimensions bound to
        `bind`'s sizes where given. Where kilnc had to bind sizes itself,
        the report is made size-free where it can be (see _free_sizes)."""
        try:
            returncode = self.process.wait()
            self.seconds = time.perf_counter() - self.started
            self.stdout.seek(0)
            self.stderr.seek(0)
            stdout, stderr = self.stdout.read(), self.stderr.read()
        finally:
            self.stdout.close()
            self.stderr.close()
        if returncode != 0:
            from .compiler import diagnostics_summary

            raise KilnError(Status.FORMAT_ERROR,
                            f"kilnc failed on {self.onnx_path} (exit {returncode}): "
                            f"{diagnostics_summary(stderr) or 'no diagnostics'}")
        report, _ = json.JSONDecoder().raw_decode(stdout.lstrip())
        if self.bind is None and report.get("bound_dims"):
            report = _free_sizes(report, self.onnx_path, self.options)
        return report

    def cancel(self) -> None:
        """Stops kilnc (the report is no longer wanted)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.stdout.close()
        self.stderr.close()


def _run_kilnc(onnx_path: Path, options: Dict[str, Any],
               bind: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
    """kilnc's JSON fusion report of an ONNX file (no package), its symbolic
    dimensions bound to `bind`'s sizes where given. Where kilnc had to bind
    sizes itself, the report is made size-free where it can be (see
    _free_sizes)."""
    return _KilncRun(onnx_path, options, bind).result()


#: Report keys whose integers are sizes, which may follow the bound sizes.
_SIZE_KEYS = {"shape", "mask_shape", "batch", "q_len", "kv_len", "size"}


def _free_sizes(report: Dict[str, Any], onnx_path: Path,
                options: Dict[str, Any]) -> Dict[str, Any]:
    """A report kilnc made with symbolic sizes bound (the exporter's shape
    computations need them) checked against a second report with other
    sizes: where the two agree on everything but sizes, the sizes that
    moved are the symbolic ones and become null (the rewrite then takes
    them from the graph), and the report holds for every size
    (`sizes_free`). Otherwise it holds for the bound sizes only."""
    bound = report["bound_dims"]
    other_sizes = {name: 192 if size != 192 else 256 for name, size in bound.items()}
    try:
        other = _run_kilnc(onnx_path, options, other_sizes)
    except KilnError:
        return report

    class Differs(Exception):
        pass

    def merge(a: Any, b: Any, sized: bool) -> Any:
        if isinstance(a, dict) and isinstance(b, dict):
            if a.keys() != b.keys():
                raise Differs
            return {k: merge(a[k], b[k], sized or k in _SIZE_KEYS) for k in a}
        if isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                raise Differs
            return [merge(x, y, sized) for x, y in zip(a, b)]
        if a == b and type(a) is type(b):
            return a
        if sized and isinstance(a, int) and isinstance(b, int):
            return None
        raise Differs

    try:
        merged = merge({k: v for k, v in report.items() if k != "bound_dims"},
                       {k: v for k, v in other.items() if k != "bound_dims"}, False)
    except Differs:
        return report
    merged["bound_dims"] = bound
    merged["sizes_free"] = True
    return merged


def _report_for(key: str, program: Any, options: Dict[str, Any],
                module: Any = None, meanwhile: Optional[Callable[[], None]] = None,
                entry: Optional[Dict[str, Any]] = None) -> Optional[Dict[str, Any]]:
    """The cached report of graph `key`, else kilnc's (cached now); None
    when there is no kilnc (the ONNX is kept for compile_pending).
    `meanwhile`, when given, is called once in any case: while kilnc runs
    where it runs (work the compile needs anyway that does not need the
    report). The entry's `seconds` get "onnx save" and "kilnc" (the time
    spent waiting for kilnc), its `overlapped` kilnc's own time."""
    directory = _graphs_directory()
    cached = directory / f"{key}.report.json"
    record = entry if entry is not None else {}

    def run_meanwhile() -> None:
        if meanwhile is not None:
            meanwhile()

    stamp = _cache._compiler_stamp()
    if cached.exists():
        report = json.loads(cached.read_text())
        # A report another kilnc wrote (an older build, another wheel) is
        # made again where a kilnc is at hand: its fusion may differ.
        if stamp is None or report.pop("kilnc", None) == stamp:
            report.pop("kilnc", None)
            run_meanwhile()
            return report
    directory.mkdir(parents=True, exist_ok=True)
    onnx_path = directory / f"{key}.onnx"
    if not onnx_path.exists():
        with _step(record, "onnx save"):
            scratch = directory / f".{key}.{os.getpid()}.onnx"
            program.save(str(scratch))
            os.replace(scratch, onnx_path)
            if module is not None:  # what the report's names refer to
                (directory / f"{key}.graph.py").write_text(module.code)
    try:
        find_kilnc()
    except KilnError:
        run_meanwhile()
        return None
    run = _KilncRun(onnx_path, options)
    try:
        run_meanwhile()
    except BaseException:
        run.cancel()
        raise
    with _step(record, "kilnc"):
        report = run.result()
    if run.seconds is not None:
        overlapped = record.setdefault("overlapped", {})
        overlapped["kilnc"] = round(overlapped.get("kilnc", 0.0) + run.seconds, 3)
    scratch = directory / f".{key}.{os.getpid()}.json"
    scratch.write_text(json.dumps({**report, "kilnc": stamp}))
    os.replace(scratch, cached)
    if os.environ.get("KILN_KEEP_GRAPHS", "") in ("", "0"):
        onnx_path.unlink(missing_ok=True)
    return report


def compile_pending(options: Optional[Dict[str, Any]] = None) -> int:
    """Fills in the reports and sites of the graphs kept without one (where
    kilnc was missing); returns how many graphs it compiled."""
    count = 0
    for onnx_path in sorted(_graphs_directory().glob("*.onnx")):
        if onnx_path.name.startswith("."):
            continue
        key = onnx_path.name[: -len(".onnx")]
        report = _run_kilnc(onnx_path, options or {})
        for site in report["sites"]:
            if _unrewritable(site) is None:
                _cache.site_from_source(site_source(site), _site_label(site))
        (onnx_path.parent / f"{key}.report.json").write_text(
            json.dumps({**report, "kilnc": _cache._compiler_stamp()}))
        onnx_path.unlink()
        count += 1
    return count


# --------------------------------------------------------------------------
# The rewrite.
# --------------------------------------------------------------------------


def _shape_of(node: Any) -> Optional[List[Any]]:
    """The sizes of an exported graph's node (ints, SymInts where dynamic),
    or None when the graph does not record them."""
    value = node.meta.get("val")
    return list(value.shape) if value is not None and hasattr(value, "shape") else None


def _dynamic_sizes(graph: Any, node: Any, shape: Optional[List[Any]],
                   target: List[Optional[int]]) -> Tuple[List[Any], Optional[List[Any]]]:
    """A report's reshape target (None where the size is dynamic) as sizes
    FX can trace, and the sizes of the result where known: each dynamic
    size is one of the input's dynamic sizes, taken in order, and the
    element counts must then agree symbolically; a single dynamic size with
    no such match is inferred (-1)."""
    import math

    import torch

    unknown = [i for i, size in enumerate(target) if size is None]
    if not unknown:
        return list(target), list(target)
    if shape is not None:
        dynamic = [i for i, size in enumerate(shape) if isinstance(size, torch.SymInt)]
        if len(dynamic) == len(unknown):
            sizes: List[Any] = list(target)
            for position, source in zip(unknown, dynamic):
                sizes[position] = shape[source]
            if _same_size(math.prod(shape), math.prod(sizes)):
                traced: List[Any] = list(target)
                for position, source in zip(unknown, dynamic):
                    traced[position] = graph.call_function(
                        torch.ops.aten.sym_size.int, (node, source))
                return traced, sizes
    if len(unknown) == 1:
        return [-1 if size is None else size for size in target], None
    raise KilnError(Status.UNSUPPORTED,
                    f"cannot size a reshape to {target} from {shape}")


def _same_size(a: Any, b: Any) -> bool:
    """Whether two element counts (ints or SymInts) are equal for every
    value of their symbols."""
    import sympy

    def expression(value: Any) -> Any:
        return value.node.expr if hasattr(value, "node") else sympy.Integer(value)

    return sympy.simplify(expression(a) - expression(b)) == 0


def _apply(graph: Any, node: Any, transforms: List[Dict[str, Any]],
           shape: Optional[List[Any]] = None) -> Tuple[Any, Optional[List[Any]]]:
    """`node` (of sizes `shape` when known) through a report's layout ops,
    as aten calls; returns the last node and its sizes where known."""
    import torch

    aten = torch.ops.aten
    dtypes = {"f32": torch.float32, "f16": torch.float16,
              "bf16": torch.bfloat16, "i1": torch.bool}
    for transform in transforms:
        op = transform["op"]
        if op == "transpose":
            perms = list(transform["perms"])
            node = graph.call_function(aten.permute.default, (node, perms))
            shape = None if shape is None else [shape[i] for i in perms]
        elif op == "reshape":
            sizes, shape = _dynamic_sizes(graph, node, shape,
                                          list(transform["shape"]))
            node = graph.call_function(aten.reshape.default, (node, sizes))
        elif op == "cast":
            # aten._to_copy, not prims.convert_element_type: the replay
            # must carry gradients (a learned temperature cast to f32).
            node = graph.call_function(aten._to_copy.default, (node,),
                                       {"dtype": dtypes[transform["dtype"]]})
        elif op == "not":
            node = graph.call_function(aten.logical_not.default, (node,))
        elif op == "mul":
            node = graph.call_function(aten.mul.Tensor, (node, float(transform["value"])))
        elif op == "add":
            node = graph.call_function(aten.add.Tensor, (node, float(transform["value"])))
        elif op == "reciprocal":
            node = graph.call_function(aten.reciprocal.default, (node,))
        elif op == "eq":
            value = transform["value"]  # "inf", "-inf" or "nan" where not finite
            node = graph.call_function(aten.eq.Scalar, (
                node, float(value) if isinstance(value, str) else value))
        elif op == "neg":
            node = graph.call_function(aten.neg.default, (node,))
        elif op == "where":
            # select(node, a, b) with constant branches, in the dtype the
            # report names.
            like = graph.call_function(
                aten.scalar_tensor.default, (float(transform["true"]),),
                {"dtype": dtypes[transform["dtype"]]})
            other = graph.call_function(
                aten.scalar_tensor.default, (float(transform["false"]),),
                {"dtype": dtypes[transform["dtype"]]})
            node = graph.call_function(aten.where.self, (node, like, other))
        elif op == "slice":
            # Static starts and sizes along each axis that moves.
            for axis, (start, size) in enumerate(zip(transform["start"], transform["size"])):
                if size is None:
                    raise KilnError(Status.UNSUPPORTED, "a slice of dynamic size")
                if start == 0 and shape is not None and size == shape[axis]:
                    continue
                node = graph.call_function(aten.slice.Tensor,
                                           (node, axis, int(start), int(start) + int(size)))
            shape = None if shape is None else list(transform["size"])
        elif op == "tile":
            multiples = [int(m) for m in transform["multiples"]]
            node = graph.call_function(aten.repeat.default, (node, multiples))
            shape = None if shape is None else [s * m for s, m in zip(shape, multiples)]
        else:
            raise KilnError(Status.UNSUPPORTED, f"unknown transform {op!r}")
    return node, shape


_FX_ORIGIN = re.compile(r"%([A-Za-z0-9_.]+)\s*:")


def onnx_aliases(onnx_nodes: Iterable[Any], fx_names: Iterable[str]) -> Dict[str, str]:
    """ONNX value name -> FX node name, for values the exporter named other
    than the FX node they compute (the optimizer keeps an inner name such as
    `val_31` where it removed the node that carried the FX name). Each ONNX
    node records the FX node it came from (metadata
    `pkg.torch.onnx.fx_node`, "%name : ..."); the first output of the last
    ONNX node of an FX node (in graph order) is that node's value, where no
    ONNX value carries the FX name. `onnx_nodes` are onnx_ir nodes
    (`metadata_props`, `outputs` with `.name`). A wrong alias would not
    pass unseen where rewritten graphs are checked (the default)."""
    known = set(fx_names)
    last: Dict[str, str] = {}
    values = set()
    for node in onnx_nodes:
        values.update(output.name for output in node.outputs if output.name)
        match = _FX_ORIGIN.match(node.metadata_props.get("pkg.torch.onnx.fx_node", ""))
        if match and node.outputs and node.outputs[0].name:
            last[match.group(1)] = node.outputs[0].name
    # An FX node whose name the ONNX graph still has is its own value.
    return {value: origin for origin, value in last.items()
            if origin in known and origin not in values and value not in known}


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ([^\n]+)\n\s*([^\n]*)')


def source_line(stack_trace: Optional[str]) -> Optional[str]:
    """The user's line an FX node came from: the innermost frame of its
    `stack_trace` ("path:line in function: code"), or None."""
    frames = _FRAME.findall(stack_trace or "")
    if not frames:
        return None
    path, line, function, code = frames[-1]
    return f"{path}:{line} in {function.strip()}: {code.strip()}"


def onnx_origins(onnx_nodes: Iterable[Any]) -> Dict[str, str]:
    """ONNX node name -> the name of the FX node it was made for (the
    exporter's `pkg.torch.onnx.fx_node` metadata), for the nodes that
    record one."""
    origins: Dict[str, str] = {}
    for node in onnx_nodes:
        match = _FX_ORIGIN.match(node.metadata_props.get("pkg.torch.onnx.fx_node", ""))
        if match and getattr(node, "name", None):
            origins[node.name] = match.group(1)
    return origins


def site_sources(report: Dict[str, Any], origins: Dict[str, str],
                 fx_nodes: Dict[str, Any]) -> Dict[str, str]:
    """For each ONNX node a report names (its sites' nodes and its unfused
    softmaxes), the user's source line of the FX node it came from, where
    that node has a stack trace. `fx_nodes`: FX node name -> node (anything
    with `.meta` and `.target`)."""
    names = [name for u in report.get("unfused", [])
             for name in (u.get("node"), u.get("stopped_at"))]
    for site in report.get("sites", []):
        names += site.get("nodes", [])
    lines: Dict[str, str] = {}
    for name in names:
        if not name or name in lines:
            continue
        # torch's exporter names nodes "node_<fx name>"; Kiln's own ONNX
        # (kiln.fx_onnx) names them after the FX node, with "__k<n>" on
        # the nodes it adds.
        own = re.sub(r"__k\d+$", "", name[5:] if name.startswith("node_") else name)
        node = fx_nodes.get(origins.get(name, own))
        line = source_line(node.meta.get("stack_trace")) if node is not None else None
        if line:
            lines[name] = line
    return lines


def _site_line(site: Dict[str, Any], lines: Dict[str, str]) -> Optional[str]:
    """The source line of a site's softmax where known (else of its last
    node that has one)."""
    if site.get("source_line"):
        return site["source_line"]
    found = [lines[n] for n in site.get("nodes", []) if n in lines]
    softmax = [line for line in found if "softmax" in line.lower()]
    return (softmax or found or [None])[-1]


def dense_term(site: Dict[str, Any], shapes: Dict[str, Any]) -> Optional[str]:
    """The role ("bias" or "mask") of a float additive term with scores of
    its own for each head and query (the op's `[batch, heads, q, k]` shape,
    `shapes[role]`, with more than one head and query), or None: the sites
    dense_bias="inductor" leaves to Inductor. Symbolic sizes count as more
    than one."""
    for role in ("bias", "mask"):
        operand = site["operands"].get(role)
        shape = shapes.get(role)
        if operand is None or shape is None or len(shape) != 4:
            continue
        if operand.get("dtype") not in ("f32", "f16", "bf16"):
            continue
        if all(not (isinstance(size, int) and size == 1) for size in shape[1:3]):
            return role
    return None


def _strided_keys(source: Any, chosen: Dict[str, Any]) -> bool:
    """Whether the operand taken from FX node `source` as is (no ops
    between) has a traced value whose last axis is strided."""
    value = getattr(source, "meta", {}).get("val")
    if chosen.get("transforms") or value is None or not hasattr(value, "stride"):
        return False
    try:
        return value.dim() > 0 and value.size(-1) != 1 and value.stride(-1) != 1
    except Exception:  # noqa: BLE001 (symbolic strides: leave it)
        return False


def keys_contiguous(term: Any) -> Any:
    """`term` (a mask or bias, or Q, K or V) with its last axis contiguous,
    keeping its broadcast (zero-stride) axes broadcast: itself where it
    already is."""
    if term.dim() == 0 or term.stride(-1) == 1 or term.size(-1) == 1:
        return term
    one = tuple(slice(0, 1) if term.stride(d) == 0 and term.size(d) > 1
                else slice(None) for d in range(term.dim()))
    return term[one].contiguous().expand(term.shape)


def _insert_site(graph: Any, sources: Dict[str, Any], site: Dict[str, Any],
                 chosen: Dict[str, Dict[str, Any]], handle: Callable[[], int],
                 dense_bias: str, training: bool = False) -> Any:
    """Writes a Kiln call for `site` into `graph` at its insertion point:
    each operand from its source node (`sources`, by role) through the ops
    the report lists (`chosen`), the call, and the ops from its result to
    the site's output; returns the node of that output. `handle()` gives
    the site's op handle; it is asked only once the site is known to be
    one the backend rewrites. Raises KilnError for a site the backend
    leaves to Inductor."""
    import torch

    operands: Dict[str, Any] = {}
    shapes: Dict[str, Any] = {}
    for role, operand in site["operands"].items():
        if operand is None:
            operands[role] = None
            continue
        source = sources[role]
        operands[role], shapes[role] = _apply(
            graph, source, chosen[role]["transforms"], _shape_of(source))
    dense = dense_term(site, shapes)
    if dense and dense_bias != "kiln":
        raise KilnError(
            Status.UNSUPPORTED,
            f"its {dense} is a dense per-head [q, k] term, left to "
            "Inductor by dense_bias=\"inductor\"")
    # The kernels stage a mask or bias whose keys are contiguous (T5's
    # position bias is a permuted view with its heads innermost): Inductor
    # then writes it that way where it makes it.
    # (Only where the traced value shows strided keys: other graphs are
    # written as before.)
    for role in ("mask", "bias"):
        if operands.get(role) is not None and _strided_keys(sources[role], chosen[role]):
            operands[role] = graph.call_function(keys_contiguous, (operands[role],))
    # The kernels read Q, K and V with their head dim contiguous. Replayed
    # ops can leave it strided (LongT5's keys: an einsum's transpose of a
    # copy); keys_contiguous is then the copy, and itself elsewhere.
    for role in ("query", "key", "value"):
        if operands.get(role) is not None and (
                chosen[role]["transforms"] or _strided_keys(sources[role], chosen[role])):
            operands[role] = graph.call_function(keys_contiguous, (operands[role],))
    if training:
        # The forward keeping its log-sum-exp, differentiated by autograd
        # through Kiln's backward (torch_ops.register_training).
        pair = graph.call_function(
            torch.ops.kiln.attention_lse.default,
            (operands["query"], operands["key"], operands["value"],
             operands.get("mask"), operands.get("bias"), handle(),
             operands.get("scale_factor")))
        call = graph.call_function(operator.getitem, (pair, 0))
    else:
        call = graph.call_function(
            torch.ops.kiln.attention.default,
            (operands["query"], operands["key"], operands["value"],
             operands.get("mask"), operands.get("bias"), None, handle(), 0,
             operands.get("scale_factor")))
    # The result has the query's sizes with the value's head dim.
    query = shapes["query"]
    value_dim = int(site.get("v_head_dim") or site["head_dim"])
    result, _ = _apply(graph, call, chosen["output"]["transforms"],
                       None if query is None else query[:-1] + [value_dim])
    # The graph's later ops may view the replaced value by its own strides
    # (an einsum's output is not laid out as the op's): the result takes
    # them where they are known and differ.
    strides = _traced_strides(sources.get("output"))
    if strides is not None:
        result = graph.call_function(like_strides, (result, strides))
    return result


def _traced_strides(node: Any) -> Optional[List[int]]:
    """The strides of FX node `node`'s traced value, where all are
    integers (else None)."""
    value = getattr(node, "meta", {}).get("val") if node is not None else None
    try:
        strides = list(value.stride())
    except Exception:  # noqa: BLE001 (no value, or not a tensor)
        return None
    return strides if all(isinstance(s, int) for s in strides) else None


def like_strides(result: Any, strides: Sequence[int]) -> Any:
    """`result` laid out with `strides` (the replaced value's): itself
    where it already is, else a copy so laid out."""
    if list(result.stride()) == list(strides):
        return result
    out = result.new_empty_strided(result.shape, strides)
    out.copy_(result)
    return out


def _current_cuda_device() -> Optional[int]:
    """The CUDA device the caller's thread uses, where torch has started
    CUDA (None otherwise: nothing is loaded ahead then)."""
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch.cuda.current_device()
    except Exception:  # noqa: BLE001 (no CUDA: nothing to load ahead)
        pass
    return None


def _prepare_on(device: int, built: Any) -> Optional[str]:
    """Compiles the kernels of the sites `built` (a site, or a forward and
    its backward) for `device` in this thread: the driver JIT-compiles each
    kernel's PTX once per context, and a site's first launch (the check of
    the rewritten graph) otherwise waits for it. A failure is left for that
    launch to report; returned, it says why nothing was compiled ahead."""
    import torch

    sites = built if isinstance(built, tuple) else (built,)
    try:
        # set_device alone binds no context to a new thread where the device
        # is already the thread's current one (device 0); a runtime call
        # that needs the context does.
        torch.cuda.set_device(device)
        torch.cuda.mem_get_info(device)
        for site in sites:
            site.prepare()  # its launch's kernels, not the package's others
    except Exception as error:  # noqa: BLE001 (reported where the site launches)
        return f"{type(error).__name__}: {error}"
    return None


class _SiteKernels:
    """The one-site packages of a report's sites, compiled by kilnc in a
    background thread (one at a time, each source once) while the main
    thread captures the sites' values and compiles Inductor's code for
    them; `start(site)` returns what gives the site's op handle, waiting
    for its package where it is still being compiled. The entry's
    `seconds["site kernels"]` is the time spent waiting, its
    `overlapped["site kernels"]` the packages' own time."""

    def __init__(self, entry: Dict[str, Any],
                 compile: Optional[Callable[[str, str], Any]] = None,
                 handle: Optional[Callable[[Any], int]] = None,
                 training: bool = False) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.entry = entry
        #: Training: each site's package holds its forward that keeps the
        #: log-sum-exp and its backward (site_cache.training_sites_for),
        #: and its handle pairs them (torch_ops.register_training).
        self.training = training
        self.compile = compile or _cache.site_from_source
        self.handle = handle
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kiln-site")
        self.futures: Dict[Tuple[str, str], Any] = {}
        self.busy = 0.0
        #: The GPU the graph runs on: each package's kernels are compiled
        #: for it (the driver's JIT) right after the package, here in the
        #: background, not at the site's first launch.
        self.device = _current_cuda_device()

    def _build(self, work: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        try:
            built = work()
            if self.device is not None:
                failure = _prepare_on(self.device, built)
                if failure:
                    self.entry.setdefault("notes", []).append(
                        f"kernels not compiled ahead: {failure}")
            return built
        finally:
            self.busy += time.perf_counter() - start

    def start(self, site: Dict[str, Any]) -> Callable[[], int]:
        """Starts the package of `site` (a report's site) if no site of the
        same source has; returns a callable giving its op handle. It raises
        KilnError ("no kernel (...)") where the package cannot be built."""
        key = (site_source(site), _site_label(site))  # KilnError: no kernel
        future = self.futures.get(key)
        if future is None:
            if self.training:
                spec = SiteSpec.from_report(site)
                work = lambda: _cache.training_sites_for(spec)  # noqa: E731
            else:
                work = lambda: self.compile(*key)  # noqa: E731
            future = self.futures[key] = self.pool.submit(self._build, work)

        wait = functools.partial(self._wait, future)

        def handle() -> int:
            if self.handle is not None:
                return self.handle(wait())
            from . import torch_ops as kops

            if self.training:  # a forward and its backward, paired now
                return kops.register_training(*wait())
            if not future.done():
                # Written into the graph now, bound when the op first runs
                # (the check, after Inductor has compiled the graph): the
                # package compiles meanwhile.
                return kops.reserve(wait)
            return kops.handle(wait())

        return handle

    def _wait(self, future: Any) -> Any:
        with _step(self.entry, "site kernels"):
            try:
                return future.result()
            except KilnError as error:
                raise KilnError(error.status, f"no kernel ({error})") from error

    def built(self, site: Dict[str, Any]) -> bool:
        """Whether the package of `site` (started) is done compiling."""
        return self.futures[(site_source(site), _site_label(site))].done()

    def wait(self, site: Dict[str, Any]) -> Any:
        """The package of `site` (started), waited for; KilnError ("no
        kernel (...)") where it could not be built."""
        return self._wait(self.futures[(site_source(site), _site_label(site))])

    def close(self) -> None:
        """Lets a package still compiling finish in the background (it
        lands in the cache) and records the packages' own time."""
        self.pool.shutdown(wait=False)
        if self.futures:
            overlapped = self.entry.setdefault("overlapped", {})
            overlapped["site kernels"] = round(
                overlapped.get("site kernels", 0.0) + self.busy, 3)


def _needing_grad(graph: Any, names: Sequence[str]) -> set:
    """The nodes of `graph` computed from the placeholders `names` (the
    inputs that need gradients): their values need gradients too."""
    marked = set()
    wanted = set(names)
    for node in graph.nodes:
        if (node.op == "placeholder" and node.name in wanted) or any(
                x in marked for x in node.all_input_nodes):
            marked.add(node)
    return marked


def _plan(site: Dict[str, Any], nodes: Dict[str, Any], kernels: "_SiteKernels"
          ) -> Tuple[Optional[str], Dict[str, Dict[str, Any]], Optional[Callable[[], int]]]:
    """Why `site` cannot be rewritten in a graph of `nodes` (or None), the
    source each operand and the output is taken from, and what gives the
    site's op handle (its package started in `kernels`)."""
    why = _unrewritable(site)
    chosen: Dict[str, Dict[str, Any]] = {}
    for role, operand in [("output", site["output"])] + list(site["operands"].items()):
        if operand is None or why is not None:
            continue
        source = _source_in(operand, nodes)
        if source is None:
            names = [s["value"] for s in _sources(operand) if s.get("value")]
            why = (f"its {role} is computed from {', '.join(map(repr, names))}, "
                   f"which the exporter made: no node of the graph is "
                   f"{'it' if len(names) == 1 else 'one of them'}")
        else:
            chosen[role] = source
    if why is not None:
        return why, chosen, None
    try:
        return None, chosen, kernels.start(site)
    except KilnError as error:
        return f"no kernel ({error})", chosen, None


class _Timed:
    """The timed choice of each site's path (kiln.choice) in the graph of
    `exported`, run on `tensors` (its inputs): the values a site reads come
    from one eager run of the graph as exported, made when the first site
    is timed and kept only for the sources the sites read. A site asked
    with `built` (whether its package is compiled) may come back as a
    choice.Pending, measured later by `measure()`."""

    def __init__(self, exported: Any, tensors: Sequence[Any],
                 options: Optional[Dict[str, Any]],
                 meanwhile: Optional[Callable[[], None]] = None) -> None:
        self.exported, self.tensors, self.options = exported, tensors, options
        self.meanwhile = meanwhile
        self.names: set = set()
        self.values: Optional[Dict[str, Any]] = None
        #: The timings left pending so far, by the key of their site's form.
        self.pending: Dict[str, Any] = {}

    def prepare(self, names: set) -> None:
        """The names of the nodes whose values sites may read (their
        sources; every input is kept too)."""
        self.names = set(names)

    def value(self, node: Any) -> Any:
        if self.values is None:
            self.values = self._run()
        return self.values.get(node.name)

    def _run(self) -> Dict[str, Any]:
        from .regions import values

        module = _graph_of(self.exported)
        device = _device_of(self.tensors)
        if device is not None:
            _scalars_on(module, device)
        wanted = [node for node in module.graph.nodes
                  if node.op in ("placeholder", "get_attr") or node.name in self.names]
        return values(module, _lifted_values(self.exported, self.tensors), wanted)

    def __call__(self, site: Dict[str, Any], output: Any, sources: Dict[str, Any],
                 build: Callable[[Any, Dict[str, Any]], Any],
                 probe: Optional[Callable[[Any, Dict[str, Any]], Any]] = None,
                 dense: Optional[str] = None,
                 built: Optional[Callable[[], bool]] = None) -> Any:
        """The site's decision (choice.choose's), or, given `built`, a
        choice.Pending where its package is still being compiled."""
        from . import choice

        def prepare() -> Any:
            return choice.prepare(site, output, sources, self.value, choice.Choice(
                build, lambda module, inputs: _inductor(module, inputs, self.options),
                probe=probe, dense=dense, meanwhile=self.meanwhile, built=built),
                self.pending if built is not None else None)

        return self._timing(prepare)

    def measure(self, pending: Any, wait: Optional[Callable[[], Any]] = None
                ) -> Dict[str, Any]:
        """The decision of a site whose timing was left pending (a
        choice.Pending), measured now as __call__ would have, after `wait`
        (which waits for the site's package: KilnError where it could not
        be built, the site then refused)."""
        def measure() -> Dict[str, Any]:
            if wait is not None:
                wait()
            return pending.measure()

        return self._timing(measure)

    def _timing(self, work: Callable[[], Any]) -> Any:
        try:
            # Compiled and run apart from the frame Dynamo is compiling:
            # Inductor's guards on these small graphs must not land in its
            # shape env.
            with _outside_dynamo():
                return work()
        except KilnError:
            raise  # the site cannot be rewritten (the rewrite says why)
        except Exception as error:  # noqa: BLE001 (timing never breaks the model)
            if _restarts(error):
                raise
            return {"path": "kiln", "why": f"not timed: {type(error).__name__}: "
                                           f"{str(error)[:300]}"}


def _rewrite(module: Any, report: Dict[str, Any], entry: Dict[str, Any],
             choose: Optional["_Timed"] = None,
             deferred: Optional[Dict[int, Tuple[Any, Callable[[], Any]]]] = None,
             decided: Optional[Dict[int, Any]] = None) -> int:
    """Replaces each rewritable site of `report` in `module`'s graph by a
    Kiln call; returns how many it replaced. `choose`, when given, decides
    each site's path (choice.choose's decision, kept in the entry's
    "choices"); a site it gives to Inductor is left as written. Where
    `deferred` is given, a site whose package is still compiling when it
    would be measured is written on Kiln's path and its timing left in
    `deferred` (by site index: the choice.Pending and what waits for the
    package), for _settle. `decided` gives decisions already made, by
    site index (a KilnError: the site refused): those are not asked of
    `choose`."""
    # torch.ops.kiln.attention defined before any site is written into the
    # graph (a site's op handle, which defined it before, is taken only
    # later, once its package is built).
    from . import torch_ops

    torch_ops.define()

    graph = module.graph
    nodes = {node.name: node for node in graph.nodes}
    for value, origin in entry.get("aliases", {}).items():
        nodes.setdefault(value, nodes[origin])
    dense_bias = entry.get("dense_bias", "kiln")
    kernels = _SiteKernels(entry, training=bool(entry.get("training")))
    try:
        return _rewrite_sites(module, report, entry, choose, nodes, dense_bias, kernels,
                              deferred, decided)
    finally:
        kernels.close()


def _fma_backward(site: Dict[str, Any]) -> Optional[str]:
    """Why the backward of `site` (a kilnc report's) has no tensor-core
    kernel (kiln.site.fma_backward_reason), or None."""
    from .site import fma_backward_reason

    return fma_backward_reason(site.get("dtype"), site.get("head_dim"),
                               site.get("v_head_dim") or site.get("head_dim"))


def _rewrite_sites(module: Any, report: Dict[str, Any], entry: Dict[str, Any],
                   choose: Optional["_Timed"], nodes: Dict[str, Any], dense_bias: str,
                   kernels: _SiteKernels,
                   deferred: Optional[Dict[int, Tuple[Any, Callable[[], Any]]]] = None,
                   decided: Optional[Dict[int, Any]] = None) -> int:
    """_rewrite's work, the sites' packages compiling in `kernels`."""
    graph = module.graph
    plans = [_plan(site, nodes, kernels) for site in report["sites"]]
    if entry.get("training"):
        # Kiln's backward gives dQ, dK and dV, and a run-time scale factor's
        # gradient from dQ (torch_ops.scale_factor_grad): a mask or bias
        # computed from what needs a gradient (T5's learned bias) keeps its
        # site in Inductor.
        grad = _needing_grad(graph, entry.get("needs_grad", []))
        for index, (why, chosen, handle) in enumerate(plans):
            if why is not None:
                continue
            slow = _fma_backward(report["sites"][index])
            if slow and entry.get("training_mode", "auto") == "auto":
                plans[index] = (f"{slow}: Kiln's backward for it runs on f32 "
                                "FMAs, slower than Inductor's "
                                "(options={'training': 'kiln'} takes it)",
                                chosen, None)
                continue
            for role in ("mask", "bias"):
                source = chosen.get(role)
                if source is not None and nodes[source["value"]] in grad:
                    plans[index] = (f"its {role} needs a gradient, which Kiln's "
                                    f"backward does not give", chosen, None)
                    break
    if choose is not None:
        choose.prepare({nodes[source["value"]].name for why, chosen, _ in plans
                        if why is None for role, source in chosen.items()
                        if role != "output"})
    replaced = 0
    for index, site in enumerate(report["sites"]):
        why, chosen, handle = plans[index]
        if why is not None:
            entry["skipped"][index] = why
            continue
        output = nodes[chosen["output"]["value"]]
        sources = {role: nodes[source["value"]] for role, source in chosen.items()}

        def build(into: Any, operands: Dict[str, Any]) -> Any:
            return _insert_site(into, operands, site, chosen, handle, dense_bias,
                                training=bool(entry.get("training")))

        def probe(into: Any, operands: Dict[str, Any]) -> Any:
            # The Kiln path without its package: whether the backend takes
            # the site, known before its package is waited for.
            return _insert_site(into, operands, site, chosen, lambda: -1, dense_bias)

        before = set(graph.nodes)
        try:
            if choose is not None:
                decision = decided.get(index) if decided is not None else None
                if isinstance(decision, KilnError):
                    raise decision  # refused when it was timed
                if decision is None:
                    # Too large to time both ways, a site reading a dense
                    # term is timed against Inductor's least time (see
                    # sites_saving_us).
                    dense = dense_term(site, {role: _shape_of(node)
                                              for role, node in sources.items()})
                    built = (None if deferred is None
                             else functools.partial(kernels.built, site))
                    with _step(entry, "site timing"):
                        decision = choose(site, output, sources, build, probe, dense,
                                          built)
                if isinstance(decision, dict):
                    entry.setdefault("choices", {})[index] = decision
                    if decision["path"] != "kiln":
                        entry["skipped"][index] = (
                            f"Inductor's path is faster here ({decision['why']})")
                        continue
                elif deferred is not None:
                    # Timed once Inductor has compiled the graph, which its
                    # package's compile overlaps: on Kiln's path until then.
                    deferred[index] = (decision, functools.partial(kernels.wait, site))
            with graph.inserting_before(output):
                result = build(graph, sources)
        except KilnError as error:
            inserted = [n for n in graph.nodes if n not in before]
            for node in reversed(inserted):
                graph.erase_node(node)
            entry["skipped"][index] = str(error)
            if deferred is not None:
                deferred.pop(index, None)
            continue
        output.replace_all_uses_with(result)
        entry["rewritten"].append(index)
        replaced += 1
    graph.eliminate_dead_code()
    graph.lint()
    module.recompile()
    return replaced


#: Relative (Frobenius) error a rewritten graph's floating outputs may show
#: against the graph's own: bf16 and f16 differ from eager by under 1e-2
#: when exact (the rounding of the materialised scores), f32 by far less.
_TOLERANCE = {"torch.float16": 3e-2, "torch.bfloat16": 3e-2}


def _verify_mode() -> str:
    """KILN_VERIFY: unset, each rewritten graph is checked on its first
    inputs and a mismatch falls back to Inductor alone with a warning; 1,
    a mismatch raises; 0, no check."""
    value = os.environ.get("KILN_VERIFY", "")
    return {"": "check", "0": "off"}.get(value, "raise")


#: Ops whose result may be their first argument or a view of it: a write
#: into the result may write that argument (`to` and `contiguous` return
#: their input itself where nothing changes).
_MAY_ALIAS = frozenset({
    "view", "view_as", "reshape", "transpose", "permute", "t", "mT", "T", "select",
    "slice", "getitem", "__getitem__", "narrow", "unsqueeze", "squeeze", "expand",
    "expand_as", "as_strided", "flatten", "unflatten", "split", "chunk", "unbind",
    "diagonal", "alias", "detach", "contiguous", "to", "type", "type_as", "float",
    "half", "bfloat16", "cuda", "swapaxes", "swapdims", "movedim", "moveaxis",
    "ravel", "unfold", "real", "imag", "view_as_real", "view_as_complex",
    "getattr"})


def _writes_state(target: Any) -> bool:
    """Whether a write into `target` (a node of Dynamo's graph) may reach a
    tensor the graph does not make itself: a graph input (Dynamo's lifted
    parameters, buffers and arguments) or a module attribute, through ops
    that may alias their input. Unknown is taken as yes."""
    node = target
    for _ in range(64):
        op = getattr(node, "op", None)
        if op in ("placeholder", "get_attr"):
            return True
        if op not in ("call_function", "call_method"):
            return op is None or op != "output"
        name = node.target if isinstance(node.target, str) else getattr(
            node.target, "__name__", "")
        args = getattr(node, "args", None)
        if name not in _MAY_ALIAS:
            return False  # a tensor the graph made (a product, a mask)
        if not args:
            return True
        node = args[0]
    return True


def _writes_in_place(gm: Any) -> bool:
    """Whether Dynamo's graph `gm` writes, in place, tensors it does not make
    itself (a KV cache's index_copy_, a counter's add_, item assignment into
    an input): running it again to check it would apply those writes again.
    An in-place op on a value the graph computed (`scores.masked_fill_`, as
    much research code writes its mask) changes nothing outside the call."""
    import operator

    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        name = node.target if isinstance(node.target, str) else getattr(
            node.target, "__name__", "")
        if node.target is operator.setitem or (
                name.endswith("_") and not name.endswith("__")):
            args = getattr(node, "args", None)
            if not args or _writes_state(args[0]):
                return True
    return False


def _flat_tensors(values: Any) -> List[Any]:
    import torch

    return [v for v in torch.utils._pytree.tree_leaves(values)
            if isinstance(v, torch.Tensor)]


def _relative_error(want: Any, got: Any) -> Optional[float]:
    """Frobenius relative error of `got` against `want` over `want`'s finite
    elements; None when they are not finite in the same places."""
    import torch

    a64, b64 = want.double(), got.double()
    finite = torch.isfinite(a64)
    if not torch.equal(finite, torch.isfinite(b64)):
        return None
    a64, b64 = a64[finite], b64[finite]
    return float((a64 - b64).norm() / max(float(a64.norm()), 1e-30))


def _concrete(inputs: Sequence[Any]) -> List[Any]:
    """Dynamo's example inputs with each symbolic size (dynamic shapes) as
    the integer it stands for in this call, so that the graph runs eagerly."""
    import torch

    values = []
    for value in inputs:
        if isinstance(value, torch.SymInt):
            hint = value.node.hint
            if hint is None:
                raise KilnError(Status.UNSUPPORTED,
                                f"the size {value!r} has no value to check with")
            value = int(hint)
        values.append(value)
    return values


def _in_wider(gm: Any, wide: Any) -> Any:
    """A copy of Dynamo's graph `gm` computing in float type `wide` (float64,
    or float32 where an op of the graph has no float64 kernel): every
    narrower float dtype it names (casts, constants' dtypes, `x.float()`)
    becomes `wide`, so run on inputs of that type it gives the graph's own
    result without rounding to the narrower types on the way."""
    import copy

    import torch

    narrow = {t for t in (torch.float16, torch.bfloat16, torch.float32)
              if torch.finfo(t).bits < torch.finfo(wide).bits}
    method = {torch.float64: "double", torch.float32: "float"}[wide]
    narrow_methods = {m for m, t in (("float", torch.float32), ("half", torch.float16),
                                     ("bfloat16", torch.bfloat16)) if t in narrow}

    def widen(value: Any) -> Any:
        if isinstance(value, torch.dtype) and value in narrow:
            return wide
        if isinstance(value, (list, tuple)):
            return type(value)(widen(v) for v in value)
        if isinstance(value, dict):
            return {k: widen(v) for k, v in value.items()}
        return value

    graph = copy.deepcopy(gm.graph)
    for node in graph.nodes:
        node.args, node.kwargs = widen(node.args), widen(node.kwargs)
        # `x.float()` names its dtype by the method (a rotary embedding's
        # `position_ids.float()` beside a float64 `inv_freq`).
        if node.op == "call_method" and node.target in narrow_methods:
            node.target = method
    module = torch.fx.GraphModule(gm, graph)
    module.recompile()
    return module


def _mismatch(original: Callable, inputs: Sequence[Any], rewritten: Callable,
              rewritten_inputs: Sequence[Any]) -> Optional[str]:
    """The rewritten graph against the original on `inputs`: None when
    every floating output agrees within its tolerance, else what differs.
    Where they part by more, the graph computed in float64 decides: Kiln's
    sites pass when they are no further from it than the tolerance or than
    twice the original's own error (a graph that takes the softmax in bf16,
    as Whisper's eager attention does, is itself that far off)."""
    import torch

    with torch.no_grad():
        want = _flat_tensors(original(*inputs))
        got = _flat_tensors(rewritten(*rewritten_inputs))
    if len(want) != len(got):
        return f"{len(got)} outputs where the graph has {len(want)}"
    exact: Optional[List[Any]] = None
    reference = "float64"
    for position, (a, b) in enumerate(zip(want, got)):
        if not a.dtype.is_floating_point:
            continue  # indices may part at near ties
        tolerance = _TOLERANCE.get(str(a.dtype), 1e-3)
        error = _relative_error(a, b)
        if error is None:
            return f"output {position} is not finite where the graph's is"
        if error <= tolerance:
            continue
        message = (f"output {position} differs from the graph without Kiln "
                   f"(relative error {error:.3e} > {tolerance})")
        if exact is None:
            # float64 decides; where an op has no float64 kernel (an MoE's
            # grouped matmul), float32, still far closer than bf16 or f16.
            failures = []
            for wide_type in (torch.float64, torch.float32):
                try:
                    wide = [x.to(wide_type) if isinstance(x, torch.Tensor)
                            and x.dtype.is_floating_point else x for x in inputs]
                    with torch.no_grad():
                        exact = _flat_tensors(_in_wider(original, wide_type)(*wide))
                    reference = str(wide_type).replace("torch.", "")
                    break
                except Exception as error_wide:  # noqa: BLE001
                    failures.append(f"{str(wide_type).replace('torch.', '')}: {error_wide}")
            if exact is None:
                return f"{message}; no float64 or float32 run to decide ({'; '.join(failures)})"
        if len(exact) != len(want):
            return message
        own, kiln = _relative_error(exact[position], a), _relative_error(exact[position], b)
        if own is None or kiln is None or kiln > max(tolerance, 2 * own):
            return (f"{message}; against the graph in {reference} Kiln's error is "
                    f"{kiln if kiln is None else f'{kiln:.3e}'}, the graph's own "
                    f"{own if own is None else f'{own:.3e}'}")
    return None


def _scalars_on(module: Any, device: Any) -> None:
    """Puts the 0-d tensors the exporter's decompositions make without a
    device (`aten.scalar_tensor` for a Python number, e.g. clamp's bound) on
    `device`: Inductor takes them on the CPU, eager ops such as
    clamp.Tensor do not."""
    import torch

    changed = False
    for node in module.graph.nodes:
        if (node.op == "call_function"
                and node.target is torch.ops.aten.scalar_tensor.default
                and node.kwargs.get("device") is None):
            node.kwargs = {**node.kwargs, "device": device}
            changed = True
    if changed:
        module.recompile()


# --------------------------------------------------------------------------
# The backend.
# --------------------------------------------------------------------------


def _graph_of(exported: Any) -> Any:
    """A copy of the exported program's graph module, to rewrite: its
    placeholders are the lifted parameters, buffers and constants (none for
    parameters and buffers, which Dynamo lifts into inputs), then the Dynamo
    graph's flat inputs."""
    import copy

    import torch

    return torch.fx.GraphModule(exported.graph_module,
                                copy.deepcopy(exported.graph_module.graph))


def _lifted_value(exported: Any, spec: Any) -> Any:
    """The tensor an exported graph's lifted parameter, buffer or constant
    input (`spec`) holds."""
    import torch

    value = exported.constants.get(spec.target)
    if value is None:
        value = exported.state_dict[spec.target]
    if not isinstance(value, torch.Tensor):
        raise KilnError(Status.UNSUPPORTED,
                        f"a lifted constant {spec.target!r} is not a tensor")
    return value


def _lifted_values(exported: Any, tensors: Sequence[Any]) -> List[Any]:
    """Every input of the exported graph as written (before _bind_lifted):
    the lifted values, with the graph's user inputs `tensors` in order."""
    import torch

    user = torch.export.graph_signature.InputKind.USER_INPUT
    given = iter(tensors)
    return [next(given) if spec.kind == user else _lifted_value(exported, spec)
            for spec in exported.graph_signature.input_specs]


def _device_of(tensors: Sequence[Any]) -> Any:
    """The one non-CPU device of `tensors`, or None."""
    devices = {t.device for t in tensors if t.device.type != "cpu"}
    return devices.pop() if len(devices) == 1 else None


def _bind_lifted(module: Any, exported: Any, device: Any = None) -> Any:
    """`module` taking only the Dynamo graph's inputs: each placeholder of a
    lifted parameter, buffer or constant becomes a buffer of the module. A
    0-d CPU constant (a `torch.tensor(x)` the model makes in its forward,
    which Dynamo's graph makes on the spot) moves to `device`: on the CPU,
    the compiled graph would copy it to the GPU every call, and such a copy
    from pageable memory waits for the stream (0-d tensors combine the
    same on any device)."""
    import torch

    user = torch.export.graph_signature.InputKind.USER_INPUT
    specs = exported.graph_signature.input_specs
    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    if all(spec.kind == user for spec in specs):
        return module
    for number, (spec, node) in enumerate(zip(specs, placeholders)):
        if spec.kind == user:
            continue
        value = _lifted_value(exported, spec)
        if device is not None and value.device.type == "cpu" and value.dim() == 0:
            value = value.to(device)
        name = f"_kiln_lifted_{number}"
        module.register_buffer(name, value.detach())
        with module.graph.inserting_before(node):
            attribute = module.graph.get_attr(name)
        node.replace_all_uses_with(attribute)
        module.graph.erase_node(node)
    module.graph.lint()
    module.recompile()
    return module


def _warm_inductor() -> None:
    """Starts Inductor's compile workers now, before the export: importing
    its `async_compile` starts them where torch would (its own conditions,
    TORCH_WARM_POOL included), and until they are up Inductor compiles
    each Triton kernel in this process, one at a time. Inductor alone
    starts them when its backend is first called; Kiln's first Inductor
    compile comes after the export, kilnc and the site kernels."""
    try:
        import torch._inductor.async_compile  # noqa: F401
    except Exception:  # noqa: BLE001 (an optimisation only)
        pass


def _load_inductor() -> None:
    """Imports the rest of Inductor's compiler (what the first compile in a
    process would import), done while kilnc runs."""
    try:
        import torch._inductor.compile_fx  # noqa: F401
    except Exception:  # noqa: BLE001 (an optimisation only)
        pass


def _inductor(module: Any, example_inputs: Sequence[Any],
              inductor_options: Optional[Dict[str, Any]]) -> Callable:
    from torch._inductor.compile_fx import compile_fx

    if inductor_options:
        return compile_fx(module, example_inputs, config_patches=inductor_options)
    return compile_fx(module, example_inputs)


def _sizes_from_tensors(gm: Any, example_inputs: Sequence[Any]) -> Any:
    """A copy of Dynamo's graph `gm` taking only its tensor inputs: each
    input that is a symbolic size (dynamic shapes) becomes that dimension
    of a tensor input. Returns the module, the positions of the tensor
    inputs among gm's, and torch.export's dynamic_shapes for them (every
    dimension Dynamo made symbolic)."""
    import copy

    import torch

    graph = copy.deepcopy(gm.graph)
    module = torch.fx.GraphModule(gm, graph)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    dims: Dict[Any, Any] = {}
    positions, shapes = [], []
    values = [node.meta.get("example_value", example)
              for node, example in zip(placeholders, example_inputs)]
    for position, (node, value) in enumerate(zip(placeholders, values)):
        if not isinstance(value, torch.Tensor):
            continue
        positions.append(position)
        dynamic = {}
        for dim, size in enumerate(value.shape):
            # A size Dynamo made symbolic and then specialised (a hidden
            # size a weight fixes) is static.
            if isinstance(size, torch.SymInt) and not size.node.expr.is_number:
                dynamic[dim] = torch.export.Dim.AUTO
                if size.node.expr.is_Symbol:
                    dims.setdefault(size.node.expr, (node, dim))
        shapes.append(dynamic or None)
    first = next(n for n in graph.nodes if n.op != "placeholder")
    for node, value in zip(placeholders, values):
        if isinstance(value, torch.Tensor):
            continue
        if not isinstance(value, torch.SymInt) or value.node.expr not in dims:
            raise KilnError(Status.UNSUPPORTED,
                            f"the graph input {node.name} ({value!r}) is not the "
                            f"size of a tensor input")
        tensor, dim = dims[value.node.expr]
        with graph.inserting_before(first):
            size = graph.call_function(torch.ops.aten.sym_size.int, (tensor, dim))
        node.replace_all_uses_with(size)
        graph.erase_node(node)
    graph.lint()
    module.recompile()
    return module, positions, tuple(shapes)


def _outside_dynamo() -> Any:
    """A context in which torch.export runs as if called by the user: not
    inside the tracing context of the Dynamo frame being compiled, whose
    shape environment and guards the export would otherwise extend with its
    own symbols (guards Dynamo then fails on the frame it compiled)."""
    import contextlib

    import torch._guards as guards

    stack = contextlib.ExitStack()
    stack.enter_context(guards.tracing(None))
    if hasattr(guards, "compile_context"):
        stack.enter_context(guards.compile_context(None))
    return stack


def _taking(compiled: Callable, positions: List[int], count: int) -> Callable:
    """`compiled`, which takes the tensor inputs at `positions`, as a
    callable taking all `count` inputs of Dynamo's graph (Dynamo calls it
    as it calls what compile_fx returns: with the inputs as arguments)."""
    if positions == list(range(count)):
        return compiled

    def call(*args: Any) -> Any:
        return compiled(*[args[i] for i in positions])

    return call


def _restarts(error: BaseException) -> bool:
    """Whether `error` is Dynamo asking to trace the frame again (raised by
    Inductor, e.g. to turn a float input into a tensor): it must reach
    Dynamo, not become a fallback."""
    try:
        from torch._dynamo.exc import RestartAnalysis
    except ImportError:
        return False
    return isinstance(error, RestartAnalysis)


def _new_entry(**fields: Any) -> Dict[str, Any]:
    """The record of one graph (or one shape of it) in `reports`."""
    return {"key": None, "report": None, "rewritten": [], "skipped": {},
            "fallback": None, "dynamic": False, "verified": None, **fields}


def backend(gm: Any, example_inputs: Sequence[Any], **kwargs: Any) -> Callable:
    """The ``torch.compile`` backend (``backend="kiln"``). Options, as
    ``options={"kiln": {...}, ...}`` or keyword arguments: ``padded_rows``
    ("exact" or "free"), ``dense_bias`` ("kiln", the default: a site whose
    bias or float mask has scores of its own for every head and query is
    rewritten like any other, and timed; "inductor": such sites stay in
    Inductor), ``choose`` ("timed", the default: each
    site is timed on the model's first inputs against Inductor's own code
    for it, kiln.choice, and takes the faster; "kiln": every site Kiln can
    take is rewritten), ``training`` ("auto", the default: in a graph that
    needs gradients, the sites whose backward runs on tensor cores run
    Kiln's forward and backward kernels and the others stay Inductor's;
    "kiln": every site Kiln can take; "inductor": such a graph is
    Inductor's); every other option goes to Inductor. Graphs with
    dynamic sizes (``dynamic=True``, ``mark_dynamic``) are exported with
    those sizes symbolic, so new lengths reuse the same sites and code."""
    import torch

    options = dict(kwargs.get("options") or {})
    kiln_options = dict(options.pop("kiln", {}) or {})
    mode = kwargs.get("mode")
    if mode and mode != "default":  # Inductor's mode, as torch.compile's
        import torch._inductor

        options = {**torch._inductor.list_mode_options(mode), **options}
    # Kiln's own options also at the top of `options` (kiln.optimize passes
    # its keyword arguments there).
    for name in ("padded_rows", "dense_bias", "choose", "training"):
        if name in options:
            kiln_options[name] = options.pop(name)
        if name in kwargs:
            kiln_options[name] = kwargs[name]
    for name, allowed in (("dense_bias", ("inductor", "kiln")),
                          ("choose", ("timed", "kiln")),
                          ("training", ("auto", "inductor", "kiln"))):
        if name in kiln_options and kiln_options[name] not in allowed:
            raise KilnError(Status.INVALID_ARGUMENT,
                            f"{name} must be one of {', '.join(map(repr, allowed))}, "
                            f"not {kiln_options[name]!r}")
    entry = _new_entry()
    reports.append(entry)
    _alone[id(entry)] = _Alone(gm, example_inputs, options, entry)
    try:
        return _compile(gm, example_inputs, options, kiln_options, entry)
    except BaseException as error:
        if _restarts(error):
            # Dynamo traces the frame again and calls the backend anew:
            # this graph never runs, and is not reported.
            reports.remove(entry)
        raise
    finally:
        _alone.pop(id(entry), None)


#: Words in the name of an op that Kiln's fusion may start from: a softmax
#: (its row max; `log_softmax` too), a hand-written one (`max`, `amax`, or
#: through `logsumexp`), SDPA and the other attention ops. A graph with none
#: is not exported.
_ATTENTION_WORDS = ("softmax", "max", "logsumexp", "attention")


def _attention_ops(gm: Any) -> Iterator[Any]:
    """The nodes of Dynamo's graph `gm`, and of the graphs it calls (a
    higher-order op's subgraphs), that a site Kiln's fusion finds could
    start from: ops named after a softmax, a max or attention, and calls of
    a module (whose ops the graph does not show)."""
    from .regions import _name

    graphs = [gm.graph]
    modules = getattr(gm, "modules", None)
    if modules is not None:
        graphs += [m.graph for m in modules()
                   if m is not gm and getattr(m, "graph", None) is not None]
    for graph in graphs:
        for node in graph.nodes:
            name = (_name(node) or "").lower()
            if node.op == "call_module" or any(word in name for word in _ATTENTION_WORDS):
                yield node


def may_hold_attention(gm: Any) -> bool:
    """Whether Dynamo's graph `gm` may hold a site Kiln's fusion finds (an op
    of _attention_ops). Fusion is anchored on a softmax's row max, so a graph
    without one has no site, and its export and kilnc run would be spent for
    nothing (graph breaks leave many such graphs in a model)."""
    return any(True for _ in _attention_ops(gm))


def sdpa_calls_kept(gm: Any) -> Optional[str]:
    """Why Dynamo's graph `gm` is left to Inductor before any export, or
    None: every op of it that attention could start from is an SDPA call
    kept as written (kiln.choice.kept_sdpa), so the export, kilnc and the
    sites' packages would be spent for nothing."""
    from .choice import kept_sdpa

    kept = []
    for node in _attention_ops(gm):
        why = None if node.op == "call_module" else kept_sdpa(node)
        if why is None:
            return None
        kept.append(why)
    if not kept:
        return None
    return (f"every attention op of the graph ({len(kept)}) is an SDPA call "
            f"left as written, {kept[0].split(': ', 1)[-1]}: not exported")


class _Fallback(Exception):
    """A graph Kiln leaves to Inductor alone, and why."""


class _ExportFailed(_Fallback):
    """A graph the ONNX exporter could not convert as a whole."""


def _compile(gm: Any, example_inputs: Sequence[Any], options: Dict[str, Any],
             kiln_options: Dict[str, Any], entry: Dict[str, Any]) -> Callable:
    """The backend's work on Dynamo's graph `gm`, recorded in `entry`."""
    import torch

    try:
        if torch.is_grad_enabled() and any(
                x.requires_grad for x in example_inputs if isinstance(x, torch.Tensor)):
            training = kiln_options.get("training", "auto")
            if training == "inductor":
                raise _Fallback(
                    "the graph needs gradients and options={'training': "
                    "'inductor'} leaves such graphs to Inductor")
            # Training: each site runs Kiln's forward keeping its log-sum-exp
            # and differentiates through Kiln's backward kernels. A forward
            # timing would not measure a training step: every site is taken
            # ("auto": every site whose backward runs on tensor cores).
            entry["training"] = True
            entry["training_mode"] = training
            kiln_options = {**kiln_options, "choose": "kiln"}
        entry["dense_bias"] = kiln_options.get("dense_bias", "kiln")
        entry["choose"] = kiln_options.get("choose", "timed")
        try:
            source, positions, dynamic_shapes = _sizes_from_tensors(gm, example_inputs)
        except Exception as error:  # noqa: BLE001 (never break the model)
            raise _Fallback(f"cannot export the graph's inputs: {error}") from error
        dynamic = any(shape for shape in dynamic_shapes)
        entry["dynamic"] = dynamic
        if not may_hold_attention(gm):
            raise _Fallback("no softmax, max or attention op in the graph: "
                            "not exported")
        if entry["choose"] == "timed":
            kept = sdpa_calls_kept(gm)
            if kept is not None:
                raise _Fallback(kept)
        _warm_inductor()
        tensors = [example_inputs[i] for i in positions]
        try:
            exported, report = _exported(source, tensors, positions,
                                         dynamic_shapes if dynamic else None,
                                         gm, example_inputs, kiln_options, entry)
        except _ExportFailed as failure:
            if dynamic:
                raise
            return _guarded(_by_regions(gm, example_inputs, options, kiln_options,
                                        entry, str(failure)),
                            gm, example_inputs, options, entry)
        if dynamic and report.get("bound_dims") and not report.get("sizes_free"):
            # The graph's shape computations need static sizes: its report
            # holds for these sizes only, so each new shape is exported and
            # rewritten again (the sites themselves serve every size).
            entry["dynamic"] = False
            entry["per_shape"] = (f"sizes {sorted(report['bound_dims'])} bound by "
                                  f"kilnc: one rewrite per input shape")
            return _per_shape(gm, source, positions, len(example_inputs), options,
                              kiln_options, entry, example_inputs)
        compiled = _finish(exported, report, gm, example_inputs, tensors, options, entry)
        chosen = _guarded(_taking(compiled, positions, len(example_inputs)), gm,
                          example_inputs, options, entry)
        read = entry.get("constant_buffers")
        if read and entry["rewritten"]:
            return _ConstantGuard(chosen, gm, {
                position: example_inputs[position] for position in read.values()}, entry)
        return chosen
    except _Fallback as reason:
        entry["fallback"] = str(reason)
        entry["rewritten"] = []
        holder = _alone_for(entry)
        if holder is not None and holder.compiled is not None:
            return holder.compiled
        return _inductor(gm, example_inputs, options)


def _by_regions(gm: Any, example_inputs: Sequence[Any], options: Dict[str, Any],
                kiln_options: Dict[str, Any], entry: Dict[str, Any],
                failure: str) -> Callable:
    """Dynamo's graph `gm`, which the exporter could not convert whole
    (`failure`), with each attention region (kiln.regions) exported,
    fused and rewritten on its own and called from `gm` in its place; the
    graph is then checked and compiled by Inductor as a whole. The entry's
    report lists every region's sites in order, and `regions` what became
    of each region."""
    import operator

    import torch

    from . import regions as cut

    found = cut.regions(gm.graph)
    if not found:
        raise _Fallback(f"{failure}; and no attention region to export apart")
    module = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    nodes = {node.name: node for node in module.graph.nodes}
    captured = cut.values(gm, _concrete(example_inputs),
                          [leaf for region in found for leaf in region.leaves])
    merged: Dict[str, Any] = {"sites": [], "unfused": []}
    entry["regions"] = []
    for number, region in enumerate(found):
        record = _new_entry(softmax=region.softmax.name)
        entry["regions"].append(record)
        inputs = [captured.get(leaf.name) for leaf in region.leaves]
        offset = len(merged["sites"])
        try:
            if not all(isinstance(x, torch.Tensor) for x in inputs):
                raise _Fallback("an input of the region is not a tensor")
            source = cut.module(region)
            positions = list(range(len(inputs)))
            exported, report = _exported(source, inputs, positions, None, source,
                                         inputs, kiln_options, record)
            # Each region's export names its nodes afresh: the user's line
            # is the region's softmax's in Dynamo's graph.
            line = source_line(region.softmax.meta.get("stack_trace"))
            merged["sites"] += [dict(site, source_line=line) for site in report["sites"]]
            merged["unfused"] += report.get("unfused", [])
            timed = (record.get("choose", "timed") == "timed"
                     and all(x.is_cuda for x in inputs))
            rewritten = _graph_of(exported)
            count = bool(report["sites"]) and _rewrite(
                rewritten, report, record,
                _Timed(exported, inputs, options) if timed else None)
            for index in record["rewritten"]:
                entry["rewritten"].append(offset + index)
            for index, why in record["skipped"].items():
                entry["skipped"][offset + index] = why
            for index, choice in record.get("choices", {}).items():
                entry.setdefault("choices", {})[offset + index] = choice
            if not count:
                raise _Fallback(record["fallback"] or "no site rewritten")
            rewritten = _bind_lifted(rewritten, exported, _device_of(inputs))
        except _Fallback as reason:
            record["fallback"] = str(reason)
            entry["rewritten"] = [i for i in entry["rewritten"] if i < offset]
            continue
        except Exception as error:  # noqa: BLE001 (never break the model)
            if _restarts(error):
                raise
            record["fallback"] = f"{type(error).__name__}: {str(error)[:300]}"
            entry["rewritten"] = [i for i in entry["rewritten"] if i < offset]
            continue
        name = f"_kiln_region_{number}"
        module.add_submodule(name, rewritten)
        output = nodes[region.output.name]
        with module.graph.inserting_before(output):
            call = module.graph.call_module(
                name, tuple(nodes[leaf.name] for leaf in region.leaves))
            result = module.graph.call_function(operator.getitem, (call, 0))
        output.replace_all_uses_with(result)
    entry["report"] = merged
    entry["export"] = f"{failure}; exported by attention regions"
    if not entry["rewritten"]:
        raise _Fallback(f"{failure}; no attention region rewritten")
    module.graph.eliminate_dead_code()
    module.graph.lint()
    module.recompile()
    return _checked(gm, example_inputs, module, example_inputs, options, entry)


#: Per call, the most the graph Kiln compiles (the exported program) has
#: been measured to cost over Dynamo's own graph under Inductor, apart from
#: the sites (host time, at b4 x s1k on an H100: docs/design.md). Sites that
#: save more than this together make the graph-level timing pointless.
GRAPH_MARGIN_US = 300.0


def sites_saving_us(entry: Dict[str, Any]) -> Optional[float]:
    """Microseconds a call the entry's rewritten sites save over Inductor's
    own code for them, by their timed choices; infinite where a site was
    rewritten untimed for its size (its scores alone would cost Inductor
    more than any margin) unless it reads a dense per-head term (Kiln's
    kernel may then read that term slower than Inductor computes it: T5's
    strided position bias ran 0.65x); such a site counts the least it
    saves, Inductor's bound less Kiln's time, where Kiln's path alone was
    timed under that bound (choice's "inductor_bound_us"). None when a
    rewritten site has no timing at all (the saving is unknown)."""
    choices = entry.get("choices", {})
    total = 0.0
    for index in entry.get("rewritten", []):
        decision = choices.get(index) or choices.get(str(index))
        if decision is None:
            return None
        if "kiln_us" in decision and "inductor_us" in decision:
            total += decision["inductor_us"] - decision["kiln_us"]
        elif "kiln_us" in decision and "inductor_bound_us" in decision:
            if decision["kiln_us"] >= decision["inductor_bound_us"]:
                return None  # the bound proves nothing: the graph is timed
            total += decision["inductor_bound_us"] - decision["kiln_us"]
        elif decision.get("untimed") == "size" and not decision.get("dense"):
            return float("inf")
        else:
            return None
    return total


def graph_choice_from_sites(entry: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The entry's `graph_choice` where its rewritten sites' own timings
    already decide the graph for Kiln (they save at least GRAPH_MARGIN_US
    a call together), or None where the graph must be timed whole."""
    saving = sites_saving_us(entry)
    if saving is None or saving < GRAPH_MARGIN_US:
        return None
    return {"path": "kiln",
            "why": ("not timed: the sites save " + ("more than Inductor could "
                    "materialise" if saving == float("inf") else
                    f"{saving:.0f} us a call") + f", above the {GRAPH_MARGIN_US:.0f} "
                    "us the exported graph has been measured to cost")}


class _Alone:
    """Inductor alone on Dynamo's graph, compiled at most once per graph:
    for the graph's timing (_guarded), or as the fallback where no site is
    rewritten. `early()` compiles it ahead where the main thread would
    otherwise only wait (a timed SDPA site's package still compiling in the
    background), so that wait and this compile overlap."""

    def __init__(self, gm: Any, example_inputs: Sequence[Any],
                 options: Dict[str, Any], entry: Dict[str, Any]) -> None:
        self.gm, self.example_inputs, self.options, self.entry = (
            gm, example_inputs, options, entry)
        self.compiled: Optional[Callable] = None
        # Dynamo's contexts of the frame, which early() restores: Inductor's
        # guards on Dynamo's graph belong to that frame (the site timing
        # that calls early() runs outside them).
        try:
            import torch._guards as guards

            self.contexts = (guards.TracingContext.try_get(),
                             guards.CompileContext.try_get()
                             if hasattr(guards, "CompileContext") else None)
        except Exception:  # noqa: BLE001 (then early() does nothing)
            self.contexts = None

    def get(self) -> Callable:
        if self.compiled is None:
            with _step(self.entry, "inductor alone"):
                self.compiled = _inductor(self.gm, self.example_inputs, self.options)
        return self.compiled

    def early(self) -> None:
        """get(), where the graph would later be timed whole or fall back
        (not under choose="kiln", nor for a graph that writes in place)."""
        if self.compiled is None and self.contexts is not None \
                and not _writes_in_place(self.gm):
            import contextlib

            import torch._guards as guards

            with contextlib.ExitStack() as stack:
                stack.enter_context(guards.tracing(self.contexts[0]))
                if hasattr(guards, "compile_context"):
                    stack.enter_context(guards.compile_context(self.contexts[1]))
                self.get()


#: The _Alone of each graph being compiled, by id of its entry.
_alone: Dict[int, _Alone] = {}


def _alone_for(entry: Dict[str, Any]) -> Optional[_Alone]:
    return _alone.get(id(entry))


def _guarded(compiled: Callable, gm: Any, example_inputs: Sequence[Any],
             options: Dict[str, Any], entry: Dict[str, Any]) -> Callable:
    """`compiled` (the graph with Kiln's sites), or Inductor alone on
    Dynamo's graph `gm` where that measures faster on the first inputs
    (choose="timed" on CUDA; docs/design.md): the sites each won their own
    timing, but the rewritten graph as a whole is the exported program
    compiled, which Inductor may compile less well than Dynamo's graph.
    The entry's `graph_choice` gives both times."""
    import torch

    from . import choice

    inputs = _concrete(example_inputs)
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    if (entry.get("choose", "timed") != "timed" or not tensors
            or not all(t.is_cuda for t in tensors) or _writes_in_place(gm)):
        return compiled
    decided = graph_choice_from_sites(entry)
    if decided is not None:
        # A second Inductor compile of the whole graph would only confirm
        # it (and doubles the first call's time on large models).
        entry["graph_choice"] = decided
        return compiled
    try:
        holder = _alone_for(entry) or _Alone(gm, example_inputs, options, entry)
        alone = holder.get()  # as a fallback is
        with torch.no_grad(), _step(entry, "graph timing"):
            alone_s = choice.seconds(alone, inputs)
            kiln_s = choice.seconds(compiled, inputs)
    except Exception as error:  # noqa: BLE001 (timing never breaks the model)
        if _restarts(error):
            raise
        entry["graph_choice"] = {"path": "kiln", "why": f"not timed: "
                                 f"{type(error).__name__}: {str(error)[:300]}"}
        return compiled
    why = (f"timed: the graph with Kiln {kiln_s * 1e6:.1f} us, Inductor alone "
           f"{alone_s * 1e6:.1f} us a call")
    if kiln_s <= alone_s:
        entry["graph_choice"] = {"path": "kiln", "why": why}
        return compiled
    entry["graph_choice"] = {"path": "inductor", "why": why}
    entry["fallback"] = f"Inductor alone is faster on this graph ({why})"
    entry["rewritten"] = []
    return alone


def _is_weight(node: Any, value: Any) -> bool:
    """Whether Dynamo's graph input `node` (holding `value`) is a parameter
    or buffer of the module (Dynamo lifts them into inputs)."""
    import torch

    if isinstance(value, torch.nn.Parameter):
        return True
    return any(marker in _source_name(node) for marker in ("_parameters[", "_buffers["))


def _source_name(node: Any) -> str:
    """The name of where Dynamo took graph input `node` from
    (`L['self']._modules['attn']._buffers['bias']`), or "" where it has
    none. Dynamo's Source.name is a method in some releases and a property
    in others."""
    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None)
    if source is None:
        return ""
    try:
        name = source.name
        name = name() if callable(name) else name
    except Exception:  # noqa: BLE001 (a source without a name)
        return ""
    return name if isinstance(name, str) else ""


#: A module buffer read at compile time (constant_buffers) holds at most
#: this many distinct values: a mask (booleans, 0/1, 0/-inf), not a table.
MOST_MASK_VALUES = 2


def constant_buffers(gm: Any, example_inputs: Sequence[Any],
                     positions: Sequence[int]) -> Dict[int, Any]:
    """The module buffers among Dynamo's graph inputs (at `positions`) that
    the backend reads at compile time, by index among those positions: mask
    buffers (GPT-Neo's `bias` band, nanoGPT's `tril`), which hold at most
    MOST_MASK_VALUES distinct values, need no gradient and are small enough
    to write with their data, in a graph that writes no input in place.
    Dynamo passes a module's buffers as graph inputs, so kilnc would
    otherwise see a run-time mask that may hide whole rows where the
    model's band cannot; read, a band fuses as causal and window bounds. The compiled graph checks on every call that each
    such buffer is the one read, unchanged (_ConstantGuard)."""
    import torch

    from . import fx_onnx

    if _writes_in_place(gm):
        # A buffer the graph writes (a KV cache of zeros, a counter) is state,
        # not a constant, whatever it holds now.
        return {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    found: Dict[int, Any] = {}
    for index, position in enumerate(positions):
        value = example_inputs[position]
        if (not isinstance(value, torch.Tensor) or isinstance(value, torch.nn.Parameter)
                or isinstance(value, torch._subclasses.FakeTensor)
                or value.requires_grad or value.is_complex()
                or value.numel() > fx_onnx.MOST_CONSTANT_ELEMENTS
                or not _is_weight(placeholders[position], value)):
            continue
        try:
            if value.dtype != torch.bool and \
                    torch.unique(value.detach()).numel() > MOST_MASK_VALUES:
                continue
        except Exception:  # noqa: BLE001 (a dtype unique does not take)
            continue
        found[index] = value
    return found


def _digest(tensors: Iterable[Any]) -> str:
    """A hash of the values of `tensors` (with their dtypes and shapes)."""
    import torch

    hasher = hashlib.sha256()
    for tensor in tensors:
        data = tensor.detach().contiguous().cpu()
        hasher.update(f"{data.dtype}{list(data.shape)}".encode())
        # Bytes (numpy has no bfloat16; a 0-d tensor has no byte view).
        hasher.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
    return hasher.hexdigest()[:24]


class _ConstantGuard:
    """A compiled graph that read module buffers at compile time
    (constant_buffers): each call checks that the buffer inputs are the
    tensors read, unchanged (the same tensor at the same version, or equal
    values); where one is not, the graph runs as Dynamo traced it,
    uncompiled, with a warning once (a buffer the model writes is not a
    constant; torch._dynamo.reset() compiles anew with its values)."""

    def __init__(self, compiled: Callable, gm: Any, read: Dict[int, Any],
                 entry: Dict[str, Any]) -> None:
        self.compiled, self.gm, self.entry = compiled, gm, entry
        self.read = {position: (tensor, self._version(tensor), _digest([tensor]))
                     for position, tensor in read.items()}
        self.stale = False

    @staticmethod
    def _version(tensor: Any) -> Optional[int]:
        try:
            return tensor._version
        except Exception:  # noqa: BLE001 (inference tensors have none)
            return None

    def _same(self, args: Sequence[Any]) -> bool:
        for position, (tensor, version, digest) in self.read.items():
            given = args[position]
            if given is tensor and self._version(given) == version:
                continue
            if _digest([given]) != digest:
                return False
            self.read[position] = (given, self._version(given), digest)
        return True

    def __call__(self, *args: Any) -> Any:
        if not self.stale and self._same(args):
            return self.compiled(*args)
        if not self.stale:
            self.stale = True
            self.entry["constant_guard"] = "a buffer read at compile time changed"
            warnings.warn("kiln: a module buffer read at compile time changed; this "
                          "graph now runs uncompiled (torch._dynamo.reset() compiles "
                          "it anew)")
        return self.gm(*args)


def finite_weights(gm: Any, example_inputs: Sequence[Any], positions: Sequence[int],
                   input_names: Sequence[str]) -> List[str]:
    """The ONNX input names (`input_names`, one per tensor input at
    `positions`) of the module's floating-point weights that hold no
    infinity or NaN now. kilnc takes them as finite (--finite-inputs): a
    position bias computed from such a weight (T5's relative attention
    bias) cannot hide keys, so its site fuses beside a finite-fill mask.
    Weights are read once, here; a weight later overwritten with -inf in
    place would change only rows whose keys are all masked (docs/design.md)."""
    import torch

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(input_names) != len(positions):
        return []
    names = []
    for position, name in zip(positions, input_names):
        value = example_inputs[position]
        if (isinstance(value, torch.Tensor) and value.is_floating_point()
                and not isinstance(value, torch._subclasses.FakeTensor)
                and _is_weight(placeholders[position], value)
                and bool(torch.isfinite(value.detach()).all())):
            names.append(name)
    return names


def _own_onnx(source: Any, copies: Sequence[Any], dynamic_shapes: Any,
              entry: Dict[str, Any],
              constants: Optional[Dict[int, Any]] = None) -> Tuple[Any, Any]:
    """`source` exported by torch.export and written as ONNX by Kiln
    (kiln.fx_onnx): the exported program and the ONNX graph, or (None,
    None) where torch's exporter is to be used instead: symbolic sizes, a
    graph the writer does not take (the entry's `onnx` says why), or
    KILN_ONNX=torch."""
    import torch

    from . import fx_onnx

    if dynamic_shapes or os.environ.get("KILN_ONNX", "kiln") == "torch":
        entry["onnx"] = "torch"
        return None, None
    try:
        with warnings.catch_warnings(), _outside_dynamo(), _step(entry, "export"):
            warnings.simplefilter("ignore")
            exported = torch.export.export(source, tuple(copies), strict=False)
        _drop_metadata_asserts(exported)
        try:
            with _step(entry, "onnx write"):
                graph = _write_onnx(exported, constants)
        except fx_onnx.InPlace:
            # torch.export's graph keeps a model's in-place ops (T5's
            # `scores += position_bias`): functionalised, with no op
            # decomposed, it is written.
            with warnings.catch_warnings(), _outside_dynamo(), \
                    _step(entry, "functionalise"):
                warnings.simplefilter("ignore")
                exported = exported.run_decompositions({})
            _drop_metadata_asserts(exported)
            with _step(entry, "onnx write"):
                graph = _write_onnx(exported, constants)
    except Exception as error:  # noqa: BLE001 (torch's exporter then)
        if _restarts(error):
            raise
        entry["onnx"] = f"torch ({type(error).__name__}: {str(error)[:200]})"
        return None, None
    entry["onnx"] = "kiln"
    entry["opaque"] = len(graph.opaque)
    return exported, graph


def _user_input_names(exported: Any) -> List[str]:
    """The names of an exported program's user inputs, in order (the ONNX
    names kiln.fx_onnx gives them)."""
    import torch

    user = torch.export.graph_signature.InputKind.USER_INPUT
    return [spec.arg.name for spec in exported.graph_signature.input_specs
            if spec.kind == user]


def _write_onnx(exported: Any, constants: Optional[Dict[int, Any]] = None) -> Any:
    """kiln.fx_onnx's ONNX of an exported program, its lifted parameters,
    buffers and constants written with their values, and so the user
    inputs `constants` names (by index: constant_buffers)."""
    import torch

    from . import fx_onnx

    user = torch.export.graph_signature.InputKind.USER_INPUT
    lifted = {spec.arg.name: _lifted_value(exported, spec)
              for spec in exported.graph_signature.input_specs if spec.kind != user}
    names = _user_input_names(exported)
    for index, value in (constants or {}).items():
        lifted[names[index]] = value
    return fx_onnx.write(exported.graph_module.graph, lifted)


def _drop_metadata_asserts(exported: Any) -> None:
    """Removes torch.export's `_assert_tensor_metadata` checks from its
    graph: they pin each checked tensor's device as traced, and the
    rewritten graph moves 0-d constants to the GPU (_bind_lifted); they
    compute nothing."""
    import torch

    target = getattr(torch.ops.aten, "_assert_tensor_metadata", None)
    if target is None:
        return
    graph = exported.graph_module.graph
    dropped = [node for node in graph.nodes
               if node.op == "call_function" and node.target is target.default
               and not node.users]
    for node in dropped:
        graph.erase_node(node)
    if dropped:
        exported.graph_module.recompile()


def _input_names(program: Any) -> List[str]:
    """The ONNX input names of the graph's user inputs, in order."""
    names = getattr(program, "input_names", None)
    if names is not None:
        return list(names)
    return [value.name for value in program.model.graph.inputs]


def _exported(source: Any, tensors: Sequence[Any], positions: Sequence[int],
              dynamic_shapes: Any, gm: Any,
              example_inputs: Sequence[Any], kiln_options: Dict[str, Any],
              entry: Dict[str, Any]) -> Tuple[Any, Dict[str, Any]]:
    """`source` exported through torch's ONNX exporter (with
    `dynamic_shapes`, or static), and kilnc's report of it. `tensors` are
    Dynamo's inputs at `positions`, the exported graph's inputs."""
    import torch

    try:
        # Copies: exporting with dynamic sizes marks its inputs' dimensions
        # dynamic, which would fail the guards Dynamo made on the real ones.
        copies = tuple(t.detach().clone() for t in tensors)
        constants = {} if dynamic_shapes else constant_buffers(gm, example_inputs,
                                                               positions)
        exported, program = _own_onnx(source, copies, dynamic_shapes, entry, constants)
        if entry.get("onnx") != "kiln":
            constants = {}
        if program is None:
            with warnings.catch_warnings(), _outside_dynamo(), _step(entry, "export"):
                warnings.simplefilter("ignore")
                program = torch.onnx.export(source, copies, dynamo=True, verbose=False,
                                            dynamic_shapes=dynamic_shapes)
            exported = program.exported_program
        module = _graph_of(exported)
        key = _graph_key(module, [
            node.meta.get("example_value") for node in gm.graph.nodes
            if node.op == "placeholder"] if dynamic_shapes else tensors)
        names = (_user_input_names(exported) if entry.get("onnx") == "kiln"
                 else _input_names(program))
        # A buffer written into the graph as a constant (constant_buffers)
        # is no input of it: kilnc refuses a finite input it cannot find.
        written = {names[index] for index in constants}
        finite = [name for name in finite_weights(gm, example_inputs, positions, names)
                  if name not in written]
        if finite:
            kiln_options = {**kiln_options, "finite_inputs": finite}
            key = hashlib.sha256((key + ",".join(finite)).encode()).hexdigest()[:24]
        if constants:
            key = hashlib.sha256((key + _digest(constants.values())).encode()
                                 ).hexdigest()[:24]
        entry["key"] = key
        entry["finite_inputs"] = finite
        entry["constant_buffers"] = {names[index]: positions[index] for index in constants}
        entry["dense_bias"] = kiln_options.get("dense_bias", "kiln")
        entry["choose"] = kiln_options.get("choose", "timed")

        origins: Dict[str, str] = {}

        def meanwhile() -> None:
            # While kilnc runs: what the rewrite needs that the report does
            # not decide (Kiln's own ONNX names each value after its node).
            entry["aliases"] = {} if entry.get("onnx") == "kiln" else onnx_aliases(
                program.model.graph, (node.name for node in module.graph.nodes))
            try:  # only for kiln.explain: never a reason to fall back
                if entry.get("onnx") != "kiln":
                    origins.update(onnx_origins(program.model.graph))
            except Exception:  # noqa: BLE001
                pass
            with _step(entry, "inductor import"):
                _load_inductor()

        report = _report_for(key, program, kiln_options, module, meanwhile, entry)
        if report is not None:
            try:  # only for kiln.explain: never a reason to fall back
                entry["source_lines"] = site_sources(
                    report, origins, {node.name: node for node in module.graph.nodes})
            except Exception:  # noqa: BLE001
                entry["source_lines"] = {}
    except Exception as error:  # noqa: BLE001 (any export failure falls back)
        raise _ExportFailed(f"export to ONNX failed: {type(error).__name__}: "
                            f"{str(error)[:500]}") from error
    if report is None:
        raise _Fallback("no kilnc here and no cached report: the graph is kept "
                        "for `python3 -m kiln.dynamo --compile-pending`")
    entry["report"] = report
    return exported, report


def _finish(exported: Any, report: Dict[str, Any], gm: Any, example_inputs: Sequence[Any],
            tensors: Sequence[Any], options: Dict[str, Any],
            entry: Dict[str, Any]) -> Callable:
    """The exported graph with the report's sites rewritten, checked against
    Dynamo's graph `gm` on its inputs and compiled by Inductor: a callable
    taking `tensors`."""
    import torch

    if entry.get("training"):
        entry["needs_grad"] = [name for name, t in zip(_user_input_names(exported), tensors)
                               if getattr(t, "requires_grad", False)]
    timed = (entry.get("choose", "timed") == "timed"
             and all(t.is_cuda for t in tensors)
             and not any(isinstance(t, torch._subclasses.FakeTensor) for t in tensors))
    timer = (_Timed(exported, tensors, options, getattr(_alone_for(entry), "early", None))
             if timed else None)
    # A timed site whose package is still compiling is timed after
    # Inductor's compile of the graph, which overlaps that compile.
    deferred: Dict[int, Tuple[Any, Callable[[], Any]]] = {}
    module = _rewritten_graph(exported, report, tensors, entry, timer,
                              deferred if timer is not None else None)
    settle = None
    if deferred and timer is not None:
        settle = functools.partial(_settle, exported, report, tensors, entry, timer,
                                   deferred)
    return _checked(gm, example_inputs, module, tensors, options, entry, settle)


def _rewritten_graph(exported: Any, report: Dict[str, Any], tensors: Sequence[Any],
                     entry: Dict[str, Any], timer: Optional[_Timed],
                     deferred: Optional[Dict[int, Tuple[Any, Callable[[], Any]]]] = None,
                     decided: Optional[Dict[int, Any]] = None) -> Any:
    """A fresh copy of the exported graph with the report's sites rewritten
    (_rewrite, with `timer`, `deferred` and `decided`) and its lifted
    constants bound; _Fallback where no site is rewritten."""
    module = _graph_of(exported)
    try:
        rewritten = bool(report["sites"]) and _rewrite(module, report, entry, timer,
                                                       deferred, decided)
    except Exception as error:  # noqa: BLE001 (never break the model)
        if _restarts(error):
            raise
        raise _Fallback(f"rewrite failed: {type(error).__name__}: {error}") from error
    if not rewritten:
        if any(c["path"] != "kiln" for c in entry.get("choices", {}).values()):
            raise _Fallback("Inductor's own code measured faster at every site "
                            "Kiln could take")
        raise _Fallback(entry["fallback"] or "no site rewritten")
    try:
        module = _bind_lifted(module, exported, _device_of(tensors))
    except Exception as error:  # noqa: BLE001 (never break the model)
        raise _Fallback(f"cannot bind the graph's constants: {error}") from error
    return module


def _settle(exported: Any, report: Dict[str, Any], tensors: Sequence[Any],
            entry: Dict[str, Any], timer: _Timed,
            deferred: Dict[int, Tuple[Any, Callable[[], Any]]]) -> Optional[Any]:
    """Times the sites whose timing waited for the graph's compile
    (`deferred`: by site index, the choice.Pending and what waits for the
    site's package), keeping each decision in the entry's "choices" marked
    "deferred". None where every one keeps Kiln's path (the graph compiled
    stands); else the exported graph rewritten again with the decisions
    made, for Inductor to compile in its place (a site whose package could
    not be built is left as written there, as the rewrite leaves it)."""
    decided: Dict[int, Any] = dict(entry.get("choices", {}))
    again = False
    with _step(entry, "site timing"):
        for index, (pending, wait) in deferred.items():
            try:
                decision = {**timer.measure(pending, wait), "deferred": True}
            except KilnError as error:
                decided[index] = error
                again = True
                continue
            decided[index] = entry.setdefault("choices", {})[index] = decision
            again = again or decision["path"] != "kiln"
    if not again:
        return None
    entry["rewritten"], entry["skipped"] = [], {}
    return _rewritten_graph(exported, report, tensors, entry, timer, decided=decided)


def _checked(gm: Any, example_inputs: Sequence[Any], module: Any,
             tensors: Sequence[Any], options: Dict[str, Any],
             entry: Dict[str, Any],
             settle: Optional[Callable[[], Optional[Any]]] = None) -> Callable:
    """The rewritten `module` (taking `tensors`) checked against Dynamo's
    graph `gm` on its inputs (docs/design.md) and compiled by Inductor.
    `settle`, where given, times the sites left pending once the graph is
    compiled, and gives the graph to compile instead where one of them
    loses (_settle)."""
    import torch

    device = _device_of(tensors)
    if device is not None:
        _scalars_on(module, device)
    # Inductor first: a site package still compiling (a reserved handle)
    # is waited for only when the check runs the graph, or a pending
    # timing measures the site.
    compiled = _compiled(module, tensors, options, entry)
    if settle is not None:
        again = settle()
        if again is not None:
            module = again
            if device is not None:
                _scalars_on(module, device)
            compiled = _compiled(module, tensors, options, entry)
    verify = _verify_mode()
    if verify != "off" and _writes_in_place(gm):
        verify, entry["verified"] = "off", "not checked: the graph writes in place"
    if verify != "off":
        try:
            with _step(entry, "check"):
                wrong = _mismatch(gm, _concrete(example_inputs), module, tensors)
        except torch.cuda.OutOfMemoryError:
            wrong, entry["verified"] = None, "not checked: out of memory"
        except Exception as error:  # noqa: BLE001 (never break the model)
            if _restarts(error):
                raise
            raise _Fallback(f"cannot run the rewritten graph: "
                            f"{type(error).__name__}: {error}") from error
        if wrong is not None:
            message = f"Kiln sites {entry['rewritten']}: {wrong}"
            if verify == "raise":
                raise KilnError(Status.INTERNAL_ERROR, f"KILN_VERIFY: {message}")
            warnings.warn(f"kiln: {message}; this graph runs on Inductor alone")
            raise _Fallback(f"checked on its first inputs and not kept: {message}")
        if entry["verified"] is None:
            entry["verified"] = "checked on its first inputs"
    _bind_sites(module)
    return compiled


def _compiled(module: Any, tensors: Sequence[Any], options: Dict[str, Any],
              entry: Dict[str, Any]) -> Callable:
    """The rewritten `module` compiled by Inductor (step "inductor")."""
    try:
        with _step(entry, "inductor"):
            return _inductor(module, tensors, options)
    except Exception as error:  # noqa: BLE001 (never break the model)
        if _restarts(error):
            raise
        raise _Fallback(f"Inductor failed on the rewritten graph: "
                        f"{type(error).__name__}: {str(error)[:500]}") from error


def _bind_sites(module: Any) -> None:
    """Waits for the package of each site `module` calls whose handle is
    still reserved (unchecked graphs): a package that failed to compile
    falls back here, never at the model's first call."""
    import torch

    from . import torch_ops as kops

    handles = {torch.ops.kiln.attention.default: 6,
               torch.ops.kiln.attention_lse.default: 5}
    for node in module.graph.nodes:
        if node.op == "call_function" and node.target in handles:
            try:
                kops._site(int(node.args[handles[node.target]]))
            except KilnError as error:
                raise _Fallback(f"a site has no kernel: {error}") from error


def _per_shape(gm: Any, source: Any, positions: List[int], count: int,
               options: Dict[str, Any], kiln_options: Dict[str, Any],
               entry: Dict[str, Any], example_inputs: Sequence[Any]) -> Callable:
    """Dynamo's dynamic graph `gm` as a callable that exports, rewrites and
    compiles it for each new shape of its tensor inputs (static), the first
    now on `example_inputs`; a shape Kiln cannot serve runs on Inductor
    alone, compiled for that shape."""
    compiled: Dict[Any, Callable] = {}

    def signature(args: Sequence[Any]) -> Any:
        return tuple((tuple(args[i].shape), tuple(args[i].stride()), args[i].dtype)
                     for i in positions)

    def build(args: Sequence[Any]) -> Callable:
        args = _concrete(args)
        tensors = [args[i] for i in positions]
        shape_entry = _new_entry(shape=[list(t.shape) for t in tensors])
        try:
            exported, report = _exported(source, tensors, positions, None, gm, args,
                                         kiln_options, shape_entry)
            function = _finish(exported, report, gm, args, tensors, options, shape_entry)
        except _Fallback as reason:
            shape_entry["fallback"] = str(reason)
            shape_entry["rewritten"] = []
            function = _inductor(source, tensors, options)
        entry.setdefault("shapes", []).append(shape_entry)
        if len(entry["shapes"]) == 1:
            for name in ("key", "report", "rewritten", "skipped", "fallback", "verified"):
                entry[name] = shape_entry[name]
        return _taking(function, positions, count)

    def call(*args: Any) -> Any:
        key = signature(args)
        function = compiled.get(key)
        if function is None:
            with _outside_dynamo():
                function = compiled[key] = build(args)
        return function(*args)

    with _outside_dynamo():  # a static compile must not guard Dynamo's frame
        compiled[signature(example_inputs)] = build(example_inputs)
    return call


def optimize(model: Any, *example_inputs: Any, **options: Any) -> Callable:
    """``torch.compile(model, backend="kiln")``, run once on
    `example_inputs` (so its graphs are compiled now); returns the compiled
    callable."""
    import torch

    compiled = torch.compile(model, backend=backend, options=options or None)
    if example_inputs:
        with torch.no_grad():
            compiled(*example_inputs)
    return compiled


def explain(model: Any, *example_inputs: Any) -> str:
    """The fusion report of a PyTorch model, per captured graph: the sites
    Kiln fused and rewrote, the softmaxes left alone and why (returned and
    printed)."""
    import torch

    start = len(reports)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        compiled(*example_inputs)
    lines: List[str] = []
    for number, entry in enumerate(reports[start:]):
        report = entry["report"] or {"sites": [], "unfused": []}
        lines.append(f"graph {number}: {len(report['sites'])} sites fused, "
                     f"{len(entry['rewritten'])} rewritten"
                     + (f" ({entry['export']})" if entry.get("export") else "")
                     + (f" (ONNX by {entry['onnx']})" if str(entry.get("onnx", "kiln"))
                        .startswith("torch (") else "")
                     + (f" ({entry['fallback']})" if entry["fallback"] else "")
                     + (f", {entry['verified']}" if entry.get("verified") else ""))
        if entry.get("constant_buffers"):
            lines.append("  buffers read at compile time (guarded each call): "
                         + ", ".join(sorted(entry["constant_buffers"])))
        sources = entry.get("source_lines", {})
        for index, site in enumerate(report["sites"]):
            choice = entry.get("choices", {}).get(index)
            timed = ""
            if choice:
                timed = f" ({choice['why']}" + (
                    "; timed after the graph's compile" if choice.get("deferred")
                    else "") + ")"
            state = ("rewritten" + timed if index in entry["rewritten"]
                     else f"not rewritten: {entry['skipped'].get(index)}")
            where = _site_line(site, sources)
            lines.append(
                f"  site {index}: {site['dtype']} d{site['head_dim']} "
                f"heads {site['q_heads']}/{site['kv_heads']} causal={site['causal']} "
                + (f"window={site['window']} " if site.get("window") else "")
                + f"mask={site['mask']} bias={site['bias']} -> "
                f"{site['output']['value']}: {state}"
                + (f"\n    at {where}" if where else ""))
        for unfused in report.get("unfused", []):
            where = sources.get(unfused["node"])
            stopped = unfused.get("stopped_at")
            lines.append(f"  softmax {unfused['node']}"
                         + (f" at {where}" if where else "")
                         + f": not fused: {unfused['reason']}"
                         + (f"\n    stopped at {sources.get(stopped, stopped)}"
                            if stopped else ""))
    text = "\n".join(lines)
    print(text)
    return text


def _register() -> None:
    try:
        from torch._dynamo import register_backend
    except ImportError:  # torch without Dynamo
        return
    try:
        register_backend(compiler_fn=backend, name="kiln")
    except Exception:  # noqa: BLE001 (already registered)
        pass


_register()


def main(argv: Optional[List[str]] = None) -> int:
    arguments = argv if argv is not None else sys.argv[1:]
    if arguments != ["--compile-pending"]:
        print("usage: python3 -m kiln.dynamo --compile-pending", file=sys.stderr)
        return 2
    count = compile_pending()
    print(f"compiled {count} graphs into {_graphs_directory()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
