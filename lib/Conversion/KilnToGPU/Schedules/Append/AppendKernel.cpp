//===- AppendKernel.cpp - The paged cache append kernel ---------*- C++ -*-===//
//
// A serving step writes each sequence's new keys and values into its pages
// before attention reads them. The new tokens come packed, key and value
// `[total_new, Hkv, D]`, sequence b owning tokens [new_offsets[b],
// new_offsets[b + 1]); kv_lens[b] counts the sequence's keys with the new
// ones (as the attention launch that follows reads them), so new token j of
// sequence b lands at position kv_lens[b] - n_b + j: page
// page_table[b][position / page_size], slot position % page_size.
//
// One block a new token: it finds its sequence by a binary search of
// new_offsets, then its threads copy the token's Hkv·D key elements and
// Hkv·Dv value elements, consecutive threads on consecutive elements.
// Nothing is written where the arguments do not name a place inside the
// caches (a token past new_offsets[batch], a negative position, a page
// entry past max_pages, a page outside [0, num_pages)): bad offsets or
// lengths never address outside the buffers.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"

#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::kiln;
using namespace mlir::kiln::detail;

namespace {

class AppendKernel : public KernelBuilderBase {
public:
  AppendKernel(Type elementType, int64_t headDim, int64_t valueDim,
               bool fp8Cache, bool perHeadScales)
      : elementType(elementType), headDim(headDim), valueDim(valueDim),
        fp8Cache(fp8Cache), perHeadScales(perHeadScales) {}

  gpu::GPUFuncOp build(OpBuilder &moduleBuilder, Location loc);

private:
  /// Element `index` (index or i64) of the int32 array `base`.
  Value loadI32(Value base, Value index);
  /// Copies the token's Hkv x `dim` elements from `source` (strides token,
  /// head) to the cache place `target` (head stride `targetHead`).
  void copyToken(Value source, Value sourceBase, Value sourceHead,
                 Value target, Value targetBase, Value targetHead,
                 Value kvHeads, int64_t dim, Value thread, Value scales);
  /// The e4m3 code (i8) of f32 `x`: rounded to nearest even, saturated to
  /// ±448 (the finite range; what cvt.rn.satfinite gives), NaN to 0x7F.
  Value toE4m3(Value x);

