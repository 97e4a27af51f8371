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

SmallVector<Value> KernelBuilderBase::onlineSoftmaxStep(
    ArrayRef<Value> scores, ValueRange state, SmallVector<Value> &newState,
    SmallVector<Value> &acc, SmallVector<Value> *alphas, Value scoreScale) {
  Value negInf = constF32(-std::numeric_limits<float>::infinity());
  Value zero = constF32(0.0f);
  int64_t keyBlocks = scores.size() / 4;
  newState.assign(4, Value());
  Value alpha[2];
  SmallVector<Value> probabilities(scores.size());
  for (int64_t r = 0; r < 2; ++r) {
    Value tileMax = negInf;
    for (int64_t blockIndex = 0; blockIndex < keyBlocks; ++blockIndex)
      for (int64_t e = 2 * r; e < 2 * r + 2; ++e)
        tileMax = fmax(tileMax, scores[4 * blockIndex + e]);
    tileMax = butterfly(tileMax, /*isMax=*/true, 2);
    if (scoreScale)
      tileMax = fmul(tileMax, scoreScale);
    Value newMax = fmax(state[r], tileMax);
    // A row that has seen only hidden keys keeps max = -inf; 0 as the
    // offset makes exp2 give 0 rather than NaN.
    Value isEmpty =
        arith::CmpFOp::create(*b, arith::CmpFPredicate::OEQ, newMax, negInf);
    Value safeMax = arith::SelectOp::create(*b, isEmpty, zero, newMax);
    alpha[r] = exp2(arith::SubFOp::create(*b, state[r], safeMax));
    Value sum = fmul(state[2 + r], alpha[r]);
    Value negMax = scoreScale ? arith::NegFOp::create(*b, safeMax) : Value();
    for (int64_t blockIndex = 0; blockIndex < keyBlocks; ++blockIndex)
      for (int64_t e = 2 * r; e < 2 * r + 2; ++e) {
        int64_t i = 4 * blockIndex + e;
        probabilities[i] = exp2(
            scoreScale
                ? LLVM::FMAOp::create(*b, scores[i], scoreScale, negMax)
                      .getResult()
                : arith::SubFOp::create(*b, scores[i], safeMax).getResult());
        sum = fadd(sum, probabilities[i]);
      }
    newState[r] = newMax;
    newState[2 + r] = sum;
  }
  if (alphas)
    alphas->assign({alpha[0], alpha[1]});
  acc.assign(state.begin() + 4, state.end());
  for (int64_t i = 0; i < (int64_t)acc.size(); ++i)
    acc[i] = fmul(acc[i], alpha[(i % 4) / 2]);
  return probabilities;
}

Value KernelBuilderBase::reciprocalOrZero(Value sum) {
  Value zero = constF32(0.0f);
  Value hasKeys =
      arith::CmpFOp::create(*b, arith::CmpFPredicate::OGT, sum, zero);
  Value inverse = arith::DivFOp::create(*b, constF32(1.0f), sum);
  return arith::SelectOp::create(*b, hasKeys, inverse, zero);
}
