// RUN: kiln-opt %s -convert-kiln-to-gpu="hopper=1" | FileCheck %s
// RUN: kiln-opt %s -convert-kiln-to-gpu | FileCheck %s --check-prefix=MMA
// RUN: kiln-opt %s -convert-kiln-to-gpu="hopper=1" | FileCheck %s --check-prefix=SYNC
// RUN: kiln-opt %s -convert-kiln-to-gpu="hopper=1" | FileCheck %s --check-prefix=AHEAD
// RUN: kiln-opt %s -convert-kiln-to-gpu | FileCheck %s --check-prefix=AHEAD
// RUN: kiln-opt %s -convert-kiln-to-gpu="hopper=1" | FileCheck %s --check-prefix=UPPER

// A paged site (GQA 32/8, head dim 128, pages of 16) copies its K and V tiles
// by lines: a thread takes four consecutive rows, a 16-byte chunk of each of
// a row's two 128-byte lines, so eight cp.async a tile and four table-entry
// loads, one a row. On sm_90a the entries of the tile an iteration issues
// are loaded an iteration earlier, with no branch around the loads (ptxas
// turns a branch's results into register copies right after the loads, and
// the warps then wait there), and carried in the loop: its results end in
// four i32. The mma.sync variant (sm_80) loads them where it copies (the
// registers they would hold across a tile cost spills there).
// CHECK-LABEL: gpu.func @kiln_paged_attention_mma_bf16_d128_causal
// CHECK-COUNT-8: nvvm.cp.async.shared.global {{.*}}, 16, cache =  cg
// CHECK: scf.for {{.*}} -> (f32, {{.*}}, f32, i32, i32, i32, i32) {
// CHECK-NOT: scf.if
// CHECK-COUNT-4: llvm.load {{.*}} : !llvm.ptr<1> -> i32
// CHECK-NOT: llvm.load {{.*}} -> i32
// CHECK: scf.yield {{.*}} : f32, {{.*}}, f32, i32, i32, i32, i32
// MMA-LABEL: gpu.func @kiln_paged_attention_mma_bf16_d128_causal
// MMA-COUNT-4: llvm.load {{.*}} : !llvm.ptr<1> -> i32
// MMA-COUNT-8: nvvm.cp.async.shared.global {{.*}}, 16, cache =  cg
// MMA-NOT: scf.for {{.*}} i32, i32, i32, i32) {
// MMA: gpu.func @kiln_split_combine_bf16_dv128
// In decode mode a warp reads only its 16 keys of each tile, which are the
// rows its own threads copy by lines: the decode loop synchronises each warp
// on its own (bar.warp.sync where a tile arrives and where a stage is
// reused), with no block barrier; the loop of longer query blocks, whose
// warps read every row, keeps its block barriers.
// SYNC-LABEL: gpu.func @kiln_paged_attention_mma_bf16_d128_causal
// SYNC: scf.for {{.*}} i32, i32, i32, i32) {
// SYNC-NOT: gpu.barrier
// SYNC-COUNT-4: nvvm.bar.warp.sync
// SYNC-NOT: gpu.barrier
// SYNC: scf.yield {{.*}} i32, i32, i32, i32
// SYNC: scf.for {{.*}} i32, i32, i32, i32) {
// SYNC: gpu.barrier
// SYNC-NOT: nvvm.bar.warp.sync
// SYNC: gpu.func @kiln_split_combine_bf16_dv128
// On both targets the first tile's four table entries are read before the
// sequence's key count is used: for the range the block would have if the
// sequence filled its table row. Where the block's range starts there (a
// uniform branch) the copies take them, else they are read again.
// AHEAD-LABEL: gpu.func @kiln_paged_attention_mma_bf16_d128_causal
// AHEAD: %[[COUNT:.*]] = llvm.load {{.*}} : !llvm.ptr<1> -> i32
// AHEAD-NOT: %[[COUNT]]
// AHEAD-COUNT-4: llvm.load {{.*}} : !llvm.ptr<1> -> i32
// AHEAD: arith.index_cast %[[COUNT]]
// AHEAD: %[[GUESSED:.*]] = arith.cmpi eq, {{.*}} : index
// AHEAD-NEXT: scf.if %[[GUESSED]] -> (i32, i32, i32, i32) {
// AHEAD-NEXT: scf.yield
// AHEAD-NEXT: } else {
// AHEAD-COUNT-4: llvm.load {{.*}} : !llvm.ptr<1> -> i32
// AHEAD: gpu.func @kiln_split_combine_bf16_dv128
// The decode merge of the four warps' states stores, reads and merges the
// half of rows g + 8 (34 of 68 values a lane to store, 40 of 80 to read)
// only where the block has more than 8 rows (q_len · group > 8; a uniform
// branch).
// UPPER-LABEL: gpu.func @kiln_paged_attention_mma_bf16_d128_causal
// UPPER: %[[UPPER:.*]] = arith.cmpi ugt, {{.*}}, %c8{{.*}} : index
// UPPER-NEXT: nvvm.cp.async.wait.group 0
// UPPER-NEXT: gpu.barrier
// UPPER-COUNT-34: llvm.store {{.*}} : f32, !llvm.ptr<3>
// UPPER-NOT: llvm.store
// UPPER: scf.if %[[UPPER]] {
// UPPER-COUNT-34: llvm.store {{.*}} : f32, !llvm.ptr<3>
// UPPER-NOT: llvm.store
// UPPER: gpu.barrier
// UPPER-COUNT-40: llvm.load {{.*}} : !llvm.ptr<3> -> f32
// UPPER-NOT: llvm.load {{.*}} : !llvm.ptr<3> -> f32
// UPPER: scf.if %[[UPPER]] -> (f32,
// UPPER-COUNT-40: llvm.load {{.*}} : !llvm.ptr<3> -> f32
// UPPER-NOT: llvm.load {{.*}} : !llvm.ptr<3> -> f32
// UPPER: scf.yield
// UPPER: gpu.func @kiln_split_combine_bf16_dv128
func.func @paged(%q: tensor<?x32x?x128xbf16>, %kc: tensor<?x16x8x128xbf16>, %vc: tensor<?x16x8x128xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x32x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.0883883461 : f32} : tensor<?x32x?x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x32x?x128xbf16>
  return %o : tensor<?x32x?x128xbf16>
}