  Type elementType;
  int64_t headDim, valueDim;
  bool fp8Cache, perHeadScales;
};

Value AppendKernel::toE4m3(Value x) {
  ImplicitLocOpBuilder &builder = *b;
  Type i32 = builder.getI32Type(), f32 = builder.getF32Type();
  auto c = [&](int64_t value) -> Value {
    return arith::ConstantIntOp::create(builder, i32, value);
  };
  auto pow2 = [&](Value exponent) -> Value { // 2^e, e a normal exponent
    return arith::BitcastOp::create(
        builder, f32,
        arith::ShLIOp::create(builder, arith::AddIOp::create(builder, exponent,
                                                             c(127)),
                              c(23)));
  };
  Value bits = arith::BitcastOp::create(builder, i32, x);
  Value sign = arith::AndIOp::create(
      builder, arith::ShRUIOp::create(builder, bits, c(24)), c(0x80));
  Value magnitudeBits = arith::AndIOp::create(builder, bits, c(0x7FFFFFFF));
  Value magnitude = arith::BitcastOp::create(builder, f32, magnitudeBits);
  // The quantum at x's exponent: 2^(E - 3) for normal e4m3 (E >= -6), 2^-9
  // below (subnormals); x / quantum rounded to an integer, times the
  // quantum, is x rounded to e4m3 (a carry lands on the next exponent).
  Value exponent = arith::SubIOp::create(
      builder,
      arith::AndIOp::create(
          builder, arith::ShRUIOp::create(builder, magnitudeBits, c(23)),
          c(0xFF)),
      c(127));
  Value quantum = arith::SubIOp::create(
      builder, arith::MaxSIOp::create(builder, exponent, c(-6)), c(3));
  // (y + 2^23) - 2^23 is y rounded to an even integer, for 0 <= y < 2^22
  // (y < 2^5 here, or the value saturates).
  Value magic = arith::ConstantOp::create(builder,
                                          builder.getF32FloatAttr(8388608.0f));
  Value steps = arith::SubFOp::create(
      builder,
      arith::AddFOp::create(
          builder,
          arith::MulFOp::create(
              builder, magnitude,
              pow2(arith::SubIOp::create(builder, c(0), quantum))),
          magic),
      magic);
  Value rounded = arith::MulFOp::create(builder, steps, pow2(quantum));
  Value roundedBits = arith::BitcastOp::create(builder, i32, rounded);
  Value normal = arith::OrIOp::create(
      builder,
      arith::ShLIOp::create(
          builder,
          arith::SubIOp::create(
              builder,
              arith::ShRUIOp::create(builder, roundedBits, c(23)), c(120)),
          c(3)),
      arith::AndIOp::create(
          builder, arith::ShRUIOp::create(builder, roundedBits, c(20)), c(7)));
  Value subnormal = arith::FPToSIOp::create(
      builder, i32,
      arith::MulFOp::create(builder, rounded,
                            arith::ConstantOp::create(
                                builder, builder.getF32FloatAttr(512.0f))));
  Value isSubnormal = arith::CmpFOp::create(
      builder, arith::CmpFPredicate::OLT, rounded,
      arith::ConstantOp::create(builder, builder.getF32FloatAttr(0.015625f)));
  Value code = arith::SelectOp::create(builder, isSubnormal, subnormal, normal);
  Value saturated = arith::CmpFOp::create(
      builder, arith::CmpFPredicate::OGE, magnitude,
      arith::ConstantOp::create(builder, builder.getF32FloatAttr(448.0f)));
  code = arith::SelectOp::create(builder, saturated, c(0x7E), code);
  code = arith::OrIOp::create(builder, code, sign);
  Value isNaN =
      arith::CmpFOp::create(builder, arith::CmpFPredicate::UNO, x, x);
  code = arith::SelectOp::create(builder, isNaN, c(0x7F), code);
  return arith::TruncIOp::create(builder, builder.getI8Type(), code);
}

Value AppendKernel::loadI32(Value base, Value index) {
  ImplicitLocOpBuilder &builder = *b;
  auto ptrType = LLVM::LLVMPointerType::get(builder.getContext(), 1);
  if (index.getType().isIndex())
    index = toI64(index);
  Value address = LLVM::GEPOp::create(builder, ptrType, builder.getI32Type(),
                                      base, ValueRange{index});
  return LLVM::LoadOp::create(builder, builder.getI32Type(), address);
}

void AppendKernel::copyToken(Value source, Value sourceBase, Value sourceHead,
                             Value target, Value targetBase, Value targetHead,
                             Value kvHeads, int64_t dim, Value thread,
                             Value scales) {
  ImplicitLocOpBuilder &builder = *b;
  auto ptrType = LLVM::LLVMPointerType::get(builder.getContext(), 1);
  Value count = mul(kvHeads, constIndex(dim));
  forLoop(thread, count, constIndex(kAppendThreads), {},
          [&](Value element, ValueRange) -> SmallVector<Value> {
            Value head = arith::DivUIOp::create(builder, element,
                                                constIndex(dim));
            Value column = arith::RemUIOp::create(builder, element,
                                                  constIndex(dim));
            Value from = add(add(sourceBase, mul(toI64(head), sourceHead)),
                             toI64(column));
            Value to = add(add(targetBase, mul(toI64(head), targetHead)),
                           toI64(column));
            Value value = LLVM::LoadOp::create(
                builder, elementType,
                LLVM::GEPOp::create(builder, ptrType, elementType, source,
                                    ValueRange{from}));
            if (!fp8Cache) {
              LLVM::StoreOp::create(builder, value,
                                    LLVM::GEPOp::create(builder, ptrType,
                                                        elementType, target,
                                                        ValueRange{to}));
              return {};
            }
            // value / scale, in f32, to e4m3.
            Value scale = LLVM::LoadOp::create(
                builder, builder.getF32Type(),
                LLVM::GEPOp::create(
                    builder, ptrType, builder.getF32Type(), scales,
                    ValueRange{perHeadScales ? toI64(head)
                                             : arith::ConstantIntOp::create(
                                                   builder,
                                                   builder.getI64Type(), 0)}));
            Value wide = arith::ExtFOp::create(builder, builder.getF32Type(),
                                               value);
            LLVM::StoreOp::create(
                builder, toE4m3(arith::DivFOp::create(builder, wide, scale)),
                LLVM::GEPOp::create(builder, ptrType, builder.getI8Type(),
                                    target, ValueRange{to}));
            return {};
          });
}

gpu::GPUFuncOp AppendKernel::build(OpBuilder &moduleBuilder, Location loc) {
  MLIRContext *ctx = moduleBuilder.getContext();
  auto ptrType = LLVM::LLVMPointerType::get(ctx, 1);
  Type i32 = moduleBuilder.getI32Type(), i64 = moduleBuilder.getI64Type();
  SmallVector<Type> argTypes;
  for (const std::string &kind : pagedAppendArgumentKinds())
    argTypes.push_back(kind == "pointer" ? ptrType : kind == "i32" ? i32 : i64);
  auto func = gpu::GPUFuncOp::create(
      moduleBuilder, loc,
      pagedAppendKernelName(elementType, headDim, valueDim, fp8Cache,
                            perHeadScales),
      moduleBuilder.getFunctionType(argTypes, {}), TypeRange{}, TypeRange{});
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                moduleBuilder.getUnitAttr());
  func.setKnownBlockSizeAttr(
      moduleBuilder.getDenseI32ArrayAttr({int32_t(kAppendThreads), 1, 1}));

