//===- Fp8Tile.cpp - e4m3 caches: staging tiles converted to f16 ----------===//
//
// A paged cache of e4m3 (f8E4M3FN) values halves the bytes a decode step
// reads. Its K and V tiles are copied as the f16 ones are, in 16-byte chunks
// (16 elements: the chunk plans see rows of dim / 2 two-byte units), into
// staging tiles. S = Q·Kᵀ loads K's B fragments from the staging tile, 4
// bytes a 16-dim chunk, and converts them in registers; Q's columns are
// permuted once so that those 4 bytes are the fragment's two registers.
// V's B fragments take two keys at one head dim (a transpose): ldmatrix.trans
// of byte pairs gives a lane two keys at two adjacent head dims, which a
// byte permute splits into the fragments of the even and of the odd head
// dims of a 16-column group; the accumulators are put back in order once, after the
// loop (restoreValueColumns). The products run in f16 whatever the query's
// type: e4m3 values, and their bit-moved images, are exact in f16. The dequantisation
// scales never touch the tiles: K's multiplies the score scale and V's the
// output accumulators, so a site computes in f32 what its op says,
// `f32(k8) · k_scale` and `f32(v8) · v_scale`, up to the order of products.
//
//===----------------------------------------------------------------------===//

#include "Schedules/Mma/MmaKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::kiln::detail;
using namespace mlir::kiln::detail::mma;

Value MmaKernel::stagingAddress(Value tile, Value row, Value column,
                                int64_t units) {
  auto sharedPtr = LLVM::LLVMPointerType::get(b->getContext(), 3);
  // Rows of a power-of-two count of 16-byte chunks are not padded: chunk c
  // of a row is stored at c XOR (the row's index among the 8 rows a
  // fragment load reads, by 128-byte lines), which spreads those rows over
  // the banks as padding would without breaking a warp's copy into
  // separate rows (padded rows cost a third more global sectors in ncu).
  int64_t chunks = units / (kChunk);
  if (TileLayout::swizzled(chunks)) {
    int64_t rowsPerLine = std::max<int64_t>(1, 8 / chunks);
    int64_t keys = std::min<int64_t>(chunks, 8);
    if (keys > 1) {
      Value chunk = arith::DivUIOp::create(*b, column,
                                           constIndex(kChunk));
      Value within = arith::RemUIOp::create(*b, column,
                                            constIndex(kChunk));
      Value key = arith::RemUIOp::create(
          *b, arith::DivUIOp::create(*b, row, constIndex(rowsPerLine)),
          constIndex(keys));
      column = add(mul(arith::XOrIOp::create(*b, chunk, key),
                       constIndex(kChunk)),
                   within);
    }
  }
  Value offset = toI32(add(mul(row, constIndex(units)), column));
  return LLVM::GEPOp::create(*b, sharedPtr, b->getI16Type(), tile,
                             ValueRange{offset});
}

Value MmaKernel::e4m3PairToF16(Value pair) {
  ImplicitLocOpBuilder &builder = *b;
  Type i32 = builder.getI32Type();
  auto c = [&](int64_t value) -> Value {
    return arith::ConstantIntOp::create(builder, i32, value);
  };
  if (spec.variant.fp8HardwareConvert) {
    Value half = arith::TruncIOp::create(builder, builder.getI16Type(), pair);
    auto asmOp = LLVM::InlineAsmOp::create(
        builder, i32, ValueRange{half}, "cvt.rn.f16x2.e4m3x2 $0, $1;", "=r,h",
        /*has_side_effects=*/false, /*is_align_stack=*/false,
        LLVM::tailcallkind::TailCallKind::None,
        LLVM::AsmDialectAttr::get(builder.getContext(), LLVM::AsmDialect::AD_ATT),
        /*operand_attrs=*/ArrayAttr());
    return asmOp.getRes();
  }
  // Byte 0 to bits 0-7 and byte 1 to bits 16-23, then each e4m3's sign to
  // f16's sign and its exponent and mantissa (7 bits) to bits 7-13: f16's
  // exponent field takes e4m3's (bias 15 rather than 7) and its mantissa's
  // top bits e4m3's, so the f16 reads 2^-8 times the e4m3 value, normal or
  // subnormal alike.
  Value spread = arith::OrIOp::create(
      builder, arith::AndIOp::create(builder, pair, c(0xFF)),
      arith::ShLIOp::create(builder,
                            arith::AndIOp::create(builder, pair, c(0xFF00)),
                            c(8)));
  Value sign = arith::ShLIOp::create(
      builder, arith::AndIOp::create(builder, spread, c(0x00800080)), c(8));
  Value magnitude = arith::ShLIOp::create(
      builder, arith::AndIOp::create(builder, spread, c(0x007F007F)), c(7));
  return arith::OrIOp::create(builder, sign, magnitude);
}

