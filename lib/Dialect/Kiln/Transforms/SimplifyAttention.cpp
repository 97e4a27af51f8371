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

#include "mlir/Dialect/Tosa/IR/TosaOps.h"

#include <cmath>

using namespace mlir;
using namespace mlir::kiln;

namespace {

/// Gives `op` the band's causal (a right bound of 0) or window_right, and its
/// window. To be called inside modifyOpInPlace.
void setBand(AttentionOp op, const mlir::kiln::detail::Band &band) {
  if (band.right == 0)
    op.setCausal(true);
  else
    op.setWindowRight(band.right);
  if (band.window > 0)
    op.setWindow(band.window);
}

/// `kiln.attention(q, repeat(k), repeat(v))` → `kiln.attention(q, k, v)` when
/// both repeats are proven to give query head h the KV head h / G.
struct FoldKvRepeat : public OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    if (op.isPacked())
      return rewriter.notifyMatchFailure(op, "packed sequences");
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
    if (op.isPacked())
      return rewriter.notifyMatchFailure(op, "packed sequences");
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
      setBand(op, *band);
    });
    return success();
  }
};

/// A mask that combines a band constant with a run-time mask (the opset-23
/// `attn_mask` of a decoder with padding): `And(tril, keep)` as a boolean, or
/// `Where(And(tril, keep), 0, fill)` (or the `Or` of hidden sets) as a float
/// mask. The band becomes causal/window/window_right and the run-time part
/// the mask alone; a finite fill becomes masked_score, so that rows that see
/// no key still average V as the graph does (unless padded rows are free).
struct SplitBandFromMask : public OpRewritePattern<AttentionOp> {
  SplitBandFromMask(MLIRContext *context, bool paddedRowsFree)
      : OpRewritePattern(context), paddedRowsFree(paddedRowsFree) {}

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    if (op.isPacked())
      return rewriter.notifyMatchFailure(op, "packed sequences");
    Value mask = op.getMask();
    if (!mask || op.getRightBound() || op.getWindow() || op.getMaskedScore())
      return rewriter.notifyMatchFailure(op, "no mask, or already banded");
    mlir::kiln::detail::MaskTerm term;
    term.isBoolean = true;
    term.value = mask;
    if (!cast<ShapedType>(mask.getType()).getElementType().isInteger(1)) {
      // Where(keep, 0, fill) or Where(hide, fill, 0) with a fill that
      // absorbs any score (s + fill == fill), so it equals a replacement.
      auto select = mask.getDefiningOp<tosa::SelectOp>();
      if (!select)
        return rewriter.notifyMatchFailure(op, "float mask is not a select");
      using mlir::kiln::detail::getSplatFloat;
      using mlir::kiln::detail::isAbsorbingMask;
      std::optional<double> onTrue = getSplatFloat(select.getOnTrue());
      std::optional<double> onFalse = getSplatFloat(select.getOnFalse());
      if (!onTrue || !onFalse)
        return rewriter.notifyMatchFailure(op, "select of non-constants");
      if (*onTrue == 0.0 && isAbsorbingMask(*onFalse)) {
        term.fill = *onFalse;
      } else if (isAbsorbingMask(*onTrue) && *onFalse == 0.0) {
        term.fill = *onTrue;
        term.inverted = true;
      } else {
        return rewriter.notifyMatchFailure(op, "select is not 0 / fill");
      }
      term.value = select.getPred();
    }
    Operation *combiner = term.value.getDefiningOp();
    if (!combiner || !(term.inverted ? isa<tosa::LogicalOrOp>(combiner)
                                     : isa<tosa::LogicalAndOp>(combiner)))
      return rewriter.notifyMatchFailure(op, "mask combines nothing");
    int64_t scoresShape[4] = {op.getBatchSize(), op.getNumQueryHeads(),
                              op.getQueryLength(), op.getKvLength()};
    for (unsigned side = 0; side < 2; ++side) {
      mlir::kiln::detail::MaskTerm pattern = term;
      pattern.value = combiner->getOperand(side);
      std::optional<mlir::kiln::detail::Band> band =
          mlir::kiln::detail::matchCausalConstant(pattern, scoresShape);
      if (!band)
        continue;
      Value rest = combiner->getOperand(1 - side);
      auto restType = dyn_cast<RankedTensorType>(rest.getType());
      if (!restType || restType.getRank() > 4)
        return rewriter.notifyMatchFailure(op, "the other side is not a mask");
      bool finiteFill = !std::isinf(term.fill);
      // A bias could hide keys too; the fill then no longer decides alone.
      if (finiteFill && !paddedRowsFree && op.getBias())
        return rewriter.notifyMatchFailure(op, "a bias beside a finite fill");
      if (term.inverted)
        rest = tosa::LogicalNotOp::create(rewriter, op.getLoc(), restType,
                                          rest);
      rewriter.modifyOpInPlace(op, [&] {
        op.getMaskMutable().assign(rest);
        setBand(op, *band);
        if (finiteFill && !paddedRowsFree) {
          op.setMaskedScoreAttr(
              rewriter.getF32FloatAttr(static_cast<float>(term.fill)));
          op->setAttr(kMaskingAttrName,
                      rewriter.getStringAttr(
                          "exact: hidden keys score the graph's fill "
                          "(masked_score); a row that sees no key averages "
                          "V over every key"));
        } else if (finiteFill) {
          op->setAttr(kMaskingAttrName,
                      rewriter.getStringAttr(
                          "padded rows free: a row that sees no key gives "
                          "zeros (--padded-rows=free)"));
        }
      });
      return success();
    }
    return rewriter.notifyMatchFailure(op, "no band in the mask");
  }

  bool paddedRowsFree;
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
    if (op.isPacked())
      return rewriter.notifyMatchFailure(op, "packed sequences");
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
        rewriter, op.getLoc(), resultType,
        op.getLse() ? op.getLse().getType() : Type(), sources[0], sources[1],
        sources[2], op.getMask(), op.getBias(), /*q_offsets=*/Value(),
        /*kv_offsets=*/Value(), op.getScaleFactor(), op.getQDescale(),
        op.getKDescale(), op.getVDescale(), op.getScaleAttr(),
        op.getCausalAttr(), op.getWindowAttr(), op.getWindowRightAttr(),
        op.getSoftcapAttr(), op.getMaskedScoreAttr(),
        LayoutAttr::get(op.getContext(), Layout::bshd), op.getProbScaleAttr());
    fused->setDiscardableAttrs(op->getDiscardableAttrDictionary());
    // The result now stands for the transposes' value: the graph value the
    // site replaces is theirs (none where the importer named none).
    fused->removeAttr(kReplacesAttrName);
    fused->removeAttr(kGraphValueAttrName);
    for (tosa::TransposeOp transpose : outputs)
      if (auto name =
              transpose->getAttrOfType<StringAttr>(kGraphValueAttrName)) {
        fused->setAttr(kReplacesAttrName, name);
        break;
      }
    for (tosa::TransposeOp transpose : outputs)
      rewriter.replaceOp(transpose, fused.getResult());
    rewriter.eraseOp(op);
    return success();
  }
};

