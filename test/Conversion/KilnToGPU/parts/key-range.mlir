// Parts/KeyRange.cpp: AttentionKernelBuilder::keyRange, the keys [begin,
// end) a block visits (causal and window_right bound the end, window the
// begin, a split its share of whole tiles), and tileNeedsMask, which tiles
// of that range need the mask rather than the plain scale. The ranges are
// checked on the scalar kernel (4 rows a block with rows-per-warp=1) and on
// the tensor-core kernel, which splits keys and revisits skipped ones;
// tileNeedsMask on the tensor-core kernel and on the TF32 kernel (f32 with
// allow-tf32; the 3xTF32 kernel masks every tile).
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu="tensor-cores=0 rows-per-warp=1" | FileCheck %s --check-prefix=SCALAR
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu | FileCheck %s --check-prefix=MMA
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu="allow-tf32=1" | FileCheck %s --check-prefix=TF32

// Causal: the key loop runs from 0 to the last row's diagonal (bottom-right
// aligned: end query + kv_len - q_len, plus a right bound of 0), clamped to
// [0, kv_len].
// SCALAR-LABEL: gpu.func @kiln_attention_f32_d32_causal(
// SCALAR: %[[QLEN:[0-9]+]] = arith.index_cast %arg7 : i32 to index
// SCALAR-NEXT: %[[KVLEN:[0-9]+]] = arith.index_cast %arg8 : i32 to index
// SCALAR: %[[FIRSTQ:[0-9]+]] = arith.muli %{{[0-9]+}}, %c4 : index
// SCALAR-NEXT: %[[ROWS:.*]] = arith.constant 4 : index
// SCALAR-NEXT: %[[ENDQ:[0-9]+]] = arith.addi %[[FIRSTQ]], %[[ROWS]] : index
// SCALAR-NEXT: arith.subi %[[KVLEN]], %[[QLEN]] : index
// SCALAR-NEXT: %[[OFFSET:[0-9]+]] = arith.subi %[[KVLEN]], %[[QLEN]] : index
// SCALAR-NEXT: %[[BEGIN:.*]] = arith.constant 0 : index
// SCALAR-NEXT: %[[RIGHT:.*]] = arith.constant 0 : index
// SCALAR-NEXT: %[[DIAGONAL:[0-9]+]] = arith.addi %[[ENDQ]], %[[OFFSET]] : index
// SCALAR-NEXT: %[[LAST:[0-9]+]] = arith.addi %[[DIAGONAL]], %[[RIGHT]] : index
// SCALAR-NEXT: %[[ZERO:.*]] = arith.constant 0 : index
// SCALAR-NEXT: %[[POSITIVE:[0-9]+]] = arith.maxsi %[[LAST]], %[[ZERO]] : index
// SCALAR-NEXT: %[[END:[0-9]+]] = arith.minsi %[[POSITIVE]], %[[KVLEN]] : index
// SCALAR: scf.for %{{.*}} = %[[BEGIN]] to %[[END]] step
// The TF32 kernel (32-key tiles) classifies its tiles too: inside the key
// loop the 16 scores a thread holds are scaled, or masked where the tile
// needs it (tileNeedsMask), in one scf.if yielding them. The 3xTF32 kernel
// masks every tile (no such scf.if).
// TF32-LABEL: gpu.func @kiln_attention_tf32_f32_d32_causal(
// TF32: scf.for %{{.*}} iter_args(
// TF32: %{{[0-9]+}}:16 = scf.if %{{[0-9]+}} -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32) {
// TF32: arith.select
// TF32: } else {
// TF32-NOT: arith.select
// TF32: arith.mulf
// TF32-NOT: arith.select
// TF32: scf.yield
// TF32: gpu.return
// MMA-LABEL: gpu.func @kiln_attention_3xtf32_f32_d32_causal(
// MMA-NOT: -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32) {
// MMA: gpu.return
func.func @causal(%q: tensor<1x4x?x32xf32>, %k: tensor<1x4x?x32xf32>, %v: tensor<1x4x?x32xf32>) -> tensor<1x4x?x32xf32> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32> -> tensor<1x4x?x32xf32>
  return %o : tensor<1x4x?x32xf32>
}

