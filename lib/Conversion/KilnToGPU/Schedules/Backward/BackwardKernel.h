//===- BackwardKernel.h - What the backward passes share ---------*- C++ -*-===//
//
// kiln.attention_grad compiles to two kernels that take the same arguments
// (the forward's, its lse, then grad_out, delta, grad_q, grad_k, grad_v and
// their strides) and are launched in this order: a query pass (dQ and D =
// Σ dO·O) and a key pass (dK and dV). Two families build them: f32 FMAs
// (BackwardKernel.cpp: any element type) and mma.sync tensor cores
// (MmaBackward.cpp: f16/bf16). GradKernelBase holds what both share: the
// arguments, the rows' statistics and each score's gradient, recomputed
// through the forward's finishScore so that every score is the forward's.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_CONVERSION_KILNTOGPU_SCHEDULES_BACKWARD_BACKWARDKERNEL_H
#define KILN_LIB_CONVERSION_KILNTOGPU_SCHEDULES_BACKWARD_BACKWARDKERNEL_H

#include "AttentionKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

#include <cmath>
#include <limits>

namespace mlir::kiln::detail::backward {

/// Tensors the backward adds to the forward's arguments, in ABI order.
inline constexpr const char *kGradTensors[] = {"grad_out", "grad_q", "grad_k",
                                               "grad_v"};

class GradKernelBase : public AttentionKernelBuilder {
public:
  explicit GradKernelBase(const KernelSpec &spec)
      : AttentionKernelBuilder(spec), headDim(spec.problem.headDim),
        valueDim(spec.problem.valueDim()) {
    assert(spec.problem.lse && "the backward reads the forward's lse");
  }

  SmallVector<std::string> argumentNames() const override {
    SmallVector<std::string> names = AttentionKernelBuilder::argumentNames();
    names.append({"grad_out", "delta", "grad_q", "grad_k", "grad_v"});
    for (const char *tensor : kGradTensors)
      for (const char *axis : {"batch", "head", "seq"})
        names.push_back((llvm::Twine(tensor) + "_stride_" + axis).str());
    return names;
  }
  SmallVector<std::string> argumentKinds() const override {
    SmallVector<std::string> kinds = AttentionKernelBuilder::argumentKinds();
    kinds.append(5, "pointer");
    kinds.append(12, "i64");
    return kinds;
  }


protected:
  /// Binds the arguments after the forward's.
  void bindGradArguments(gpu::GPUFuncOp func) {
    ValueRange args = func.getArguments();
    unsigned next = AttentionKernelBuilder::argumentNames().size();
    gradOut = args[next++];
    delta = args[next++];
    gradQ = args[next++];
    gradK = args[next++];
    gradV = args[next++];
    for (SmallVector<Value> *strides :
         {&gradOutStrides, &gradQStrides, &gradKStrides, &gradVStrides}) {
      strides->assign(args.begin() + next, args.begin() + next + 3);
      next += 3;
    }
  }

  /// Element `offset` (i64) of an f32 global tensor.
  Value loadF32(Value pointer, Value offset) {
    auto ptrType = LLVM::LLVMPointerType::get(b->getContext(), 1);
    Value address = LLVM::GEPOp::create(*b, ptrType, b->getF32Type(), pointer,
                                        ValueRange{offset});
    return LLVM::LoadOp::create(*b, b->getF32Type(), address);
  }
  void storeF32(Value pointer, Value offset, Value value) {
    auto ptrType = LLVM::LLVMPointerType::get(b->getContext(), 1);
    Value address = LLVM::GEPOp::create(*b, ptrType, b->getF32Type(), pointer,
                                        ValueRange{offset});
    LLVM::StoreOp::create(*b, value, address);
  }

  /// A row's log-sum-exp as scoreGradient takes it: in log2 units (kept
  /// finite for a finite lse), and +inf for a row that saw no key, so that
  /// every weight 2^(score - lse) of such a row is 0.
  Value weightLse(Value lse) {
    Value log2 = toLog2Saturated(lse);
    Value noKeys = arith::CmpFOp::create(
        *b, arith::CmpFPredicate::OEQ, log2,
        constF32(-std::numeric_limits<float>::infinity()));
    return arith::SelectOp::create(
        *b, noKeys, constF32(std::numeric_limits<float>::infinity()), log2);
  }
  /// A row's weightLse and its D, from the query's place in the
  /// [B, Hq, Sq] tensors.
  std::pair<Value, Value> rowStatistics(Value rowHead, Value query) {
    Value offset = lseOffset(rowHead, query);
    return {weightLse(loadF32(lsePtr, offset)), loadF32(delta, offset)};
  }

