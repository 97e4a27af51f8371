//===- ScalarKernel.cpp - The scalar FMA attention kernel -------*- C++ -*-===//
//
// The kernel for every element type and for head dims up to 128: K and V
// tiles staged in shared memory as f32, each warp owning rows-per-warp query
// rows with one key (and head-dim slice) per lane, f32 FMAs throughout (the
// products are ScalarProduct's, Products/Scalar.cpp).
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"
#include "Products/Products.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>

using namespace mlir;
using namespace mlir::kiln::detail;

namespace {

class ScalarKernel : public AttentionKernelBuilder {
public:
  ScalarKernel(const KernelSpec &spec, int64_t kvBlock, int64_t rowsPerWarp)
      : AttentionKernelBuilder(spec), kvBlock(kvBlock),
        rowsPerWarp(rowsPerWarp), dimsPerLane(spec.problem.headDim / kWarpSize),
        keysPerLane(kvBlock / kWarpSize), products(spec.problem.headDim) {}

  int64_t rowsPerBlock() const override { return rowsPerWarp * kWarpsPerBlock; }
  int64_t kvBlockSize() const override { return kvBlock; }
  int64_t sharedBytes() const override {
    return 4 * (rowsPerBlock() * spec.problem.headDim +
                kvBlock * (spec.problem.headDim + 1) +
                kvBlock * spec.problem.headDim);
  }

protected:
  SmallVector<Type> workgroupBuffers(MLIRContext *ctx) const override;
  void buildBody(gpu::GPUFuncOp func) override;

private:
  /// Cooperative copy of `rows` rows (starting at `firstRow`) of a [*, D]
  /// global tensor into `buffer` as f32; rows at or past `numRows` are zero.
  void stageTile(Value buffer, Value base, Value rowStride, Value firstRow,
                 Value numRows, int64_t rows);

