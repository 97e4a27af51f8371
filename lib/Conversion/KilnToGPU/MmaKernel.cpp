//===- MmaKernel.cpp - The tensor-core attention kernel ---------*- C++ -*-===//
//
// The f16/bf16 kernel, FlashAttention-2 style on m16n8k16 mma.sync (sm_80 and
// later). A block owns 64 rows, 16 per warp; a row is a (query, head) pair of
// one KV head's query group, query-major, so every K and V tile a block loads
// serves all the heads that read it. Q is staged once through shared memory
// into A fragments that stay in registers (past head dim 128 Q keeps a shared
// tile of its own and is read a chunk at a time; see TileLayout). 64-key
// tiles of K and V are copied with cp.async into padded shared buffers, two
// stages of each in dynamic shared memory (one past head dim 128), so that
// tile i + 1 is in flight while tile i computes. S = Q·Kᵀ reads K with
// ldmatrix, the online softmax runs on the S accumulators in registers, and
// the probabilities, packed to the element type, are the A fragments of
// O += P·V, whose B fragments come from ldmatrix.trans on V. Accumulation is
// f32 throughout. For decode shapes (q_len · group ≤ 16 rows in all) the four
// warps share those rows and split each tile's keys instead, and merge their
// states at the end.
//
// The sm_90a variant (KernelSpec::wgmma; head dims padded to multiples of 64;
// chosen by chooseSchedule) keeps the same block, grid, copies and softmax,
// with its tiles in wgmma's 128-byte swizzled layout (slabs of 64 columns)
// and Q resident in shared memory: the four warps are one warpgroup, which
// computes each tile's 64 × 64 scores and its P·V product with
// wgmma.mma_async (Q and K from descriptors; P from the registers that hold
// it, V from an MN-major descriptor). Decode shapes keep mma.sync, reading
// the swizzled tiles with ldmatrix.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"): with
// lane = 4·g + t, a thread holds accumulator rows g and g + 8, columns 2t and
// 2t + 1 of each 8-column block; an A fragment holds the same rows, columns
// 2t, 2t + 1 (+8); a B fragment holds rows 2t, 2t + 1 (+8), column g.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"
#include "Wgmma.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>
#include <tuple>

using namespace mlir;
using namespace mlir::kiln::detail;

namespace {

/// Query rows per warp: the M of one mma.
constexpr int64_t kRowsPerWarp = 16;
/// Keys per tile.
constexpr int64_t kTileKeys = 64;
/// Elements of padding per shared-memory row: with it the eight 16-byte rows
/// an ldmatrix reads fall in different bank groups.
constexpr int64_t kRowPadding = 8;
/// Elements per 16-byte global load.
constexpr int64_t kChunk = 8;
/// 16-byte chunks of a 128-byte line.
constexpr int64_t kLineChunks = 8;
/// Rows a thread copies of a tile laid out by lines (see planLineChunks).
constexpr int64_t kLineRows = kTileKeys * kLineChunks / kThreadsPerBlock;
/// Keys of a tile each warp takes in decode mode (the warps split a tile's
/// keys; warp w takes keys kDecodeWarpKeys·w on).
constexpr int64_t kDecodeWarpKeys = kTileKeys / kWarpsPerBlock;
/// Head dims past this keep Q in shared memory rather than in registers
/// (a warp's Q fragments take D / 4 registers a thread beside D / 2 of O
/// accumulators), and run with one stage of K and V so that Q and the tiles
/// fit the sm_80 shared-memory limit.
constexpr int64_t kLargestRegisterQ = 128;

/// Bytes of a 128-byte-swizzled slab of a tile: 64 rows of 128 bytes.
constexpr int64_t kSlabBytes = kTileKeys * 128;

/// How a kernel keeps its tiles in shared memory.
struct TileLayout {
  /// Elements a tile row takes: the padded head dim, plus kRowPadding in
  /// the portable layout (the wgmma layout swizzles instead).
  int64_t rowElements;
  /// Whether Q stays in a shared tile of its own, read into A fragments one
  /// 16-column chunk at a time (or by wgmma from its descriptor), rather
  /// than in registers.
  bool residentQ;
  /// K and V tiles in flight: with two stages, while the tensor cores work
  /// on tile i the copies of the rest of tile i and of tile i + 1 are
  /// outstanding; with one, K of tile i + 1 loads during the softmax and
  /// P·V of tile i, and its V during its own S = Q·Kᵀ.
  int64_t stages;

  /// Head dims run as the next multiple of 16 (the mma's k) or, with wgmma,
  /// of 64 (whole 128-byte swizzle atoms): the extra columns of the shared
  /// tiles are zero, and the output's extra columns are not stored.
  static int64_t padded(int64_t dim, bool wgmma) {
    return llvm::alignTo(dim, wgmma ? kSwizzleElements : 16);
  }
  static TileLayout of(const KernelSpec &spec, bool wgmma) {
    int64_t widest =
        std::max(padded(spec.headDim, wgmma), padded(spec.valueDim(), wgmma));
    TileLayout layout;
    layout.rowElements = wgmma ? widest : widest + kRowPadding;
    layout.residentQ = wgmma || widest > kLargestRegisterQ;
    layout.stages = widest > kLargestRegisterQ ? 1 : 2;
    return layout;
  }
  int64_t tileBytes() const { return kTileKeys * rowElements * 2; }
  int64_t bytes() const {
    return (2 * stages + (residentQ ? 1 : 0)) * tileBytes();
  }
};

class MmaKernel : public AttentionKernelBuilder {
public:
  explicit MmaKernel(const KernelSpec &spec)
      : AttentionKernelBuilder(spec),
        dimChunks(TileLayout::padded(spec.headDim, spec.wgmma) / 16),
        wgmma(spec.wgmma) {
    assert(spec.packQueryHeads && "the tensor-core kernel packs query heads");
    TileLayout layout = TileLayout::of(spec, wgmma);
    rowElements = layout.rowElements;
    residentQ = layout.residentQ;
    stages = layout.stages;
  }

  int64_t rowsPerBlock() const override {
    return kRowsPerWarp * kWarpsPerBlock;
  }
  int64_t kvBlockSize() const override { return kTileKeys; }
  /// The stages of K and V tiles, and the resident Q tile of large head
  /// dims, in dynamic shared memory (more than the 48 KiB of static shared
  /// memory at head dim 128).
  /// Where a site has both variants, the larger of the two, so that one
  /// manifest describes the kernel on every target.
  int64_t sharedBytes() const override { return 0; }
  int64_t dynamicSharedBytes() const override {
    int64_t bytes = TileLayout::of(spec, false).bytes();
    if (wgmmaKernelSupports(spec.headDim, spec.valueDim()))
      bytes = std::max(bytes, TileLayout::of(spec, true).bytes());
    return bytes;
  }

protected:
  /// From the kernel's schedule (see chooseSchedule).
  int64_t minBlocksPerSM() const override { return spec.blocksPerSM; }
  bool revisitsSkippedKeys() const override { return true; }
  void declareGlobals(OpBuilder &moduleBuilder, Location loc) override;
  void buildBody(gpu::GPUFuncOp func) override;
  void readAhead(Value firstKey, Value fullRow) override;

private:
  /// The head dim `dim` runs as (see TileLayout::padded).
  int64_t padded(int64_t dim) const { return TileLayout::padded(dim, wgmma); }
  int64_t elementBytes() const { return 2; }
  int64_t tileBytes() const { return kTileKeys * rowElements * elementBytes(); }
  /// See wgmmaDescriptor and wgmmaProduct (Wgmma.h).
  Value matrixDescriptor(Value tile, int64_t offset, int64_t leading,
                         int64_t stride) {
    return wgmmaDescriptor(*b, tile, offset, leading, stride);
  }
  SmallVector<Value> wgmmaTile(int64_t n, ArrayRef<Value> acc, Value a,
                               ArrayRef<Value> aFragment, Value bDescriptor,
                               bool transposeB) {
    return wgmmaProduct(*b, spec.elementType, n, acc, a, aFragment, bDescriptor,
                        transposeB);
  }
  Type i32() { return b->getI32Type(); }
  Value constI32(int64_t value) {
    return arith::ConstantIntOp::create(*b, i32(), value);
  }
  /// Address of element (row, column) of a shared tile.
  Value tileAddress(Value tile, Value row, Value column);
  /// The table entries of the first tile read ahead (readAhead), and the
  /// key they were read from; empty where tiles are not copied by lines.
  Value aheadBegin;
  SmallVector<Value> aheadPages;

