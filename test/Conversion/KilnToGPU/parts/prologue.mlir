// Parts/Prologue.cpp: AttentionKernelBuilder::build, bindArguments,
// scheduleBlock (and orderHeaviestFirst), bindHeads and bindQueries. The same
// two GQA sites (8 query heads over 2 KV heads) on the scalar kernel (one
// head a block), the tensor-core kernel (a KV head's query group a block)
// and, on sm_90a, with its split cluster and the warp-specialised kernel.
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu="tensor-cores=0" | FileCheck %s --check-prefix=SCALAR
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu | FileCheck %s --check-prefix=MMA
// RUN: kiln-opt %s -split-input-file -convert-kiln-to-gpu="hopper=1" | FileCheck %s --check-prefix=HOPPER

// Without a causal mask blocks run in grid order. The scale is bound in
// log2 units (scale · log2(e)). Scalar kernel: grid y is the query head and
// the KV head is head / group, group = q_heads / kv_heads, in 32 bits; Q's
// base is the head's, 16 rows a block. Tensor-core kernel: grid y is the KV
// head itself (K's base takes block y undivided), the block's 64 rows are
// (query, head) pairs, so its queries run from row / group to
// ceil(row end / group); grid z is split-major (split = z / batch,
// sequence = z % batch), and without clusters (sm_80) neither a cluster
// size nor griddepcontrol is read.
// SCALAR-LABEL: gpu.func @kiln_attention_bf16_d64(
// SCALAR-SAME: %[[SCALE:arg9]]: f32
// SCALAR: %[[QHEADS:[0-9]+]] = arith.index_cast %arg5 : i32 to index
// SCALAR-NEXT: %[[KVHEADS:[0-9]+]] = arith.index_cast %arg6 : i32 to index
// SCALAR: %[[LOG2E:.*]] = arith.constant 1.44269502 : f32
// SCALAR-NEXT: arith.mulf %[[SCALE]], %[[LOG2E]] : f32
// SCALAR-NEXT: %[[BX:block_id_x]] = gpu.block_id  x
// SCALAR-NEXT: %[[BY:block_id_y]] = gpu.block_id  y
// SCALAR-NOT: gpu.grid_dim
// SCALAR: %[[KV32:[0-9]+]] = arith.index_cast %[[KVHEADS]] : index to i32
// SCALAR-NEXT: %[[Q32:[0-9]+]] = arith.index_cast %[[QHEADS]] : index to i32
// SCALAR-NEXT: %[[GROUP:[0-9]+]] = arith.divui %[[Q32]], %[[KV32]] : i32
// SCALAR: %[[HEAD32:[0-9]+]] = arith.index_cast %[[BY]] : index to i32
// SCALAR-NEXT: arith.divui %[[HEAD32]], %{{[0-9]+}} : i32
// SCALAR: %[[HEAD64:[0-9]+]] = arith.index_cast %[[BY]] : index to i64
// SCALAR-NEXT: arith.muli %[[HEAD64]], %arg11 : i64
// SCALAR: arith.muli %[[BX]], %c16 : index
// SCALAR: scf.for
// MMA-LABEL: gpu.func @kiln_attention_mma_bf16_d64(
// MMA: %[[BATCH:[0-9]+]] = arith.index_cast %arg4 : i32 to index
// MMA: %[[BX:block_id_x]] = gpu.block_id  x
// MMA-NEXT: %[[BY:block_id_y]] = gpu.block_id  y
// MMA-NEXT: %[[BZ:block_id_z]] = gpu.block_id  z
// MMA-NEXT: %[[B32:[0-9]+]] = arith.index_cast %[[BATCH]] : index to i32
// MMA-NEXT: %[[Z32:[0-9]+]] = arith.index_cast %[[BZ]] : index to i32
// MMA-NEXT: arith.divui %[[Z32]], %[[B32]] : i32
// MMA: arith.remui %{{[0-9]+}}, %{{[0-9]+}} : i32
// MMA-NOT: nvvm.read.ptx.sreg.cluster.nctarank
// MMA-NOT: nvvm.griddepcontrol
// MMA: %[[GROUP:[0-9]+]] = arith.divui %{{[0-9]+}}, %{{[0-9]+}} : i32
// MMA-NEXT: %[[GROUPX:[0-9]+]] = arith.index_cast %[[GROUP]] : i32 to index
// MMA-NEXT: %[[KVHEAD:[0-9]+]] = arith.index_cast %[[BY]] : index to i64
// MMA-NEXT: arith.muli %[[KVHEAD]], %arg14 : i64
// MMA: %[[FIRSTROW:[0-9]+]] = arith.muli %[[BX]], %c64 : index
// MMA-NEXT: %{{.*}} = arith.constant 64 : index
// MMA-NEXT: %[[ENDROW:[0-9]+]] = arith.addi %[[FIRSTROW]], %{{.*}} : index
// MMA-NEXT: %[[G1:[0-9]+]] = arith.index_cast %[[GROUPX]] : index to i32
// MMA-NEXT: %[[R1:[0-9]+]] = arith.index_cast %[[FIRSTROW]] : index to i32
// MMA-NEXT: arith.divui %[[R1]], %[[G1]] : i32
// MMA-NEXT: arith.index_cast
// MMA-NEXT: %[[G2:[0-9]+]] = arith.index_cast %[[GROUPX]] : index to i32
// MMA-NEXT: %[[R2:[0-9]+]] = arith.index_cast %[[ENDROW]] : index to i32
// MMA-NEXT: arith.ceildivui %[[R2]], %[[G2]] : i32
// MMA-NOT: nvvm.griddepcontrol
// MMA: gpu.return
// HOPPER-LABEL: gpu.func @kiln_attention_mma_bf16_d64(
// HOPPER-SAME: %[[SPLITS:arg22]]: i32
// HOPPER: %[[NUMSPLITS:[0-9]+]] = arith.index_cast %[[SPLITS]] : i32 to index
// HOPPER: %[[BZ:block_id_z]] = gpu.block_id  z
// HOPPER: %[[CLUSTER:[0-9]+]] = nvvm.read.ptx.sreg.cluster.nctarank : i32
// HOPPER-NEXT: %[[ONE:.*]] = arith.constant 1 : i32
// HOPPER-NEXT: %[[CLUSTERED:[0-9]+]] = arith.cmpi ugt, %[[CLUSTER]], %[[ONE]] : i32
// HOPPER-NEXT: %[[S32:[0-9]+]] = arith.index_cast %[[NUMSPLITS]] : index to i32
// HOPPER-NEXT: %[[Z32:[0-9]+]] = arith.index_cast %[[BZ]] : index to i32
// HOPPER-NEXT: arith.remui %[[Z32]], %[[S32]] : i32
// HOPPER-NEXT: %[[SPLITMINOR:[0-9]+]] = arith.index_cast
// HOPPER-NEXT: arith.select %[[CLUSTERED]], %[[SPLITMINOR]], %{{[0-9]+}} : index
// HOPPER: arith.divui %{{[0-9]+}}, %{{[0-9]+}} : i32
// HOPPER-NEXT: %[[SEQUENCE:[0-9]+]] = arith.index_cast
// HOPPER-NEXT: arith.select %[[CLUSTERED]], %[[SEQUENCE]], %{{[0-9]+}} : index
// HOPPER-NEXT: nvvm.griddepcontrol  wait
// HOPPER-NEXT: gpu.thread_id  x
// HOPPER: nvvm.griddepcontrol  launch_dependents
// HOPPER-NEXT: gpu.return
// HOPPER-LABEL: gpu.func @kiln_attention_ws_bf16_d64(
// HOPPER-NOT: gpu.grid_dim
// HOPPER: nvvm.griddepcontrol  wait
// HOPPER-NOT: nvvm.griddepcontrol  launch_dependents
// HOPPER: gpu.return
func.func @plain(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}