/// One operand's dequantisation, `f(x) · s` (DequantizeLinear): x e4m3,
/// f its exact widening to the op's element type, s one value or one a
/// head along `headAxis`; null for `f(x)` alone.
struct Dequantized {
  Value fp8;
  Value scale;
};

std::optional<Dequantized> matchDequantized(Value operand, int64_t headAxis) {
  auto type = cast<RankedTensorType>(operand.getType());
  // A widening alone: the scale was a splat the fusion folded into the
  // op's scale (Q and K), or 1.
  if (auto cast = operand.getDefiningOp<tosa::CastOp>())
    if (isa<Float8E4M3FNType>(getElementTypeOrSelf(cast.getInput())))
      return Dequantized{cast.getInput(), Value()};
  auto mul = operand.getDefiningOp<tosa::MulOp>();
  if (!mul)
    return std::nullopt;
  for (auto [widened, scale] : {std::pair(mul.getInput1(), mul.getInput2()),
                                std::pair(mul.getInput2(), mul.getInput1())}) {
    auto cast = widened.getDefiningOp<tosa::CastOp>();
    if (!cast || cast.getType() != type ||
        !isa<Float8E4M3FNType>(getElementTypeOrSelf(cast.getInput())))
      continue;
    auto scaleType = dyn_cast<RankedTensorType>(scale.getType());
    if (!scaleType || !scaleType.hasStaticShape() ||
        scaleType.getRank() != type.getRank() ||
        scaleType.getElementType() != type.getElementType())
      continue;
    bool perTensorOrHead = true;
    for (auto [axis, size] : llvm::enumerate(scaleType.getShape()))
      perTensorOrHead &= size == 1 || (int64_t)axis == headAxis;
    if (perTensorOrHead)
      return Dequantized{cast.getInput(), scale};
  }
  return std::nullopt;
}

