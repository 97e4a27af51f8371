//===- Tf32Kernel.cpp - The TF32 tensor-core kernel for f32 sites ---------===//
//
// The kernel of f32 sites on tensor cores: S = Q·Kᵀ and O += P·V on
// mma.sync.m16n8k8 with TF32 operands (10 explicit mantissa bits, rounded to
// nearest from f32) and f32 accumulators; the scale, masks, bias, softcap and
// the online softmax stay in f32. By default (KernelVariant::tf32Split) every
// operand is split into a high and a low TF32 part and each product is three
// mma, with each 8-key block's P·V added to O in f32: f32's accuracy (the
// products are Tf32Product's, Products/Tf32.cpp).
// `allow-tf32` keeps one mma a product. A block owns 64 query rows of one
// head, 16 a warp; 32-key tiles of K and V are copied as f32 with 4-byte
// cp.async into two stages of dynamic shared memory, rows padded by four
// elements so that the fragment reads below hit 32 different banks for every
// head dim that is a multiple of 8, and rounded as fragments are read. Up to
// query/key head dim 128 Q's A fragments stay in registers for the whole
// loop; past it (Gemma's 256, MLA's 192) they would not fit beside the
// accumulators, and Q is staged once in a shared tile of its own and read
// (and split) a fragment at a time, with 16-key tiles. V's head dim may
// differ from Q's and K's (MLA).
//
// Fragments of m16n8k8.tf32 (PTX ISA), with lane = 4·g + t: A holds rows g
// and g + 8 at columns t and t + 4; B holds rows t and t + 4 of column g;
// the accumulators hold rows g and g + 8 at columns 2t and 2t + 1. The
// scores come back in that accumulator layout, and P·V uses them as A
// fragments without moving them: P's column t is read as key 2t and column
// t + 4 as key 2t + 1, so the B fragments of V are read at keys 2t and
// 2t + 1 of each 8-key block instead of t and t + 4.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"
#include "Products/Products.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <array>
#include <limits>

using namespace mlir;
using namespace mlir::kiln::detail;

namespace {

/// Query rows per warp: the M of one mma.
constexpr int64_t kRowsPerWarp = 16;
/// Keys per tile (two stages of K and V at head dim 128: 66 KiB), or
/// kSmallTileKeys beside a shared Q tile.
constexpr int64_t kTileKeys = 32;
constexpr int64_t kSmallTileKeys = 16;
/// Elements of padding per shared tile row (see the file comment).
constexpr int64_t kRowPadding = 4;
/// Largest query/key head dim whose Q fragments stay in registers (D / 2 a
/// thread, D split into high and low parts, beside the Dv / 2 O
/// accumulators).
constexpr int64_t kLargestResidentHeadDim = 128;
/// Largest head dims.
constexpr int64_t kLargestHeadDim = 256;

/// Shared bytes of the kernel's tiles: two stages of `tileKeys`-key K and V
/// tiles, and Q's own tile past kLargestResidentHeadDim.
int64_t tf32SharedBytes(int64_t dim, int64_t valueDim, int64_t tileKeys) {
  int64_t bytes = 2 * tileKeys * (dim + valueDim + 2 * kRowPadding) * 4;
  if (dim > kLargestResidentHeadDim)
    bytes += kRowsPerWarp * kWarpsPerBlock * (dim + kRowPadding) * 4;
  return bytes;
}

/// Keys a tile: kTileKeys while Q is resident, else kSmallTileKeys (0 when
/// that does not fit). (With Q in shared memory, 32-key tiles spilled 276
/// to 448 bytes at head dims 160 and 192; 16-key ones keep the scores and
/// the copies' addresses in registers.)
int64_t tf32TileKeys(int64_t dim, int64_t valueDim) {
  int64_t keys = dim <= kLargestResidentHeadDim ? kTileKeys : kSmallTileKeys;
  return tf32SharedBytes(dim, valueDim, keys) <= kDynamicSharedLimit ? keys
                                                                     : 0;
}

class Tf32Kernel : public AttentionKernelBuilder {
public:
  explicit Tf32Kernel(const KernelSpec &spec)
      : AttentionKernelBuilder(spec), dim(spec.problem.headDim),
        valueDim(spec.problem.valueDim()),
        tileKeys(tf32TileKeys(dim, valueDim)),
        residentQ(dim <= kLargestResidentHeadDim),
        products(spec.variant.tf32Split) {}

