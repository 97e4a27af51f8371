// The TF32 product of Schedules/Tf32/Tf32Kernel.cpp (Tf32Kernel::operand, mma
// and product; not yet a part of its own), on KernelBuilderBase::mmaSync
// with m16n8k8 TF32: f32 sites on tensor cores. By default each operand is
// split (3xTF32, f32's accuracy); allow-tf32 keeps one rounding and one
// product. Head dim 32, 32-key tiles: 16 products for S and 16 for P·V a
// tile.
// RUN: kiln-opt %s -convert-kiln-to-gpu > %t.split
// RUN: FileCheck %s --check-prefix=SPLIT < %t.split
// RUN: FileCheck %s --check-prefix=SPLITCOUNT < %t.split
// RUN: kiln-opt %s -convert-kiln-to-gpu="allow-tf32=1" > %t.plain
// RUN: FileCheck %s --check-prefix=PLAIN < %t.plain
// RUN: FileCheck %s --check-prefix=PLAINCOUNT < %t.plain

// Split: an element read from the shared K tile is rounded to TF32 (to
// nearest, ties away), and what that left (x - tf32(x), through a bitcast
// of the rounded bits) is rounded again. A product is three m16n8k8 mma
// with f32 accumulators, chained: A's low parts by B's high parts, A's
// high by B's low, then high by high (low · low is below f32's
// precision): 96 in all.
// SPLIT-LABEL: gpu.func @kiln_attention_3xtf32_f32_d32(
// SPLIT: scf.for
// SPLIT: %[[ELEMENT:[0-9]+]] = llvm.load %{{[0-9]+}} : !llvm.ptr<3> -> f32
// SPLIT-NEXT: %[[HIGH:[0-9]+]] = nvvm.convert.float.to.tf32 %[[ELEMENT]] {rnd = #nvvm.fp_rnd_mode<rna>}
// SPLIT-NEXT: %[[ROUNDED:[0-9]+]] = llvm.bitcast %[[HIGH]] : i32 to f32
// SPLIT-NEXT: %[[REST:[0-9]+]] = arith.subf %[[ELEMENT]], %[[ROUNDED]] : f32
// SPLIT-NEXT: %[[LOW:[0-9]+]] = nvvm.convert.float.to.tf32 %[[REST]] {rnd = #nvvm.fp_rnd_mode<rna>}
// SPLIT: %[[ELEMENT1:[0-9]+]] = llvm.load %{{[0-9]+}} : !llvm.ptr<3> -> f32
// SPLIT-NEXT: %[[HIGH1:[0-9]+]] = nvvm.convert.float.to.tf32 %[[ELEMENT1]]
// SPLIT-NEXT: llvm.bitcast %[[HIGH1]] : i32 to f32
// SPLIT-NEXT: arith.subf
// SPLIT-NEXT: %[[LOW1:[0-9]+]] = nvvm.convert.float.to.tf32
// SPLIT-NEXT: %[[LOWHIGH:[0-9]+]] = nvvm.mma.sync A[%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}]  B[%[[HIGH]], %[[HIGH1]]]  C[%{{.*}}]  {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, multiplicandAPtxType = #nvvm.mma_type<tf32>, multiplicandBPtxType = #nvvm.mma_type<tf32>, shape = #nvvm.shape<m = 16, n = 8, k = 8>} : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// SPLIT-NEXT: %[[C0:[0-9]+]] = llvm.extractvalue %[[LOWHIGH]][0]
// SPLIT-NEXT: %[[C1:[0-9]+]] = llvm.extractvalue %[[LOWHIGH]][1]
// SPLIT-NEXT: %[[C2:[0-9]+]] = llvm.extractvalue %[[LOWHIGH]][2]
// SPLIT-NEXT: %[[C3:[0-9]+]] = llvm.extractvalue %[[LOWHIGH]][3]
// SPLIT-NEXT: %[[HIGHLOW:[0-9]+]] = nvvm.mma.sync A[%[[AHIGH0:[0-9]+]], %[[AHIGH1:[0-9]+]], %[[AHIGH2:[0-9]+]], %[[AHIGH3:[0-9]+]]]  B[%[[LOW]], %[[LOW1]]]  C[%[[C0]], %[[C1]], %[[C2]], %[[C3]]]
// SPLIT-COUNT-4: llvm.extractvalue %[[HIGHLOW]]
// SPLIT-NEXT: nvvm.mma.sync A[%[[AHIGH0]], %[[AHIGH1]], %[[AHIGH2]], %[[AHIGH3]]]  B[%[[HIGH]], %[[HIGH1]]]
// SPLITCOUNT-LABEL: gpu.func @kiln_attention_3xtf32_f32_d32(
// SPLITCOUNT-COUNT-96: nvvm.mma.sync {{.*}}multiplicandAPtxType = #nvvm.mma_type<tf32>, multiplicandBPtxType = #nvvm.mma_type<tf32>, shape = #nvvm.shape<m = 16, n = 8, k = 8>}
// SPLITCOUNT-NOT: nvvm.mma.sync
// SPLITCOUNT: gpu.return

// allow-tf32: one rounding an operand (no residual anywhere), one mma a
// product: 32 in all.
// PLAIN-LABEL: gpu.func @kiln_attention_tf32_f32_d32(
// PLAIN-NOT: i32 to f32
// PLAIN: scf.for
// PLAIN: %[[ELEMENT:[0-9]+]] = llvm.load %{{[0-9]+}} : !llvm.ptr<3> -> f32
// PLAIN-NEXT: %[[HIGH:[0-9]+]] = nvvm.convert.float.to.tf32 %[[ELEMENT]] {rnd = #nvvm.fp_rnd_mode<rna>}
// PLAIN-NEXT: arith.constant
// PLAIN: llvm.load %{{[0-9]+}} : !llvm.ptr<3> -> f32
// PLAIN-NEXT: %[[HIGH1:[0-9]+]] = nvvm.convert.float.to.tf32
// PLAIN-NEXT: nvvm.mma.sync A[%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}]  B[%[[HIGH]], %[[HIGH1]]]  C[%{{.*}}]  {{.*}}shape = #nvvm.shape<m = 16, n = 8, k = 8>}
// PLAIN-COUNT-4: llvm.extractvalue
// PLAIN-NOT: nvvm.mma.sync A[%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}]  B[%[[HIGH]], %[[HIGH1]]]
// PLAIN-NOT: i32 to f32
// PLAIN: gpu.return
// PLAINCOUNT-LABEL: gpu.func @kiln_attention_tf32_f32_d32(
// PLAINCOUNT-COUNT-32: nvvm.mma.sync {{.*}}multiplicandAPtxType = #nvvm.mma_type<tf32>, multiplicandBPtxType = #nvvm.mma_type<tf32>, shape = #nvvm.shape<m = 16, n = 8, k = 8>}
// PLAINCOUNT-NOT: nvvm.mma.sync
// PLAINCOUNT: gpu.return
func.func @f32(%q: tensor<1x4x?x32xf32>, %k: tensor<1x4x?x32xf32>, %v: tensor<1x4x?x32xf32>) -> tensor<1x4x?x32xf32> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32>, tensor<1x4x?x32xf32> -> tensor<1x4x?x32xf32>
  return %o : tensor<1x4x?x32xf32>
}
