//===- BackwardKernel.cpp - kiln.attention_grad on f32 FMAs ---------------===//
//
// The backward pass of attention as two kernels that take the same
// arguments (the forward's, its lse, then grad_out, delta, grad_q, grad_k,
// grad_v and their strides) and are launched in this order:
//
// - the query pass (KernelVariant::Pass::GradQuery), by query blocks as the
//   scalar forward: each warp owns rows-per-warp query rows of one head. It
//   computes each row's D = Σ_d grad_out·out (stored to `delta`, f32
//   [B, Hq, Sq]) and, over the row's key range, recomputes the
//   probabilities from the forward's lse, dS = P·(dO·Vᵀ - D) and
//   dQ = Σ_j dX[j]·K[j] (dX: dS through the score function);
// - the key pass (Pass::GradKeyValue), by key blocks of one KV head: each
//   warp owns rows-per-warp keys, and walks the query heads of the head's
//   group and the queries that can see the block's keys, with the lanes
//   over 32 queries at a time: dV[j] = Σ_i P·dO[i], dK[j] = Σ_i dX·Q[i].
//   Each key is summed by one warp, so the result is deterministic, and
//   GQA/MQA groups are summed without copies.
//
// Tiles are staged in shared memory as f32 and the products are
// ScalarProduct's (Products/Scalar.cpp); the score function, masks, bounds
// and masked_score are the forward's finishScore (Parts/Score.cpp), so that
// each score is recomputed exactly as the forward computed it. Hidden keys
// get no gradient; a row whose lse is -inf contributes nothing.
//
//===----------------------------------------------------------------------===//

#include "Schedules/Backward/BackwardKernel.h"
#include "Products/Products.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <array>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::kiln::detail;
using namespace mlir::kiln::detail::backward;

namespace {

/// Rows (query rows of the query pass, keys of the key pass) a warp owns.
constexpr int64_t kRowsPerWarp = 2;
/// Keys (query pass) or queries (key pass) a tile stages: one a lane.
constexpr int64_t kTileRows = 32;

/// The FMA passes' tiles, staged as f32, and their products.
class BackwardKernel : public GradKernelBase {
public:
  explicit BackwardKernel(const KernelSpec &spec)
      : GradKernelBase(spec), keyProduct(headDim), valueProduct(valueDim) {}

  int64_t rowsPerBlock() const override { return kRowsPerWarp * kWarpsPerBlock; }
  int64_t kvBlockSize() const override { return kTileRows; }
  int64_t sharedBytes() const override {
    // The block's own rows of two tensors, and a staged tile of two
    // (padded by one column).
    return 4 * (rowsPerBlock() * (headDim + valueDim) +
                kTileRows * (headDim + 1 + valueDim + 1));
  }

protected:
  SmallVector<Type> workgroupBuffers(MLIRContext *ctx) const override {
    Type f32 = Float32Type::get(ctx);
    auto workgroup =
        gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
    auto tile = [&](int64_t rows, int64_t columns) {
      return MemRefType::get({rows, columns}, f32, nullptr, workgroup);
    };
    // The block's own rows are read as broadcasts (one address a warp);
    // the staged tile's rows are one a lane, padded by one element so that
    // a lane's row is read across all 32 banks.
    return {tile(rowsPerBlock(), headDim), tile(rowsPerBlock(), valueDim),
            tile(kTileRows, headDim + 1), tile(kTileRows, valueDim + 1)};
  }


  /// Binds the arguments after the forward's, and returns the block's
  /// shared tiles: its own rows of the two tensors, then the staged tiles.
  std::array<Value, 4> bindArgumentsAndTiles(gpu::GPUFuncOp func) {
    bindGradArguments(func);
    auto tiles = func.getWorkgroupAttributions();
    return {tiles[0], tiles[1], tiles[2], tiles[3]};
  }