  /// One score's probability and the gradient of the loss with respect to
  /// its dot product, from the dot product Q·K, dP = dO·V, the row's
  /// weightLse and D. Without `bounds`, the key is known inside kv_len and
  /// the row's band (tileNeedsMask's tiles): only the score function and
  /// the terms are applied.
  struct ScoreGradient {
    Value probability, dot;
  };
  /// Whether scoreGradient needs the bounds whatever the tile: a key that a
  /// boolean mask hides scores a finite fill, and only the bounds' visibility
  /// tells it from a visible key's score.
  bool gradientNeedsBounds() const {
    return spec.problem.maskType && spec.problem.maskType.isInteger(1) &&
           spec.problem.maskedScore;
  }
  ScoreGradient scoreGradient(Value dot, Value dp, Value query, Value key,
                              Value rowMaskBase, Value rowBiasBase,
                              Value lseLog2, Value rowDelta,
                              bool bounds = true) {
    bounds = bounds || gradientNeedsBounds();
    Value visible;
    Value score = finishScore(dot, query, key, rowMaskBase, rowBiasBase,
                              /*raw=*/false, {}, bounds,
                              bounds ? &visible : nullptr);
    Value zero = constF32(0.0f);
    Value p = exp2(arith::SubFOp::create(*b, score, lseLog2));
    const AttentionProblem &problem = spec.problem;
    if (problem.addsToScores() ||
        (problem.maskedScore &&
         std::fabs(saturatedLog2(*problem.maskedScore)) >= 0x1p22f)) {
      // A score that saturated in log2 units (a fill or an additive term as
      // large as finfo.min): the forward weighs such keys uniformly in a row
      // where every score saturated, and not at all beside a finite score,
      // and their scores are constants. The row's lse (the fill, its ln Sk
      // lost to rounding) gives weight 1, so the weight is capped at 1/Sk.
      Value saturated = arith::AndIOp::create(
          *b,
          arith::CmpFOp::create(*b, arith::CmpFPredicate::OLE, score,
                                constF32(std::numeric_limits<float>::lowest())),
          arith::CmpIOp::create(*b, arith::CmpIPredicate::slt, key, kvLen));
      Value uniform = arith::DivFOp::create(
          *b, constF32(1.0f),
          arith::UIToFPOp::create(*b, b->getF32Type(), toI32(kvLen)));
      p = arith::SelectOp::create(*b, saturated,
                                  arith::MinimumFOp::create(*b, p, uniform),
                                  p);
      Value unsaturated = arith::XOrIOp::create(
          *b, saturated, arith::ConstantIntOp::create(*b, b->getI1Type(), 1));
      visible = visible ? arith::AndIOp::create(*b, visible, unsaturated)
                              .getResult()
                        : unsaturated;
    }
    // dS = P·(dP - D); a hidden key's score is a constant. (Without the
    // bounds, a hidden key scores -inf and has P = 0.)
    Value ds = fmul(p, arith::SubFOp::create(*b, dp, rowDelta));
    if (visible)
      ds = arith::SelectOp::create(*b, visible, ds, zero);
    // Through the score function: the scale, and softcap·tanh(x / softcap)
    // whose derivative is 1 - tanh².
    Value factor = scaleNatural;
    if (std::optional<float> cap = spec.problem.softcap) {
      Value t = tanh(fmul(fmul(dot, scaleNatural), constF32(1.0f / *cap)));
      factor = fmul(factor, arith::SubFOp::create(*b, constF32(1.0f),
                                                  fmul(t, t)));
    }
    return {p, fmul(ds, factor)};
  }


  /// The element offset (i64) of column `column` of row `firstRow + row`
  /// of a [*, D] tensor at `base` (rows `rowStride` apart), and whether that
  /// row is below `numRows`: rows past the end read the last one
  /// (`lastRow`), for the caller to replace by zeros.
  std::pair<Value, Value> rowElement(Value base, Value rowStride,
                                     Value firstRow, Value row, Value numRows,
                                     Value lastRow, Value column) {
    Value globalRow = add(firstRow, row);
    Value inBounds = arith::CmpIOp::create(*b, arith::CmpIPredicate::slt,
                                           globalRow, numRows);
    Value clamped = arith::MinSIOp::create(*b, globalRow, lastRow);
    return {add(base, add(mul(toI64(clamped), rowStride), toI64(column))),
            inBounds};
  }

  SmallVector<Value> zeros(int64_t count) {
    return SmallVector<Value>(count, constF32(0.0f));
  }

  int64_t headDim, valueDim;
  Value gradOut, delta, gradQ, gradK, gradV;
  SmallVector<Value> gradOutStrides, gradQStrides, gradKStrides, gradVStrides;
};

/// The tensor-core passes (MmaBackward.cpp): f16/bf16, head dims multiples
/// of 16 up to 128.
std::unique_ptr<AttentionKernelBuilder>
createMmaBackwardKernel(const KernelSpec &spec);

} // namespace mlir::kiln::detail::backward

#endif // KILN_LIB_CONVERSION_KILNTOGPU_SCHEDULES_BACKWARD_BACKWARDKERNEL_H
