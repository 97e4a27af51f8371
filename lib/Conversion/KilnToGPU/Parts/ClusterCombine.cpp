//===- ClusterCombine.cpp - Splits reduced in a cluster ---------*- C++ -*-===//
//
// The end of a split kernel launched with a thread-block cluster of its
// splits (LaunchProtocol::clusterSplits): after a cluster barrier each block
// reduces its share of the rows from the workspace (sumSplits) and stores
// them (storeOutput), and no combine kernel runs.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::kiln::detail;

void AttentionKernelBuilder::emitClusterCombine() {
  assert(spec.launch.splitKV && spec.launch.packQueryHeads &&
         "packed split kernels");
  ImplicitLocOpBuilder &builder = *b;
  auto ifClustered = scf::IfOp::create(builder, clustered, /*withElse=*/false);
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(&ifClustered.getThenRegion().front());
  // Every thread of the cluster arrives after its partial results are
  // written (release) and waits for all of them (acquire): the cluster's
  // workspace rows are then visible to every block of it.
  NVVM::ClusterArriveOp::create(builder, UnitAttr());
  NVVM::ClusterWaitOp::create(builder, UnitAttr());
  // The block's rows that exist: (query, head) pairs below q_len · group.
  Value rowsHere = arith::MinSIOp::create(
      builder,
      arith::MaxSIOp::create(builder, sub(mul(qLen, group), firstPackedRow),
                             constIndex(0)),
      constIndex(rowsPerBlock()));
  Value rowsPerSplit = partialRows();
  int64_t warps = threadsPerBlock() / kWarpSize;
  int64_t valueDim = spec.problem.valueDim();
  auto loop = scf::ForOp::create(builder, add(splitIndex, mul(numSplits, warp)),
                                 rowsHere, mul(numSplits, constIndex(warps)));
  builder.setInsertionPointToStart(loop.getBody());
  auto [query, rowHead] = packedRow(loop.getInductionVar());
  Value row = partialRow(rowHead, query);
  SplitSums sums =
      sumSplits(workspace, row, rowsPerSplit, numSplits, valueDim, lane,
                constIndex(0), /*stride=*/1, kMaxClusterSplits);
  Value inverse = reciprocalOrZero(sums.total);
  Value rowOffset =
      add(tensorBase(outStrides, rowHead), mul(toI64(query), outStrides[2]));
  for (size_t c = 0; c < sums.columns.size(); ++c) {
    Value column = add(sums.firstColumn, constIndex(c));
    auto store = [&] {
      storeOutput(fmul(sums.columns[c], inverse),
                  add(rowOffset, toI64(column)));
    };
    if (int64_t(sums.columns.size()) * kWarpSize == valueDim) {
      store();
      continue;
    }
    // Lanes past the value head dim hold copies: not stored.
    ifBelow(column, valueDim, store);
  }
}
