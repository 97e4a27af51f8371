//===- MmaEpilogue.cpp - The tensor-core kernel's output ------------------===//
//
// out = O / sum for a thread's rows g and g + 8: each warp its own rows, or
// in decode mode each warp its share of the merged rows' columns; split-KV
// launches write a row's normalised partial output and softmax statistics
// to the workspace the combine kernel reads.
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

// Rows that saw no key are written as zeros. In decode mode each warp writes
// its share of the merged rows' columns, or with no shares warp 0 writes
// them all; warp 0 writes split statistics.
void MmaKernel::writeOutput(ValueRange results, int64_t shareBlocks) {
  ImplicitLocOpBuilder &builder = *b;
  Value notDecode = arith::XOrIOp::create(
      builder, isDecode,
      arith::ConstantIntOp::create(builder, builder.getI1Type(), 1));
  Value firstWarp = arith::OrIOp::create(
      builder, notDecode,
      arith::CmpIOp::create(builder, arith::CmpIPredicate::eq, warp,
                            constIndex(0)));
  Value writer =
      shareBlocks
          ? arith::ConstantIntOp::create(builder, builder.getI1Type(), 1)
                .getResult()
          : firstWarp;
  for (int64_t r = 0; r < 2; ++r) {
    Value sum = butterfly(results[2 + r], /*isMax=*/false, 2);
    Value inverse = reciprocalOrZero(sum);
    Value inBounds = arith::AndIOp::create(
        builder, writer,
        arith::CmpIOp::create(builder, arith::CmpIPredicate::slt, queryRows[r],
                              qLen));
    auto ifOp = scf::IfOp::create(builder, inBounds, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(&ifOp.getThenRegion().front());
    // The row's log-sum-exp (sites that train; never split), by one
    // thread of the quad.
    if (lsePtr)
      ifThen(arith::AndIOp::create(
                 builder, firstWarp,
                 arith::CmpIOp::create(builder, arith::CmpIPredicate::eq,
                                       quadLane, constIndex(0))),
             [&] { storeLse(rowHeads[r], queryRows[r], results[r], sum); });
    // Blocks of the padded columns past the value head dim are not stored.
    int64_t valueBlocks = spec.problem.valueDim() / 8;
    auto storeBlock = [&](llvm::function_ref<void(Value, Value)> store,
                          int64_t slot, Value block) {
      for (int64_t e = 0; e < 2; ++e) {
        Value column = add(add(mul(block, constIndex(8)), constIndex(e)),
                           mul(quadLane, constIndex(2)));
        store(fmul(results[4 + 4 * slot + 2 * r + e], inverse), column);
      }
    };
    auto storeRow = [&](llvm::function_ref<void(Value, Value)> store) {
      auto storeAll = [&] {
        for (int64_t block = 0; block < valueBlocks; ++block)
          storeBlock(store, block, constIndex(block));
      };
      if (!shareBlocks) {
        storeAll();
        return;
      }
      auto mode = scf::IfOp::create(builder, isDecode, /*withElse=*/true);
      OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPointToStart(&mode.getThenRegion().front());
      for (int64_t slot = 0; slot < shareBlocks; ++slot) {
        Value block = add(mul(warp, constIndex(shareBlocks)), constIndex(slot));
        ifBelow(block, valueBlocks, [&] { storeBlock(store, slot, block); });
      }
      builder.setInsertionPointToStart(&mode.getElseRegion().front());
      storeAll();
    };
    auto storeOut = [&] {
      Value rowOffset = add(tensorBase(outStrides, rowHeads[r]),
                            mul(toI64(queryRows[r]), outStrides[2]));
      storeRow([&](Value value, Value column) {
        storeOutput(value, add(rowOffset, toI64(column)));
      });
    };
    if (!spec.launch.splitKV) {
      storeOut();
      continue;
    }
    // Split-KV: with more than one split, the row's normalised partial
    // output and its softmax statistics (max and sum, log2 units) go to the
    // workspace for the combine kernel (see writePartial).
    Value splitting = arith::CmpIOp::create(builder, arith::CmpIPredicate::ugt,
                                            numSplits, constIndex(1));
    auto split = scf::IfOp::create(builder, splitting, /*withElse=*/true);
    builder.setInsertionPointToStart(&split.getElseRegion().front());
    storeOut();
    builder.setInsertionPointToStart(&split.getThenRegion().front());
    writePartial(rowHeads[r], queryRows[r], results[r], sum, quadLane,
                 firstWarp, storeRow);
  }
}

void MmaKernel::writePartial(
    Value rowHead, Value query, Value max, Value sum, Value quadLane,
    Value writesStatistics,
    llvm::function_ref<void(llvm::function_ref<void(Value, Value)>)> storeRow) {
  // Workspace (f32): the partial outputs [splits, batch, q_heads, q_len,
  // Dv], then the statistics [splits, batch, q_heads, q_len, 2].
  auto globalPtr = LLVM::LLVMPointerType::get(b->getContext(), 1);
  Type f32 = b->getF32Type();
  Value rowsPerSplit = partialRows();
  Value row = add(mul(splitIndex, rowsPerSplit), partialRow(rowHead, query));
  Value dim = constIndex(spec.problem.valueDim());
  Value rowStart = toI64(mul(row, dim));
  storeRow([&](Value value, Value column) {
    Value address =
        LLVM::GEPOp::create(*b, globalPtr, f32, workspace,
                            ValueRange{add(rowStart, toI64(column))});
    LLVM::StoreOp::create(*b, value, address);
  });
  Value first =
      arith::AndIOp::create(*b, writesStatistics,
                            arith::CmpIOp::create(*b, arith::CmpIPredicate::eq,
                                                  quadLane, constIndex(0)));
  ifThen(first, [&] {
    Value statistics =
        add(mul(mul(numSplits, rowsPerSplit), dim), mul(row, constIndex(2)));
    // (A named array: a ValueRange over a braced list would outlive it.)
    Value values[2] = {max, sum};
    for (int64_t i = 0; i < 2; ++i) {
      Value address = LLVM::GEPOp::create(
          *b, globalPtr, f32, workspace,
          ValueRange{toI64(add(statistics, constIndex(i)))});
      LLVM::StoreOp::create(*b, values[i], address);
    }
  });
}