// -----

// A window of 128 keys with 16 to the right: the end goes 16 keys past the
// diagonal, and the loop starts at the first row's oldest key, first query
// + kv_len - q_len + 1 - 128, clamped at 0.
// SCALAR-LABEL: gpu.func @kiln_attention_f32_d32_w128_r16(
// SCALAR: %[[FIRSTQ:[0-9]+]] = arith.muli %block_id_x, %c4 : index
// SCALAR: arith.subi
// SCALAR-NEXT: %[[OFFSET:[0-9]+]] = arith.subi
// SCALAR-NEXT: %{{.*}} = arith.constant 0 : index
// SCALAR-NEXT: %[[RIGHT:.*]] = arith.constant 16 : index
// SCALAR-NEXT: %[[DIAGONAL:[0-9]+]] = arith.addi %{{[0-9]+}}, %[[OFFSET]] : index
// SCALAR-NEXT: arith.addi %[[DIAGONAL]], %[[RIGHT]] : index
// SCALAR-NEXT: arith.constant 0 : index
// SCALAR-NEXT: arith.maxsi
// SCALAR-NEXT: %[[END:[0-9]+]] = arith.minsi
// SCALAR-NEXT: %[[WINDOW:.*]] = arith.constant 128 : index
// SCALAR-NEXT: %[[ONE:.*]] = arith.constant 1 : index
// SCALAR-NEXT: %[[FIRSTDIAGONAL:[0-9]+]] = arith.addi %[[FIRSTQ]], %[[OFFSET]] : index
// SCALAR-NEXT: %[[NEXT:[0-9]+]] = arith.addi %[[FIRSTDIAGONAL]], %[[ONE]] : index
// SCALAR-NEXT: %[[OLDEST:[0-9]+]] = arith.subi %[[NEXT]], %[[WINDOW]] : index
// SCALAR-NEXT: %[[ZERO:.*]] = arith.constant 0 : index
// SCALAR-NEXT: %[[BEGIN:[0-9]+]] = arith.maxsi %[[OLDEST]], %[[ZERO]] : index
// SCALAR: scf.for %{{.*}} = %[[BEGIN]] to %[[END]] step
func.func @window_right(%q: tensor<1x4x?x32xf32>, %k: tensor<1x4x?x32xf32>, %v: tensor<1x4x?x32xf32>) -> tensor<1x4x?x32xf32> {
  %o = kiln.attention %q, %k, %v {window = 128 : i64, window_right = 16 : i64, scale = 0.125 : f32} : tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32> -> tensor<1x4x?x32xf32>
  return %o : tensor<1x4x?x32xf32>
}

// -----

// With masked_score a row that sees no key averages every key, hidden ones
// included: the scalar kernel, which does not revisit skipped keys, skips
// none (the loop runs over [0, kv_len)).
// SCALAR-LABEL: gpu.func @kiln_attention_f32_d32_causal_fill0xc61c4000(
// SCALAR: %[[KVLEN:[0-9]+]] = arith.index_cast %arg8 : i32 to index
// SCALAR: %[[BEGIN:.*]] = arith.constant 0 : index
// SCALAR-NOT: arith.minsi %{{[0-9]+}}, %[[KVLEN]] : index
// SCALAR: scf.for %{{.*}} = %[[BEGIN]] to %[[KVLEN]] step
func.func @masked_score(%q: tensor<1x4x?x32xf32>, %k: tensor<1x4x?x32xf32>, %v: tensor<1x4x?x32xf32>) -> tensor<1x4x?x32xf32> {
  %o = kiln.attention %q, %k, %v {causal, masked_score = -1.0e4 : f32, scale = 0.125 : f32} : tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32> -> tensor<1x4x?x32xf32>
  return %o : tensor<1x4x?x32xf32>
}

// -----

