//===- MmaBackward.cpp - kiln.attention_grad on mma.sync ------------------===//
//
// The backward passes of f16/bf16 sites on m16n8k16 tensor cores. Both
// passes have the forward's shape: a block's 64 rows (16 a warp) stay in
// shared memory and are the A operand of every product, and tiles of
// columns stream past them.
//
// - The query pass (rows: queries; column tiles: 64 keys of K and V):
//   S = Q·Kᵀ and dP = dO·Vᵀ, then per score dS = P·(dP - D) through the
//   score function (GradKernelBase::scoreGradient, which recomputes the
//   forward's score and its masks), and dQ += dS·K with dS from registers.
//   It first computes each row's D = Σ dO·O and stores it to `delta`.
// - The key pass (rows: the block's 64 keys of one KV head; column tiles:
//   queries of every query head of its group): Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ,
//   then dV += Pᵀ·dO and dK += dSᵀ·Q. Each key is summed by the one warp
//   that owns it: deterministic, and GQA/MQA groups summed without copies.
//
// dQ is a pass of its own rather than atomics into an f32 buffer: the two
// passes recompute S and dP (seven products where atomics need five) but
// need no workspace and give the same bits on every run. P and dS are
// rounded to the element type for their products, as in the forward's P·V.
//
// Tiles are copied 16 bytes a thread where every row is 16-byte aligned,
// element by element otherwise; the products read them with ldmatrix (PTX
// ISA, "Matrix Fragments for mma.m16n8k16").
//
//===----------------------------------------------------------------------===//

#include "Schedules/Backward/BackwardKernel.h"
#include "Products/Products.h"
#include "Products/Wgmma.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::kiln::detail;
using namespace mlir::kiln::detail::backward;

namespace {

/// Rows a warp owns: the M of one mma.
constexpr int64_t kWarpRows = 16;
/// Rows a block owns.
constexpr int64_t kBlockRows = kWarpRows * kWarpsPerBlock;
/// Elements of padding per shared row: the eight 16-byte rows an ldmatrix
/// reads then fall in different bank groups.
constexpr int64_t kRowPadding = 8;
/// Elements a 16-byte copy moves.
constexpr int64_t kChunk = 8;

/// A tile of 16-bit elements in dynamic shared memory.
struct SharedTile {
  int64_t offset = 0; ///< bytes from the start
  int64_t rows = 0;
  int64_t rowElements = 0; ///< the head dim plus kRowPadding
  /// Bytes further on (index), for a tile of a pipeline's stage; null: none.
  Value shift;
  SharedTile shifted(Value bytes) const {
    SharedTile tile = *this;
    tile.shift = bytes;
    return tile;
  }
};

class MmaBackwardKernel : public GradKernelBase {
public:
  explicit MmaBackwardKernel(const KernelSpec &spec)
      : GradKernelBase(spec), product(spec.problem.elementType),
        wgmmaProduct(spec.problem.elementType),
        keyPass(spec.variant.pass == KernelVariant::Pass::GradKeyValue),
        wgmma(spec.variant.wgmma),
        // The key pass holds dK and dV accumulators beside the tile's
        // scores: past head dim 64 its tiles take 32 queries.
        columns(keyPass && std::max(headDim, valueDim) > 64 ? 32 : 64) {
    // One manifest describes the kernel on every target: the larger of the
    // two layouts where the site has both (this target's laid out last).
    if (mmaBackwardWgmmaSupports(headDim, valueDim))
      sharedLimit = layOut(!wgmma);
    sharedLimit = std::max(sharedLimit, layOut(wgmma));
  }

  int64_t rowsPerBlock() const override { return kBlockRows; }
  int64_t kvBlockSize() const override { return columns; }
  int64_t sharedBytes() const override { return 0; }
  int64_t dynamicSharedBytes() const override { return sharedLimit; }

protected:
  /// Places the tiles: padded rows for ldmatrix, or (`swizzled`) wgmma's
  /// 128-byte-swizzled slabs, each tile on a 1024-byte boundary. Returns
  /// the dynamic shared memory it takes.
  int64_t layOut(bool swizzled) {
    int64_t offset = 0;
    auto align = [&] {
      if (swizzled)
        offset = llvm::alignTo(offset, 1024);
    };
    auto place = [&](int64_t rows, int64_t dim) {
      align();
      SharedTile tile{offset, rows, swizzled ? dim : dim + kRowPadding};
      offset += rows * tile.rowElements * 2;
      return tile;
    };
    // Query pass: Q and dO rows, the rows' D, then two stages of K and V
    // tiles. Key pass: K and V rows, then two stages of Q and dO tiles
    // with their queries' lse and D.
    rowsOfKeyDim = place(kBlockRows, headDim);
    rowsOfValueDim = place(kBlockRows, valueDim);
    rowDeltaOffset = offset;
    offset += keyPass ? 0 : 4 * kBlockRows;
    align();
    int64_t stageStart = offset;
    tileOfKeyDim = place(columns, headDim);
    tileOfValueDim = place(columns, valueDim);
    statsOffset = offset;
    offset += keyPass ? 2 * 4 * columns : 0;
    align();
    stageBytes = offset - stageStart;
    return offset + stageBytes;
  }