  /// This thread's 16-byte chunks of a 64-row tile of a [*, D] global
  /// tensor starting at row `firstRow`: for each, the element offset in the
  /// tensor (rows at or past `numRows` clamped to the last one), whether the
  /// row exists, and the row and column in the shared tile.
  struct ChunkPlan {
    SmallVector<Value> offsets, inBounds, rows, columns;
    /// Whether the chunk exists at all (null: always): a tile of D / 8
    /// chunks a row need not split evenly over the threads.
    SmallVector<Value> exists;
  };
  /// The chunks of a tile of a paged cache: key `firstRow + r` lives in
  /// page `page_table[b, key / page_size]`, slot `key % page_size`
  /// (`cacheStrides` = {page, slot, head}); table entries are clamped to the
  /// cache, keys past `numRows` read the last one and are zero-filled.
  /// Head dims of whole lines are laid out by planLineChunks, and a thread
  /// reads the table entries of its kLineRows rows (loadPages), which can
  /// be given read ahead in `prefetched`. Other head dims are laid out by
  /// planChunks, an entry a chunk.
  ChunkPlan planPagedChunks(int64_t dim, ArrayRef<Value> cacheStrides,
                            Value base, Value firstRow, Value numRows,
                            ArrayRef<Value> prefetched = {});
  /// Whether rows of head dim `dim` are whole 128-byte lines.
  static bool byLines(int64_t dim) { return dim % (kLineChunks * kChunk) == 0; }
  /// What a paged tile's lookups share: the tile's first key, the
  /// sequence's key count and last key, the table's last entry, the page
  /// size's shift and mask (i32), the cache's last page (index) and the
  /// sequence's table row (i64).
  struct PageLookup {
    Value firstRow, numRows, lastRow, lastEntry, lastPage, shift, mask,
        tableRow;
  };
  PageLookup pageLookup(Value firstRow, Value numRows);
  /// The keys of the kLineRows rows from `rowInTile` of the tile, and each
  /// clamped to the sequence's last key.
  struct LineKeys {
    SmallVector<Value> keys, clamped;
  };
  LineKeys lineKeys(const PageLookup &lookup, Value rowInTile);
  /// The page-table entry of a key clamped to its sequence, as loaded (i32;
  /// clamped to the cache where used).
  Value loadEntry(const PageLookup &lookup, Value clampedKey);
  /// This thread's table entries of a paged tile laid out by lines, one a
  /// row: one address where the rows share a page (an L1 hit). A single
  /// load shared through a branch was slower: its result was copied into
  /// the branch's results right after the load, so the warp waited for the
  /// entry there (a quarter of a profile's stall samples at pages of 16).
  SmallVector<Value> loadPages(Value firstRow, Value numRows);
  /// Runs `body` only for chunk `index` of `plan` that exists.
  void ifChunkExists(const ChunkPlan &plan, size_t index,
                     llvm::function_ref<void()> body);
  ChunkPlan planChunks(int64_t dim, Value base, Value rowStride,
                       Value firstRow, Value numRows);
  /// The same for the first `rows` rows of a tile whose row r starts at
  /// element offset `rowStart(r).first` and exists when
  /// `rowStart(r).second`.
  ChunkPlan
  planChunks(int64_t dim,
             llvm::function_ref<std::pair<Value, Value>(Value)> rowStart,
             int64_t rows = kTileKeys);
  /// The same laid out by lines, for head dims of whole 128-byte lines:
  /// each group of kLineChunks threads copies the lines of kLineRows
  /// consecutive rows (group G rows kLineRows·G on), a line an instruction,
  /// so that a warp instruction reads four whole lines and a thread's row
  /// starts are computed once for all its chunks. `rowStarts` gives them
  /// from the thread's first row (offset and whether the row exists, for
  /// each of its rows). For tiles whose row starts cost a load.
  ChunkPlan
  planLineChunks(int64_t dim,
                 llvm::function_ref<SmallVector<std::pair<Value, Value>>(Value)>
                     rowStarts);
  /// The first of this thread's rows of a tile laid out by lines.
  Value lineFirstRow() {
    return mul(arith::DivUIOp::create(*b, threadId, constIndex(kLineChunks)),
               constIndex(kLineRows));
  }
  /// Loads the planned chunks element by element (for views whose rows are
  /// not 16-byte aligned; aligned ones are copied with cp.async).
  SmallVector<Value> loadChunks(Value global, const ChunkPlan &plan);
  /// Stores loaded chunks into a shared tile, zeros for missing rows.
  void storeChunks(Value tile, const ChunkPlan &plan, ArrayRef<Value> chunks);
  /// Starts the copy of planned chunks into a shared tile: cp.async (16
  /// bytes, zero-filled for rows out of bounds) when `aligned`, element
  /// loads and stores otherwise. Completion is awaited with
  /// cp.async.wait_group and a barrier.
  void copyChunks(Value tile, Value global, const ChunkPlan &plan,
                  Value aligned);
  /// Starts the copy of a K or V tile (copyChunks). A paged tile's pages
  /// may come `prefetched` (see planPagedChunks).
  void issueTile(int64_t dim, Value tile, Value global, Value base,
                 Value rowStride, Value firstRow, Value numRows, Value aligned,
                 ArrayRef<Value> prefetched = {});

