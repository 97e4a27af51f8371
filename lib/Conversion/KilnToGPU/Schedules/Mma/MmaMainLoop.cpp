//===- MmaMainLoop.cpp - The tensor-core kernel's loop over key tiles -----===//
//
// One iteration per 64-key tile: wait for its K, S = Q·Kᵀ (mma.sync from
// ldmatrix fragments, or wgmma from descriptors), reuse K's stage for the
// tile after next, the scores' scale and mask, the online-softmax step, wait
// for its V, O += P·V, reuse V's stage. Decode mode runs the same loop with
// each warp on a quarter of every tile's keys; masked_score's revisit runs
// it over the keys before and after the band.
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

void MmaKernel::syncTile(bool warpOwnsRows) {
  if (warpOwnsRows)
    NVVM::SyncWarpOp::create(
        *b, arith::ConstantIntOp::create(*b, b->getI32Type(), -1));
  else
    gpu::BarrierOp::create(*b);
}

SmallVector<Value> MmaKernel::emitLoop(int64_t keyBlocks, Value keyOffset,
                                       Value loopBegin, Value loopEnd,
                                       ValueRange loopInit) {
  SmallVector<Value> init(loopInit);
  // Decode over a paged cache laid out by lines: the rows a warp reads of
  // each K and V tile (its 16 keys) are the rows its own threads copy (a
  // line group of 8 threads takes 4 rows, a warp 16: see planLineChunks),
  // so a tile's arrival and a stage's reuse need the warp's threads only,
  // and each warp runs its own pipeline.
  static_assert(kLineRows * (kWarpSize / kLineChunks) == kDecodeWarpKeys,
                "a warp copies by lines the keys it reads in decode mode");
  bool warpOwnsRows = keyBlocks < kTileKeys / 8 && spec.problem.paged &&
                      byLines(copyDim(spec.problem.headDim)) &&
                      byLines(copyDim(spec.problem.valueDim()));
  if (carryPages)
    init.append(
        loadPages(add(loopBegin, constIndex(stages * kTileKeys)), kvLen));
  scf::ForOp loop = forLoop(
      loopBegin, loopEnd, constIndex(kTileKeys), init,
      [&](Value kvStart, ValueRange carried) {
        ImplicitLocOpBuilder &ib = *b;
        ValueRange state = carried.take_front(loopInit.size());
        // This tile's K has landed (its V and the next tile may still be in
        // flight).
        NVVM::CpAsyncWaitGroupOp::create(ib, 2 * stages - 1);
        asyncProxyFence();
        syncTile(warpOwnsRows);
        // The tile `stages` on goes to this tile's stage.
        Value nextStart = add(kvStart, constIndex(stages * kTileKeys));
        Value hasNext = arith::CmpIOp::create(ib, arith::CmpIPredicate::slt,
                                              nextStart, loopEnd);
        SmallVector<Value> nextPages, laterPages;
        if (carryPages) {
          nextPages.assign(carried.begin() + loopInit.size(), carried.end());
          laterPages = loadPages(add(nextStart, constIndex(kTileKeys)), kvLen);
        }
        // This tile's stage: where its copies landed and the products read
        // (the f16 stage, or FP8's e4m3 staging tile).
        Value kTile = kTiles[0], vTile = vTiles[0];
        if (stages == 2) {
          Value tileIndex = arith::DivUIOp::create(ib, sub(kvStart, loopBegin),
                                                   constIndex(kTileKeys));
          Value odd =
              arith::TruncIOp::create(ib, ib.getI1Type(), toI32(tileIndex));
          kTile = arith::SelectOp::create(ib, odd, kTiles[1], kTiles[0]);
          vTile = arith::SelectOp::create(ib, odd, vTiles[1], vTiles[0]);
        }

        SmallVector<SmallVector<Value>> scores =
            computeScores(kTile, keyOffset, keyBlocks);

        // Every warp is done with this K stage: the K tile after next loads
        // into it during the softmax and P·V of this one.
        syncTile(warpOwnsRows);
        issueIf(hasNext, kTile, k, kBase, kStrides[2], nextStart,
                nextPages);
        NVVM::CpAsyncCommitGroupOp::create(ib);

        SmallVector<Value> finished =
            finishTileScores(scores, kvStart, keyOffset);

        // Online softmax for rows g (r = 0) and g + 8 (r = 1). In decode
        // mode a warp's 16 keys a tile would rescale all its O accumulators
        // (D / 2 multiplies) for 4 scores a thread: there the maxima move
        // lazily. (Not with masked_score, whose revisit reads the maxima.)
        SmallVector<Value> newState, acc;
        SmallVector<Value> probabilities =
            keyBlocks < kTileKeys / 8 && !spec.problem.maskedScore
                ? lazyOnlineSoftmaxStep(finished, state, newState, acc,
                                        kLazyRescaleThreshold)
                : onlineSoftmaxStep(finished, state, newState, acc);

        // This tile's V has landed (the next tile and the K after it may
        // still be in flight).
        NVVM::CpAsyncWaitGroupOp::create(ib, 2 * stages - 1);
        asyncProxyFence();
        syncTile(warpOwnsRows);

        accumulateValues(acc, probabilities, vTile, keyOffset, keyBlocks);
        // Every warp is done with this V stage: the V tile after next loads
        // into it.
        syncTile(warpOwnsRows);
        // V's rows are K's: the same entries where both are laid out by
        // lines.
        issueIf(hasNext, vTile, v, vBase, vStrides[2], nextStart,
                byLines(copyDim(spec.problem.valueDim()))
                    ? ArrayRef<Value>(nextPages)
                    : ArrayRef<Value>());
        NVVM::CpAsyncCommitGroupOp::create(ib);

        newState.append(acc.begin(), acc.end());
        newState.append(laterPages);
        return newState;
      });
  return SmallVector<Value>(loop.getResults().take_front(loopInit.size()));
}

