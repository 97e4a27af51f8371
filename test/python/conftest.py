"""pytest setup of the Python runtime tests: import `kiln` from the source
tree and keep the tests off any real GPU."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

# The tests launch with fake device pointers to test errors; they must never
# reach a real driver. Set KILN_PYTEST_REAL_DRIVER=1 to run the torch tests on
# a GPU instead.
if not os.environ.get("KILN_PYTEST_REAL_DRIVER"):
    os.environ["KILN_CUDA_DRIVER_LIB"] = "/nonexistent/kiln-pytest/libcuda.so.1"