// -----

// A causal mask makes the last query blocks the heaviest: the portable
// kernels run query block (grid x - 1 - block x). The warp-specialised
// kernel renumbers the whole grid instead (orderHeaviestFirst, in 32 bits):
// the linear block index over grid x·y·z, sections of as many heads as fit
// K and V in 16 MiB (16384 KiB over each head's KiB), and within a section
// the heaviest query block first.
// SCALAR-LABEL: gpu.func @kiln_attention_bf16_d64_causal(
// SCALAR: %[[BX:block_id_x]] = gpu.block_id  x
// SCALAR: %[[GX:grid_dim_x]] = gpu.grid_dim  x
// SCALAR-NEXT: %[[ONE:.*]] = arith.constant 1 : index
// SCALAR-NEXT: %[[LAST:[0-9]+]] = arith.subi %[[GX]], %[[ONE]] : index
// SCALAR-NEXT: %[[QBLOCK:[0-9]+]] = arith.subi %[[LAST]], %[[BX]] : index
// SCALAR: arith.muli %[[QBLOCK]], %c16 : index
// MMA-LABEL: gpu.func @kiln_attention_mma_bf16_d64_causal(
// MMA: %[[BX:block_id_x]] = gpu.block_id  x
// MMA: %[[GX:grid_dim_x]] = gpu.grid_dim  x
// MMA-NEXT: %[[ONE:.*]] = arith.constant 1 : index
// MMA-NEXT: %[[LAST:[0-9]+]] = arith.subi %[[GX]], %[[ONE]] : index
// MMA-NEXT: %[[QBLOCK:[0-9]+]] = arith.subi %[[LAST]], %[[BX]] : index
// MMA: arith.muli %[[QBLOCK]], %c64 : index
// HOPPER-LABEL: gpu.func @kiln_attention_ws_bf16_d64_causal(
// HOPPER: %[[BX:block_id_x]] = gpu.block_id  x
// HOPPER-NEXT: %[[BY:block_id_y]] = gpu.block_id  y
// HOPPER-NEXT: %[[BZ:block_id_z]] = gpu.block_id  z
// HOPPER-NEXT: %[[GX:grid_dim_x]] = gpu.grid_dim  x
// HOPPER-NEXT: %[[BLOCKS:[0-9]+]] = arith.index_cast %[[GX]] : index to i32
// HOPPER-NEXT: %[[GY:grid_dim_y]] = gpu.grid_dim  y
// HOPPER-NEXT: %[[HEADS:[0-9]+]] = arith.index_cast %[[GY]] : index to i32
// HOPPER-NEXT: gpu.grid_dim  z
// HOPPER-NEXT: %[[BATCHES:[0-9]+]] = arith.index_cast
// HOPPER-NEXT: %[[PAIRS:[0-9]+]] = arith.muli %[[HEADS]], %[[BATCHES]] : i32
// HOPPER: %[[SECTIONKIB:.*]] = arith.constant 16384 : i32
// HOPPER-NEXT: arith.divui %[[SECTIONKIB]], %{{[0-9]+}} : i32
// HOPPER-NEXT: arith.maxui
// HOPPER-NEXT: %[[SECTIONHEADS:[0-9]+]] = arith.minui %[[PAIRS]], %{{[0-9]+}} : i32
// HOPPER-NEXT: arith.muli %[[SECTIONHEADS]], %[[BLOCKS]] : i32
// HOPPER: %[[HERE:[0-9]+]] = arith.minui %[[SECTIONHEADS]], %{{[0-9]+}} : i32
// HOPPER-NEXT: %[[ORDER:[0-9]+]] = arith.divui %{{[0-9]+}}, %[[HERE]] : i32
// HOPPER-NEXT: %[[PAIR:[0-9]+]] = arith.remui %{{[0-9]+}}, %[[HERE]] : i32
// HOPPER-NEXT: %[[PAIRINDEX:[0-9]+]] = arith.addi %{{[0-9]+}}, %[[PAIR]] : i32
// HOPPER-NEXT: %[[ORDERX:[0-9]+]] = arith.index_cast %[[ORDER]] : i32 to index
// HOPPER-NEXT: %[[ONE:.*]] = arith.constant 1 : index
// HOPPER-NEXT: %[[BLOCKSX:[0-9]+]] = arith.index_cast %[[BLOCKS]] : i32 to index
// HOPPER-NEXT: %[[LAST:[0-9]+]] = arith.subi %[[BLOCKSX]], %[[ONE]] : index
// HOPPER-NEXT: arith.subi %[[LAST]], %[[ORDERX]] : index
// HOPPER-NEXT: arith.remui %[[PAIRINDEX]], %[[HEADS]] : i32
// HOPPER-NEXT: arith.index_cast
// HOPPER-NEXT: arith.divui %[[PAIRINDEX]], %[[HEADS]] : i32
// HOPPER-NEXT: arith.index_cast
// HOPPER-NEXT: nvvm.griddepcontrol  wait
func.func @causal(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>) -> tensor<?x8x?x64xbf16> {
  %o = kiln.attention %q, %k, %v {causal, scale = 0.125 : f32} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>
  return %o : tensor<?x8x?x64xbf16>
}
