// The scalar kernel's products in Schedules/Scalar/ScalarKernel.cpp
// (ScalarKernel::dotRows and the P·V loop of buildBody; not yet a part of
// their own): f32 FMAs on tiles staged in workgroup memory, for any element
// type and without tensor cores. bf16 at head dim 32, two rows a warp
// (rows-per-warp=2), 32-key tiles: a lane owns one key and one output
// column.
// RUN: kiln-opt %s -convert-kiln-to-gpu="tensor-cores=0 rows-per-warp=2" | FileCheck %s

// Q·Kᵀ: a loop over the head dim unrolled 8 times, carrying one sum a row;
// each K element (the lane's key, from the padded 32 × 33 tile) is read
// once and serves both rows, whose Q elements are read from the 8 × 32 Q
// tile: sum = fma(q, k, sum). P·V: a loop over the warp's 32 lanes; each
// row's probability of the source lane's key is broadcast (shuffle idx),
// the V element (that key, the lane's column) read once, and each row's
// accumulator is fma(p, v, acc). No tensor-core instruction.
// CHECK-LABEL: gpu.func @kiln_attention_bf16_d32_causal(
// CHECK-SAME: workgroup(%[[QTILE:arg[0-9]+]] : memref<8x32xf32, #gpu.address_space<workgroup>>, %[[KTILE:arg[0-9]+]] : memref<32x33xf32, #gpu.address_space<workgroup>>, %[[VTILE:arg[0-9]+]] : memref<32x32xf32, #gpu.address_space<workgroup>>)
// CHECK-NOT: nvvm.mma.sync
// CHECK: %{{[0-9]+}}:2 = scf.for %[[D:arg[0-9]+]] = %c0{{(_[0-9]+)?}} to %c32{{(_[0-9]+)?}} step %c8{{(_[0-9]+)?}} iter_args(%[[SUM0:arg[0-9]+]] = %{{[a-z0-9_]+}}, %[[SUM1:arg[0-9]+]] = %{{[a-z0-9_]+}}) -> (f32, f32) {
// CHECK-NEXT: arith.constant 0 : index
// CHECK-NEXT: %[[COLUMN:[0-9]+]] = arith.addi %[[D]], %{{.*}} : index
// CHECK-NEXT: %[[K:[0-9]+]] = memref.load %[[KTILE]][%[[KEY:[0-9]+]], %[[COLUMN]]]
// CHECK-NEXT: %[[Q0:[0-9]+]] = memref.load %[[QTILE]][%[[ROW0:[0-9]+]], %[[COLUMN]]]
// CHECK-NEXT: %[[PARTIAL0:[0-9]+]] = llvm.intr.fma(%[[Q0]], %[[K]], %[[SUM0]]) : (f32, f32, f32) -> f32
// CHECK-NEXT: %[[Q1:[0-9]+]] = memref.load %[[QTILE]][%[[ROW1:[0-9]+]], %[[COLUMN]]]
// CHECK-NEXT: %[[PARTIAL1:[0-9]+]] = llvm.intr.fma(%[[Q1]], %[[K]], %[[SUM1]]) : (f32, f32, f32) -> f32
// CHECK-NEXT: arith.constant 1 : index
// CHECK-NEXT: %[[COLUMN1:[0-9]+]] = arith.addi %[[D]], %{{.*}} : index
// CHECK-NEXT: %[[KNEXT:[0-9]+]] = memref.load %[[KTILE]][%[[KEY]], %[[COLUMN1]]]
// CHECK-NEXT: %[[QNEXT:[0-9]+]] = memref.load %[[QTILE]][%[[ROW0]], %[[COLUMN1]]]
// CHECK-NEXT: llvm.intr.fma(%[[QNEXT]], %[[KNEXT]], %[[PARTIAL0]]) : (f32, f32, f32) -> f32
// CHECK-COUNT-13: llvm.intr.fma
// CHECK-NEXT: scf.yield
// CHECK: %{{[0-9]+}}:2 = scf.for %[[SOURCE:arg[0-9]+]] = %c0{{(_[0-9]+)?}} to %c32{{(_[0-9]+)?}} step %c1{{(_[0-9]+)?}} iter_args(%[[ACC0:arg[0-9]+]] = %{{[0-9]+}}, %[[ACC1:arg[0-9]+]] = %{{[0-9]+}}) -> (f32, f32) {
// CHECK-NEXT: %[[SOURCE32:[0-9]+]] = arith.index_cast %[[SOURCE]] : index to i32
// CHECK-NEXT: arith.constant 32 : i32
// CHECK-NEXT: %[[P0:shuffleResult[_0-9]*]], %{{.*}} = gpu.shuffle  idx %{{[0-9]+}}, %[[SOURCE32]], %{{.*}} : f32
// CHECK-NEXT: %[[P1:shuffleResult[_0-9]*]], %{{.*}} = gpu.shuffle  idx %{{[0-9]+}}, %[[SOURCE32]], %{{.*}} : f32
// CHECK: %[[V:[0-9]+]] = memref.load %[[VTILE]]
// CHECK-NEXT: %[[OUT0:[0-9]+]] = llvm.intr.fma(%[[P0]], %[[V]], %[[ACC0]]) : (f32, f32, f32) -> f32
// CHECK-NEXT: %[[OUT1:[0-9]+]] = llvm.intr.fma(%[[P1]], %[[V]], %[[ACC1]]) : (f32, f32, f32) -> f32
// CHECK-NEXT: scf.yield %[[OUT0]], %[[OUT1]] : f32, f32
// CHECK-NOT: nvvm.mma.sync
// CHECK: gpu.return
func.func @scalar(%q: tensor<1x4x?x32xbf16>, %k: tensor<1x4x?x32xbf16>, %v: tensor<1x4x?x32xbf16>) -> tensor<1x4x?x32xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<1x4x?x32xbf16>, tensor<1x4x?x32xbf16>, tensor<1x4x?x32xbf16> -> tensor<1x4x?x32xbf16>
  return %o : tensor<1x4x?x32xbf16>
}
