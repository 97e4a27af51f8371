//===- MmaKernel.cpp - The tensor-core attention kernel -------------------===//
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
// The sm_90a variant (KernelVariant::wgmma; head dims padded to multiples of
// 64; chosen by chooseSchedule) keeps the same block, grid, copies and softmax,
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
// This file composes the schedule from its parts: the shared tiles, the
// prologue's copies (Q, then the first K and V tiles, in the commit-group
// order the loop waits on), the main loop in decode or prefill mode
// (MmaMainLoop.cpp), masked_score's revisit and the epilogue
// (Schedules/Mma/MmaEpilogue.cpp).
//
//===----------------------------------------------------------------------===//

#include "Schedules/Mma/MmaKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>
#include <tuple>

using namespace mlir;
using namespace mlir::kiln::detail;
using namespace mlir::kiln::detail::mma;

MmaKernel::MmaKernel(const KernelSpec &spec)
    : AttentionKernelBuilder(spec),
      dimChunks(TileLayout::padded(spec.problem.headDim, spec.variant.wgmma) /
                16),
      wgmma(spec.variant.wgmma),
      mmaSyncProduct(productType(spec)), wgmmaProduct(productType(spec)) {
  assert(spec.launch.packQueryHeads &&
         "the tensor-core kernel packs query heads");
  assert(!(wgmma && spec.problem.fp8Cache) && "FP8 caches run on mma.sync");
  TileLayout layout = TileLayout::of(spec, wgmma);
  rowElements = layout.rowElements;
  residentQ = layout.residentQ;
  stages = layout.stages;
  fp8 = layout.fp8;
  computeType = productType(spec);
}

Type MmaKernel::productType(const KernelSpec &spec) {
  if (spec.problem.fp8Cache)
    return Float16Type::get(spec.problem.elementType.getContext());
  return spec.problem.elementType;
}

int64_t MmaKernel::dynamicSharedBytes() const {
  int64_t bytes = TileLayout::of(spec, false).bytes();
  // Decode mode merges the warps' states through shared memory after the
  // loop: two regions of two warps' (4 statistics and the O accumulators).
  int64_t stateWords = 4 + TileLayout::padded(spec.problem.valueDim(), false) / 2;
  bytes = std::max(bytes, 2 * 2 * kWarpSize * stateWords * 4);
  if (!spec.problem.fp8Cache &&
      wgmmaKernelSupports(spec.problem.headDim, spec.problem.valueDim()))
    bytes = std::max(bytes, TileLayout::of(spec, true).bytes());
  return bytes;
}

void MmaKernel::declareGlobals(OpBuilder &moduleBuilder, Location loc) {
  declareDynamicShared(moduleBuilder, loc);
}

Value MmaKernel::constI32(int64_t value) {
  return arith::ConstantIntOp::create(*b, i32(), value);
}

Value MmaKernel::stageTile(int64_t index) {
  return sharedByteOffset(shared, index * tileBytes());
}

void MmaKernel::allocateTiles() {
  shared = dynamicShared();
  if (fp8) {
    // Q's f16 tile, then the e4m3 staging tiles of K and V, which the
    // products read.
    TileLayout layout = TileLayout::of(spec, wgmma);
    qTile = stageTile(0);
    int64_t offset = layout.tilesCount() * tileBytes();
    for (int64_t stage = 0; stage < stages; ++stage)
      kTiles.push_back(
          sharedByteOffset(shared, offset + stage * layout.keyStageBytes));
    offset += stages * layout.keyStageBytes;
    for (int64_t stage = 0; stage < stages; ++stage)
      vTiles.push_back(
          sharedByteOffset(shared, offset + stage * layout.valueStageBytes));
    return;
  }
  for (int64_t stage = 0; stage < stages; ++stage) {
    kTiles.push_back(stageTile(stage));
    vTiles.push_back(stageTile(stages + stage));
  }
  // Q is staged through the last V stage into registers, or has its own.
  qTile = residentQ ? stageTile(2 * stages) : vTiles.back();
}

