#!/usr/bin/env bash
#===- test/gpu/run-torch-compile-checks.sh - The backend's checks on a GPU -===#
#
# On a machine with a GPU, the CUDA driver and PyTorch, and nothing of Kiln
# built: the wheel that `utils/dev.sh wheel` wrote (build/dist, carried
# there) is installed into a fresh virtual environment that sees the
# machine's torch, and everything below runs on what it installed.
#
#   test/gpu/run-torch-compile-checks.sh OUT [check_torch_compile options]
#
# 1. the installed kilnc and runtime, from outside the checkout: a site
#    compiled by kiln.compile and launched against float64;
# 2. the run-time scale sites (test/gpu/scale_factor_sites.mlir) through
#    check_attention.py (float64 reference, a factor of either sign, a CUDA
#    graph replayed after the factor changed) and compute-sanitizer memcheck;
# 3. check_torch_compile.py on both zoos (--zoo all): every site rewritten,
#    outputs against float64, and with --time the forward times of eager,
#    Inductor and Kiln.
# Logs and JSON rows go to OUT; the last line says how many steps failed.
#===----------------------------------------------------------------------===#
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="$(realpath -m "${1:?usage: test/gpu/run-torch-compile-checks.sh OUT [options]}")"
shift
mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
WHEEL="$(ls "$ROOT"/build/dist/kiln-*.whl 2>/dev/null | tail -1)"
if [[ -z "$WHEEL" ]]; then
  echo "no wheel in $ROOT/build/dist (utils/dev.sh wheel, then carry build/dist)" >&2
  exit 2
fi

VENV="$(mktemp -d)/venv"
"$PYTHON" -m venv --system-site-packages "$VENV" || exit 2
# Where $PYTHON is itself a virtual environment's interpreter (torch
# installed there, not in the system's Python), --system-site-packages sees
# the base interpreter's packages only: the new environment is pointed at
# $PYTHON's own site-packages too.
"$PYTHON" -c 'import site; print("\n".join(site.getsitepackages()))' \
  >"$("$VENV/bin/python" -c 'import site; print(site.getsitepackages()[0])')/outer-environment.pth" || exit 2
"$VENV/bin/python" -m pip install --no-index --no-deps --quiet "$WHEEL" || exit 2
PACKAGE="$("$VENV/bin/python" -c 'import kiln, os; print(os.path.dirname(kiln.__file__))')"
# The checks import the checkout's Python sources (the wheel's are the same
# files); the compiler and the runtime are the installed ones.
export KILN_KILNC="$PACKAGE/bin/kilnc"
export KILN_RUNTIME_LIB="$PACKAGE/libkilnrt.so"
export KILN_CACHE="$OUT/cache"

failed=0
step() {
  local name="$1"
  shift
  echo "== $name" | tee -a "$OUT/summary.txt"
  if "$@" >"$OUT/$name.log" 2>&1; then
    echo "   ok" | tee -a "$OUT/summary.txt"
  else
    echo "   FAILED (exit $?; $OUT/$name.log)" | tee -a "$OUT/summary.txt"
    failed=$((failed + 1))
  fi
  tail -n 3 "$OUT/$name.log" | sed 's/^/   /' | tee -a "$OUT/summary.txt"
}

step installed bash -c "cd '$OUT' && env -u KILN_KILNC -u KILN_RUNTIME_LIB '$VENV/bin/python' - <<'PY'
import kiln, sys, torch
path = kiln.find_kilnc()
assert path.startswith(sys.prefix), path
package = kiln.compile('$ROOT/test/gpu/scale_factor_sites.mlir', 'installed-package')
site = package.site('attention_0')
q = torch.randn(2, 8, 300, 64, device='cuda', dtype=torch.bfloat16)
k = torch.randn(2, 2, 300, 64, device='cuda', dtype=torch.bfloat16)
v = torch.randn_like(k)
factor = torch.tensor([0.8], device='cuda')
out = site.attention(q, k, v, scale_factor=factor).double()
scale = site.scale * 0.8
kk, vv = k.double().repeat_interleave(4, 1), v.double().repeat_interleave(4, 1)
s = scale * q.double() @ kk.transpose(-1, -2)
s = s.masked_fill(torch.ones(300, 300, dtype=torch.bool, device='cuda').triu(1), float('-inf'))
want = s.softmax(-1) @ vv
error = float((out - want).norm() / want.norm())
print('kilnc', path, 'relative error', error)
sys.exit(0 if error < 2e-2 else 1)
PY"
step scale-factor-package "$KILN_KILNC" "$ROOT/test/gpu/scale_factor_sites.mlir" -o "$OUT/scale-factor-package"
step check-scale-factor "$PYTHON" "$ROOT/test/gpu/check_attention.py" "$OUT/scale-factor-package" --out "$OUT/check-scale-factor.json"
if command -v compute-sanitizer >/dev/null; then
  step memcheck-scale-factor compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$PYTHON" "$ROOT/test/gpu/check_attention.py" "$OUT/scale-factor-package" --sanitize
fi
step check-torch-compile "$PYTHON" "$ROOT/test/gpu/check_torch_compile.py" --zoo all \
  --out "$OUT/check-torch-compile.json" "$@"

echo "$failed steps failed" | tee -a "$OUT/summary.txt"
exit $((failed > 0))
