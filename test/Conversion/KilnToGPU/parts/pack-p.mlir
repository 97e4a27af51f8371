// Parts/PackP.cpp: KernelBuilderBase::packPair and packAFragments. The
// probabilities leave the online softmax in the m16n8 accumulator layout;
// two f32 of a row become one i32 register of two 16-bit elements, and four
// such registers (row g then row g + 8, of key blocks 2j and 2j + 1) are the
// A fragment of the m16n8k16 P·V product.
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu | FileCheck %s

// bf16: each pair is built in a vector<2xf32> (low element first), rounded
// to vector<2xbf16> and bitcast to i32; the four registers are the A operand
// of the next mma.sync, as they were packed.
// CHECK-LABEL: gpu.func @kiln_attention_mma_bf16_d64(
// CHECK: %[[EMPTY:[0-9]+]] = llvm.mlir.poison : vector<2xf32>
// CHECK-NEXT: %[[FIRST:.*]] = arith.constant 0 : i32
// CHECK-NEXT: %[[LOW:[0-9]+]] = llvm.insertelement %{{[0-9]+}}, %[[EMPTY]][%[[FIRST]] : i32] : vector<2xf32>
// CHECK-NEXT: %[[SECOND:.*]] = arith.constant 1 : i32
// CHECK-NEXT: %[[PAIR:[0-9]+]] = llvm.insertelement %{{[0-9]+}}, %[[LOW]][%[[SECOND]] : i32] : vector<2xf32>
// CHECK-NEXT: %[[NARROW:[0-9]+]] = llvm.fptrunc %[[PAIR]] : vector<2xf32> to vector<2xbf16>
// CHECK-NEXT: %[[P0:[0-9]+]] = llvm.bitcast %[[NARROW]] : vector<2xbf16> to i32
// CHECK: llvm.fptrunc %{{[0-9]+}} : vector<2xf32> to vector<2xbf16>
// CHECK-NEXT: %[[P1:[0-9]+]] = llvm.bitcast
// CHECK: llvm.fptrunc %{{[0-9]+}} : vector<2xf32> to vector<2xbf16>
// CHECK-NEXT: %[[P2:[0-9]+]] = llvm.bitcast
// CHECK: llvm.fptrunc %{{[0-9]+}} : vector<2xf32> to vector<2xbf16>
// CHECK-NEXT: %[[P3:[0-9]+]] = llvm.bitcast
// CHECK-NOT: llvm.fptrunc
// CHECK: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<col>
// CHECK: nvvm.mma.sync A[%[[P0]], %[[P1]], %[[P2]], %[[P3]]] {{.*}}multiplicandAPtxType = #nvvm.mma_type<bf16>
func.func @bf16(%q: tensor<1x4x?x64xbf16>, %k: tensor<1x4x?x64xbf16>, %v: tensor<1x4x?x64xbf16>) -> tensor<1x4x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<1x4x?x64xbf16>, tensor<1x4x?x64xbf16>, tensor<1x4x?x64xbf16> -> tensor<1x4x?x64xbf16>
  return %o : tensor<1x4x?x64xbf16>
}

// -----

// f16: the same pairs rounded to vector<2xf16>, never to bf16.
// CHECK-LABEL: gpu.func @kiln_attention_mma_f16_d64(
// CHECK-NOT: vector<2xbf16>
// CHECK: %[[NARROW:[0-9]+]] = llvm.fptrunc %{{[0-9]+}} : vector<2xf32> to vector<2xf16>
// CHECK-NEXT: llvm.bitcast %[[NARROW]] : vector<2xf16> to i32
// CHECK-NOT: vector<2xbf16>
// CHECK: gpu.return
func.func @f16(%q: tensor<1x4x?x64xf16>, %k: tensor<1x4x?x64xf16>, %v: tensor<1x4x?x64xf16>) -> tensor<1x4x?x64xf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<1x4x?x64xf16>, tensor<1x4x?x64xf16>, tensor<1x4x?x64xf16> -> tensor<1x4x?x64xf16>
  return %o : tensor<1x4x?x64xf16>
}