  int64_t rowsPerBlock() const override {
    return kRowsPerWarp * kWarpsPerBlock;
  }
  int64_t kvBlockSize() const override { return tileKeys; }
  int64_t sharedBytes() const override { return 0; }
  /// Two stages of a K and a V tile (and Q's tile where it is not resident).
  int64_t dynamicSharedBytes() const override {
    return tf32SharedBytes(dim, valueDim, tileKeys);
  }

protected:
  void declareGlobals(OpBuilder &moduleBuilder, Location loc) override {
    declareDynamicShared(moduleBuilder, loc);
  }
  void buildBody(gpu::GPUFuncOp func) override;

private:
  using Operand = Tf32Product::Operand;
  /// `value` as the products take it (Tf32Product::operand).
  Operand operand(Value value) { return products.operand(*b, value); }
  /// Elements of a shared row of `columns` columns, and bytes of a tile.
  static int64_t rowElements(int64_t columns) { return columns + kRowPadding; }
  int64_t tileBytes(int64_t rows, int64_t columns) const {
    return rows * rowElements(columns) * 4;
  }
  /// Element (row, column) of a shared f32 tile of `columns` columns.
  Value tileAddress(Value tile, Value row, Value column, int64_t columns) {
    auto sharedPtr = LLVM::LLVMPointerType::get(b->getContext(), 3);
    Value offset =
        toI32(add(mul(row, constIndex(rowElements(columns))), column));
    return LLVM::GEPOp::create(*b, sharedPtr, b->getF32Type(), tile,
                               ValueRange{offset});
  }
  /// An operand read from a shared tile (f32), rounded or split here.
  Operand tileOperand(Value tile, Value row, Value column, int64_t columns) {
    return operand(LLVM::LoadOp::create(
        *b, b->getF32Type(), tileAddress(tile, row, column, columns)));
  }
  /// Copies keys [kvStart, kvStart + tileKeys) of K and V into the shared
  /// tiles with 4-byte cp.async (any alignment an f32 view has); keys at or
  /// past kv_len read the last key's address and are filled with zeros.
  void issueTiles(Value kTile, Value vTile, Value kvStart);
  /// Element `column` of row `row` of global `base` (f32), 0 past `rows`
  /// rows (which are clamped to the last one so that nothing reads past the
  /// tensor).
  Value loadRow(Value pointer, Value base, Value rowStride, Value row,
                Value rows, Value column);

  int64_t keyBlocks() const { return tileKeys / 8; }
  int64_t dimBlocks() const { return dim / 8; }
  int64_t valueBlocks() const { return valueDim / 8; }
  /// Q's A fragments, one per 8 head dims, into qFragments; or, where Q is
  /// not resident, Q's rows into its shared tile.
  void loadQFragments();
  /// Q's A fragment of head dims [8s, 8s + 8): rows g, g + 8 at columns
  /// t, t + 4 (registers a0..a3: (g, t), (g + 8, t), (g, t + 4),
  /// (g + 8, t + 4)), from `read(r, column)` (r: row g or g + 8).
  SmallVector<Operand>
  qFragment(int64_t s, llvm::function_ref<Operand(int64_t r, Value)> read);
  /// S = Q·Kᵀ of the tile in `kTile`.
  SmallVector<Value> computeScores(Value kTile);
  /// acc += P·V of the tile in `vTile`.
  void accumulateValues(SmallVector<Value> &acc, ArrayRef<Value> probabilities,
                        Value vTile);
  /// One iteration of the loop over key tiles: its copies, scores, softmax
  /// step and P·V; returns the new state.
  SmallVector<Value> tileStep(Value kvStart, ValueRange state);

  /// Q's and K's head dim, V's, and keys a tile.
  int64_t dim, valueDim, tileKeys;
  /// Q's fragments stay in registers (else Q has a shared tile).
  bool residentQ;
  /// S = Q·Kᵀ and O += P·V, on TF32 (split or not).
  Tf32Product products;

