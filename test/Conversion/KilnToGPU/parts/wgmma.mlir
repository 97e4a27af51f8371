// Products/Wgmma.cpp: wgmmaDescriptor and wgmmaProduct (swizzledOffset is
// checked with the tile copies, tile-copy.mlir): the sm_90a variant of the
// tensor-core kernel, chosen by the rules at head dim 64 with hopper=1,
// computes a full tile's S = Q·Kᵀ and O += P·V as warpgroup products in
// inline PTX.
// RUN: kiln-opt %s -convert-kiln-to-gpu="hopper=1" | FileCheck %s

// The decode loop (16 keys a warp) stays on mma.sync. In the loop over full
// tiles, S is four m64n64k16 bf16 products (one per 16 head dims), both
// operands from shared memory: a descriptor is the tile's address (+ the
// chunk's 32 bytes), its bits 4-17 in bits 0-13, ORed with a leading byte
// offset of 16 (>> 4 in bits 16-29), a stride of 1024 (>> 4 in bits 32-45)
// and the 128-byte swizzle (bit 62); scale-d comes from a predicate, B is
// not transposed. P·V takes A from registers (four i32, the packed P) and
// V's descriptor (leading offset 8192: a 64-dim slab; 16 keys = 2048 bytes
// a step), B transposed. Each group of products is fenced, committed and
// waited for.
// CHECK-LABEL: gpu.func @kiln_attention_mma_bf16_d64(
// CHECK-SAME: schedule = {blocks_per_sm = 3 : i64, from = "table", variant = "wgmma"}
// CHECK: scf.for
// CHECK-NOT: wgmma
// CHECK: nvvm.mma.sync
// CHECK-NOT: wgmma
// CHECK: scf.yield
// CHECK: scf.for
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-NEXT: %[[ADDRESS:[0-9]+]] = llvm.ptrtoint %{{[0-9]+}} : !llvm.ptr<3> to i64
// CHECK-NEXT: %[[OFFSET:.*]] = arith.constant 0 : i64
// CHECK-NEXT: %[[START:[0-9]+]] = arith.addi %[[ADDRESS]], %[[OFFSET]] : i64
// CHECK-NEXT: %[[FIELD:.*]] = arith.constant 16383 : i64
// CHECK-NEXT: %[[FOUR:.*]] = arith.constant 4 : i64
// CHECK-NEXT: %[[SHIFTED:[0-9]+]] = arith.shrui %[[START]], %[[FOUR]] : i64
// CHECK-NEXT: %[[LOW:[0-9]+]] = arith.andi %[[SHIFTED]], %[[FIELD]] : i64
// CHECK-NEXT: %[[FIXED:.*]] = arith.constant 4611686293305360384 : i64
// CHECK-NEXT: arith.ori %[[LOW]], %[[FIXED]] : i64
// CHECK: llvm.inline_asm has_side_effects asm_dialect = att "{\0A.reg .pred p;\0Asetp.ne.b32 p, $66, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {$0, {{.*}}, $31}, $64, $65, p, 1, 1, 0, 0;\0A}", "=f,{{.*}},31,l,l,r"
// CHECK: arith.constant 32 : i64
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK-NEXT: llvm.extractvalue
// CHECK-NOT: wgmma.mma_async
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: llvm.fptrunc %{{[0-9]+}} : vector<2xf32> to vector<2xbf16>
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-NEXT: llvm.ptrtoint %{{[0-9]+}} : !llvm.ptr<3> to i64
// CHECK-NEXT: %[[VOFFSET:.*]] = arith.constant 0 : i64
// CHECK: %[[VFIXED:.*]] = arith.constant 4611686293338849280 : i64
// CHECK-NEXT: %[[VDESCRIPTOR:[0-9]+]] = arith.ori %{{[0-9]+}}, %[[VFIXED]] : i64
// CHECK-NEXT: %[[SCALED:.*]] = arith.constant 1 : i32
// CHECK-NEXT: llvm.inline_asm has_side_effects asm_dialect = att "{\0A.reg .pred p;\0Asetp.ne.b32 p, $69, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {$0, {{.*}}, $31}, {$64, $65, $66, $67}, $68, p, 1, 1, 1;\0A}", "=f,{{.*}},31,r,r,r,r,l,r" {{.*}}, %[[VDESCRIPTOR]], %[[SCALED]] : (
// CHECK: arith.constant 2048 : i64
// CHECK: {$64, $65, $66, $67}, $68, p, 1, 1, 1;
// CHECK: arith.constant 4096 : i64
// CHECK: {$64, $65, $66, $67}, $68, p, 1, 1, 1;
// CHECK: arith.constant 6144 : i64
// CHECK: {$64, $65, $66, $67}, $68, p, 1, 1, 1;
// CHECK-NOT: wgmma.mma_async
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
func.func @hopper(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}
