#!/usr/bin/env bash
# Regenerates the dialect and pass references from ODS into docs/reference/,
# with the mlir-tblgen commands of the add_mlir_doc targets (`ninja mlir-doc`).
# Run after changing a .td file: test/docs/reference.test compares
# docs/reference with a fresh generation and fails until then.
#
#   utils/gen-docs.sh [output-dir=docs/reference]
#
# Environment: MLIR_TBLGEN (default /usr/lib/llvm-22/bin/mlir-tblgen).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/docs/reference}"
tblgen="${MLIR_TBLGEN:-/usr/lib/llvm-22/bin/mlir-tblgen}"
mlir_include="$(cd "$(dirname "$tblgen")/../include" && pwd)"

# convert-kiln-to-gpu's options: KernelOptions.def through the C
# preprocessor, as include/kiln/Conversion/CMakeLists.txt makes them.
generated="$(mktemp -d)"
trap 'rm -rf "$generated"' EXIT
mkdir -p "$generated/kiln/Conversion"
"${CXX:-c++}" -E -P -x c++ -I"$root/include" \
  "$root/include/kiln/Conversion/KernelOptions.td.in" \
  -o "$generated/kiln/Conversion/KernelOptions.td"

# generate GENERATOR TD OUTPUT [OPTION...]
generate() {
  local generator="$1" td="$root/include/kiln/$2" output="$3"
  shift 3
  "$tblgen" "$generator" -allow-hugo-specific-features "$@" \
    -I"$(dirname "$td")" -I"$mlir_include" -I"$root/include" \
    -I"$generated" "$td" -o "$out/$output"
}

mkdir -p "$out"
generate -gen-dialect-doc Dialect/Kiln/IR/KilnDialect.td KilnDialect.md -dialect=kiln
generate -gen-op-doc Dialect/Kiln/IR/KilnOps.td KilnOps.md
generate -gen-pass-doc Dialect/Kiln/Transforms/Passes.td KilnPasses.md
generate -gen-pass-doc Conversion/Passes.td KilnConversionPasses.md