  int64_t kvBlock, rowsPerWarp, dimsPerLane, keysPerLane;
  /// S = Q·Kᵀ and O += P·V, on FMAs.
  ScalarProduct products;
  Value qBuffer, kBuffer, vBuffer;
  /// Global tensor that stageTile reads.
  Value basePointer;
};

SmallVector<Type> ScalarKernel::workgroupBuffers(MLIRContext *ctx) const {
  Type f32 = Float32Type::get(ctx);
  auto workgroup =
      gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  // K rows are padded by one element: lanes read K[lane][d], and the padding
  // spreads those reads over all 32 banks.
  return {MemRefType::get({rowsPerBlock(), spec.problem.headDim}, f32, nullptr,
                          workgroup),
          MemRefType::get({kvBlock, spec.problem.headDim + 1}, f32, nullptr,
                          workgroup),
          MemRefType::get({kvBlock, spec.problem.headDim}, f32, nullptr,
                          workgroup)};
}

void ScalarKernel::stageTile(Value buffer, Value base, Value rowStride,
                             Value firstRow, Value numRows, int64_t rows) {
  int64_t elements = rows * spec.problem.headDim;
  Value threadId = gpu::ThreadIdOp::create(*b, gpu::Dimension::x);
  Value headDim = constIndex(spec.problem.headDim);
  Value zero = constF32(0.0f);
  for (int64_t first = 0; first < elements; first += kThreadsPerBlock) {
    Value linear = add(threadId, constIndex(first));
    Value row = arith::DivUIOp::create(*b, linear, headDim);
    Value column = arith::RemUIOp::create(*b, linear, headDim);
    Value globalRow = add(firstRow, row);
    Value inBounds = arith::CmpIOp::create(*b, arith::CmpIPredicate::slt,
                                           globalRow, numRows);
    // Out-of-range rows read the last valid row instead of running off the
    // tensor, and are then replaced by zeros.
    Value lastRow = arith::SubIOp::create(*b, numRows, constIndex(1));
    Value clampedRow = arith::MinSIOp::create(*b, globalRow, lastRow);
    clampedRow = arith::MaxSIOp::create(*b, clampedRow, constIndex(0));
    Value offset = add(mul(toI64(clampedRow), rowStride), toI64(column));
    offset = add(base, offset);
    Value value =
        loadGlobalAsF32(basePointer, spec.problem.elementType, offset);
    value = arith::SelectOp::create(*b, inBounds, value, zero);
    memref::StoreOp::create(*b, value, buffer, ValueRange{row, column});
  }
}

void ScalarKernel::buildBody(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder &builder = *b;
  qBuffer = func.getWorkgroupAttributions()[0];
  kBuffer = func.getWorkgroupAttributions()[1];
  vBuffer = func.getWorkgroupAttributions()[2];

  // Q tile → shared memory (made visible by the first barrier in the loop).
  basePointer = q;
  stageTile(qBuffer, qBase, qStrides[2], firstQuery, qLen, rowsPerBlock());

  // Per-row running state: max, sum, and dimsPerLane accumulators.
  int64_t stateSize = 2 + dimsPerLane;
  Value negInf = constF32(-std::numeric_limits<float>::infinity());
  Value zero = constF32(0.0f);
  SmallVector<Value> initState;
  for (int64_t row = 0; row < rowsPerWarp; ++row) {
    initState.push_back(negInf);
    initState.push_back(zero);
    initState.append(dimsPerLane, zero);
  }

  scf::ForOp kvLoop = forLoop(
      kvBegin, kvEnd, constIndex(kvBlock), initState,
      [&](Value kvStart, ValueRange state) {
        ImplicitLocOpBuilder &ib = *b;
        // Everyone is done with the previous tile before it is overwritten.
        gpu::BarrierOp::create(ib);
        basePointer = k;
        stageTile(kBuffer, kBase, kStrides[2], kvStart, kvLen, kvBlock);
        basePointer = v;
        stageTile(vBuffer, vBase, vStrides[2], kvStart, kvLen, kvBlock);
        gpu::BarrierOp::create(ib);

        SmallVector<Value> rowsInBlock, queryRows;
        for (int64_t row = 0; row < rowsPerWarp; ++row) {
          rowsInBlock.push_back(
              add(mul(warp, constIndex(rowsPerWarp)), constIndex(row)));
          queryRows.push_back(add(firstQuery, rowsInBlock.back()));
        }
        // scores[row][slot]: this lane's keys, every row of the warp.
        SmallVector<SmallVector<Value>> scores(rowsPerWarp);
        for (int64_t slot = 0; slot < keysPerLane; ++slot) {
          Value keyInBlock = add(lane, constIndex(slot * kWarpSize));
          Value key = add(kvStart, keyInBlock);
          SmallVector<Value> dots(rowsPerWarp, constF32(0.0f));
          products.scores(*b, dots, {qBuffer, rowsInBlock},
                          {kBuffer, keyInBlock});
          for (int64_t row = 0; row < rowsPerWarp; ++row)
            scores[row].push_back(finishScore(dots[row], queryRows[row], key,
                                              maskBase, biasBase));
        }

        // Online-softmax update per row; scores become probabilities.
        SmallVector<Value> newState, acc;
        for (int64_t row = 0; row < rowsPerWarp; ++row) {
          ValueRange rowState = state.slice(row * stateSize, stateSize);
          Value tileMax = negInf;
          for (Value score : scores[row])
            tileMax = fmax(tileMax, score);
          tileMax = butterfly(tileMax, /*isMax=*/true, kWarpSize / 2);
          Value oldMax = rowState[0];
          Value newMax = fmax(oldMax, tileMax);
          // A row that has seen only hidden keys keeps max = -inf; use 0 as
          // the offset so that exp2 gives 0 rather than NaN.
          Value isEmpty = arith::CmpFOp::create(ib, arith::CmpFPredicate::OEQ,
                                                newMax, negInf);
          Value safeMax = arith::SelectOp::create(ib, isEmpty, zero, newMax);
          Value alpha = exp2(arith::SubFOp::create(ib, oldMax, safeMax));
          Value tileSum = zero;
          for (Value &score : scores[row]) {
            score = exp2(arith::SubFOp::create(ib, score, safeMax));
            tileSum = fadd(tileSum, score);
          }
          tileSum = butterfly(tileSum, /*isMax=*/false, kWarpSize / 2);
          newState.push_back(newMax);
          newState.push_back(fadd(fmul(rowState[1], alpha), tileSum));
          for (int64_t d = 0; d < dimsPerLane; ++d)
            acc.push_back(fmul(rowState[2 + d], alpha));
        }

        // acc[row][d] += P[row][key] · V[key][lane + 32·d], the 32 keys of
        // a slot at a time.
        for (int64_t slot = 0; slot < keysPerLane; ++slot) {
          SmallVector<Value> slotProbabilities;
          for (int64_t row = 0; row < rowsPerWarp; ++row)
            slotProbabilities.push_back(scores[row][slot]);
          products.values(ib, acc, slotProbabilities,
                          {vBuffer, slot * kWarpSize, lane});
        }
        // Back to the loop-carried layout: per row max, sum, accumulators.
        // Inserting from the last row keeps the earlier rows' positions.
        for (int64_t row = rowsPerWarp - 1; row >= 0; --row)
          newState.insert(newState.begin() + 2 * (row + 1),
                          acc.begin() + row * dimsPerLane,
                          acc.begin() + (row + 1) * dimsPerLane);
        return newState;
      });

  // out = acc / sum; rows that saw no key are written as zeros.
  for (int64_t row = 0; row < rowsPerWarp; ++row) {
    ValueRange rowState = kvLoop.getResults().slice(row * stateSize, stateSize);
    Value rowInBlock = add(mul(warp, constIndex(rowsPerWarp)), constIndex(row));
    Value queryRow = add(firstQuery, rowInBlock);
    Value inBounds = arith::CmpIOp::create(builder, arith::CmpIPredicate::slt,
                                           queryRow, qLen);
    Value hasKeys = arith::CmpFOp::create(builder, arith::CmpFPredicate::OGT,
                                          rowState[1], zero);
    Value inverse = arith::DivFOp::create(builder, constF32(1.0f), rowState[1]);
    inverse = arith::SelectOp::create(builder, hasKeys, inverse, zero);
    ifThen(inBounds, [&] {
      if (lsePtr)
        ifThen(arith::CmpIOp::create(builder, arith::CmpIPredicate::eq, lane,
                                     constIndex(0)),
               [&] { storeLse(head, queryRow, rowState[0], rowState[1]); });
      Value rowOffset = add(outBase, mul(toI64(queryRow), outStrides[2]));
      for (int64_t d = 0; d < dimsPerLane; ++d) {
        Value column = toI64(add(lane, constIndex(d * kWarpSize)));
        storeOutput(fmul(rowState[2 + d], inverse), add(rowOffset, column));
      }
    });
  }
  b = &builder;
}

} // namespace

std::unique_ptr<AttentionKernelBuilder> mlir::kiln::detail::createScalarKernel(
    const KernelSpec &spec, int64_t kvBlockSize, int64_t rowsPerWarp) {
  return std::make_unique<ScalarKernel>(spec, kvBlockSize, rowsPerWarp);
}
