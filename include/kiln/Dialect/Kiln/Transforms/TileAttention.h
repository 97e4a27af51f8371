//===- TileAttention.h - Lowerings of kiln attention ops --------*- C++ -*-===//
//
// Patterns that lower kiln.attention and kiln.paged_attention to upstream
// dialects: the tiled online-softmax form and the plain reference form.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_TRANSFORMS_TILEATTENTION_H
#define KILN_DIALECT_KILN_TRANSFORMS_TILEATTENTION_H

#include "mlir/IR/PatternMatch.h"

#include <cstdint>

namespace mlir::kiln {

/// Block sizes and split count of the tiled online-softmax form.
struct AttentionTiling {
  /// Keys per KV block.
  int64_t kvBlockSize = 32;
  /// Query rows per query block.
  int64_t qBlockSize = 16;
  /// Parts the visible KV range of a query block is split into.
  int64_t numSplits = 1;
};

/// Adds the patterns that lower kiln.attention and kiln.paged_attention to
/// the tiled online-softmax form (scf/tensor/linalg/arith/math), and
/// kiln.attention_grad to its reference form.
void populateTileAttentionPatterns(RewritePatternSet &patterns,
                                   const AttentionTiling &tiling);

/// Adds the patterns that lower kiln.attention and kiln.paged_attention to a
/// plain softmax(scale·QKᵀ)·V over whole rows, the reference lowering, and
/// kiln.attention_grad to its reference form.
void populateDecomposeAttentionPatterns(RewritePatternSet &patterns);

} // namespace mlir::kiln

#endif // KILN_DIALECT_KILN_TRANSFORMS_TILEATTENTION_H
