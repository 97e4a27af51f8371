//===- FuseAttention.cpp - Fuse attention into kiln.attention ---*- C++ -*-===//
//
// Matches softmax(scale·QKᵀ + mask)·V in TOSA and rewrites it into one
// kiln.attention op.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/Transforms/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNFUSEATTENTION
#include "kiln/Dialect/Kiln/Transforms/Passes.h.inc"
} // namespace mlir::kiln

using namespace mlir;
using namespace mlir::kiln;

void mlir::kiln::populateFuseAttentionPatterns(RewritePatternSet &patterns) {}

namespace {
struct KilnFuseAttentionPass
    : public kiln::impl::KilnFuseAttentionBase<KilnFuseAttentionPass> {
  void runOnOperation() override {}
};
} // namespace
