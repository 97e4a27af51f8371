//===- Fp8Tile.cpp - e4m3 caches: staging tiles converted to f16 ----------===//
//
// A paged cache of e4m3 (f8E4M3FN) values halves the bytes a decode step
// reads. Its K and V tiles are copied as the f16 ones are, in 16-byte chunks
// (16 elements: the chunk plans see rows of dim / 2 two-byte units), into
// staging tiles. S = Q·Kᵀ loads K's B fragments from the staging tile, 4
// bytes a 16-dim chunk, and converts them in registers; Q's columns are
// permuted once so that those 4 bytes are the fragment's two registers.
// V's B fragments need two keys at one head dim (a transpose), so after its
// copies land each thread converts the V chunks it copied into one f16
// tile, and the block (or the warp owning the rows) synchronises as before
// a stage's reads. The products run in f16 whatever the query's type: e4m3
// values, and their bit-moved images, are exact in f16. The dequantisation
// scales never touch the tiles: K's multiplies the score scale and V's the
// output accumulators, so a site computes in f32 what its op says,
// `f32(k8) · k_scale` and `f32(v8) · v_scale`, up to the order of products.
//
//===----------------------------------------------------------------------===//

#include "Schedules/MmaKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::kiln::detail;
using namespace mlir::kiln::detail::mma;

Value MmaKernel::stagingAddress(Value tile, Value row, Value column,
                                int64_t units) {
  auto sharedPtr = LLVM::LLVMPointerType::get(b->getContext(), 3);
  Value offset = toI32(add(mul(row, constIndex(units)), column));
  return LLVM::GEPOp::create(*b, sharedPtr, b->getI16Type(), tile,
                             ValueRange{offset});
}

MmaKernel::ChunkPlan MmaKernel::chunkPositions(int64_t units) {
  Value start = arith::ConstantIntOp::create(*b, b->getI64Type(), 0);
  Value exists = arith::ConstantIntOp::create(*b, b->getI1Type(), 1);
  if (byLines(units))
    return planLineChunks(units, [&](Value) {
      return SmallVector<std::pair<Value, Value>>(kLineRows, {start, exists});
    });
  return planChunks(units, [&](Value) { return std::pair{start, exists}; });
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

void MmaKernel::convertStagedTile(Value staging, Value tile, int64_t dim) {
  ImplicitLocOpBuilder &builder = *b;
  int64_t units = copyDim(dim);
  ChunkPlan plan = chunkPositions(units);
  auto words = VectorType::get({4}, builder.getI32Type());
  auto halves = VectorType::get({4}, builder.getI32Type());
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    ifChunkExists(plan, i, [&] {
      Value chunk = LLVM::LoadOp::create(
          builder, words,
          stagingAddress(staging, plan.rows[i], plan.columns[i], units),
          /*alignment=*/16);
      // Word w holds elements 4w to 4w + 3: f16 pairs 2w and 2w + 1.
      Value low = LLVM::PoisonOp::create(builder, halves);
      Value high = LLVM::PoisonOp::create(builder, halves);
      for (int64_t w = 0; w < 4; ++w) {
        Value word = LLVM::ExtractElementOp::create(builder, chunk, constI32(w));
        Value first = e4m3PairToF16(word);
        Value second = e4m3PairToF16(
            arith::ShRUIOp::create(builder, word, constI32(16)));
        Value &target = w < 2 ? low : high;
        target = LLVM::InsertElementOp::create(builder, target, first,
                                               constI32(2 * (w % 2)));
        target = LLVM::InsertElementOp::create(builder, target, second,
                                               constI32(2 * (w % 2) + 1));
      }
      // Unit column u holds elements 2u on: f16 columns 2u and 2u + 8.
      // The 8 threads of a 16-byte store phase hold the 8 chunks of a
      // 128-byte row, whose f16 halves span 256 bytes: chunks 4-7 store
      // their high half first, so that each phase's 8 stores fall in
      // distinct 16-byte bank groups (ncu counted the plain order's 2-way
      // conflicts as a quarter of all shared wavefronts). Chunk c starts at
      // unit column c · kChunk.
      Value column = mul(plan.columns[i], constIndex(2));
      Value lowAddress = tileAddress(tile, plan.rows[i], column);
      Value highAddress =
          tileAddress(tile, plan.rows[i], add(column, constIndex(kChunk)));
      Value swap = arith::CmpIOp::create(
          builder, arith::CmpIPredicate::ne,
          arith::AndIOp::create(builder, plan.columns[i],
                                constIndex(4 * kChunk)),
          constIndex(0));
      LLVM::StoreOp::create(
          builder, arith::SelectOp::create(builder, swap, high, low),
          arith::SelectOp::create(builder, swap, highAddress, lowAddress),
          /*alignment=*/16);
      LLVM::StoreOp::create(
          builder, arith::SelectOp::create(builder, swap, low, high),
          arith::SelectOp::create(builder, swap, lowAddress, highAddress),
          /*alignment=*/16);
    });
  }
}

int64_t MmaKernel::stagingRowUnits(bool key) const {
  return key ? TileLayout::fp8KeyRowBytes(spec.problem.headDim) / 2
             : copyDim(spec.problem.valueDim());
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