  void declareGlobals(OpBuilder &moduleBuilder, Location loc) override {
    declareDynamicShared(moduleBuilder, loc);
  }

  void buildBody(gpu::GPUFuncOp func) override {
    bindGradArguments(func);
    shared = dynamicShared();
    zero = constF32(0.0f);
    Value laneIndex = lane;
    laneGroup = divU32(laneIndex, constIndex(4));
    quadLane = remU32(laneIndex, constIndex(4));
    matrixRow = remU32(laneIndex, constIndex(8));
    Value matrix = divU32(laneIndex, constIndex(8));
    matrixLow = remU32(matrix, constIndex(2));
    matrixHigh = divU32(matrix, constIndex(2));
    warpRow = mul(warp, constIndex(kWarpRows));
    aligned = checkAlignment();
    if (keyPass)
      buildKeyPass();
    else
      buildQueryPass();
  }

private:
  //===--------------------------------------------------------------------===//
  // Shared memory and copies.
  //===--------------------------------------------------------------------===//

  Type i32() { return b->getI32Type(); }
  Type sharedPointer() {
    return LLVM::LLVMPointerType::get(b->getContext(), 3);
  }
  Type globalPointer() {
    return LLVM::LLVMPointerType::get(b->getContext(), 1);
  }
  /// The shared byte `byteOffset` (index) past the dynamic shared memory.
  Value sharedAt(Value byteOffset) {
    return LLVM::GEPOp::create(*b, sharedPointer(), b->getI8Type(), shared,
                               ValueRange{toI32(byteOffset)});
  }
  /// Address of element (row, column) of a tile; with wgmma, `column` is a
  /// multiple of 8 (every access is a whole 16-byte chunk).
  Value tileAddress(const SharedTile &tile, Value row, Value column) {
    Value within =
        wgmma ? swizzledOffset(*b, tile.rows, row, column)
              : mul(add(mul(row, constIndex(tile.rowElements)), column),
                    constIndex(2));
    return sharedAt(add(tileStart(tile), within));
  }
  /// A tile's first byte (index).
  Value tileStart(const SharedTile &tile) {
    Value offset = constIndex(tile.offset);
    return tile.shift ? add(offset, tile.shift) : offset;
  }
  /// The wgmma descriptor of a tile's matrix at byte `offset` into it.
  Value descriptor(const SharedTile &tile, int64_t offset, int64_t leading,
                   int64_t stride) {
    return wgmmaDescriptor(*b, sharedAt(tileStart(tile)), offset, leading,
                           stride);
  }
  /// With wgmma: orders this thread's generic-proxy writes of shared memory
  /// (stores, cp.async) before wgmma's reads that follow the next barrier.
  void asyncProxyFence() {
    if (wgmma)
      fenceSharedForAsyncProxy(*b);
  }
  /// f32 slot `index` of an array at `offset` bytes (index).
  Value f32Address(Value offset, Value index) {
    return sharedAt(add(offset, mul(index, constIndex(4))));
  }
  Value loadShared(Value offset, Value index) {
    return LLVM::LoadOp::create(*b, b->getF32Type(), f32Address(offset, index));
  }
  void storeShared(Value offset, Value index, Value value) {
    LLVM::StoreOp::create(*b, value, f32Address(offset, index));
  }
  /// The stage of pipeline step `step` (index): its bytes past the first
  /// stage's.
  Value stageShift(Value step) {
    return mul(remU32(step, constIndex(2)), constIndex(stageBytes));
  }
  /// Starts a pipeline of `numSteps` steps: `issue(0)` copies the first
  /// step's tiles into the first stage where there is a step.
  void startPipeline(Value numSteps, llvm::function_ref<void(Value)> issue) {
    ifThen(arith::CmpIOp::create(*b, arith::CmpIPredicate::sgt, numSteps,
                                 constIndex(0)),
           [&] { issue(constIndex(0)); });
    NVVM::CpAsyncCommitGroupOp::create(*b);
  }
  /// The start of pipeline step `step` of `numSteps`: once every warp is
  /// done with the stage step + 1 loads into (the previous step's),
  /// `issue(step + 1)` starts its copies where there is such a step; then
  /// waits for this step's copies and for the block (whose other threads
  /// copied the rest of the tiles).
  void advancePipeline(Value step, Value numSteps,
                       llvm::function_ref<void(Value)> issue) {
    gpu::BarrierOp::create(*b);
    Value next = add(step, constIndex(1));
    ifThen(arith::CmpIOp::create(*b, arith::CmpIPredicate::slt, next,
                                 numSteps),
           [&] { issue(next); });
    NVVM::CpAsyncCommitGroupOp::create(*b);
    NVVM::CpAsyncWaitGroupOp::create(*b, 1);
    asyncProxyFence();
    gpu::BarrierOp::create(*b);
  }

