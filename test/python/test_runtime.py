"""Tests of the `kiln` runtime bindings that need no GPU: opening packages,
error messages, argument checks through the C library, stride helpers."""

import ctypes
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import DType, KilnError, Status
from kiln.runtime import library_contiguous_strides

from package_util import valid_manifest, write_package


@pytest.fixture
def package_dir(tmp_path: Path) -> Path:
    return write_package(tmp_path / "pkg", valid_manifest())


@pytest.fixture
def package(package_dir: Path):
    with kiln.Package(package_dir) as opened:
        yield opened


def fake_args(site: kiln.Site, batch, q_heads, kv_heads, q_len, kv_len):
    """Raw launch arguments with fake device pointers and contiguous strides."""
    args = site.new_args()
    base = 0x7F0000000000
    args.q, args.k, args.v, args.out = (base + i * 0x1000 for i in range(1, 5))
    dtype = {"f16": DType.F16, "bf16": DType.BF16, "f32": DType.F32}[site.dtype]
    args.q_dtype = args.k_dtype = args.v_dtype = args.out_dtype = dtype
    if site.mask != "none":
        args.mask = base + 0x5000
        args.mask_dtype = {"f32": DType.F32, "i1": DType.BOOL}[site.mask_dtype]
    args.batch, args.q_heads, args.kv_heads = batch, q_heads, kv_heads
    args.q_len, args.kv_len, args.head_dim = q_len, kv_len, site.head_dim
    site.set_contiguous_strides(args)
    return args


# --------------------------------------------------------------------------
# Opening packages.
# --------------------------------------------------------------------------


def test_open_valid_package(package: kiln.Package) -> None:
    assert package.producer == "kilnc 0.1.0"
    assert [s.name for s in package.sites] == [
        "attention_0",
        "attention_1",
        "attention_2",
    ]
    assert package.targets == ["sm_90a", "sm_80"]
    kernels = package.kernels
    assert [k.name for k in kernels] == [
        "kiln_attention_bf16_d64_causal",
        "kiln_attention_f16_d128_mask",
    ]
    assert kernels[0].head_dim == 64 and kernels[0].block == (128, 1, 1)
    assert kernels[1].num_args == 27


def test_site_attributes(package: kiln.Package) -> None:
    site = package.site("attention_0")
    assert site.kernel == "kiln_attention_bf16_d64_causal"
    assert site.dtype == "bf16"
    assert site.head_dim == 64
    assert (site.q_heads, site.kv_heads) == (8, 2)
    assert site.batch is None and site.q_len is None
    assert site.causal is True
    assert site.mask == "none" and site.mask_dtype is None
    assert site.layout == "bhsd"
    assert site.scale == pytest.approx(0.125)
    assert site.window is None and site.softcap is None
    masked = package["attention_1"]
    assert masked.mask == "additive" and masked.mask_dtype == "f32"
    assert masked.q_heads is None
    assert package.site("attention_2").layout == "bshd"
    assert "attention_1" in repr(package)


def test_select_target(package: kiln.Package) -> None:
    assert package.select_target(9, 0) == "sm_90a"
    assert package.select_target(8, 9) == "sm_80"
    with pytest.raises(KilnError) as error:
        package.select_target(7, 0)
    assert error.value.status == Status.UNSUPPORTED


def test_unknown_site_lists_sites(package: kiln.Package) -> None:
    with pytest.raises(KilnError) as error:
        package.site("attention_7")
    assert error.value.status == Status.NOT_FOUND
    assert 'no site "attention_7"' in str(error.value)
    assert "attention_0, attention_1, attention_2" in str(error.value)


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(KilnError) as error:
        kiln.Package(tmp_path / "nope")
    assert error.value.status == Status.NOT_FOUND
    assert "nope" in error.value.message


def test_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(KilnError) as error:
        kiln.Package(tmp_path)
    assert error.value.status == Status.NOT_FOUND
    assert "manifest.json" in error.value.message