  /// ldmatrix.x4 (optionally transposed): lane l gives the address of row
  /// l % 8 of matrix l / 8.
  SmallVector<Value> loadMatrices(Value address, bool transpose);
  /// D += A·B on one m16n8k16 tile; `acc` holds the four f32 accumulators.
  void mma(ArrayRef<Value> a, ArrayRef<Value> bFragment,
           MutableArrayRef<Value> acc);
  /// With wgmma: orders this thread's generic-proxy writes of shared memory
  /// (stores, cp.async) before wgmma's async-proxy reads that follow the
  /// next barrier. Nothing otherwise.
  void asyncProxyFence() {
    if (wgmma)
      NVVM::FenceProxyOp::create(
          *b, NVVM::ProxyKind::async_shared,
          NVVM::SharedSpaceAttr::get(b->getContext(),
                                     NVVM::SharedSpace::shared_cta));
  }
  /// Two f32 → one packed register of the element type (low half first).
  Value pack(Value low, Value high) {
    return packPair(low, high, spec.elementType);
  }
  /// Decode mode: merges the four warps' online-softmax states (max and sum
  /// of rows g and g + 8, then the O accumulators) for the same rows through
  /// shared memory (two regions of two warps' states each, free once the
  /// loop is done). Every warp gets the merged max and sum; with
  /// `shareBlocks` 0 every warp gets all the merged O accumulators, else
  /// warp w only those of its share, 8-column blocks w · shareBlocks on, in
  /// the slots of blocks 0 to shareBlocks - 1 (the rest are zeros).
  SmallVector<Value> mergeWarps(ValueRange state, Value firstRegion,
                                Value secondRegion, int64_t shareBlocks);
  /// Split-KV: stores a row's partial output (through `storeRow`, which
  /// passes each of the thread's values and its column) and, from the
  /// quad's first lane where `writesStatistics`, the row's max and sum, in
  /// the layout the combine kernel reads.
  void
  writePartial(Value rowHead, Value query, Value max, Value sum, Value quadLane,
               Value writesStatistics,
               llvm::function_ref<void(llvm::function_ref<void(Value, Value)>)>
                   storeRow);

