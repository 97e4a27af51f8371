//===- Wgmma.h - Hopper warpgroup matrix products ---------------*- C++ -*-===//
//
// The parts of a kernel that uses sm_90a's wgmma.mma_async: the 128-byte
// swizzled shared-memory layout its descriptors read, the descriptors, and
// the product itself (inline PTX: MLIR's nvvm.wgmma.mma_async takes A only
// from a descriptor, and P·V wants A from registers).
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

/// D (m64 n`n` f32, n / 2 values a thread) += A·B for k = 16 of
/// `elementType` (f16 or bf16), on the warpgroup: A from the descriptor `a`
/// or, when `aFragment` is given, from registers (each warp's mma.m16n8k16 A
/// fragment of its 16 rows); B from descriptor `bDescriptor`, K-major or,
/// with `transposeB`, MN-major. Issued, not waited for.
SmallVector<Value> wgmmaProduct(ImplicitLocOpBuilder &b, Type elementType,
                                int64_t n, ArrayRef<Value> acc, Value a,
                                ArrayRef<Value> aFragment, Value bDescriptor,
                                bool transposeB);

} // namespace mlir::kiln::detail

#endif // KILN_LIB_CONVERSION_KILNTOGPU_PRODUCTS_WGMMA_H
