//===- WarpSpecialized.cpp - The warp-specialised sm_90a kernel -*- C++ -*-===//
//
// The f16/bf16 prefill kernel for sm_90a, in the schedule FlashAttention-3
// published: a block of three warpgroups owns 128 query rows of one head.
//
// - Warpgroup 0 is the producer. It gives its registers back (setmaxnreg)
//   and one thread issues every copy: Q once, then each K and V tile, as TMA
//   copies (cp.async.bulk.tensor) through the tensor maps the runtime encodes
//   at launch and passes as grid-constant parameters. Tiles land in a ring of
//   two stages in wgmma's 128-byte swizzled layout (slabs of 64 columns, the
//   layout TMA's 128-byte swizzle writes); each copy completes a transaction
//   count on the stage's "full" mbarrier.
// - Warpgroups 1 and 2 are consumers of 64 rows each, with 240 registers a
//   thread. For each tile: wait for K, S = Q·Kᵀ on wgmma (Q and K from
//   descriptors), release K's stage, mask and scale, the shared online-
//   softmax step, wait for V, O += P·V on wgmma with P from registers,
//   release V's stage. The stage's "empty" mbarrier counts the consumer
//   warps' releases, and the producer waits on it before it reuses a stage.
//
// Keys past kv_len, and query rows past q_len, are outside the tensor maps'
// bounds: TMA fills them with zeros, and the masking hides those keys. Head
// dims that are not multiples of 64 (80, 96, ...) run as the next multiple:
// the columns past the head dim are outside the maps as well, so their
// slab's box arrives zero-filled, S = Q·Kᵀ stops at the last 16-column chunk
// that holds a head dim, P·V runs on the padded width, and the output's
// padding columns are not stored. The
// block's key range is the prologue's (causal and window tile skipping,
// bottom-right alignment); both consumer warpgroups walk all of it.
//
// A mask or bias comes in with K (stagedTerms, wherever its stages fit):
// the producer copies each key tile's mask and bias tiles with TMA into
// their own ring stages (swizzled rows of 64 or 128 bytes, one row for a
// term whose query axis has size 1), completing on K's full barrier, and
// the consumers read their scores' pairs from shared memory before they
// release K's stage. Otherwise they are read per score from global memory,
// as in the portable kernel. Either way every tile takes the masked path;
// with masked_score no tile is skipped: hidden keys score the fill. V's head dim may differ from Q's and K's (MLA's
// 192/128): V's tiles take their own slabs and O its own width. Paged
// sites and views TMA cannot describe keep the portable kernel (the runtime
// chooses at launch).
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"
#include "Products/Products.h"
#include "Products/Wgmma.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include "llvm/Support/FormatVariadic.h"

#include <limits>
#include <tuple>

using namespace mlir;
using namespace mlir::kiln;
using namespace mlir::kiln::detail;

namespace {

/// Query rows of a consumer warpgroup (wgmma's M) and of a block.
constexpr int64_t kConsumerRows = 64;
constexpr int64_t kWarpgroupThreads = 4 * kWarpSize;
/// Stages of the K and V ring.
constexpr int64_t kStages = 2;
/// Registers a thread of the producer keeps after setmaxnreg; the consumers
/// take what is left of the SM's 65536 (see consumerRegisters). A
/// persistent producer also decodes the items and carries the ring's
/// counters: in 24 it spills.
constexpr int64_t kProducerRegisters = 24;
constexpr int64_t kPersistentProducerRegisters = 40;
/// Dynamic shared memory a block may use on sm_90 (227 KiB).
constexpr int64_t kHopperSharedLimit = 227 * 1024;

/// The mbarriers, 8 bytes each, after the tiles: Q's, then per stage K full,
/// V full, K empty, V empty; persistent kernels also Q empty.
enum Barrier : int64_t {
  kQFull = 0,
  kKFull = 1,
  kVFull = 1 + kStages,
  kKEmpty = 1 + 2 * kStages,
  kVEmpty = 1 + 3 * kStages,
  kQEmpty = 1 + 4 * kStages,
};

class WarpSpecializedKernel : public AttentionKernelBuilder {
public:
  explicit WarpSpecializedKernel(const KernelSpec &spec)
      : AttentionKernelBuilder(spec), headDim(spec.problem.headDim),
        paddedDim(llvm::alignTo(spec.problem.headDim, kSwizzleElements)),
        valueDim(spec.problem.valueDim()),
        paddedValueDim(llvm::alignTo(valueDim, kSwizzleElements)),
        tileKeys(warpSpecializedSchedule(spec).tileKeys),
        consumers(warpSpecializedSchedule(spec).consumers),
        overlap(warpSpecializedSchedule(spec).overlap),
        pingPong(warpSpecializedSchedule(spec).pingPong),
        persistent(spec.variant.persistent),
        products(spec.problem.elementType) {
    assert(warpSpecializedKernelSupports(spec) && "unsupported spec");
    if (spec.variant.stagedTerms) {
      maskLayout = termLayout(spec.problem.maskType, spec.problem.maskOneRow);
      biasLayout = termLayout(spec.problem.biasType, spec.problem.biasOneRow);
    }
  }

