//===- SplitSums.cpp - Sums of split-KV partial results ----------*- C++ -*-===//
//
// The split reduction shared by the combine kernel (Schedules/) and
// the split kernels that reduce their own splits in a cluster
// (AttentionKernel.cpp): for one row, the splits' statistics and the
// weighted sum of their partial outputs, read from the workspace.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>
#include <functional>
#include <limits>

using namespace mlir;
using namespace mlir::kiln;
using namespace mlir::kiln::detail;

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