  /// Whether every row the passes copy is 16-byte aligned (i1): the
  /// tensors' addresses and every stride (two bytes an element).
  Value checkAlignment() {
    Type i64 = b->getI64Type();
    Value bits = arith::ConstantIntOp::create(*b, i64, 0);
    for (Value pointer : {q, k, v, gradOut})
      bits = arith::OrIOp::create(*b, bits,
                                  LLVM::PtrToIntOp::create(*b, i64, pointer));
    for (ArrayRef<Value> strides : {ArrayRef<Value>(qStrides),
                                    ArrayRef<Value>(kStrides),
                                    ArrayRef<Value>(vStrides),
                                    ArrayRef<Value>(gradOutStrides)})
      for (Value stride : strides)
        bits = arith::OrIOp::create(
            *b, bits,
            arith::ShLIOp::create(*b, stride,
                                  arith::ConstantIntOp::create(*b, i64, 1)));
    Value low = arith::AndIOp::create(*b, bits,
                                      arith::ConstantIntOp::create(*b, i64, 15));
    return arith::CmpIOp::create(*b, arith::CmpIPredicate::eq, low,
                                 arith::ConstantIntOp::create(*b, i64, 0));
  }

  /// Eight elements from element `offset` (i64) of a global 16-bit tensor,
  /// as four i32: one 16-byte load where `aligned` (and `vector`), else
  /// eight.
  Value loadChunk(Value pointer, Value offset, bool vector = true) {
    auto chunkType = VectorType::get({4}, i32());
    Type i16 = b->getI16Type();
    auto elements = [&]() -> SmallVector<Value> {
      Value chunk = LLVM::PoisonOp::create(*b, chunkType);
      for (int64_t pair = 0; pair < 4; ++pair) {
        Value halves[2];
        for (int64_t e = 0; e < 2; ++e) {
          Value at = arith::AddIOp::create(
              *b, offset,
              arith::ConstantIntOp::create(*b, b->getI64Type(),
                                           2 * pair + e));
          Value address = LLVM::GEPOp::create(*b, globalPointer(), i16,
                                              pointer, ValueRange{at});
          halves[e] = arith::ExtUIOp::create(
              *b, i32(), LLVM::LoadOp::create(*b, i16, address));
        }
        Value word = arith::OrIOp::create(
            *b, halves[0],
            arith::ShLIOp::create(*b, halves[1],
                                  arith::ConstantIntOp::create(*b, i32(),
                                                               16)));
        chunk = LLVM::InsertElementOp::create(
            *b, chunk, word,
            arith::ConstantIntOp::create(*b, i32(), pair));
      }
      return {chunk};
    };
    if (!vector)
      return elements()[0];
    return ifElse(
        aligned, chunkType,
        [&]() -> SmallVector<Value> {
          Value address = LLVM::GEPOp::create(*b, globalPointer(), i16,
                                              pointer, ValueRange{offset});
          return {LLVM::LoadOp::create(*b, chunkType, address, 16)};
        },
        elements)[0];
  }

  /// Copies rows [firstRow, firstRow + tile.rows) of a [*, dim] tensor
  /// (`pointer` at element `base`, rows `rowStride` apart) into `tile`;
  /// rows at or past `numRows` are zeros. The block's threads take 16-byte
  /// chunks in order, so that a warp reads whole rows. Aligned rows are
  /// copied with cp.async (awaited by advancePipeline) where `async`, others
  /// element by element, done when the next barrier is.
  void copyRows(const SharedTile &tile, Value pointer, Value base,
                Value rowStride, Value firstRow, Value numRows, int64_t dim,
                bool async) {
    int64_t chunks = dim / kChunk;
    int64_t total = tile.rows * chunks;
    auto chunkType = VectorType::get({4}, i32());
    Value zeros = LLVM::ZeroOp::create(*b, chunkType);
    Value lastRow = arith::MaxSIOp::create(*b, sub(numRows, constIndex(1)),
                                           constIndex(0));
    for (int64_t first = 0; first < total; first += kThreadsPerBlock) {
      Value linear = add(threadId, constIndex(first));
      auto copyOne = [&] {
        Value row = divU32(linear, constIndex(chunks));
        Value column = mul(remU32(linear, constIndex(chunks)),
                           constIndex(kChunk));
        auto [offset, inBounds] = rowElement(base, rowStride, firstRow, row,
                                             numRows, lastRow, column);
        Value target = tileAddress(tile, row, column);
        if (async) {
          auto ifOp = scf::IfOp::create(*b, aligned, /*withElse=*/true);
          OpBuilder::InsertionGuard guard(*b);
          b->setInsertionPointToStart(&ifOp.getThenRegion().front());
          Value source = LLVM::GEPOp::create(
              *b, globalPointer(), b->getI16Type(), pointer, ValueRange{offset});
          // Source size 0 fills the 16 bytes with zeros.
          Value size = arith::SelectOp::create(
              *b, inBounds, arith::ConstantIntOp::create(*b, i32(), 16),
              arith::ConstantIntOp::create(*b, i32(), 0));
          NVVM::CpAsyncOp::create(*b, target, source, /*size=*/16,
                                  NVVM::LoadCacheModifierKind::CG, size);
          b->setInsertionPointToStart(&ifOp.getElseRegion().front());
          Value chunk = arith::SelectOp::create(
              *b, inBounds, loadChunk(pointer, offset, /*vector=*/false),
              zeros);
          LLVM::StoreOp::create(*b, chunk, target, 16);
          return;
        }
        Value chunk = arith::SelectOp::create(
            *b, inBounds, loadChunk(pointer, offset), zeros);
        LLVM::StoreOp::create(*b, chunk, target, 16);
      };
      if (first + kThreadsPerBlock > total)
        ifBelow(linear, total, copyOne);
      else
        copyOne();
    }
  }