  ImplicitLocOpBuilder builder(loc, ctx);
  builder.setInsertionPointToStart(&func.getBody().front());
  b = &builder;
  ValueRange args = func.getArguments();
  // The argument order of pagedAppendArgumentNames.
  Value newKeys = args[0], newValues = args[1], keyCache = args[2],
        valueCache = args[3], pageTable = args[4], kvLens = args[5],
        newOffsets = args[6];
  Value batch = toIndex(args[7]), kvHeads = toIndex(args[8]),
        totalNew = toIndex(args[9]), maxPages = toIndex(args[10]),
        numPages = toIndex(args[11]), pageSize = args[12];
  Value keyStrides[2] = {args[13], args[14]};
  Value valueStrides[2] = {args[15], args[16]};
  Value keyCacheStrides[3] = {args[17], args[18], args[19]};
  Value valueCacheStrides[3] = {args[20], args[21], args[22]};
  Value tableStride = args[23];
  Value keyScales = args[24], valueScales = args[25];

  // Launched plainly (never early): the kernels before it on the stream
  // are done when it starts.
  Value token = gpu::BlockIdOp::create(builder, gpu::Dimension::x);
  Value thread = gpu::ThreadIdOp::create(builder, gpu::Dimension::x);
  Value inBatch = arith::CmpIOp::create(
      builder, arith::CmpIPredicate::ult, token, totalNew);
  Value hasSequences = arith::CmpIOp::create(
      builder, arith::CmpIPredicate::ugt, batch, constIndex(0));
  ifThen(arith::AndIOp::create(builder, inBatch, hasSequences), [&] {
    // The last sequence b with new_offsets[b] <= token: hi - lo halves
    // each step, so bit_width(batch) steps leave hi = lo + 1.
    Value steps = toIndex(arith::SubIOp::create(
        builder, arith::ConstantIntOp::create(builder, i32, 32),
        LLVM::CountLeadingZerosOp::create(builder, i32, toI32(batch),
                                          /*is_zero_poison=*/false)));
    Value tokenI32 = toI32(token);
    scf::ForOp search = forLoop(
        constIndex(0), steps, constIndex(1),
        ValueRange{constIndex(0), batch},
        [&](Value, ValueRange bounds) -> SmallVector<Value> {
          Value lo = bounds[0], hi = bounds[1];
          Value mid = arith::ShRUIOp::create(builder, add(lo, hi),
                                             constIndex(1));
          Value starts = arith::CmpIOp::create(
              builder, arith::CmpIPredicate::sle, loadI32(newOffsets, mid),
              tokenI32);
          return {arith::SelectOp::create(builder, starts, mid, lo),
                  arith::SelectOp::create(builder, starts, hi, mid)};
        });
    Value sequence = search.getResult(0);
    Value first = loadI32(newOffsets, sequence);
    Value end = loadI32(newOffsets, add(sequence, constIndex(1)));
    Value keys = loadI32(kvLens, sequence);
    // position = kv_lens[b] - (end - first) + (token - first), in i64 so
    // that no offsets overflow it.
    auto wide = [&](Value i32Value) -> Value {
      return arith::ExtSIOp::create(builder, i64, i32Value);
    };
    Value position = add(sub(wide(keys), sub(wide(end), wide(first))),
                         sub(toI64(token), wide(first)));
    auto i64Const = [&](int64_t value) -> Value {
      return arith::ConstantIntOp::create(builder, i64, value);
    };
    Value size = wide(pageSize);
    Value entry = arith::DivSIOp::create(builder, position, size);
    Value owned = arith::AndIOp::create(
        builder,
        arith::CmpIOp::create(builder, arith::CmpIPredicate::sle, first,
                              tokenI32),
        arith::CmpIOp::create(builder, arith::CmpIPredicate::slt, tokenI32,
                              end));
    Value placed = arith::AndIOp::create(
        builder,
        arith::CmpIOp::create(builder, arith::CmpIPredicate::sge, position,
                              i64Const(0)),
        arith::CmpIOp::create(builder, arith::CmpIPredicate::slt, entry,
                              toI64(maxPages)));
    ifThen(arith::AndIOp::create(builder, owned, placed), [&] {
      Value page = loadI32(
          pageTable, add(mul(toI64(sequence), tableStride), entry));
      Value pageInPool = arith::AndIOp::create(
          builder,
          arith::CmpIOp::create(builder, arith::CmpIPredicate::sge, page,
                                arith::ConstantIntOp::create(builder, i32, 0)),
          arith::CmpIOp::create(builder, arith::CmpIPredicate::slt,
                                wide(page), toI64(numPages)));
      ifThen(pageInPool, [&] {
        Value slot = arith::RemSIOp::create(builder, position, size);
        Value tokenI64 = toI64(token);
        auto cacheBase = [&](Value *strides) {
          return add(mul(wide(page), strides[0]), mul(slot, strides[1]));
        };
        copyToken(newKeys, mul(tokenI64, keyStrides[0]), keyStrides[1],
                  keyCache, cacheBase(keyCacheStrides), keyCacheStrides[2],
                  kvHeads, headDim, thread, keyScales);
        copyToken(newValues, mul(tokenI64, valueStrides[0]), valueStrides[1],
                  valueCache, cacheBase(valueCacheStrides),
                  valueCacheStrides[2], kvHeads, valueDim, thread,
                  valueScales);
      });
    });
  });
  builder.setInsertionPointToEnd(&func.getBody().front());
  gpu::ReturnOp::create(builder);
  b = nullptr;
  return func;
}

} // namespace

