"""Writes Kiln packages (manifest.json and placeholder PTX) for the tests."""

import json
from pathlib import Path
from typing import Any, Dict, List


def attention_args(dtype: str, mask_dtype: str = "") -> List[Dict[str, Any]]:
    args: List[Dict[str, Any]] = [
        {"name": name, "kind": "pointer", "dtype": dtype}
        for name in ("q", "k", "v", "out")
    ]
    if mask_dtype:
        args.append({"name": "mask", "kind": "pointer", "dtype": mask_dtype})
    for name in ("batch", "q_heads", "kv_heads", "q_len", "kv_len"):
        args.append({"name": name, "kind": "i32"})
    args.append({"name": "scale", "kind": "f32"})
    for tensor in ("q", "k", "v", "out"):
        for axis in ("batch", "head", "seq"):
            args.append({"name": f"{tensor}_stride_{axis}", "kind": "i64"})
    if mask_dtype:
        for axis in ("batch", "head", "q", "k"):
            args.append({"name": f"mask_stride_{axis}", "kind": "i64"})
    return args


def kernel(
    name: str,
    dtype: str,
    head_dim: int,
    causal: bool,
    mask: str = "none",
    mask_dtype: str = "",
) -> Dict[str, Any]:
    return {
        "name": name,
        "kind": "attention",
        "dtype": dtype,
        "head_dim": head_dim,
        "causal": causal,
        "window": None,
        "softcap": None,
        "mask": mask,
        "mask_dtype": mask_dtype or None,
        "bias": False,
        "bias_dtype": None,
        "block": [128, 1, 1],
        "rows_per_block": 16,
        "grid": [
            {"dim": "q_len", "ceil_div": 16},
            {"dim": "q_heads", "ceil_div": 1},
            {"dim": "batch", "ceil_div": 1},
        ],
        "static_shared_bytes": 41472,
        "dynamic_shared_bytes": 0,
        "args": attention_args(dtype, mask_dtype),
    }


def site(
    name: str,
    kernel_name: str,
    dtype: str,
    head_dim: int,
    causal: bool,
    q_heads: Any,
    kv_heads: Any,
    mask: str = "none",
    mask_dtype: str = "",
    layout: str = "bhsd",
) -> Dict[str, Any]:
    return {
        "name": name,
        "kernel": kernel_name,
        "function": "main",
        "location": "model.mlir:3:10",
        "layout": layout,
        "dtype": dtype,
        "scale": 0.125,
        "causal": causal,
        "window": None,
        "softcap": None,
        "batch": None,
        "q_heads": q_heads,
        "kv_heads": kv_heads,
        "q_len": None,
        "kv_len": None,
        "head_dim": head_dim,
        "mask": mask,
        "mask_shape": None,
        "mask_dtype": mask_dtype or None,
        "bias": False,
        "bias_shape": None,
    }


def valid_manifest() -> Dict[str, Any]:
    return {
        "format": "kiln-package",
        "format_version": 1,
        "producer": "kilnc 0.1.0",
        "source": "model.mlir",
        "targets": [
            {"chip": "sm_90a", "ptx": "kernels.sm_90a.ptx"},
            {"chip": "sm_80", "ptx": "kernels.sm_80.ptx"},
        ],
        "kernels": [
            kernel("kiln_attention_bf16_d64_causal", "bf16", 64, True),
            kernel(
                "kiln_attention_f16_d128_mask", "f16", 128, False, "additive", "f32"
            ),
        ],
        "sites": [
            site(
                "attention_0", "kiln_attention_bf16_d64_causal", "bf16", 64, True, 8, 2
            ),
            site(
                "attention_1",
                "kiln_attention_f16_d128_mask",
                "f16",
                128,
                False,
                None,
                None,
                "additive",
                "f32",
            ),
            site(
                "attention_2",
                "kiln_attention_bf16_d64_causal",
                "bf16",
                64,
                True,
                8,
                2,
                layout="bshd",
            ),
        ],
    }


def write_package(directory: Path, manifest: Any, text: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifest.json").write_text(text or json.dumps(manifest, indent=2))
    if isinstance(manifest, dict):
        entries = "".join(
            f".entry {k['name']}\n"
            for k in manifest.get("kernels", [])
            if isinstance(k, dict) and isinstance(k.get("name"), str)
        )
        for target in manifest.get("targets", []):
            if isinstance(target, dict) and isinstance(target.get("ptx"), str):
                (directory / target["ptx"]).write_text("// placeholder PTX\n" + entries)
    return directory