// 16-byte loads need 16-byte aligned rows: every base pointer and every
// batch, head and sequence stride a multiple of 8 elements. Views that are
// not (odd slices) take the element-wise path; the branch is uniform.
Value MmaKernel::checkAlignment() {
  Value result = arith::ConstantIntOp::create(*b, b->getI1Type(), 1);
  Type i64 = b->getI64Type();
  auto isZero = [&](Value value) {
    return arith::CmpIOp::create(*b, arith::CmpIPredicate::eq, value,
                                 arith::ConstantIntOp::create(*b, i64, 0));
  };
  for (Value pointer : {q, k, v}) {
    Value address = LLVM::PtrToIntOp::create(*b, i64, pointer);
    result = arith::AndIOp::create(
        *b, result,
        isZero(arith::AndIOp::create(
            *b, address, arith::ConstantIntOp::create(*b, i64, 15))));
  }
  for (ArrayRef<Value> strides :
       {ArrayRef<Value>(qStrides), ArrayRef<Value>(kStrides),
        ArrayRef<Value>(vStrides)})
    for (Value stride : strides)
      result = arith::AndIOp::create(
          *b, result,
          isZero(arith::AndIOp::create(
              *b, stride, arith::ConstantIntOp::create(*b, i64, 7))));
  return result;
}

void MmaKernel::bindLaneLayout() {
  laneGroup = arith::DivUIOp::create(*b, lane, constIndex(4));
  quadLane = arith::RemUIOp::create(*b, lane, constIndex(4));
  warpRow = mul(warp, constIndex(kRowsPerWarp));
  // Row and column of this lane's address in an ldmatrix.x4.
  Value matrix = arith::DivUIOp::create(*b, lane, constIndex(8));
  matrixRow = arith::RemUIOp::create(*b, lane, constIndex(8));
  matrixLow = arith::RemUIOp::create(*b, matrix, constIndex(2));
  matrixHigh = arith::DivUIOp::create(*b, matrix, constIndex(2));
}

void MmaKernel::issueIf(Value condition, Value tile, Value global, Value base,
                        Value rowStride, Value firstRow,
                        ArrayRef<Value> prefetched) {
  // V rows have the value head dim (MLA), K rows the query/key one.
  int64_t dim = global == v ? spec.problem.valueDim() : spec.problem.headDim;
  dim = copyDim(dim);
  ifThen(condition, [&] {
    issueTile(dim, tile, global, base, rowStride, firstRow, kvLen, aligned,
              prefetched);
  });
}

