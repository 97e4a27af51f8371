"""What a Kiln site computes, and the MLIR of a package holding only it.

A `SiteSpec` names one specialisation of ``kiln.attention`` or
``kiln.paged_attention`` (see ``KilnOps.td``): element types, head dims,
operands, attributes, and for paged attention the cache's page size, FP8
storage and query packing. Sizes and head counts are not part of it: the
package written from it (`package_source`) leaves them dynamic, so one
package serves every shape. The frontends build a spec from what they know
(`SiteSpec.from_report` from a ``kilnc --report=json`` site,
`SiteSpec.dense` and `SiteSpec.paged` for ``kiln.transformers``); the spec
is hashable and is their key for the site.

No torch here: the spec and its source are plain data and text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from .capi import KilnError, Status

__all__ = ["Operand", "SiteSpec", "check_fp8_cache", "package_source"]

#: Kiln's element types of the torch dtypes its sites take.
TORCH_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "f16",
                "torch.float32": "f32"}

#: The boolean ``[B, 1|H, Sq, Sk]`` mask of transformers' SDPA format.
_SDPA_MASK_TYPE = ("i1", 4)


@dataclass(frozen=True)
class Operand:
    """An optional operand of a site (mask, bias, run-time scale factor):
    its element type and rank; its sizes stay dynamic (a scale factor's are
    1)."""

    dtype: str
    rank: int


@dataclass(frozen=True)
class SiteSpec:
    """One site: everything its kernel is specialised on.

    Dense sites (``kiln.attention``) take `mask`, `bias` and `scale_factor`
    operands and the attributes `causal`, `layout`, `masked_score`,
    `softcap`, `window` and `window_right`. A scale factor of one value a
    query head (Swin-v2's logit scale) comes with `heads`, the static
    (query, KV) head counts: its operand is ``tensor<Hq x f32>``, which
    needs Q's heads known, and K's are known too so that a site whose heads
    are not grouped keeps the tensor-core kernels; other sites leave heads
    dynamic. Paged sites (`page_size` set;
    ``kiln.paged_attention``) are causal, may take a `window`, read e4m3
    caches of `fp8_kv_heads` KV heads with f32 scales per KV head when that
    is set, and packed queries ``[total_q, Hq, D]`` with q_offsets when
    `ragged`."""

    dtype: str
    head_dim: int
    value_dim: int
    scale: float
    causal: bool = False
    layout: str = "bhsd"
    mask: Optional[Operand] = None
    bias: Optional[Operand] = None
    scale_factor: Optional[Operand] = None
    masked_score: Optional[float] = None
    softcap: Optional[float] = None
    window: Optional[int] = None
    window_right: Optional[int] = None
    page_size: Optional[int] = None
    fp8_kv_heads: Optional[int] = None
    ragged: bool = False
    heads: Optional[Tuple[int, int]] = None

    @property
    def is_paged(self) -> bool:
        return self.page_size is not None

    @classmethod
    def from_report(cls, site: Dict[str, Any]) -> "SiteSpec":
        """The spec of a ``kilnc --report=json`` site: its attributes as
        the fusion found them, its operands' element types and ranks."""
        head_dim = int(site["head_dim"])

        def operand(role: str) -> Optional[Operand]:
            entry = site["operands"].get(role)
            if entry is None:
                return None
            return Operand(entry["dtype"], len(entry["shape"]))

        def optional(key: str, kind: Any) -> Any:
            value = site.get(key)
            return None if value is None else kind(value)

        # A factor per query head: its size, and K's heads, are the site's.
        heads = None
        if site.get("scale_factor") == "per_head":
            if site.get("q_heads") is None or site.get("kv_heads") is None:
                raise ValueError("a per-head scale factor needs the site's "
                                 "head counts")
            heads = (int(site["q_heads"]), int(site["kv_heads"]))

        return cls(
            dtype=site["dtype"], head_dim=head_dim,
            value_dim=int(site.get("v_head_dim") or head_dim),
            scale=float(site["scale"]), causal=bool(site.get("causal")),
            layout="bshd" if site.get("layout") == "bshd" else "bhsd",
            mask=operand("mask"), bias=operand("bias"),
            scale_factor=operand("scale_factor"),
            masked_score=optional("masked_score", float),
            softcap=optional("softcap", float), window=optional("window", int),
            window_right=optional("window_right", int), heads=heads)

    @classmethod
    def dense(cls, dtype: str, head_dim: int, value_dim: int, scale: float, *,
              causal: bool = False, mask: bool = False,
              window: Optional[int] = None,
              softcap: Optional[float] = None) -> "SiteSpec":
        """A site of transformers' attention: causal, a boolean SDPA-format
        mask, or neither; Kiln's sliding `window` (causal only) and
        `softcap`."""
        if mask and causal:
            raise KilnError(Status.INVALID_ARGUMENT,
                            "a transformers site is causal or masked, not both")
        if window is not None and (not causal or window <= 0):
            raise KilnError(Status.INVALID_ARGUMENT,
                            f"a sliding window needs causal attention and a "
                            f"positive size, got "
                            f"{'causal' if causal else 'mask' if mask else 'none'}"
                            f" and {window}")
        if softcap is not None and not softcap > 0:
            raise KilnError(Status.INVALID_ARGUMENT,
                            f"a soft-cap must be positive, got {softcap}")
        return cls(dtype, int(head_dim), int(value_dim), float(scale),
                   causal=causal, mask=Operand(*_SDPA_MASK_TYPE) if mask else None,
                   window=None if window is None else int(window),
                   softcap=None if softcap is None else float(softcap))

    @classmethod
    def paged(cls, dtype: str, head_dim: int, value_dim: int, scale: float,
              page_size: int, *, window: Optional[int] = None,
              fp8_kv_heads: Optional[int] = None,
              ragged: bool = False) -> "SiteSpec":
        """Causal paged attention over pages of `page_size` tokens, each
        query seeing its `window` most recent keys (itself included) when a
        window is given; over e4m3 caches of `fp8_kv_heads` KV heads with
        scales per KV head when that is given; on packed queries with
        q_offsets when `ragged`."""
        if window is not None and window <= 0:
            raise KilnError(Status.INVALID_ARGUMENT,
                            f"a sliding window must be positive, got {window}")
        if fp8_kv_heads is not None:
            if fp8_kv_heads <= 0:
                raise KilnError(Status.INVALID_ARGUMENT,
                                f"an FP8 cache needs a positive KV head count, "
                                f"got {fp8_kv_heads}")
            check_fp8_cache(dtype, head_dim, value_dim)
        return cls(dtype, int(head_dim), int(value_dim), float(scale),
                   causal=True, window=None if window is None else int(window),
                   page_size=int(page_size),
                   fp8_kv_heads=None if fp8_kv_heads is None else int(fp8_kv_heads),
                   ragged=bool(ragged))

    @property
    def label(self) -> str:
        """A readable name of the site for its cache directory (the digest
        of its source follows it there): dtype, head dim, then causal, mask
        or none with its window and soft-cap, or pagedN with its window,
        FP8 KV heads and packing."""
        if self.is_paged:
            kind = f"paged{self.page_size}"
            kind += "" if self.window is None else f"_window{self.window}"
            kind += "" if self.fp8_kv_heads is None else f"_fp8kv{self.fp8_kv_heads}"
            kind += "_ragged" if self.ragged else ""
        else:
            kind = "mask" if self.mask else "causal" if self.causal else "none"
            kind += "" if self.window is None else f"_window{self.window}"
            kind += "" if self.softcap is None else f"_softcap{self.softcap!r}"
            kind += "" if self.heads is None else f"_heads{self.heads[0]}x{self.heads[1]}"
        return f"{self.dtype}_d{self.head_dim}_{kind}"


def check_fp8_cache(dtype: str, head_dim: int, value_dim: int) -> None:
    """Raises unless Kiln's GPU kernels take e4m3 caches of these head dims
    under queries of `dtype`."""
    if dtype not in ("f16", "bf16"):
        raise KilnError(Status.UNSUPPORTED,
                        f"FP8 (e4m3) KV caches take f16 or bf16 queries, "
                        f"not {dtype}")
    if head_dim % 16 or value_dim % 16:
        raise KilnError(Status.UNSUPPORTED,
                        f"FP8 (e4m3) KV caches need head dims that are "
                        f"multiples of 16 on the GPU, got {head_dim}/"
                        f"{value_dim}")


def _tensor(sizes: str, element: str) -> str:
    return f"tensor<{sizes}{element}>"


def _with_heads(tensor: str, spec: SiteSpec, heads: Optional[int]) -> str:
    """A dense Q, K, V or result type with its head axis (1 in bhsd, 2 in
    bshd) `heads` where that is given."""
    if heads is None:
        return tensor
    sizes = tensor[len("tensor<"):-1].split("x")
    sizes[2 if spec.layout == "bshd" else 1] = str(heads)
    return "tensor<" + "x".join(sizes) + ">"


def package_source(spec: SiteSpec) -> str:
    """The MLIR source of a package whose one function, ``@attention``,
    runs `spec`'s site with every size and head count dynamic.

    The text is part of each cached package's name (its digest), so an
    attribute or operand a spec does not have is left out rather than
    written with its default: specs of the kinds that existed before it
    keep their text."""
    rows = "?x?x" if spec.is_paged and spec.ragged else "?x?x?x"
    q = _tensor(f"{rows}{spec.head_dim}x", spec.dtype)
    out = _tensor(f"{rows}{spec.value_dim}x", spec.dtype)
    if spec.is_paged:
        arguments, operands, types, attributes = _paged_parts(spec, q, out)
        op = "kiln.paged_attention"
    else:
        q, out = (_with_heads(t, spec, spec.heads and spec.heads[0])
                  for t in (q, out))
        arguments, operands, types, attributes = _dense_parts(spec, q, out)
        op = "kiln.attention"
    return (f"func.func @attention({', '.join(arguments)}) -> {out} {{\n"
            f"  %o = {op} {operands} {{{', '.join(attributes)}}} : "
            f"{', '.join(types)} -> {out}\n  return %o : {out}\n}}\n")


def fma_backward_reason(dtype: Any, head_dim: Any, value_dim: Any) -> Optional[str]:
    """Why Kiln's backward of a site with this dtype and these head dims
    runs on f32 FMAs rather than tensor cores (which take f16/bf16 with head
    dims that are multiples of 16 up to 128), or None."""
    if dtype not in ("f16", "bf16"):
        return f"the site is {dtype}"
    for dim in (head_dim, value_dim):
        if not isinstance(dim, int) or dim % 16 or dim > 128:
            return f"its head dim is {dim}"
    return None


def training_source(spec: SiteSpec) -> str:
    """The MLIR source of a package for training `spec`'s (dense) site:
    ``@attention`` runs the forward keeping its log-sum-exp (site
    ``attention_0``), ``@attention_grad`` its backward (site
    ``attention_grad_1``), every size and head count dynamic."""
    if spec.is_paged:
        raise KilnError(Status.UNSUPPORTED,
                        "a paged site has no backward (it reads a cache)")
    q = _tensor(f"?x?x?x{spec.head_dim}x", spec.dtype)
    out = _tensor(f"?x?x?x{spec.value_dim}x", spec.dtype)
    q, out = (_with_heads(t, spec, spec.heads and spec.heads[0]) for t in (q, out))
    lse = "tensor<?x?x?xf32>"
    arguments, operands, types, attributes = _dense_parts(spec, q, out)
    attribute_text = "{" + ", ".join(attributes) + "}"
    qkv = ", ".join(types)
    forward = (f"func.func @attention({', '.join(arguments)}) -> ({out}, "
               f"{lse}) {{\n"
               f"  %o, %lse = kiln.attention {operands} {attribute_text} : "
               f"{qkv} -> {out}, {lse}\n"
               f"  return %o, %lse : {out}, {lse}\n}}\n")
    # The backward's operands: the forward's, with out, lse and grad_out
    # after Q, K and V.
    grad_operands = operands.replace("%q, %k, %v", "%q, %k, %v, %o, %lse, %do", 1)
    backward = (f"func.func @attention_grad("
                f"{', '.join(arguments + [f'%o: {out}', f'%lse: {lse}', f'%do: {out}'])}"
                f") -> ({qkv}) {{\n"
                f"  %dq, %dk, %dv = kiln.attention_grad {grad_operands} "
                f"{attribute_text} : {qkv}, {out}, {lse}, {out} -> {qkv}\n"
                f"  return %dq, %dk, %dv : {qkv}\n}}\n")
    return forward + backward


def _dense_parts(spec: SiteSpec, q: str, v: str):
    # K and V with the KV heads where the heads are static (`q` and `v`
    # then have the query heads).
    kv_heads = spec.heads and spec.heads[1]
    k, v = _with_heads(q, spec, kv_heads), _with_heads(v, spec, kv_heads)
    arguments = [f"%q: {q}", f"%k: {k}", f"%v: {v}"]
    operands = "%q, %k, %v"
    for role, letter, operand in (("mask", "m", spec.mask),
                                  ("bias", "b", spec.bias),
                                  ("scale_factor", "f", spec.scale_factor)):
        if operand is None:
            continue
        # A run-time scale is one element, its sizes 1, not dynamic; or one
        # a query head, [Hq].
        size = "1x" if role == "scale_factor" else "?x"
        tensor = _tensor(size * operand.rank, operand.dtype)
        if role == "scale_factor" and spec.heads is not None:
            tensor = _tensor(f"{spec.heads[0]}x", operand.dtype)
        arguments.append(f"%{letter}: {tensor}")
        operands += f" {role}(%{letter} : {tensor})"
    attributes = []
    if spec.causal:
        attributes.append("causal")
    if spec.layout == "bshd":
        attributes.append("layout = #kiln.layout<bshd>")
    if spec.masked_score is not None:
        attributes.append(f"masked_score = {spec.masked_score!r} : f32")
    attributes.append(f"scale = {spec.scale!r} : f32")
    if spec.softcap is not None:
        attributes.append(f"softcap = {spec.softcap!r} : f32")
    if spec.window is not None:
        attributes.append(f"window = {spec.window} : i64")
    if spec.window_right is not None:
        attributes.append(f"window_right = {spec.window_right} : i64")
    return arguments, operands, [q, k, v], attributes


def _paged_parts(spec: SiteSpec, q: str, out: str):
    element, heads = spec.dtype, "?"
    if spec.fp8_kv_heads is not None:
        # The head count is fixed: the scales' size is the site's.
        element, heads = "f8E4M3FN", str(spec.fp8_kv_heads)
    kc = _tensor(f"?x{spec.page_size}x{heads}x{spec.head_dim}x", element)
    vc = _tensor(f"?x{spec.page_size}x{heads}x{spec.value_dim}x", element)
    table, lens = "tensor<?x?xi32>", "tensor<?xi32>"
    arguments = [f"%q: {q}", f"%kc: {kc}", f"%vc: {vc}", f"%pt: {table}",
                 f"%lens: {lens}"]
    operands, types = "%q, %kc, %vc, %pt, %lens", [q, kc, vc, table, lens]
    if spec.ragged:
        offsets = "tensor<?xi32>"
        arguments.append(f"%offs: {offsets}")
        operands += " q_offsets %offs"
        types.append(offsets)
    if spec.fp8_kv_heads is not None:
        scales = f"tensor<{spec.fp8_kv_heads}xf32>"
        arguments += [f"%ks: {scales}", f"%vs: {scales}"]
        operands += f" scales(%ks, %vs : {scales}, {scales})"
    attributes = ["causal"]
    if spec.window:
        attributes.append(f"window = {spec.window} : i64")
    attributes.append(f"scale = {spec.scale!r} : f32")
    return arguments, operands, types, attributes
