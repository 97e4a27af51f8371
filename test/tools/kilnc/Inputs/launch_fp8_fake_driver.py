"""Launches the FP8 sites of fp8_paged_sites.mlir against the unit tests'
stand-in libcuda (package-fp8.test; KILN_CUDA_DRIVER_LIB names it) and
prints what the kernels' scale parameters received: the launch's k_scale
and v_scale for the attention and append kernels of FP8 caches, NULL for
the append kernel of float caches."""

import ctypes
import json
import os
import sys
from pathlib import Path

import kiln
from fp8_args import append, paged


class FakeLaunch(ctypes.Structure):
    """FakeLaunch of test/unit/FakeCudaDriver.h."""

    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_bytes", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("function", ctypes.c_void_p), ("has_extra", ctypes.c_bool),
                ("programmatic", ctypes.c_bool),
                ("cluster_z", ctypes.c_uint), ("cluster_policy", ctypes.c_int),
                ("params", ctypes.c_uint64 * 64)]


class FakeState(ctypes.Structure):
    """The head of FakeCudaState (a std::string is 32 bytes)."""

    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int),
                ("current_context", ctypes.c_size_t),
                ("stream_context", ctypes.c_size_t),
                ("init_calls", ctypes.c_int), ("module_loads", ctypes.c_int),
                ("module_unloads", ctypes.c_int),
                ("loaded_ptx", ctypes.c_uint64 * 4),
                ("max_dynamic_shared", ctypes.c_int),
                ("expected_params", ctypes.c_int), ("launches", ctypes.c_int),
                ("blocks_per_sm", ctypes.c_int), ("sm_count", ctypes.c_int),
                ("active_clusters", ctypes.c_int),
                ("cluster_queries", ctypes.c_int),
                ("last_launch", FakeLaunch)]


driver = ctypes.CDLL(os.environ["KILN_CUDA_DRIVER_LIB"])
driver.fakeCudaState.restype = ctypes.POINTER(FakeState)
state = driver.fakeCudaState().contents
# The stand-in's defaults: the mirror above reads the right fields.
assert (state.major, state.blocks_per_sm, state.sm_count) == (9, 2, 132), \
    "FakeCudaState's layout changed: update FakeState"

package = kiln.Package(sys.argv[1])
manifest = json.loads((Path(sys.argv[1]) / "manifest.json").read_text())
kernels = {k["name"]: k for k in manifest["kernels"]}
package.prepare()


def launch(what, kernel, call):
    """Runs `call`, which launches `kernel`, and prints the parameters
    its scales and key cache received."""
    names = [a["name"] for a in kernel["args"]]
    # The stand-in reads this many parameters of the launch.
    state.expected_params = len(names)
    call()
    params = state.last_launch.params
    values = {name: params[names.index(name)] for name in
              ("key_cache", "k_scale", "v_scale") if name in names}
    print(what, f"{len(names)} params:",
          " ".join(f"{name}={value:#x}" for name, value in values.items()))


for name in ("attention_0", "attention_1", "attention_2"):
    site = package.site(name)
    kernel = kernels[site.kernel]
    launch(f"{name} attention", kernel,
           lambda: site.launch_paged(paged(name)))
    launch(f"{name} append", kernels[kernel["paged_append"]],
           lambda: site.launch_append(append(name)))
