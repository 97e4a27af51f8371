// Parts/Score.cpp: AttentionKernelBuilder::finishScore (the score function:
// scale, softcap, bias, mask, causal and window bounds, masked_score, into
// log2 units), toLog2Saturated and finishIf. finishScore is checked on the
// scalar kernel, where every score takes it (rows-per-warp=1 for a small
// kernel); finishIf and the additive path on the tensor-core kernel.
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu="tensor-cores=0 rows-per-warp=1" | FileCheck %s --check-prefix=SCALAR
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu | FileCheck %s --check-prefix=MMA

// Softcap 30 with nothing added after it: scale·dot in natural units, times
// 1/30, through tanh(x) = 1 - 2/(2^(2·log2(e)·x) + 1) (ex2, no math.tanh),
// then times 30·log2(e) straight into log2 units. Keys at or past kv_len
// score -inf.
// SCALAR-LABEL: gpu.func @kiln_attention_f32_d32_cap0x41f00000(
// SCALAR-SAME: %[[SCALE:arg9]]: f32
// SCALAR: %[[KVLEN:[0-9]+]] = arith.index_cast %arg8 : i32 to index
// SCALAR: %[[DOT:[0-9]+]] = scf.for {{.*}} -> (f32) {
// SCALAR: %[[SCALED:[0-9]+]] = arith.mulf %[[DOT]], %[[SCALE]] : f32
// SCALAR-NEXT: %[[INVCAP:.*]] = arith.constant 0.0333333351 : f32
// SCALAR-NEXT: %[[X:[0-9]+]] = arith.mulf %[[SCALED]], %[[INVCAP]] : f32
// SCALAR-NEXT: %[[TWOLOG2E:.*]] = arith.constant 2.885390e+00 : f32
// SCALAR-NEXT: %[[Y:[0-9]+]] = arith.mulf %[[X]], %[[TWOLOG2E]] : f32
// SCALAR-NEXT: %[[E:[0-9]+]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%[[Y]]) : (f32) -> f32
// SCALAR-NEXT: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// SCALAR-NEXT: %[[DENOMINATOR:[0-9]+]] = arith.addf %[[E]], %[[ONE]] : f32
// SCALAR-NEXT: %[[TWO:.*]] = arith.constant 2.000000e+00 : f32
// SCALAR-NEXT: %[[RATIO:[0-9]+]] = arith.divf %[[TWO]], %[[DENOMINATOR]] : f32
// SCALAR-NEXT: %[[ONEAGAIN:.*]] = arith.constant 1.000000e+00 : f32
// SCALAR-NEXT: %[[TANH:[0-9]+]] = arith.subf %[[ONEAGAIN]], %[[RATIO]] : f32
// SCALAR-NEXT: %[[CAPLOG2E:.*]] = arith.constant 43.2808495 : f32
// SCALAR-NEXT: %[[CAPPED:[0-9]+]] = arith.mulf %[[TANH]], %[[CAPLOG2E]] : f32
// SCALAR-NOT: math.tanh
// SCALAR: %[[INRANGE:[0-9]+]] = arith.cmpi slt, %{{[0-9]+}}, %[[KVLEN]] : index
// SCALAR-NEXT: %[[NEGINF:.*]] = arith.constant 0xFF800000 : f32
// SCALAR-NEXT: arith.select %[[INRANGE]], %[[CAPPED]], %[[NEGINF]] : f32
func.func @softcap(%q: tensor<1x4x?x32xf32>, %k: tensor<1x4x?x32xf32>, %v: tensor<1x4x?x32xf32>) -> tensor<1x4x?x32xf32> {
  %o = kiln.attention %q, %k, %v {softcap = 30.0 : f32, scale = 0.125 : f32} : tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32> -> tensor<1x4x?x32xf32>
  return %o : tensor<1x4x?x32xf32>
}

// -----

