"""pytest setup of the Python runtime tests: import `kiln` from the source
tree and keep the tests off any real GPU."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

# The tests launch with fake device pointers to test errors; they must never
# reach a real driver. Set KILN_PYTEST_REAL_DRIVER=1 to run the torch tests on
# a GPU instead.
if not os.environ.get("KILN_PYTEST_REAL_DRIVER"):
    os.environ["KILN_CUDA_DRIVER_LIB"] = "/nonexistent/kiln-pytest/libcuda.so.1"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch):
    """kiln.transformers' site cache in a fresh $KILN_CACHE, its in-process
    tables cleared before and after; yields the versioned cache folder."""
    import kiln
    import kiln.transformers as kt

    monkeypatch.setenv("KILN_CACHE", str(tmp_path / "cache"))
    kt._sites.clear(); kt._packages_by_digest.clear()
    kt._training_sites.clear()
    yield tmp_path / "cache" / kiln.__version__
    kt._sites.clear(); kt._packages_by_digest.clear()
    kt._training_sites.clear()
