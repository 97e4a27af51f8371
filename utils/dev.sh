#!/usr/bin/env bash
#===- utils/dev.sh - Set up, build, and run Kiln ---------------------------===#
#
# One command per job, each doing all the set-up on a fresh Debian 12 machine
# (pinned packages, configure, build) and safe to re-run:
#
#   utils/dev.sh example   compile the bundled example, print the fusion
#                          report, verify the numerics on the CPU
#   utils/dev.sh test      build everything and run every test; the last line
#                          is "N passed, N failed"
#   utils/dev.sh build     set-up and build only
#   utils/dev.sh wheel     the wheel (build/dist/kiln-*.whl): the Python
#                          package, libkilnrt.so and the bundled kilnc, for
#                          `pip install` where only the CUDA driver and
#                          PyTorch are
#   utils/dev.sh test-fast the same tests but the few that compile whole
#                          site packages for both targets or fuzz the
#                          importer (minutes each on 2 cores): the loop
#                          of a change; CI runs them all
#
# Environment: BUILD_DIR (default build), JOBS (default 2).
#===----------------------------------------------------------------------===#
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
JOBS="${JOBS:-2}"
LLVM_BIN=/usr/lib/llvm-22/bin
# The interpreter with Debian's python3-onnx/numpy/pytest; the first python3 on
# PATH may be another one.
PYTHON=/usr/bin/python3

PACKAGES=(
  cmake ninja-build g++ pkg-config
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools clang-22
  libclang-rt-22-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  libgtest-dev nlohmann-json3-dev libfmt-dev
  zlib1g-dev libzstd-dev libedit-dev libxml2-dev
  python3 python3-onnx python3-numpy python3-pytest python3-venv
)

log() { printf '\033[1m== %s\033[0m\n' "$*" >&2; }

install_packages() {
  local missing=()
  for package in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null |
      grep -q 'install ok installed' || missing+=("$package")
  done
  if ((${#missing[@]} == 0)); then
    return
  fi
  log "installing ${missing[*]}"
  local sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

configure() {
  install_packages
  if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
    log "configuring $BUILD_DIR"
    cmake -G Ninja -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
      -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
      -DLLVM_EXTERNAL_LIT="$LLVM_BIN/lit" >/dev/null
  fi
}

build() {
  configure
  log "building (ninja -j$JOBS)"
  ninja -C "$BUILD_DIR" -j"$JOBS"
  # The importer's fuzzer (ASan, UBSan, libFuzzer), which the test suite runs.
  if command -v clang++-22 >/dev/null &&
    [[ -f /usr/lib/llvm-22/lib/clang/22/lib/linux/libclang_rt.fuzzer-x86_64.a ]]; then
    log "compiling the ONNX importer's fuzzer into $BUILD_DIR/fuzz"
    KILN_BUILD="$BUILD_DIR" "$ROOT/utils/fuzz-onnx.sh" build "$BUILD_DIR/fuzz"
  fi
}

run_example() {
  # Only the compiler: the example needs nothing else.
  configure
  log "building kilnc (ninja -j$JOBS)"
  ninja -C "$BUILD_DIR" -j"$JOBS" kilnc
  local model="$ROOT/examples/gpt2_2layer.onnx"
  local package="$BUILD_DIR/example-package"
  log "kilnc $model --report --verify -o $package"
  # The fusion report, then the CPU check (original and fused graph on the
  # same random inputs), then the package for the GPU.
  "$BUILD_DIR/bin/kilnc" "$model" --report --verify -o "$package"
  log "package written to $package:"
  ls -l "$package"
}

# The wheel: kilnc bundled with its loader and libraries (it runs where no
# LLVM is), libkilnrt.so (it needs glibc, the C++ runtime and, at run time,
# the CUDA driver) and the Python package.
build_wheel() {
  configure
  log "building kilnc and libkilnrt (ninja -j$JOBS)"
  ninja -C "$BUILD_DIR" -j"$JOBS" kilnc kilnrt
  local stage="$BUILD_DIR/wheel-stage"
  rm -rf "$stage" && mkdir -p "$stage"
  log "bundling kilnc"
  BUILD_DIR="$BUILD_DIR" JOBS="$JOBS" "$ROOT/utils/bundle-kilnc.sh" "$stage/bin" >/dev/null
  # The runtime as built: it needs glibc 2.34 and the C++ runtime of GCC 11
  # or later, which a machine running PyTorch has (linking the C++ runtime
  # in statically would need glibc 2.36: its random_device calls arc4random).
  cp -L "$BUILD_DIR/lib/libkilnrt.so" "$stage/libkilnrt.so"
  "$PYTHON" "$ROOT/utils/make-wheel.py" --python "$ROOT/python/kiln" \
    --runtime "$stage/libkilnrt.so" --bundle "$stage/bin" --out "$BUILD_DIR/dist"
}

# Tests that take 40 s or more each on 2 cores (their time, in the JUnit
# report of a full run): left out by test-fast.
SLOW_TESTS='package-warp-specialized|package-wgmma|package-warp-schedule|fuzz\.test|fusion-verify'

run_tests() {
  build
  # The wheel, which a test installs in a fresh virtual environment.
  build_wheel
  local results="$BUILD_DIR/test-results"
  local filter=()
  if [[ "${1:-}" == fast ]]; then
    filter=(--filter-out "$SLOW_TESTS")
    log "test-fast: leaving out ${SLOW_TESTS//|/, }"
  fi
  rm -rf "$results" && mkdir -p "$results"
  local status=0
  log "lit: regression and unit tests"
  "$LLVM_BIN/lit" -sv --xunit-xml-output "$results/lit.xml" "${filter[@]}" \
    "$BUILD_DIR/test" "$BUILD_DIR/test/unit" || status=1
  log "pytest: Python package"
  KILN_RUNTIME_LIB="$BUILD_DIR/lib/libkilnrt.so" \
    "$PYTHON" -m pytest -q -p no:cacheprovider --junitxml "$results/pytest.xml" \
    "$ROOT/test/python" || status=1
  "$PYTHON" "$ROOT/utils/count-results.py" "$results/lit.xml" \
    "$results/pytest.xml" || status=1
  return $status
}

case "${1:-}" in
example) run_example ;;
test) run_tests ;;
test-fast) run_tests fast ;;
build) build ;;
wheel) build_wheel ;;
*)
  echo "usage: utils/dev.sh example|test|test-fast|build|wheel" >&2
  exit 2
  ;;
esac
