// Schedules/Mma/PagedAddress.cpp: MmaKernel::pageLookup, lineKeys, loadEntry,
// loadPages, planPagedChunks and readAhead (with the paged arguments that
// Prologue.cpp's bindArguments and build bind for them): where a key of a
// paged cache lives, in 32-bit arithmetic. A causal GQA site at head dim
// 128 (whole 128-byte lines, four rows a thread).
// RUN: kiln-opt %s -convert-kiln-to-gpu | FileCheck %s

// The page size is a power of two: its shift is 31 - ctlz and its mask
// size - 1. The sequence's key count, kv_lens[sequence], is the first load.
// The thread's four rows of the first tile (keys first + 4·(thread / 8) +
// 0..3, each clamped to the last key the table row can address) read their
// entries ahead: entry = min(key >> shift, max_pages - 1) at page_table +
// sequence · stride + entry, all i32 but the final offset. Only then is the
// key count clamped to [0, max_pages · page_size]. Where a chunk is copied,
// a key's row starts at page · stride_page + (key & mask) · stride_slot,
// the page clamped to [0, num_pages - 1].
// CHECK-LABEL: gpu.func @kiln_paged_attention_mma_bf16_d128_causal(
// CHECK-SAME: %[[TABLE:arg4]]: !llvm.ptr<1>, %[[LENS:arg5]]: !llvm.ptr<1>
// CHECK: %[[MAXPAGES:[0-9]+]] = arith.index_cast %arg10 : i32 to index
// CHECK-NEXT: %[[NUMPAGES:[0-9]+]] = arith.index_cast %arg11 : i32 to index
// CHECK-NEXT: %[[PAGESIZE:[0-9]+]] = arith.index_cast %[[PAGESIZEARG:arg12]] : i32 to index
// CHECK-NEXT: %[[LEADING:[0-9]+]] = "llvm.intr.ctlz"(%[[PAGESIZEARG]]) <{is_zero_poison = false}> : (i32) -> i32
// CHECK-NEXT: %[[BITS:.*]] = arith.constant 31 : i32
// CHECK-NEXT: %[[SHIFT:[0-9]+]] = arith.subi %[[BITS]], %[[LEADING]] : i32
// CHECK-NEXT: %[[SHIFTX:[0-9]+]] = arith.index_cast %[[SHIFT]] : i32 to index
// CHECK-NEXT: %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT: %[[MASK:[0-9]+]] = arith.subi %[[PAGESIZE]], %[[ONE]] : index
// CHECK: %[[SEQUENCE:[0-9]+]] = arith.index_cast %{{[0-9]+}} : index to i64
// CHECK-NEXT: %[[COUNTADDRESS:[0-9]+]] = llvm.getelementptr %[[LENS]][%[[SEQUENCE]]] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, i32
// CHECK-NEXT: %[[COUNT:[0-9]+]] = llvm.load %[[COUNTADDRESS]] : !llvm.ptr<1> -> i32
// CHECK-NEXT: gpu.thread_id  x
// CHECK: %[[FULLROW:[0-9]+]] = arith.muli %[[MAXPAGES]], %[[PAGESIZE]] : index
// CHECK: %[[ENTRIESLEFT:[0-9]+]] = arith.subi %[[MAXPAGES]], %{{.*}} : index
// CHECK-NEXT: %[[LASTENTRYX:[0-9]+]] = arith.maxsi %[[ENTRIESLEFT]], %{{.*}} : index
// CHECK-NEXT: arith.constant 0 : index
// CHECK-NEXT: arith.constant 1 : index
// CHECK-NEXT: arith.subi %[[NUMPAGES]], %{{.*}} : index
// CHECK-NEXT: arith.maxsi
// CHECK-NEXT: arith.index_cast %{{[0-9]+}} : index to i32
// CHECK-NEXT: arith.index_cast %[[FULLROW]] : index to i32
// CHECK-NEXT: %[[LASTROW:[0-9]+]] = arith.index_cast %{{[0-9]+}} : index to i32
// CHECK-NEXT: %[[LASTENTRY:[0-9]+]] = arith.index_cast %[[LASTENTRYX]] : index to i32
// CHECK-NEXT: %[[SHIFT32:[0-9]+]] = arith.index_cast %[[SHIFTX]] : index to i32
// CHECK-NEXT: arith.index_cast %[[MASK]] : index to i32
// CHECK-NEXT: %[[SEQUENCE64:[0-9]+]] = arith.index_cast %{{[0-9]+}} : index to i64
// CHECK-NEXT: %[[TABLEROW:[0-9]+]] = arith.muli %[[SEQUENCE64]], %arg26 : i64
// CHECK-NEXT: %[[LINEROWS:.*]] = arith.constant 4 : index
// CHECK-NEXT: %[[LINECHUNKS:.*]] = arith.constant 8 : index
// CHECK-NEXT: %[[LINEGROUP:[0-9]+]] = arith.divui %thread_id_x, %[[LINECHUNKS]] : index
// CHECK-NEXT: arith.muli %[[LINEGROUP]], %[[LINEROWS]] : index
// CHECK-NEXT: arith.index_cast
// CHECK-NEXT: %[[FIRSTKEY:[0-9]+]] = arith.addi %{{[0-9]+}}, %{{[0-9]+}} : i32
// CHECK-COUNT-4: arith.minsi %{{[0-9]+}}, %[[LASTROW]] : i32
// CHECK-NEXT: %[[ENTRYINDEX:[0-9]+]] = arith.shrui %{{[0-9]+}}, %[[SHIFT32]] : i32
// CHECK-NEXT: %[[ENTRY:[0-9]+]] = arith.minsi %[[ENTRYINDEX]], %[[LASTENTRY]] : i32
// CHECK-NEXT: %[[ENTRY64:[0-9]+]] = arith.extui %[[ENTRY]] : i32 to i64
// CHECK-NEXT: %[[ENTRYOFFSET:[0-9]+]] = arith.addi %[[TABLEROW]], %[[ENTRY64]] : i64
// CHECK-NEXT: %[[ENTRYADDRESS:[0-9]+]] = llvm.getelementptr %[[TABLE]][%[[ENTRYOFFSET]]] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, i32
// CHECK-NEXT: llvm.load %[[ENTRYADDRESS]] : !llvm.ptr<1> -> i32
// CHECK-COUNT-3: llvm.load %{{[0-9]+}} : !llvm.ptr<1> -> i32
// CHECK-NEXT: %[[ZERO:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[COUNTX:[0-9]+]] = arith.index_cast %[[COUNT]] : i32 to index
// CHECK-NEXT: %[[POSITIVE:[0-9]+]] = arith.maxsi %[[COUNTX]], %[[ZERO]] : index
// CHECK-NEXT: %[[KVLEN:[0-9]+]] = arith.minsi %[[POSITIVE]], %[[FULLROW]] : index
// CHECK: %[[NONNEGATIVE:[0-9]+]] = arith.maxsi %{{[0-9#]+}}, %{{.*}} : i32
// CHECK-NEXT: %[[PAGE:[0-9]+]] = arith.minsi %[[NONNEGATIVE]], %{{[0-9]+}} : i32
// CHECK-NEXT: %[[SLOT:[0-9]+]] = arith.andi %{{[0-9]+}}, %{{[0-9]+}} : i32
// CHECK-NEXT: %[[SLOT64:[0-9]+]] = arith.extui %[[SLOT]] : i32 to i64
// CHECK-NEXT: %[[SLOTOFFSET:[0-9]+]] = arith.muli %[[SLOT64]], %arg18 : i64
// CHECK-NEXT: %[[PAGE64:[0-9]+]] = arith.extsi %[[PAGE]] : i32 to i64
// CHECK-NEXT: %[[PAGEOFFSET:[0-9]+]] = arith.muli %[[PAGE64]], %arg17 : i64
// CHECK-NEXT: arith.addi %[[PAGEOFFSET]], %[[SLOTOFFSET]] : i64
func.func @paged(%q: tensor<?x32x?x128xbf16>, %kc: tensor<?x16x8x128xbf16>, %vc: tensor<?x16x8x128xbf16>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) -> tensor<?x32x?x128xbf16> {
  %o = kiln.paged_attention %q, %kc, %vc, %pt, %lens {causal, scale = 0.0883883461 : f32} : tensor<?x32x?x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x16x8x128xbf16>, tensor<?x?xi32>, tensor<?xi32> -> tensor<?x32x?x128xbf16>
  return %o : tensor<?x32x?x128xbf16>
}
