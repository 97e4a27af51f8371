#!/usr/bin/env bash
#===- utils/bundle-kilnc.sh - kilnc for a machine without LLVM --------------===#
#
#   utils/bundle-kilnc.sh OUT.tar.xz
#   utils/bundle-kilnc.sh OUT-DIRECTORY   (the bundle's files, unpacked: the wheel's)
#
# Links kilnc against LLVM's and MLIR's static libraries (only what it uses),
# strips it, and packs it with the few shared libraries it still needs, the
# C/C++ runtime and the dynamic loader, and a `kilnc` script that runs it
# through that loader: unpacked anywhere (`tar -xJf OUT.tar.xz`, giving
# kilnc-bundle/kilnc), it runs on any x86-64 Linux, whatever its own libraries.
# Point KILN_KILNC at kilnc-bundle/kilnc for kiln.compile, kiln.transformers
# and the torch.compile backend. Needs the build (utils/dev.sh build).
#===----------------------------------------------------------------------===#
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
LLVM_LIB=/usr/lib/llvm-22/lib
OUT="$(realpath -m "${1:?usage: utils/bundle-kilnc.sh OUT.tar.xz|OUT-DIRECTORY}")"
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
BUNDLE="$STAGE/kilnc-bundle"
mkdir -p "$BUNDLE/lib"

cd "$BUILD_DIR"
ninja -j"${JOBS:-2}" kilnc >/dev/null
# The archives of the project, in the order CMake links them, then every
# LLVM and MLIR archive in one group (the linker keeps what is referenced).
mapfile -t archives < <(ninja -t commands bin/kilnc | tail -1 | tr ' ' '\n' |
  grep -E '^lib/libKiln.*\.a$')
mapfile -t llvm < <(ls "$LLVM_LIB"/libMLIR*.a "$LLVM_LIB"/libLLVM*.a |
  grep -Ev 'MlirOptMain|Tblgen|TableGen|/libmlir_')
c++ -O3 -Wl,--gc-sections tools/kilnc/CMakeFiles/kilnc.dir/kilnc.cpp.o \
  -o "$BUNDLE/kilnc.bin" "${archives[@]}" \
  -Wl,--start-group "${llvm[@]}" -Wl,--end-group \
  /usr/lib/x86_64-linux-gnu/libonnx.so.1 /usr/lib/x86_64-linux-gnu/libonnx_proto.so.1 \
  /usr/lib/x86_64-linux-gnu/libprotobuf.so -lz -lzstd -lpthread -ldl
strip "$BUNDLE/kilnc.bin"
ldd "$BUNDLE/kilnc.bin" | awk '$3 ~ /^\// {print $3}' |
  xargs -I{} cp -L {} "$BUNDLE/lib/"
cp -L /lib64/ld-linux-x86-64.so.2 "$BUNDLE/lib/"
cat >"$BUNDLE/kilnc" <<'SCRIPT'
#!/bin/sh
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/lib/ld-linux-x86-64.so.2" --library-path "$here/lib" "$here/kilnc.bin" "$@"
SCRIPT
chmod +x "$BUNDLE/kilnc"
"$BUNDLE/kilnc" --version >/dev/null
if [[ "$OUT" == *.tar.xz ]]; then
  tar -cJf "$OUT" -C "$STAGE" kilnc-bundle
else
  rm -rf "$OUT" && mkdir -p "$(dirname "$OUT")" && cp -a "$BUNDLE" "$OUT"
fi
echo "$OUT: $(du -sh "$OUT" | cut -f1)"
