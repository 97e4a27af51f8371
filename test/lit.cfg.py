# -*- Python -*-
# lit configuration of Kiln's regression tests.

import os
import shutil

import lit.formats
import lit.util
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "KILN"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "Inputs", "unit", "gpu",
                   "python", "CMakeLists.txt"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kiln_obj_root, "test")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%kiln_src_root", config.kiln_src_root))
config.substitutions.append(("%kiln_obj_root", config.kiln_obj_root))
config.substitutions.append(("%kiln_tools_dir", config.kiln_tools_dir))
config.substitutions.append(("%kiln_lib_dir", config.kiln_lib_dir))
# Site packages compiled once by the build (test/CMakeLists.txt).
for substitution, package in (("%attention_sites", "attention_sites"),
                              ("%head_dims_sites", "head_dims"),
                              ("%ping_pong_sites", "ping_pong")):
    config.substitutions.append(
        (substitution, os.path.join(config.kiln_obj_root, "test", "packages", package)))
config.substitutions.append(("%python", config.python_executable))
# The reference docs are generated with this LLVM's mlir-tblgen.
config.substitutions.append(
    ("%mlir_tblgen", os.path.join(config.llvm_tools_dir, "mlir-tblgen")))
config.environment["FILECHECK_OPTS"] = "--enable-var-scope"

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

tool_dirs = [config.kiln_tools_dir, config.llvm_tools_dir]
tools = ["kiln-opt", "kilnc", "kiln-translate", "kiln-cpu-runner", "kiln-ptx-parts", "not", "count", "split-file"]
llvm_config.add_tool_substitutions(tools, tool_dirs)

# ptxas assembles every PTX the tests emit; without it those tests are
# unsupported rather than silently passing.
if config.ptxas and os.path.exists(config.ptxas):
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", config.ptxas))

# The real model graphs beside the repository (../shared/models), when present.
shared_models = os.path.join(os.path.dirname(config.kiln_src_root), "shared", "models")
if os.path.isdir(shared_models):
    config.available_features.add("shared-models")
    config.substitutions.append(("%shared_models", shared_models))

# The wheel, where utils/dev.sh wheel built it (utils/dev.sh test does).
import glob

wheels = sorted(glob.glob(os.path.join(config.kiln_obj_root, "dist", "kiln-*.whl")))
if wheels:
    config.available_features.add("wheel")
    config.substitutions.append(("%kiln_wheel", wheels[-1]))

# The importer's fuzz test needs clang with libFuzzer and the sanitizers.
if shutil.which("clang++-22") and os.path.exists(
    "/usr/lib/llvm-22/lib/clang/22/lib/linux/libclang_rt.fuzzer-x86_64.a"
):
    config.available_features.add("fuzzer")

# Tests that run kernels need a GPU and the CUDA driver.
if os.path.exists("/dev/nvidia0") or os.environ.get("KILN_TEST_CUDA"):
    config.available_features.add("cuda")
