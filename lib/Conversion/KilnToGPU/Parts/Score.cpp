//===- Score.cpp - A tile's scores, masked or only scaled -----------------===//
//
// The score function (scale, softcap, bias, mask, causal and window bounds,
// masked_score) of one score, and a tile's branch between it and the plain
// scale, taken where tileNeedsMask says the tile needs the mask.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>

using namespace mlir;
using namespace mlir::kiln::detail;

SmallVector<Value> AttentionKernelBuilder::finishIf(
    Value needsMask, size_t count,
    llvm::function_ref<SmallVector<Value>(bool masked)> finish) {
  SmallVector<Type> types(count, b->getF32Type());
  auto ifOp = scf::IfOp::create(*b, types, needsMask, true);
  OpBuilder::InsertionGuard guard(*b);
  b->setInsertionPointToStart(&ifOp.getThenRegion().front());
  scf::YieldOp::create(*b, finish(true));
  b->setInsertionPointToStart(&ifOp.getElseRegion().front());
  scf::YieldOp::create(*b, finish(false));
  return SmallVector<Value>(ifOp.getResults().begin(), ifOp.getResults().end());
}

Value AttentionKernelBuilder::finishScore(Value score, Value queryRow,
                                          Value key, Value rowMaskBase,
                                          Value rowBiasBase, bool raw,
                                          ScoreTerms terms, bool bounds,
                                          Value *visibleOut) {
  const float log2e = 1.4426950408889634f;
  bool additive = spec.problem.addsToScores();
  assert((!raw ||
          (!spec.problem.softcap && !additive && !spec.problem.maskedScore)) &&
         "raw scores take no score function or additive terms");
  if (raw) {
    // Scaled in the softmax step.
  } else if (spec.problem.softcap) {
    // softcap·tanh(scale·dot / softcap), in natural units when additive
    // terms follow, else straight into log2 units.
    Value scaled = fmul(score, scaleNatural);
    Value capped = tanh(fmul(scaled, constF32(1.0f / *spec.problem.softcap)));
    score = fmul(capped,
                 constF32(*spec.problem.softcap * (additive ? 1.0f : log2e)));
  } else if (additive) {
    score = fmul(score, scaleNatural);
  } else {
    score = fmul(score, scaleLog2);
  }

  // Clamp the indices used for mask and bias loads so that lanes past the end
  // never read outside the tensors; their scores are hidden below anyway.
  Value lastQuery = sub(qLen, constIndex(1));
  Value lastKey = sub(kvLen, constIndex(1));
  Value safeQuery = toI64(arith::MinSIOp::create(*b, queryRow, lastQuery));
  Value safeKey = toI64(arith::MinSIOp::create(*b, key, lastKey));

  Value inRange =
      arith::CmpIOp::create(*b, arith::CmpIPredicate::slt, key, kvLen);
  Value visible;
  auto andVisible = [&](Value condition) {
    visible = visible
                  ? arith::AndIOp::create(*b, visible, condition).getResult()
                  : condition;
  };
  if (spec.problem.biasType) {
    Value bias = terms.bias;
    if (!bias) {
      Value offset = add(rowBiasBase, add(mul(safeQuery, biasStrideQ),
                                          mul(safeKey, biasStrideK)));
      bias = loadGlobalAsF32(biasPtr, spec.problem.biasType, offset);
    }
    score = fadd(score, bias);
  }
  if (spec.problem.maskType) {
    Value mask = terms.mask;
    if (!mask) {
      Value offset = add(rowMaskBase, add(mul(safeQuery, maskStrideQ),
                                          mul(safeKey, maskStrideK)));
      mask = loadGlobalAsF32(maskPtr, spec.problem.maskType, offset);
    }
    if (spec.problem.maskType.isInteger(1))
      andVisible(mask);
    else
      score = fadd(score, mask);
  }
  if (additive)
    score = toLog2Saturated(score);
  std::optional<int64_t> right = spec.problem.rightBound();
  if (!bounds) {
    assert(!visibleOut && "visibility is asked with the bounds");
    // A tile inside kv_len and inside every row's band: the mask alone.
    if (visible) {
      Value hiddenScore =
          spec.problem.maskedScore
              ? constF32(saturatedLog2(*spec.problem.maskedScore))
              : constF32(-std::numeric_limits<float>::infinity());
      score = arith::SelectOp::create(*b, visible, score, hiddenScore);
    }
    return score;
  }
  if (right) {
    // Bottom-right aligned: key <= row + (kvLen - qLen) + right.
    Value diagonal = add(queryRow, kvOffset);
    andVisible(arith::CmpIOp::create(*b, arith::CmpIPredicate::sle, key,
                                     add(diagonal, constIndex(*right))));
    if (spec.problem.window) {
      Value oldest = sub(diagonal, constIndex(*spec.problem.window));
      andVisible(
          arith::CmpIOp::create(*b, arith::CmpIPredicate::sgt, key, oldest));
    }
  }
  Value negInf = constF32(-std::numeric_limits<float>::infinity());
  if (visibleOut)
    *visibleOut = visible ? arith::AndIOp::create(*b, visible, inRange)
                                .getResult()
                          : inRange;
  if (visible) {
    // A hidden key scores -inf, or the graph's fill (see masked_score).
    Value hiddenScore = spec.problem.maskedScore
                            ? constF32(saturatedLog2(*spec.problem.maskedScore))
                            : negInf;
    score = arith::SelectOp::create(*b, visible, score, hiddenScore);
  }
  return arith::SelectOp::create(*b, inRange, score, negInf);
}

float AttentionKernelBuilder::saturatedLog2(float value) {
  const double log2e = 1.4426950408889634;
  double scaled = double(value) * log2e;
  double lowest = std::numeric_limits<float>::lowest();
  return float(std::max(scaled, lowest));
}

Value AttentionKernelBuilder::toLog2Saturated(Value score) {
  // A finite fill such as finfo.min overflows to -inf when multiplied by
  // log2(e); it must stay finite, so that a row hidden entirely by finite
  // fills averages its keys as the graph does. A real -inf stays -inf.
  const float log2e = 1.4426950408889634f;
  Value negInf = constF32(-std::numeric_limits<float>::infinity());
  Value scaled =
      arith::MaximumFOp::create(*b, fmul(score, constF32(log2e)),
                                constF32(std::numeric_limits<float>::lowest()));
  Value isNegInf =
      arith::CmpFOp::create(*b, arith::CmpFPredicate::OEQ, score, negInf);
  return arith::SelectOp::create(*b, isNegInf, negInf, scaled);
}
