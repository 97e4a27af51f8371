//===- MmaKernel.h - The tensor-core attention kernel -----------*- C++ -*-===//
//
// The f16/bf16 tensor-core kernel (mma.sync, with an sm_90a wgmma variant):
// its tile layout and the builder, whose members live in this folder (the
// prologue, the main loop, tile copies, paged addressing, FP8 tiles, the
// fragments' reads, the decode merge, the epilogue), beside the shared parts
// (Parts/) and products (Products/). See MmaKernel.cpp for how the kernel
// runs.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_CONVERSION_KILNTOGPU_SCHEDULES_MMA_MMAKERNEL_H
#define KILN_LIB_CONVERSION_KILNTOGPU_SCHEDULES_MMA_MMAKERNEL_H

#include "AttentionKernel.h"
#include "Products/Products.h"
#include "Products/Wgmma.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include <array>

namespace mlir::kiln::detail::mma {

/// Query rows per warp: the M of one mma.
inline constexpr int64_t kRowsPerWarp = 16;
/// Keys per tile.
inline constexpr int64_t kTileKeys = 64;
/// Elements of padding per shared-memory row: with it the eight 16-byte rows
/// an ldmatrix reads fall in different bank groups.
inline constexpr int64_t kRowPadding = 8;
/// Elements per 16-byte global load.
inline constexpr int64_t kChunk = 8;
/// 16-byte chunks of a 128-byte line.
inline constexpr int64_t kLineChunks = 8;
/// Rows a thread copies of a tile laid out by lines (see planLineChunks).
inline constexpr int64_t kLineRows = kTileKeys * kLineChunks / kThreadsPerBlock;
/// Keys of a tile each warp takes in decode mode (the warps split a tile's
/// keys; warp w takes keys kDecodeWarpKeys·w on).
inline constexpr int64_t kDecodeWarpKeys = kTileKeys / kWarpsPerBlock;
/// Head dims past this keep Q in shared memory rather than in registers
/// (a warp's Q fragments take D / 4 registers a thread beside D / 2 of O
/// accumulators), and run with one stage of K and V so that Q and the tiles
/// fit the sm_80 shared-memory limit.
inline constexpr int64_t kLargestRegisterQ = 128;

/// How far (log2 units) a decode warp's scores may pass its rows' reference
/// maxima before they move and the accumulators rescale
/// (lazyOnlineSoftmaxStep): weights stay below 256, exact enough in the f16
/// and bf16 operands of P·V (their relative precision is the same at any
/// magnitude) and far from f32's range in the sums.
inline constexpr float kLazyRescaleThreshold = 8.0f;

/// Bytes of a 128-byte-swizzled slab of a tile: 64 rows of 128 bytes.
inline constexpr int64_t kSlabBytes = kTileKeys * 128;

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
  /// FP8 caches: K and V land in e4m3 staging tiles, `stages` of each
  /// (kTileKeys rows of fp8RowBytes), which the products read directly,
  /// converting fragments in registers (Schedules/Mma/Fp8Tile.cpp); the one f16
  /// tile is Q's.
  bool fp8 = false;
  int64_t keyStageBytes = 0, valueStageBytes = 0;

  /// Whether staging rows of `chunks` 16-byte chunks are swizzled
  /// (stagingAddress) rather than padded: power-of-two counts up to 8 (one
  /// 128-byte line; at head dim 256 the swizzle's address arithmetic made
  /// ptxas spill 520 bytes, the padded rows none).
  static bool swizzled(int64_t chunks) {
    return chunks > 0 && chunks <= 8 && (chunks & (chunks - 1)) == 0;
  }
  /// Bytes a row of an e4m3 staging tile takes: the head dim's, swizzled,
  /// or padded to an odd multiple of 16 bytes, so that the 8 rows of a
  /// fragment load (4 bytes a lane for K, 16 a row for V's ldmatrix) fall in
  /// distinct banks.
  static int64_t fp8RowBytes(int64_t dim) {
    if (swizzled(dim / 16))
      return dim;
    return dim + ((dim / 16) % 2 == 0 ? 16 : 0);
  }