/// `kiln.attention(dq(q8), dq(k8), dq(v8))` → the FP8 op on q8, k8, v8
/// with their descales, when all three are dequantised e4m3 (ONNX's
/// DequantizeLinear, as imported): the op's definition of FP8 operands is
/// that dequantisation, each value rounded to the element type as the
/// graph rounds it.
struct FoldDequantizedOperands : public OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getQDescale() || op.isPacked())
      return rewriter.notifyMatchFailure(op, "FP8 already, or packed");
    int64_t headAxis = op.getHeadAxis();
    SmallVector<Dequantized, 3> operands;
    for (Value operand : {op.getQuery(), op.getKey(), op.getValue()}) {
      std::optional<Dequantized> dq = matchDequantized(operand, headAxis);
      if (!dq)
        return rewriter.notifyMatchFailure(op, "an operand is not "
                                               "dequantised e4m3");
      operands.push_back(*dq);
    }
    Location loc = op.getLoc();
    SmallVector<Value, 3> descales;
    for (Dequantized &dq : operands) {
      if (!dq.scale) {
        auto unitType = RankedTensorType::get({1}, rewriter.getF32Type());
        descales.push_back(tosa::ConstOp::create(
            rewriter, loc, unitType,
            DenseElementsAttr::get(unitType, rewriter.getF32FloatAttr(1.0f))));
        continue;
      }
      auto scaleType = cast<RankedTensorType>(dq.scale.getType());
      int64_t size = scaleType.getNumElements();
      Value scale = dq.scale;
      if (!scaleType.getElementType().isF32())
        scale = tosa::CastOp::create(
            rewriter, loc, scaleType.clone(rewriter.getF32Type()), scale);
      auto shapeType = tosa::shapeType::get(rewriter.getContext(), 1);
      Value shape = tosa::ConstShapeOp::create(
          rewriter, loc, shapeType,
          DenseIntElementsAttr::get(
              RankedTensorType::get({1}, rewriter.getIndexType()),
              ArrayRef<int64_t>{size}));
      descales.push_back(tosa::ReshapeOp::create(
          rewriter, loc, RankedTensorType::get({size}, rewriter.getF32Type()),
          scale, shape));
    }
    Type lseType = op.getLse() ? op.getLse().getType() : Type();
    auto fused = AttentionOp::create(
        rewriter, loc, op.getResult().getType(), lseType, operands[0].fp8,
        operands[1].fp8, operands[2].fp8, op.getMask(), op.getBias(),
        /*q_offsets=*/Value(), /*kv_offsets=*/Value(), op.getScaleFactor(),
        descales[0], descales[1], descales[2], op.getScaleAttr(),
        op.getCausalAttr(), op.getWindowAttr(), op.getWindowRightAttr(),
        op.getSoftcapAttr(), op.getMaskedScoreAttr(), op.getLayoutAttr(),
        op.getProbScaleAttr());
    fused->setDiscardableAttrs(op->getDiscardableAttrDictionary());
    rewriter.replaceOp(op, fused->getResults());
    return success();
  }
};

} // namespace

void mlir::kiln::populateSimplifyAttentionPatterns(RewritePatternSet &patterns,
                                                   bool paddedRowsFree,
                                                   bool foldFp8) {
  patterns.add<SplitBandFromMask>(patterns.getContext(), paddedRowsFree);
  patterns.add<FoldKvRepeat, FoldCausalMask, FoldLayoutTransposes>(
      patterns.getContext());
  if (foldFp8)
    patterns.add<FoldDequantizedOperands>(patterns.getContext());
}