SmallVector<std::array<Value, 2>>
MmaKernel::loadFp8ValueFragments(Value staging, Value keyRow,
                                 int64_t firstGroup, bool second) {
  ImplicitLocOpBuilder &builder = *b;
  // ldmatrix.trans of 2-byte pairs: matrices keys 0-7 / 8-15 (matrixLow) of
  // bytes 16·firstGroup + 0-15 / 16-31 (matrixHigh). A lane gets, of each, keys
  // 2t and 2t + 1 at head dims 2g and 2g + 1 of the 16: bytes 0 and 2 hold
  // dim 2g of the two keys, bytes 1 and 3 dim 2g + 1.
  Value row = add(keyRow, add(mul(matrixLow, constIndex(8)), matrixRow));
  Value column = constIndex(8 * firstGroup);
  if (second)
    column = add(column, mul(matrixHigh, constIndex(8)));
  SmallVector<Value> matrices = loadMatrices(
      stagingAddress(staging, row, column, stagingRowUnits(/*key=*/false)),
      /*transpose=*/true);
  auto c = [&](int64_t value) { return constI32(value); };
  SmallVector<std::array<Value, 2>> fragments;
  for (int64_t group = 0; group < (second ? 2 : 1); ++group) {
    // Per matrix: one byte permute regroups the pairs by head dim (dim 2g
    // of keys 2t and 2t + 1 in the low half, dim 2g + 1 in the high half),
    // and each half converts to its f16 pair.
    std::array<Value, 2> even, odd;
    for (int64_t keys = 0; keys < 2; ++keys) {
      Value word = matrices[2 * group + keys];
      Value byDim =
          NVVM::PermuteOp::create(builder, builder.getI32Type(), word, word,
                                  c(0x3120), NVVM::PermuteMode::DEFAULT);
      even[keys] = e4m3PairToF16(byDim);
      odd[keys] = e4m3PairToF16(arith::ShRUIOp::create(builder, byDim, c(16)));
    }
    fragments.push_back(even);
    fragments.push_back(odd);
  }
  return fragments;
}

void MmaKernel::restoreValueColumns(SmallVector<Value> &state) {
  ImplicitLocOpBuilder &builder = *b;
  // In group G, lane 4g + t holds head dims 4t to 4t + 3 (even block: 4t,
  // 4t + 2; odd block: 4t + 1, 4t + 3) where the usual layout has it hold
  // 2t, 2t + 1 (block 2G) and 8 + 2t, 9 + 2t (block 2G + 1): those are
  // dims k, k + 1 of lanes 4g + t / 2 and 4g + 2 + t / 2, k = 2 (t mod 2).
  Value width = constI32(kWarpSize);
  Value quadBase = toI32(mul(laneGroup, constIndex(4)));
  Value half = toI32(arith::DivUIOp::create(builder, quadLane, constIndex(2)));
  Value odd = arith::CmpIOp::create(
      builder, arith::CmpIPredicate::ne,
      toI32(arith::RemUIOp::create(builder, quadLane, constIndex(2))),
      constI32(0));
  auto from = [&](Value value, Value source) {
    return gpu::ShuffleOp::create(builder, value, source, width,
                                  gpu::ShuffleMode::IDX)
        .getShuffleResult();
  };
  MutableArrayRef<Value> acc = MutableArrayRef<Value>(state).drop_front(4);
  int64_t blocks = int64_t(acc.size()) / 4;
  for (int64_t group = 0; 2 * group + 1 < blocks; ++group) {
    MutableArrayRef<Value> even = acc.slice(4 * (2 * group), 4);
    MutableArrayRef<Value> oddBlock = acc.slice(4 * (2 * group + 1), 4);
    for (int64_t r = 0; r < 2; ++r) {
      // This lane's dims 4t + 0..3 of row g (r = 0) or g + 8 (r = 1).
      Value local[4] = {even[2 * r], oddBlock[2 * r], even[2 * r + 1],
                        oddBlock[2 * r + 1]};
      Value result[4];
      for (int64_t target = 0; target < 2; ++target) {
        Value source = arith::AddIOp::create(
            builder, quadBase,
            arith::AddIOp::create(builder, half, constI32(2 * target)));
        for (int64_t e = 0; e < 2; ++e)
          result[2 * target + e] = arith::SelectOp::create(
              builder, odd, from(local[2 + e], source),
              from(local[e], source));
      }
      even[2 * r] = result[0];
      even[2 * r + 1] = result[1];
      oddBlock[2 * r] = result[2];
      oddBlock[2 * r + 1] = result[3];
    }
  }
}

int64_t MmaKernel::stagingRowUnits(bool key) const {
  return TileLayout::fp8RowBytes(key ? spec.problem.headDim
                                      : spec.problem.valueDim()) /
         2;
}

