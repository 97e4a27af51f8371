"""GPU tests of the PyTorch layer: Hugging Face models on Kiln's kernels
against `eager`, the paged cache, and CUDA-graph decoding. Skipped without
CUDA, torch 2.4 or later, or transformers, and unless KILN_PYTEST_REAL_DRIVER=1
(the CPU suite skips them); on a
GPU machine without kilnc, point KILN_CACHE at sites compiled beforehand
(`kiln.transformers.precompile`) and KILN_TEST_LLAMA_PACKAGE at a package of
`examples/llama_sites.mlir`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

if not os.environ.get("KILN_PYTEST_REAL_DRIVER"):
    pytest.skip("GPU tests: set KILN_PYTEST_REAL_DRIVER=1 (conftest.py keeps "
                "the suite off real drivers otherwise)", allow_module_level=True)
torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or not hasattr(torch.library, "register_fake"):
    pytest.skip("needs a CUDA device and torch 2.4 or later",
                allow_module_level=True)
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test" / "gpu"))

import check_transformers as ct  # noqa: E402
import kiln.transformers as kt  # noqa: E402

kt.register()


@pytest.mark.parametrize("family", sorted(ct.configs()))
def test_logits_match_eager(family) -> None:
    config, cls, side = ct.configs()[family]
    ct.check_logits(family, config, cls, side)


def test_f32_greedy_tokens_match_eager() -> None:
    ct.check_greedy()


def test_paged_cache_matches_eager() -> None:
    ct.check_paged_cache()


def test_no_fallback() -> None:
    assert not kt.fallbacks


def test_cuda_graph_decode_matches_eager_decode() -> None:
    package = os.environ.get("KILN_TEST_LLAMA_PACKAGE")
    command = [sys.executable, str(ROOT / "examples" / "generate.py"),
               "--steps", "16"]
    if package:
        command += ["--package", package]
    result = subprocess.run(command, capture_output=True, text=True)
    assert "CUDA graph tokens == eager tokens: True" in result.stdout, (
        result.stdout + result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
