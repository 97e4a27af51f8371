// Schedules/Mma/MmaEpilogue.cpp: MmaKernel::writeOutput (out = O / sum for the rows
// g and g + 8; in decode mode each warp stores its share of the merged
// rows' 8-column blocks) and MmaKernel::writePartial (a split's normalised
// partial output and its max and sum into the workspace).
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu | FileCheck %s

// A split site. Decode mode is q_len · group <= 16; the writers are every
// warp outside decode mode or warp 0 in it (for the statistics). Row g is
// written where query < q_len, with 1/sum or 0 (reciprocalOrZero). With
// more than one split the row goes to the workspace: row (split, batch,
// head, query) of 64 floats, each accumulator times 1/sum (in decode mode
// only the warp's share, 8-column blocks below 8); then, from the first
// lane of the quad of a writing warp, its max and sum at (splits · rows ·
// 64 + 2 · row). With one split it is stored to out as bf16.
// CHECK-LABEL: gpu.func @kiln_attention_mma_bf16_d64(
// CHECK-SAME: %[[WORKSPACE:arg23]]: !llvm.ptr<1>
// CHECK: %[[BATCH:[0-9]+]] = arith.index_cast %arg4 : i32 to index
// CHECK-NEXT: %[[QHEADS:[0-9]+]] = arith.index_cast %arg5 : i32 to index
// CHECK: %[[QLEN:[0-9]+]] = arith.index_cast %arg7 : i32 to index
// CHECK: %[[SPLITS:[0-9]+]] = arith.index_cast %arg22 : i32 to index
// CHECK: %[[DECODE:[0-9]+]] = arith.cmpi ule, %{{[0-9]+}}, %c16{{[_0-9]*}} : index
// CHECK: %[[STATE:[0-9]+]]:36 = scf.if %[[DECODE]] -> (f32,
// CHECK: %[[TRUE:.*]] = arith.constant true
// CHECK-NEXT: %[[NOTDECODE:[0-9]+]] = arith.xori %[[DECODE]], %[[TRUE]] : i1
// CHECK-NEXT: %[[ZERO:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[WARP0:[0-9]+]] = arith.cmpi eq, %{{[0-9]+}}, %[[ZERO]] : index
// CHECK-NEXT: %[[FIRSTWARP:[0-9]+]] = arith.ori %[[NOTDECODE]], %[[WARP0]] : i1
// CHECK: gpu.shuffle  xor %[[STATE]]#2,
// CHECK: gpu.shuffle  xor
// CHECK-NEXT: %[[SUM:[0-9]+]] = arith.addf
// CHECK-NEXT: %[[FZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: %[[HASKEYS:[0-9]+]] = arith.cmpf ogt, %[[SUM]], %[[FZERO]] : f32
// CHECK-NEXT: %[[UNIT:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT: %[[RECIPROCAL:[0-9]+]] = arith.divf %[[UNIT]], %[[SUM]] : f32
// CHECK-NEXT: %[[INVERSE:[0-9]+]] = arith.select %[[HASKEYS]], %[[RECIPROCAL]], %[[FZERO]] : f32
// CHECK-NEXT: %[[INBOUNDS:[0-9]+]] = arith.cmpi slt, %{{[0-9]+}}, %[[QLEN]] : index
// CHECK-NEXT: %[[WRITES:[0-9]+]] = arith.andi %{{.*}}, %[[INBOUNDS]] : i1
// CHECK-NEXT: scf.if %[[WRITES]] {
// CHECK-NEXT: %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT: %[[SPLITTING:[0-9]+]] = arith.cmpi ugt, %[[SPLITS]], %[[ONE]] : index
// CHECK-NEXT: scf.if %[[SPLITTING]] {
// CHECK-NEXT: %[[SEQHEADS:[0-9]+]] = arith.muli %[[BATCH]], %[[QHEADS]] : index
// CHECK-NEXT: %[[ROWSPERSPLIT:[0-9]+]] = arith.muli %[[SEQHEADS]], %[[QLEN]] : index
// CHECK-NEXT: arith.muli %{{[0-9]+}}, %[[QHEADS]] : index
// CHECK-NEXT: arith.addi
// CHECK-NEXT: arith.muli %{{[0-9]+}}, %[[QLEN]] : index
// CHECK-NEXT: %[[INSPLIT:[0-9]+]] = arith.addi
// CHECK-NEXT: %[[SKIPPED:[0-9]+]] = arith.muli %{{[0-9]+}}, %[[ROWSPERSPLIT]] : index
// CHECK-NEXT: %[[ROW:[0-9]+]] = arith.addi %[[SKIPPED]], %[[INSPLIT]] : index
// CHECK-NEXT: %[[DIM:.*]] = arith.constant 64 : index
// CHECK-NEXT: %[[ROWSTART:[0-9]+]] = arith.muli %[[ROW]], %[[DIM]] : index
// CHECK-NEXT: %[[ROWSTART64:[0-9]+]] = arith.index_cast %[[ROWSTART]] : index to i64
// CHECK-NEXT: scf.if %[[DECODE]] {
// CHECK: %[[SHAREBLOCK:[0-9]+]] = arith.addi
// CHECK-NEXT: %[[BLOCKS:.*]] = arith.constant 8 : index
// CHECK-NEXT: arith.cmpi ult, %[[SHAREBLOCK]], %[[BLOCKS]] : index
// CHECK: %[[PARTIAL:[0-9]+]] = arith.mulf %[[STATE]]#4, %[[INVERSE]] : f32
// CHECK-NEXT: %[[COLUMN:[0-9]+]] = arith.index_cast
// CHECK-NEXT: %[[OFFSET:[0-9]+]] = arith.addi %[[ROWSTART64]], %[[COLUMN]] : i64
// CHECK-NEXT: %[[ADDRESS:[0-9]+]] = llvm.getelementptr %[[WORKSPACE]][%[[OFFSET]]] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f32
// CHECK-NEXT: llvm.store %[[PARTIAL]], %[[ADDRESS]] : f32, !llvm.ptr<1>
// CHECK: } else {
// CHECK: %[[QUAD0:[0-9]+]] = arith.cmpi eq, %{{[0-9]+}}, %{{.*}} : index
// CHECK-NEXT: %[[STATISTICS:[0-9]+]] = arith.andi %[[FIRSTWARP]], %[[QUAD0]] : i1
// CHECK-NEXT: scf.if %[[STATISTICS]] {
// CHECK-NEXT: %[[TWO:.*]] = arith.constant 2 : index
// CHECK-NEXT: %[[PAIR:[0-9]+]] = arith.muli %[[ROW]], %[[TWO]] : index
// CHECK-NEXT: %[[ALLROWS:[0-9]+]] = arith.muli %[[SPLITS]], %[[ROWSPERSPLIT]] : index
// CHECK-NEXT: %[[OUTPUTS:[0-9]+]] = arith.muli %[[ALLROWS]], %[[DIM]] : index
// CHECK-NEXT: %[[STATSTART:[0-9]+]] = arith.addi %[[OUTPUTS]], %[[PAIR]] : index
// CHECK: llvm.getelementptr %[[WORKSPACE]]
// CHECK-NEXT: llvm.store %[[STATE]]#0, %{{[0-9]+}} : f32, !llvm.ptr<1>
// CHECK: llvm.getelementptr %[[WORKSPACE]]
// CHECK-NEXT: llvm.store %[[SUM]], %{{[0-9]+}} : f32, !llvm.ptr<1>
// CHECK-NEXT: }
// CHECK-NEXT: } else {
// CHECK: %[[OUTVALUE:[0-9]+]] = arith.mulf %[[STATE]]#4, %[[INVERSE]] : f32
// CHECK-NEXT: arith.index_cast
// CHECK-NEXT: arith.addi
// CHECK-NEXT: %[[NARROW:[0-9]+]] = arith.truncf %[[OUTVALUE]] : f32 to bf16
// CHECK-NEXT: %[[OUTADDRESS:[0-9]+]] = llvm.getelementptr %arg3[%{{[0-9]+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, bf16
// CHECK-NEXT: llvm.store %[[NARROW]], %[[OUTADDRESS]] : bf16, !llvm.ptr<1>
func.func @split(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

// -----

// masked_score with a band is not split (its rows may revisit every key):
// no workspace argument, no split branch, rows go straight to out.
// CHECK-LABEL: gpu.func @kiln_attention_mma_bf16_d64_causal_w128_fill0xc61c4000(
// CHECK-NOT: num_splits
// CHECK-NOT: arith.cmpi ugt, %{{[0-9]+}}, %c1{{[_0-9]*}} : index
// CHECK: arith.truncf %{{[0-9]+}} : f32 to bf16
// CHECK-NEXT: llvm.getelementptr %arg3[%{{[0-9]+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, bf16
// CHECK-NOT: llvm.store {{.*}} : f32, !llvm.ptr<1>
// CHECK: gpu.return
func.func @unsplit(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {causal, window = 128 : i64, masked_score = -1.0e4 : f32, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}