  //===--------------------------------------------------------------------===//
  // Fragments and products.
  //===--------------------------------------------------------------------===//

  SmallVector<Value> loadMatrices(Value address, bool transpose) {
    return ldmatrixX4(*b, address, transpose);
  }
  /// The address this lane gives ldmatrix.x4 for the 16 × 16 block at
  /// (row, column) of a tile: matrix m covers rows row + 8·rowHalf(m) and
  /// columns column + 8·columnHalf(m).
  Value blockAddress(const SharedTile &tile, Value row, int64_t column,
                     Value rowHalf, Value columnHalf) {
    return tileAddress(
        tile, add(row, add(mul(rowHalf, constIndex(8)), matrixRow)),
        add(constIndex(column), mul(columnHalf, constIndex(8))));
  }

  /// The warp's rows times the tile's rows transposed, over `dim`: for
  /// each 8-column block of the tile, the four accumulators of the m16n8
  /// layout (rows g and g + 8 of the warp, columns 2t and 2t + 1).
  /// With wgmma the products are issued only: awaitProducts() commits and
  /// waits for every product issued since the last wait (the two products
  /// of a tile's scores, or of its gradients, in one group).
  SmallVector<Value> rowsTimesTileRows(const SharedTile &rowTile,
                                       const SharedTile &tile, int64_t dim) {
    int64_t blocks = tile.rows / 8;
    SmallVector<Value> acc(4 * blocks, zero);
    if (wgmma) {
      // The warpgroup's 64 rows times the tile's rows, 16 dims an
      // instruction, both K-major: 8-row groups 1024 bytes apart, a 16-dim
      // step 32 bytes along a swizzled row, a 64-dim step one slab.
      // The first instruction overwrites the accumulators (poison until
      // then: zeros would be registers another product in flight may hold).
      NVVM::WgmmaFenceAlignedOp::create(*b);
      Value poison = LLVM::PoisonOp::create(*b, b->getF32Type());
      std::fill(acc.begin(), acc.end(), poison);
      for (int64_t c = 0; c < dim / 16; ++c) {
        auto at = [&](const SharedTile &t) {
          return (16 * c / kSwizzleElements) * t.rows * 128 +
                 (16 * c % kSwizzleElements) * 2;
        };
        wgmmaProduct.scores(*b, acc, descriptor(rowTile, at(rowTile), 16, 1024),
                            descriptor(tile, at(tile), 16, 1024),
                            /*overwrite=*/c == 0);
      }
      return acc;
    }
    for (int64_t c = 0; c < dim / 16; ++c) {
      // A: the warp's 16 rows, columns 16c on (matrices: rows by the low
      // bit, columns by the high).
      SmallVector<Value> a = loadMatrices(
          blockAddress(rowTile, warpRow, 16 * c, matrixLow, matrixHigh),
          /*transpose=*/false);
      for (int64_t pair = 0; pair < blocks / 2; ++pair) {
        // B: tile rows 16·pair on as columns of two blocks (matrices: rows
        // by the high bit, columns by the low).
        SmallVector<Value> bFragments = loadMatrices(
            blockAddress(tile, constIndex(16 * pair), 16 * c, matrixHigh,
                         matrixLow),
            /*transpose=*/false);
        product.scores(*b, MutableArrayRef<Value>(&acc[4 * (2 * pair)], 4), a,
                       {bFragments[0], bFragments[1]});
        product.scores(*b, MutableArrayRef<Value>(&acc[4 * (2 * pair + 1)], 4),
                       a, {bFragments[2], bFragments[3]});
      }
    }
    return acc;
  }

