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

using namespace mlir;
using namespace mlir::kiln::detail;

void AttentionKernelBuilder::storeOutput(Value value, Value offset) {
  if (!spec.problem.elementType.isF32())
    value = arith::TruncFOp::create(*b, spec.problem.elementType, value);
  auto ptrType = LLVM::LLVMPointerType::get(b->getContext(), 1);
  Value address = LLVM::GEPOp::create(*b, ptrType, spec.problem.elementType,
                                      out, ValueRange{offset});
  LLVM::StoreOp::create(*b, value, address);
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
