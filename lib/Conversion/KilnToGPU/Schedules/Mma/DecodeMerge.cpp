//===- DecodeMerge.cpp - Merging the warps' states in decode mode ---------===//
//
// Decode shapes split each tile's keys over the four warps, which share the
// block's rows; at the end their online-softmax states are merged through
// shared memory.
//
//===----------------------------------------------------------------------===//

#include "Schedules/Mma/MmaKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::kiln::detail;
using namespace mlir::kiln::detail::mma;

#include <limits>

SmallVector<Value> MmaKernel::mergeWarps(ValueRange state, Value firstTile,
                                         Value secondTile,
                                         int64_t shareBlocks) {
  // (Each "tile" is a region of two warps' states.)
  auto sharedPtr = LLVM::LLVMPointerType::get(b->getContext(), 3);
  Type f32 = b->getF32Type();
  int64_t size = state.size();
  // Warp w's region: the first tile for warps 0 and 1, the second for 2 and
  // 3 (a tile holds exactly two regions of 32 lanes × size floats), laid out
  // [value][lane] so that a warp's stores hit 32 banks.
  auto region = [&](Value warpIndex) {
    Value inV = arith::CmpIOp::create(*b, arith::CmpIPredicate::uge, warpIndex,
                                      constIndex(2));
    Value tile = arith::SelectOp::create(*b, inV, secondTile, firstTile);
    Value second = arith::RemUIOp::create(*b, warpIndex, constIndex(2));
    Value floats = mul(second, constIndex(kWarpSize * size));
    return LLVM::GEPOp::create(*b, sharedPtr, f32, tile,
                               ValueRange{toI32(floats)});
  };
  auto slot = [&](Value base, Value index) {
    return LLVM::GEPOp::create(
        *b, sharedPtr, f32, base,
        ValueRange{toI32(add(lane, mul(index, constIndex(kWarpSize))))});
  };
  // Which of a thread's two rows, g or g + 8, value i of a state belongs to
  // (max and sum of each, then four accumulators a block, two a row).
  auto rowOf = [](int64_t i) { return i < 4 ? i % 2 : ((i - 4) % 4) / 2; };
  // Rows g + 8 exist only where the block has more than 8 (query, head)
  // rows (GQA groups of 16, or q_len · group past 8): elsewhere their half
  // of the states is neither stored, read nor merged (a uniform branch).
  Value upperRows =
      arith::CmpIOp::create(*b, arith::CmpIPredicate::ugt, mul(qLen, group),
                            constIndex(kRowsPerWarp / 2));

  NVVM::CpAsyncWaitGroupOp::create(*b, 0);
  gpu::BarrierOp::create(*b);
  Value own = region(warp);
  auto storeRow = [&](int64_t r) {
    for (int64_t i = 0; i < size; ++i)
      if (rowOf(i) == r)
        LLVM::StoreOp::create(*b, state[i], slot(own, constIndex(i)));
  };
  storeRow(0);
  ifElse(upperRows, {}, [&] {
    storeRow(1);
    return SmallVector<Value>();
  });
  gpu::BarrierOp::create(*b);

  // The values this warp merges: the statistics, then all the O
  // accumulators or those of its share (a share past the last block reads
  // the last block's, and is not stored).
  int64_t outBlocks = (size - 4) / 4;
  SmallVector<Value> indices;
  for (int64_t i = 0; i < 4; ++i)
    indices.push_back(constIndex(i));
  for (int64_t j = 0; j < (shareBlocks ? shareBlocks : outBlocks); ++j) {
    Value block = constIndex(j);
    if (shareBlocks)
      block = add(mul(warp, constIndex(shareBlocks)), block);
    if (shareBlocks * kWarpsPerBlock > outBlocks)
      block = arith::MinUIOp::create(*b, block, constIndex(outBlocks - 1));
    for (int64_t k = 0; k < 4; ++k)
      indices.push_back(add(constIndex(4 + k), mul(block, constIndex(4))));
  }
  Value negInf = constF32(-std::numeric_limits<float>::infinity());
  Value zero = constF32(0.0f);
  SmallVector<Value> merged(size, zero);
  // Row r's values, merged: its max, its sum and its accumulators, in the
  // order of `indices`.
  auto mergeRow = [&](int64_t r) {
    SmallVector<int64_t> positions;
    for (int64_t p = 0; p < int64_t(indices.size()); ++p)
      if (rowOf(p) == r)
        positions.push_back(p);
    SmallVector<SmallVector<Value>> warps;
    for (int64_t w = 0; w < kWarpsPerBlock; ++w) {
      Value base = region(constIndex(w));
      SmallVector<Value> values;
      for (int64_t p : positions)
        values.push_back(LLVM::LoadOp::create(*b, f32, slot(base, indices[p])));
      warps.push_back(values);
    }
    // values[0] is the max, values[1] the sum, then the accumulators.
    Value max = negInf;
    for (auto &values : warps)
      max = fmax(max, values[0]);
    Value isEmpty =
        arith::CmpFOp::create(*b, arith::CmpFPredicate::OEQ, max, negInf);
    Value safeMax = arith::SelectOp::create(*b, isEmpty, zero, max);
    SmallVector<Value> row(positions.size(), zero);
    row[0] = max;
    for (auto &values : warps) {
      Value weight = exp2(arith::SubFOp::create(*b, values[0], safeMax));
      for (size_t v = 1; v < values.size(); ++v)
        row[v] = fadd(row[v], fmul(values[v], weight));
    }
    for (auto [v, p] : llvm::enumerate(positions))
      merged[p] = row[v];
    return row;
  };
  mergeRow(0);
  SmallVector<Value> emptyRow;
  for (int64_t p = 0; p < int64_t(indices.size()); ++p)
    if (rowOf(p) == 1)
      emptyRow.push_back(emptyRow.empty() ? negInf : zero);
  SmallVector<Type> rowTypes(emptyRow.size(), f32);
  SmallVector<Value> upper = ifElse(
      upperRows, rowTypes, [&] { return mergeRow(1); },
      [&] { return emptyRow; });
  int64_t next = 0;
  for (int64_t p = 0; p < int64_t(indices.size()); ++p)
    if (rowOf(p) == 1)
      merged[p] = upper[next++];
  return merged;
}
