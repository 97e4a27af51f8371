// Parts/OnlineSoftmax.cpp: KernelBuilderBase::onlineSoftmaxStep, one tile's
// step for the rows g and g + 8 a thread holds in the m16n8 accumulator
// layout, and reciprocalOrZero. Checked on the TF32 kernel (32-key tiles:
// 4 key blocks, 8 scores a row) and on the warp-specialised kernel, which
// folds the scale into the step (scoreScale).
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu | FileCheck %s
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu="hopper=1" | FileCheck %s --check-prefix=WS

// The loop carries max and sum of rows g and g + 8, then the accumulators.
// Row g: the max of its 8 scores, reduced over the quad by xor shuffles 2
// then 1; the new max against the carried one, 0 in its place while it is
// -inf (so that exp2 gives 0, not NaN); alpha = 2^(old max - new max)
// scales the carried sum, to which each 2^(score - max) is added. Row g + 8
// the same with its own max. Accumulator i is rescaled by the alpha of
// its row, (i mod 4) / 2. After the loop, 1/sum is 0 for a row that saw no
// key.
// CHECK-LABEL: gpu.func @kiln_attention_3xtf32_f32_d32(
// CHECK: scf.for %{{.*}} iter_args(%[[MAX0:arg[0-9]+]] = %{{[a-z0-9_]+}}, %[[MAX1:arg[0-9]+]] = %{{[a-z0-9_]+}}, %[[SUM0:arg[0-9]+]] = %{{[a-z0-9_]+}}, %[[SUM1:arg[0-9]+]] = %{{[a-z0-9_]+}}, %[[ACC0:arg[0-9]+]] = %{{[a-z0-9_]+}}, %[[ACC1:arg[0-9]+]] = %{{[a-z0-9_]+}}, %[[ACC2:arg[0-9]+]] = %{{[a-z0-9_]+}}, %[[ACC3:arg[0-9]+]] = %{{[a-z0-9_]+}},
// CHECK: arith.maximumf %[[NEGINF:cst[_0-9]*]], %{{[0-9]+}} : f32
// CHECK-COUNT-7: arith.maximumf
// CHECK-NEXT: %[[TWO:.*]] = arith.constant 2 : i32
// CHECK-NEXT: %[[WIDTH:.*]] = arith.constant 32 : i32
// CHECK-NEXT: %[[OTHER:shuffleResult[_0-9]*]], %{{.*}} = gpu.shuffle  xor %[[LOCAL:[0-9]+]], %[[TWO]], %[[WIDTH]] : f32
// CHECK-NEXT: %[[PAIRMAX:[0-9]+]] = arith.maximumf %[[LOCAL]], %[[OTHER]] : f32
// CHECK-NEXT: %[[ONE:.*]] = arith.constant 1 : i32
// CHECK-NEXT: arith.constant 32 : i32
// CHECK-NEXT: %[[OTHER1:shuffleResult[_0-9]*]], %{{.*}} = gpu.shuffle  xor %[[PAIRMAX]], %[[ONE]], %{{.*}} : f32
// CHECK-NEXT: %[[TILEMAX:[0-9]+]] = arith.maximumf %[[PAIRMAX]], %[[OTHER1]] : f32
// CHECK-NEXT: %[[NEWMAX:[0-9]+]] = arith.maximumf %[[MAX0]], %[[TILEMAX]] : f32
// CHECK-NEXT: %[[NEGINF2:cst[_0-9]*]] = arith.constant 0xFF800000 : f32
// CHECK-NEXT: %[[EMPTY:[0-9]+]] = arith.cmpf oeq, %[[NEWMAX]], %[[NEGINF2]] : f32
// CHECK-NEXT: %[[ZERO:cst[_0-9]*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: %[[SAFEMAX:[0-9]+]] = arith.select %[[EMPTY]], %[[ZERO]], %[[NEWMAX]] : f32
// CHECK-NEXT: %[[DROP:[0-9]+]] = arith.subf %[[MAX0]], %[[SAFEMAX]] : f32
// CHECK-NEXT: %[[ALPHA0:[0-9]+]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%[[DROP]]) : (f32) -> f32
// CHECK-NEXT: %[[RESCALED:[0-9]+]] = arith.mulf %[[SUM0]], %[[ALPHA0]] : f32
// CHECK-NEXT: %[[SHIFTED:[0-9]+]] = arith.subf %{{[0-9]+}}, %[[SAFEMAX]] : f32
// CHECK-NEXT: %[[P:[0-9]+]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%[[SHIFTED]]) : (f32) -> f32
// CHECK-NEXT: arith.addf %[[RESCALED]], %[[P]] : f32
// CHECK-COUNT-7: arith.subf %{{[0-9]+}}, %[[SAFEMAX]] : f32
// CHECK-NEXT: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK-NEXT: %{{[0-9]+}} = arith.addf
// CHECK-NEXT: %[[NEGINF3:cst[_0-9]*]] = arith.constant 0xFF800000 : f32
// CHECK-NEXT: arith.maximumf %[[NEGINF3]], %{{[0-9]+}} : f32
// CHECK: %[[NEWMAX1:[0-9]+]] = arith.maximumf %[[MAX1]], %{{[0-9]+}} : f32
// CHECK: %[[DROP1:[0-9]+]] = arith.subf %[[MAX1]], %{{[0-9]+}} : f32
// CHECK-NEXT: %[[ALPHA1:[0-9]+]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%[[DROP1]]) : (f32) -> f32
// CHECK-NEXT: arith.mulf %[[SUM1]], %[[ALPHA1]] : f32
// CHECK: arith.mulf %[[ACC0]], %[[ALPHA0]] : f32
// CHECK-NEXT: arith.mulf %[[ACC1]], %[[ALPHA0]] : f32
// CHECK-NEXT: arith.mulf %[[ACC2]], %[[ALPHA1]] : f32
// CHECK-NEXT: arith.mulf %[[ACC3]], %[[ALPHA1]] : f32
// CHECK: scf.yield
// CHECK: %[[ROWSUM:[0-9]+]] = arith.addf %{{[0-9]+}}, %{{.*}} : f32
// CHECK-NEXT: %[[ZERO2:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: %[[HASKEYS:[0-9]+]] = arith.cmpf ogt, %[[ROWSUM]], %[[ZERO2]] : f32
// CHECK-NEXT: %[[UNIT:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT: %[[INVERSE:[0-9]+]] = arith.divf %[[UNIT]], %[[ROWSUM]] : f32
// CHECK-NEXT: arith.select %[[HASKEYS]], %[[INVERSE]], %[[ZERO2]] : f32
func.func @tf32(%q: tensor<1x4x?x32xf32>, %k: tensor<1x4x?x32xf32>, %v: tensor<1x4x?x32xf32>) -> tensor<1x4x?x32xf32> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32> -> tensor<1x4x?x32xf32>
  return %o : tensor<1x4x?x32xf32>
}

