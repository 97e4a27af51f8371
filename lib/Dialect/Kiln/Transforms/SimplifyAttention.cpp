//===- SimplifyAttention.cpp - Tidy kiln.attention operands -----*- C++ -*-===//
//
// kiln.attention ops that arrive from an importer (the ONNX opset-23
// Attention op) can carry what the fusion pattern would have folded away:
// K and V repeated per query head, and a constant causal mask. These
// patterns fold them into the group count and the causal/window attributes,
// and transposes around the op into its layout.
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
    if (op.getWindow() || op.getRightBound())
      return rewriter.notifyMatchFailure(op, "already banded");
    mlir::kiln::detail::MaskTerm term;
    term.value = mask;
    term.isBoolean =
        cast<ShapedType>(mask.getType()).getElementType().isInteger(1);
    int64_t scoresShape[4] = {op.getBatchSize(), op.getNumQueryHeads(),
                              op.getQueryLength(), op.getKvLength()};
    std::optional<mlir::kiln::detail::Band> band =
        mlir::kiln::detail::matchCausalConstant(term, scoresShape);
    if (!band)
      return rewriter.notifyMatchFailure(op, "mask is not a band constant");
    rewriter.modifyOpInPlace(op, [&] {
      op.getMaskMutable().clear();
      if (band->right == 0)
        op.setCausal(true);
      else
        op.setWindowRight(band->right);
      if (band->window > 0)
        op.setWindow(band->window);
    });
    return success();
  }
};

/// True when `perms` swaps the two middle axes of a rank-4 tensor:
/// [B, S, H, D] <-> [B, H, S, D].
bool swapsHeadAndSequence(ArrayRef<int32_t> perms) {
  return perms.size() == 4 && perms[0] == 0 && perms[1] == 2 &&
         perms[2] == 1 && perms[3] == 3;
}

/// `transpose(attention(transpose(q), transpose(k), transpose(v)))` with every
/// transpose swapping heads and sequence → `attention(q, k, v)` in the bshd
/// layout: the op reads and writes [B, S, H, D] through strides, so the
/// transposes (a copy each on most back ends) go away. Mask and bias are
/// indexed [B, Hq, Sq, Sk] in both layouts and stay as they are.
struct FoldLayoutTransposes : public OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getLayout() != Layout::bhsd)
      return rewriter.notifyMatchFailure(op, "already bshd");
    SmallVector<Value, 3> sources;
    for (Value operand : {op.getQuery(), op.getKey(), op.getValue()}) {
      auto transpose = operand.getDefiningOp<tosa::TransposeOp>();
      if (!transpose || !swapsHeadAndSequence(transpose.getPerms()))
        return rewriter.notifyMatchFailure(
            op, "Q, K and V are not all [B,S,H,D] transposed to [B,H,S,D]");
      sources.push_back(transpose.getInput1());
    }
    SmallVector<tosa::TransposeOp> outputs;
    for (Operation *user : op->getUsers()) {
      auto transpose = dyn_cast<tosa::TransposeOp>(user);
      if (!transpose || !swapsHeadAndSequence(transpose.getPerms()))
        return rewriter.notifyMatchFailure(
            op, "the result is not only transposed back to [B,S,H,D]");
      outputs.push_back(transpose);
    }
    if (outputs.empty())
      return rewriter.notifyMatchFailure(op, "the result is unused");
    Type resultType = outputs.front().getType();
    if (llvm::any_of(outputs, [&](tosa::TransposeOp transpose) {
          return transpose.getType() != resultType;
        }))
      return rewriter.notifyMatchFailure(op, "the transposes' types differ");

    auto fused = AttentionOp::create(
        rewriter, op.getLoc(), resultType, sources[0], sources[1], sources[2],
        op.getMask(), op.getBias(), op.getScaleAttr(), op.getCausalAttr(),
        op.getWindowAttr(), op.getWindowRightAttr(), op.getSoftcapAttr(),
        op.getMaskedScoreAttr(),
        LayoutAttr::get(op.getContext(), Layout::bshd));
    fused->setDiscardableAttrs(op->getDiscardableAttrDictionary());
    for (tosa::TransposeOp transpose : outputs)
      rewriter.replaceOp(transpose, fused.getResult());
    rewriter.eraseOp(op);
    return success();
  }
};

} // namespace

void mlir::kiln::populateSimplifyAttentionPatterns(
    RewritePatternSet &patterns) {
  patterns.add<FoldKvRepeat, FoldCausalMask, FoldLayoutTransposes>(
      patterns.getContext());
}
