// Products/MmaSync.cpp: KernelBuilderBase::mmaSync (one mma.sync.m16n8k{k})
// and MmaKernel::mma, loadMatrices and blockAddress: the tensor-core
// kernel's S = Q·Kᵀ and O += P·V as m16n8k16 with f32 accumulators,
// operands read by ldmatrix (V transposed).
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu | FileCheck %s

// bf16 at head dim 64: B comes from one ldmatrix of four 8×8 matrices (two
// key blocks' fragments); each product is nvvm.mma.sync m16n8k16 with bf16
// operands as i32 registers, A row-major, B column-major, the four f32
// accumulators chained into the next head-dim chunk's product; V's
// matrices are read transposed and multiplied by the packed P. In the loop over full 64-key tiles (the
// second loop; the first is decode's) a tile takes 8 key blocks · 4
// head-dim chunks products for S and 4 key chunks · 8 output blocks for
// P·V, 64 in all.
// CHECK-LABEL: gpu.func @kiln_attention_mma_bf16_d64(
// CHECK: scf.for
// CHECK: %[[MATRICES:[0-9]+]] = nvvm.ldmatrix %{{[0-9]+}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<row>, num = 4 : i32, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>} : (!llvm.ptr<3>) -> !llvm.struct<(i32, i32, i32, i32)>
// CHECK-NEXT: %[[B0:[0-9]+]] = llvm.extractvalue %[[MATRICES]][0]
// CHECK-NEXT: %[[B1:[0-9]+]] = llvm.extractvalue %[[MATRICES]][1]
// CHECK-NEXT: %[[B2:[0-9]+]] = llvm.extractvalue %[[MATRICES]][2]
// CHECK-NEXT: %[[B3:[0-9]+]] = llvm.extractvalue %[[MATRICES]][3]
// CHECK-NEXT: %[[S:[0-9]+]] = nvvm.mma.sync A[%[[A0:[0-9]+]], %[[A1:[0-9]+]], %[[A2:[0-9]+]], %[[A3:[0-9]+]]]  B[%[[B0]], %[[B1]]]  C[%{{.*}}]  {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// CHECK-NEXT: %[[C0:[0-9]+]] = llvm.extractvalue %[[S]][0]
// CHECK-NEXT: %[[C1:[0-9]+]] = llvm.extractvalue %[[S]][1]
// CHECK-NEXT: %[[C2:[0-9]+]] = llvm.extractvalue %[[S]][2]
// CHECK-NEXT: %[[C3:[0-9]+]] = llvm.extractvalue %[[S]][3]
// CHECK-NEXT: nvvm.mma.sync A[%[[A0]], %[[A1]], %[[A2]], %[[A3]]]  B[%[[B2]], %[[B3]]]
// CHECK: nvvm.mma.sync A[%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}]  B[%{{[0-9]+}}, %{{[0-9]+}}]  C[%[[C0]], %[[C1]], %[[C2]], %[[C3]]]
// CHECK: %[[P0:[0-9]+]] = llvm.bitcast %{{[0-9]+}} : vector<2xbf16> to i32
// CHECK: %[[VMATRICES:[0-9]+]] = nvvm.ldmatrix %{{[0-9]+}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<col>, num = 4 : i32, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>}
// CHECK-NEXT: %[[V0:[0-9]+]] = llvm.extractvalue %[[VMATRICES]][0]
// CHECK-NEXT: %[[V1:[0-9]+]] = llvm.extractvalue %[[VMATRICES]][1]
// CHECK-NEXT: llvm.extractvalue %[[VMATRICES]][2]
// CHECK-NEXT: llvm.extractvalue %[[VMATRICES]][3]
// CHECK-NEXT: nvvm.mma.sync A[%[[P0]], %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}]  B[%[[V0]], %[[V1]]]
// CHECK: scf.yield
// CHECK: scf.for
// CHECK-COUNT-64: nvvm.mma.sync {{.*}}shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// CHECK-NOT: nvvm.mma.sync
// CHECK: scf.yield
func.func @bf16(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

// -----

// f16: the same registers bitcast to vector<2xf16> operands, m16n8k16; no
// bf16 product.
// CHECK-LABEL: gpu.func @kiln_attention_mma_f16_d64(
// CHECK: scf.for
// CHECK: %[[A:[0-9]+]] = llvm.bitcast %{{[0-9]+}} : i32 to vector<2xf16>
// CHECK: nvvm.mma.sync A[%[[A]], %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}]  B[%{{[0-9]+}}, %{{[0-9]+}}]  C[%{{.*}}]  {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// CHECK-NOT: mma_type<bf16>
// CHECK: gpu.return
func.func @f16(%q: tensor<?x8x?x64xf16>, %k: tensor<?x2x?x64xf16>, %v: tensor<?x2x?x64xf16>) -> tensor<?x8x?x64xf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x8x?x64xf16>, tensor<?x2x?x64xf16>, tensor<?x2x?x64xf16> -> tensor<?x8x?x64xf16>
  return %o : tensor<?x8x?x64xf16>
}