// -----

// With scoreScale (the warp-specialised kernel's raw scores): the quad max
// is scaled by scale·log2(e) before it meets the carried max, and each
// probability is 2^fma(score, scale·log2(e), -max): one FMA, no separate
// scaling of the scores.
// WS-LABEL: gpu.func @kiln_attention_ws_bf16_d64(
// WS: %[[LOG2E:.*]] = arith.constant 1.44269502 : f32
// WS-NEXT: %[[SCALELOG2:[0-9]+]] = arith.mulf %arg9, %[[LOG2E]] : f32
// WS: gpu.shuffle  xor %{{[0-9]+}}, %c1_i32{{.*}} : f32
// WS-NEXT: %[[QUADMAX:[0-9]+]] = arith.maximumf
// WS-NEXT: %[[TILEMAX:[0-9]+]] = arith.mulf %[[QUADMAX]], %[[SCALELOG2]] : f32
// WS-NEXT: %[[NEWMAX:[0-9]+]] = arith.maximumf %{{.*}}, %[[TILEMAX]] : f32
// WS-NEXT: arith.constant 0xFF800000 : f32
// WS-NEXT: arith.cmpf oeq, %[[NEWMAX]]
// WS-NEXT: arith.constant 0.000000e+00 : f32
// WS-NEXT: %[[SAFEMAX:[0-9]+]] = arith.select
// WS-NEXT: arith.subf %{{.*}}, %[[SAFEMAX]] : f32
// WS-NEXT: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// WS-NEXT: arith.mulf
// WS-NEXT: %[[NEGMAX:[0-9]+]] = arith.negf %[[SAFEMAX]] : f32
// WS-NEXT: %[[EXPONENT:[0-9]+]] = llvm.intr.fma(%{{.*}}, %[[SCALELOG2]], %[[NEGMAX]]) : (f32, f32, f32) -> f32
// WS-NEXT: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%[[EXPONENT]]) : (f32) -> f32
func.func @warp_specialized(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}
