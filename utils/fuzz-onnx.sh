#!/bin/sh
# Builds the libFuzzer target of the ONNX importer with clang++-22
# (-fsanitize=fuzzer,address,undefined) and runs it for a bounded time,
# seeded with the test graphs and, when present, ../shared/models.
#
#   utils/fuzz-onnx.sh [seconds=60] [build-dir=build-fuzz] [run-dir=build-dir]
#   utils/fuzz-onnx.sh build [build-dir=build-fuzz]   (compile and link only)
#
# The objects and the fuzzer are kept in build-dir and rebuilt only when a
# source changed (utils/dev.sh build compiles them into build/fuzz, so that
# the test suite only runs them); the corpus, fresh each run, and any
# reproducer go to run-dir.
#
# The run is seeded (FUZZ_SEED, default 1) so that a test run is repeatable;
# set FUZZ_SEED=0 for a random seed in longer campaigns. Every reproducer
# under test/Target/ONNX/Inputs/fuzz-regressions/ is part of the corpus, so
# it is re-run first.
# Needs a configured CMake build dir with the kiln dialect's generated headers
# (KILN_BUILD, default build/, or build-onnx/ when build/ has none). Exits
# non-zero when the fuzzer finds a crash, leak or sanitizer report; the
# reproducer is left in the build dir (crash-*).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
out=${2:-$here/build-fuzz}
run=${3:-$out}
gen=${KILN_BUILD:-$here/build}
[ -f "$gen/include/kiln/Dialect/Kiln/IR/KilnOps.h.inc" ] || gen=$here/build-onnx
if [ ! -f "$gen/include/kiln/Dialect/Kiln/IR/KilnOps.h.inc" ]; then
  echo "fuzz-onnx.sh: no generated kiln headers; build MLIRKilnOpsIncGen first" >&2
  exit 2
fi
llvm=/usr/lib/llvm-22
cxx=${CXX_FUZZ:-clang++-22}
mkdir -p "$out/obj" "$run"
# Absolute: the fuzzer runs from the run dir.
out=$(cd "$out" && pwd)
run=$(cd "$run" && pwd)
flags="-std=c++17 -O1 -g -fno-omit-frame-pointer -fno-rtti
  -fsanitize=address,undefined -fno-sanitize=vptr
  -I$here/include -I$here/lib/Target/Graph -I$gen/include -I$llvm/include
  -DONNX_NAMESPACE=onnx -DONNX_ML=1 -D_GLIBCXX_USE_CXX11_ABI=1"
objs=""
for src in lib/Target/ONNX/ImportONNX.cpp lib/Target/Graph/Lit.cpp \
           lib/Target/Graph/GraphBuilder.cpp \
           lib/Target/ONNX/ModelLoader.cpp lib/Dialect/Kiln/IR/KilnDialect.cpp \
           lib/Dialect/Kiln/IR/KilnOps.cpp utils/fuzz-onnx-import.cpp; do
  obj=$out/obj/$(echo "$src" | tr / _).o
  extra="-fsanitize=fuzzer-no-link"
  case $src in *ModelLoader.cpp) extra="$extra -fexceptions";; esac
  # Rebuild when the source or any header it may include changed.
  if [ ! -f "$obj" ] || [ "$here/$src" -nt "$obj" ] ||
     [ -n "$(find "$here/include" "$here/lib/Target/ONNX" "$gen/include" \
             \( -name '*.h' -o -name '*.inc' \) -newer "$obj" 2>/dev/null |
             head -n 1)" ]; then
    echo "compiling $src"
    # shellcheck disable=SC2086
    $cxx $flags $extra -c "$here/$src" -o "$obj"
  fi
  objs="$objs $obj"
done
fuzzer="$out/fuzz-onnx-import"
relink=0
[ -f "$fuzzer" ] || relink=1
for obj in $objs; do [ "$obj" -nt "$fuzzer" ] && relink=1; done
if [ "$relink" = 1 ]; then
  # shellcheck disable=SC2086
  $cxx -fsanitize=fuzzer,address,undefined $objs -o "$fuzzer" \
    -L$llvm/lib -Wl,-rpath,$llvm/lib -lMLIR -lLLVM -lonnx -lonnx_proto -lprotobuf
fi
[ "$seconds" = build ] && exit 0
rm -rf "$run/corpus"
mkdir -p "$run/corpus"
cp "$here"/test/Target/ONNX/Inputs/*.onnx "$run/corpus/" 2>/dev/null || true
cp "$here"/test/Target/ONNX/Inputs/fuzz-regressions/* "$run/corpus/" \
  2>/dev/null || true
for model in "$here"/../shared/models/*.onnx; do
  [ -f "$model" ] && cp "$model" "$run/corpus/"
done
cd "$run"
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$fuzzer" -seed="${FUZZ_SEED:-1}" -max_total_time="$seconds" \
  -max_len=2000000 \
  -rss_limit_mb=4096 -timeout=30 -print_final_stats=1 corpus
