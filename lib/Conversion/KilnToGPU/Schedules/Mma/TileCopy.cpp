//===- TileCopy.cpp - Copies of K, V and Q tiles into shared memory -------===//
//
// How the tensor-core kernel's threads share a tile's 16-byte chunks (by
// chunks, or by whole 128-byte lines), and the copies themselves: cp.async
// for aligned views, element loads and stores otherwise. Shared tiles are
// padded (ldmatrix) or 128-byte swizzled (wgmma).
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

Value MmaKernel::tileAddress(Value tile, Value row, Value column) {
  auto sharedPtr = LLVM::LLVMPointerType::get(b->getContext(), 3);
  if (!wgmma) {
    Value offset = toI32(add(mul(row, constIndex(rowElements)), column));
    return LLVM::GEPOp::create(*b, sharedPtr, spec.problem.elementType, tile,
                               ValueRange{offset});
  }
  // wgmma's 128-byte swizzle (every access is a whole 16-byte chunk:
  // columns are multiples of 8).
  Value bytes = swizzledOffset(*b, kTileKeys, row, column);
  return LLVM::GEPOp::create(*b, sharedPtr, b->getI8Type(), tile,
                             ValueRange{toI32(bytes)});
}

MmaKernel::ChunkPlan MmaKernel::planChunks(int64_t dim, Value base,
                                           Value rowStride, Value firstRow,
                                           Value numRows) {
  Value lastRow =
      arith::MaxSIOp::create(*b, sub(numRows, constIndex(1)), constIndex(0));
  return planChunks(dim, [&](Value row) {
    Value globalRow = add(firstRow, row);
    // Out-of-range rows read the last valid row instead of running off the
    // tensor, and are then replaced by zeros.
    Value clamped = arith::MinSIOp::create(*b, globalRow, lastRow);
    return std::pair{add(base, mul(toI64(clamped), rowStride)),
                     Value(arith::CmpIOp::create(*b, arith::CmpIPredicate::slt,
                                                 globalRow, numRows))};
  });
}

MmaKernel::ChunkPlan MmaKernel::planChunks(
    int64_t dim, llvm::function_ref<std::pair<Value, Value>(Value)> rowStart,
    int64_t rows) {
  int64_t chunksPerRow = dim / kChunk;
  int64_t numChunks = rows * chunksPerRow;
  int64_t perThread = llvm::divideCeil(numChunks, kThreadsPerBlock);
  ChunkPlan plan;
  for (int64_t i = 0; i < perThread; ++i) {
    Value linear = add(threadId, constIndex(i * kThreadsPerBlock));
    Value exists;
    if ((i + 1) * kThreadsPerBlock > numChunks) {
      exists = arith::CmpIOp::create(*b, arith::CmpIPredicate::ult, linear,
                                     constIndex(numChunks));
      // A chunk past the tile reads and addresses chunk 0 instead; it is
      // never stored.
      linear = arith::SelectOp::create(*b, exists, linear, constIndex(0));
    }
    plan.exists.push_back(exists);
    Value row = arith::DivUIOp::create(*b, linear, constIndex(chunksPerRow));
    Value column =
        mul(arith::RemUIOp::create(*b, linear, constIndex(chunksPerRow)),
            constIndex(kChunk));
    auto [start, inBounds] = rowStart(row);
    plan.inBounds.push_back(inBounds);
    plan.offsets.push_back(add(start, toI64(column)));
    plan.rows.push_back(row);
    plan.columns.push_back(column);
  }
  return plan;
}

MmaKernel::ChunkPlan MmaKernel::planLineChunks(
    int64_t dim,
    llvm::function_ref<SmallVector<std::pair<Value, Value>>(Value)> rowStarts) {
  static_assert(kThreadsPerBlock % kLineChunks == 0 &&
                    kLineRows * kThreadsPerBlock == kTileKeys * kLineChunks,
                "whole lines over the block");
  assert(byLines(dim) && "rows of whole lines");
  Value part = arith::RemUIOp::create(*b, threadId, constIndex(kLineChunks));
  Value firstRow = lineFirstRow();
  SmallVector<std::pair<Value, Value>> starts = rowStarts(firstRow);
  assert(starts.size() == size_t(kLineRows) && "a start a row");
  ChunkPlan plan;
  for (int64_t r = 0; r < kLineRows; ++r) {
    for (int64_t line = 0; line < dim / (kLineChunks * kChunk); ++line) {
      Value column =
          mul(add(part, constIndex(line * kLineChunks)), constIndex(kChunk));
      plan.exists.push_back(Value());
      plan.inBounds.push_back(starts[r].second);
      plan.offsets.push_back(add(starts[r].first, toI64(column)));
      plan.rows.push_back(add(firstRow, constIndex(r)));
      plan.columns.push_back(column);
    }
  }
  return plan;
}

SmallVector<Value> MmaKernel::loadChunks(Value global, const ChunkPlan &plan) {
  auto vectorType = VectorType::get({kChunk}, spec.problem.elementType);
  auto globalPtr = LLVM::LLVMPointerType::get(b->getContext(), 1);
  SmallVector<Value> chunks;
  for (Value offset : plan.offsets) {
    Value chunk = LLVM::PoisonOp::create(*b, vectorType);
    for (int64_t e = 0; e < kChunk; ++e) {
      Value address = LLVM::GEPOp::create(
          *b, globalPtr, spec.problem.elementType, global,
          ValueRange{add(
              offset, arith::ConstantIntOp::create(*b, b->getI64Type(), e))});
      Value element =
          LLVM::LoadOp::create(*b, spec.problem.elementType, address);
      chunk = LLVM::InsertElementOp::create(*b, chunk, element, constI32(e));
    }
    chunks.push_back(chunk);
  }
  return chunks;
}