def test_truncated_manifest(tmp_path: Path) -> None:
    text = json.dumps(valid_manifest())
    directory = write_package(tmp_path / "pkg", valid_manifest(), text[:200])
    with pytest.raises(KilnError) as error:
        kiln.Package(directory)
    assert error.value.status == Status.FORMAT_ERROR
    assert "manifest.json: not valid JSON" in error.value.message


def test_missing_ptx(package_dir: Path) -> None:
    (package_dir / "kernels.sm_90a.ptx").unlink()
    with pytest.raises(KilnError) as error:
        kiln.Package(package_dir)
    assert error.value.status == Status.NOT_FOUND
    assert "targets[0].ptx" in error.value.message
    assert "kernels.sm_90a.ptx" in error.value.message


@pytest.mark.parametrize(
    "mutate, status, fragment",
    [
        (
            lambda m: m.update(format_version=3),
            Status.UNSUPPORTED,
            "format version 3 is not supported",
        ),
        (
            lambda m: m["kernels"][0].update(head_dim="64"),
            Status.FORMAT_ERROR,
            "kernels[0].head_dim: expected an integer, got string",
        ),
        (
            lambda m: m["sites"][0].pop("dtype"),
            Status.FORMAT_ERROR,
            'sites[0]: missing key "dtype"',
        ),
        (
            lambda m: m["kernels"][1]["args"][2].update(name="value"),
            Status.FORMAT_ERROR,
            'unknown kernel argument "value"',
        ),
        (
            lambda m: m["kernels"][1]["args"][6].update(kind="f64"),
            Status.FORMAT_ERROR,
            "kernels[1].args[6].kind",
        ),
        # A persistent grid belongs to a target-specific attention kernel's
        # grid x only: the portable kernel has none, and y never.
        (
            lambda m: m["kernels"][0]["grid"].__setitem__(
                0, {"dim": "multiprocessors"}),
            Status.FORMAT_ERROR,
            'kernels[0].grid[0]: "multiprocessors" is grid x of a '
            "target-specific attention kernel only",
        ),
        (
            lambda m: m["kernels"][0]["grid"].__setitem__(
                1, {"dim": "multiprocessors"}),
            Status.FORMAT_ERROR,
            '"multiprocessors" is grid x of a target-specific attention '
            "kernel only",
        ),
    ],
)
def test_corrupt_manifest(tmp_path: Path, mutate, status, fragment) -> None:
    manifest = valid_manifest()
    mutate(manifest)
    directory = write_package(tmp_path / "pkg", manifest)
    with pytest.raises(KilnError) as error:
        kiln.Package(directory)
    assert error.value.status == status
    assert fragment in error.value.message
    assert str(directory) in error.value.message


def test_closed_package_raises(package_dir: Path) -> None:
    package = kiln.Package(package_dir)
    package.close()
    package.close()
    with pytest.raises(KilnError, match="is closed"):
        package.targets


# --------------------------------------------------------------------------
# Launch argument checks through the C library.
# --------------------------------------------------------------------------


def test_check_gives_launch_config(package: kiln.Package) -> None:
    site = package.site("attention_0")
    config = site.check(fake_args(site, 2, 8, 2, 1000, 1000))
    assert config.grid == (63, 8, 2)
    assert config.block == (128, 1, 1)
    assert config.dynamic_shared_bytes == 0


def test_check_rejects_wrong_dtype_and_heads(package: kiln.Package) -> None:
    site = package.site("attention_0")
    args = fake_args(site, 2, 8, 2, 16, 16)
    args.k_dtype = DType.F16
    with pytest.raises(KilnError, match="k has dtype f16 but the site takes bf16"):
        site.check(args)
    args = fake_args(site, 2, 16, 2, 16, 16)
    with pytest.raises(KilnError, match="q_heads is 16"):
        site.check(args)
    args = fake_args(site, 2, 8, 2, 16, 16)
    args.q = None
    with pytest.raises(KilnError, match="q is NULL") as error:
        site.check(args)
    assert error.value.status == Status.INVALID_ARGUMENT


