//===- CombineKernel.cpp - The split-KV combine kernel ----------*- C++ -*-===//
//
// When a launch splits each block's keys over several blocks, every split
// writes its rows' normalised partial output O_s and softmax statistics
// (max m_s and sum l_s, log2 units) to a workspace. This kernel reduces them
// per row: with M = max_s m_s and w_s = l_s·2^(m_s - M),
// out = Σ_s w_s·O_s / Σ_s w_s, the decomposition the CPU form uses. Keeping
// the sum beside the max (rather than one log-sum-exp) keeps the weights
// exact when every score is a large finite fill. One block of
// kCombineWarps warps reduces one row: every warp reads all the statistics
// (lane l those of splits l, l + 32, ...), warp w sums the partial outputs
// of splits w, w + kCombineWarps, ... for the contiguous columns each lane
// owns (vector loads), and the warps' sums meet in shared memory. The work
// is a short chain of dependent steps, not bandwidth: the slots a warp walks
// are unrolled with a batch's loads issued together, and one uniform branch
// on the split count picks how many slots, so a launch of at most
// kCombineWarps splits reads its partials in one round of loads and one of
// 128 splits in two.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"

#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <functional>
#include <limits>

using namespace mlir;
using namespace mlir::kiln;
using namespace mlir::kiln::detail;

namespace {

class CombineKernel : public KernelBuilderBase {
public:
  CombineKernel(Type elementType, int64_t valueDim, bool waitForGrid)
      : elementType(elementType), valueDim(valueDim), waitForGrid(waitForGrid) {
  }