// A bias after the softcap: the cap stays in natural units (times 30, not
// 30·log2(e)), the f16 bias at (query, key) is loaded, widened and added,
// and only then is the score taken to log2 units, saturated at the lowest
// finite float so that a finite fill stays finite (-inf stays -inf).
// SCALAR-LABEL: gpu.func @kiln_attention_f32_d32_cap0x41f00000_biasf16(
// SCALAR-SAME: %[[BIAS:arg4]]: !llvm.ptr<1>
// SCALAR: %[[TANH:[0-9]+]] = arith.subf
// SCALAR-NEXT: %[[CAP:.*]] = arith.constant 3.000000e+01 : f32
// SCALAR-NEXT: %[[CAPPED:[0-9]+]] = arith.mulf %[[TANH]], %[[CAP]] : f32
// SCALAR: %[[ADDRESS:[0-9]+]] = llvm.getelementptr %[[BIAS]][%{{[0-9]+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f16
// SCALAR-NEXT: %[[LOADED:[0-9]+]] = llvm.load %[[ADDRESS]] : !llvm.ptr<1> -> f16
// SCALAR-NEXT: %[[WIDE:[0-9]+]] = arith.extf %[[LOADED]] : f16 to f32
// SCALAR-NEXT: %[[BIASED:[0-9]+]] = arith.addf %[[CAPPED]], %[[WIDE]] : f32
// SCALAR-NEXT: %[[NEGINF:.*]] = arith.constant 0xFF800000 : f32
// SCALAR-NEXT: %[[LOWEST:.*]] = arith.constant -3.40282347E+38 : f32
// SCALAR-NEXT: %[[LOG2E:.*]] = arith.constant 1.44269502 : f32
// SCALAR-NEXT: %[[LOG2:[0-9]+]] = arith.mulf %[[BIASED]], %[[LOG2E]] : f32
// SCALAR-NEXT: %[[SATURATED:[0-9]+]] = arith.maximumf %[[LOG2]], %[[LOWEST]] : f32
// SCALAR-NEXT: %[[ISNEGINF:[0-9]+]] = arith.cmpf oeq, %[[BIASED]], %[[NEGINF]] : f32
// SCALAR-NEXT: %[[FINISHED:[0-9]+]] = arith.select %[[ISNEGINF]], %[[NEGINF]], %[[SATURATED]] : f32
// SCALAR-NEXT: arith.constant 0xFF800000 : f32
// SCALAR-NEXT: arith.select %{{[0-9]+}}, %[[FINISHED]], %{{.*}} : f32
func.func @bias(%q: tensor<1x4x?x32xf32>, %k: tensor<1x4x?x32xf32>, %v: tensor<1x4x?x32xf32>, %b: tensor<1x4x?x?xf16>) -> tensor<1x4x?x32xf32> {
  %o = kiln.attention %q, %k, %v bias(%b : tensor<1x4x?x?xf16>) {softcap = 30.0 : f32, scale = 0.125 : f32} : tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32> -> tensor<1x4x?x32xf32>
  return %o : tensor<1x4x?x32xf32>
}

// -----

// A boolean mask, causal, a window of 64 and masked_score = -1e4: the score
// (scale·log2(e) folded into one multiply) is kept where the mask, key <=
// row + kv_len - q_len and key > that diagonal - 64 all hold, else it is
// the fill in log2 units (-1e4·log2(e)); past kv_len it is -inf.
// SCALAR-LABEL: gpu.func @kiln_attention_f32_d32_causal_w64_maski1_fill0xc61c4000(
// SCALAR-SAME: %[[MASKPTR:arg4]]: !llvm.ptr<1>
// SCALAR: %[[LOG2E:.*]] = arith.constant 1.44269502 : f32
// SCALAR-NEXT: %[[SCALELOG2:[0-9]+]] = arith.mulf %arg10, %[[LOG2E]] : f32
// SCALAR: %[[DOT:[0-9]+]] = scf.for {{.*}} -> (f32) {
// SCALAR: %[[SCORE:[0-9]+]] = arith.mulf %[[DOT]], %[[SCALELOG2]] : f32
// SCALAR: %[[INRANGE:[0-9]+]] = arith.cmpi slt, %[[KEY:[0-9]+]], %{{[0-9]+}} : index
// SCALAR: llvm.getelementptr %[[MASKPTR]][%{{[0-9]+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, i1
// SCALAR-NEXT: %[[MASK:[0-9]+]] = llvm.load %{{[0-9]+}} : !llvm.ptr<1> -> i1
// SCALAR-NEXT: %[[DIAGONAL:[0-9]+]] = arith.addi %{{[0-9]+}}, %{{[0-9]+}} : index
// SCALAR-NEXT: %[[RIGHT:.*]] = arith.constant 0 : index
// SCALAR-NEXT: %[[BOUND:[0-9]+]] = arith.addi %[[DIAGONAL]], %[[RIGHT]] : index
// SCALAR-NEXT: %[[CAUSAL:[0-9]+]] = arith.cmpi sle, %[[KEY]], %[[BOUND]] : index
// SCALAR-NEXT: %[[VISIBLE:[0-9]+]] = arith.andi %[[MASK]], %[[CAUSAL]] : i1
// SCALAR-NEXT: %[[WINDOW:.*]] = arith.constant 64 : index
// SCALAR-NEXT: %[[OLDEST:[0-9]+]] = arith.subi %[[DIAGONAL]], %[[WINDOW]] : index
// SCALAR-NEXT: %[[INWINDOW:[0-9]+]] = arith.cmpi sgt, %[[KEY]], %[[OLDEST]] : index
// SCALAR-NEXT: %[[SHOWN:[0-9]+]] = arith.andi %[[VISIBLE]], %[[INWINDOW]] : i1
// SCALAR-NEXT: %[[NEGINF:.*]] = arith.constant 0xFF800000 : f32
// SCALAR-NEXT: %[[FILL:.*]] = arith.constant -14426.9502 : f32
// SCALAR-NEXT: %[[HIDDEN:[0-9]+]] = arith.select %[[SHOWN]], %[[SCORE]], %[[FILL]] : f32
// SCALAR-NEXT: arith.select %[[INRANGE]], %[[HIDDEN]], %[[NEGINF]] : f32
func.func @bool_mask(%q: tensor<1x4x?x32xf32>, %k: tensor<1x4x?x32xf32>, %v: tensor<1x4x?x32xf32>, %m: tensor<1x1x?x?xi1>) -> tensor<1x4x?x32xf32> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<1x1x?x?xi1>) {causal, window = 64 : i64, masked_score = -1.0e4 : f32, scale = 0.125 : f32} : tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32> -> tensor<1x4x?x32xf32>
  return %o : tensor<1x4x?x32xf32>
}