def test_check_mask_mismatch(package: kiln.Package) -> None:
    masked = package.site("attention_1")
    args = fake_args(masked, 1, 4, 2, 16, 16)
    args.mask = None
    with pytest.raises(KilnError, match="needs a additive mask"):
        masked.check(args)


def test_launch_without_driver_is_a_clean_error(package: kiln.Package) -> None:
    site = package.site("attention_0")
    with pytest.raises(KilnError) as error:
        site.launch(fake_args(site, 1, 8, 2, 4, 4))
    assert error.value.status == Status.CUDA_ERROR
    assert "cannot load the CUDA driver" in error.value.message


def test_bshd_contiguous_strides(package: kiln.Package) -> None:
    site = package.site("attention_2")
    args = fake_args(site, 2, 8, 2, 10, 12)
    # q is [B, S, H, D] = [2, 10, 8, 64]; C order is {batch, head, seq, dim}.
    assert list(args.q_strides) == [10 * 8 * 64, 64, 8 * 64, 1]
    assert list(args.k_strides) == [12 * 2 * 64, 64, 2 * 64, 1]


# --------------------------------------------------------------------------
# Stride helpers, checked against numpy's strides.
# --------------------------------------------------------------------------


def element_strides(array: np.ndarray):
    return tuple(s // array.itemsize for s in array.strides)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_contiguous_strides_match_numpy_and_library(layout: str) -> None:
    b, h, s, d = 2, 3, 5, 8
    shape = (b, h, s, d) if layout == "bhsd" else (b, s, h, d)
    array = np.zeros(shape, dtype=np.float32)
    expected = kiln.qkv_strides(element_strides(array), layout)
    assert kiln.contiguous_strides(shape, layout) == expected
    assert library_contiguous_strides(layout, b, h, s, d) == expected
    assert kiln.qkv_dims(shape, layout) == (b, h, s, d)


def test_transposed_view_strides() -> None:
    # q stored [B, S, H, D] and viewed as [B, H, S, D]: a bhsd site reads it
    # through strides, without a copy.
    storage = np.zeros((2, 7, 4, 16), dtype=np.float16)
    view = storage.transpose(0, 2, 1, 3)
    strides = kiln.qkv_strides(element_strides(view), "bhsd")
    assert strides == (7 * 4 * 16, 16, 4 * 16, 1)
    assert kiln.qkv_dims(view.shape, "bhsd") == (2, 4, 7, 16)


@pytest.mark.parametrize(
    "shape",
    [(9,), (1, 9), (5, 9), (2, 1, 1, 9), (1, 3, 5, 9), (3, 1, 9), (2, 3, 5, 9)],
)
def test_broadcast_strides_match_numpy(shape) -> None:
    target = (2, 3, 5, 9)
    mask = np.zeros(shape, dtype=np.float32)
    ours = kiln.broadcast_strides(mask.shape, element_strides(mask), target)
    theirs = element_strides(np.broadcast_to(mask, target))
    assert ours == theirs
    # A size-1 axis is always broadcast (stride 0), whatever its stride.
    for axis, size in enumerate((1,) * (4 - len(shape)) + shape):
        if size == 1:
            assert ours[axis] == 0


def test_broadcast_strides_rejects_mismatch() -> None:
    with pytest.raises(KilnError, match=r"does not broadcast .*axis 3: 8 vs 9"):
        kiln.broadcast_strides((5, 8), (8, 1), (2, 3, 5, 9))
    with pytest.raises(KilnError, match="rank 5"):
        kiln.broadcast_strides((1, 1, 1, 1, 1), (1, 1, 1, 1, 1), (1, 1, 1, 1))


def test_qkv_dims_rejects_wrong_rank() -> None:
    with pytest.raises(KilnError, match="expected a 4-D tensor"):
        kiln.qkv_dims((2, 3, 4), "bhsd")


def test_find_library_honours_environment(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KILN_RUNTIME_LIB", str(tmp_path / "missing.so"))
    with pytest.raises(KilnError, match="KILN_RUNTIME_LIB"):
        kiln.find_library()


# --------------------------------------------------------------------------
# torch (skipped where torch or a GPU is missing).
# --------------------------------------------------------------------------


def test_torch_argument_errors(package: kiln.Package) -> None:
    torch = pytest.importorskip("torch")
    site = package.site("attention_0")
    q = torch.zeros(1, 8, 4, 64, dtype=torch.bfloat16)
    with pytest.raises(KilnError, match="CUDA tensor"):
        site.attention(q, q, q)


def test_launch_through_stand_in_driver(package_dir: Path) -> None:
    """A raw launch reaches cuLaunchKernel of the unit tests' stand-in
    libcuda (built with KilnLaunchTests); run in a subprocess, since the
    driver is loaded once per process."""
    import subprocess
    import sys

    library = Path(kiln.find_library()).resolve()
    fake = library.parents[1] / "test" / "unit" / "fake-driver"
    fake_driver = next(iter(sorted(fake.glob("libkiln_fake_cuda.so*"))), None)
    if fake_driver is None:
        pytest.skip("stand-in driver not built (ninja KilnLaunchTests)")
    script = f"""
import sys
sys.path[:0] = {[str(Path(__file__).parent), str(Path(kiln.__file__).parents[1])]!r}
import kiln
from test_runtime import fake_args
package = kiln.Package({str(package_dir)!r})
site = package.site("attention_0")
package.prepare()
site.launch(fake_args(site, 2, 8, 2, 33, 40), 0x1234)
print("launched")
"""
    env = dict(os.environ, KILN_CUDA_DRIVER_LIB=str(fake_driver))
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "launched" in result.stdout


def test_split_kv_arguments(package: kiln.Package) -> None:
    """A site whose kernel does not split keys: forced splits are refused,
    and the workspace query says none is needed without touching a GPU."""
    site = package.site("attention_0")
    assert site.split_kv is False
    args = fake_args(site, 1, 8, 2, 1, 4096)
    args.num_splits = 2
    with pytest.raises(KilnError, match="does not split keys"):
        site.check(args)
    args.num_splits = 500
    with pytest.raises(KilnError, match="num_splits must be 0"):
        site.check(args)
    args.num_splits = 0
    args.workspace_bytes = -1
    with pytest.raises(KilnError, match="workspace_bytes must not be negative"):
        site.check(args)
    assert site.workspace_size(4, 1, 4096) == 0
    with pytest.raises(KilnError, match="batch must be positive"):
        site.workspace_size(0, 1, 4096)


# --------------------------------------------------------------------------
# The ctypes structs against the C header.
# --------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def test_ctypes_structs_match_the_header(tmp_path: Path) -> None:
    """Every ctypes mirror of a C struct has the C struct's size and each
    field's offset (a C compiler built from the header says), and the
    library's API version and dtype numbers are the header's."""
    import shutil
    import subprocess

    from kiln import runtime

    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler")
    mirrors = {
        "kiln_site_info": runtime._SiteInfo,
        "kiln_kernel_info": runtime._KernelInfo,
        "kiln_attention_args": runtime.AttentionArgs,
        "kiln_attention_grad_args": runtime.AttentionGradArgs,
        "kiln_paged_attention_args": runtime.PagedAttentionArgs,
        "kiln_paged_append_args": runtime.PagedAppendArgs,
        "kiln_launch_config": runtime._LaunchConfig,
    }
    lines = []
    for struct, mirror in mirrors.items():
        lines.append(f'printf("{struct} sizeof %zu\\n", sizeof({struct}));')
        for name, _ in mirror._fields_:
            lines.append(
                f'printf("{struct} {name} %zu\\n", offsetof({struct}, {name}));'
            )
    lines.append('printf("api %d\\n", KILN_RUNTIME_API_VERSION);')
    for dtype in DType:
        lines.append(f'printf("dtype {dtype.name} %d\\n", KILN_DTYPE_{dtype.name});')
    source = tmp_path / "layout.c"
    source.write_text(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"kiln-c/Runtime.h\"\n"
        "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n"
    )
    binary = tmp_path / "layout"
    subprocess.run(
        [compiler, "-std=c99", "-I", str(ROOT / "include"), str(source), "-o",
         str(binary)],
        check=True,
    )
    output = subprocess.run([str(binary)], check=True, capture_output=True,
                            text=True).stdout
    c_values = {}
    for line in output.splitlines():
        *key, value = line.split()
        c_values[tuple(key)] = int(value)
    for struct, mirror in mirrors.items():
        assert ctypes.sizeof(mirror) == c_values[(struct, "sizeof")], struct
        for name, _ in mirror._fields_:
            assert getattr(mirror, name).offset == c_values[(struct, name)], (
                f"{struct}.{name}"
            )
    assert runtime._API_VERSION == c_values[("api",)]
    assert kiln.runtime.load_library().kiln_runtime_api_version() == c_values[("api",)]
    for dtype in DType:
        assert int(dtype) == c_values[("dtype", dtype.name)]


def test_fp8_dtype() -> None:
    lib = kiln.runtime.load_library()
    assert DType.F8E4M3.manifest_name == "f8e4m3"
    assert lib.kiln_dtype_name(int(DType.F8E4M3)) == b"f8e4m3"
    assert kiln.runtime.dtype_size(DType.F8E4M3) == 1


# --------------------------------------------------------------------------
# FP8 paged sites (a hand-written manifest: placeholder PTX).
# --------------------------------------------------------------------------


def append_arg_list():
    """(name, kind) of include/kiln/Runtime/PagedAppendArgs.def."""
    import re

    text = (ROOT / "include/kiln/Runtime/PagedAppendArgs.def").read_text()
    return re.findall(r"^KILN_APPEND_ARG\((\w+), (\w+)\)", text, re.M)


def paged_kernel(name: str, dtype: str, cache_dtype: str, append: str):
    args = []
    for pointer in ("q", "key_cache", "value_cache", "out", "page_table",
                    "kv_lens"):
        entry = {"name": pointer, "kind": "pointer"}
        if pointer in ("q", "out"):
            entry["dtype"] = dtype
        elif pointer.endswith("cache"):
            entry["dtype"] = cache_dtype
        args.append(entry)
    for dim in ("batch", "q_heads", "kv_heads", "q_len", "max_pages",
                "num_pages", "page_size"):
        args.append({"name": dim, "kind": "i32"})
    args.append({"name": "scale", "kind": "f32"})
    for tensor, axes in (("q", "batch head seq"), ("out", "batch head seq"),
                         ("key_cache", "page slot head"),
                         ("value_cache", "page slot head")):
        for axis in axes.split():
            args.append({"name": f"{tensor}_stride_{axis}", "kind": "i64"})
    args.append({"name": "page_table_stride_batch", "kind": "i64"})
    if cache_dtype == "f8e4m3":
        args += [{"name": "k_scale", "kind": "pointer", "dtype": "f32"},
                 {"name": "v_scale", "kind": "pointer", "dtype": "f32"}]
    return {
        "name": name, "kind": "paged_attention", "dtype": dtype,
        "cache_dtype": cache_dtype, "head_dim": 128, "v_head_dim": 128,
        "causal": True, "window": None, "softcap": None, "mask": "none",
        "mask_dtype": None, "bias": False, "bias_dtype": None,
        "block": [128, 1, 1], "rows_per_block": 64,
        "grid": [{"dim": ["q_len", "q_heads"], "per": "kv_heads",
                  "ceil_div": 64},
                 {"dim": "kv_heads", "ceil_div": 1},
                 {"dim": "batch", "ceil_div": 1}],
        "paged_append": append, "args": args,
    }


def append_kernel(name: str, dtype: str, cache_dtype: str):
    args = []
    for arg, kind in append_arg_list():
        entry = {"name": arg, "kind": kind}
        if arg in ("new_keys", "new_values"):
            entry["dtype"] = dtype
        elif arg in ("key_cache", "value_cache"):
            entry["dtype"] = cache_dtype
        elif arg.endswith("_scale"):
            entry["dtype"] = "f32"
        args.append(entry)
    return {"name": name, "kind": "paged_append", "dtype": dtype,
            "cache_dtype": cache_dtype, "head_dim": 128, "v_head_dim": 128,
            "block": [128, 1, 1], "grid": [{"dim": "total_new"}, 1, 1],
            "args": args}


def paged_site(name: str, kernel_name: str, cache_dtype: str, kv_scales):
    return {
        "name": name, "kernel": kernel_name, "kind": "paged_attention",
        "function": "main", "location": "", "layout": "bhsd",
        "dtype": "bf16", "cache_dtype": cache_dtype, "kv_scales": kv_scales,
        "scale": 0.125, "causal": True, "window": None, "softcap": None,
        "page_size": 16, "batch": None, "q_heads": 32, "kv_heads": 8,
        "q_len": None, "kv_len": None, "head_dim": 128, "v_head_dim": 128,
        "mask": "none", "mask_dtype": None, "bias": False, "bias_dtype": None,
    }


def fp8_manifest():
    """attention_0: bf16 queries over e4m3 caches with scales per KV head;
    attention_1: the same over bf16 caches."""
    manifest = valid_manifest()
    manifest["kernels"] = [
        paged_kernel("kiln_paged_fp8", "bf16", "f8e4m3", "kiln_append_fp8"),
        paged_kernel("kiln_paged_bf16", "bf16", "bf16", "kiln_append_bf16"),
        append_kernel("kiln_append_fp8", "bf16", "f8e4m3"),
        append_kernel("kiln_append_bf16", "bf16", "bf16"),
    ]
    manifest["sites"] = [
        paged_site("attention_0", "kiln_paged_fp8", "f8e4m3", "per_kv_head"),
        paged_site("attention_1", "kiln_paged_bf16", "bf16", None),
    ]
    return manifest


@pytest.fixture
def fp8_package(tmp_path: Path):
    with kiln.Package(write_package(tmp_path / "fp8", fp8_manifest())) as opened:
        yield opened


def fp8_args(site: kiln.Site, **change):
    args = kiln.PagedAttentionArgs()
    for name in ("q", "key_cache", "value_cache", "out", "page_table", "kv_lens"):
        setattr(args, name, 0x10000)
    args.q_dtype = args.out_dtype = DType.BF16
    fp8 = site.cache_dtype == "f8e4m3"
    args.key_cache_dtype = args.value_cache_dtype = (
        DType.F8E4M3 if fp8 else DType.BF16)
    args.batch, args.q_heads, args.kv_heads, args.q_len = 2, 32, 8, 1
    args.head_dim, args.page_size, args.max_pages, args.num_pages = 128, 16, 4, 8
    args.q_strides[:] = args.out_strides[:] = [32 * 128, 128, 128, 1]
    args.key_cache_strides[:] = [16 * 8 * 128, 8 * 128, 128, 1]
    args.value_cache_strides[:] = [16 * 8 * 128, 8 * 128, 128, 1]
    args.page_table_strides[:] = [4, 1]
    if fp8:
        args.k_scale, args.v_scale, args.num_kv_scales = 0x20000, 0x20100, 8
    for name, value in change.items():
        if isinstance(value, list):
            getattr(args, name)[:] = value
        else:
            setattr(args, name, value)
    return args


def pre_fp8_package(package: kiln.Package) -> Path:
    """A copy of `package`'s manifest without the FP8 keys, as written
    before FP8 caches (the float site and its kernels alone)."""
    manifest = fp8_manifest()
    manifest["sites"] = manifest["sites"][1:]
    manifest["kernels"] = [manifest["kernels"][1], manifest["kernels"][3]]
    manifest["sites"][0].update(name="attention_0")
    for entry in manifest["sites"] + manifest["kernels"]:
        entry.pop("cache_dtype")
        entry.pop("kv_scales", None)
    append = manifest["kernels"][1]
    append["args"] = [a for a in append["args"] if not a["name"].endswith("_scale")]
    return write_package(Path(package.path).parent / "old", manifest)


def test_fp8_site_info(fp8_package: kiln.Package) -> None:
    fp8, floats = fp8_package.site("attention_0"), fp8_package.site("attention_1")
    assert (fp8.dtype, fp8.cache_dtype, fp8.kv_scales) == (
        "bf16", "f8e4m3", "per_kv_head")
    assert (floats.cache_dtype, floats.kv_scales) == ("bf16", None)
    # Sites of packages written before FP8 caches: their dtype, no scales.
    with kiln.Package(pre_fp8_package(fp8_package)) as old:
        site = old.site("attention_0")
        assert (site.cache_dtype, site.kv_scales) == ("bf16", None)


def test_fp8_launch_checks(fp8_package: kiln.Package) -> None:
    fp8, floats = fp8_package.site("attention_0"), fp8_package.site("attention_1")
    assert fp8.check_paged(fp8_args(fp8)).grid == (1, 8, 2)
    assert floats.check_paged(fp8_args(floats)).grid == (1, 8, 2)
    with pytest.raises(KilnError, match="k_scale is NULL") as error:
        fp8.check_paged(fp8_args(fp8, k_scale=None))
    assert error.value.status == Status.INVALID_ARGUMENT
    with pytest.raises(KilnError, match=r"num_kv_scales is 1 but the site's "
                       r"scales are per KV head \(kv_heads = 8\)"):
        fp8.check_paged(fp8_args(fp8, num_kv_scales=1))
    with pytest.raises(KilnError, match="key_cache has dtype bf16 but the "
                       "site takes f8e4m3"):
        fp8.check_paged(fp8_args(fp8, key_cache_dtype=DType.BF16))
    with pytest.raises(KilnError, match="odd slot stride"):
        fp8.check_paged(fp8_args(fp8, key_cache_strides=[16 * 1025, 1025, 128, 1]))
    with pytest.raises(KilnError, match="are for f8e4m3 caches"):
        floats.check_paged(fp8_args(floats, v_scale=0x20100))


def test_fp8_python_scale_checks(fp8_package: kiln.Package) -> None:
    """Missing or unwanted scales are refused before any tensor is looked
    at (so before torch is needed)."""
    fp8, floats = fp8_package.site("attention_0"), fp8_package.site("attention_1")
    with pytest.raises(KilnError, match="has f8e4m3 caches: pass k_scale and "
                       r"v_scale, .*\[kv_heads\]"):
        fp8.paged_attention(None, None, None, None, None, k_scale=object())
    with pytest.raises(KilnError, match="pass k_scale and v_scale"):
        fp8.append_paged_kv(None, None, None, None, None, None, None)
    with pytest.raises(KilnError, match="k_scale and v_scale are for f8e4m3 "
                       "caches; its caches hold bf16"):
        floats.paged_attention(None, None, None, None, None, v_scale=object())
    with pytest.raises(KilnError, match="are for f8e4m3 caches"):
        floats.append_paged_kv(None, None, None, None, None, None, None,
                               k_scale=object())


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda m: m["sites"][0].update(kv_scales=None),
         'sites[0].kv_scales: site "attention_0": f8e4m3 caches need scales'),
        (lambda m: m["sites"][0].update(kv_scales="per_row"),
         'sites[0].kv_scales: site "attention_0": expected "per_tensor", '
         '"per_kv_head" or null, got "per_row"'),
        (lambda m: m["sites"][1].update(kv_scales="per_tensor"),
         'sites[1].kv_scales: site "attention_1": scales are for f8e4m3 caches'),
        (lambda m: m["kernels"][0]["args"].pop(),
         'kernels[0].args: missing the "v_scale" pointer argument'),
    ],
)
def test_fp8_corrupt_manifest(tmp_path: Path, mutate, fragment) -> None:
    manifest = fp8_manifest()
    mutate(manifest)
    with pytest.raises(KilnError) as error:
        kiln.Package(write_package(tmp_path / "pkg", manifest))
    assert error.value.status == Status.FORMAT_ERROR
    assert fragment in error.value.message


