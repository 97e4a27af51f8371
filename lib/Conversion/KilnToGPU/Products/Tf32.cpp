//===- Tf32.cpp - The TF32 products of f32 sites ----------------*- C++ -*-===//
//
// f32 products on mma.sync.m16n8k8 with TF32 operands: each operand rounded
// to nearest (10 explicit mantissa bits) or, split (TF32x3), a high and a
// low TF32 part and three mma a product; with the split, each 8-key block's
// P·V is added to O in f32.
//
//===----------------------------------------------------------------------===//

#include "Products/Products.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::kiln::detail;

namespace {
/// `value` rounded to TF32 (to nearest, ties away from zero), as the i32
/// register an mma operand takes.
Value toTf32(ImplicitLocOpBuilder &b, Value value) {
  return NVVM::ConvertFloatToTF32Op::create(
      b, b.getI32Type(), value, NVVM::FPRoundingMode::RNA,
      NVVM::SaturationMode::NONE, /*relu=*/false);
}
} // namespace

Tf32Product::Operand Tf32Product::operand(ImplicitLocOpBuilder &b,
                                          Value value) const {
  Value high = toTf32(b, value);
  if (!split)
    return {high, Value()};
  Value rest = arith::SubFOp::create(
      b, value, LLVM::BitcastOp::create(b, b.getF32Type(), high));
  return {high, toTf32(b, rest)};
}

// One mma, or with split operands three (a_low·b_high, a_high·b_low, then
// a_high·b_high; a_low·b_low is below f32's precision).
void Tf32Product::product(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
                          ArrayRef<Operand> a,
                          ArrayRef<Operand> bFragment) const {
  auto part = [](ArrayRef<Operand> operands, bool low) {
    SmallVector<Value> values;
    for (const Operand &o : operands)
      values.push_back(low ? o.low : o.high);
    return values;
  };
  auto mma = [&](ArrayRef<Value> aPart, ArrayRef<Value> bPart) {
    mmaSync(b, aPart, bPart, acc, 8, NVVM::MMATypes::tf32);
  };
  if (split) {
    mma(part(a, true), part(bFragment, false));
    mma(part(a, false), part(bFragment, true));
  }
  mma(part(a, false), part(bFragment, false));
}

void Tf32Product::scores(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
                         ArrayRef<Operand> qFragment,
                         ArrayRef<Operand> kFragment) const {
  product(b, acc, qFragment, kFragment);
}

void Tf32Product::values(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
                         ArrayRef<Operand> pFragment,
                         ArrayRef<Operand> vFragment) const {
  if (!split) {
    product(b, acc, pFragment, vFragment);
    return;
  }
  // The tensor cores' f32 sums are not rounded as f32 adds are, and their
  // error grows with the number of keys summed: each 8-key block's product
  // starts from zero and is added to O with an f32 add.
  Value zero = arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f));
  SmallVector<Value> partial(4, zero);
  product(b, partial, pFragment, vFragment);
  for (int64_t e = 0; e < 4; ++e)
    acc[e] = arith::AddFOp::create(b, acc[e], partial[e]);
}