  /// Head dims run as the next multiple of 16 (the mma's k) or, with wgmma,
  /// of 64 (whole 128-byte swizzle atoms): the extra columns of the shared
  /// tiles are zero, and the output's extra columns are not stored.
  static int64_t padded(int64_t dim, bool wgmma) {
    return llvm::alignTo(dim, wgmma ? kSwizzleElements : 16);
  }
  static TileLayout of(const KernelSpec &spec, bool wgmma) {
    int64_t widest = std::max(padded(spec.problem.headDim, wgmma),
                              padded(spec.problem.valueDim(), wgmma));
    TileLayout layout;
    layout.rowElements = wgmma ? widest : widest + kRowPadding;
    layout.residentQ = wgmma || widest > kLargestRegisterQ;
    layout.stages = widest > kLargestRegisterQ ? 1 : 2;
    if (spec.problem.fp8Cache) {
      layout.fp8 = true;
      layout.keyStageBytes = kTileKeys * fp8RowBytes(spec.problem.headDim);
      layout.valueStageBytes = kTileKeys * fp8RowBytes(spec.problem.valueDim());
    }
    return layout;
  }
  int64_t tileBytes() const { return kTileKeys * rowElements * 2; }
  /// The f16 tiles: K and V stages, then Q's (Q's alone with FP8 caches).
  int64_t tilesCount() const {
    return fp8 ? 1 : 2 * stages + (residentQ ? 1 : 0);
  }
  int64_t bytes() const {
    return tilesCount() * tileBytes() +
           stages * (keyStageBytes + valueStageBytes);
  }
};

class MmaKernel : public AttentionKernelBuilder {
public:
  explicit MmaKernel(const KernelSpec &spec);
  /// The type the products take: f16 with FP8 caches, else the element's.
  static Type productType(const KernelSpec &spec);

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
  int64_t dynamicSharedBytes() const override;

protected:
  /// From the kernel's schedule (see chooseSchedule).
  int64_t minBlocksPerSM() const override { return spec.variant.blocksPerSM; }
  bool revisitsSkippedKeys() const override { return true; }
  void declareGlobals(OpBuilder &moduleBuilder, Location loc) override;
  void buildBody(gpu::GPUFuncOp func) override;
  void readAhead(Value firstKey, Value fullRow) override;

private:
  //===--------------------------------------------------------------------===//
  // Arithmetic and layout helpers.
  //===--------------------------------------------------------------------===//

  /// The head dim `dim` runs as (see TileLayout::padded).
  int64_t padded(int64_t dim) const { return TileLayout::padded(dim, wgmma); }
  /// The 2-byte units a K or V row of head dim `dim` is copied in: FP8 rows
  /// are copied as dim / 2 units (16-byte chunks of 16 elements), so that
  /// the chunk plans and their layouts serve both.
  int64_t copyDim(int64_t dim) const { return fp8 ? dim / 2 : dim; }
  int64_t elementBytes() const { return 2; }
  int64_t tileBytes() const { return kTileKeys * rowElements * elementBytes(); }
  /// See wgmmaDescriptor (Wgmma.h).
  Value matrixDescriptor(Value tile, int64_t offset, int64_t leading,
                         int64_t stride) {
    return wgmmaDescriptor(*b, tile, offset, leading, stride);
  }
  Type i32() { return b->getI32Type(); }
  Value constI32(int64_t value);
  /// Address of element (row, column) of a shared tile.
  Value tileAddress(Value tile, Value row, Value column);