def test_fp8_torch_dtype() -> None:
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8_e4m3fn")
    assert kiln.runtime._torch_dtype_map()[torch.float8_e4m3fn] == DType.F8E4M3


# A site's run-time scale: "scale_factor" true (one f32) or "per_head" (one
# a query head), read back through the C library and checked on launch.

def _scale_factor_package(tmp_path: Path, factor: Any) -> Path:
    manifest = valid_manifest()
    manifest["kernels"][1]["args"].append({"name": "scale_factor", "kind": "pointer"})
    manifest["sites"][1]["scale_factor"] = factor
    return write_package(tmp_path / "pkg", manifest)


@pytest.mark.parametrize("factor, per_head", [(True, False), ("per_head", True)])
def test_site_scale_factor_kind(tmp_path: Path, factor, per_head) -> None:
    with kiln.Package(_scale_factor_package(tmp_path, factor)) as package:
        site = package["attention_1"]
        assert site.scale_factor is True
        assert site.scale_factor_per_head is per_head
        assert package["attention_0"].scale_factor is False
        assert package["attention_0"].scale_factor_per_head is False


class _FakeFactor:
    """What check_scale_factor reads of a torch tensor."""

    def __init__(self, shape, dtype="float32", device="cuda:0", contiguous=True):
        self.shape, self.dtype, self.device = tuple(shape), dtype, device
        self._contiguous = contiguous

    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def is_contiguous(self) -> bool:
        return self._contiguous


