"""Tests of the `kiln` runtime bindings that need no GPU: opening packages,
error messages, argument checks through the C library, stride helpers."""

import json
import os
from pathlib import Path

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