  int64_t rowElements, dimChunks;
  /// The sm_90a variant: swizzled tiles, wgmma for the full-tile products.
  bool wgmma;
  /// See TileLayout.
  bool residentQ;
  int64_t stages;
};

void MmaKernel::declareGlobals(OpBuilder &moduleBuilder, Location loc) {
  declareDynamicShared(moduleBuilder, loc);
}

Value MmaKernel::tileAddress(Value tile, Value row, Value column) {
  auto sharedPtr = LLVM::LLVMPointerType::get(b->getContext(), 3);
  if (!wgmma) {
    Value offset = toI32(add(mul(row, constIndex(rowElements)), column));
    return LLVM::GEPOp::create(*b, sharedPtr, spec.elementType, tile,
                               ValueRange{offset});
  }
  // wgmma's 128-byte swizzle (every access is a whole 16-byte chunk:
  // columns are multiples of 8).
  Value bytes = swizzledOffset(*b, kTileKeys, row, column);
  return LLVM::GEPOp::create(*b, sharedPtr, b->getI8Type(), tile,
                             ValueRange{toI32(bytes)});
}

MmaKernel::ChunkPlan MmaKernel::planChunks(int64_t dim, Value base,
                                           Value rowStride,
                                           Value firstRow, Value numRows) {
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
  if (!byLines(spec.headDim))
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
  auto vectorType = VectorType::get({kChunk}, spec.elementType);
  auto globalPtr = LLVM::LLVMPointerType::get(b->getContext(), 1);
  SmallVector<Value> chunks;
  for (Value offset : plan.offsets) {
    Value chunk = LLVM::PoisonOp::create(*b, vectorType);
    for (int64_t e = 0; e < kChunk; ++e) {
      Value address = LLVM::GEPOp::create(
          *b, globalPtr, spec.elementType, global,
          ValueRange{add(
              offset, arith::ConstantIntOp::create(*b, b->getI64Type(), e))});
      Value element = LLVM::LoadOp::create(*b, spec.elementType, address);
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
  auto ifOp = scf::IfOp::create(*b, plan.exists[index], /*withElse=*/false);
  OpBuilder::InsertionGuard guard(*b);
  b->setInsertionPointToStart(&ifOp.getThenRegion().front());
  body();
}

void MmaKernel::storeChunks(Value tile, const ChunkPlan &plan,
                            ArrayRef<Value> chunks) {
  auto vectorType = VectorType::get({kChunk}, spec.elementType);
  Value zeros = arith::ConstantOp::create(
      *b, vectorType,
      DenseElementsAttr::get(vectorType, b->getFloatAttr(spec.elementType, 0)));
  for (auto [i, chunk] : llvm::enumerate(chunks)) {
    Value value = arith::SelectOp::create(*b, plan.inBounds[i], chunk, zeros);
    ifChunkExists(plan, i, [&] {
      LLVM::StoreOp::create(*b, value,
                            tileAddress(tile, plan.rows[i], plan.columns[i]),
                            /*alignment=*/16);
    });
  }
}

void MmaKernel::issueTile(int64_t dim, Value tile, Value global, Value base,
                          Value rowStride, Value firstRow, Value numRows,
                          Value aligned, ArrayRef<Value> prefetched) {
  ChunkPlan plan = spec.paged
                       ? planPagedChunks(dim, global == v ? vStrides : kStrides,
                                         base, firstRow, numRows, prefetched)
                       : planChunks(dim, base, rowStride, firstRow, numRows);
  copyChunks(tile, global, plan, aligned);
}

void MmaKernel::copyChunks(Value tile, Value global, const ChunkPlan &plan,
                           Value aligned) {
  auto ifOp = scf::IfOp::create(*b, aligned, /*withElse=*/true);
  OpBuilder::InsertionGuard guard(*b);
  b->setInsertionPointToStart(&ifOp.getThenRegion().front());
  auto globalPtr = LLVM::LLVMPointerType::get(b->getContext(), 1);
  for (auto [i, offset] : llvm::enumerate(plan.offsets)) {
    Value source = LLVM::GEPOp::create(*b, globalPtr, spec.elementType, global,
                                       ValueRange{offset});
    // Source size 0 fills the 16 bytes with zeros.
    Value bytes = arith::SelectOp::create(*b, plan.inBounds[i], constI32(16),
                                          constI32(0));
    ifChunkExists(plan, i, [&] {
      NVVM::CpAsyncOp::create(
          *b, tileAddress(tile, plan.rows[i], plan.columns[i]), source,
          /*size=*/16, NVVM::LoadCacheModifierKind::CG, bytes);
    });
  }
  b->setInsertionPointToStart(&ifOp.getElseRegion().front());
  storeChunks(tile, plan, loadChunks(global, plan));
}

SmallVector<Value> MmaKernel::loadMatrices(Value address, bool transpose) {
  MLIRContext *ctx = b->getContext();
  Type i32Type = i32();
  auto structType = LLVM::LLVMStructType::getLiteral(
      ctx, {i32Type, i32Type, i32Type, i32Type});
  Value result = NVVM::LdMatrixOp::create(
      *b, structType, address, /*num=*/4,
      transpose ? NVVM::MMALayout::col : NVVM::MMALayout::row,
      NVVM::LdStMatrixShapeAttr::get(ctx, 8, 8), NVVM::LdStMatrixEltType::B16);
  SmallVector<Value> registers;
  for (int64_t i = 0; i < 4; ++i)
    registers.push_back(LLVM::ExtractValueOp::create(*b, result, i));
  return registers;
}

void MmaKernel::mma(ArrayRef<Value> a, ArrayRef<Value> bFragment,
                    MutableArrayRef<Value> acc) {
  bool isBF16 = spec.elementType.isBF16();
  // bf16 operands are passed as i32, f16 ones as vector<2xf16>.
  auto operand = [&](Value reg) -> Value {
    if (isBF16)
      return reg;
    return LLVM::BitcastOp::create(*b, VectorType::get({2}, b->getF16Type()),
                                   reg);
  };
  SmallVector<Value> aOperands, bOperands;
  for (Value reg : a)
    aOperands.push_back(operand(reg));
  for (Value reg : bFragment)
    bOperands.push_back(operand(reg));
  mmaSync(aOperands, bOperands, acc, 16,
          isBF16 ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16);
}

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

void MmaKernel::buildBody(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder &builder = *b;
  auto sharedPtr = LLVM::LLVMPointerType::get(builder.getContext(), 3);
  // Dynamic shared memory: the K stages, the V stages, then the resident Q
  // tile if there is one.
  Value shared =
      LLVM::AddressOfOp::create(builder, sharedPtr, kDynamicSharedName);
  auto stageTile = [&](int64_t index) -> Value {
    return LLVM::GEPOp::create(
        *b, sharedPtr, b->getI8Type(), shared,
        ArrayRef<LLVM::GEPArg>{int32_t(index * tileBytes())});
  };
  SmallVector<Value> kTiles, vTiles;
  for (int64_t stage = 0; stage < stages; ++stage) {
    kTiles.push_back(stageTile(stage));
    vTiles.push_back(stageTile(stages + stage));
  }
  // Q is staged through the last V stage into registers, or has its own.
  Value qTile = residentQ ? stageTile(2 * stages) : vTiles.back();

  // A query/key head dim padded to a multiple of 16: columns [D, D') of
  // every tile are zeroed once (K copies only write the first D columns), so
  // they add nothing to Q·Kᵀ; Q is staged through a V tile or has its own,
  // so all of them.
  // (Padded V columns only reach output columns that are not stored.) The
  // V copies that may write these columns start after a barrier.
  int64_t padFrom = spec.headDim;
  int64_t padTo = padded(spec.headDim);
  if (padFrom != padTo) {
    auto vectorType = VectorType::get({kChunk}, spec.elementType);
    Value zeros = arith::ConstantOp::create(
        builder, vectorType,
        DenseElementsAttr::get(vectorType,
                               builder.getFloatAttr(spec.elementType, 0)));
    int64_t chunksPerRow = (padTo - padFrom) / kChunk;
    int64_t numTiles = 2 * stages + (residentQ ? 1 : 0);
    int64_t numChunks = numTiles * kTileKeys * chunksPerRow;
    for (int64_t i = 0; i * kThreadsPerBlock < numChunks; ++i) {
      Value linear = add(threadId, constIndex(i * kThreadsPerBlock));
      Value exists = arith::CmpIOp::create(builder, arith::CmpIPredicate::ult,
                                           linear, constIndex(numChunks));
      auto ifOp = scf::IfOp::create(builder, exists, /*withElse=*/false);
      OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPointToStart(&ifOp.getThenRegion().front());
      Value perTile = constIndex(kTileKeys * chunksPerRow);
      Value tileIndex = arith::DivUIOp::create(builder, linear, perTile);
      Value inTile = arith::RemUIOp::create(builder, linear, perTile);
      Value row = arith::DivUIOp::create(builder, inTile,
                                         constIndex(chunksPerRow));
      Value column = add(
          constIndex(padFrom),
          mul(arith::RemUIOp::create(builder, inTile, constIndex(chunksPerRow)),
              constIndex(kChunk)));
      Value tileStart = LLVM::GEPOp::create(
          builder, sharedPtr, builder.getI8Type(), shared,
          ValueRange{toI32(mul(tileIndex, constIndex(tileBytes())))});
      LLVM::StoreOp::create(builder, zeros,
                            tileAddress(tileStart, row, column),
                            /*alignment=*/16);
    }
  }

  // 16-byte loads need 16-byte aligned rows: every base pointer and every
  // batch, head and sequence stride a multiple of 8 elements. Views that are
  // not (odd slices) take the element-wise path; the branch is uniform.
  Value aligned = arith::ConstantIntOp::create(builder, builder.getI1Type(), 1);
  Type i64 = builder.getI64Type();
  auto isZero = [&](Value value) {
    return arith::CmpIOp::create(builder, arith::CmpIPredicate::eq, value,
                                 arith::ConstantIntOp::create(builder, i64, 0));
  };
  for (Value pointer : {q, k, v}) {
    Value address = LLVM::PtrToIntOp::create(builder, i64, pointer);
    aligned = arith::AndIOp::create(
        builder, aligned,
        isZero(arith::AndIOp::create(
            builder, address, arith::ConstantIntOp::create(builder, i64, 15))));
  }
  for (ArrayRef<Value> strides :
       {ArrayRef<Value>(qStrides), ArrayRef<Value>(kStrides),
        ArrayRef<Value>(vStrides)})
    for (Value stride : strides)
      aligned = arith::AndIOp::create(
          builder, aligned,
          isZero(arith::AndIOp::create(
              builder, stride, arith::ConstantIntOp::create(builder, i64, 7))));

  Value laneGroup = arith::DivUIOp::create(builder, lane, constIndex(4));
  Value quadLane = arith::RemUIOp::create(builder, lane, constIndex(4));
  Value warpRow = mul(warp, constIndex(kRowsPerWarp));
  // Row and column of this lane's address in an ldmatrix.x4.
  Value matrix = arith::DivUIOp::create(builder, lane, constIndex(8));
  Value matrixRow = arith::RemUIOp::create(builder, lane, constIndex(8));
  Value matrixLow = arith::RemUIOp::create(builder, matrix, constIndex(2));
  Value matrixHigh = arith::DivUIOp::create(builder, matrix, constIndex(2));
  // The address this lane gives ldmatrix.x4 for the 16×16 block at
  // (firstRow, firstColumn) of a tile: matrix m covers rows firstRow +
  // 8·rowHalf(m) and columns firstColumn + 8·columnHalf(m), where each half
  // is one bit of m (matrixLow or matrixHigh).
  auto blockAddress = [&](Value tile, Value firstRow, int64_t firstColumn,
                          Value rowHalf, Value columnHalf) {
    Value row = add(firstRow, add(mul(rowHalf, constIndex(8)), matrixRow));
    Value column = add(constIndex(firstColumn), mul(columnHalf, constIndex(8)));
    return tileAddress(tile, row, column);
  };

  // Q is copied first (cp.async, a commit group of its own), then the first
  // K tile, so that both are in flight together. With Q in a tile of its
  // own, the first V tile and, with two stages, the second K and V tiles
  // start too before the wait for Q: every copy of the prologue is in
  // flight at once and the first tile's V arrives with its K. Q staged
  // through the last V stage (into A fragments in registers) is waited for
  // first and the rest of the prologue starts after it. cp.async groups are
  // committed in the order Q, K0, V0, K1, V1, K2, ... (empty groups where
  // there is no tile), so "all but the newest 2 · stages - 1 groups done" is
  // the wait for the tile needed next.
  Value hasTiles =
      arith::CmpIOp::create(builder, arith::CmpIPredicate::slt, kvBegin, kvEnd);
  Value secondStart = add(kvBegin, constIndex(kTileKeys));
  Value hasSecond = arith::CmpIOp::create(builder, arith::CmpIPredicate::slt,
                                          secondStart, kvEnd);
  auto issueIf = [&](Value condition, Value tile, Value global, Value base,
                     Value rowStride, Value firstRow,
                     ArrayRef<Value> prefetched = {}) {
    auto ifOp = scf::IfOp::create(*b, condition, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(*b);
    b->setInsertionPointToStart(&ifOp.getThenRegion().front());
    // V rows have the value head dim (MLA), K rows the query/key one.
    int64_t dim = global == v ? spec.valueDim() : spec.headDim;
    issueTile(dim, tile, global, base, rowStride, firstRow, kvLen, aligned,
              prefetched);
  };
  // Decode shapes: when the block's rows that exist (q_len · group of them)
  // fit in one warp's 16, the four warps share those rows and split each
  // tile's keys instead, 16 keys a warp, and their results are merged at the
  // end. Otherwise each warp owns 16 rows and all 64 keys. The branch is
  // uniform.
  Value isDecode =
      arith::CmpIOp::create(builder, arith::CmpIPredicate::ule,
                            mul(qLen, group), constIndex(kRowsPerWarp));
  // Row r of the Q tile is (query, head) pair firstPackedRow + r; rows past
  // the last query are zero-filled (their clamped address is not read).
  // Decode mode reads the first 16 rows only, and copies no more, unless
  // masked_score's revisit of the keys past the band (whole tiles, every
  // row) may follow.
  Value lastQuery =
      arith::MaxSIOp::create(builder, sub(qLen, constIndex(1)), constIndex(0));
  auto copyQ = [&](int64_t rows) {
    ChunkPlan qPlan = planChunks(
        spec.headDim,
        [&](Value row) {
          auto [query, rowHead] = packedRow(row);
          Value clamped = arith::MinSIOp::create(*b, query, lastQuery);
          return std::pair{add(tensorBase(qStrides, rowHead),
                               mul(toI64(clamped), qStrides[2])),
                           Value(arith::CmpIOp::create(
                               *b, arith::CmpIPredicate::slt, query, qLen))};
        },
        rows);
    copyChunks(qTile, q, qPlan, aligned);
  };
  bool revisits = spec.maskedScore && spec.rightBound();
  if (revisits) {
    copyQ(kTileKeys);
  } else {
    auto qRows = scf::IfOp::create(builder, isDecode, /*withElse=*/true);
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(&qRows.getThenRegion().front());
    copyQ(kRowsPerWarp);
    builder.setInsertionPointToStart(&qRows.getElseRegion().front());
    copyQ(kTileKeys);
  }
  NVVM::CpAsyncCommitGroupOp::create(builder);
  // The first tile's table entries: those read ahead where they were read
  // for this block's range (a uniform branch), else read now.
  SmallVector<Value> firstPages;
  if (!aheadPages.empty()) {
    Value guessed = arith::CmpIOp::create(builder, arith::CmpIPredicate::eq,
                                          kvBegin, aheadBegin);
    SmallVector<Type> types(aheadPages.size(), builder.getI32Type());
    firstPages = ifElse(
        guessed, types, [&] { return aheadPages; },
        [&] { return loadPages(kvBegin, kvLen); });
  }
  issueIf(hasTiles, kTiles[0], k, kBase, kStrides[2], kvBegin, firstPages);
  NVVM::CpAsyncCommitGroupOp::create(builder);
  // The rest of a loop's prologue, after its first K tile: the first V tile
  // (its rows are K's: the same entries where V too is copied by lines)
  // and, with two stages, the second K and V tiles, one commit group each
  // (the order the loop waits on).
  auto issueRestOfPrologue = [&](Value hasFirst, Value first, Value hasNext,
                                 Value next) {
    bool sameRows = first == kvBegin && byLines(spec.valueDim());
    issueIf(hasFirst, vTiles[0], v, vBase, vStrides[2], first,
            sameRows ? ArrayRef<Value>(firstPages) : ArrayRef<Value>());
    NVVM::CpAsyncCommitGroupOp::create(*b);
    if (stages == 1)
      return;
    issueIf(hasNext, kTiles[1], k, kBase, kStrides[2], next);
    NVVM::CpAsyncCommitGroupOp::create(*b);
    issueIf(hasNext, vTiles[1], v, vBase, vStrides[2], next);
    NVVM::CpAsyncCommitGroupOp::create(*b);
  };
  // (V copies wider than the query/key head dim write columns the padding
  // stores above zero; those wait for the barrier as well.)
  bool restBeforeQ =
      residentQ && (padFrom == padTo || spec.valueDim() <= spec.headDim);
  if (restBeforeQ)
    issueRestOfPrologue(hasTiles, kvBegin, hasSecond, secondStart);
  // Q's group is done when at most the groups committed after it are not.
  NVVM::CpAsyncWaitGroupOp::create(builder, restBeforeQ ? 2 * stages : 1);
  asyncProxyFence();
  gpu::BarrierOp::create(builder);

  Value rowBase =
      arith::SelectOp::create(builder, isDecode, constIndex(0), warpRow);
  // Matrices: rows 0-7 / 8-15 of the warp's 16, columns 16c + 0-7 / 8-15:
  // the a0-a7 order of an A fragment.
  auto loadQFragment = [&](int64_t c) {
    return loadMatrices(
        blockAddress(qTile, rowBase, 16 * c, matrixLow, matrixHigh),
        /*transpose=*/false);
  };
  SmallVector<SmallVector<Value>> qFragments;
  if (!residentQ) {
    for (int64_t c = 0; c < dimChunks; ++c)
      qFragments.push_back(loadQFragment(c));
    // Every warp has its Q fragments before V overwrites the buffer.
    gpu::BarrierOp::create(builder);
  }
  if (!restBeforeQ)
    issueRestOfPrologue(hasTiles, kvBegin, hasSecond, secondStart);

  // State: max and sum of rows g and g + 8, then the O accumulators, four
  // per 8-column block of the head dim.
  int64_t outBlocks = padded(spec.valueDim()) / 8;
  Value negInf = constF32(-std::numeric_limits<float>::infinity());
  Value zero = constF32(0.0f);
  SmallVector<Value> initState = {negInf, negInf, zero, zero};
  initState.append(outBlocks * 4, zero);

  // This thread's rows g and g + 8: their queries, and their mask and bias
  // bases (each row has its own head).
  Value queryRows[2], rowHeads[2], rowMaskBases[2], rowBiasBases[2];
  for (int64_t r = 0; r < 2; ++r) {
    std::tie(queryRows[r], rowHeads[r]) =
        packedRow(add(rowBase, add(laneGroup, constIndex(8 * r))));
    if (spec.maskType)
      rowMaskBases[r] = tensorBase(maskStrides, rowHeads[r]);
    if (spec.biasType)
      rowBiasBases[r] = tensorBase(biasStrides, rowHeads[r]);
  }
  // kvOffset + the block's first row: the smallest causal diagonal.
  Value firstDiagonal = add(firstQuery, kvOffset);
  bool alwaysFinish = spec.maskType || spec.biasType || spec.softcap;

  // The loop over key tiles; each warp takes `keyBlocks` blocks of 8 keys of
  // every tile, from key `keyOffset` of the tile. Returns the state after
  // it.
  // Paged caches: the table entries of the rows a thread copies of the tile
  // an iteration issues (K's and V's alike) are read an iteration earlier
  // and carried, so that their L2 or memory read passes during a whole tile
  // rather than in front of the copies. The reads are not branched on
  // whether that tile exists (their keys and entries are clamped, so they
  // stay inside the sequence's table row, which the launch checks has an
  // entry at least): a branch's results were copied right after the loads,
  // and the warp waited for the entries there. Only where the registers
  // they hold cost no spills (ptxas: the wgmma variant at head dims 64 to
  // 128; at 256, and on mma.sync, they spill).
  bool carryPages = spec.paged && wgmma && spec.headDim >= 64 &&
                    spec.headDim <= 128 && byLines(spec.headDim);
  auto emitLoop = [&](int64_t keyBlocks, Value keyOffset, Value loopBegin,
                      Value loopEnd,
                      ValueRange loopInit) -> SmallVector<Value> {
    SmallVector<Value> init(loopInit);
    // Decode over a paged cache laid out by lines: the rows a warp reads of
    // each K and V tile (its 16 keys) are the rows its own threads copy
    // (a line group of 8 threads takes 4 rows, a warp 16: see
    // planLineChunks), so a tile's arrival and a stage's reuse need the
    // warp's threads only, and each warp runs its own pipeline.
    static_assert(kLineRows * (kWarpSize / kLineChunks) == kDecodeWarpKeys,
                  "a warp copies by lines the keys it reads in decode mode");
    bool warpOwnsRows = keyBlocks < kTileKeys / 8 && spec.paged &&
                        byLines(spec.headDim) && byLines(spec.valueDim());
    auto syncTile = [&](ImplicitLocOpBuilder &ib) {
      if (warpOwnsRows)
        NVVM::SyncWarpOp::create(
            ib, arith::ConstantIntOp::create(ib, ib.getI32Type(), -1));
      else
        gpu::BarrierOp::create(ib);
    };
    if (carryPages)
      init.append(
          loadPages(add(loopBegin, constIndex(stages * kTileKeys)), kvLen));
    auto loop = scf::ForOp::create(
        *b, loopBegin, loopEnd, constIndex(kTileKeys), init,
        [&](OpBuilder &nested, Location nestedLoc, Value kvStart,
            ValueRange carried) {
          ImplicitLocOpBuilder ib(nestedLoc, nested);
          b = &ib;
          ValueRange state = carried.take_front(loopInit.size());
          // This tile's K has landed (its V and the next tile may still be in
          // flight).
          NVVM::CpAsyncWaitGroupOp::create(ib, 2 * stages - 1);
          asyncProxyFence();
          syncTile(ib);
          // The tile `stages` on goes to this tile's stage.
          Value nextStart = add(kvStart, constIndex(stages * kTileKeys));
          Value hasNext = arith::CmpIOp::create(ib, arith::CmpIPredicate::slt,
                                                nextStart, loopEnd);
          SmallVector<Value> nextPages, laterPages;
          if (carryPages) {
            nextPages.assign(carried.begin() + loopInit.size(), carried.end());
            laterPages =
                loadPages(add(nextStart, constIndex(kTileKeys)), kvLen);
          }
          Value kTile = kTiles[0], vTile = vTiles[0];
          if (stages == 2) {
            Value tileIndex = arith::DivUIOp::create(
                ib, sub(kvStart, loopBegin), constIndex(kTileKeys));
            Value odd =
                arith::TruncIOp::create(ib, ib.getI1Type(), toI32(tileIndex));
            kTile = arith::SelectOp::create(ib, odd, kTiles[1], kTiles[0]);
            vTile = arith::SelectOp::create(ib, odd, vTiles[1], vTiles[0]);
          }

          // S = Q·Kᵀ: blocks of 8 keys, 4 accumulators each.
          SmallVector<SmallVector<Value>> scores(keyBlocks,
                                                 SmallVector<Value>(4, zero));
          // Matrices: keys 16·pair + 0-7 / 8-15 (matrixHigh), head dims
          // 16c + 0-7 / 8-15 (matrixLow): B fragments of two key blocks.
          auto scoreChunk = [&](int64_t pair, int64_t c,
                                ArrayRef<Value> qFragment) {
            SmallVector<Value> kFragments = loadMatrices(
                blockAddress(kTile, add(keyOffset, constIndex(16 * pair)),
                             16 * c, matrixHigh, matrixLow),
                /*transpose=*/false);
            mma(qFragment, {kFragments[0], kFragments[1]}, scores[2 * pair]);
            mma(qFragment, {kFragments[2], kFragments[3]},
                scores[2 * pair + 1]);
          };
          // With wgmma (every warp's rows, all the tile's keys), the
          // warpgroup computes the 64 × 64 scores from Q's and K's
          // descriptors, 16 head dims an instruction; K-major with 128-byte
          // swizzle: 8-row groups 1024 bytes apart, a 16-dim step 32 bytes
          // along a swizzled row, a 64-dim step one slab. The accumulators
          // come back in the layout of eight m16n8 tiles.
          bool fullTile = keyBlocks == kTileKeys / 8;
          if (wgmma && fullTile) {
            SmallVector<Value> acc(keyBlocks * 4, zero);
            NVVM::WgmmaFenceAlignedOp::create(ib);
            for (int64_t c = 0; c < dimChunks; ++c) {
              int64_t offset = (16 * c / kSwizzleElements) * kSlabBytes +
                               (16 * c % kSwizzleElements) * elementBytes();
              acc = wgmmaTile(kTileKeys, acc,
                              matrixDescriptor(qTile, offset, 16, 1024), {},
                              matrixDescriptor(kTile, offset, 16, 1024),
                              /*transposeB=*/false);
            }
            NVVM::WgmmaGroupSyncAlignedOp::create(ib);
            NVVM::WgmmaWaitGroupSyncOp::create(ib, 0);
            for (int64_t block = 0; block < keyBlocks; ++block)
              for (int64_t e = 0; e < 4; ++e)
                scores[block][e] = acc[4 * block + e];
          } else if (residentQ) {
            // A resident Q is read one chunk of head dims at a time, each
            // chunk serving every key block (the same order of sums).
            for (int64_t c = 0; c < dimChunks; ++c) {
              SmallVector<Value> qFragment = loadQFragment(c);
              for (int64_t pair = 0; pair < keyBlocks / 2; ++pair)
                scoreChunk(pair, c, qFragment);
            }
          } else {
            for (int64_t pair = 0; pair < keyBlocks / 2; ++pair)
              for (int64_t c = 0; c < dimChunks; ++c)
                scoreChunk(pair, c, qFragments[c]);
          }

          // Every warp is done with this K stage: the K tile after next loads
          // into it during the softmax and P·V of this one.
          syncTile(ib);
          issueIf(hasNext, kTile, k, kBase, kStrides[2], nextStart, nextPages);
          NVVM::CpAsyncCommitGroupOp::create(ib);

          // Scale into log2 units and hide what the mask hides. Tiles that
          // need no masking (inside kv_len, below the diagonal, inside the
          // window) only scale.
          SmallVector<Value> flat;
          for (auto &block : scores)
            flat.append(block.begin(), block.end());
          auto finishAll = [&](bool masked) {
            SmallVector<Value> result;
            for (auto [blockIndex, block] : llvm::enumerate(scores))
              for (int64_t e = 0; e < 4; ++e) {
                if (!masked) {
                  result.push_back(fmul(block[e], scaleLog2));
                  continue;
                }
                Value key = add(add(kvStart, keyOffset),
                                add(constIndex(8 * blockIndex + e % 2),
                                    mul(quadLane, constIndex(2))));
                result.push_back(finishScore(block[e], queryRows[e / 2], key,
                                             rowMaskBases[e / 2],
                                             rowBiasBases[e / 2]));
              }
            return result;
          };
          SmallVector<Value> finished;
          if (alwaysFinish) {
            finished = finishAll(true);
          } else {
            Value tileEnd = add(kvStart, constIndex(kTileKeys));
            Value needsMask = arith::CmpIOp::create(
                ib, arith::CmpIPredicate::sgt, tileEnd, kvLen);
            if (std::optional<int64_t> right = spec.rightBound()) {
              // The tile's last key is past the first row's band.
              Value crosses = arith::CmpIOp::create(
                  ib, arith::CmpIPredicate::sgt, sub(tileEnd, constIndex(1)),
                  add(firstDiagonal, constIndex(*right)));
              needsMask = arith::OrIOp::create(ib, needsMask, crosses);
              if (spec.window) {
                // The tile's first key is outside the last row's window.
                Value lastDiagonal =
                    add(sub(endQuery, constIndex(1)), kvOffset);
                Value oldest = sub(lastDiagonal, constIndex(*spec.window));
                Value before = arith::CmpIOp::create(
                    ib, arith::CmpIPredicate::sle, kvStart, oldest);
                needsMask = arith::OrIOp::create(ib, needsMask, before);
              }
            }
            SmallVector<Type> types(flat.size(), ib.getF32Type());
            auto ifOp = scf::IfOp::create(ib, types, needsMask, true);
            OpBuilder::InsertionGuard guard(ib);
            ib.setInsertionPointToStart(&ifOp.getThenRegion().front());
            scf::YieldOp::create(ib, finishAll(true));
            ib.setInsertionPointToStart(&ifOp.getElseRegion().front());
            scf::YieldOp::create(ib, finishAll(false));
            ib.setInsertionPointAfter(ifOp);
            finished.assign(ifOp.getResults().begin(), ifOp.getResults().end());
          }

          // Online softmax for rows g (r = 0) and g + 8 (r = 1).
          SmallVector<Value> newState, acc;
          SmallVector<Value> probabilities =
              onlineSoftmaxStep(finished, state, newState, acc);

          // This tile's V has landed (the next tile and the K after it may
          // still be in flight).
          NVVM::CpAsyncWaitGroupOp::create(ib, 2 * stages - 1);
          asyncProxyFence();
          syncTile(ib);

          // O += P·V, 16 keys at a time: the S accumulators of key blocks 2j
          // and 2j + 1 are the A fragment of key chunk j. With wgmma, one
          // instruction a chunk covers the whole value head dim: V is B,
          // MN-major (head dims contiguous) with 128-byte swizzle: slabs
          // of 64 dims 8 KiB apart, 8-key groups 1024 bytes apart, a 16-key
          // step two groups.
          SmallVector<SmallVector<Value>> pFragments;
          for (int64_t j = 0; j < keyBlocks / 2; ++j) {
            ArrayRef<Value> low(&probabilities[4 * (2 * j)], 4);
            ArrayRef<Value> high(&probabilities[4 * (2 * j + 1)], 4);
            pFragments.push_back({pack(low[0], low[1]), pack(low[2], low[3]),
                                  pack(high[0], high[1]),
                                  pack(high[2], high[3])});
          }
          // (Every fragment is packed before the fence, so that no wgmma
          // waits for registers written after it.)
          if (wgmma && fullTile)
            NVVM::WgmmaFenceAlignedOp::create(ib);
          for (int64_t j = 0; j < keyBlocks / 2; ++j) {
            ArrayRef<Value> pFragment = pFragments[j];
            if (wgmma && fullTile) {
              acc = wgmmaTile(
                  8 * outBlocks, acc, Value(), pFragment,
                  matrixDescriptor(vTile, 16 * j * 128, kSlabBytes, 1024),
                  /*transposeB=*/true);
              continue;
            }
            for (int64_t pair = 0; pair < outBlocks / 2; ++pair) {
              // Matrices (transposed): keys 16j + 0-7 / 8-15 (matrixLow), head
              // dims 16·pair + 0-7 / 8-15 (matrixHigh): B fragments of two
              // head-dim blocks.
              SmallVector<Value> vFragments = loadMatrices(
                  blockAddress(vTile, add(keyOffset, constIndex(16 * j)),
                               16 * pair, matrixLow, matrixHigh),
                  /*transpose=*/true);
              mma(pFragment, {vFragments[0], vFragments[1]},
                  MutableArrayRef<Value>(&acc[4 * (2 * pair)], 4));
              mma(pFragment, {vFragments[2], vFragments[3]},
                  MutableArrayRef<Value>(&acc[4 * (2 * pair + 1)], 4));
            }
          }
          if (wgmma && fullTile) {
            NVVM::WgmmaGroupSyncAlignedOp::create(ib);
            NVVM::WgmmaWaitGroupSyncOp::create(ib, 0);
          }
          // Every warp is done with this V stage: the V tile after next loads
          // into it.
          syncTile(ib);
          // V's rows are K's: the same entries where both are laid out by
          // lines.
          issueIf(hasNext, vTile, v, vBase, vStrides[2], nextStart,
                  byLines(spec.valueDim()) ? ArrayRef<Value>(nextPages)
                                           : ArrayRef<Value>());
          NVVM::CpAsyncCommitGroupOp::create(ib);

          newState.append(acc.begin(), acc.end());
          newState.append(laterPages);
          scf::YieldOp::create(ib, newState);
          b = &builder;
        });
    return SmallVector<Value>(loop.getResults().take_front(loopInit.size()));
  };

  // Decode mode merges the warps' states with each warp taking a quarter of
  // the O columns, which it then writes (a merge of every column by every
  // warp took a third of a one-tile decode block's instructions); where
  // masked_score may revisit keys past the band, every warp goes on with
  // the whole merged state, and warp 0 writes it.
  int64_t shareBlocks =
      revisits ? 0 : llvm::divideCeil(outBlocks, kWarpsPerBlock);
  SmallVector<Type> stateTypes(initState.size(), builder.getF32Type());
  auto modeIf = scf::IfOp::create(builder, stateTypes, isDecode,
                                  /*withElse=*/true);
  {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(&modeIf.getThenRegion().front());
    SmallVector<Value> loopState =
        emitLoop(kDecodeWarpKeys / 8, mul(warp, constIndex(kDecodeWarpKeys)),
                 kvBegin, kvEnd, initState);
    // Shared memory is free once the loop is done: two regions of two warps'
    // states from its start (2048 + 256 · Dv bytes in all, less than the
    // three or more tiles of 128 · D bytes or more there are).
    int64_t regionBytes = 2 * kWarpSize * int64_t(initState.size()) * 4;
    Value secondRegion =
        LLVM::GEPOp::create(builder, sharedPtr, builder.getI8Type(), shared,
                            ArrayRef<LLVM::GEPArg>{int32_t(regionBytes)});
    scf::YieldOp::create(
        builder, mergeWarps(loopState, shared, secondRegion, shareBlocks));
    builder.setInsertionPointToStart(&modeIf.getElseRegion().front());
    loopState =
        emitLoop(kTileKeys / 8, constIndex(0), kvBegin, kvEnd, initState);
    NVVM::CpAsyncWaitGroupOp::create(builder, 0);
    scf::YieldOp::create(builder, loopState);
  }
  ValueRange results = modeIf.getResults();

  // With masked_score, a row that saw only hidden keys in the band averages
  // V over every key, the skipped ones included: when any row of the block
  // is such a row (a vote over the block), visit the key blocks before and
  // after the band too, continuing the same online softmax. In decode mode
  // every warp holds the same merged rows, so each takes whole tiles.
  if (spec.maskedScore && spec.rightBound()) {
    Value hiddenScore = constF32(saturatedLog2(*spec.maskedScore));
    Value sawNoKey = arith::OrIOp::create(
        builder,
        arith::CmpFOp::create(builder, arith::CmpFPredicate::OLE, results[0],
                              hiddenScore),
        arith::CmpFOp::create(builder, arith::CmpFPredicate::OLE, results[1],
                              hiddenScore));
    Type i32Type = builder.getI32Type();
    Value vote =
        NVVM::BarrierOp::create(
            builder, TypeRange{i32Type}, Value(), Value(),
            NVVM::BarrierReductionAttr::get(builder.getContext(),
                                            NVVM::BarrierReduction::OR),
            arith::ExtUIOp::create(builder, i32Type, sawNoKey))
            .getRes();
    Value anyRow = arith::CmpIOp::create(
        builder, arith::CmpIPredicate::ne, vote,
        arith::ConstantIntOp::create(builder, i32Type, 0));
    auto revisit = scf::IfOp::create(builder, stateTypes, anyRow,
                                     /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPointToStart(&revisit.getThenRegion().front());
      SmallVector<Value> state(results.begin(), results.end());
      // The main loop covered whole tiles from kvBegin (a tile multiple
      // here) on, possibly past kvEnd; the rest lies before and after.
      Value bandKeys =
          arith::MaxSIOp::create(builder, sub(kvEnd, kvBegin), constIndex(0));
      Value coveredEnd = add(
          kvBegin,
          mul(arith::CeilDivUIOp::create(builder, bandKeys,
                                         constIndex(kTileKeys)),
              constIndex(kTileKeys)));
      for (auto [rangeBegin, rangeEnd] :
           {std::pair(constIndex(0), kvBegin), std::pair(coveredEnd, kvLen)}) {
        // The pipeline's prologue for this range: tiles 0 and 1 of K and V,
        // in the commit-group order the loop waits on.
        NVVM::CpAsyncWaitGroupOp::create(builder, 0);
        gpu::BarrierOp::create(builder);
        Value first = arith::CmpIOp::create(
            builder, arith::CmpIPredicate::slt, rangeBegin, rangeEnd);
        Value secondTile = add(rangeBegin, constIndex(kTileKeys));
        Value second = arith::CmpIOp::create(
            builder, arith::CmpIPredicate::slt, secondTile, rangeEnd);
        issueIf(first, kTiles[0], k, kBase, kStrides[2], rangeBegin);
        NVVM::CpAsyncCommitGroupOp::create(builder);
        issueRestOfPrologue(first, rangeBegin, second, secondTile);
        state =
            emitLoop(kTileKeys / 8, constIndex(0), rangeBegin, rangeEnd, state);
      }
      NVVM::CpAsyncWaitGroupOp::create(builder, 0);
      scf::YieldOp::create(builder, state);
      builder.setInsertionPointToStart(&revisit.getElseRegion().front());
      scf::YieldOp::create(builder, results);
    }
    results = revisit.getResults();
  }

  // out = O / sum; rows that saw no key are written as zeros. In decode
  // mode each warp writes its share of the merged rows' columns, or with
  // no shares warp 0 writes them all; warp 0 writes split statistics.
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
    // Blocks of the padded columns past the value head dim are not stored.
    int64_t valueBlocks = spec.valueDim() / 8;
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
    if (!spec.splitKV) {
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
  Value rowsPerSplit = mul(mul(batchSize, numQueryHeads), qLen);
  Value row =
      add(mul(splitIndex, rowsPerSplit),
          add(mul(add(mul(batch, numQueryHeads), rowHead), qLen), query));
  Value dim = constIndex(spec.valueDim());
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
  auto ifOp = scf::IfOp::create(*b, first, /*withElse=*/false);
  OpBuilder::InsertionGuard guard(*b);
  b->setInsertionPointToStart(&ifOp.getThenRegion().front());
  Value statistics =
      add(mul(mul(numSplits, rowsPerSplit), dim), mul(row, constIndex(2)));
  // (A named array: a ValueRange over a braced list would outlive it.)
  Value values[2] = {max, sum};
  for (int64_t i = 0; i < 2; ++i) {
    Value address =
        LLVM::GEPOp::create(*b, globalPtr, f32, workspace,
                            ValueRange{toI64(add(statistics, constIndex(i)))});
    LLVM::StoreOp::create(*b, values[i], address);
  }
}

} // namespace

bool mlir::kiln::detail::wgmmaKernelSupports(int64_t headDim,
                                             int64_t valueHeadDim) {
  // Head dims of the mma.sync kernel, padded to a multiple of 64 (up to 256,
  // still one wgmma N), where that pads at most a third more than mma.sync's
  // multiple of 16: measured on the H200, 96, 136, 160 and 200 ran 4-30%
  // faster padded on wgmma, 40 (a third) the same, and 80 (three fifths
  // more, to 128) 10% slower; 16 and 32 would double.
  auto fits = [](int64_t dim) {
    return dim % 8 == 0 && dim >= 16 && dim <= 256 &&
           3 * llvm::alignTo(dim, kSwizzleElements) <=
               4 * llvm::alignTo(dim, 16);
  };
  return fits(headDim) && fits(valueHeadDim);
}

namespace {
/// A row of the table of measured sm_90a schedules.
struct ScheduleRow {
  int64_t headDim;
  bool causal;
  bool wgmma;
  int64_t blocksPerSM;
};
constexpr ScheduleRow kScheduleTable[] = {
#define KILN_SCHEDULE(headDim, causal, wgmma, blocksPerSM, ...)                \
  {headDim, causal, wgmma, blocksPerSM},
#include "ScheduleTable.inc"
#undef KILN_SCHEDULE
    // (Head dim 0 matches nothing: the table may have no rows.)
    {0, false, false, 0},
};
} // namespace

Schedule mlir::kiln::detail::chooseSchedule(const KernelSpec &spec,
                                            bool hopper) {
  // The rules: up to head dim 64 three blocks fit at 168 registers a thread
  // (ptxas would otherwise take a few more, for the decode path, and fit
  // two); larger head dims use up to 255 registers, two blocks whatever is
  // asked. wgmma where it pads the head dims by at most a third.
  Schedule schedule;
  schedule.blocksPerSM = spec.headDim <= 64 ? 3 : 0;
  if (!hopper)
    return schedule;
  schedule.wgmma = wgmmaKernelSupports(spec.headDim, spec.valueDim());
  // The table, measured on an H200 (bench/tune_schedules.py): rows for
  // equal head dims, causal or not; masks, windows and paged sites take
  // the row of their causality.
  if (spec.valueDim() != spec.headDim)
    return schedule;
  for (const ScheduleRow &row : kScheduleTable) {
    if (row.headDim != spec.headDim || row.causal != spec.causal)
      continue;
    schedule.wgmma =
        row.wgmma && wgmmaKernelSupports(spec.headDim, spec.valueDim());
    schedule.blocksPerSM = row.blocksPerSM;
    schedule.from = "table";
  }
  return schedule;
}

bool mlir::kiln::detail::mmaKernelSupports(Type elementType, int64_t headDim,
                                           int64_t valueHeadDim) {
  if (!(elementType.isF16() || elementType.isBF16()))
    return false;
  auto fits = [](int64_t dim, int64_t most) {
    return dim % 8 == 0 && dim >= 16 && dim <= most;
  };
  // Multiples of 8 up to 256, for the query/key head dim and the value one
  // alike (multi-head latent attention has them differ).
  return fits(headDim, 256) && fits(valueHeadDim, 256);
}

std::unique_ptr<AttentionKernelBuilder>
mlir::kiln::detail::createMmaKernel(const KernelSpec &spec) {
  return std::make_unique<MmaKernel>(spec);
}