  /// Copies `rows` rows from `firstRow` of a [*, columns] global tensor
  /// (`pointer` at element `base`, rows `rowStride` apart) into the f32
  /// `buffer`; rows at or past `numRows` are zeros.
  void stageRows(Value buffer, Value pointer, Value base, Value rowStride,
                 Value firstRow, Value numRows, int64_t rows,
                 int64_t columns) {
    Value threadId = gpu::ThreadIdOp::create(*b, gpu::Dimension::x);
    Value zero = constF32(0.0f);
    Value lastRow = arith::MaxSIOp::create(*b, sub(numRows, constIndex(1)),
                                           constIndex(0));
    for (int64_t first = 0; first < rows * columns;
         first += kThreadsPerBlock) {
      Value linear = add(threadId, constIndex(first));
      Value row = divU32(linear, constIndex(columns));
      Value column = remU32(linear, constIndex(columns));
      auto [offset, inBounds] = rowElement(base, rowStride, firstRow, row,
                                           numRows, lastRow, column);
      Value value =
          loadGlobalAsF32(pointer, spec.problem.elementType, offset);
      value = arith::SelectOp::create(*b, inBounds, value, zero);
      if (first + kThreadsPerBlock > rows * columns)
        ifBelow(linear, rows * columns, [&] {
          memref::StoreOp::create(*b, value, buffer, ValueRange{row, column});
        });
      else
        memref::StoreOp::create(*b, value, buffer, ValueRange{row, column});
    }
  }

  /// Stores the f32 `values` (D/32 a row, the lane's columns lane + 32·d)
  /// of row `row` of a gradient whose (batch, head) starts at `base`.
  void storeRow(Value pointer, Value base, Value rowStride, Value row,
                ArrayRef<Value> values) {
    Value rowOffset = add(base, mul(toI64(row), rowStride));
    for (auto [d, value] : llvm::enumerate(values))
      storeElement(pointer, value,
                   add(rowOffset, toI64(add(lane, constIndex(d * kWarpSize)))));
  }

  SmallVector<Value> zeros(int64_t count) {
    return SmallVector<Value>(count, constF32(0.0f));
  }