  //===--------------------------------------------------------------------===//
  // Tile copies (Schedules/Mma/TileCopy.cpp) and paged addressing
  // (Schedules/Mma/PagedAddress.cpp).
  //===--------------------------------------------------------------------===//

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
  ChunkPlan planChunks(int64_t dim, Value base, Value rowStride, Value firstRow,
                       Value numRows);
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
  Value lineFirstRow();
  /// Loads the planned chunks element by element (for views whose rows are
  /// not 16-byte aligned; aligned ones are copied with cp.async).
  SmallVector<Value> loadChunks(Value global, const ChunkPlan &plan);
  /// Stores loaded chunks into a shared tile, zeros for missing rows.
  void storeChunks(Value tile, const ChunkPlan &plan, ArrayRef<Value> chunks,
                   int64_t stagingUnits = 0);
  /// Starts the copy of planned chunks into a shared tile: cp.async (16
  /// bytes, zero-filled for rows out of bounds) when `aligned`, element
  /// loads and stores otherwise. Completion is awaited with
  /// cp.async.wait_group and a barrier. With `stagingUnits` (FP8 K and V),
  /// the tile is a staging tile of rows of that many 2-byte units.
  void copyChunks(Value tile, Value global, const ChunkPlan &plan,
                  Value aligned, int64_t stagingUnits = 0);
  /// Address of 2-byte unit (row, column) of a staging tile of rows of
  /// `units` units.
  Value stagingAddress(Value tile, Value row, Value column, int64_t units);

  //===--------------------------------------------------------------------===//
  // FP8 caches (Schedules/Mma/Fp8Tile.cpp).
  //===--------------------------------------------------------------------===//

  /// FP8 caches: the B fragments of P·V for 16 keys from `keyRow` on and
  /// the head dims of 16-column groups `firstGroup` and the next (that one
  /// only where `second`) of V's staging tile: per group, those of its even
  /// and of its odd head dims (restoreValueColumns puts them back).
  SmallVector<std::array<Value, 2>> loadFp8ValueFragments(Value staging,
                                                          Value keyRow,
                                                          int64_t firstGroup,
                                                          bool second);
  /// FP8 caches: the O accumulators of P·V over loadFp8ValueFragments hold,
  /// for each 16-column group, its even head dims in block 2G and its odd
  /// ones in 2G + 1; moves them (within each lane quad) to the usual
  /// layout, in `state` after its 4 row statistics.
  void restoreValueColumns(SmallVector<Value> &state);
  /// Two e4m3 values (the low 16 bits of `pair`) as an f16x2 (i32): exact,
  /// by cvt.rn.f16x2.e4m3x2 where the target has it, else by moving the
  /// bits into f16's fields, which gives the value times 2^-8 (fp8Factor
  /// undoes it in the scales).
  Value e4m3PairToF16(Value pair);
  /// The factor the converted values lack (1, or 256 after the bit move).
  float fp8Factor() const { return spec.variant.fp8HardwareConvert ? 1.0f : 256.0f; }
  /// bf16 queries with FP8 caches: converts the Q chunks this thread
  /// copied to f16 in place (the products run in f16).
  void convertQToF16(int64_t rows);
  /// FP8 caches: permutes each 16-column group of the Q tile's rows so that
  /// S = Q·Kᵀ can take K's B fragments for a group from one 4-byte load
  /// (loadFp8KeyFragment): logical column 2t + 8r + e holds head dim
  /// 4t + 2r + e (t < 4, r, e < 2). The sum over head dims is the same.
  void permuteQColumns();
  /// FP8 caches: the B fragment (two f16x2 registers) of head dims
  /// [16c, 16c + 16) of key row `keyRow` of K's staging tile, in the order
  /// permuteQColumns gives Q.
  std::pair<Value, Value> loadFp8KeyFragment(Value staging, Value keyRow,
                                             int64_t c);
  /// The 2-byte units a staging row of K (`key`) or V takes.
  int64_t stagingRowUnits(bool key) const;
  /// FP8 caches: reads the KV head's scales, folds K's into the score scale
  /// and turns the caches' strides and bases into 2-byte units.
  void prepareFp8();
  /// Starts the copy of a K or V tile (copyChunks). A paged tile's pages
  /// may come `prefetched` (see planPagedChunks).
  void issueTile(int64_t dim, Value tile, Value global, Value base,
                 Value rowStride, Value firstRow, Value numRows, Value aligned,
                 ArrayRef<Value> prefetched = {});
  /// Zeroes columns [headDim, padded(headDim)) of every shared tile once
  /// (K copies only write the first headDim columns).
  void zeroPadColumns();

