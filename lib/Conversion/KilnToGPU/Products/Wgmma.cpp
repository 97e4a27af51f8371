//===- Wgmma.cpp - Hopper warpgroup matrix products -------------*- C++ -*-===//
//
// The 128-byte swizzled layout, its wgmma descriptors, and the wgmma
// products (WgmmaProduct) as inline PTX.
//
//===----------------------------------------------------------------------===//

#include "Products/Wgmma.h"
#include "Products/Products.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::kiln::detail;

Value mlir::kiln::detail::swizzledOffset(ImplicitLocOpBuilder &b, int64_t rows,
                                         Value row, Value column) {
  auto index = [&](int64_t value) {
    return arith::ConstantIndexOp::create(b, value);
  };
  // ldmatrix's eight rows of one chunk fall in eight bank groups, as do a
  // row's eight chunks written by eight threads.
  Value slab = arith::DivUIOp::create(b, column, index(kSwizzleElements));
  Value chunk = arith::DivUIOp::create(
      b, arith::RemUIOp::create(b, column, index(kSwizzleElements)), index(8));
  Value swizzled =
      arith::XOrIOp::create(b, chunk, arith::RemUIOp::create(b, row, index(8)));
  Value bytes = arith::AddIOp::create(
      b,
      arith::AddIOp::create(b,
                            arith::MulIOp::create(b, slab, index(rows * 128)),
                            arith::MulIOp::create(b, row, index(128))),
      arith::MulIOp::create(b, swizzled, index(16)));
  return bytes;
}

Value mlir::kiln::detail::wgmmaDescriptor(ImplicitLocOpBuilder &b, Value tile,
                                          int64_t offset, int64_t leading,
                                          int64_t stride) {
  Type i64 = b.getI64Type();
  auto constI64 = [&](int64_t value) {
    return arith::ConstantIntOp::create(b, i64, value);
  };
  // Bits 0-13: start address / 16; 16-29: leading byte offset / 16; 32-45:
  // stride byte offset / 16; 62-63: 1 for the 128-byte swizzle. The base
  // offset (bits 49-51) is 0: tiles start on 1024-byte boundaries.
  Value address = LLVM::PtrToIntOp::create(b, i64, tile);
  address = arith::AddIOp::create(b, address, constI64(offset));
  Value start = arith::AndIOp::create(
      b, arith::ShRUIOp::create(b, address, constI64(4)), constI64(0x3FFF));
  int64_t fixed =
      ((leading >> 4) << 16) | ((stride >> 4) << 32) | (int64_t(1) << 62);
  return arith::OrIOp::create(b, start, constI64(fixed));
}

void mlir::kiln::detail::fenceSharedForAsyncProxy(ImplicitLocOpBuilder &b) {
  NVVM::FenceProxyOp::create(
      b, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
}

void WgmmaProduct::scores(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
                          Value qDescriptor, Value kDescriptor,
                          bool overwrite) const {
  product(b, acc, qDescriptor, {}, kDescriptor, /*transposeB=*/false,
          overwrite);
}

void WgmmaProduct::values(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
                          ArrayRef<Value> pFragment, Value vDescriptor) const {
  product(b, acc, Value(), pFragment, vDescriptor, /*transposeB=*/true);
}

void WgmmaProduct::product(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
                           Value a, ArrayRef<Value> aFragment,
                           Value bDescriptor, bool transposeB,
                           bool overwrite) const {
  MLIRContext *ctx = b.getContext();
  // One accumulator a thread per (row, column) pair: N = 2·count.
  int64_t count = acc.size();
  int64_t n = 2 * count;
  std::string type = elementType.isBF16() ? "bf16" : "f16";
  // Operands: the accumulators (tied to the results), A, B's descriptor and
  // scale-d (always 1: the accumulators hold what to add to).
  std::string text = "{\n.reg .pred p;\n";
  int64_t next = 2 * count;
  int64_t aFirst = next;
  next += aFragment.empty() ? 1 : 4;
  int64_t bIndex = next++;
  int64_t scaleIndex = next++;
  text += llvm::formatv("setp.ne.b32 p, ${0}, 0;\n", scaleIndex).str();
  text += llvm::formatv(
              "wgmma.mma_async.sync.aligned.m64n{0}k16.f32.{1}.{1} {{", n, type)
              .str();
  for (int64_t i = 0; i < count; ++i)
    text += llvm::formatv("{0}${1}", i ? ", " : "", i).str();
  text += "}, ";
  if (aFragment.empty())
    text += llvm::formatv("${0}", aFirst).str();
  else
    text += llvm::formatv("{{${0}, ${1}, ${2}, ${3}}", aFirst, aFirst + 1,
                          aFirst + 2, aFirst + 3)
                .str();
  // imm-scale-a, imm-scale-b, then imm-trans-a (descriptor A only) and
  // imm-trans-b.
  text += llvm::formatv(", ${0}, p, 1, 1, {1}{2};\n}", bIndex,
                        aFragment.empty() ? "0, " : "", transposeB ? 1 : 0)
              .str();
  std::string constraints;
  for (int64_t i = 0; i < count; ++i)
    constraints += "=f,";
  for (int64_t i = 0; i < count; ++i)
    constraints += llvm::formatv("{0},", i).str();
  constraints += aFragment.empty() ? "l," : "r,r,r,r,";
  constraints += "l,r";

  SmallVector<Value> operands(acc.begin(), acc.end());
  if (aFragment.empty())
    operands.push_back(a);
  else
    operands.append(aFragment.begin(), aFragment.end());
  operands.push_back(bDescriptor);
  operands.push_back(
      arith::ConstantIntOp::create(b, b.getI32Type(), overwrite ? 0 : 1));
  auto structType = LLVM::LLVMStructType::getLiteral(
      ctx, SmallVector<Type>(count, b.getF32Type()));
  auto asmOp = LLVM::InlineAsmOp::create(
      b, structType, operands, text, constraints, /*has_side_effects=*/true,
      /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(ctx, LLVM::AsmDialect::AD_ATT),
      /*operand_attrs=*/ArrayAttr());
  for (int64_t i = 0; i < count; ++i)
    acc[i] = LLVM::ExtractValueOp::create(b, asmOp.getRes(), i);
}