  /// Products over the head dim (Q·K, dX·K, dX·Q) and the value head dim
  /// (dO·V, P·dO).
  ScalarProduct keyProduct, valueProduct;
};

/// dQ and D, by query blocks of one head.
class GradQueryKernel : public BackwardKernel {
public:
  using BackwardKernel::BackwardKernel;

protected:
  void buildBody(gpu::GPUFuncOp func) override {
    ImplicitLocOpBuilder &builder = *b;
    auto [qRows, dORows, kTile, vTile] = bindArgumentsAndTiles(func);
    Value gradOutBase = tensorBase(gradOutStrides, head);
    stageRows(qRows, q, qBase, qStrides[2], firstQuery, qLen, rowsPerBlock(),
              headDim);
    stageRows(dORows, gradOut, gradOutBase, gradOutStrides[2], firstQuery,
              qLen, rowsPerBlock(), valueDim);
    gpu::BarrierOp::create(builder);

    SmallVector<Value> rowsInBlock, queries, lseLog2, rowDelta;
    Value lastQuery = sub(qLen, constIndex(1));
    for (int64_t r = 0; r < kRowsPerWarp; ++r) {
      rowsInBlock.push_back(
          add(mul(warp, constIndex(kRowsPerWarp)), constIndex(r)));
      queries.push_back(add(firstQuery, rowsInBlock.back()));
      Value query = arith::MinSIOp::create(builder, queries.back(), lastQuery);
      // D = Σ_d dO·O over the lanes' columns.
      Value rowOffset = add(outBase, mul(toI64(query), outStrides[2]));
      Value sum = constF32(0.0f);
      for (int64_t d = 0; d < valueDim / kWarpSize; ++d) {
        Value column = add(lane, constIndex(d * kWarpSize));
        Value dO = memref::LoadOp::create(builder, dORows,
                                          ValueRange{rowsInBlock.back(), column});
        Value o = loadGlobalAsF32(out, spec.problem.elementType,
                                  add(rowOffset, toI64(column)));
        sum = LLVM::FMAOp::create(builder, dO, o, sum);
      }
      rowDelta.push_back(butterfly(sum, /*isMax=*/false, kWarpSize / 2));
      Value offset = lseOffset(head, query);
      lseLog2.push_back(weightLse(loadF32(lsePtr, offset)));
      Value writes = arith::AndIOp::create(
          builder,
          arith::CmpIOp::create(builder, arith::CmpIPredicate::eq, lane,
                                constIndex(0)),
          arith::CmpIOp::create(builder, arith::CmpIPredicate::slt,
                                queries.back(), qLen));
      ifThen(writes, [&] { storeF32(delta, offset, rowDelta.back()); });
    }

    int64_t dims = headDim / kWarpSize;
    scf::ForOp loop = forLoop(
        kvBegin, kvEnd, constIndex(kTileRows), zeros(kRowsPerWarp * dims),
        [&](Value kvStart, ValueRange carried) {
          ImplicitLocOpBuilder &ib = *b;
          gpu::BarrierOp::create(ib);
          stageRows(kTile, k, kBase, kStrides[2], kvStart, kvLen, kTileRows,
                    headDim);
          stageRows(vTile, v, vBase, vStrides[2], kvStart, kvLen, kTileRows,
                    valueDim);
          gpu::BarrierOp::create(ib);
          Value key = add(kvStart, lane);
          SmallVector<Value> dots = zeros(kRowsPerWarp);
          SmallVector<Value> dps = zeros(kRowsPerWarp);
          keyProduct.scores(ib, dots, {qRows, rowsInBlock}, {kTile, lane});
          valueProduct.scores(ib, dps, {dORows, rowsInBlock}, {vTile, lane});
          SmallVector<Value> dx;
          for (int64_t r = 0; r < kRowsPerWarp; ++r)
            dx.push_back(scoreGradient(dots[r], dps[r], queries[r], key,
                                       maskBase, biasBase, lseLog2[r],
                                       rowDelta[r])
                             .dot);
          // dQ[r] += Σ_j dX[r][j]·K[j].
          SmallVector<Value> acc(carried.begin(), carried.end());
          keyProduct.values(ib, acc, dx, {kTile, 0, lane});
          return acc;
        });

    for (int64_t r = 0; r < kRowsPerWarp; ++r) {
      Value inBounds = arith::CmpIOp::create(
          builder, arith::CmpIPredicate::slt, queries[r], qLen);
      ifThen(inBounds, [&] {
        storeRow(gradQ, tensorBase(gradQStrides, head), gradQStrides[2],
                 queries[r],
                 SmallVector<Value>(loop.getResults().slice(r * dims, dims)));
      });
    }
  }
};

/// dK and dV, by key blocks of one KV head.
class GradKeyValueKernel : public BackwardKernel {
public:
  using BackwardKernel::BackwardKernel;

protected:
  void buildBody(gpu::GPUFuncOp func) override {
    ImplicitLocOpBuilder &builder = *b;
    auto [kRows, vRows, qTile, dOTile] = bindArgumentsAndTiles(func);
    // Grid x is the key block (the prologue's query block is unused).
    Value keyBlock = gpu::BlockIdOp::create(builder, gpu::Dimension::x);
    Value firstKey = mul(keyBlock, constIndex(rowsPerBlock()));
    stageRows(kRows, k, kBase, kStrides[2], firstKey, kvLen, rowsPerBlock(),
              headDim);
    stageRows(vRows, v, vBase, vStrides[2], firstKey, kvLen, rowsPerBlock(),
              valueDim);

    // The queries that can see the block's keys: key <= query + kv_len -
    // q_len + right and key > query + kv_len - q_len - window. With
    // masked_score every query does (a row that sees no key averages all
    // of V), so none is skipped.
    Value queryBegin = constIndex(0), queryEnd = qLen;
    const AttentionProblem &problem = spec.problem;
    if (!problem.maskedScore) {
      if (std::optional<int64_t> right = problem.rightBound())
        queryBegin = arith::MaxSIOp::create(
            builder, sub(sub(firstKey, kvOffset), constIndex(*right)),
            constIndex(0));
      if (problem.window) {
        Value lastKey = add(firstKey, constIndex(rowsPerBlock() - 1));
        Value end = add(sub(lastKey, kvOffset), constIndex(*problem.window));
        queryEnd = arith::MinSIOp::create(
            builder, arith::MaxSIOp::create(builder, end, constIndex(0)),
            qLen);
      }
      queryBegin = arith::MinSIOp::create(builder, queryBegin, queryEnd);
    }

    SmallVector<Value> keyRows, keys;
    for (int64_t r = 0; r < kRowsPerWarp; ++r) {
      keyRows.push_back(
          add(mul(warp, constIndex(kRowsPerWarp)), constIndex(r)));
      keys.push_back(add(firstKey, keyRows.back()));
    }
    int64_t keyDims = headDim / kWarpSize, valueDims = valueDim / kWarpSize;
    SmallVector<Value> init = zeros(kRowsPerWarp * (keyDims + valueDims));
    // Each query head of the KV head's group, then its query tiles.
    scf::ForOp heads = forLoop(
        constIndex(0), group, constIndex(1), init,
        [&](Value member, ValueRange carried) {
          Value rowHead = add(mul(kvHead, group), member);
          Value rowQBase = tensorBase(qStrides, rowHead);
          Value rowGradOutBase = tensorBase(gradOutStrides, rowHead);
          Value rowMaskBase =
              problem.maskType ? tensorBase(maskStrides, rowHead) : Value();
          Value rowBiasBase =
              problem.biasType ? tensorBase(biasStrides, rowHead) : Value();
          scf::ForOp tiles = forLoop(
              queryBegin, queryEnd, constIndex(kTileRows),
              SmallVector<Value>(carried.begin(), carried.end()),
              [&](Value tileStart, ValueRange acc) {
                ImplicitLocOpBuilder &ib = *b;
                gpu::BarrierOp::create(ib);
                stageRows(qTile, q, rowQBase, qStrides[2], tileStart, qLen,
                          kTileRows, headDim);
                stageRows(dOTile, gradOut, rowGradOutBase, gradOutStrides[2],
                          tileStart, qLen, kTileRows, valueDim);
                gpu::BarrierOp::create(ib);
                Value query = add(tileStart, lane);
                Value valid = arith::CmpIOp::create(
                    ib, arith::CmpIPredicate::slt, query, queryEnd);
                Value safeQuery = arith::MinSIOp::create(
                    ib, query, sub(qLen, constIndex(1)));
                auto [lseLog2, rowDelta] = rowStatistics(rowHead, safeQuery);
                SmallVector<Value> dots = zeros(kRowsPerWarp);
                SmallVector<Value> dps = zeros(kRowsPerWarp);
                keyProduct.scores(ib, dots, {kRows, keyRows}, {qTile, lane});
                valueProduct.scores(ib, dps, {vRows, keyRows},
                                    {dOTile, lane});
                SmallVector<Value> p, dx;
                Value zero = constF32(0.0f);
                for (int64_t r = 0; r < kRowsPerWarp; ++r) {
                  ScoreGradient g =
                      scoreGradient(dots[r], dps[r], query, keys[r],
                                    rowMaskBase, rowBiasBase, lseLog2,
                                    rowDelta);
                  p.push_back(
                      arith::SelectOp::create(ib, valid, g.probability, zero));
                  dx.push_back(arith::SelectOp::create(ib, valid, g.dot, zero));
                }
                // dK[r] += Σ_i dX[i][r]·Q[i]; dV[r] += Σ_i P[i][r]·dO[i].
                SmallVector<Value> keyAcc(acc.begin(),
                                          acc.begin() + kRowsPerWarp * keyDims);
                SmallVector<Value> valueAcc(
                    acc.begin() + kRowsPerWarp * keyDims, acc.end());
                keyProduct.values(ib, keyAcc, dx, {qTile, 0, lane});
                valueProduct.values(ib, valueAcc, p, {dOTile, 0, lane});
                keyAcc.append(valueAcc);
                return keyAcc;
              });
          return SmallVector<Value>(tiles.getResults());
        });

    ValueRange results = heads.getResults();
    Value gradKBase = tensorBase(gradKStrides, kvHead);
    Value gradVBase = tensorBase(gradVStrides, kvHead);
    for (int64_t r = 0; r < kRowsPerWarp; ++r) {
      Value inBounds = arith::CmpIOp::create(builder, arith::CmpIPredicate::slt,
                                             keys[r], kvLen);
      ifThen(inBounds, [&] {
        storeRow(gradK, gradKBase, gradKStrides[2], keys[r],
                 SmallVector<Value>(results.slice(r * keyDims, keyDims)));
        storeRow(gradV, gradVBase, gradVStrides[2], keys[r],
                 SmallVector<Value>(results.slice(
                     kRowsPerWarp * keyDims + r * valueDims, valueDims)));
      });
    }
  }
};

} // namespace

bool mlir::kiln::detail::backwardKernelSupports(int64_t headDim,
                                                int64_t valueHeadDim) {
  auto fits = [](int64_t dim) {
    return dim > 0 && dim % kWarpSize == 0 && dim <= 128;
  };
  return fits(headDim) && fits(valueHeadDim);
}

std::unique_ptr<AttentionKernelBuilder>
mlir::kiln::detail::createBackwardKernel(const KernelSpec &spec) {
  if (spec.variant.tensorCores)
    return createMmaBackwardKernel(spec);
  if (spec.variant.pass == KernelVariant::Pass::GradQuery)
    return std::make_unique<GradQueryKernel>(spec);
  assert(spec.variant.pass == KernelVariant::Pass::GradKeyValue &&
         "a backward pass");
  return std::make_unique<GradKeyValueKernel>(spec);
}
