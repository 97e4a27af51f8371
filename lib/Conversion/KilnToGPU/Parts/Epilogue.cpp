//===- Epilogue.cpp - Normalising and storing the output ------------------===//
//
// The output's store in the element type, and the normalise-and-store of a
// thread's two rows of the m16n8 layout shared by the TF32 and the
// warp-specialised kernels (the tensor-core kernel's own, with its decode
// shares and split partials, is in MmaEpilogue.cpp).
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>

using namespace mlir;
using namespace mlir::kiln::detail;

void AttentionKernelBuilder::storeOutput(Value value, Value offset) {
  storeElement(out, value, offset);
}

void AttentionKernelBuilder::storeElement(Value base, Value value,
                                          Value offset) {
  if (!spec.problem.elementType.isF32())
    value = arith::TruncFOp::create(*b, spec.problem.elementType, value);
  auto ptrType = LLVM::LLVMPointerType::get(b->getContext(), 1);
  Value address = LLVM::GEPOp::create(*b, ptrType, spec.problem.elementType,
                                      base, ValueRange{offset});
  LLVM::StoreOp::create(*b, value, address);
}

Value AttentionKernelBuilder::lseOffset(Value rowHead, Value query) {
  return toI64(add(mul(add(mul(batch, numQueryHeads), rowHead), qLen), query));
}

void AttentionKernelBuilder::storeLse(Value rowHead, Value query, Value max,
                                      Value sum) {
  // lse = ln(Σ 2^(s - max)) + max·ln 2 = (max + log2 sum)·ln 2; a row
  // that saw no key (sum 0) has -inf.
  const float ln2 = 0.6931471805599453f;
  Value hasKeys =
      arith::CmpFOp::create(*b, arith::CmpFPredicate::OGT, sum, constF32(0.0f));
  Value lse = fmul(fadd(max, log2(sum)), constF32(ln2));
  // A row whose largest score saturated in log2 units (a fill or an
  // additive mask as large as finfo.min) has the fill's lse, f32's lowest:
  // max·ln 2 would be a third smaller, and the backward, which takes the
  // lse back to log2 units, would no longer meet the saturated scores.
  Value lowest = constF32(std::numeric_limits<float>::lowest());
  Value saturated =
      arith::CmpFOp::create(*b, arith::CmpFPredicate::OLE, max, lowest);
  lse = arith::SelectOp::create(*b, saturated, lowest, lse);
  lse = arith::SelectOp::create(
      *b, hasKeys, lse,
      constF32(-std::numeric_limits<float>::infinity()));
  auto ptrType = LLVM::LLVMPointerType::get(b->getContext(), 1);
  Value address =
      LLVM::GEPOp::create(*b, ptrType, b->getF32Type(), lsePtr,
                          ValueRange{lseOffset(rowHead, query)});
  LLVM::StoreOp::create(*b, lse, address);
}

void AttentionKernelBuilder::storeNormalisedRows(
    ValueRange results, ArrayRef<Value> queryRows,
    llvm::function_ref<void(int64_t r, Value inverse, Value rowOffset)>
        storeRow) {
  for (int64_t r = 0; r < 2; ++r) {
    Value inverse =
        reciprocalOrZero(butterfly(results[2 + r], /*isMax=*/false, 2));
    Value inBounds = arith::CmpIOp::create(*b, arith::CmpIPredicate::slt,
                                           queryRows[r], qLen);
    ifThen(inBounds, [&] {
      Value rowOffset = add(outBase, mul(toI64(queryRows[r]), outStrides[2]));
      storeRow(r, inverse, rowOffset);
    });
  }
}
