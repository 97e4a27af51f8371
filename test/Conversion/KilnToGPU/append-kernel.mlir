// Schedules/Append/AppendKernel.cpp: every paged site brings the append kernel of
// its caches (dtype and head dims), one block a new token. The block finds
// its sequence by a binary search of new_offsets (bit_width(batch) halving
// steps, ctlz of the batch), places token t of sequence b at kv_lens[b] -
// n_b + (t - first), and writes only where that place lies in the caches:
// t inside its sequence's offsets, a position from 0, a page entry below
// max_pages, a page inside [0, num_pages). The threads copy the token's
// Hkv x 64 key elements, then its value elements.
// RUN: kiln-opt %s -convert-kiln-to-gpu | FileCheck %s

// CHECK-LABEL: gpu.func @kiln_paged_attention_mma_bf16_d64_causal(
// CHECK-SAME: kiln.kernel_info = {append_kernel = "kiln_paged_append_bf16_d64"
// CHECK-LABEL: gpu.func @kiln_paged_append_bf16_d64(
// CHECK-SAME: arg_names = ["new_keys", "new_values", "key_cache", "value_cache", "page_table", "kv_lens", "new_offsets", "batch", "kv_heads", "total_new", "max_pages", "num_pages", "page_size",
// CHECK-SAME: kind = "paged_append"
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// CHECK: %[[TOKEN:block_id_x]] = gpu.block_id  x
// CHECK: %[[CLZ:[0-9]+]] = "llvm.intr.ctlz"
// CHECK-NEXT: %[[C32:.*]] = arith.constant 32 : i32
// CHECK-NEXT: %[[STEPS:[0-9]+]] = arith.subi %[[C32]], %[[CLZ]] : i32
// CHECK: %[[SEARCH:[0-9]+]]:2 = scf.for
// CHECK: arith.shrui
// CHECK: llvm.load %{{[0-9]+}} : !llvm.ptr<1> -> i32
// CHECK-NEXT: %[[STARTS:[0-9]+]] = arith.cmpi sle
// CHECK-NEXT: arith.select %[[STARTS]]
// CHECK-NEXT: arith.select %[[STARTS]]
// CHECK: %[[POSITION:[0-9]+]] = arith.addi %{{[0-9]+}}, %{{[0-9]+}} : i64
// CHECK: %[[ENTRY:[0-9]+]] = arith.divsi %[[POSITION]], %{{[0-9]+}} : i64
// CHECK: arith.cmpi slt, %[[ENTRY]], %{{[0-9]+}} : i64
// CHECK: arith.cmpi sge, %[[POSITION]], %{{.*}} : i64
// CHECK: scf.if
// CHECK: %[[PAGE:[0-9]+]] = llvm.load %{{[0-9]+}} : !llvm.ptr<1> -> i32
// CHECK: arith.cmpi sge, %[[PAGE]]
// CHECK: scf.if
// CHECK: arith.remsi %[[POSITION]]
// CHECK: scf.for %{{.*}} = %thread_id_x to %{{[0-9]+}} step %c128
// CHECK: %[[KEY:[0-9]+]] = llvm.load %{{[0-9]+}} : !llvm.ptr<1> -> bf16
// CHECK: llvm.store %[[KEY]]
// CHECK: scf.for %{{.*}} = %thread_id_x to %{{[0-9]+}} step %c128
// CHECK: %[[VALUE:[0-9]+]] = llvm.load %{{[0-9]+}} : !llvm.ptr<1> -> bf16
// CHECK: llvm.store %[[VALUE]]
// CHECK: gpu.return
func.func @paged(%q: tensor<?x8x?x64xbf16>, %kc: tensor<?x16x2x64xbf16>, %vc: tensor<?x16x2x64xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x16x2x64xbf16>, tensor<?x16x2x64xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}
