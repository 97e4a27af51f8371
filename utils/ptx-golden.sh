#!/usr/bin/env bash
#===- utils/ptx-golden.sh - Prove a change leaves every kernel as it was ---===#
#
# Compiles every site package the repository has (test/gpu, bench and
# examples sources) for both targets and compares the digest of each PTX
# file and manifest with the stored one (utils/ptx-golden.sha256):
#
#   utils/ptx-golden.sh            compare; exit 1 and list what changed
#   utils/ptx-golden.sh --update   store the digests of the current tree
#
# A refactor commit shows it changed nothing; a kernel commit shows what it
# changed (and updates the digests). Packages are compiled JOBS at a time
# (default 2) with BUILD_DIR's kilnc (default build). Sources are named
# relative to the repository root, so manifests do not depend on where the
# checkout lives.
#===----------------------------------------------------------------------===#
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
JOBS="${JOBS:-2}"
GOLDEN="$ROOT/utils/ptx-golden.sha256"
KILNC="$BUILD_DIR/bin/kilnc"
TARGETS="sm_90a,sm_80"

update=0
case "${1:-}" in
  --update) update=1 ;;
  "") ;;
  *) echo "usage: utils/ptx-golden.sh [--update]" >&2; exit 2 ;;
esac
[[ -x "$KILNC" ]] || { echo "no kilnc at $KILNC (utils/dev.sh build)" >&2; exit 2; }

cd "$ROOT"
sources=(test/gpu/*.mlir bench/*.mlir examples/*.mlir examples/*.onnx)
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

compile() {
  local source="$1" name
  name="$(echo "$source" | tr '/.' '__')"
  if ! "$KILNC" "$source" -o "$scratch/$name" --target="$TARGETS" \
      >"$scratch/$name.log" 2>&1; then
    echo "kilnc failed on $source:" >&2
    cat "$scratch/$name.log" >&2
    return 1
  fi
}
export -f compile
export KILNC TARGETS scratch

start=$SECONDS
printf '%s\n' "${sources[@]}" |
  xargs -P "$JOBS" -I{} bash -c 'compile "$@"' _ {}
(cd "$scratch" && sha256sum ./*/kernels.*.ptx ./*/manifest.json) |
  sed 's| \./| |' | sort -k2 >"$scratch/digests"
echo "compiled ${#sources[@]} packages for $TARGETS in $((SECONDS - start)) s"

if ((update)); then
  cp "$scratch/digests" "$GOLDEN"
  echo "stored $(wc -l <"$GOLDEN") digests in ${GOLDEN#$ROOT/}"
  exit 0
fi
[[ -f "$GOLDEN" ]] || { echo "no ${GOLDEN#$ROOT/}: run with --update" >&2; exit 2; }
if diff <(awk '{print $2, $1}' "$GOLDEN") <(awk '{print $2, $1}' "$scratch/digests") \
    >"$scratch/diff"; then
  echo "PTX and manifests identical to ${GOLDEN#$ROOT/} ($(wc -l <"$GOLDEN") files)"
  exit 0
fi
echo "changed (- stored, + now):"
grep '^[<>]' "$scratch/diff" | sed 's/^</-/; s/^>/+/'
exit 1
