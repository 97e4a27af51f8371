#!/usr/bin/env bash
# Regenerates the dialect and pass references from ODS into docs/reference/
# (add_mlir_doc targets, `ninja mlir-doc`). Run after changing a .td file.
#
#   utils/gen-docs.sh [build-dir=build]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
ninja -C "$build" mlir-doc >/dev/null
mkdir -p "$root/docs/reference"
find "$build/docs" -name '*.md' -exec cp {} "$root/docs/reference/" \;
ls "$root/docs/reference"
