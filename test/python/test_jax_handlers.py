"""Kiln's XLA FFI handlers (python/kiln/jax/*.cc) type-check without JAX:
they are built only where JAX is installed, on first use, so a mistake in
them would otherwise show there first. The FFI API they use comes from a
stand-in of its subset (Inputs/xla_ffi_stub); Kiln's C API is the real
header."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HANDLERS = sorted((ROOT / "python" / "kiln" / "jax").glob("*.cc"))


@pytest.mark.parametrize("source", HANDLERS, ids=lambda p: p.name)
def test_handler_type_checks(source: Path) -> None:
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    result = subprocess.run(
        [compiler, "-std=c++17", "-fsyntax-only", "-Wall", "-Werror",
         "-I", str(Path(__file__).parent / "Inputs" / "xla_ffi_stub"),
         "-I", str(ROOT / "include"), "-I", str(source.parent), str(source)],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_both_handler_libraries_are_checked() -> None:
    assert [p.name for p in HANDLERS] == ["kiln_xla.cc", "kiln_xla_train.cc"]