  /// acc += X·tile over the tile's rows: `x` the warp's A fragments (four
  /// registers for each 16 rows of the tile, packAFragments'), `acc` four
  /// accumulators for each 8 of the tile's `dim` columns.
  void accumulateTile(MutableArrayRef<Value> acc, ArrayRef<Value> x,
                      const SharedTile &tile, int64_t dim) {
    if (wgmma) {
      // B MN-major: 16 tile rows a step (2 kB of a slab), slabs of 64
      // columns tile.rows·128 bytes apart.
      NVVM::WgmmaFenceAlignedOp::create(*b);
      for (int64_t j = 0; j < static_cast<int64_t>(x.size()) / 4; ++j)
        wgmmaProduct.values(*b, acc, x.slice(4 * j, 4),
                            descriptor(tile, 16 * j * 128, tile.rows * 128,
                                       1024));
      return;
    }
    for (int64_t j = 0; j < static_cast<int64_t>(x.size()) / 4; ++j) {
      ArrayRef<Value> a = x.slice(4 * j, 4);
      for (int64_t pair = 0; pair < dim / 16; ++pair) {
        // Transposed matrices: tile rows 16j + 0-7 / 8-15 (low bit), columns
        // 16·pair + 0-7 / 8-15 (high bit): B fragments of two blocks.
        SmallVector<Value> bFragments = loadMatrices(
            blockAddress(tile, constIndex(16 * j), 16 * pair, matrixLow,
                         matrixHigh),
            /*transpose=*/true);
        product.values(*b, acc.slice(4 * (2 * pair), 4), a,
                       {bFragments[0], bFragments[1]});
        product.values(*b, acc.slice(4 * (2 * pair + 1), 4), a,
                       {bFragments[2], bFragments[3]});
      }
    }
  }

  /// Waits for the wgmma products issued since the last wait (nothing on
  /// mma.sync, whose products are done when their results are read).
  void awaitProducts() {
    if (!wgmma)
      return;
    NVVM::WgmmaGroupSyncAlignedOp::create(*b);
    NVVM::WgmmaWaitGroupSyncOp::create(*b, 0);
  }

  /// The column of accumulator `e` of 8-column block `block` (2t or 2t + 1).
  Value accColumn(int64_t block, int64_t e) {
    return add(constIndex(8 * block + (e & 1)), mul(quadLane, constIndex(2)));
  }
  /// The warp-relative row of accumulator `e` (g or g + 8).
  Value accRow(int64_t e) {
    return add(warpRow, add(laneGroup, constIndex(e < 2 ? 0 : 8)));
  }

  /// Stores accumulators (four for each 8 of `dim` columns) of this
  /// thread's rows `rows` (g and g + 8; stored where `inBounds`) of a
  /// gradient whose (batch, head) starts at `base`.
  void storeRows(Value pointer, Value base, Value rowStride,
                 ArrayRef<Value> acc, const Value rows[2],
                 const Value inBounds[2]) {
    for (int64_t r = 0; r < 2; ++r)
      ifThen(inBounds[r], [&] {
        Value rowOffset = add(base, mul(toI64(rows[r]), rowStride));
        for (int64_t block = 0; block < static_cast<int64_t>(acc.size()) / 4;
             ++block)
          for (int64_t e = 2 * r; e < 2 * r + 2; ++e)
            storeElement(pointer, acc[4 * block + e],
                         add(rowOffset, toI64(accColumn(block, e))));
      });
  }

  //===--------------------------------------------------------------------===//
  // The passes.
  //===--------------------------------------------------------------------===//

  /// The tile's gradients: for each of this thread's scores (in the
  /// accumulator layout of `dots` and `dps`), its probability and dS
  /// through the score function, from `gradient(i, bounds)`. Tiles that
  /// `needsMask` takes the bounds; the others only the score function.
  std::pair<SmallVector<Value>, SmallVector<Value>> tileGradients(
      Value needsMask, size_t count,
      llvm::function_ref<ScoreGradient(size_t, bool)> gradient) {
    auto finish = [&](bool bounds) {
      SmallVector<Value> p, ds;
      for (size_t i = 0; i < count; ++i) {
        ScoreGradient g = gradient(i, bounds);
        p.push_back(g.probability);
        ds.push_back(g.dot);
      }
      p.append(ds);
      return p;
    };
    SmallVector<Value> both = gradientNeedsBounds()
                                  ? finish(true)
                                  : finishIf(needsMask, 2 * count, finish);
    return {SmallVector<Value>(ArrayRef<Value>(both).take_front(count)),
            SmallVector<Value>(ArrayRef<Value>(both).drop_front(count))};
  }