SmallVector<SmallVector<Value>>
MmaKernel::computeScores(Value kTile, Value keyOffset, int64_t keyBlocks) {
  // S = Q·Kᵀ: blocks of 8 keys, 4 accumulators each.
  SmallVector<SmallVector<Value>> scores(keyBlocks,
                                         SmallVector<Value>(4, zero));
  // Matrices: keys 16·pair + 0-7 / 8-15 (matrixHigh), head dims 16c + 0-7 /
  // 8-15 (matrixLow): B fragments of two key blocks.
  auto scoreChunk = [&](int64_t pair, int64_t c, ArrayRef<Value> qFragment) {
    SmallVector<Value> kFragments;
    if (fp8) {
      // K's e4m3 staging tile: key rows 16·pair + laneGroup and + 8.
      for (int64_t half = 0; half < 2; ++half) {
        Value keyRow = add(keyOffset, add(constIndex(16 * pair + 8 * half),
                                          laneGroup));
        auto [low, high] = loadFp8KeyFragment(kTile, keyRow, c);
        kFragments.append({low, high});
      }
    } else {
      kFragments = loadMatrices(
          blockAddress(kTile, add(keyOffset, constIndex(16 * pair)), 16 * c,
                       matrixHigh, matrixLow),
          /*transpose=*/false);
    }
    mmaSyncProduct.scores(*b, scores[2 * pair], qFragment,
                          {kFragments[0], kFragments[1]});
    mmaSyncProduct.scores(*b, scores[2 * pair + 1], qFragment,
                          {kFragments[2], kFragments[3]});
  };
  // With wgmma (every warp's rows, all the tile's keys), the warpgroup
  // computes the 64 × 64 scores from Q's and K's descriptors, 16 head dims
  // an instruction; K-major with 128-byte swizzle: 8-row groups 1024 bytes
  // apart, a 16-dim step 32 bytes along a swizzled row, a 64-dim step one
  // slab. The accumulators come back in the layout of eight m16n8 tiles.
  bool fullTile = keyBlocks == kTileKeys / 8;
  if (wgmma && fullTile) {
    SmallVector<Value> acc(keyBlocks * 4, zero);
    NVVM::WgmmaFenceAlignedOp::create(*b);
    for (int64_t c = 0; c < dimChunks; ++c) {
      int64_t offset = (16 * c / kSwizzleElements) * kSlabBytes +
                       (16 * c % kSwizzleElements) * elementBytes();
      wgmmaProduct.scores(*b, acc, matrixDescriptor(qTile, offset, 16, 1024),
                          matrixDescriptor(kTile, offset, 16, 1024));
    }
    NVVM::WgmmaGroupSyncAlignedOp::create(*b);
    NVVM::WgmmaWaitGroupSyncOp::create(*b, 0);
    for (int64_t block = 0; block < keyBlocks; ++block)
      for (int64_t e = 0; e < 4; ++e)
        scores[block][e] = acc[4 * block + e];
  } else if (residentQ) {
    // A resident Q is read one chunk of head dims at a time, each chunk
    // serving every key block (the same order of sums).
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
  return scores;
}

// Scale into log2 units and hide what the mask hides. Tiles that need no
// masking (inside kv_len, below the diagonal, inside the window) only scale.
SmallVector<Value>
MmaKernel::finishTileScores(ArrayRef<SmallVector<Value>> scores, Value kvStart,
                            Value keyOffset) {
  auto finishAll = [&](bool masked) {
    SmallVector<Value> result;
    for (auto [blockIndex, block] : llvm::enumerate(scores))
      for (int64_t e = 0; e < 4; ++e) {
        if (!masked) {
          result.push_back(fmul(block[e], scaleLog2));
          continue;
        }
        Value key =
            add(add(kvStart, keyOffset), add(constIndex(8 * blockIndex + e % 2),
                                             mul(quadLane, constIndex(2))));
        result.push_back(finishScore(block[e], queryRows[e / 2], key,
                                     rowMaskBases[e / 2], rowBiasBases[e / 2]));
      }
    return result;
  };
  if (alwaysFinish)
    return finishAll(true);
  Value needsMask = tileNeedsMask(kvStart, kTileKeys, firstDiagonal, [&] {
    return add(sub(endQuery, constIndex(1)), kvOffset);
  });
  return finishIf(needsMask, scores.size() * 4, finishAll);
}

// O += P·V, 16 keys at a time: the S accumulators of key blocks 2j and
// 2j + 1 are the A fragment of key chunk j. With wgmma, one instruction a
// chunk covers the whole value head dim: V is B, MN-major (head dims
// contiguous) with 128-byte swizzle: slabs of 64 dims 8 KiB apart, 8-key
// groups 1024 bytes apart, a 16-key step two groups.
void MmaKernel::accumulateValues(SmallVector<Value> &acc,
                                 ArrayRef<Value> probabilities, Value vTile,
                                 Value keyOffset, int64_t keyBlocks) {
  bool fullTile = keyBlocks == kTileKeys / 8;
  SmallVector<Value> pFragments =
      packAFragments(probabilities, computeType);
  // (Every fragment is packed before the fence, so that no wgmma waits for
  // registers written after it.)
  if (wgmma && fullTile)
    NVVM::WgmmaFenceAlignedOp::create(*b);
  for (int64_t j = 0; j < keyBlocks / 2; ++j) {
    ArrayRef<Value> pFragment = ArrayRef<Value>(pFragments).slice(4 * j, 4);
    if (wgmma && fullTile) {
      wgmmaProduct.values(
          *b, acc, pFragment,
          matrixDescriptor(vTile, 16 * j * 128, kSlabBytes, 1024));
      continue;
    }
    if (fp8) {
      // 32 head dims (4 output blocks) a load: each 16-column group's even
      // dims to block 2G, its odd ones to 2G + 1.
      Value keyRow = add(keyOffset, constIndex(16 * j));
      for (int64_t pair = 0; 4 * pair < outBlocks; ++pair) {
        bool second = 4 * pair + 2 < outBlocks;
        SmallVector<std::array<Value, 2>> fragments =
            loadFp8ValueFragments(vTile, keyRow, 2 * pair, second);
        for (auto [index, fragment] : llvm::enumerate(fragments)) {
          int64_t block = 4 * pair + index;
          mmaSyncProduct.values(*b, MutableArrayRef<Value>(&acc[4 * block], 4),
                                pFragment, {fragment[0], fragment[1]});
        }
      }
      continue;
    }
    for (int64_t pair = 0; pair < outBlocks / 2; ++pair) {
      // Matrices (transposed): keys 16j + 0-7 / 8-15 (matrixLow), head dims
      // 16·pair + 0-7 / 8-15 (matrixHigh): B fragments of two head-dim
      // blocks.
      SmallVector<Value> vFragments =
          loadMatrices(blockAddress(vTile, add(keyOffset, constIndex(16 * j)),
                                    16 * pair, matrixLow, matrixHigh),
                       /*transpose=*/true);
      mmaSyncProduct.values(*b, MutableArrayRef<Value>(&acc[4 * (2 * pair)], 4),
                            pFragment, {vFragments[0], vFragments[1]});
      mmaSyncProduct.values(*b,
                            MutableArrayRef<Value>(&acc[4 * (2 * pair + 1)], 4),
                            pFragment, {vFragments[2], vFragments[3]});
    }
  }
  if (wgmma && fullTile) {
    NVVM::WgmmaGroupSyncAlignedOp::create(*b);
    NVVM::WgmmaWaitGroupSyncOp::create(*b, 0);
  }
}

// With masked_score, a row that saw only hidden keys in the band averages V
// over every key, the skipped ones included: when any row of the block is
// such a row (a vote over the block), visit the key blocks before and after
// the band too, continuing the same online softmax. In decode mode every
// warp holds the same merged rows, so each takes whole tiles.
SmallVector<Value> MmaKernel::revisitSkippedTiles(ValueRange results) {
  SmallVector<Type> stateTypes(results.size(), b->getF32Type());
  Value hiddenScore = constF32(saturatedLog2(*spec.problem.maskedScore));
  Value sawNoKey =
      arith::OrIOp::create(*b,
                           arith::CmpFOp::create(*b, arith::CmpFPredicate::OLE,
                                                 results[0], hiddenScore),
                           arith::CmpFOp::create(*b, arith::CmpFPredicate::OLE,
                                                 results[1], hiddenScore));
  Type i32Type = b->getI32Type();
  Value vote =
      NVVM::BarrierOp::create(*b, TypeRange{i32Type}, Value(), Value(),
                              NVVM::BarrierReductionAttr::get(
                                  b->getContext(), NVVM::BarrierReduction::OR),
                              arith::ExtUIOp::create(*b, i32Type, sawNoKey))
          .getRes();
  Value anyRow =
      arith::CmpIOp::create(*b, arith::CmpIPredicate::ne, vote,
                            arith::ConstantIntOp::create(*b, i32Type, 0));
  auto revisit = scf::IfOp::create(*b, stateTypes, anyRow,
                                   /*withElse=*/true);
  OpBuilder::InsertionGuard guard(*b);
  b->setInsertionPointToStart(&revisit.getThenRegion().front());
  SmallVector<Value> state(results.begin(), results.end());
  // The main loop covered whole tiles from kvBegin (a tile multiple here)
  // on, possibly past kvEnd; the rest lies before and after.
  Value bandKeys =
      arith::MaxSIOp::create(*b, sub(kvEnd, kvBegin), constIndex(0));
  Value coveredEnd =
      add(kvBegin,
          mul(arith::CeilDivUIOp::create(*b, bandKeys, constIndex(kTileKeys)),
              constIndex(kTileKeys)));
  for (auto [rangeBegin, rangeEnd] :
       {std::pair(constIndex(0), kvBegin), std::pair(coveredEnd, kvLen)}) {
    // The pipeline's prologue for this range: tiles 0 and 1 of K and V, in
    // the commit-group order the loop waits on.
    NVVM::CpAsyncWaitGroupOp::create(*b, 0);
    gpu::BarrierOp::create(*b);
    Value first = arith::CmpIOp::create(*b, arith::CmpIPredicate::slt,
                                        rangeBegin, rangeEnd);
    Value secondTile = add(rangeBegin, constIndex(kTileKeys));
    Value second = arith::CmpIOp::create(*b, arith::CmpIPredicate::slt,
                                         secondTile, rangeEnd);
    issueIf(first, kTiles[0], k, kBase, kStrides[2], rangeBegin);
    NVVM::CpAsyncCommitGroupOp::create(*b);
    issueRestOfPrologue(first, rangeBegin, second, secondTile);
    state = emitLoop(kTileKeys / 8, constIndex(0), rangeBegin, rangeEnd, state);
  }
  NVVM::CpAsyncWaitGroupOp::create(*b, 0);
  scf::YieldOp::create(*b, state);
  b->setInsertionPointToStart(&revisit.getElseRegion().front());
  scf::YieldOp::create(*b, results);
  return SmallVector<Value>(revisit.getResults().begin(),
                            revisit.getResults().end());
}