  gpu::GPUFuncOp build(OpBuilder &moduleBuilder, Location loc);

private:
  Type elementType;
  int64_t valueDim;
  bool waitForGrid;
};

gpu::GPUFuncOp CombineKernel::build(OpBuilder &moduleBuilder, Location loc) {
  MLIRContext *ctx = moduleBuilder.getContext();
  auto ptrType = LLVM::LLVMPointerType::get(ctx, 1);
  Type i32 = moduleBuilder.getI32Type(), i64 = moduleBuilder.getI64Type();
  SmallVector<Type> argTypes;
  for (const std::string &kind : splitCombineArgumentKinds())
    argTypes.push_back(kind == "pointer" ? ptrType : kind == "i32" ? i32 : i64);
  // Each warp's column sums, [warp][column], for the block's final sum.
  int64_t columnsPerLane = llvm::divideCeil(valueDim, kWarpSize);
  auto partials = MemRefType::get(
      {kCombineWarps, columnsPerLane * kWarpSize}, moduleBuilder.getF32Type(),
      nullptr,
      gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup));
  auto func = gpu::GPUFuncOp::create(
      moduleBuilder, loc, splitCombineKernelName(elementType, valueDim),
      moduleBuilder.getFunctionType(argTypes, {}), TypeRange{partials},
      TypeRange{});
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                moduleBuilder.getUnitAttr());
  func.setKnownBlockSizeAttr(
      moduleBuilder.getDenseI32ArrayAttr({int32_t(kCombineThreads), 1, 1}));

  ImplicitLocOpBuilder builder(loc, ctx);
  builder.setInsertionPointToStart(&func.getBody().front());
  b = &builder;
  ValueRange args = func.getArguments();
  Value workspace = args[0], out = args[1];
  Value numSplits = toIndex(args[2]), batch = toIndex(args[3]),
        heads = toIndex(args[4]), qLen = toIndex(args[5]);
  Value outStrides[3] = {args[6], args[7], args[8]};

  // Launched early (programmatic stream serialization), the block may run
  // before the split kernel is done: nothing of the workspace is read
  // before that kernel has finished and its writes are visible.
  if (waitForGrid)
    NVVM::GriddepcontrolOp::create(builder, NVVM::GridDepActionKind::wait);
  Value threadId = gpu::ThreadIdOp::create(builder, gpu::Dimension::x);
  Value warp = arith::DivUIOp::create(builder, threadId, constIndex(kWarpSize));
  Value lane = arith::RemUIOp::create(builder, threadId, constIndex(kWarpSize));
  Value row = gpu::BlockIdOp::create(builder, gpu::Dimension::x);
  Value rows = mul(mul(batch, heads), qLen);
  auto inRange = scf::IfOp::create(
      builder,
      arith::CmpIOp::create(builder, arith::CmpIPredicate::ult, row, rows),
      /*withElse=*/false);
  builder.setInsertionPointToStart(&inRange.getThenRegion().front());

  SplitSums sums =
      sumSplits(workspace, row, rows, numSplits, valueDim, lane, warp,
                kCombineWarps, kMaxSplitsPerLaunch);
  Value zero = constF32(0.0f);
  Value total = sums.total;
  Value dim = constIndex(valueDim);
  Value hasKeys =
      arith::CmpFOp::create(builder, arith::CmpFPredicate::OGT, total, zero);
  Value inverse = arith::SelectOp::create(
      builder, hasKeys, arith::DivFOp::create(builder, constF32(1.0f), total),
      zero);

  // The warps' sums meet in shared memory; thread t then owns columns t,
  // t + kCombineThreads, ... of out[b, h, q, :] in the output's element type.
  Value buffer = func.getWorkgroupAttributions()[0];
  for (int64_t c = 0; c < columnsPerLane; ++c)
    memref::StoreOp::create(
        builder, sums.columns[c], buffer,
        ValueRange{warp, add(sums.firstColumn, constIndex(c))});
  gpu::BarrierOp::create(builder);
  Value query = arith::RemUIOp::create(builder, row, qLen);
  Value sequenceHead = arith::DivUIOp::create(builder, row, qLen);
  Value head = arith::RemUIOp::create(builder, sequenceHead, heads);
  Value sequence = arith::DivUIOp::create(builder, sequenceHead, heads);
  Value rowOffset = add(
      add(mul(toI64(sequence), outStrides[0]), mul(toI64(head), outStrides[1])),
      mul(toI64(query), outStrides[2]));
  for (int64_t first = 0; first < valueDim; first += kCombineThreads) {
    Value column = add(threadId, constIndex(first));
    auto ifOp = scf::IfOp::create(
        builder,
        arith::CmpIOp::create(builder, arith::CmpIPredicate::ult, column,
                              dim),
        /*withElse=*/false);
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(&ifOp.getThenRegion().front());
    Value sum = zero;
    for (int64_t w = 0; w < kCombineWarps; ++w)
      sum = fadd(sum, memref::LoadOp::create(
                          builder, buffer, ValueRange{constIndex(w), column}));
    Value value = fmul(sum, inverse);
    Value narrow =
        elementType.isF32()
            ? value
            : Value(arith::TruncFOp::create(builder, elementType, value));
    Value address = LLVM::GEPOp::create(builder, ptrType, elementType, out,
                                        ValueRange{add(rowOffset,
                                                       toI64(column))});
    LLVM::StoreOp::create(builder, narrow, address);
  }
  builder.setInsertionPointToEnd(&func.getBody().front());
  gpu::ReturnOp::create(builder);
  b = nullptr;
  return func;
}

} // namespace