std::pair<Value, Value> MmaKernel::loadFp8KeyFragment(Value staging,
                                                      Value keyRow,
                                                      int64_t c) {
  ImplicitLocOpBuilder &builder = *b;
  // Bytes 16c + 4t to 16c + 4t + 3 of the row: head dims 4t + 2r + e, the
  // f16 pairs of logical columns 2t + e (r = 0) and 2t + 8 + e (r = 1).
  Value column = add(constIndex(8 * c), mul(quadLane, constIndex(2)));
  Value word = LLVM::LoadOp::create(
      builder, builder.getI32Type(),
      stagingAddress(staging, keyRow, column, stagingRowUnits(/*key=*/true)),
      /*alignment=*/4);
  return {e4m3PairToF16(word),
          e4m3PairToF16(arith::ShRUIOp::create(builder, word, constI32(16)))};
}

void MmaKernel::permuteQColumns() {
  ImplicitLocOpBuilder &builder = *b;
  auto words = VectorType::get({4}, builder.getI32Type());
  int64_t groups = spec.problem.headDim / 16;
  int64_t units = kTileKeys * groups;
  for (int64_t i = 0; i * kThreadsPerBlock < units; ++i) {
    Value linear = add(threadId, constIndex(i * kThreadsPerBlock));
    Value exists = arith::CmpIOp::create(builder, arith::CmpIPredicate::ult,
                                         linear, constIndex(units));
    ifThen(exists, [&] {
      Value row = arith::DivUIOp::create(builder, linear, constIndex(groups));
      Value column = mul(arith::RemUIOp::create(builder, linear,
                                                constIndex(groups)),
                         constIndex(16));
      Value lowAddress = tileAddress(qTile, row, column);
      Value highAddress = tileAddress(qTile, row, add(column, constIndex(8)));
      Value low = LLVM::LoadOp::create(builder, words, lowAddress, 16);
      Value high = LLVM::LoadOp::create(builder, words, highAddress, 16);
      // Word (f16 pair) t + 4r of the result is word 2t + r of the group.
      auto word = [&](int64_t index) -> Value {
        return LLVM::ExtractElementOp::create(builder, index < 4 ? low : high,
                                              constI32(index % 4));
      };
      Value outLow = LLVM::PoisonOp::create(builder, words);
      Value outHigh = LLVM::PoisonOp::create(builder, words);
      for (int64_t t = 0; t < 4; ++t)
        for (int64_t r = 0; r < 2; ++r) {
          Value &target = r == 0 ? outLow : outHigh;
          target = LLVM::InsertElementOp::create(builder, target,
                                                 word(2 * t + r), constI32(t));
        }
      LLVM::StoreOp::create(builder, outLow, lowAddress, 16);
      LLVM::StoreOp::create(builder, outHigh, highAddress, 16);
    });
  }
}

void MmaKernel::convertQToF16(int64_t rows) {
  ImplicitLocOpBuilder &builder = *b;
  Value start = arith::ConstantIntOp::create(builder, builder.getI64Type(), 0);
  Value exists = arith::ConstantIntOp::create(builder, builder.getI1Type(), 1);
  ChunkPlan plan = planChunks(
      spec.problem.headDim, [&](Value) { return std::pair{start, exists}; },
      rows);
  auto bf16Chunk = VectorType::get({kChunk}, builder.getBF16Type());
  auto f32Chunk = VectorType::get({kChunk}, builder.getF32Type());
  auto f16Chunk = VectorType::get({kChunk}, builder.getF16Type());
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    ifChunkExists(plan, i, [&] {
      Value address = tileAddress(qTile, plan.rows[i], plan.columns[i]);
      Value chunk =
          LLVM::LoadOp::create(builder, bf16Chunk, address, /*alignment=*/16);
      Value wide = LLVM::FPExtOp::create(builder, f32Chunk, chunk);
      LLVM::StoreOp::create(builder,
                            LLVM::FPTruncOp::create(builder, f16Chunk, wide),
                            address, /*alignment=*/16);
    });
  }
}

void MmaKernel::prepareFp8() {
  ImplicitLocOpBuilder &builder = *b;
  auto globalPtr = LLVM::LLVMPointerType::get(builder.getContext(), 1);
  Value index = spec.problem.perHeadScales
                    ? toI64(kvHead)
                    : arith::ConstantIntOp::create(builder, builder.getI64Type(), 0);
  auto load = [&](Value scales) -> Value {
    Value address = LLVM::GEPOp::create(builder, globalPtr, builder.getF32Type(),
                                        scales, ValueRange{index});
    return fmul(LLVM::LoadOp::create(builder, builder.getF32Type(), address),
                constF32(fp8Factor()));
  };
  Value kScale = load(kScales);
  vScale = load(vScales);
  scaleNatural = fmul(scaleNatural, kScale);
  scaleLog2 = fmul(scaleLog2, kScale);
  // Offsets in 2-byte units (the runtime checks the strides are even).
  Value one = arith::ConstantIntOp::create(builder, builder.getI64Type(), 1);
  for (SmallVector<Value> *strides : {&kStrides, &vStrides})
    for (Value &stride : *strides)
      stride = arith::ShRUIOp::create(builder, stride, one);
  kBase = arith::ShRUIOp::create(builder, kBase, one);
  vBase = arith::ShRUIOp::create(builder, vBase, one);
}