  int64_t rowsPerBlock() const override { return blockRows(); }
  int64_t kvBlockSize() const override { return tileKeys; }
  int64_t sharedBytes() const override { return 0; }
  int64_t dynamicSharedBytes() const override {
    return barrierOffset() + numBarriers() * 8;
  }
  int64_t threadsPerBlock() const override {
    return (1 + consumers) * kWarpgroupThreads;
  }

protected:
  int64_t minBlocksPerSM() const override { return 1; }
  /// Q's by the block's rows, K's and V's by the key tile: boxes of a
  /// 128-byte swizzle row of columns, as the slabs lay them out.
  SmallVector<TensorMapFacts> tensorMaps() const override {
    SmallVector<TensorMapFacts> maps;
    for (auto [tensor, rows] : {std::pair{"q", blockRows()},
                                std::pair{"k", tileKeys},
                                std::pair{"v", tileKeys}})
      maps.push_back({std::string(tensor) + "_map", tensor, kSwizzleElements,
                      rows, kSwizzleElements * 2});
    // The staged terms' by a slab's keys and the tile's rows.
    for (auto [tensor, layout] :
         {std::pair{"mask", maskLayout}, std::pair{"bias", biasLayout}})
      if (layout.present)
        maps.push_back({std::string(tensor) + "_map", tensor, layout.slabKeys,
                        layout.rows, layout.rowBytes});
    return maps;
  }
  void declareGlobals(OpBuilder &moduleBuilder, Location loc) override {
    declareDynamicShared(moduleBuilder, loc);
  }
  void buildBody(gpu::GPUFuncOp func) override;

private:
  /// Slabs of 64 columns a row of Q and K, and of V.
  int64_t slabs() const { return paddedDim / kSwizzleElements; }
  int64_t numBarriers() const { return kQEmpty + (persistent ? 1 : 0); }
  int64_t valueSlabs() const { return paddedValueDim / kSwizzleElements; }
  int64_t blockRows() const { return consumers * kConsumerRows; }
  int64_t producerRegisters() const {
    return persistent ? kPersistentProducerRegisters : kProducerRegisters;
  }
  /// 128 · 24 + 256 · 240 = 64512 with two consumers, 128 · 24 + 384 · 160
  /// with three (multiples of 8, as setmaxnreg takes); persistent, 128 · 40
  /// + 256 · 232 and 128 · 40 + 384 · 152.
  int64_t consumerRegisters() const {
    int64_t left = (65536 - kWarpgroupThreads * producerRegisters()) /
                   (consumers * kWarpgroupThreads);
    return std::min<int64_t>(240, left / 8 * 8);
  }
  // (The TMA boxes' zero-filled columns count in their bytes.)
  int64_t qBytes() const { return blockRows() * paddedDim * 2; }
  int64_t keyTileBytes() const { return tileKeys * paddedDim * 2; }
  int64_t valueTileBytes() const { return tileKeys * paddedValueDim * 2; }
  /// The stages of K, then those of V, after Q.
  int64_t valueTilesOffset() const { return kStages * keyTileBytes(); }

  /// A mask or bias tile staged beside K (stagedTerms): a stage holds its
  /// slabs of `slabKeys` keys by `rows` rows (the block's, or one), a row
  /// of `rowBytes` (64 or 128, swizzled by as many bytes), each slab
  /// 1024-byte aligned as the swizzle's pattern repeats.
  struct TermLayout {
    bool present = false;
    Type type;
    int64_t elementBytes = 0, rows = 0, slabKeys = 0, rowBytes = 0, slabs = 0;
    /// Bytes a slab's copy brings (zero-filled rows and keys included).
    int64_t boxBytes() const { return rows * rowBytes; }
    int64_t slabStride() const { return llvm::alignTo(boxBytes(), 1024); }
    int64_t stageBytes() const { return slabs * slabStride(); }
  };
  TermLayout termLayout(Type type, bool oneRow) const {
    TermLayout layout;
    if (!type)
      return layout;
    layout.present = true;
    layout.type = type;
    // A boolean mask is a byte an element in memory.
    layout.elementBytes =
        type.isInteger(1) ? 1 : type.getIntOrFloatBitWidth() / 8;
    layout.rows = oneRow ? 1 : blockRows();
    layout.slabKeys = std::min<int64_t>(128 / layout.elementBytes, tileKeys);
    layout.rowBytes = layout.slabKeys * layout.elementBytes;
    layout.slabs = tileKeys / layout.slabKeys;
    return layout;
  }
  /// The terms' stages after V's (the mask's, then the bias's), and the
  /// bytes a K tile's copies bring with the terms'.
  int64_t termsOffset() const {
    return qBytes() + kStages * (keyTileBytes() + valueTileBytes());
  }
  int64_t biasStagesOffset() const {
    return termsOffset() + kStages * maskLayout.stageBytes();
  }
  int64_t keyCopyBytes() const {
    return keyTileBytes() + maskLayout.slabs * maskLayout.boxBytes() +
           biasLayout.slabs * biasLayout.boxBytes();
  }
  int64_t barrierOffset() const {
    return biasStagesOffset() + kStages * biasLayout.stageBytes();
  }

  Value constI32(int64_t value) {
    return arith::ConstantIntOp::create(*b, b->getI32Type(), value);
  }
  /// The 32-bit shared-window address of a shared pointer.
  Value sharedAddress(Value pointer) {
    return LLVM::PtrToIntOp::create(*b, b->getI32Type(), pointer);
  }
  Value offsetPointer(Value pointer, Value bytes) {
    auto sharedPtr = LLVM::LLVMPointerType::get(b->getContext(), 3);
    return LLVM::GEPOp::create(*b, sharedPtr, b->getI8Type(), pointer,
                               ValueRange{bytes});
  }

