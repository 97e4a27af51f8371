//===- PagedAddress.cpp - Page-table addressing of K and V tiles ----------===//
//
// Where a key of a paged cache lives (kiln.paged_attention): its page-table
// entry, page and slot, in 32-bit arithmetic, and the table entries a
// thread reads ahead for the tiles it copies by lines.
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

// Keys, table entries and slots are 32-bit (a sequence has at most
// kv_lens[b] keys, an i32): in 64 bits every compare, minimum and shift was
// two instructions, and they were most of the kernel's address work (read
// in the SASS).
MmaKernel::PageLookup MmaKernel::pageLookup(Value firstRow, Value numRows) {
  Value lastRow =
      arith::MaxSIOp::create(*b, sub(numRows, constIndex(1)), constIndex(0));
  Value lastEntry =
      arith::MaxSIOp::create(*b, sub(maxPages, constIndex(1)), constIndex(0));
  Value lastPage =
      arith::MaxSIOp::create(*b, sub(numPages, constIndex(1)), constIndex(0));
  PageLookup lookup;
  lookup.firstRow = toI32(firstRow);
  lookup.numRows = toI32(numRows);
  lookup.lastRow = toI32(lastRow);
  lookup.lastEntry = toI32(lastEntry);
  lookup.lastPage = lastPage;
  lookup.shift = toI32(pageShift);
  lookup.mask = toI32(pageMask);
  lookup.tableRow = mul(toI64(batch), pageTableStride);
  return lookup;
}

MmaKernel::LineKeys MmaKernel::lineKeys(const PageLookup &lookup,
                                        Value rowInTile) {
  Value firstKey = arith::AddIOp::create(*b, lookup.firstRow, toI32(rowInTile));
  LineKeys result;
  for (int64_t r = 0; r < kLineRows; ++r) {
    result.keys.push_back(arith::AddIOp::create(*b, firstKey, constI32(r)));
    result.clamped.push_back(
        arith::MinSIOp::create(*b, result.keys.back(), lookup.lastRow));
  }
  return result;
}

Value MmaKernel::loadEntry(const PageLookup &lookup, Value clampedKey) {
  Value entry = arith::MinSIOp::create(
      *b, arith::ShRUIOp::create(*b, clampedKey, lookup.shift),
      lookup.lastEntry);
  Value address = LLVM::GEPOp::create(
      *b, LLVM::LLVMPointerType::get(b->getContext(), 1), b->getI32Type(),
      pageTable,
      ValueRange{add(lookup.tableRow,
                     arith::ExtUIOp::create(*b, b->getI64Type(), entry))});
  return LLVM::LoadOp::create(*b, b->getI32Type(), address);
}

// A block's range is the guess's where its sequence fills its table row
// (every block of a uniform batch whose table is as wide as it needs) and
// for the first split of every sequence where there is no window: the
// first copies then start when the key count arrives, not one table read
// after it. Keys past the count read entries beyond the sequence here;
// those rows are zero-filled, and the entries are clamped to the table and
// the cache like any.
void MmaKernel::readAhead(Value firstKey, Value fullRow) {
  if (!byLines(copyDim(spec.problem.headDim)))
    return;
  aheadBegin = firstKey;
  aheadPages = loadPages(firstKey, fullRow);
}

SmallVector<Value> MmaKernel::loadPages(Value firstRow, Value numRows) {
  PageLookup lookup = pageLookup(firstRow, numRows);
  SmallVector<Value> entries;
  for (Value key : lineKeys(lookup, lineFirstRow()).clamped)
    entries.push_back(loadEntry(lookup, key));
  return entries;
}

MmaKernel::ChunkPlan MmaKernel::planPagedChunks(int64_t dim,
                                                ArrayRef<Value> cacheStrides,
                                                Value base, Value firstRow,
                                                Value numRows,
                                                ArrayRef<Value> prefetched) {
  PageLookup lookup = pageLookup(firstRow, numRows);
  // Where a key's row starts, from its entry: the page's index is clamped
  // to the cache here, where it is used, not at the load, so that a warp
  // that reads entries ahead does not wait for their line right there.
  auto rowOffset = [&](Value clampedKey, Value entry) -> Value {
    Value page = arith::MinSIOp::create(
        *b, arith::MaxSIOp::create(*b, entry, constI32(0)),
        toI32(lookup.lastPage));
    Value slot = arith::AndIOp::create(*b, clampedKey, lookup.mask);
    return add(base, add(mul(arith::ExtSIOp::create(*b, b->getI64Type(), page),
                             cacheStrides[0]),
                         mul(arith::ExtUIOp::create(*b, b->getI64Type(), slot),
                             cacheStrides[1])));
  };
  auto inSequence = [&](Value key) -> Value {
    return arith::CmpIOp::create(*b, arith::CmpIPredicate::slt, key,
                                 lookup.numRows);
  };
  if (!byLines(dim)) {
    assert(prefetched.empty() && "entries read ahead only by lines");
    return planChunks(dim, [&](Value row) {
      Value key = arith::AddIOp::create(*b, lookup.firstRow, toI32(row));
      Value clamped = arith::MinSIOp::create(*b, key, lookup.lastRow);
      return std::pair{rowOffset(clamped, loadEntry(lookup, clamped)),
                       inSequence(key)};
    });
  }
  assert((prefetched.empty() || prefetched.size() == size_t(kLineRows)) &&
         "a prefetched entry a row");
  return planLineChunks(dim, [&](Value row) {
    LineKeys keys = lineKeys(lookup, row);
    SmallVector<Value> entries(prefetched.begin(), prefetched.end());
    if (entries.empty())
      for (Value key : keys.clamped)
        entries.push_back(loadEntry(lookup, key));
    SmallVector<std::pair<Value, Value>> starts;
    for (int64_t r = 0; r < kLineRows; ++r)
      starts.push_back(
          {rowOffset(keys.clamped[r], entries[r]), inSequence(keys.keys[r])});
    return starts;
  });
}