// Tensor-core kernel, causal with a window of 128: the band [begin, end) is
// cut into whole 64-key tiles, ceil(tiles / splits) a split, and split s
// takes [begin + s·share, min(end, begin + (s + 1)·share)) (tile counts in
// 32 bits). A tile needs the mask where it runs past kv_len, past the first
// row's diagonal, or starts at or before the last row's oldest key
// (last row's diagonal - 128); the others take the scale-only branch.
// MMA-LABEL: gpu.func @kiln_attention_mma_bf16_d64_causal_w128(
// MMA-SAME: %[[SPLITSARG:arg22]]: i32
// MMA: %[[KVLEN:[0-9]+]] = arith.index_cast %arg8 : i32 to index
// MMA-NEXT: %[[SPLITS:[0-9]+]] = arith.index_cast %[[SPLITSARG]] : i32 to index
// MMA: %[[SPLIT:[0-9]+]] = arith.divui %{{[0-9]+}}, %{{[0-9]+}} : i32
// MMA-NEXT: %[[SPLITINDEX:[0-9]+]] = arith.index_cast %[[SPLIT]] : i32 to index
// MMA: %[[END:[0-9]+]] = arith.minsi %{{[0-9]+}}, %[[KVLEN]] : index
// MMA-NEXT: %[[WINDOW:.*]] = arith.constant 128 : index
// MMA: %[[BEGIN:[0-9]+]] = arith.maxsi %{{[0-9]+}}, %{{.*}} : index
// MMA-NEXT: %[[ZERO:.*]] = arith.constant 0 : index
// MMA-NEXT: %[[SPAN:[0-9]+]] = arith.subi %[[END]], %[[BEGIN]] : index
// MMA-NEXT: %[[KEYS:[0-9]+]] = arith.maxsi %[[SPAN]], %[[ZERO]] : index
// MMA-NEXT: %[[TILE:.*]] = arith.constant 64 : index
// MMA-NEXT: %[[TILE32:[0-9]+]] = arith.index_cast %[[TILE]] : index to i32
// MMA-NEXT: %[[KEYS32:[0-9]+]] = arith.index_cast %[[KEYS]] : index to i32
// MMA-NEXT: %[[TILES:[0-9]+]] = arith.ceildivui %[[KEYS32]], %[[TILE32]] : i32
// MMA-NEXT: %[[TILESX:[0-9]+]] = arith.index_cast %[[TILES]] : i32 to index
// MMA-NEXT: %[[TILEKEYS:.*]] = arith.constant 64 : index
// MMA-NEXT: %[[SPLITS32:[0-9]+]] = arith.index_cast %[[SPLITS]] : index to i32
// MMA-NEXT: %[[TILES32:[0-9]+]] = arith.index_cast %[[TILESX]] : index to i32
// MMA-NEXT: %[[SHARETILES:[0-9]+]] = arith.ceildivui %[[TILES32]], %[[SPLITS32]] : i32
// MMA-NEXT: %[[SHARETILESX:[0-9]+]] = arith.index_cast %[[SHARETILES]] : i32 to index
// MMA-NEXT: %[[SHARE:[0-9]+]] = arith.muli %[[SHARETILESX]], %[[TILEKEYS]] : index
// MMA-NEXT: %[[SKIPPED:[0-9]+]] = arith.muli %[[SPLITINDEX]], %[[SHARE]] : index
// MMA-NEXT: %[[SPLITBEGIN:[0-9]+]] = arith.addi %[[BEGIN]], %[[SKIPPED]] : index
// MMA-NEXT: %[[SHAREEND:[0-9]+]] = arith.addi %[[SPLITBEGIN]], %[[SHARE]] : index
// MMA-NEXT: %[[SPLITEND:[0-9]+]] = arith.minsi %[[END]], %[[SHAREEND]] : index
// MMA-NEXT: %[[FIRST:[0-9]+]] = arith.minsi %[[SPLITBEGIN]], %[[SPLITEND]] : index
// MMA: scf.for %[[START:arg[0-9]+]] = %[[FIRST]] to %[[SPLITEND]] step
// MMA: %[[TILEEND:[0-9]+]] = arith.addi %[[START]], %c64{{(_[0-9]+)?}} : index
// MMA-NEXT: %[[PASTKEYS:[0-9]+]] = arith.cmpi sgt, %[[TILEEND]], %[[KVLEN]] : index
// MMA-NEXT: %[[NORIGHT:.*]] = arith.constant 0 : index
// MMA-NEXT: %[[FIRSTBAND:[0-9]+]] = arith.addi %{{[0-9]+}}, %[[NORIGHT]] : index
// MMA-NEXT: %[[ONE:.*]] = arith.constant 1 : index
// MMA-NEXT: %[[LASTKEY:[0-9]+]] = arith.subi %[[TILEEND]], %[[ONE]] : index
// MMA-NEXT: %[[CROSSES:[0-9]+]] = arith.cmpi sgt, %[[LASTKEY]], %[[FIRSTBAND]] : index
// MMA-NEXT: %[[EITHER:[0-9]+]] = arith.ori %[[PASTKEYS]], %[[CROSSES]] : i1
// MMA-NEXT: arith.constant 1 : index
// MMA-NEXT: arith.subi
// MMA-NEXT: %[[LASTDIAGONAL:[0-9]+]] = arith.addi
// MMA-NEXT: %[[WINDOW2:.*]] = arith.constant 128 : index
// MMA-NEXT: %[[OLDEST:[0-9]+]] = arith.subi %[[LASTDIAGONAL]], %[[WINDOW2]] : index
// MMA-NEXT: %[[BEFORE:[0-9]+]] = arith.cmpi sle, %[[START]], %[[OLDEST]] : index
// MMA-NEXT: %[[NEEDSMASK:[0-9]+]] = arith.ori %[[EITHER]], %[[BEFORE]] : i1
// MMA-NEXT: scf.if %[[NEEDSMASK]] -> (f32,
func.func @window_split(%q: tensor<1x8x?x64xbf16>, %k: tensor<1x2x?x64xbf16>, %v: tensor<1x2x?x64xbf16>) -> tensor<1x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {causal, window = 128 : i64, scale = 0.125 : f32} : tensor<1x8x?x64xbf16>, tensor<1x2x?x64xbf16>, tensor<1x2x?x64xbf16> -> tensor<1x8x?x64xbf16>
  return %o : tensor<1x8x?x64xbf16>
}

