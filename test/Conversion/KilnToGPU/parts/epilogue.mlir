// Parts/Epilogue.cpp: AttentionKernelBuilder::storeNormalisedRows (out =
// O / sum for the rows g and g + 8 a thread holds, through
// reciprocalOrZero, rows at or past q_len not stored) and storeOutput (f32
// to the element type). storeNormalisedRows is checked on the TF32 kernel,
// storeOutput's conversion on the scalar kernel's bf16 output.
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu | FileCheck %s
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu="tensor-cores=0" | FileCheck %s --check-prefix=SCALAR

// After the loop (and the last copies): row g's sum, reduced over the quad
// (xor 2, xor 1, adds), gives 1/sum, or 0 where the sum is not positive (a
// row that saw no key is zeros, not NaN); the row is stored only where
// query < q_len, at out base + query · out_stride_seq, each accumulator
// times 1/sum, as f32 (no conversion for an f32 site). Then row g + 8 from
// the loop's fourth result.
// CHECK-LABEL: gpu.func @kiln_attention_3xtf32_f32_d32(
// CHECK-SAME: %[[OUT:arg3]]: !llvm.ptr<1>
// CHECK: %[[QLEN:[0-9]+]] = arith.index_cast %arg7 : i32 to index
// CHECK: %[[STATE:[0-9]+]]:20 = scf.for
// CHECK: nvvm.cp.async.wait.group 0
// CHECK-NEXT: %[[TWO:.*]] = arith.constant 2 : i32
// CHECK-NEXT: arith.constant 32 : i32
// CHECK-NEXT: %[[OTHER:shuffleResult[_0-9]*]], %{{.*}} = gpu.shuffle  xor %[[STATE]]#2, %[[TWO]], %{{.*}} : f32
// CHECK-NEXT: %[[PAIRSUM:[0-9]+]] = arith.addf %[[STATE]]#2, %[[OTHER]] : f32
// CHECK-NEXT: %[[ONE:.*]] = arith.constant 1 : i32
// CHECK-NEXT: arith.constant 32 : i32
// CHECK-NEXT: %[[OTHER1:shuffleResult[_0-9]*]], %{{.*}} = gpu.shuffle  xor %[[PAIRSUM]], %[[ONE]], %{{.*}} : f32
// CHECK-NEXT: %[[SUM:[0-9]+]] = arith.addf %[[PAIRSUM]], %[[OTHER1]] : f32
// CHECK-NEXT: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: %[[HASKEYS:[0-9]+]] = arith.cmpf ogt, %[[SUM]], %[[ZERO]] : f32
// CHECK-NEXT: %[[UNIT:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT: %[[RECIPROCAL:[0-9]+]] = arith.divf %[[UNIT]], %[[SUM]] : f32
// CHECK-NEXT: %[[INVERSE:[0-9]+]] = arith.select %[[HASKEYS]], %[[RECIPROCAL]], %[[ZERO]] : f32
// CHECK-NEXT: %[[INBOUNDS:[0-9]+]] = arith.cmpi slt, %[[ROW:[0-9]+]], %[[QLEN]] : index
// CHECK-NEXT: scf.if %[[INBOUNDS]] {
// CHECK-NEXT: %[[ROW64:[0-9]+]] = arith.index_cast %[[ROW]] : index to i64
// CHECK-NEXT: %[[ROWSTART:[0-9]+]] = arith.muli %[[ROW64]], %arg21 : i64
// CHECK-NEXT: %[[ROWOFFSET:[0-9]+]] = arith.addi %{{[0-9]+}}, %[[ROWSTART]] : i64
// CHECK: %[[OFFSET:[0-9]+]] = arith.addi %[[ROWOFFSET]], %{{[0-9]+}} : i64
// CHECK-NEXT: %[[VALUE:[0-9]+]] = arith.mulf %[[STATE]]#4, %[[INVERSE]] : f32
// CHECK-NEXT: %[[ADDRESS:[0-9]+]] = llvm.getelementptr %[[OUT]][%[[OFFSET]]] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f32
// CHECK-NEXT: llvm.store %[[VALUE]], %[[ADDRESS]] : f32, !llvm.ptr<1>
// CHECK-NOT: arith.truncf
// CHECK: gpu.shuffle  xor %[[STATE]]#3,
// CHECK: arith.cmpf ogt
// CHECK: arith.cmpi slt, %{{[0-9]+}}, %[[QLEN]] : index
// CHECK-NEXT: scf.if
// CHECK-NOT: arith.truncf
// CHECK: gpu.return
func.func @tf32(%q: tensor<1x4x?x32xf32>, %k: tensor<1x4x?x32xf32>, %v: tensor<1x4x?x32xf32>) -> tensor<1x4x?x32xf32> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32> -> tensor<1x4x?x32xf32>
  return %o : tensor<1x4x?x32xf32>
}

// -----

// storeOutput on a bf16 site: the normalised f32 is truncated to bf16 and
// stored as bf16 at out[offset].
// SCALAR-LABEL: gpu.func @kiln_attention_bf16_d32(
// SCALAR-SAME: %[[OUT:arg3]]: !llvm.ptr<1>
// SCALAR: scf.if
// SCALAR: %[[VALUE:[0-9]+]] = arith.mulf %{{[0-9]+}}#{{[0-9]+}}, %{{[0-9]+}} : f32
// SCALAR-NEXT: %[[NARROW:[0-9]+]] = arith.truncf %[[VALUE]] : f32 to bf16
// SCALAR-NEXT: %[[ADDRESS:[0-9]+]] = llvm.getelementptr %[[OUT]][%{{[0-9]+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, bf16
// SCALAR-NEXT: llvm.store %[[NARROW]], %[[ADDRESS]] : bf16, !llvm.ptr<1>
func.func @bf16(%q: tensor<1x4x?x32xbf16>, %k: tensor<1x4x?x32xbf16>, %v: tensor<1x4x?x32xbf16>) -> tensor<1x4x?x32xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<1x4x?x32xbf16>, tensor<1x4x?x32xbf16>, tensor<1x4x?x32xbf16> -> tensor<1x4x?x32xbf16>
  return %o : tensor<1x4x?x32xbf16>
}
