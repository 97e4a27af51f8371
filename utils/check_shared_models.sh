#!/bin/sh
# Imports every ONNX model of a directory (default: ../shared/models next to
# the repository) with kiln-translate and fails on any error. Prints, per
# model, the number of operations and how many kiln.attention and opaque
# onnx.* operations the import produced.
#
#   utils/check_shared_models.sh [path/to/kiln-translate] [models-dir]
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
tool=${1:-$here/build/bin/kiln-translate}
models=${2:-$here/../shared/models}
status=0
count=0
for model in "$models"/*.onnx; do
  [ -e "$model" ] || { echo "no .onnx files in $models"; exit 1; }
  count=$((count + 1))
  out=$(mktemp)
  if "$tool" --import-onnx "$model" -o "$out" 2>"$out.err"; then
    ops=$(grep -c ' = ' "$out")
    attn=$(grep -c 'kiln.attention' "$out")
    opaque=$(grep -c '"onnx\.' "$out")
    warnings=$(grep -c 'warning:' "$out.err")
    echo "ok    $(basename "$model"): $ops ops, $attn kiln.attention, $opaque opaque, $warnings warnings"
  else
    echo "FAIL  $(basename "$model"):"
    sed 's/^/      /' "$out.err"
    status=1
  fi
  rm -f "$out" "$out.err"
done
echo "$count models checked"
exit $status