  void buildQueryPass() {
    ImplicitLocOpBuilder &builder = *b;
    Value gradOutBase = tensorBase(gradOutStrides, head);
    Value numTiles = ceilDivU32(sub(kvEnd, kvBegin), constIndex(columns));
    // The first K and V tiles load while the block's rows and D do.
    auto issueTile = [&](Value step) {
      Value kvStart = add(kvBegin, mul(step, constIndex(columns)));
      Value shift = stageShift(step);
      copyRows(tileOfKeyDim.shifted(shift), k, kBase, kStrides[2], kvStart,
               kvLen, headDim, /*async=*/true);
      copyRows(tileOfValueDim.shifted(shift), v, vBase, vStrides[2], kvStart,
               kvLen, valueDim, /*async=*/true);
    };
    startPipeline(numTiles, issueTile);
    copyRows(rowsOfKeyDim, q, qBase, qStrides[2], firstQuery, qLen, headDim,
             /*async=*/false);
    copyRows(rowsOfValueDim, gradOut, gradOutBase, gradOutStrides[2],
             firstQuery, qLen, valueDim, /*async=*/false);
    asyncProxyFence();

    // D = Σ dO·O of the block's rows: two threads a row, half the value
    // dims each; stored to `delta` and kept for the block.
    Value rowDeltas = constIndex(rowDeltaOffset);
    {
      Value row = divU32(threadId, constIndex(2));
      Value half = remU32(threadId, constIndex(2));
      Value query = add(firstQuery, row);
      Value safeQuery =
          arith::MinSIOp::create(builder, query, sub(qLen, constIndex(1)));
      Value dORow = add(gradOutBase, mul(toI64(safeQuery), gradOutStrides[2]));
      Value oRow = add(outBase, mul(toI64(safeQuery), outStrides[2]));
      int64_t halfDim = valueDim / 2;
      Value first = mul(half, constIndex(halfDim));
      scf::ForOp loop = forLoop(
          first, add(first, constIndex(halfDim)), constIndex(1), {zero},
          [&](Value column, ValueRange sum) -> SmallVector<Value> {
            Value dO = loadGlobalAsF32(gradOut, spec.problem.elementType,
                                       add(dORow, toI64(column)));
            Value o = loadGlobalAsF32(out, spec.problem.elementType,
                                      add(oRow, toI64(column)));
            return {LLVM::FMAOp::create(*b, dO, o, sum[0])};
          });
      Value sum = butterfly(loop.getResult(0), /*isMax=*/false, 1);
      storeShared(rowDeltas, row, sum);
      Value writes = arith::AndIOp::create(
          builder,
          arith::CmpIOp::create(builder, arith::CmpIPredicate::eq, half,
                                constIndex(0)),
          arith::CmpIOp::create(builder, arith::CmpIPredicate::slt, query,
                                qLen));
      ifThen(writes, [&] { storeF32(delta, lseOffset(head, query), sum); });
    }
    gpu::BarrierOp::create(builder);

    Value queries[2], safeQueries[2], inBounds[2], lseLog2[2], rowDelta[2];
    for (int64_t r = 0; r < 2; ++r) {
      Value rowInBlock = accRow(2 * r);
      queries[r] = add(firstQuery, rowInBlock);
      inBounds[r] = arith::CmpIOp::create(builder, arith::CmpIPredicate::slt,
                                          queries[r], qLen);
      safeQueries[r] = arith::MinSIOp::create(builder, queries[r],
                                              sub(qLen, constIndex(1)));
      lseLog2[r] =
          weightLse(loadF32(lsePtr, lseOffset(head, safeQueries[r])));
      rowDelta[r] = loadShared(rowDeltas, rowInBlock);
    }
    // The rows' causal diagonals (kv_offset + query), for the tiles' masks.
    Value firstDiagonal = add(firstQuery, kvOffset);
    Value lastDiagonal = add(firstDiagonal, constIndex(kBlockRows - 1));

    int64_t keyBlocks = columns / 8;
    scf::ForOp loop = forLoop(
        constIndex(0), numTiles, constIndex(1), zeros(headDim / 2),
        [&](Value step, ValueRange carried) {
          Value kvStart = add(kvBegin, mul(step, constIndex(columns)));
          advancePipeline(step, numTiles, issueTile);
          Value shift = stageShift(step);
          SharedTile keys = tileOfKeyDim.shifted(shift);
          SharedTile values = tileOfValueDim.shifted(shift);
          SmallVector<Value> dots =
              rowsTimesTileRows(rowsOfKeyDim, keys, headDim);
          SmallVector<Value> dps =
              rowsTimesTileRows(rowsOfValueDim, values, valueDim);
          awaitProducts();
          Value needsMask = tileNeedsMask(kvStart, columns, firstDiagonal,
                                          [&] { return lastDiagonal; });
          SmallVector<Value> ds =
              tileGradients(needsMask, 4 * keyBlocks,
                            [&](size_t i, bool bounds) {
                              int64_t block = i / 4, e = i % 4, r = e / 2;
                              return scoreGradient(
                                  dots[i], dps[i], safeQueries[r],
                                  add(kvStart, accColumn(block, e)), maskBase,
                                  biasBase, lseLog2[r], rowDelta[r], bounds);
                            })
                  .second;
          // dQ += dS·K, dS rounded to the element type.
          SmallVector<Value> acc(carried.begin(), carried.end());
          accumulateTile(acc, packAFragments(ds, spec.problem.elementType),
                         keys, headDim);
          awaitProducts();
          return acc;
        });

    storeRows(gradQ, tensorBase(gradQStrides, head), gradQStrides[2],
              SmallVector<Value>(loop.getResults()), queries, inBounds);
  }

