// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu -verify-diagnostics | FileCheck %s

// A bf16 causal GQA site gets the tensor-core kernel: K and V tiles of 64
// keys of 64 + 8 elements, two stages of each, in the module's dynamic shared
// memory (sized for the sm_90a variant's five unpadded tiles, the larger);
// 64 rows per block, each a (query, head) pair of a KV head's group.
// Q (its first 16 rows for decode shapes, q_len · group ≤ 16, all 64
// otherwise) and then the first K tile are copied with cp.async (element
// loads and 16-byte stores when a view is not 16-byte aligned), a commit
// group each; once Q's group is done it is read into ldmatrix A fragments;
// then the first V and the second K and V start. In the loop over 64-key
// tiles: wait for K (three newer groups may still be in flight), Q·Kᵀ as
// m16n8k16 bf16 mma.sync with f32 accumulators, start the K tile after next,
// masking only on tiles that need it, quad shuffles for the row reductions,
// wait for V, P·V with V through ldmatrix.trans, start the V tile after next.
// The loop is emitted twice: first for decode shapes (the warps split each
// tile's keys, then merge their states through shared memory), then for the
// rest.
// CHECK-LABEL: func.func @causal
// CHECK: kiln.attention {{.*}}kiln.kernel = @kiln_kernels::@kiln_attention_mma_bf16_d64_causal, kiln.site = "attention_0"
// CHECK: gpu.module @kiln_kernels
// CHECK: llvm.mlir.global external @kiln_dynamic_shared() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
// CHECK: gpu.func @kiln_attention_mma_bf16_d64_causal(
// CHECK-SAME: kiln.kernel_info = {{{.*}}dynamic_shared_bytes = 40960 : i64, grid = {blocks = "packed_query_blocks", times_splits = true}, kind = "attention", kv_block_size = 64 : i64, packs_query_heads = true, rows_per_block = 64 : i64, schedule = {blocks_per_sm = 3 : i64, from = "rule", variant = "mma.sync"}, static_shared_bytes = 0 : i64, threads_per_block = 128 : i64
// CHECK: arith.cmpi ule
// CHECK: scf.if
// CHECK: scf.if
// CHECK: nvvm.cp.async.shared.global {{.*}}, 16, cache =  cg, {{.*}} : !llvm.ptr<3>, !llvm.ptr<1>, i32
// CHECK: } else {
// CHECK: llvm.load {{.*}} : !llvm.ptr<1> -> bf16
// CHECK: llvm.store {{.*}} {alignment = 16 : i64} : vector<8xbf16>, !llvm.ptr<3>
// CHECK: } else {
// CHECK: nvvm.cp.async.commit.group
// CHECK: scf.if
// CHECK: scf.if
// CHECK: nvvm.cp.async.shared.global {{.*}}, 16, cache =  cg, {{.*}} : !llvm.ptr<3>, !llvm.ptr<1>, i32
// CHECK: } else {
// CHECK: nvvm.cp.async.commit.group
// CHECK-NEXT: nvvm.cp.async.wait.group 1
// CHECK: gpu.barrier
// CHECK: nvvm.ldmatrix {{.*}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<row>, num = 4 : i32, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>}
// CHECK: gpu.barrier
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.cp.async.commit.group
// CHECK: scf.if {{.*}} -> (f32,
// CHECK: scf.for
// CHECK: nvvm.cp.async.wait.group 3
// CHECK-NEXT: gpu.barrier
// CHECK: nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[{{.*}}] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// CHECK: gpu.barrier
// CHECK: nvvm.cp.async.shared.global
// CHECK: nvvm.cp.async.commit.group
// CHECK: scf.if
// CHECK: arith.cmpi sle
// CHECK: } else {
// CHECK: gpu.shuffle  xor
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK: nvvm.cp.async.wait.group 3
// CHECK-NEXT: gpu.barrier
// CHECK: llvm.fptrunc {{.*}} : vector<2xf32> to vector<2xbf16>
// CHECK: nvvm.ldmatrix {{.*}} layout = #nvvm.mma_layout<col>
// CHECK: nvvm.mma.sync
// CHECK: gpu.barrier
// CHECK: nvvm.cp.async.shared.global
// CHECK: nvvm.cp.async.commit.group
// CHECK: scf.yield
// CHECK: nvvm.cp.async.wait.group 0
// CHECK: llvm.store {{.*}} : f32, !llvm.ptr<3>
// CHECK: gpu.barrier
// CHECK: llvm.load {{.*}} : !llvm.ptr<3> -> f32
// CHECK: } else {
// CHECK: scf.for
// CHECK: nvvm.cp.async.wait.group 0
// CHECK: arith.truncf {{.*}} : f32 to bf16
// CHECK: llvm.store {{.*}} : bf16, !llvm.ptr<1>
func.func @causal(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

// -----

// f16 operands are passed to mma.sync as vector<2xf16>. A site with a mask
// reads its mask for every score. Head dim 48 is a multiple of 16: only
// the tensor-core kernel takes it. f32 sites get the TF32 kernel with split
// operands: each operand rounded to TF32 and what is left rounded again, each
// product three m16n8k8 mma, f32 accumulation.
// CHECK-LABEL: func.func @mixed
// CHECK: kiln.kernel = @kiln_kernels::@kiln_attention_mma_f16_d48_maskf32
// CHECK: kiln.kernel = @kiln_kernels::@kiln_attention_3xtf32_f32_d64
// CHECK: llvm.mlir.global external @kiln_dynamic_shared()
// CHECK-NOT: llvm.mlir.global
// CHECK: gpu.func @kiln_attention_mma_f16_d48_maskf32(
// CHECK: nvvm.mma.sync {{.*}} : (vector<2xf16>, vector<2xf16>, f32)
// CHECK: llvm.load {{.*}} : !llvm.ptr<1> -> f32
// CHECK: nvvm.ldmatrix {{.*}} layout = #nvvm.mma_layout<col>
// CHECK: gpu.func @kiln_attention_3xtf32_f32_d64(
// CHECK: nvvm.convert.float.to.tf32 {{.*}} {rnd = #nvvm.fp_rnd_mode<rna>}
// CHECK: arith.subf
// CHECK: nvvm.convert.float.to.tf32
// CHECK-COUNT-3: nvvm.mma.sync {{.*}} multiplicandAPtxType = #nvvm.mma_type<tf32>, multiplicandBPtxType = #nvvm.mma_type<tf32>, shape = #nvvm.shape<m = 16, n = 8, k = 8>
// CHECK: gpu.return
func.func @mixed(%q: tensor<1x4x?x48xf16>, %k: tensor<1x4x?x48xf16>, %v: tensor<1x4x?x48xf16>, %m: tensor<1x1x?x?xf32>, %q2: tensor<1x4x9x64xf32>) -> (tensor<1x4x?x48xf16>, tensor<1x4x9x64xf32>) {
  %0 = kiln.attention %q, %k, %v mask(%m : tensor<1x1x?x?xf32>) {scale = 0.125 : f32} : tensor<1x4x?x48xf16>, tensor<1x4x?x48xf16>, tensor<1x4x?x48xf16> -> tensor<1x4x?x48xf16>
  %1 = kiln.attention %q2, %q2, %q2 {scale = 0.125 : f32} : tensor<1x4x9x64xf32>, tensor<1x4x9x64xf32>, tensor<1x4x9x64xf32> -> tensor<1x4x9x64xf32>
  return %0, %1 : tensor<1x4x?x48xf16>, tensor<1x4x9x64xf32>
}

