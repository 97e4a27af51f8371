// Schedules/Mma/TileCopy.cpp: MmaKernel::planChunks, copyChunks, issueTile,
// tileAddress and zeroPadColumns: K, V and Q tiles into shared memory in
// 16-byte chunks, by cp.async where the views are aligned, by element loads
// otherwise; padded rows for ldmatrix (sm_80), 128-byte swizzled rows for
// wgmma (sm_90a).
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu | FileCheck %s
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu="hopper=1" | FileCheck %s --check-prefix=SWIZZLE

// The first K tile: a chunk is read at k base + key · k_stride_seq +
// column (the key clamped to the last one). Aligned views: cp.async of 16
// bytes, 0 (zero fill) for a key at or past kv_len, into row · (64 + 8) +
// column of the padded tile. Unaligned ones: eight bf16 loads, the chunk
// replaced by zeros past kv_len, one 16-byte store.
// CHECK-LABEL: gpu.func @kiln_attention_mma_bf16_d64(
// CHECK-SAME: %[[K:arg1]]: !llvm.ptr<1>
// CHECK: %[[KVLEN:[0-9]+]] = arith.index_cast %arg8 : i32 to index
// CHECK: %[[ROWOFFSET:[0-9]+]] = arith.muli %{{[0-9]+}}, %arg15 : i64
// CHECK-NEXT: %[[ROWSTART:[0-9]+]] = arith.addi %{{[0-9]+}}, %[[ROWOFFSET]] : i64
// CHECK-NEXT: %[[INBOUNDS:[0-9]+]] = arith.cmpi slt, %{{[0-9]+}}, %[[KVLEN]] : index
// CHECK-NEXT: %[[COLUMN64:[0-9]+]] = arith.index_cast %[[COLUMN:[0-9]+]] : index to i64
// CHECK-NEXT: %[[OFFSET:[0-9]+]] = arith.addi %[[ROWSTART]], %[[COLUMN64]] : i64
// CHECK: scf.if %[[ALIGNED:[0-9]+]] {
// CHECK-NEXT: %[[SOURCE:[0-9]+]] = llvm.getelementptr %[[K]][%[[OFFSET]]] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, bf16
// CHECK-NEXT: %[[NOBYTES:.*]] = arith.constant 0 : i32
// CHECK-NEXT: %[[CHUNKBYTES:.*]] = arith.constant 16 : i32
// CHECK-NEXT: %[[BYTES:[0-9]+]] = arith.select %[[INBOUNDS]], %[[CHUNKBYTES]], %[[NOBYTES]] : i32
// CHECK-NEXT: %[[PITCH:.*]] = arith.constant 72 : index
// CHECK-NEXT: %[[ROWELEMENT:[0-9]+]] = arith.muli %{{[0-9]+}}, %[[PITCH]] : index
// CHECK-NEXT: %[[ELEMENT:[0-9]+]] = arith.addi %[[ROWELEMENT]], %[[COLUMN]] : index
// CHECK-NEXT: %[[ELEMENT32:[0-9]+]] = arith.index_cast %[[ELEMENT]] : index to i32
// CHECK-NEXT: %[[DESTINATION:[0-9]+]] = llvm.getelementptr %{{[0-9]+}}[%[[ELEMENT32]]] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, bf16
// CHECK-NEXT: nvvm.cp.async.shared.global %[[DESTINATION]], %[[SOURCE]], 16, cache =  cg, %[[BYTES]] : !llvm.ptr<3>, !llvm.ptr<1>, i32
// CHECK: } else {
// CHECK-NEXT: llvm.mlir.poison : vector<8xbf16>
// CHECK-COUNT-8: llvm.load %{{[0-9]+}} : !llvm.ptr<1> -> bf16
// CHECK: %[[ZEROS:.*]] = arith.constant dense<0.000000e+00> : vector<8xbf16>
// CHECK-NEXT: %[[CHUNK:[0-9]+]] = arith.select %[[INBOUNDS]], %{{[0-9]+}}, %[[ZEROS]] : vector<8xbf16>
// CHECK-NEXT: arith.constant 72 : index
// CHECK-NEXT: arith.muli
// CHECK-NEXT: arith.addi
// CHECK-NEXT: arith.index_cast
// CHECK-NEXT: %[[STORED:[0-9]+]] = llvm.getelementptr
// CHECK-NEXT: llvm.store %[[CHUNK]], %[[STORED]] {alignment = 16 : i64} : vector<8xbf16>, !llvm.ptr<3>
// SWIZZLE-LABEL: gpu.func @kiln_attention_mma_bf16_d64(
// SWIZZLE: llvm.getelementptr %arg1[%{{[0-9]+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, bf16
// SWIZZLE-NEXT: arith.constant 0 : i32
// SWIZZLE-NEXT: arith.constant 16 : i32
// SWIZZLE-NEXT: arith.select
// SWIZZLE-NEXT: %[[SLABWIDTH:.*]] = arith.constant 64 : index
// SWIZZLE-NEXT: %[[SLAB:[0-9]+]] = arith.divui %[[COLUMN:[0-9]+]], %[[SLABWIDTH]] : index
// SWIZZLE-NEXT: %[[EIGHT:.*]] = arith.constant 8 : index
// SWIZZLE-NEXT: arith.constant 64 : index
// SWIZZLE-NEXT: %[[INSLAB:[0-9]+]] = arith.remui %[[COLUMN]], %{{.*}} : index
// SWIZZLE-NEXT: %[[CHUNK:[0-9]+]] = arith.divui %[[INSLAB]], %[[EIGHT]] : index
// SWIZZLE-NEXT: %[[EIGHTROWS:.*]] = arith.constant 8 : index
// SWIZZLE-NEXT: %[[PHASE:[0-9]+]] = arith.remui %[[ROW:[0-9]+]], %[[EIGHTROWS]] : index
// SWIZZLE-NEXT: %[[SWIZZLED:[0-9]+]] = arith.xori %[[CHUNK]], %[[PHASE]] : index
// SWIZZLE-NEXT: %[[CHUNKBYTES:.*]] = arith.constant 16 : index
// SWIZZLE-NEXT: %[[CHUNKOFFSET:[0-9]+]] = arith.muli %[[SWIZZLED]], %[[CHUNKBYTES]] : index
// SWIZZLE-NEXT: %[[LINE:.*]] = arith.constant 128 : index
// SWIZZLE-NEXT: %[[ROWOFFSET:[0-9]+]] = arith.muli %[[ROW]], %[[LINE]] : index
// SWIZZLE-NEXT: %[[SLABBYTES:.*]] = arith.constant 8192 : index
// SWIZZLE-NEXT: %[[SLABOFFSET:[0-9]+]] = arith.muli %[[SLAB]], %[[SLABBYTES]] : index
// SWIZZLE-NEXT: %[[LINEOFFSET:[0-9]+]] = arith.addi %[[SLABOFFSET]], %[[ROWOFFSET]] : index
// SWIZZLE-NEXT: %[[BYTES:[0-9]+]] = arith.addi %[[LINEOFFSET]], %[[CHUNKOFFSET]] : index
// SWIZZLE-NEXT: %[[BYTES32:[0-9]+]] = arith.index_cast %[[BYTES]] : index to i32
// SWIZZLE-NEXT: %[[DESTINATION:[0-9]+]] = llvm.getelementptr %{{[0-9]+}}[%[[BYTES32]]] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
// SWIZZLE-NEXT: nvvm.cp.async.shared.global %[[DESTINATION]]
func.func @bf16(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

// -----

// Head dim 40 is padded to 48 for m16n8k16: before any copy, columns
// [40, 48) of the four tiles (two stages of K and V, 64 rows, one chunk a
// row: 256 chunks) are zeroed, tile t at t · 7168 bytes, row pitch 56.
// CHECK-LABEL: gpu.func @kiln_attention_mma_f16_d40(
// CHECK: %[[ZEROS:.*]] = arith.constant dense<0.000000e+00> : vector<8xf16>
// CHECK-NEXT: arith.constant 0 : index
// CHECK-NEXT: %[[CHUNKINDEX:[0-9]+]] = arith.addi %thread_id_x, %{{.*}} : index
// CHECK-NEXT: %[[CHUNKS:.*]] = arith.constant 256 : index
// CHECK-NEXT: %[[EXISTS:[0-9]+]] = arith.cmpi ult, %[[CHUNKINDEX]], %[[CHUNKS]] : index
// CHECK-NEXT: scf.if %[[EXISTS]] {
// CHECK: %[[PADFROM:.*]] = arith.constant 40 : index
// CHECK-NEXT: %[[COLUMN:[0-9]+]] = arith.addi %[[PADFROM]], %{{[0-9]+}} : index
// CHECK-NEXT: %[[TILEBYTES:.*]] = arith.constant 7168 : index
// CHECK-NEXT: arith.muli %{{[0-9]+}}, %[[TILEBYTES]] : index
// CHECK: %[[PITCH:.*]] = arith.constant 56 : index
// CHECK-NEXT: %[[ROWSTART:[0-9]+]] = arith.muli %{{[0-9]+}}, %[[PITCH]] : index
// CHECK-NEXT: arith.addi %[[ROWSTART]], %[[COLUMN]] : index
// CHECK-NEXT: arith.index_cast
// CHECK-NEXT: %[[PADDRESS:[0-9]+]] = llvm.getelementptr {{.*}} -> !llvm.ptr<3>, f16
// CHECK-NEXT: llvm.store %[[ZEROS]], %[[PADDRESS]] {alignment = 16 : i64} : vector<8xf16>, !llvm.ptr<3>
// CHECK: nvvm.cp.async.shared.global
func.func @padded(%q: tensor<1x4x?x40xf16>, %k: tensor<1x4x?x40xf16>, %v: tensor<1x4x?x40xf16>) -> tensor<1x4x?x40xf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<1x4x?x40xf16>, tensor<1x4x?x40xf16>, tensor<1x4x?x40xf16> -> tensor<1x4x?x40xf16>
  return %o : tensor<1x4x?x40xf16>
}
