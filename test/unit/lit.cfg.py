# -*- Python -*-
# lit configuration of Kiln's GoogleTest unit tests: every test case of every
# *Tests executable in this directory of the build tree is one lit test.

import os

import lit.formats

config.name = "KILN-UNIT"
config.test_format = lit.formats.GoogleTest(".", "Tests")
config.test_source_root = config.kiln_unit_obj_dir
config.test_exec_root = config.kiln_unit_obj_dir

# The unit tests must not depend on a GPU or a driver being present; keep the
# variables that select a driver for tests that opt into one.
for name in ["TMPDIR", "KILN_UNIT_TEST_REAL_DRIVER", "KILN_CUDA_DRIVER_LIB"]:
    if name in os.environ:
        config.environment[name] = os.environ[name]