// -----

// finishIf: a causal tile's 32 scores (8 blocks of 4 accumulators) are one
// scf.if on tileNeedsMask: finishScore in the then branch (scale, the causal
// compare, -inf), the scale alone in the else branch.
// MMA-LABEL: gpu.func @kiln_attention_mma_bf16_d64_causal(
// MMA: %[[LOG2E:.*]] = arith.constant 1.44269502 : f32
// MMA-NEXT: %[[SCALELOG2:[0-9]+]] = arith.mulf %arg9, %[[LOG2E]] : f32
// MMA: %{{[0-9]+}}:32 = scf.if %{{[0-9]+}} -> (f32,
// MMA: arith.mulf %{{[0-9]+}}, %[[SCALELOG2]] : f32
// MMA: arith.cmpi sle
// MMA: arith.select %{{[0-9]+}}, %{{[0-9]+}}, %cst{{.*}} : f32
// MMA: } else {
// MMA-COUNT-32: arith.mulf %{{[0-9]+}}, %[[SCALELOG2]] : f32
// MMA-NEXT: scf.yield
// MMA-NEXT: }
func.func @causal(%q: tensor<1x8x?x64xbf16>, %k: tensor<1x2x?x64xbf16>, %v: tensor<1x2x?x64xbf16>) -> tensor<1x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<1x8x?x64xbf16>, tensor<1x2x?x64xbf16>, tensor<1x2x?x64xbf16> -> tensor<1x8x?x64xbf16>
  return %o : tensor<1x8x?x64xbf16>
}

// -----

// An additive f32 mask: every tile is finished (no scale-only branch); the
// score is scaled in natural units, the mask added, then taken to log2
// units with saturation.
// MMA-LABEL: gpu.func @kiln_attention_mma_bf16_d64_maskf32(
// MMA-SAME: %[[MASKPTR:arg4]]: !llvm.ptr<1>
// MMA-SAME: %[[SCALE:arg10]]: f32
// MMA-NOT: :32 = scf.if
// MMA: %[[SCORE:[0-9]+]] = arith.mulf %{{[0-9]+}}, %[[SCALE]] : f32
// MMA: llvm.getelementptr %[[MASKPTR]][%{{[0-9]+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f32
// MMA-NEXT: %[[MASK:[0-9]+]] = llvm.load %{{[0-9]+}} : !llvm.ptr<1> -> f32
// MMA-NEXT: %[[MASKED:[0-9]+]] = arith.addf %[[SCORE]], %[[MASK]] : f32
// MMA-NEXT: arith.constant 0xFF800000 : f32
// MMA-NEXT: arith.constant -3.40282347E+38 : f32
// MMA-NEXT: %[[LOG2E:.*]] = arith.constant 1.44269502 : f32
// MMA-NEXT: arith.mulf %[[MASKED]], %[[LOG2E]] : f32
// MMA-NEXT: arith.maximumf
// MMA-NOT: :32 = scf.if
func.func @additive_mask(%q: tensor<1x8x?x64xbf16>, %k: tensor<1x2x?x64xbf16>, %v: tensor<1x2x?x64xbf16>, %m: tensor<1x1x?x?xf32>) -> tensor<1x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v mask(%m : tensor<1x1x?x?xf32>) {scale = 0.125 : f32} : tensor<1x8x?x64xbf16>, tensor<1x2x?x64xbf16>, tensor<1x2x?x64xbf16> -> tensor<1x8x?x64xbf16>
  return %o : tensor<1x8x?x64xbf16>
}
