//===- MmaSync.cpp - The mma.sync products ---------------------*- C++ -*-===//
//
// m16n8k16 mma.sync on f16 or bf16 fragments (MmaSyncProduct) and the
// mma.sync instruction the TF32 products share (PTX ISA, "Matrix Fragments
// for mma.m16n8k16").
//
//===----------------------------------------------------------------------===//

#include "Products/Products.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include <array>

using namespace mlir;
using namespace mlir::kiln::detail;

void mlir::kiln::detail::mmaSync(ImplicitLocOpBuilder &b, ArrayRef<Value> a,
                                 ArrayRef<Value> bFragment,
                                 MutableArrayRef<Value> acc, int64_t k,
                                 NVVM::MMATypes type) {
  Type f32 = b.getF32Type();
  auto structType =
      LLVM::LLVMStructType::getLiteral(b.getContext(), {f32, f32, f32, f32});
  Value result = NVVM::MmaOp::create(
      b, structType, SmallVector<Value>(a), SmallVector<Value>(bFragment),
      SmallVector<Value>(acc), ArrayRef<int64_t>{16, 8, k}, std::nullopt,
      std::nullopt, std::array<NVVM::MMATypes, 2>{type, type},
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                     NVVM::MMALayout::col});
  for (int64_t i = 0; i < 4; ++i)
    acc[i] = LLVM::ExtractValueOp::create(b, result, i);
}

SmallVector<Value> mlir::kiln::detail::ldmatrixX4(ImplicitLocOpBuilder &b,
                                                  Value address,
                                                  bool transpose) {
  MLIRContext *ctx = b.getContext();
  Type i32 = b.getI32Type();
  auto structType = LLVM::LLVMStructType::getLiteral(ctx, {i32, i32, i32, i32});
  Value result = NVVM::LdMatrixOp::create(
      b, structType, address, /*num=*/4,
      transpose ? NVVM::MMALayout::col : NVVM::MMALayout::row,
      NVVM::LdStMatrixShapeAttr::get(ctx, 8, 8), NVVM::LdStMatrixEltType::B16);
  SmallVector<Value> registers;
  for (int64_t i = 0; i < 4; ++i)
    registers.push_back(LLVM::ExtractValueOp::create(b, result, i));
  return registers;
}

namespace {
/// acc += a·b on one m16n8k16 mma of `elementType` registers.
void mma16(ImplicitLocOpBuilder &b, Type elementType, ArrayRef<Value> a,
           ArrayRef<Value> bFragment, MutableArrayRef<Value> acc) {
  bool isBF16 = elementType.isBF16();
  // bf16 operands are passed as i32, f16 ones as vector<2xf16>.
  auto operand = [&](Value reg) -> Value {
    if (isBF16)
      return reg;
    return LLVM::BitcastOp::create(b, VectorType::get({2}, b.getF16Type()),
                                   reg);
  };
  SmallVector<Value> aOperands, bOperands;
  for (Value reg : a)
    aOperands.push_back(operand(reg));
  for (Value reg : bFragment)
    bOperands.push_back(operand(reg));
  mmaSync(b, aOperands, bOperands, acc, 16,
          isBF16 ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16);
}
} // namespace

void MmaSyncProduct::scores(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
                            ArrayRef<Value> qFragment,
                            ArrayRef<Value> kFragment) const {
  mma16(b, elementType, qFragment, kFragment, acc);
}

void MmaSyncProduct::values(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
                            ArrayRef<Value> pFragment,
                            ArrayRef<Value> vFragment) const {
  mma16(b, elementType, pFragment, vFragment, acc);
}
