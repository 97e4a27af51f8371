//===- Scalar.cpp - The scalar FMA products ---------------------*- C++ -*-===//
//
// f32 products on FMAs from f32 shared tiles, for every element type: the
// dot products of a warp's rows with a lane's key, and P·V with the
// probabilities broadcast lane by lane.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"
#include "Products/Products.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::kiln::detail;

namespace {
/// Dot-product steps emitted per loop iteration.
constexpr int64_t kDotUnroll = 8;
} // namespace

void ScalarProduct::scores(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
                           Rows q, Row k) const {
  // All of the warp's rows at once, unrolled kDotUnroll times: each K
  // element read from shared memory serves every row (the Q reads are
  // broadcasts, one address for the whole warp).
  auto dotLoop = scf::ForOp::create(
      b, arith::ConstantIndexOp::create(b, 0),
      arith::ConstantIndexOp::create(b, headDim),
      arith::ConstantIndexOp::create(b, kDotUnroll), SmallVector<Value>(acc),
      [&](OpBuilder &nested, Location loc, Value d, ValueRange args) {
        ImplicitLocOpBuilder ib(loc, nested);
        SmallVector<Value> sums(args.begin(), args.end());
        for (int64_t u = 0; u < kDotUnroll; ++u) {
          Value column = arith::AddIOp::create(
              ib, d, arith::ConstantIndexOp::create(ib, u));
          Value kv =
              memref::LoadOp::create(ib, k.tile, ValueRange{k.row, column});
          for (auto [row, rowInTile] : llvm::enumerate(q.rows)) {
            Value qv = memref::LoadOp::create(ib, q.tile,
                                              ValueRange{rowInTile, column});
            sums[row] = LLVM::FMAOp::create(ib, qv, kv, sums[row]);
          }
        }
        scf::YieldOp::create(ib, sums);
      });
  llvm::copy(dotLoop.getResults(), acc.begin());
}

void ScalarProduct::values(ImplicitLocOpBuilder &b, MutableArrayRef<Value> acc,
                           ArrayRef<Value> p, WarpKeys v) const {
  // Each V element read from shared memory serves every row; the
  // probabilities of source lane l's key are shuffled to every lane.
  int64_t dimsPerLane = headDim / kWarpSize;
  int64_t rows = p.size();
  auto pvLoop = scf::ForOp::create(
      b, arith::ConstantIndexOp::create(b, 0),
      arith::ConstantIndexOp::create(b, kWarpSize),
      arith::ConstantIndexOp::create(b, 1), SmallVector<Value>(acc),
      [&](OpBuilder &nested, Location loc, Value source, ValueRange accIn) {
        ImplicitLocOpBuilder pb(loc, nested);
        Value sourceLane =
            arith::IndexCastOp::create(pb, pb.getI32Type(), source);
        Value width =
            arith::ConstantIntOp::create(pb, pb.getI32Type(), kWarpSize);
        SmallVector<Value> probabilities;
        for (int64_t row = 0; row < rows; ++row)
          probabilities.push_back(gpu::ShuffleOp::create(pb, p[row], sourceLane,
                                                         width,
                                                         gpu::ShuffleMode::IDX)
                                      .getShuffleResult());
        Value keyInTile = arith::AddIOp::create(
            pb, source, arith::ConstantIndexOp::create(pb, v.firstKey));
        SmallVector<Value> accOut(accIn.begin(), accIn.end());
        for (int64_t d = 0; d < dimsPerLane; ++d) {
          Value column = arith::AddIOp::create(
              pb, v.lane, arith::ConstantIndexOp::create(pb, d * kWarpSize));
          Value vv =
              memref::LoadOp::create(pb, v.tile, ValueRange{keyInTile, column});
          for (int64_t row = 0; row < rows; ++row) {
            Value &slotAcc = accOut[row * dimsPerLane + d];
            slotAcc = LLVM::FMAOp::create(pb, probabilities[row], vv, slotAcc);
          }
        }
        scf::YieldOp::create(pb, accOut);
      });
  llvm::copy(pvLoop.getResults(), acc.begin());
}