  void initBarrier(Value barrier, int64_t count) {
    inlinePtx({}, {barrier, constI32(count)},
              "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r");
  }
  void expectBytes(Value barrier, int64_t bytes) {
    inlinePtx({}, {barrier, constI32(bytes)},
              "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r");
  }
  void arrive(Value barrier) {
    inlinePtx({}, {barrier}, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r");
  }
  /// Spins until the barrier's phase of parity `parity` (i32) completes.
  void wait(Value barrier, Value parity) {
    inlinePtx({}, {barrier, parity},
              "{\n.reg .pred done;\nkiln_wait_${:uid}:\n"
              "mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;\n"
              "@!done bra kiln_wait_${:uid};\n}",
              "r,r");
  }
  /// TMA copy of the box at (column, row, head, batch) of `map` into the
  /// shared `destination`, completing bytes on `barrier`.
  void copyTile(Value map, Value destination, ArrayRef<Value> coordinates,
                Value barrier) {
    SmallVector<Value> operands = {destination, map};
    operands.append(coordinates.begin(), coordinates.end());
    operands.push_back(barrier);
    inlinePtx({}, operands,
              "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::"
              "complete_tx::bytes [$0], [$1, {$2, $3, $4, $5}], [$6];",
              "r,l,r,r,r,r,r");
  }
  /// The tile's `count` slabs of 64 columns, rows [row, row + rows) of
  /// (head, batch), into `destination` (a slab after another).
  void copySlabs(Value map, Value destination, int64_t count, int64_t rows,
                 Value row, Value headIndex, Value barrier) {
    for (int64_t slab = 0; slab < count; ++slab)
      copyTile(map, add32(destination, slab * rows * 128),
               {constI32(slab * kSwizzleElements), toI32(row), toI32(headIndex),
                toI32(batch)},
               barrier);
  }
  Value add32(Value x, int64_t y) {
    return arith::AddIOp::create(*b, x, constI32(y));
  }

  /// The producer's copies for the block's tiles, or (persistent) for one
  /// item's: its tiles are numbered from `tileBase` in the ring, and from
  /// the second item on (`item` counts the block's items) Q's copy waits
  /// for the consumers to be done with the last Q.
  void buildProducer(Value sharedBase, Value numTiles, Value item = Value());
  /// Persistent kernels: runs `body` for each of the block's work items
  /// (from the block's index, a grid apart) with the item bound, its tile
  /// count and the block's item count so far; carries the tile base.
  void forEachItem(function_ref<void(Value numTiles, Value item)> body);
  /// The tiles of the bound key range [kvBegin, kvEnd).
  Value tilesInRange();
  /// A consumer warpgroup (`consumerIndex` 0 or 1, or 2): binds its values
  /// below, runs its loop over the tiles and writes its rows; returns its
  /// final state.
  SmallVector<Value> buildConsumerLoop(Value shared, Value sharedBase,
                                       Value numTiles, Value consumerIndex,
                                       Value item = Value());

  //===--------------------------------------------------------------------===//
  // The consumer's parts.
  //===--------------------------------------------------------------------===//

  int64_t keyBlocks() const { return tileKeys / 8; }
  /// A tile's stage, the parity of its round, and its first key.
  struct TileRef {
    Value stage, parity, kvStart;
  };
  TileRef tileRef(Value tile);
  /// Barrier `index` of `stage` (see Barrier).
  Value stageBarrier(int64_t index, Value stage);
  /// The K or (`value`) V tile of `stage`.
  Value stageTile(Value stage, bool value);
  /// This warp is done with a stage's K or V: its leader arrives.
  void release(int64_t barrier, Value stage);
  /// The same once every lane's reads of the stage are done.
  void releaseAfterReads(int64_t barrier, Value stage);
  /// Issues S = Q·Kᵀ for the K tile of `stage` (not waited for).
  SmallVector<Value> issueScores(Value stage);
  /// Issues O += P·V for the V tile of `stage`.
  SmallVector<Value> issueValues(SmallVector<Value> acc,
                                 ArrayRef<Value> pFragments, Value stage);
  /// Waits until at most `pending` wgmma groups are in flight, and ties the
  /// accumulators `values` to that point (later reads stay after the wait).
  void waitProducts(int64_t pending, SmallVector<Value> &values);
  /// A tile's scores in log2 units, masked where the tile needs it (with
  /// staged terms, read from the tile's stage).
  SmallVector<Value> finishScores(ArrayRef<Value> scores, const TileRef &ref);
  /// finishScores, with K's stage released once the scores (and the staged
  /// terms) no longer need it.
  SmallVector<Value> finishScoresReleasingKeys(ArrayRef<Value> scores,
                                               const TileRef &ref);
  /// Staged terms: this thread's pair of keys 8·block + 2·quadLane (+ 1) of
  /// its row `r` (g or g + 8) from `layout`'s tile of `stage`, whose stages
  /// start `offset` bytes into shared memory; i1 for a boolean mask, else
  /// f32.
  std::pair<Value, Value> readTermPair(const TermLayout &layout, int64_t offset,
                                       Value stage, int64_t block, int64_t r,
                                       ArrayRef<Value> rowBytes,
                                       ArrayRef<Value> swizzle);
  /// Staged terms: the byte offset of this thread's row `r` in `layout`'s
  /// slab and its swizzle (the XOR of its 16-byte chunks), from the term's
  /// query stride (a zero stride reads the box's first row).
  void bindTermRows(const TermLayout &layout, Value strideQ,
                    SmallVector<Value> &rowBytes, SmallVector<Value> &swizzle);
  /// The producer's copy of a key tile's staged terms into `stage`.
  void copyTerms(Value sharedBase, Value stage, Value kvStart, Value full,
                 ArrayRef<Value> maskCoordinates,
                 ArrayRef<Value> biasCoordinates);
  /// A term's (row, head, batch) box coordinates of the block's item: 0 on
  /// a broadcast (zero-stride) axis, and on the query axis of a one-row
  /// tile.
  SmallVector<Value> termCoordinates(const TermLayout &layout,
                                     ArrayRef<Value> strides);
  /// Ping-pong: a consumer waits for its turn (its barrier, 1 + consumer)
  /// before it issues products and passes the turn on after.
  void awaitTurn();
  void arriveAtTurn(Value barrier);
  void passTurn();
  /// Consumer `which` alone passes the turn to barrier `barrier`.
  void passTurnFrom(int64_t which, int64_t barrier);
  /// A tile's scores and softmax step from `state`: waits for its K, issues
  /// and waits for S, releases K; returns the probabilities.
  SmallVector<Value> softmaxOfTile(const TileRef &ref, ValueRange state,
                                   SmallVector<Value> &newState,
                                   SmallVector<Value> &acc);
  /// The loop over the tiles without and with the overlap; return the
  /// final state.
  SmallVector<Value> runSerialLoop(Value numTiles, ArrayRef<Value> initState);
  SmallVector<Value> runOverlappedLoop(Value numTiles,
                                       ArrayRef<Value> initState);
  /// out = O / sum for this thread's rows.
  void writeConsumerOutput(ValueRange results);

  /// The head dims of Q and K and of V, and the multiples of 64 their tiles
  /// take.
  int64_t headDim, paddedDim, valueDim, paddedValueDim;
  /// Keys per K/V tile (wgmma's N for S = Q·Kᵀ).
  int64_t tileKeys;
  /// Consumer warpgroups of 64 rows (see chooseWarpSpecializedSchedule):
  /// with three, 160 registers a thread, with two, 240.
  int64_t consumers;
  /// The softmax of tile i overlaps P·V of tile i - 1 in each warpgroup.
  bool overlap;
  /// With the overlap and two consumers: the consumers take turns to issue
  /// their products (named barriers 1 and 2), so that one's softmax runs
  /// while the other's products do.
  bool pingPong;
  /// One block an SM walking the work items.
  bool persistent;
  /// S = Q·Kᵀ and O += P·V, on wgmma.
  WgmmaProduct products;

  // Bound by buildConsumerLoop for its parts.
  /// The consumer's index, the mbarriers' address, this lane's column pair
  /// in a quad, whether it leads its warp, and the shared Q rows and tiles.
  Value consumer, barriers, quadLane, isLeader, qTile, tilesStart;
  /// Persistent kernels: the ring index of the item's first tile (null
  /// when tiles count from 0).
  Value tileBase;
  /// This thread's rows g and g + 8 of its warp's 16.
  Value queryRows[2];
  /// The warpgroup's first and last diagonals (bottom-right aligned).
  Value firstDiagonal, lastDiagonal;
  /// Whether the softmax step folds the scale (softmaxScale, else null).
  bool foldScale = false;
  Value softmaxScale, zero;
  /// Staged terms (absent: not present) and, bound by buildConsumerLoop,
  /// the shared memory's start and this thread's rows in their tiles.
  TermLayout maskLayout, biasLayout;
  Value sharedStart;
  SmallVector<Value> maskRowBytes, maskSwizzle, biasRowBytes, biasSwizzle;
};

void WarpSpecializedKernel::buildProducer(Value sharedBase, Value numTiles,
                                          Value item) {
  Value barriers = add32(sharedBase, barrierOffset());
  auto barrierAt = [&](int64_t index, Value stage) -> Value {
    Value address = add32(barriers, 8 * index);
    if (!stage)
      return address;
    return arith::AddIOp::create(*b, address,
                                 arith::MulIOp::create(*b, stage, constI32(8)));
  };
  // Q, once an item; past the first, when the consumers released the last
  // (phase item - 1 of Q empty).
  if (item) {
    Value item32 = toI32(item);
    Value later = arith::CmpIOp::create(*b, arith::CmpIPredicate::ugt, item32,
                                        constI32(0));
    ifThen(later, [&] {
      wait(barrierAt(kQEmpty, Value()),
           arith::AndIOp::create(
               *b, arith::AddIOp::create(*b, item32, constI32(1)), constI32(1)));
    });
  }
  Value qFull = barrierAt(kQFull, Value());
  expectBytes(qFull, qBytes());
  copySlabs(qMap, sharedBase, slabs(), blockRows(), firstQuery, head, qFull);

  Value tilesBase = add32(sharedBase, qBytes());
  SmallVector<Value> maskCoordinates = termCoordinates(maskLayout, maskStrides);
  SmallVector<Value> biasCoordinates = termCoordinates(biasLayout, biasStrides);
  forLoop(constIndex(0), numTiles, constIndex(1), ValueRange{},
          [&](Value tile, ValueRange) {
            ImplicitLocOpBuilder &ib = *b;
            Value tile32 = toI32(tileBase ? add(tileBase, tile) : tile);
            Value stage = arith::AndIOp::create(ib, tile32, constI32(1));
            Value round = arith::ShRUIOp::create(ib, tile32, constI32(1));
            // The consumers released this stage's previous tile (round - 1):
            // that phase's parity.
            Value parity = arith::AndIOp::create(
                ib, arith::AddIOp::create(ib, round, constI32(1)), constI32(1));
            Value reused = arith::CmpIOp::create(ib, arith::CmpIPredicate::uge,
                                                 tile32, constI32(kStages));
            Value kvStart = add(kvBegin, mul(tile, constIndex(tileKeys)));
            auto stageBytes = [&](int64_t bytes) -> Value {
              return arith::MulIOp::create(ib, stage, constI32(bytes));
            };
            Value keyStage = stageBytes(keyTileBytes());
            Value valueStage = stageBytes(valueTileBytes());
            // (K's copies bring the staged terms' too.)
            for (auto [tensorMap, fullIndex, emptyIndex, first, stageOffset,
                       bytes, count] :
                 {std::tuple{kMap, kKFull, kKEmpty, int64_t(0), keyStage,
                             keyCopyBytes(), slabs()},
                  std::tuple{vMap, kVFull, kVEmpty, valueTilesOffset(),
                             valueStage, valueTileBytes(), valueSlabs()}}) {
              auto ifOp = scf::IfOp::create(ib, reused, /*withElse=*/false);
              {
                OpBuilder::InsertionGuard guard(ib);
                ib.setInsertionPointToStart(&ifOp.getThenRegion().front());
                wait(barrierAt(emptyIndex, stage), parity);
              }
              Value full = barrierAt(fullIndex, stage);
              expectBytes(full, bytes);
              Value destination =
                  arith::AddIOp::create(ib, add32(tilesBase, first), stageOffset);
              copySlabs(tensorMap, destination, count, tileKeys, kvStart,
                        kvHead, full);
              if (fullIndex == kKFull)
                copyTerms(sharedBase, stage, kvStart, full, maskCoordinates,
                          biasCoordinates);
            }
            return SmallVector<Value>();
          });
}

SmallVector<Value>
WarpSpecializedKernel::termCoordinates(const TermLayout &layout,
                                       ArrayRef<Value> strides) {
  if (!layout.present)
    return {};
  // strides: batch, head, q, k.
  auto unlessBroadcast = [&](Value stride, Value index) -> Value {
    Value broadcast = arith::CmpIOp::create(
        *b, arith::CmpIPredicate::eq, stride,
        arith::ConstantIntOp::create(*b, stride.getType(), 0));
    return arith::SelectOp::create(*b, broadcast, constI32(0), toI32(index));
  };
  Value row = layout.rows == 1 ? constI32(0)
                               : unlessBroadcast(strides[2], firstQuery);
  return {row, unlessBroadcast(strides[1], head),
          unlessBroadcast(strides[0], batch)};
}

void WarpSpecializedKernel::copyTerms(Value sharedBase, Value stage,
                                      Value kvStart, Value full,
                                      ArrayRef<Value> maskCoordinates,
                                      ArrayRef<Value> biasCoordinates) {
  for (auto [layout, map, offset, coordinates] :
       {std::tuple{&maskLayout, maskMap, termsOffset(), maskCoordinates},
        std::tuple{&biasLayout, biasMap, biasStagesOffset(),
                   biasCoordinates}}) {
    if (!layout->present)
      continue;
    Value stageStart = arith::AddIOp::create(
        *b, add32(sharedBase, offset),
        arith::MulIOp::create(*b, stage, constI32(layout->stageBytes())));
    for (int64_t slab = 0; slab < layout->slabs; ++slab)
      copyTile(map, add32(stageStart, slab * layout->slabStride()),
               {toI32(add(kvStart, constIndex(slab * layout->slabKeys))),
                coordinates[0], coordinates[1], coordinates[2]},
               full);
  }
}

WarpSpecializedKernel::TileRef WarpSpecializedKernel::tileRef(Value tile) {
  Value tile32 = toI32(tileBase ? add(tileBase, tile) : tile);
  return TileRef{
      arith::AndIOp::create(*b, tile32, constI32(1)),
      arith::AndIOp::create(*b, arith::ShRUIOp::create(*b, tile32, constI32(1)),
                            constI32(1)),
      add(kvBegin, mul(tile, constIndex(tileKeys)))};
}

Value WarpSpecializedKernel::stageBarrier(int64_t index, Value stage) {
  return arith::AddIOp::create(*b, add32(barriers, 8 * index),
                               arith::MulIOp::create(*b, stage, constI32(8)));
}

Value WarpSpecializedKernel::stageTile(Value stage, bool value) {
  int64_t bytes = value ? valueTileBytes() : keyTileBytes();
  return offsetPointer(
      tilesStart, add32(arith::MulIOp::create(*b, stage, constI32(bytes)),
                        value ? valueTilesOffset() : 0));
}

void WarpSpecializedKernel::release(int64_t barrier, Value stage) {
  ifThen(isLeader, [&] { arrive(stageBarrier(barrier, stage)); });
}

SmallVector<Value>
WarpSpecializedKernel::finishScoresReleasingKeys(ArrayRef<Value> scores,
                                                 const TileRef &ref) {
  // (Staged terms are read from K's stage first.)
  if (!spec.variant.stagedTerms)
    release(kKEmpty, ref.stage);
  SmallVector<Value> finished = finishScores(scores, ref);
  if (spec.variant.stagedTerms)
    releaseAfterReads(kKEmpty, ref.stage);
  return finished;
}

void WarpSpecializedKernel::releaseAfterReads(int64_t barrier, Value stage) {
  inlinePtx({}, {}, "bar.warp.sync -1;", "");
  release(barrier, stage);
}

void WarpSpecializedKernel::bindTermRows(const TermLayout &layout,
                                         Value strideQ,
                                         SmallVector<Value> &rowBytes,
                                         SmallVector<Value> &swizzle) {
  rowBytes.clear();
  swizzle.clear();
  if (!layout.present)
    return;
  Value zeroStride = arith::CmpIOp::create(
      *b, arith::CmpIPredicate::eq, strideQ,
      arith::ConstantIntOp::create(*b, strideQ.getType(), 0));
  for (int64_t r = 0; r < 2; ++r) {
    // The thread's row in the block's tile; a broadcast query axis reads
    // the box's first row (the others lie outside the tensor map).
    Value row = constI32(0);
    if (layout.rows > 1)
      row = arith::SelectOp::create(*b, zeroStride, constI32(0),
                                    toI32(sub(queryRows[r], firstQuery)));
    Value bytes = arith::MulIOp::create(*b, row, constI32(layout.rowBytes));
    // The swizzle XORs a row's 16-byte chunk index with bits 7.. of its
    // address: the row (128-byte rows) or the row pair (64-byte rows).
    Value chunks = arith::AndIOp::create(
        *b, arith::ShRUIOp::create(*b, bytes, constI32(7)),
        constI32(layout.rowBytes / 16 - 1));
    rowBytes.push_back(bytes);
    swizzle.push_back(arith::ShLIOp::create(*b, chunks, constI32(4)));
  }
}

std::pair<Value, Value> WarpSpecializedKernel::readTermPair(
    const TermLayout &layout, int64_t offset, Value stage, int64_t block,
    int64_t r, ArrayRef<Value> rowBytes, ArrayRef<Value> swizzle) {
  int64_t firstKey = 8 * block;
  int64_t slab = firstKey / layout.slabKeys;
  Value inRow =
      add32(arith::MulIOp::create(*b, toI32(quadLane),
                                  constI32(2 * layout.elementBytes)),
            (firstKey % layout.slabKeys) * layout.elementBytes);
  Value bytes = arith::AddIOp::create(
      *b,
      add32(arith::MulIOp::create(*b, stage, constI32(layout.stageBytes())),
            offset + slab * layout.slabStride()),
      arith::AddIOp::create(*b, rowBytes[r],
                            arith::XOrIOp::create(*b, inRow, swizzle[r])));
  bool boolean = layout.type.isInteger(1);
  Type storage = boolean ? b->getI8Type() : layout.type;
  auto pairType = VectorType::get({2}, storage);
  Value pair =
      LLVM::LoadOp::create(*b, pairType, offsetPointer(sharedStart, bytes),
                           /*alignment=*/2 * layout.elementBytes);
  auto element = [&](int64_t i) -> Value {
    Value value = LLVM::ExtractElementOp::create(
        *b, pair, arith::ConstantIntOp::create(*b, b->getI32Type(), i));
    if (boolean)
      return arith::CmpIOp::create(
          *b, arith::CmpIPredicate::ne, value,
          arith::ConstantIntOp::create(*b, b->getI8Type(), 0));
    if (!storage.isF32())
      return arith::ExtFOp::create(*b, b->getF32Type(), value);
    return value;
  };
  return {element(0), element(1)};
}

// K-major operands, 16 head dims an instruction (32 bytes along a swizzled
// row, a slab every 64).
SmallVector<Value> WarpSpecializedKernel::issueScores(Value stage) {
  Value kTile = stageTile(stage, /*value=*/false);
  SmallVector<Value> scores(keyBlocks() * 4, zero);
  NVVM::WgmmaFenceAlignedOp::create(*b);
  for (int64_t c = 0; c < llvm::divideCeil(headDim, 16); ++c) {
    int64_t slab = 16 * c / kSwizzleElements;
    int64_t inRow = (16 * c % kSwizzleElements) * 2;
    products.scores(
        *b, scores,
        wgmmaDescriptor(*b, qTile, slab * blockRows() * 128 + inRow, 16, 1024),
        wgmmaDescriptor(*b, kTile, slab * tileKeys * 128 + inRow, 16, 1024));
  }
  NVVM::WgmmaGroupSyncAlignedOp::create(*b);
  return scores;
}

// V is B, MN-major (head dims contiguous): slabs of 64 dims a tile's rows
// apart, 8-key groups 1024 bytes apart, a 16-key step two groups.
SmallVector<Value>
WarpSpecializedKernel::issueValues(SmallVector<Value> acc,
                                   ArrayRef<Value> pFragments, Value stage) {
  Value vTile = stageTile(stage, /*value=*/true);
  NVVM::WgmmaFenceAlignedOp::create(*b);
  for (int64_t j = 0; j < keyBlocks() / 2; ++j)
    products.values(
        *b, acc, pFragments.slice(4 * j, 4),
        wgmmaDescriptor(*b, vTile, 16 * j * 128, tileKeys * 128, 1024));
  NVVM::WgmmaGroupSyncAlignedOp::create(*b);
  return acc;
}

void WarpSpecializedKernel::waitProducts(int64_t pending,
                                         SmallVector<Value> &values) {
  NVVM::WgmmaWaitGroupSyncOp::create(*b, pending);
  for (Value &value : values)
    value = inlinePtx(b->getF32Type(), {value}, "", "=f,0");
}

// Scale into log2 units; tiles that cross kv_len, the diagonal or the
// window's edge for any of the warpgroup's rows also mask.
SmallVector<Value> WarpSpecializedKernel::finishScores(ArrayRef<Value> scores,
                                                       const TileRef &ref) {
  Value kvStart = ref.kvStart;
  // `masked`: the score function and the terms; `bounded`: kv_len and the
  // band as well.
  auto finishAll = [&](bool masked, bool bounded) {
    SmallVector<Value> result;
    for (int64_t block = 0; block < keyBlocks(); ++block) {
      // Staged terms: each row's pair of keys, read once (once for both
      // rows from a one-row tile).
      std::pair<Value, Value> masks[2], biases[2];
      for (int64_t r = 0; masked && r < 2; ++r) {
        if (maskLayout.present)
          masks[r] = r && maskLayout.rows == 1
                         ? masks[0]
                         : readTermPair(maskLayout, termsOffset(), ref.stage,
                                        block, r, maskRowBytes, maskSwizzle);
        if (biasLayout.present)
          biases[r] = r && biasLayout.rows == 1
                          ? biases[0]
                          : readTermPair(biasLayout, biasStagesOffset(),
                                         ref.stage, block, r, biasRowBytes,
                                         biasSwizzle);
      }
      for (int64_t e = 0; e < 4; ++e) {
        Value score = scores[4 * block + e];
        if (!masked) {
          result.push_back(foldScale ? score : fmul(score, scaleLog2));
          continue;
        }
        Value key = add(kvStart, add(constIndex(8 * block + e % 2),
                                     mul(quadLane, constIndex(2))));
        auto pick = [&](const std::pair<Value, Value> &pair) {
          return e % 2 ? pair.second : pair.first;
        };
        result.push_back(finishScore(
            score, queryRows[e / 2], key, maskBase, biasBase,
            /*raw=*/foldScale,
            ScoreTerms{pick(masks[e / 2]), pick(biases[e / 2])}, bounded));
      }
    }
    return result;
  };
  Value needsMask = tileNeedsMask(kvStart, tileKeys, firstDiagonal,
                                  [&] { return lastDiagonal; });
  // A score function or a mask tensor touches every score; kv_len and the
  // band only the tiles that cross them.
  if (spec.problem.softcap || spec.problem.maskType || spec.problem.biasType)
    return finishIf(needsMask, scores.size(),
                    [&](bool bounded) { return finishAll(true, bounded); });
  return finishIf(needsMask, scores.size(),
                  [&](bool masked) { return finishAll(masked, true); });
}

void WarpSpecializedKernel::awaitTurn() {
  if (pingPong)
    inlinePtx({}, {toI32(add(consumer, constIndex(1))), constI32(256)},
              "bar.sync $0, $1;", "r,r");
}

void WarpSpecializedKernel::arriveAtTurn(Value barrier) {
  inlinePtx({}, {barrier, constI32(256)}, "bar.arrive $0, $1;", "r,r");
}

void WarpSpecializedKernel::passTurn() {
  if (pingPong)
    arriveAtTurn(toI32(sub(constIndex(2), consumer)));
}

void WarpSpecializedKernel::passTurnFrom(int64_t which, int64_t barrier) {
  Value isWhich = arith::CmpIOp::create(*b, arith::CmpIPredicate::eq, consumer,
                                        constIndex(which));
  ifThen(isWhich, [&] { arriveAtTurn(constI32(barrier)); });
}

SmallVector<Value>
WarpSpecializedKernel::softmaxOfTile(const TileRef &ref, ValueRange state,
                                     SmallVector<Value> &newState,
                                     SmallVector<Value> &acc) {
  wait(stageBarrier(kKFull, ref.stage), ref.parity);
  awaitTurn();
  SmallVector<Value> scores = issueScores(ref.stage);
  passTurn();
  waitProducts(0, scores);
  SmallVector<Value> finished = finishScoresReleasingKeys(scores, ref);
  return onlineSoftmaxStep(finished, state, newState, acc, nullptr,
                           softmaxScale);
}

// Each tile in turn: S, its softmax, then P·V.
SmallVector<Value>
WarpSpecializedKernel::runSerialLoop(Value numTiles,
                                     ArrayRef<Value> initState) {
  scf::ForOp loop = forLoop(constIndex(0), numTiles, constIndex(1), initState,
                            [&](Value tile, ValueRange state) {
                              TileRef ref = tileRef(tile);
                              SmallVector<Value> newState, acc;
                              SmallVector<Value> probabilities =
                                  softmaxOfTile(ref, state, newState, acc);
                              SmallVector<Value> pFragments = packAFragments(
                                  probabilities, spec.problem.elementType);
                              wait(stageBarrier(kVFull, ref.stage), ref.parity);
                              acc = issueValues(acc, pFragments, ref.stage);
                              waitProducts(0, acc);
                              release(kVEmpty, ref.stage);
                              newState.append(acc.begin(), acc.end());
                              return newState;
                            });
  return SmallVector<Value>(loop.getResults().begin(), loop.getResults().end());
}

// The softmax of tile i overlaps the product P·V of tile i - 1: each
// iteration issues S_i and then O += P_{i-1}·V_{i-1}, waits for S_i only,
// runs the softmax of S_i, and then waits for P·V before it rescales O. The
// first tile's S and softmax come before the loop, the last tile's P·V
// after it.
SmallVector<Value>
WarpSpecializedKernel::runOverlappedLoop(Value numTiles,
                                         ArrayRef<Value> initState) {
  SmallVector<Type> stateTypes(initState.size(), b->getF32Type());
  int64_t stateSize = initState.size();
  int64_t fragmentCount = keyBlocks() * 2;
  Value hasTiles = arith::CmpIOp::create(*b, arith::CmpIPredicate::sgt,
                                         numTiles, constIndex(0));
  auto ifTiles = scf::IfOp::create(*b, stateTypes, hasTiles,
                                   /*withElse=*/true);
  OpBuilder::InsertionGuard guard(*b);
  b->setInsertionPointToStart(&ifTiles.getThenRegion().front());
  // Consumer 0 issues first.
  if (pingPong)
    passTurnFrom(1, 1);
  SmallVector<Value> newState, acc;
  SmallVector<Value> probabilities =
      softmaxOfTile(tileRef(constIndex(0)), initState, newState, acc);
  SmallVector<Value> loopInit = newState;
  loopInit.append(acc.begin(), acc.end());
  loopInit.append(packAFragments(probabilities, spec.problem.elementType));
  scf::ForOp loop =
      forLoop(constIndex(1), numTiles, constIndex(1), loopInit,
              [&](Value tile, ValueRange carried) {
                TileRef ref = tileRef(tile);
                TileRef previous = tileRef(sub(tile, constIndex(1)));
                SmallVector<Value> acc(carried.begin() + 4,
                                       carried.begin() + stateSize);
                SmallVector<Value> pFragments(carried.begin() + stateSize,
                                              carried.end());
                // (With turns, both tiles have landed before this consumer
                // takes its turn.)
                wait(stageBarrier(kKFull, ref.stage), ref.parity);
                if (pingPong)
                  wait(stageBarrier(kVFull, previous.stage), previous.parity);
                awaitTurn();
                SmallVector<Value> scores = issueScores(ref.stage);
                if (!pingPong)
                  wait(stageBarrier(kVFull, previous.stage), previous.parity);
                acc = issueValues(acc, pFragments, previous.stage);
                passTurn();
                waitProducts(1, scores);
                SmallVector<Value> finished =
                    finishScoresReleasingKeys(scores, ref);
                SmallVector<Value> newState, unused, alphas;
                SmallVector<Value> probabilities =
                    onlineSoftmaxStep(finished, carried.take_front(4),
                                      newState, unused, &alphas, softmaxScale);
                SmallVector<Value> nextFragments =
                    packAFragments(probabilities, spec.problem.elementType);
                waitProducts(0, acc);
                release(kVEmpty, previous.stage);
                for (int64_t i = 0; i < int64_t(acc.size()); ++i)
                  acc[i] = fmul(acc[i], alphas[(i % 4) / 2]);
                SmallVector<Value> next = newState;
                next.append(acc.begin(), acc.end());
                next.append(nextFragments.begin(), nextFragments.end());
                return next;
              });
  ValueRange carried = loop.getResults();
  SmallVector<Value> output(carried.begin() + 4, carried.begin() + stateSize);
  SmallVector<Value> pFragments(carried.begin() + stateSize,
                                carried.begin() + stateSize + fragmentCount);
  TileRef last = tileRef(sub(numTiles, constIndex(1)));
  wait(stageBarrier(kVFull, last.stage), last.parity);
  awaitTurn();
  output = issueValues(output, pFragments, last.stage);
  // Consumer 1's last turn is the last: nobody waits for another.
  if (pingPong)
    passTurnFrom(0, 2);
  waitProducts(0, output);
  release(kVEmpty, last.stage);
  SmallVector<Value> finalState(carried.begin(), carried.begin() + 4);
  finalState.append(output.begin(), output.end());
  scf::YieldOp::create(*b, finalState);
  b->setInsertionPointToStart(&ifTiles.getElseRegion().front());
  scf::YieldOp::create(*b, initState);
  return SmallVector<Value>(ifTiles.getResults().begin(),
                            ifTiles.getResults().end());
}

// out = O / sum, two columns a 32-bit store; rows that saw no key are zeros,
// rows past q_len are not stored.
void WarpSpecializedKernel::writeConsumerOutput(ValueRange results) {
  auto globalPtr = LLVM::LLVMPointerType::get(b->getContext(), 1);
  storeNormalisedRows(
      results, queryRows, [&](int64_t r, Value inverse, Value rowOffset) {
        for (int64_t block = 0; block < valueDim / 8; ++block) {
          Value column =
              add(constIndex(8 * block), mul(quadLane, constIndex(2)));
          Value pair =
              packPair(fmul(results[4 + 4 * block + 2 * r], inverse),
                       fmul(results[4 + 4 * block + 2 * r + 1], inverse),
                       spec.problem.elementType);
          Value address =
              LLVM::GEPOp::create(*b, globalPtr, spec.problem.elementType, out,
                                  ValueRange{add(rowOffset, toI64(column))});
          LLVM::StoreOp::create(*b, pair, address, /*alignment=*/4);
        }
      });
}

SmallVector<Value>
WarpSpecializedKernel::buildConsumerLoop(Value shared, Value sharedBase,
                                         Value numTiles, Value consumerIndex,
                                         Value item) {
  consumer = consumerIndex;
  zero = constF32(0.0f);
  Value negInf = constF32(-std::numeric_limits<float>::infinity());
  barriers = add32(sharedBase, barrierOffset());
  Value warpInGroup = arith::RemUIOp::create(*b, warp, constIndex(4));
  Value laneGroup = arith::DivUIOp::create(*b, lane, constIndex(4));
  quadLane = arith::RemUIOp::create(*b, lane, constIndex(4));
  Value groupRow = mul(consumer, constIndex(kConsumerRows));
  // This thread's rows g and g + 8 of its warp's 16.
  for (int64_t r = 0; r < 2; ++r)
    queryRows[r] =
        add(add(firstQuery, groupRow), add(mul(warpInGroup, constIndex(16)),
                                           add(laneGroup, constIndex(8 * r))));
  isLeader =
      arith::CmpIOp::create(*b, arith::CmpIPredicate::eq, lane, constIndex(0));
  // The warpgroup's Q rows: 64 rows into each 128-row slab.
  qTile = offsetPointer(shared, toI32(mul(groupRow, constIndex(128))));
  tilesStart = offsetPointer(shared, constI32(qBytes()));
  sharedStart = shared;
  bindTermRows(maskLayout, maskLayout.present ? maskStrides[2] : Value(),
               maskRowBytes, maskSwizzle);
  bindTermRows(biasLayout, biasLayout.present ? biasStrides[2] : Value(),
               biasRowBytes, biasSwizzle);

  // The warpgroup's first and last diagonals (bottom-right aligned).
  firstDiagonal = add(add(firstQuery, groupRow), kvOffset);
  lastDiagonal = add(firstDiagonal, constIndex(kConsumerRows - 1));

  // Without a softcap, additive terms, masked_score or a run-time
  // scale_factor (of either sign) the scores stay raw dot products until
  // the softmax step folds the scale into its exponents' FMAs (the site's
  // scale is positive: see ConvertKilnToGPU).
  foldScale = !spec.problem.softcap && !spec.problem.addsToScores() &&
              !spec.problem.maskedScore && !spec.problem.scaleFactor;
  softmaxScale = foldScale ? scaleLog2 : Value();

  SmallVector<Value> initState = {negInf, negInf, zero, zero};
  initState.append(paddedValueDim / 8 * 4, zero);

  wait(add32(barriers, 8 * kQFull),
       item ? arith::AndIOp::create(*b, toI32(item), constI32(1)).getResult()
            : constI32(0));
  SmallVector<Value> results = overlap ? runOverlappedLoop(numTiles, initState)
                                       : runSerialLoop(numTiles, initState);
  // The item's products are done with Q: the producer may bring the next.
  if (item)
    ifThen(isLeader, [&] { arrive(add32(barriers, 8 * kQEmpty)); });
  writeConsumerOutput(results);
  return results;
}

void WarpSpecializedKernel::buildBody(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder &builder = *b;
  Value shared = dynamicShared();
  Value sharedBase = sharedAddress(shared);
  Value barriers = add32(sharedBase, barrierOffset());

  // One thread initialises the barriers: a full barrier waits for the
  // producer's arrival and its copies' bytes, an empty one for the four
  // warps of each consumer warpgroup.
  Value isFirst = arith::CmpIOp::create(builder, arith::CmpIPredicate::eq,
                                        threadId, constIndex(0));
  ifThen(isFirst, [&] {
    for (int64_t index = 0; index < numBarriers(); ++index)
      initBarrier(add32(barriers, 8 * index),
                  index >= kKEmpty ? 4 * consumers : 1);
    inlinePtx({}, {}, "fence.mbarrier_init.release.cluster;", "");
  });
  gpu::BarrierOp::create(builder);

  Value numTiles = persistent ? Value() : tilesInRange();
  Value warpgroup =
      arith::DivUIOp::create(builder, threadId, constIndex(kWarpgroupThreads));
  Value isProducer = arith::CmpIOp::create(builder, arith::CmpIPredicate::eq,
                                           warpgroup, constIndex(0));
  auto roles = scf::IfOp::create(builder, isProducer, /*withElse=*/true);
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(&roles.getThenRegion().front());
  inlinePtx(
      {}, {},
      llvm::formatv("setmaxnreg.dec.sync.aligned.u32 {0};", producerRegisters())
          .str(),
      "");
  ifThen(isFirst, [&] {
    if (!persistent)
      return buildProducer(sharedBase, numTiles);
    forEachItem([&](Value itemTiles, Value item) {
      buildProducer(sharedBase, itemTiles, item);
    });
  });
  builder.setInsertionPointToStart(&roles.getElseRegion().front());
  inlinePtx(
      {}, {},
      llvm::formatv("setmaxnreg.inc.sync.aligned.u32 {0};", consumerRegisters())
          .str(),
      "");
  Value consumerIndex = sub(warpgroup, constIndex(1));
  if (!persistent) {
    buildConsumerLoop(shared, sharedBase, numTiles, consumerIndex);
    return;
  }
  forEachItem([&](Value itemTiles, Value item) {
    buildConsumerLoop(shared, sharedBase, itemTiles, consumerIndex, item);
  });
}

Value WarpSpecializedKernel::tilesInRange() {
  Value span = arith::MaxSIOp::create(*b, sub(kvEnd, kvBegin), constIndex(0));
  return arith::CeilDivUIOp::create(*b, span, constIndex(tileKeys));
}

// Items blockIdx.x, + gridDim.x, ... of ceil(q_len / rows) · heads ·
// batch; the ring's tiles continue from item to item.
void WarpSpecializedKernel::forEachItem(
    function_ref<void(Value numTiles, Value item)> body) {
  ImplicitLocOpBuilder &builder = *b;
  Value queryBlocks =
      arith::CeilDivUIOp::create(builder, qLen, constIndex(blockRows()));
  Value items = mul(mul(queryBlocks, numQueryHeads), batchSize);
  Value first = gpu::BlockIdOp::create(builder, gpu::Dimension::x);
  Value step = gpu::GridDimOp::create(builder, gpu::Dimension::x);
  forLoop(first, items, step, ValueRange{constIndex(0), constIndex(0)},
          [&](Value item, ValueRange carried) {
            bindWorkItem(item, queryBlocks);
            Value itemTiles = tilesInRange();
            tileBase = carried[0];
            body(itemTiles, carried[1]);
            tileBase = Value();
            return SmallVector<Value>{add(carried[0], itemTiles),
                                      add(carried[1], constIndex(1))};
          });
}

} // namespace

bool mlir::kiln::detail::warpSpecializedScheduleFits(
    const KernelSpec &spec, const WarpSpecializedSchedule &schedule,
    std::string &why) {
  if (schedule.consumers != 2 && schedule.consumers != 3) {
    why = "two or three consumer warpgroups, not " +
          std::to_string(schedule.consumers);
    return false;
  }
  if (schedule.tileKeys != 64 && schedule.tileKeys != 128) {
    why = "tiles of 64 or 128 keys, not " + std::to_string(schedule.tileKeys);
    return false;
  }
  // With three consumers a thread has 128 registers at launch (160 after
  // setmaxnreg), and ptxas allocates wgmma's accumulators within the launch
  // cap: head dim 256's O (128 a thread) and S do not fit.
  if (schedule.consumers == 3 && spec.problem.valueDim() > 192) {
    why = "three consumers have too few registers for value head dim " +
          std::to_string(spec.problem.valueDim()) +
          "'s accumulators (at most 192)";
    return false;
  }
  // The kernel's own layout: Q's rows, the stages of K and V, the mbarriers.
  KernelSpec scheduled = spec;
  scheduled.variant.warpConsumers = schedule.consumers;
  scheduled.variant.warpTileKeys = schedule.tileKeys;
  scheduled.variant.stagedTerms = schedule.stagedTerms;
  int64_t bytes = WarpSpecializedKernel(scheduled).dynamicSharedBytes();
  if (bytes > kHopperSharedLimit) {
    why = std::to_string(schedule.consumers) + " consumers and " +
          std::to_string(schedule.tileKeys) + "-key tiles at head dim " +
          std::to_string(spec.problem.headDim) + " need " +
          std::to_string(bytes) +
          " bytes of shared memory, more than sm_90's " +
          std::to_string(kHopperSharedLimit);
    return false;
  }
  return true;
}

bool mlir::kiln::detail::warpSpecializedKernelSupports(const KernelSpec &spec) {
  return (spec.problem.elementType.isF16() ||
          spec.problem.elementType.isBF16()) &&
         !spec.problem.paged && !spec.problem.ragged &&
         llvm::all_of(std::array{spec.problem.headDim,
                                 spec.problem.valueDim()},
                      [](int64_t dim) {
                        return dim % 8 == 0 && dim >= 16 && dim <= 256;
                      });
}

std::unique_ptr<AttentionKernelBuilder>
mlir::kiln::detail::createWarpSpecializedKernel(const KernelSpec &spec) {
  return std::make_unique<WarpSpecializedKernel>(spec);
}

WarpSpecializedSchedule
mlir::kiln::detail::warpSpecializedSchedule(const KernelSpec &spec) {
  WarpSpecializedSchedule schedule;
  schedule.tileKeys = spec.variant.warpTileKeys;
  schedule.consumers = spec.variant.warpConsumers;
  schedule.overlap = spec.variant.overlapSoftmax;
  schedule.pingPong =
      schedule.overlap && spec.variant.pingPong && schedule.consumers == 2;
  schedule.persistent = spec.variant.persistent;
  schedule.stagedTerms = spec.variant.stagedTerms;
  return schedule;
}

int64_t mlir::kiln::detail::warpSpecializedSharedLimit() {
  return kHopperSharedLimit;
}
