// Schedules/Mma/DecodeMerge.cpp: MmaKernel::mergeWarps. In decode mode (q_len ·
// group <= 16 rows) the four warps split each tile's keys and hold partial
// online-softmax states of the same rows; at the end they are merged
// through shared memory. A GQA site (group 4) at head dim 64: a state is
// 36 floats (max and sum of rows g and g + 8, then 8 blocks of 4
// accumulators), each warp merges its share of 2 output blocks.
// RUN: kiln-opt %s -convert-kiln-to-gpu | FileCheck %s

// Rows g + 8 exist only where q_len · group > 8 (a uniform branch). After
// every copy has landed and a barrier, warp w writes to its region (the
// first tile for warps 0 and 1, the second for 2 and 3, 32 lanes × 36
// floats apart): the 18 values of row g, then under the branch the 18 of
// row g + 8. After a barrier each warp reads the 6 values of row g it
// merges (max, sum, its share's 4 accumulators) from all four regions (24
// loads); the merged max is the largest of the four (0 in its place while
// -inf), and each warp's values are weighted by 2^(its max - merged max).
// Row g + 8's merge sits in a branch whose other side is an empty row
// (max -inf, the rest 0).
// CHECK-LABEL: gpu.func @kiln_attention_mma_bf16_d64(
// CHECK: %[[UPPER:[0-9]+]] = arith.cmpi ugt, %{{[0-9]+}}, %c8{{(_[0-9]+)?}} : index
// CHECK-NEXT: nvvm.cp.async.wait.group 0
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: %[[TWO:.*]] = arith.constant 2 : index
// CHECK-NEXT: %[[SECONDTILE:[0-9]+]] = arith.cmpi uge, %[[WARP:[0-9]+]], %[[TWO]] : index
// CHECK-NEXT: %[[TILE:[0-9]+]] = arith.select %[[SECONDTILE]], %{{[0-9]+}}, %{{[0-9]+}} : !llvm.ptr<3>
// CHECK-NEXT: %[[TWOAGAIN:.*]] = arith.constant 2 : index
// CHECK-NEXT: %[[SECONDREGION:[0-9]+]] = arith.remui %[[WARP]], %[[TWOAGAIN]] : index
// CHECK-NEXT: %[[REGIONFLOATS:.*]] = arith.constant 1152 : index
// CHECK-NEXT: arith.muli %[[SECONDREGION]], %[[REGIONFLOATS]] : index
// CHECK-COUNT-18: llvm.store %{{[0-9]+}}#{{[0-9]+}}, %{{[0-9]+}} : f32, !llvm.ptr<3>
// CHECK-NOT: llvm.store
// CHECK: scf.if %[[UPPER]] {
// CHECK-COUNT-18: llvm.store %{{[0-9]+}}#{{[0-9]+}}, %{{[0-9]+}} : f32, !llvm.ptr<3>
// CHECK-NOT: llvm.store
// CHECK: gpu.barrier
// CHECK-COUNT-24: llvm.load %{{[0-9]+}} : !llvm.ptr<3> -> f32
// CHECK-NEXT: %[[MAX01:[0-9]+]] = arith.maximumf %[[NEGINF:cst[_0-9]*]], %[[M0:[0-9]+]] : f32
// CHECK-NEXT: %[[MAX012:[0-9]+]] = arith.maximumf %[[MAX01]], %[[M1:[0-9]+]] : f32
// CHECK-NEXT: %[[MAX0123:[0-9]+]] = arith.maximumf %[[MAX012]], %[[M2:[0-9]+]] : f32
// CHECK-NEXT: %[[MAX:[0-9]+]] = arith.maximumf %[[MAX0123]], %[[M3:[0-9]+]] : f32
// CHECK-NEXT: %[[EMPTY:[0-9]+]] = arith.cmpf oeq, %[[MAX]], %[[NEGINF]] : f32
// CHECK-NEXT: %[[SAFE:[0-9]+]] = arith.select %[[EMPTY]], %[[ZERO:cst[_0-9]*]], %[[MAX]] : f32
// CHECK-NEXT: %[[D0:[0-9]+]] = arith.subf %[[M0]], %[[SAFE]] : f32
// CHECK-NEXT: %[[W0:[0-9]+]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%[[D0]]) : (f32) -> f32
// CHECK-NEXT: %[[WEIGHTED:[0-9]+]] = arith.mulf %{{[0-9]+}}, %[[W0]] : f32
// CHECK-NEXT: arith.addf %[[ZERO]], %[[WEIGHTED]] : f32
// CHECK: arith.subf %[[M1]], %[[SAFE]] : f32
// CHECK: arith.subf %[[M2]], %[[SAFE]] : f32
// CHECK: arith.subf %[[M3]], %[[SAFE]] : f32
// CHECK: %{{[0-9]+}}:6 = scf.if %[[UPPER]] -> (f32, f32, f32, f32, f32, f32) {
// CHECK-COUNT-24: llvm.load %{{[0-9]+}} : !llvm.ptr<3> -> f32
// CHECK: scf.yield
// CHECK-NEXT: } else {
// CHECK-NEXT: scf.yield %[[NEGINF]], %[[ZERO]], %[[ZERO]], %[[ZERO]], %[[ZERO]], %[[ZERO]] : f32, f32, f32, f32, f32, f32
func.func @decode(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}
