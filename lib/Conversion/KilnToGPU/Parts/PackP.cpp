//===- PackP.cpp - P's packing into A fragments ---------------------------===//
//
// The online softmax leaves P in the m16n8 accumulator layout, which is
// the A fragment layout of m16n8k16 once two 8-key blocks are packed to the
// element type (PTX ISA, "Matrix Fragments for mma.m16n8k16").
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::kiln::detail;

Value KernelBuilderBase::packPair(Value low, Value high, Type elementType) {
  Type i32 = b->getI32Type();
  auto pairF32 = VectorType::get({2}, b->getF32Type());
  Value pair = LLVM::PoisonOp::create(*b, pairF32);
  pair = LLVM::InsertElementOp::create(
      *b, pair, low, arith::ConstantIntOp::create(*b, i32, 0));
  pair = LLVM::InsertElementOp::create(
      *b, pair, high, arith::ConstantIntOp::create(*b, i32, 1));
  Value narrow =
      LLVM::FPTruncOp::create(*b, VectorType::get({2}, elementType), pair);
  return LLVM::BitcastOp::create(*b, i32, narrow);
}

SmallVector<Value>
KernelBuilderBase::packAFragments(ArrayRef<Value> probabilities,
                                  Type elementType) {
  SmallVector<Value> fragments;
  for (size_t j = 0; j < probabilities.size() / 8; ++j) {
    ArrayRef<Value> low = probabilities.slice(4 * (2 * j), 4);
    ArrayRef<Value> high = probabilities.slice(4 * (2 * j + 1), 4);
    fragments.append({packPair(low[0], low[1], elementType),
                      packPair(low[2], low[3], elementType),
                      packPair(high[0], high[1], elementType),
                      packPair(high[2], high[3], elementType)});
  }
  return fragments;
}