// -----

// The tensor-core kernel revisits the keys outside the band for rows that
// saw none (masked_score): the band is kept, its start rounded down to a
// 64-key tile, and keys are not split (the loop ends at the band's end).
// MMA-LABEL: gpu.func @kiln_attention_mma_bf16_d64_causal_w128_fill0xc61c4000(
// MMA: %[[END:[0-9]+]] = arith.minsi %{{[0-9]+}}, %{{[0-9]+}} : index
// MMA: %[[BEGIN:[0-9]+]] = arith.maxsi %{{[0-9]+}}, %{{.*}} : index
// MMA-NEXT: %[[TILE:.*]] = arith.constant 64 : index
// MMA-NEXT: %[[TILE2:.*]] = arith.constant 64 : index
// MMA-NEXT: %[[TILES:[0-9]+]] = arith.divui %[[BEGIN]], %[[TILE2]] : index
// MMA-NEXT: %[[ROUNDED:[0-9]+]] = arith.muli %[[TILES]], %[[TILE]] : index
// MMA-NOT: arith.ceildivui
// MMA: scf.for %{{.*}} = %[[ROUNDED]] to %[[END]] step
func.func @masked_score_band(%q: tensor<1x8x?x64xbf16>, %k: tensor<1x2x?x64xbf16>, %v: tensor<1x2x?x64xbf16>) -> tensor<1x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {causal, window = 128 : i64, masked_score = -1.0e4 : f32, scale = 0.125 : f32} : tensor<1x8x?x64xbf16>, tensor<1x2x?x64xbf16>, tensor<1x2x?x64xbf16> -> tensor<1x8x?x64xbf16>
  return %o : tensor<1x8x?x64xbf16>
}