def _check(factor: _FakeFactor, per_head: bool, q_heads: int = 4) -> None:
    from kiln.runtime import check_scale_factor
    check_scale_factor(factor, per_head=per_head, q_heads=q_heads,
                       device="cuda:0", float32="float32")


@pytest.mark.parametrize("factor, per_head", [
    (_FakeFactor([1]), False),
    (_FakeFactor([]), False),
    (_FakeFactor([1, 1, 1, 1]), False),
    (_FakeFactor([4]), True),
    (_FakeFactor([4, 1, 1]), True),
])
def test_scale_factor_accepted(factor, per_head) -> None:
    _check(factor, per_head)


@pytest.mark.parametrize("factor, per_head, message", [
    (_FakeFactor([4]), False,
     "scale_factor must be a one-element float32 tensor on cuda:0, got float32 of shape [4] on cuda:0"),
    (_FakeFactor([1], dtype="bfloat16"), False,
     "scale_factor must be a one-element float32 tensor on cuda:0, got bfloat16"),
    (_FakeFactor([1]), True,
     "scale_factor must be a contiguous float32 tensor of 4 elements on cuda:0 "
     "(one a query head, shape [4]), got float32 of shape [1] on cuda:0"),
    (_FakeFactor([8]), True, "of 4 elements"),
    (_FakeFactor([4], device="cuda:1"), True, "on cuda:1"),
    (_FakeFactor([4], contiguous=False), True, "(not contiguous)"),
])
def test_scale_factor_refused(factor, per_head, message) -> None:
    with pytest.raises(KilnError) as error:
        _check(factor, per_head)
    assert error.value.status == Status.INVALID_ARGUMENT
    assert message in str(error.value)