  void buildKeyPass() {
    ImplicitLocOpBuilder &builder = *b;
    // Grid x is the key block (the prologue's query block is unused).
    Value keyBlock = gpu::BlockIdOp::create(builder, gpu::Dimension::x);
    Value firstKey = mul(keyBlock, constIndex(kBlockRows));
    Value lastKey = add(firstKey, constIndex(kBlockRows - 1));

    // The queries that can see the block's keys (as the FMA pass): key <=
    // query + kv_len - q_len + right and key > query + kv_len - q_len -
    // window. With masked_score every query does.
    Value queryBegin = constIndex(0), queryEnd = qLen;
    const AttentionProblem &problem = spec.problem;
    std::optional<int64_t> right = problem.rightBound();
    if (!problem.maskedScore) {
      if (right)
        queryBegin = arith::MaxSIOp::create(
            builder, sub(sub(firstKey, kvOffset), constIndex(*right)),
            constIndex(0));
      if (problem.window) {
        Value end = add(sub(lastKey, kvOffset), constIndex(*problem.window));
        queryEnd = arith::MinSIOp::create(
            builder, arith::MaxSIOp::create(builder, end, constIndex(0)),
            qLen);
      }
      queryBegin = arith::MinSIOp::create(builder, queryBegin, queryEnd);
    }

    // One pipeline over (query head of the group, query tile) steps.
    Value tilesPerHead =
        ceilDivU32(sub(queryEnd, queryBegin), constIndex(columns));
    Value numSteps = mul(group, tilesPerHead);
    Value lastQuery = sub(qLen, constIndex(1));
    auto stepPlace = [&](Value step) {
      Value member = divU32(step, tilesPerHead);
      Value tileStart = add(
          queryBegin, mul(remU32(step, tilesPerHead), constIndex(columns)));
      return std::make_pair(add(mul(kvHead, group), member), tileStart);
    };
    auto issueStep = [&](Value step) {
      auto [rowHead, tileStart] = stepPlace(step);
      Value shift = stageShift(step);
      copyRows(tileOfKeyDim.shifted(shift), q, tensorBase(qStrides, rowHead),
               qStrides[2], tileStart, qLen, headDim, /*async=*/true);
      copyRows(tileOfValueDim.shifted(shift), gradOut,
               tensorBase(gradOutStrides, rowHead), gradOutStrides[2],
               tileStart, qLen, valueDim, /*async=*/true);
      // The tile's lse and D (4 bytes each, a thread a query), as stored.
      Value stats = add(constIndex(statsOffset), shift);
      ifBelow(threadId, 2 * columns, [&] {
        Value isDelta = arith::CmpIOp::create(
            *b, arith::CmpIPredicate::sge, threadId, constIndex(columns));
        Value column = remU32(threadId, constIndex(columns));
        Value query =
            arith::MinSIOp::create(*b, add(tileStart, column), lastQuery);
        Value source = LLVM::GEPOp::create(
            *b, globalPointer(), b->getF32Type(),
            arith::SelectOp::create(*b, isDelta, delta, lsePtr),
            ValueRange{lseOffset(rowHead, query)});
        NVVM::CpAsyncOp::create(*b, f32Address(stats, threadId), source,
                                /*size=*/4, NVVM::LoadCacheModifierKind::CA,
                                Value());
      });
    };
    startPipeline(numSteps, issueStep);
    copyRows(rowsOfKeyDim, k, kBase, kStrides[2], firstKey, kvLen, headDim,
             /*async=*/false);
    copyRows(rowsOfValueDim, v, vBase, vStrides[2], firstKey, kvLen, valueDim,
             /*async=*/false);
    asyncProxyFence();

    Value keys[2], inBounds[2];
    for (int64_t r = 0; r < 2; ++r) {
      keys[r] = add(firstKey, accRow(2 * r));
      inBounds[r] = arith::CmpIOp::create(builder, arith::CmpIPredicate::slt,
                                          keys[r], kvLen);
    }
    int64_t keyAccs = headDim / 2, valueAccs = valueDim / 2;
    int64_t queryBlocks = columns / 8;
    scf::ForOp loop = forLoop(
        constIndex(0), numSteps, constIndex(1), zeros(keyAccs + valueAccs),
        [&](Value step, ValueRange carried) {
          ImplicitLocOpBuilder &ib = *b;
          auto [rowHead, tileStart] = stepPlace(step);
          advancePipeline(step, numSteps, issueStep);

          Value shift = stageShift(step);
          SharedTile queries = tileOfKeyDim.shifted(shift);
          SharedTile gradOuts = tileOfValueDim.shifted(shift);
          Value stats = add(constIndex(statsOffset), shift);
          Value rowMaskBase =
              problem.maskType ? tensorBase(maskStrides, rowHead) : Value();
          Value rowBiasBase =
              problem.biasType ? tensorBase(biasStrides, rowHead) : Value();
          SmallVector<Value> dots =
              rowsTimesTileRows(rowsOfKeyDim, queries, headDim);
          SmallVector<Value> dps =
              rowsTimesTileRows(rowsOfValueDim, gradOuts, valueDim);
          awaitProducts();
          // The tile needs the bounds where a key of the block is past
          // kv_len, or a (query, key) pair is outside the band: the last key
          // past the first query's diagonal, or (window) the first key at or
          // before the last query's window. Queries past the range are
          // dropped below.
          Value needsMask = arith::CmpIOp::create(
              ib, arith::CmpIPredicate::sgt, add(lastKey, constIndex(1)),
              kvLen);
          if (right) {
            Value firstDiagonal = add(tileStart, kvOffset);
            needsMask = arith::OrIOp::create(
                ib, needsMask,
                arith::CmpIOp::create(ib, arith::CmpIPredicate::sgt, lastKey,
                                      add(firstDiagonal, constIndex(*right))));
            if (problem.window) {
              Value lastDiagonal =
                  add(firstDiagonal, constIndex(columns - 1));
              needsMask = arith::OrIOp::create(
                  ib, needsMask,
                  arith::CmpIOp::create(
                      ib, arith::CmpIPredicate::sle, firstKey,
                      sub(lastDiagonal, constIndex(*problem.window))));
            }
          }
          SmallVector<Value> columnLse, columnDelta, valid;
          for (int64_t block = 0; block < queryBlocks; ++block)
            for (int64_t e = 0; e < 2; ++e) {
              Value column = accColumn(block, e);
              columnLse.push_back(weightLse(loadShared(stats, column)));
              columnDelta.push_back(
                  loadShared(stats, add(column, constIndex(columns))));
              valid.push_back(arith::CmpIOp::create(
                  ib, arith::CmpIPredicate::slt, add(tileStart, column),
                  queryEnd));
            }
          auto [p, ds] = tileGradients(
              needsMask, 4 * queryBlocks, [&](size_t i, bool bounds) {
                int64_t block = i / 4, e = i % 4, c = 2 * block + (e & 1);
                Value query = arith::MinSIOp::create(
                    *b, add(tileStart, accColumn(block, e)), lastQuery);
                return scoreGradient(dots[i], dps[i], query, keys[e / 2],
                                     rowMaskBase, rowBiasBase, columnLse[c],
                                     columnDelta[c], bounds);
              });
          for (size_t i = 0; i < p.size(); ++i) {
            Value isValid = valid[2 * (i / 4) + (i % 2)];
            p[i] = arith::SelectOp::create(ib, isValid, p[i], zero);
            ds[i] = arith::SelectOp::create(ib, isValid, ds[i], zero);
          }
          // dK += dSᵀ·Q and dV += Pᵀ·dO, rounded to the element type.
          // (Both packed before either is issued: no register of an
          // issued wgmma is touched before the wait.)
          SmallVector<Value> dsFragments =
              packAFragments(ds, spec.problem.elementType);
          SmallVector<Value> pFragments =
              packAFragments(p, spec.problem.elementType);
          SmallVector<Value> acc(carried.begin(), carried.end());
          MutableArrayRef<Value> all(acc);
          accumulateTile(all.take_front(keyAccs), dsFragments, queries,
                         headDim);
          accumulateTile(all.drop_front(keyAccs), pFragments, gradOuts,
                         valueDim);
          awaitProducts();
          return acc;
        });

    ValueRange results = loop.getResults();
    storeRows(gradK, tensorBase(gradKStrides, kvHead), gradKStrides[2],
              SmallVector<Value>(results.take_front(keyAccs)), keys, inBounds);
    storeRows(gradV, tensorBase(gradVStrides, kvHead), gradVStrides[2],
              SmallVector<Value>(results.drop_front(keyAccs)), keys, inBounds);
  }

