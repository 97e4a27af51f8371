//===- Fragments.cpp - The tensor-core kernel's fragments -------*- C++ -*-===//
//
// The tensor-core kernel's reads of its mma.sync fragments from the shared
// tiles with ldmatrix (PTX ISA, "Matrix Fragments for mma.m16n8k16"), and
// the proxy fence between the tiles' copies and wgmma's reads.
//
//===----------------------------------------------------------------------===//

#include "Schedules/Mma/MmaKernel.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;
using namespace mlir::kiln::detail;
using namespace mlir::kiln::detail::mma;

SmallVector<Value> MmaKernel::loadMatrices(Value address, bool transpose) {
  return ldmatrixX4(*b, address, transpose);
}

Value MmaKernel::blockAddress(Value tile, Value firstRow, int64_t firstColumn,
                              Value rowHalf, Value columnHalf) {
  Value row = add(firstRow, add(mul(rowHalf, constIndex(8)), matrixRow));
  Value column = add(constIndex(firstColumn), mul(columnHalf, constIndex(8)));
  return tileAddress(tile, row, column);
}

void MmaKernel::asyncProxyFence() {
  if (wgmma)
    fenceSharedForAsyncProxy(*b);
}
