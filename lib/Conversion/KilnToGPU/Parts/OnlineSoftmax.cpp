//===- OnlineSoftmax.cpp - The online-softmax step ------------------------===//
//
// One tile's step for the rows a thread holds in the m16n8 accumulator
// layout (running max and sum, the O accumulators rescaled), and the
// output scale a row's final sum gives.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>

using namespace mlir;
using namespace mlir::kiln::detail;

Value KernelBuilderBase::rowTileMax(ArrayRef<Value> scores, int64_t r,
                                     Value scoreScale) {
  Value tileMax = constF32(-std::numeric_limits<float>::infinity());
  for (int64_t blockIndex = 0; 4 * blockIndex < (int64_t)scores.size();
       ++blockIndex)
    for (int64_t e = 2 * r; e < 2 * r + 2; ++e)
      tileMax = fmax(tileMax, scores[4 * blockIndex + e]);
  tileMax = butterfly(tileMax, /*isMax=*/true, 2);
  return scoreScale ? fmul(tileMax, scoreScale) : tileMax;
}

Value KernelBuilderBase::safeRowMax(Value max) {
  // A row that has seen only hidden keys keeps max = -inf; 0 as the
  // offset makes exp2 give 0 rather than NaN.
  Value isEmpty = arith::CmpFOp::create(
      *b, arith::CmpFPredicate::OEQ, max,
      constF32(-std::numeric_limits<float>::infinity()));
  return arith::SelectOp::create(*b, isEmpty, constF32(0.0f), max);
}

Value KernelBuilderBase::rowWeights(ArrayRef<Value> scores, int64_t r,
                                    Value safeMax, Value scoreScale, Value sum,
                                    SmallVector<Value> &probabilities) {
  Value negMax = scoreScale ? arith::NegFOp::create(*b, safeMax) : Value();
  for (int64_t blockIndex = 0; 4 * blockIndex < (int64_t)scores.size();
       ++blockIndex)
    for (int64_t e = 2 * r; e < 2 * r + 2; ++e) {
      int64_t i = 4 * blockIndex + e;
      probabilities[i] = exp2(
          scoreScale
              ? LLVM::FMAOp::create(*b, scores[i], scoreScale, negMax)
                    .getResult()
              : arith::SubFOp::create(*b, scores[i], safeMax).getResult());
      sum = fadd(sum, probabilities[i]);
    }
  return sum;
}

SmallVector<Value> KernelBuilderBase::onlineSoftmaxStep(
    ArrayRef<Value> scores, ValueRange state, SmallVector<Value> &newState,
    SmallVector<Value> &acc, SmallVector<Value> *alphas, Value scoreScale) {
  newState.assign(4, Value());
  Value alpha[2];
  SmallVector<Value> probabilities(scores.size());
  for (int64_t r = 0; r < 2; ++r) {
    Value newMax = fmax(state[r], rowTileMax(scores, r, scoreScale));
    Value safeMax = safeRowMax(newMax);
    alpha[r] = exp2(arith::SubFOp::create(*b, state[r], safeMax));
    Value sum = fmul(state[2 + r], alpha[r]);
    newState[r] = newMax;
    newState[2 + r] =
        rowWeights(scores, r, safeMax, scoreScale, sum, probabilities);
  }
  if (alphas)
    alphas->assign({alpha[0], alpha[1]});
  acc.assign(state.begin() + 4, state.end());
  for (int64_t i = 0; i < (int64_t)acc.size(); ++i)
    acc[i] = fmul(acc[i], alpha[(i % 4) / 2]);
  return probabilities;
}

SmallVector<Value> KernelBuilderBase::lazyOnlineSoftmaxStep(
    ArrayRef<Value> scores, ValueRange state, SmallVector<Value> &newState,
    SmallVector<Value> &acc, float threshold) {
  // The rows keep their reference maxima (the state's) while no score of
  // the warp's rows passes its row's reference by more than `threshold`
  // (log2 units: weights stay below 2^threshold); when one does, every row
  // moves to its new maximum and rescales, in one warp-uniform branch. A
  // row's first finite score always moves it. O / sum is the same whatever
  // the reference.
  Value newMax[2], grows[2];
  for (int64_t r = 0; r < 2; ++r) {
    newMax[r] = fmax(state[r], rowTileMax(scores, r, Value()));
    grows[r] = arith::CmpFOp::create(*b, arith::CmpFPredicate::OGT, newMax[r],
                                     fadd(state[r], constF32(threshold)));
  }
  Value rescale = NVVM::VoteSyncOp::create(
      *b, b->getI1Type(), arith::ConstantIntOp::create(*b, b->getI32Type(), -1),
      arith::OrIOp::create(*b, grows[0], grows[1]), NVVM::VoteSyncKind::any);
  Value safeMax[2];
  for (int64_t r = 0; r < 2; ++r) {
    newMax[r] = arith::SelectOp::create(*b, rescale, newMax[r], state[r]);
    safeMax[r] = safeRowMax(newMax[r]);
  }
  SmallVector<Type> types(state.size() - 2, b->getF32Type());
  auto ifRescale = scf::IfOp::create(*b, types, rescale, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard guard(*b);
    b->setInsertionPointToStart(&ifRescale.getThenRegion().front());
    Value alpha[2];
    SmallVector<Value> rescaled;
    for (int64_t r = 0; r < 2; ++r) {
      alpha[r] = exp2(arith::SubFOp::create(*b, state[r], safeMax[r]));
      rescaled.push_back(fmul(state[2 + r], alpha[r]));
    }
    for (int64_t i = 4; i < (int64_t)state.size(); ++i)
      rescaled.push_back(fmul(state[i], alpha[((i - 4) % 4) / 2]));
    scf::YieldOp::create(*b, rescaled);
    b->setInsertionPointToStart(&ifRescale.getElseRegion().front());
    scf::YieldOp::create(*b, state.drop_front(2));
  }
  newState.assign(4, Value());
  SmallVector<Value> probabilities(scores.size());
  for (int64_t r = 0; r < 2; ++r) {
    newState[r] = newMax[r];
    newState[2 + r] = rowWeights(scores, r, safeMax[r], Value(),
                                 ifRescale.getResult(r), probabilities);
  }
  acc.assign(ifRescale.getResults().begin() + 2, ifRescale.getResults().end());
  return probabilities;
}

Value KernelBuilderBase::reciprocalOrZero(Value sum) {
  Value zero = constF32(0.0f);
  Value hasKeys =
      arith::CmpFOp::create(*b, arith::CmpFPredicate::OGT, sum, zero);
  Value inverse = arith::DivFOp::create(*b, constF32(1.0f), sum);
  return arith::SelectOp::create(*b, hasKeys, inverse, zero);
}
