//===- Wgmma.h - Hopper warpgroup matrix products ---------------*- C++ -*-===//
//
// What a kernel that uses sm_90a's wgmma.mma_async lays out for it: the
// 128-byte swizzled shared-memory layout its descriptors read, and the
// descriptors. The products themselves are WgmmaProduct's (Products.h).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_CONVERSION_KILNTOGPU_PRODUCTS_WGMMA_H
#define KILN_LIB_CONVERSION_KILNTOGPU_PRODUCTS_WGMMA_H

#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::kiln::detail {

/// 16-bit elements in a row of a 128-byte swizzle atom: a slab's columns.
inline constexpr int64_t kSwizzleElements = 64;

/// Byte offset, in a tile of `rows`-row slabs of 64 columns (128 bytes a
/// row, 16-byte chunk c of row r at chunk c ^ (r % 8)), of the 16-byte chunk
/// at (row, column); `column` a multiple of 8 (index values).
Value swizzledOffset(ImplicitLocOpBuilder &b, int64_t rows, Value row,
                     Value column);

/// The wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor
/// Format") of the 128-byte-swizzled matrix at byte `offset` of `tile` (a
/// 1024-byte-aligned shared pointer), with leading and stride byte offsets
/// `leading` and `stride`.
Value wgmmaDescriptor(ImplicitLocOpBuilder &b, Value tile, int64_t offset,
                      int64_t leading, int64_t stride);

/// fence.proxy.async for CTA shared memory: orders this thread's generic-
/// proxy writes of shared memory (stores, cp.async) before the async
/// proxy's reads (wgmma's) that follow the next barrier.
void fenceSharedForAsyncProxy(ImplicitLocOpBuilder &b);

} // namespace mlir::kiln::detail

#endif // KILN_LIB_CONVERSION_KILNTOGPU_PRODUCTS_WGMMA_H