  //===--------------------------------------------------------------------===//
  // The mma.sync fragments (Fragments.cpp).
  //===--------------------------------------------------------------------===//

  /// ldmatrix.x4 (optionally transposed): lane l gives the address of row
  /// l % 8 of matrix l / 8.
  SmallVector<Value> loadMatrices(Value address, bool transpose);
  /// The address this lane gives ldmatrix.x4 for the 16×16 block at
  /// (firstRow, firstColumn) of a tile: matrix m covers rows firstRow +
  /// 8·rowHalf(m) and columns firstColumn + 8·columnHalf(m), where each half
  /// is one bit of m (matrixLow or matrixHigh).
  Value blockAddress(Value tile, Value firstRow, int64_t firstColumn,
                     Value rowHalf, Value columnHalf);
  /// With wgmma: orders this thread's generic-proxy writes of shared memory
  /// (stores, cp.async) before wgmma's async-proxy reads that follow the
  /// next barrier. Nothing otherwise.
  void asyncProxyFence();

  //===--------------------------------------------------------------------===//
  // The schedule: prologue (Schedules/Mma/MmaKernel.cpp) and main loop
  // (Schedules/Mma/MmaMainLoop.cpp).
  //===--------------------------------------------------------------------===//

  /// The shared tile at `index` tiles into dynamic shared memory.
  Value stageTile(int64_t index);
  /// Whether masked_score may revisit the keys past the band.
  bool revisits() const {
    return spec.problem.maskedScore.has_value() &&
           spec.problem.rightBound().has_value();
  }
  /// Binds `shared`, the K and V stages and Q's tile.
  void allocateTiles();
  /// Whether every view's rows are 16-byte aligned (i1).
  Value checkAlignment();
  /// Binds this lane's place in the fragments and in ldmatrix.x4.
  void bindLaneLayout();
  /// Starts the copy of a K or V tile under `condition`.
  void issueIf(Value condition, Value tile, Value global, Value base,
               Value rowStride, Value firstRow,
               ArrayRef<Value> prefetched = {});
  /// Starts the copy of the first `rows` rows of Q into its tile.
  void copyQ(int64_t rows, Value lastQuery);
  /// The rest of a loop's prologue, after its first K tile (see
  /// MmaKernel.cpp).
  void issueRestOfPrologue(Value hasFirst, Value first, Value hasNext,
                           Value next);
  /// Copies Q and the first tiles, and loads Q's fragments where they stay
  /// in registers.
  void startPipeline();
  /// Q's A fragment of head-dim chunk `c` from its shared tile.
  SmallVector<Value> loadQFragment(int64_t c);
  /// Binds this thread's rows' queries, heads and mask and bias bases.
  void bindRows();
  /// Runs the main loop in decode or prefill mode; returns the state.
  SmallVector<Value> runModes(ArrayRef<Value> initState, int64_t shareBlocks);
  /// With masked_score: revisits the keys past the band for blocks with a
  /// row that saw no key; returns the state.
  SmallVector<Value> revisitSkippedTiles(ValueRange results);
  /// The loop over key tiles; each warp takes `keyBlocks` blocks of 8 keys
  /// of every tile, from key `keyOffset` of the tile. Returns the state
  /// after it.
  SmallVector<Value> emitLoop(int64_t keyBlocks, Value keyOffset,
                              Value loopBegin, Value loopEnd,
                              ValueRange loopInit);
  /// Waits for a tile's arrival or a stage's reuse: the block, or the warp
  /// alone where it copies the rows it reads.
  void syncTile(bool warpOwnsRows);
  /// S = Q·Kᵀ of the tile in `kTile`: blocks of 8 keys, 4 accumulators each.
  SmallVector<SmallVector<Value>> computeScores(Value kTile, Value keyOffset,
                                                int64_t keyBlocks);
  /// The tile's scores in log2 units, masked where the tile needs it.
  SmallVector<Value> finishTileScores(ArrayRef<SmallVector<Value>> scores,
                                      Value kvStart, Value keyOffset);
  /// acc += P·V of the tile in `vTile`.
  void accumulateValues(SmallVector<Value> &acc, ArrayRef<Value> probabilities,
                        Value vTile, Value keyOffset, int64_t keyBlocks);

