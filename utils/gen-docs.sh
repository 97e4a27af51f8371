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

# generate GENERATOR TD OUTPUT [OPTION...]
generate() {
  local generator="$1" td="$root/include/kiln/$2" output="$3"
  shift 3
  "$tblgen" "$generator" -allow-hugo-specific-features "$@" \
    -I"$(dirname "$td")" -I"$mlir_include" -I"$root/include" "$td" \
    -o "$out/$output"
}

mkdir -p "$out"
generate -gen-dialect-doc Dialect/Kiln/IR/KilnDialect.td KilnDialect.md -dialect=kiln
generate -gen-op-doc Dialect/Kiln/IR/KilnOps.td KilnOps.md
generate -gen-pass-doc Dialect/Kiln/Transforms/Passes.td KilnPasses.md
generate -gen-pass-doc Conversion/Passes.td KilnConversionPasses.md