std::string mlir::kiln::detail::pagedAppendKernelName(Type elementType,
                                                      int64_t headDim,
                                                      int64_t valueDim,
                                                      bool fp8Cache,
                                                      bool perHeadScales) {
  std::string name =
      llvm::formatv("kiln_paged_append_{0}{1}_d{2}",
                    getElementTypeName(elementType),
                    fp8Cache ? (perHeadScales ? "_f8e4m3h" : "_f8e4m3") : "",
                    headDim)
          .str();
  if (valueDim != headDim)
    name += llvm::formatv("_dv{0}", valueDim).str();
  return name;
}

SmallVector<std::string> mlir::kiln::detail::pagedAppendArgumentNames() {
  return {
#define KILN_APPEND_ARG(name, kind) #name,
#include "kiln/Runtime/PagedAppendArgs.def"
  };
}

SmallVector<std::string> mlir::kiln::detail::pagedAppendArgumentKinds() {
  return {
#define KILN_APPEND_ARG(name, kind) #kind,
#include "kiln/Runtime/PagedAppendArgs.def"
  };
}

gpu::GPUFuncOp mlir::kiln::detail::buildPagedAppendKernel(
    OpBuilder &moduleBuilder, Location loc, Type elementType, int64_t headDim,
    int64_t valueDim, bool fp8Cache, bool perHeadScales) {
  return AppendKernel(elementType, headDim, valueDim, fp8Cache, perHeadScales)
      .build(moduleBuilder, loc);
}

KernelContract mlir::kiln::detail::pagedAppendContract(Type elementType,
                                                       int64_t headDim,
                                                       int64_t valueDim,
                                                       bool fp8Cache) {
  KernelContract contract;
  contract.kind = KernelKind::PagedAppend;
  contract.threadsPerBlock = kAppendThreads;
  contract.rowsPerBlock = 1;
  contract.setArguments(pagedAppendArgumentNames(),
                        pagedAppendArgumentKinds());
  contract.grid.blocks = GridRule::Blocks::NewTokens;
  contract.dtype = getElementTypeName(elementType);
  contract.cacheDtype = fp8Cache ? "f8e4m3" : contract.dtype;
  contract.headDim = headDim;
  contract.valueHeadDim = valueDim;
  return contract;
}