void MmaKernel::ifChunkExists(const ChunkPlan &plan, size_t index,
                              llvm::function_ref<void()> body) {
  if (!plan.exists[index]) {
    body();
    return;
  }
  ifThen(plan.exists[index], body);
}

void MmaKernel::storeChunks(Value tile, const ChunkPlan &plan,
                            ArrayRef<Value> chunks, int64_t stagingUnits) {
  auto vectorType = VectorType::get({kChunk}, spec.problem.elementType);
  Value zeros = arith::ConstantOp::create(
      *b, vectorType,
      DenseElementsAttr::get(vectorType,
                             b->getFloatAttr(spec.problem.elementType, 0)));
  for (auto [i, chunk] : llvm::enumerate(chunks)) {
    Value value = arith::SelectOp::create(*b, plan.inBounds[i], chunk, zeros);
    ifChunkExists(plan, i, [&] {
      LLVM::StoreOp::create(
          *b, value,
          stagingUnits ? stagingAddress(tile, plan.rows[i], plan.columns[i],
                                        stagingUnits)
                       : tileAddress(tile, plan.rows[i], plan.columns[i]),
          /*alignment=*/16);
    });
  }
}

void MmaKernel::issueTile(int64_t dim, Value tile, Value global, Value base,
                          Value rowStride, Value firstRow, Value numRows,
                          Value aligned, ArrayRef<Value> prefetched) {
  ChunkPlan plan = spec.problem.paged
                       ? planPagedChunks(dim, global == v ? vStrides : kStrides,
                                         base, firstRow, numRows, prefetched)
                       : planChunks(dim, base, rowStride, firstRow, numRows);
  copyChunks(tile, global, plan, aligned,
             fp8 ? stagingRowUnits(global == k) : 0);
}

void MmaKernel::copyChunks(Value tile, Value global, const ChunkPlan &plan,
                           Value aligned, int64_t stagingUnits) {
  auto ifOp = scf::IfOp::create(*b, aligned, /*withElse=*/true);
  OpBuilder::InsertionGuard guard(*b);
  b->setInsertionPointToStart(&ifOp.getThenRegion().front());
  auto globalPtr = LLVM::LLVMPointerType::get(b->getContext(), 1);
  for (auto [i, offset] : llvm::enumerate(plan.offsets)) {
    Value source = LLVM::GEPOp::create(*b, globalPtr, spec.problem.elementType,
                                       global, ValueRange{offset});
    // Source size 0 fills the 16 bytes with zeros.
    Value bytes = arith::SelectOp::create(*b, plan.inBounds[i], constI32(16),
                                          constI32(0));
    ifChunkExists(plan, i, [&] {
      Value target =
          stagingUnits ? stagingAddress(tile, plan.rows[i], plan.columns[i],
                                        stagingUnits)
                       : tileAddress(tile, plan.rows[i], plan.columns[i]);
      NVVM::CpAsyncOp::create(*b, target, source,
                              /*size=*/16, NVVM::LoadCacheModifierKind::CG,
                              bytes);
    });
  }
  b->setInsertionPointToStart(&ifOp.getElseRegion().front());
  storeChunks(tile, plan, loadChunks(global, plan), stagingUnits);
}

Value MmaKernel::lineFirstRow() {
  return mul(arith::DivUIOp::create(*b, threadId, constIndex(kLineChunks)),
             constIndex(kLineRows));
}

// A query/key head dim padded to a multiple of 16: columns [D, D') of every
// tile are zeroed once (K copies only write the first D columns), so they
// add nothing to Q·Kᵀ; Q is staged through a V tile or has its own, so all
// of them. (Padded V columns only reach output columns that are not
// stored.) The V copies that may write these columns start after a barrier.
void MmaKernel::zeroPadColumns() {
  int64_t padFrom = spec.problem.headDim;
  int64_t padTo = padded(spec.problem.headDim);
  if (padFrom == padTo)
    return;
  auto sharedPtr = LLVM::LLVMPointerType::get(b->getContext(), 3);
  auto vectorType = VectorType::get({kChunk}, spec.problem.elementType);
  Value zeros = arith::ConstantOp::create(
      *b, vectorType,
      DenseElementsAttr::get(vectorType,
                             b->getFloatAttr(spec.problem.elementType, 0)));
  int64_t chunksPerRow = (padTo - padFrom) / kChunk;
  int64_t numTiles = 2 * stages + (residentQ ? 1 : 0);
  int64_t numChunks = numTiles * kTileKeys * chunksPerRow;
  for (int64_t i = 0; i * kThreadsPerBlock < numChunks; ++i) {
    Value linear = add(threadId, constIndex(i * kThreadsPerBlock));
    Value exists = arith::CmpIOp::create(*b, arith::CmpIPredicate::ult, linear,
                                         constIndex(numChunks));
    auto ifOp = scf::IfOp::create(*b, exists, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(*b);
    b->setInsertionPointToStart(&ifOp.getThenRegion().front());
    Value perTile = constIndex(kTileKeys * chunksPerRow);
    Value tileIndex = arith::DivUIOp::create(*b, linear, perTile);
    Value inTile = arith::RemUIOp::create(*b, linear, perTile);
    Value row = arith::DivUIOp::create(*b, inTile, constIndex(chunksPerRow));
    Value column =
        add(constIndex(padFrom),
            mul(arith::RemUIOp::create(*b, inTile, constIndex(chunksPerRow)),
                constIndex(kChunk)));
    Value tileStart = LLVM::GEPOp::create(
        *b, sharedPtr, b->getI8Type(), shared,
        ValueRange{toI32(mul(tileIndex, constIndex(tileBytes())))});
    LLVM::StoreOp::create(*b, zeros, tileAddress(tileStart, row, column),
                          /*alignment=*/16);
  }
}