  MmaSyncProduct product;
  WgmmaProduct wgmmaProduct;
  bool keyPass;
  /// The sm_90a variant: swizzled tiles, wgmma products.
  bool wgmma;
  /// Columns of a streamed tile (keys in the query pass, queries in the
  /// key pass).
  int64_t columns;
  SharedTile rowsOfKeyDim, rowsOfValueDim, tileOfKeyDim, tileOfValueDim;
  /// Byte offsets: the query pass's row D, the key pass's lse and D of a
  /// stage; a stage's bytes.
  int64_t rowDeltaOffset = 0, statsOffset = 0, stageBytes = 0;
  /// The dynamic shared memory the manifest states: the larger layout.
  int64_t sharedLimit = 0;

  // Bound by buildBody.
  Value shared, zero, aligned;
  /// lane = 4·laneGroup + quadLane; the warp's first row in the block; the
  /// lane's row in its ldmatrix matrix and that matrix's two bits.
  Value laneGroup, quadLane, warpRow, matrixRow, matrixLow, matrixHigh;
};

} // namespace

std::unique_ptr<AttentionKernelBuilder>
mlir::kiln::detail::backward::createMmaBackwardKernel(const KernelSpec &spec) {
  return std::make_unique<MmaBackwardKernel>(spec);
}

bool mlir::kiln::detail::mmaBackwardWgmmaSupports(int64_t headDim,
                                                  int64_t valueHeadDim) {
  return headDim % kSwizzleElements == 0 &&
         valueHeadDim % kSwizzleElements == 0;
}

bool mlir::kiln::detail::mmaBackwardKernelSupports(Type elementType,
                                                   int64_t headDim,
                                                   int64_t valueHeadDim) {
  auto fits = [](int64_t dim) { return dim > 0 && dim % 16 == 0 && dim <= 128; };
  return (elementType.isF16() || elementType.isBF16()) && fits(headDim) &&
         fits(valueHeadDim);
}