  //===--------------------------------------------------------------------===//
  // Decode merge (Schedules/Mma/DecodeMerge.cpp) and the epilogue
  // (Schedules/Mma/MmaEpilogue.cpp).
  //===--------------------------------------------------------------------===//

  /// Decode mode: merges the four warps' online-softmax states (max and sum
  /// of rows g and g + 8, then the O accumulators) for the same rows through
  /// shared memory (two regions of two warps' states each, free once the
  /// loop is done). Every warp gets the merged max and sum; with
  /// `shareBlocks` 0 every warp gets all the merged O accumulators, else
  /// warp w only those of its share, 8-column blocks w · shareBlocks on, in
  /// the slots of blocks 0 to shareBlocks - 1 (the rest are zeros).
  SmallVector<Value> mergeWarps(ValueRange state, Value firstRegion,
                                Value secondRegion, int64_t shareBlocks);
  /// out = O / sum for this thread's rows (or, split, the partials).
  void writeOutput(ValueRange results, int64_t shareBlocks);
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
  /// The products (Products.h): mma.sync, and wgmma's for full tiles of
  /// the sm_90a variant.
  MmaSyncProduct mmaSyncProduct;
  WgmmaProduct wgmmaProduct;
  /// See TileLayout.
  bool residentQ;
  int64_t stages;
  bool fp8 = false;
  /// The table entries of the first tile read ahead (readAhead), and the
  /// key they were read from; empty where tiles are not copied by lines.
  Value aheadBegin;
  SmallVector<Value> aheadPages;

  // Bound by buildBody for its parts.
  /// Dynamic shared memory: the K stages, the V stages, then the resident Q
  /// tile if there is one (with FP8 caches: Q's f16 tile, then the K and V
  /// stages as e4m3 staging tiles).
  Value shared;
  SmallVector<Value> kTiles, vTiles;
  /// FP8 caches: V's scale (times fp8Factor).
  Value vScale;
  /// The type the products take: f16 with FP8 caches, else the element's.
  Type computeType;
  Value qTile;
  /// Whether 16-byte copies may be used (see checkAlignment).
  Value aligned;
  /// lane = 4·laneGroup + quadLane; the warp's first row; and the lane's
  /// row in its matrix and that matrix's bits in an ldmatrix.x4.
  Value laneGroup, quadLane, warpRow, matrixRow, matrixLow, matrixHigh;
  /// Decode shapes (see startPipeline), and the first row of a warp's.
  Value isDecode, rowBase;
  /// The first tile's table entries (paged caches laid out by lines).
  SmallVector<Value> firstPages;
  /// Q's A fragments where they stay in registers.
  SmallVector<SmallVector<Value>> qFragments;
  /// V's 8-column blocks (padded), and the f32 constants of the state.
  int64_t outBlocks = 0;
  Value negInf, zero;
  /// This thread's rows g and g + 8: their queries, and their mask and bias
  /// bases (each row has its own head).
  Value queryRows[2], rowHeads[2], rowMaskBases[2], rowBiasBases[2];
  /// kvOffset + the block's first row: the smallest causal diagonal.
  Value firstDiagonal;
  /// Whether every tile is masked, and whether paged tiles' table entries
  /// are carried through the loop (see emitLoop).
  bool alwaysFinish = false, carryPages = false;
};

} // namespace mlir::kiln::detail::mma

#endif // KILN_LIB_CONVERSION_KILNTOGPU_SCHEDULES_MMA_MMAKERNEL_H
