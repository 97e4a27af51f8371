//===- SimplifyAttention.cpp - Tidy kiln.attention operands -----*- C++ -*-===//
//
// kiln.attention ops that arrive from an importer (the ONNX opset-23
// Attention op) can carry what the fusion pattern would have folded away:
// K and V repeated per query head, and a constant causal mask. These
// patterns fold them into the group count and the causal/window attributes.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/Transforms/Passes.h"

#include "AttentionMatchers.h"

using namespace mlir;
using namespace mlir::kiln;

namespace {

/// `kiln.attention(q, repeat(k), repeat(v))` → `kiln.attention(q, k, v)` when
/// both repeats are proven to give query head h the KV head h / G.
struct FoldKvRepeat : public OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getLayout() != Layout::bhsd)
      return rewriter.notifyMatchFailure(op, "only the bhsd layout");
    SmallVector<Operation *> ops;
    auto key = mlir::kiln::detail::matchKvRepeat(op.getKey(), ops);
    auto value = mlir::kiln::detail::matchKvRepeat(op.getValue(), ops);
    if (!key || !value)
      return rewriter.notifyMatchFailure(op, "K or V is not a head repeat");
    if (key->second != value->second)
      return rewriter.notifyMatchFailure(op, "K and V repeat differently");
    auto keyType = cast<RankedTensorType>(key->first.getType());
    auto valueType = cast<RankedTensorType>(value->first.getType());
    if (keyType.getRank() != 4 || valueType.getRank() != 4 ||
        keyType.getElementType() != op.getElementType() ||
        valueType.getElementType() != op.getElementType())
      return rewriter.notifyMatchFailure(op, "repeat source is not [B,H,S,D]");
    rewriter.modifyOpInPlace(op, [&] {
      op.getKeyMutable().assign(key->first);
      op.getValueMutable().assign(value->first);
    });
    return success();
  }
};

/// A constant mask that is exactly the causal (or sliding-window causal)
/// pattern becomes the `causal`/`window` attributes, so no S×S tensor is
/// left on the op.
struct FoldCausalMask : public OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    Value mask = op.getMask();
    if (!mask)
      return rewriter.notifyMatchFailure(op, "no mask");
    if (op.getWindow())
      return rewriter.notifyMatchFailure(op, "already has a window");
    mlir::kiln::detail::MaskTerm term;
    term.value = mask;
    term.isBoolean =
        cast<ShapedType>(mask.getType()).getElementType().isInteger(1);
    int64_t scoresShape[4] = {op.getBatchSize(), op.getNumQueryHeads(),
                              op.getQueryLength(), op.getKvLength()};
    std::optional<int64_t> window =
        mlir::kiln::detail::matchCausalConstant(term, scoresShape);
    if (!window)
      return rewriter.notifyMatchFailure(op, "mask is not a causal constant");
    rewriter.modifyOpInPlace(op, [&] {
      op.getMaskMutable().clear();
      op.setCausal(true);
      if (*window > 0)
        op.setWindow(*window);
    });
    return success();
  }
};

} // namespace

void mlir::kiln::populateSimplifyAttentionPatterns(
    RewritePatternSet &patterns) {
  patterns.add<FoldKvRepeat, FoldCausalMask>(patterns.getContext());
}