KernelBuilderBase::SplitSums KernelBuilderBase::sumSplits(
    Value workspace, Value row, Value rows, Value numSplits, int64_t valueDim,
    Value lane, Value firstSplit, int64_t stride, int64_t maxSplits) {
  assert(kWarpSize % stride == 0 && maxSplits % stride == 0 &&
         "a warp's splits map onto the lanes' statistics registers");
  ImplicitLocOpBuilder &builder = *b;
  Type f32 = builder.getF32Type(), i32 = builder.getI32Type();
  auto globalPtr = LLVM::LLVMPointerType::get(builder.getContext(), 1);
  // `count` floats from workspace[index], `width` a load (a vector load
  // assumes index·4 is a multiple of 4·width bytes: the workspace is 16-byte
  // aligned).
  auto loadFloats = [&](Value index, int64_t width, int64_t count) {
    SmallVector<Value> values;
    for (int64_t first = 0; first < count; first += width) {
      Value address = LLVM::GEPOp::create(
          builder, globalPtr, f32, workspace,
          ValueRange{toI64(add(index, constIndex(first)))});
      if (width == 1) {
        values.push_back(LLVM::LoadOp::create(builder, f32, address));
        continue;
      }
      Value vector = LLVM::LoadOp::create(
          builder, VectorType::get({width}, f32), address,
          /*alignment=*/4 * width);
      for (int64_t e = 0; e < width; ++e)
        values.push_back(LLVM::ExtractElementOp::create(
            builder, vector, arith::ConstantIntOp::create(builder, i32, e)));
    }
    return values;
  };

  Value dim = constIndex(valueDim);
  Value statistics = mul(mul(numSplits, rows), dim);
  Value negInf = constF32(-std::numeric_limits<float>::infinity());
  Value zero = constF32(0.0f);
  Value lastSplit = sub(numSplits, constIndex(1));

  // Lane l holds the statistics of splits l, l + 32, ... (at most
  // maxSplits): M, the largest max, and each split's weight
  // w_s = l_s·2^(m_s - M), all loaded at once (a split's max and sum are
  // adjacent, workspace[statistics + 2·(s·rows + row)]: one 8-byte load
  // where the head dim keeps them aligned).
  int64_t slotsPerLane = llvm::divideCeil(maxSplits, kWarpSize);
  SmallVector<Value> splitMax, splitSum;
  Value max = negInf;
  for (int64_t k = 0; k < slotsPerLane; ++k) {
    Value split = add(lane, constIndex(k * kWarpSize));
    Value exists = arith::CmpIOp::create(builder, arith::CmpIPredicate::ult,
                                         split, numSplits);
    Value clamped = arith::MinUIOp::create(builder, split, lastSplit);
    Value statistic =
        add(statistics, mul(add(mul(clamped, rows), row), constIndex(2)));
    SmallVector<Value> pair =
        loadFloats(statistic, valueDim % 2 == 0 ? 2 : 1, 2);
    splitMax.push_back(
        arith::SelectOp::create(builder, exists, pair[0], negInf));
    splitSum.push_back(arith::SelectOp::create(builder, exists, pair[1], zero));
    max = fmax(max, splitMax.back());
  }
  max = butterfly(max, /*isMax=*/true, kWarpSize / 2);
  // Rows that saw no key anywhere keep max = -inf; 0 keeps exp2 from NaN.
  Value isEmpty =
      arith::CmpFOp::create(builder, arith::CmpFPredicate::OEQ, max, negInf);
  Value safeMax = arith::SelectOp::create(builder, isEmpty, zero, max);
  SmallVector<Value> weights;
  Value laneTotal = zero;
  for (int64_t k = 0; k < slotsPerLane; ++k) {
    weights.push_back(fmul(
        splitSum[k],
        exp2(arith::SubFOp::create(builder, splitMax[k], safeMax))));
    laneTotal = fadd(laneTotal, weights.back());
  }
  SplitSums result;
  result.total = butterfly(laneTotal, /*isMax=*/false, kWarpSize / 2);

  // Σ w_s·O_s over the warp's splits s = firstSplit + stride·j for the
  // lane's columns [lane·c, lane·c + c), read `width` floats a load. The
  // slots are unrolled with every load of a batch issued before the first
  // product, and how many slots the warp walks is chosen by one uniform
  // branch on the split count, so a launch of few splits reads its partials
  // in one round of loads; slots past the last split read the last split
  // (clamped) with weight 0. Split s's weight is in register s / 32 of lane
  // s % 32: for s = firstSplit + stride·j, register j / (32 / stride) of
  // lane firstSplit + stride·(j % (32 / stride)).
  int64_t slotsPerRegister = kWarpSize / stride;
  int64_t slotsPerWarp = maxSplits / stride;
  int64_t columnsPerLane = llvm::divideCeil(valueDim, kWarpSize);
  int64_t width = columnsPerLane % 4 == 0 && valueDim % 4 == 0   ? 4
                  : columnsPerLane % 2 == 0 && valueDim % 2 == 0 ? 2
                                                                   : 1;
  // Slots a batch: their loads in flight together, within a register budget
  // of about 32 partial values a thread.
  int64_t batchSlots = std::clamp<int64_t>(32 / columnsPerLane, 1, 8);
  result.firstColumn = mul(lane, constIndex(columnsPerLane));
  Value shuffleWidth = arith::ConstantIntOp::create(builder, i32, kWarpSize);
  auto accumulate = [&](int64_t slots, SmallVectorImpl<Value> &sums) {
    for (int64_t first = 0; first < slots; first += batchSlots) {
      int64_t count = std::min(batchSlots, slots - first);
      SmallVector<SmallVector<Value>> partial;
      SmallVector<Value> weight;
      for (int64_t j = first; j < first + count; ++j) {
        Value split = add(firstSplit, constIndex(stride * j));
        Value exists = arith::CmpIOp::create(
            builder, arith::CmpIPredicate::ule, split, lastSplit);
        Value clamped = arith::MinUIOp::create(builder, split, lastSplit);
        Value rowStart = mul(add(mul(clamped, rows), row), dim);
        SmallVector<Value> values;
        for (int64_t c = 0; c < columnsPerLane; c += width) {
          // A lane's columns past the head dim read its last `width`
          // (never stored).
          Value column = arith::MinUIOp::create(
              builder, add(result.firstColumn, constIndex(c)),
              constIndex(valueDim - width));
          SmallVector<Value> loaded =
              loadFloats(add(rowStart, column), width, width);
          values.append(loaded.begin(), loaded.end());
        }
        partial.push_back(values);
        Value source = arith::AddIOp::create(
            builder, toI32(firstSplit),
            arith::ConstantIntOp::create(builder, i32,
                                         stride * (j % slotsPerRegister)));
        Value shuffled =
            gpu::ShuffleOp::create(builder, weights[j / slotsPerRegister],
                                   source, shuffleWidth, gpu::ShuffleMode::IDX)
                .getShuffleResult();
        weight.push_back(
            arith::SelectOp::create(builder, exists, shuffled, zero));
      }
      for (int64_t j = 0; j < count; ++j)
        for (int64_t c = 0; c < columnsPerLane; ++c)
          sums[c] = fadd(sums[c], fmul(weight[j], partial[j][c]));
    }
  };
  // The slot counts the uniform branch picks from: 1, 4, 16, ... below
  // the warp's most, then that.
  SmallVector<int64_t> slotOptions;
  for (int64_t slots = 1; slots < slotsPerWarp; slots *= 4)
    slotOptions.push_back(slots);
  slotOptions.push_back(slotsPerWarp);
  SmallVector<Type> sumTypes(columnsPerLane, f32);
  std::function<SmallVector<Value>(size_t)> sumOver =
      [&](size_t option) -> SmallVector<Value> {
    SmallVector<Value> sums(columnsPerLane, zero);
    if (option + 1 == slotOptions.size()) {
      accumulate(slotOptions[option], sums);
      return sums;
    }
    // The option fits when every warp's last split is below it.
    Value fits = arith::CmpIOp::create(
        builder, arith::CmpIPredicate::ule, numSplits,
        constIndex(stride * slotOptions[option]));
    auto branch = scf::IfOp::create(builder, sumTypes, fits,
                                    /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(&branch.getThenRegion().front());
    accumulate(slotOptions[option], sums);
    scf::YieldOp::create(builder, sums);
    builder.setInsertionPointToStart(&branch.getElseRegion().front());
    scf::YieldOp::create(builder, sumOver(option + 1));
    return SmallVector<Value>(branch.getResults());
  };
  result.columns = sumOver(0);
  return result;
}

std::string mlir::kiln::detail::splitCombineKernelName(Type elementType,
                                                       int64_t valueDim) {
  return llvm::formatv("kiln_split_combine_{0}_dv{1}",
                       getElementTypeName(elementType), valueDim)
      .str();
}

SmallVector<std::string> mlir::kiln::detail::splitCombineArgumentNames() {
  return {"workspace",     "out",   "num_splits",       "batch",
          "q_heads",       "q_len", "out_stride_batch", "out_stride_head",
          "out_stride_seq"};
}

SmallVector<std::string> mlir::kiln::detail::splitCombineArgumentKinds() {
  return {"pointer", "pointer", "i32", "i32", "i32",
          "i32",     "i64",     "i64", "i64"};
}

gpu::GPUFuncOp mlir::kiln::detail::buildSplitCombineKernel(
    OpBuilder &moduleBuilder, Location loc, Type elementType, int64_t valueDim,
    bool waitForGrid) {
  return CombineKernel(elementType, valueDim, waitForGrid)
      .build(moduleBuilder, loc);
}