  // Bound by buildBody for its parts.
  /// The two stages' K and V tiles: K0, V0, K1, V1; Q's tile where Q is
  /// not resident.
  Value tiles[4], qTile;
  /// lane = 4·laneGroup + laneInGroup, and the f32 zero of the state.
  Value laneGroup, laneInGroup, zero;
  /// This thread's rows g and g + 8 of the warp's 16.
  Value queryRows[2];
  SmallVector<SmallVector<Operand>> qFragments;
};

void Tf32Kernel::issueTiles(Value kTile, Value vTile, Value kvStart) {
  auto globalPtr = LLVM::LLVMPointerType::get(b->getContext(), 1);
  Value lastKey =
      arith::MaxSIOp::create(*b, sub(kvLen, constIndex(1)), constIndex(0));
  // (tileKeys · D is a multiple of the block's threads: D is a multiple
  // of 8.) K and V together where their head dims agree, each on its own
  // where they differ.
  using Tensor = std::tuple<Value, Value, Value, Value>;
  auto copy = [&](ArrayRef<Tensor> tensors, int64_t columns) {
    int64_t elements = tileKeys * columns;
    for (int64_t first = 0; first < elements; first += kThreadsPerBlock) {
      Value linear = add(threadId, constIndex(first));
      Value key = arith::DivUIOp::create(*b, linear, constIndex(columns));
      Value column = arith::RemUIOp::create(*b, linear, constIndex(columns));
      Value globalKey = add(kvStart, key);
      Value inBounds = arith::CmpIOp::create(*b, arith::CmpIPredicate::slt,
                                             globalKey, kvLen);
      Value clamped = arith::MinSIOp::create(*b, globalKey, lastKey);
      Value bytes = arith::SelectOp::create(
          *b, inBounds, arith::ConstantIntOp::create(*b, b->getI32Type(), 4),
          arith::ConstantIntOp::create(*b, b->getI32Type(), 0));
      for (auto [tile, pointer, base, stride] : tensors) {
        Value offset =
            add(base, add(mul(toI64(clamped), stride), toI64(column)));
        Value source = LLVM::GEPOp::create(*b, globalPtr, b->getF32Type(),
                                           pointer, ValueRange{offset});
        NVVM::CpAsyncOp::create(*b, tileAddress(tile, key, column, columns),
                                source,
                                /*size=*/4, NVVM::LoadCacheModifierKind::CA,
                                bytes);
      }
    }
  };
  Tensor kTensor(kTile, k, kBase, kStrides[2]);
  Tensor vTensor(vTile, v, vBase, vStrides[2]);
  if (dim == valueDim) {
    copy({kTensor, vTensor}, dim);
  } else {
    copy({kTensor}, dim);
    copy({vTensor}, valueDim);
  }
}

Value Tf32Kernel::loadRow(Value pointer, Value base, Value rowStride, Value row,
                          Value rows, Value column) {
  Value inBounds =
      arith::CmpIOp::create(*b, arith::CmpIPredicate::slt, row, rows);
  Value clamped = arith::MinSIOp::create(*b, row, sub(rows, constIndex(1)));
  clamped = arith::MaxSIOp::create(*b, clamped, constIndex(0));
  Value offset = add(base, add(mul(toI64(clamped), rowStride), toI64(column)));
  Value value = loadGlobalAsF32(pointer, spec.problem.elementType, offset);
  return arith::SelectOp::create(*b, inBounds, value, constF32(0.0f));
}

SmallVector<Tf32Kernel::Operand>
Tf32Kernel::qFragment(int64_t s,
                      llvm::function_ref<Operand(int64_t r, Value)> read) {
  SmallVector<Operand> fragment;
  for (int64_t half = 0; half < 2; ++half)
    for (int64_t r = 0; r < 2; ++r)
      fragment.push_back(
          read(r, add(laneInGroup, constIndex(8 * s + 4 * half))));
  return fragment;
}

void Tf32Kernel::loadQFragments() {
  if (residentQ) {
    for (int64_t s = 0; s < dimBlocks(); ++s)
      qFragments.push_back(qFragment(s, [&](int64_t r, Value column) {
        return operand(
            loadRow(q, qBase, qStrides[2], queryRows[r], qLen, column));
      }));
    return;
  }
  // The block's rows of Q into its shared tile (zeros past q_len), read a
  // fragment at a time by computeScores.
  int64_t rows = kRowsPerWarp * kWarpsPerBlock;
  for (int64_t first = 0; first < rows * dim; first += kThreadsPerBlock) {
    Value linear = add(threadId, constIndex(first));
    Value row = arith::DivUIOp::create(*b, linear, constIndex(dim));
    Value column = arith::RemUIOp::create(*b, linear, constIndex(dim));
    Value value =
        loadRow(q, qBase, qStrides[2], add(firstQuery, row), qLen, column);
    LLVM::StoreOp::create(*b, value, tileAddress(qTile, row, column, dim));
  }
  gpu::BarrierOp::create(*b);
}

// S = Q·Kᵀ, 8 keys a block: B holds K[8n + g][8s + t (+4)]. Four scores per
// 8-key block, in the accumulator layout. A Q that is not resident is read
// from its tile a fragment at a time, each fragment serving every key block.
SmallVector<Value> Tf32Kernel::computeScores(Value kTile) {
  SmallVector<Value> scores(4 * keyBlocks(), zero);
  auto bFragment = [&](int64_t n, int64_t s) {
    Value key = add(laneGroup, constIndex(8 * n));
    SmallVector<Operand> fragment;
    for (int64_t half = 0; half < 2; ++half)
      fragment.push_back(tileOperand(
          kTile, key, add(laneInGroup, constIndex(8 * s + 4 * half)), dim));
    return fragment;
  };
  if (residentQ) {
    for (int64_t n = 0; n < keyBlocks(); ++n)
      for (int64_t s = 0; s < dimBlocks(); ++s)
        products.scores(*b, MutableArrayRef<Value>(&scores[4 * n], 4),
                        qFragments[s], bFragment(n, s));
    return scores;
  }
  Value warpRow = mul(warp, constIndex(kRowsPerWarp));
  for (int64_t s = 0; s < dimBlocks(); ++s) {
    SmallVector<Operand> aFragment =
        qFragment(s, [&](int64_t r, Value column) {
          return tileOperand(
              qTile, add(warpRow, add(laneGroup, constIndex(8 * r))), column,
              dim);
        });
    for (int64_t n = 0; n < keyBlocks(); ++n)
      products.scores(*b, MutableArrayRef<Value>(&scores[4 * n], 4),
                      aFragment, bFragment(n, s));
  }
  return scores;
}

// O += P·V: key block n's probabilities are the A fragment, (g, 2t),
// (g + 8, 2t), (g, 2t + 1), (g + 8, 2t + 1); B holds V[8n + 2t (+1)][8j + g].
void Tf32Kernel::accumulateValues(SmallVector<Value> &acc,
                                  ArrayRef<Value> probabilities, Value vTile) {
  for (int64_t n = 0; n < keyBlocks(); ++n) {
    ArrayRef<Value> p(&probabilities[4 * n], 4);
    SmallVector<Operand> pFragment = {operand(p[0]), operand(p[2]),
                                      operand(p[1]), operand(p[3])};
    Value key = add(mul(laneInGroup, constIndex(2)), constIndex(8 * n));
    for (int64_t j = 0; j < valueBlocks(); ++j) {
      Value column = add(laneGroup, constIndex(8 * j));
      SmallVector<Operand> bFragment = {
          tileOperand(vTile, key, column, valueDim),
          tileOperand(vTile, add(key, constIndex(1)), column, valueDim)};
      products.values(*b, MutableArrayRef<Value>(&acc[4 * j], 4), pFragment,
                      bFragment);
    }
  }
}

SmallVector<Value> Tf32Kernel::tileStep(Value kvStart, ValueRange state) {
  // Tile i is in stage i % 2: the next tile's copies go to the other stage
  // (free since the barrier that ended the last iteration) and stay in
  // flight while this one computes.
  Value odd = arith::TruncIOp::create(
      *b, b->getI1Type(),
      toI32(arith::DivUIOp::create(*b, sub(kvStart, kvBegin),
                                   constIndex(tileKeys))));
  Value kTile = arith::SelectOp::create(*b, odd, tiles[2], tiles[0]);
  Value vTile = arith::SelectOp::create(*b, odd, tiles[3], tiles[1]);
  Value nextStart = add(kvStart, constIndex(tileKeys));
  ifThen(arith::CmpIOp::create(*b, arith::CmpIPredicate::slt, nextStart, kvEnd),
         [&] {
           issueTiles(arith::SelectOp::create(*b, odd, tiles[0], tiles[2]),
                      arith::SelectOp::create(*b, odd, tiles[1], tiles[3]),
                      nextStart);
         });
  NVVM::CpAsyncCommitGroupOp::create(*b);
  // This tile's copies have landed (the next tile's may not have).
  NVVM::CpAsyncWaitGroupOp::create(*b, 1);
  gpu::BarrierOp::create(*b);

  SmallVector<Value> scores = computeScores(kTile);
  // Scale, mask, bias, softcap: the scores in log2 units. Element e of key
  // block n is row g + 8·(e / 2), key 8n + 2t + e % 2. With one TF32
  // product, tiles inside kv_len and inside every row's band only scale, as
  // on the other schedules.
  auto finishAll = [&](bool masked) {
    SmallVector<Value> result;
    for (int64_t n = 0; n < keyBlocks(); ++n)
      for (int64_t e = 0; e < 4; ++e) {
        Value score = scores[4 * n + e];
        if (!masked) {
          result.push_back(fmul(score, scaleLog2));
          continue;
        }
        Value key = add(kvStart, add(mul(laneInGroup, constIndex(2)),
                                     constIndex(8 * n + e % 2)));
        result.push_back(
            finishScore(score, queryRows[e / 2], key, maskBase, biasBase));
      }
    return result;
  };
  // 3xTF32 finishes every tile: at 255 registers a second path through the
  // tile spills (d128 causal: 8 -> 96 bytes) and measured 7% slower, the
  // d64 sites within 2% either way (docs/perf-log/2026-12-03-ragged.md).
  bool alwaysFinish = spec.variant.tf32Split || spec.problem.maskType ||
                      spec.problem.biasType || spec.problem.softcap;
  if (alwaysFinish) {
    scores = finishAll(true);
  } else {
    Value needsMask =
        tileNeedsMask(kvStart, tileKeys, add(firstQuery, kvOffset), [&] {
          return add(sub(endQuery, constIndex(1)), kvOffset);
        });
    scores = finishIf(needsMask, scores.size(), finishAll);
  }

  // The online softmax of rows g and g + 8 over the quad that holds them.
  SmallVector<Value> newState, acc;
  SmallVector<Value> probabilities =
      onlineSoftmaxStep(scores, state, newState, acc);
  accumulateValues(acc, probabilities, vTile);
  // Every warp is done with this stage before the next iteration's copies
  // refill it.
  gpu::BarrierOp::create(*b);
  newState.append(acc.begin(), acc.end());
  return newState;
}

void Tf32Kernel::buildBody(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder &builder = *b;
  // Dynamic shared memory: stage 0's K and V tiles, then stage 1's, then
  // Q's tile where Q is not resident.
  Value shared = dynamicShared();
  int64_t offset = 0;
  for (int64_t t = 0; t < 4; ++t) {
    tiles[t] = sharedByteOffset(shared, offset);
    offset += tileBytes(tileKeys, t % 2 ? valueDim : dim);
  }
  if (!residentQ)
    qTile = sharedByteOffset(shared, offset);
  laneGroup = arith::DivUIOp::create(builder, lane, constIndex(4));
  laneInGroup = arith::RemUIOp::create(builder, lane, constIndex(4));

  // This thread's rows g and g + 8 of the warp's 16.
  for (int64_t r = 0; r < 2; ++r)
    queryRows[r] = add(firstQuery, add(mul(warp, constIndex(kRowsPerWarp)),
                                       add(laneGroup, constIndex(8 * r))));
  // Q's A fragments, one per 8 head dims: rows g, g + 8 at columns t, t + 4
  // (or its shared tile).
  loadQFragments();

  // State: max and sum of rows g and g + 8 (the sum is this thread's share,
  // reduced over the quad at the end), then four accumulators per 8-column
  // block of the head dim.
  Value negInf = constF32(-std::numeric_limits<float>::infinity());
  zero = constF32(0.0f);
  SmallVector<Value> initState = {negInf, negInf, zero, zero};
  initState.append(valueBlocks() * 4, zero);

  // The first tile's copies, before the loop.
  ifThen(
      arith::CmpIOp::create(builder, arith::CmpIPredicate::slt, kvBegin, kvEnd),
      [&] { issueTiles(tiles[0], tiles[1], kvBegin); });
  NVVM::CpAsyncCommitGroupOp::create(builder);
  scf::ForOp loop = forLoop(kvBegin, kvEnd, constIndex(tileKeys), initState,
                            [&](Value kvStart, ValueRange state) {
                              return tileStep(kvStart, state);
                            });

  NVVM::CpAsyncWaitGroupOp::create(builder, 0);
  storeNormalisedRows(
      loop.getResults(), queryRows,
      [&](int64_t r, Value inverse, Value rowOffset) {
        for (int64_t j = 0; j < valueBlocks(); ++j)
          for (int64_t e = 2 * r; e < 2 * r + 2; ++e) {
            Value column =
                add(mul(laneInGroup, constIndex(2)), constIndex(8 * j + e % 2));
            storeOutput(fmul(loop.getResults()[4 + 4 * j + e], inverse),
                        add(rowOffset, toI64(column)));
          }
      });
}

} // namespace

bool mlir::kiln::detail::tf32KernelSupports(int64_t headDim,
                                            int64_t valueHeadDim) {
  auto fits = [](int64_t dim) {
    return dim % 8 == 0 && dim >= 8 && dim <= kLargestHeadDim;
  };
  return fits(headDim) && fits(valueHeadDim) &&
         tf32TileKeys(headDim, valueHeadDim) > 0;
}

std::unique_ptr<AttentionKernelBuilder>
mlir::kiln::detail::createTf32Kernel(const KernelSpec &spec) {
  return std::make_unique<Tf32Kernel>(spec);
}