// Row r of the Q tile is (query, head) pair firstPackedRow + r; rows past
// the last query are zero-filled (their clamped address is not read).
void MmaKernel::copyQ(int64_t rows, Value lastQuery) {
  ChunkPlan qPlan = planChunks(
      spec.problem.headDim,
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
}

// The rest of a loop's prologue, after its first K tile: the first V tile
// (its rows are K's: the same entries where V too is copied by lines) and,
// with two stages, the second K and V tiles, one commit group each (the
// order the loop waits on).
void MmaKernel::issueRestOfPrologue(Value hasFirst, Value first, Value hasNext,
                                    Value next) {
  bool sameRows =
      first == kvBegin && byLines(copyDim(spec.problem.valueDim()));
  issueIf(hasFirst, vTiles[0], v, vBase, vStrides[2], first,
          sameRows ? ArrayRef<Value>(firstPages) : ArrayRef<Value>());
  NVVM::CpAsyncCommitGroupOp::create(*b);
  if (stages == 1)
    return;
  issueIf(hasNext, kTiles[1], k, kBase, kStrides[2], next);
  NVVM::CpAsyncCommitGroupOp::create(*b);
  issueIf(hasNext, vTiles[1], v, vBase, vStrides[2], next);
  NVVM::CpAsyncCommitGroupOp::create(*b);
}

// Matrices: rows 0-7 / 8-15 of the warp's 16, columns 16c + 0-7 / 8-15: the
// a0-a7 order of an A fragment.
SmallVector<Value> MmaKernel::loadQFragment(int64_t c) {
  return loadMatrices(
      blockAddress(qTile, rowBase, 16 * c, matrixLow, matrixHigh),
      /*transpose=*/false);
}

// Q is copied first (cp.async, a commit group of its own), then the first K
// tile, so that both are in flight together. With Q in a tile of its own,
// the first V tile and, with two stages, the second K and V tiles start too
// before the wait for Q: every copy of the prologue is in flight at once and
// the first tile's V arrives with its K. Q staged through the last V stage
// (into A fragments in registers) is waited for first and the rest of the
// prologue starts after it. cp.async groups are committed in the order Q,
// K0, V0, K1, V1, K2, ... (empty groups where there is no tile), so "all but
// the newest 2 · stages - 1 groups done" is the wait for the tile needed
// next.
void MmaKernel::startPipeline() {
  Value hasTiles =
      arith::CmpIOp::create(*b, arith::CmpIPredicate::slt, kvBegin, kvEnd);
  Value secondStart = add(kvBegin, constIndex(kTileKeys));
  Value hasSecond =
      arith::CmpIOp::create(*b, arith::CmpIPredicate::slt, secondStart, kvEnd);
  // Decode shapes: when the block's rows that exist (q_len · group of them)
  // fit in one warp's 16, the four warps share those rows and split each
  // tile's keys instead, 16 keys a warp, and their results are merged at the
  // end. Otherwise each warp owns 16 rows and all 64 keys. The branch is
  // uniform.
  isDecode = arith::CmpIOp::create(*b, arith::CmpIPredicate::ule,
                                   mul(qLen, group), constIndex(kRowsPerWarp));
  // Decode mode reads the first 16 rows of Q only, and copies no more,
  // unless masked_score's revisit of the keys past the band (whole tiles,
  // every row) may follow.
  Value lastQuery =
      arith::MaxSIOp::create(*b, sub(qLen, constIndex(1)), constIndex(0));
  if (revisits()) {
    copyQ(kTileKeys, lastQuery);
  } else {
    auto qRows = scf::IfOp::create(*b, isDecode, /*withElse=*/true);
    OpBuilder::InsertionGuard guard(*b);
    b->setInsertionPointToStart(&qRows.getThenRegion().front());
    copyQ(kRowsPerWarp, lastQuery);
    b->setInsertionPointToStart(&qRows.getElseRegion().front());
    copyQ(kTileKeys, lastQuery);
  }
  NVVM::CpAsyncCommitGroupOp::create(*b);
  // The first tile's table entries: those read ahead where they were read
  // for this block's range (a uniform branch), else read now.
  if (!aheadPages.empty()) {
    Value guessed = arith::CmpIOp::create(*b, arith::CmpIPredicate::eq, kvBegin,
                                          aheadBegin);
    SmallVector<Type> types(aheadPages.size(), b->getI32Type());
    firstPages = ifElse(
        guessed, types, [&] { return aheadPages; },
        [&] { return loadPages(kvBegin, kvLen); });
  }
  issueIf(hasTiles, kTiles[0], k, kBase, kStrides[2], kvBegin, firstPages);
  NVVM::CpAsyncCommitGroupOp::create(*b);
  // (V copies wider than the query/key head dim write columns the padding
  // stores zero; those wait for the barrier as well.)
  bool restBeforeQ =
      residentQ && (spec.problem.headDim == padded(spec.problem.headDim) ||
                    spec.problem.valueDim() <= spec.problem.headDim);
  if (restBeforeQ)
    issueRestOfPrologue(hasTiles, kvBegin, hasSecond, secondStart);
  // Q's group is done when at most the groups committed after it are not.
  NVVM::CpAsyncWaitGroupOp::create(*b, restBeforeQ ? 2 * stages : 1);
  // (Each thread converts the chunks it copied: in decode mode the first
  // 16 rows' plan, a prefix of the 64 rows' one.)
  if (fp8 && spec.problem.elementType.isBF16())
    convertQToF16(kTileKeys);
  asyncProxyFence();
  gpu::BarrierOp::create(*b);
  if (fp8) {
    permuteQColumns();
    gpu::BarrierOp::create(*b);
  }

  rowBase = arith::SelectOp::create(*b, isDecode, constIndex(0), warpRow);
  if (!residentQ) {
    for (int64_t c = 0; c < dimChunks; ++c)
      qFragments.push_back(loadQFragment(c));
    // Every warp has its Q fragments before V overwrites the buffer.
    gpu::BarrierOp::create(*b);
  }
  if (!restBeforeQ)
    issueRestOfPrologue(hasTiles, kvBegin, hasSecond, secondStart);
}

void MmaKernel::bindRows() {
  for (int64_t r = 0; r < 2; ++r) {
    std::tie(queryRows[r], rowHeads[r]) =
        packedRow(add(rowBase, add(laneGroup, constIndex(8 * r))));
    if (spec.problem.maskType)
      rowMaskBases[r] = tensorBase(maskStrides, rowHeads[r]);
    if (spec.problem.biasType)
      rowBiasBases[r] = tensorBase(biasStrides, rowHeads[r]);
  }
}

// Decode mode merges the warps' states with each warp taking a quarter of
// the O columns, which it then writes (a merge of every column by every
// warp took a third of a one-tile decode block's instructions); where
// masked_score may revisit keys past the band, every warp goes on with the
// whole merged state, and warp 0 writes it.
SmallVector<Value> MmaKernel::runModes(ArrayRef<Value> initState,
                                       int64_t shareBlocks) {
  SmallVector<Type> stateTypes(initState.size(), b->getF32Type());
  auto modeIf = scf::IfOp::create(*b, stateTypes, isDecode,
                                  /*withElse=*/true);
  OpBuilder::InsertionGuard guard(*b);
  b->setInsertionPointToStart(&modeIf.getThenRegion().front());
  SmallVector<Value> loopState =
      emitLoop(kDecodeWarpKeys / 8, mul(warp, constIndex(kDecodeWarpKeys)),
               kvBegin, kvEnd, initState);
  if (fp8)
    restoreValueColumns(loopState);
  // Shared memory is free once the loop is done: two regions of two warps'
  // states from its start (2048 + 256 · Dv bytes in all, less than the three
  // or more tiles of 128 · D bytes or more there are).
  int64_t regionBytes = 2 * kWarpSize * int64_t(initState.size()) * 4;
  Value secondRegion = sharedByteOffset(shared, regionBytes);
  scf::YieldOp::create(
      *b, mergeWarps(loopState, shared, secondRegion, shareBlocks));
  b->setInsertionPointToStart(&modeIf.getElseRegion().front());
  loopState = emitLoop(kTileKeys / 8, constIndex(0), kvBegin, kvEnd, initState);
  if (fp8)
    restoreValueColumns(loopState);
  NVVM::CpAsyncWaitGroupOp::create(*b, 0);
  scf::YieldOp::create(*b, loopState);
  return SmallVector<Value>(modeIf.getResults());
}

void MmaKernel::buildBody(gpu::GPUFuncOp func) {
  if (fp8)
    prepareFp8();
  allocateTiles();
  zeroPadColumns();
  aligned = checkAlignment();
  bindLaneLayout();
  startPipeline();

  // State: max and sum of rows g and g + 8, then the O accumulators, four
  // per 8-column block of the head dim.
  outBlocks = padded(spec.problem.valueDim()) / 8;
  negInf = constF32(-std::numeric_limits<float>::infinity());
  zero = constF32(0.0f);
  SmallVector<Value> initState = {negInf, negInf, zero, zero};
  initState.append(outBlocks * 4, zero);

  bindRows();
  firstDiagonal = add(firstQuery, kvOffset);
  alwaysFinish =
      spec.problem.maskType || spec.problem.biasType || spec.problem.softcap;
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
  carryPages = spec.problem.paged && wgmma && spec.problem.headDim >= 64 &&
               spec.problem.headDim <= 128 && byLines(spec.problem.headDim);

  int64_t shareBlocks =
      revisits() ? 0 : llvm::divideCeil(outBlocks, kWarpsPerBlock);
  SmallVector<Value> results = runModes(initState, shareBlocks);
  if (revisits())
    results = revisitSkippedTiles(results);
  if (fp8)
    for (Value &acc : MutableArrayRef<Value>(results).drop_front(4))
      acc = fmul(acc, vScale);
  writeOutput(results, shareBlocks);
}

std::unique_ptr<AttentionKernelBuilder>
mlir::kiln::detail::createMmaKernel(const KernelSpec &spec) {
  return std::make_unique<MmaKernel>(spec);
}
