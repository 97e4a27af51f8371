//===- KilnToGPU.cpp - kiln.attention to GPU kernels ------------*- C++ -*-===//
//
// Builds a tiled online-softmax kernel (gpu.func) for every kiln.attention
// specialisation in a module. The host IR keeps its kiln.attention ops, each
// tagged with the kernel and site name the package manifest describes.
//
//===----------------------------------------------------------------------===//

#include "kiln/Conversion/KilnToGPU/KilnToGPU.h"
#include "kiln/Conversion/Passes.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/SymbolTable.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <limits>

namespace mlir::kiln {
#define GEN_PASS_DEF_CONVERTKILNTOGPU
#include "kiln/Conversion/Passes.h.inc"
} // namespace mlir::kiln

using namespace mlir;
using namespace mlir::kiln;

namespace {

constexpr int64_t kWarpSize = 32;
constexpr int64_t kWarpsPerBlock = 4;
constexpr int64_t kThreadsPerBlock = kWarpSize * kWarpsPerBlock;
/// Static shared memory a kernel may use without an opt-in.
constexpr int64_t kStaticSharedLimit = 48 * 1024;
/// Dot-product steps emitted per loop iteration.
constexpr int64_t kDotUnroll = 8;

/// Everything that makes two attention sites need different kernels.
struct KernelSpec {
  Type elementType;
  int64_t headDim;
  bool causal;
  std::optional<int64_t> window;
  std::optional<float> softcap;
  Type maskType; // null when there is no mask
  Type biasType; // null when there is no bias

  std::string name() const {
    std::string result =
        llvm::formatv("kiln_attention_{0}_d{1}", getElementTypeName(elementType),
                      headDim);
    if (causal)
      result += "_causal";
    if (window)
      result += llvm::formatv("_w{0}", *window).str();
    if (softcap)
      result += llvm::formatv("_cap{0:x}",
                              llvm::bit_cast<uint32_t>(*softcap))
                    .str();
    if (maskType)
      result += "_mask" + getElementTypeName(maskType);
    if (biasType)
      result += "_bias" + getElementTypeName(biasType);
    return result;
  }
};

/// Builds one attention kernel. See the pass description in Passes.td for the
/// algorithm and the argument ABI.
class AttentionKernelBuilder {
public:
  AttentionKernelBuilder(const KernelSpec &spec, int64_t kvBlockSize,
                         int64_t rowsPerWarp)
      : spec(spec), kvBlockSize(kvBlockSize), rowsPerWarp(rowsPerWarp),
        rowsPerBlock(rowsPerWarp * kWarpsPerBlock),
        dimsPerLane(spec.headDim / kWarpSize),
        keysPerLane(kvBlockSize / kWarpSize) {}

  /// Shared memory the kernel's workgroup buffers take, in bytes.
  int64_t sharedBytes() const {
    return 4 * (rowsPerBlock * spec.headDim +
                kvBlockSize * (spec.headDim + 1) + kvBlockSize * spec.headDim);
  }

  /// Names of the kernel arguments, in order.
  SmallVector<std::string> argumentNames() const;
  /// Kinds ("pointer", "i32", "i64", "f32") of the kernel arguments.
  SmallVector<std::string> argumentKinds() const;

  gpu::GPUFuncOp build(OpBuilder &moduleBuilder, Location loc);

private:
  Value constIndex(int64_t value) {
    return arith::ConstantIndexOp::create(*b, value);
  }
  Value constF32(float value) {
    return arith::ConstantOp::create(*b, b->getF32FloatAttr(value));
  }
  Value toIndex(Value v) {
    return arith::IndexCastOp::create(*b, b->getIndexType(), v);
  }
  Value toI64(Value v) {
    return arith::IndexCastOp::create(*b, b->getI64Type(), v);
  }
  Value add(Value x, Value y) { return arith::AddIOp::create(*b, x, y); }
  Value mul(Value x, Value y) { return arith::MulIOp::create(*b, x, y); }
  Value fadd(Value x, Value y) { return arith::AddFOp::create(*b, x, y); }
  Value fmul(Value x, Value y) { return arith::MulFOp::create(*b, x, y); }
  Value fmax(Value x, Value y) { return arith::MaximumFOp::create(*b, x, y); }

  /// 2^x with the hardware's ex2.approx.f32 (about 2 ulp; 2^-inf = +0).
  /// Called as an NVVM intrinsic: the generic exp2 lowers to a libdevice
  /// call, which would make the PTX depend on the CUDA toolkit's bitcode.
  Value exp2(Value x) {
    return LLVM::CallIntrinsicOp::create(
               *b, b->getF32Type(), b->getStringAttr("llvm.nvvm.ex2.approx.f32"),
               ValueRange{x})
        .getResult(0);
  }

  /// tanh(x) = 1 - 2 / (2^(2x·log2 e) + 1), built on the same ex2 the
  /// softmax uses, so no math library is needed; ±1 at the extremes.
  Value tanh(Value x) {
    Value twoXLog2e = fmul(x, constF32(2.0f * 1.4426950408889634f));
    Value e = exp2(twoXLog2e);
    Value ratio =
        arith::DivFOp::create(*b, constF32(2.0f), fadd(e, constF32(1.0f)));
    return arith::SubFOp::create(*b, constF32(1.0f), ratio);
  }

  /// Loads element `offset` (i64) of global `base` as f32.
  Value loadGlobalAsF32(Value base, Type elementType, Value offset) {
    auto ptrType = LLVM::LLVMPointerType::get(b->getContext(), 1);
    Value address =
        LLVM::GEPOp::create(*b, ptrType, elementType, base, ValueRange{offset});
    Value loaded = LLVM::LoadOp::create(*b, elementType, address);
    if (elementType.isF32())
      return loaded;
    if (elementType.isInteger(1))
      return loaded;
    return arith::ExtFOp::create(*b, b->getF32Type(), loaded);
  }

  /// Butterfly reduction over the 32 lanes of a warp.
  Value warpReduce(Value value, bool isMax) {
    for (int32_t offset = kWarpSize / 2; offset > 0; offset /= 2) {
      Value other = gpu::ShuffleOp::create(*b, value, offset, kWarpSize,
                                           gpu::ShuffleMode::XOR)
                        .getShuffleResult();
      value = isMax ? fmax(value, other) : fadd(value, other);
    }
    return value;
  }

  /// Cooperative copy of `rows` rows (starting at `firstRow`) of a [*, D]
  /// global tensor into `buffer` as f32; rows at or past `numRows` are zero.
  void stageTile(Value buffer, Value base, Value rowStride, Value firstRow,
                 Value numRows, int64_t rows);

  /// dot(Q[row], K[key]) for each row of `rowsInBlock`.
  SmallVector<Value> dotRows(ArrayRef<Value> rowsInBlock, Value keyInBlock);

  /// The score of key `key` for query row `queryRow` from its dot product, in
  /// log2 units; -inf when the key is hidden.
  Value finishScore(Value dot, Value queryRow, Value key);

  const KernelSpec &spec;
  int64_t kvBlockSize, rowsPerWarp, rowsPerBlock, dimsPerLane, keysPerLane;

  ImplicitLocOpBuilder *b = nullptr;
  // Values of the kernel being built.
  Value qBuffer, kBuffer, vBuffer;
  /// Global tensor that stageTile reads.
  Value basePointer;
  Value qLen, kvLen, kvOffset, scaleLog2;
  Value maskPtr, biasPtr, maskBase, biasBase;
  Value maskStrideQ, maskStrideK, biasStrideQ, biasStrideK;
};

SmallVector<std::string> AttentionKernelBuilder::argumentNames() const {
  SmallVector<std::string> names = {"q", "k", "v", "out"};
  if (spec.maskType)
    names.push_back("mask");
  if (spec.biasType)
    names.push_back("bias");
  for (const char *name : {"batch", "q_heads", "kv_heads", "q_len", "kv_len"})
    names.push_back(name);
  names.push_back("scale");
  for (const char *tensor : {"q", "k", "v", "out"})
    for (const char *axis : {"batch", "head", "seq"})
      names.push_back(llvm::formatv("{0}_stride_{1}", tensor, axis));
  for (auto [present, tensor] :
       {std::pair{bool(spec.maskType), "mask"},
        std::pair{bool(spec.biasType), "bias"}})
    if (present)
      for (const char *axis : {"batch", "head", "q", "k"})
        names.push_back(llvm::formatv("{0}_stride_{1}", tensor, axis));
  return names;
}

SmallVector<std::string> AttentionKernelBuilder::argumentKinds() const {
  int64_t numPointers = 4 + bool(spec.maskType) + bool(spec.biasType);
  SmallVector<std::string> kinds(numPointers, "pointer");
  kinds.append(5, "i32");
  kinds.push_back("f32");
  kinds.append(12 + 4 * (bool(spec.maskType) + bool(spec.biasType)), "i64");
  return kinds;
}

void AttentionKernelBuilder::stageTile(Value buffer, Value base,
                                       Value rowStride, Value firstRow,
                                       Value numRows, int64_t rows) {
  int64_t elements = rows * spec.headDim;
  Value threadId = gpu::ThreadIdOp::create(*b, gpu::Dimension::x);
  Value headDim = constIndex(spec.headDim);
  Value zero = constF32(0.0f);
  for (int64_t first = 0; first < elements; first += kThreadsPerBlock) {
    Value linear = add(threadId, constIndex(first));
    Value row = arith::DivUIOp::create(*b, linear, headDim);
    Value column = arith::RemUIOp::create(*b, linear, headDim);
    Value globalRow = add(firstRow, row);
    Value inBounds = arith::CmpIOp::create(*b, arith::CmpIPredicate::slt,
                                           globalRow, numRows);
    // Out-of-range rows read the last valid row instead of running off the
    // tensor, and are then replaced by zeros.
    Value lastRow = arith::SubIOp::create(*b, numRows, constIndex(1));
    Value clampedRow = arith::MinSIOp::create(*b, globalRow, lastRow);
    clampedRow = arith::MaxSIOp::create(*b, clampedRow, constIndex(0));
    Value offset = add(mul(toI64(clampedRow), rowStride), toI64(column));
    offset = add(base, offset);
    Value value = loadGlobalAsF32(basePointer, spec.elementType, offset);
    value = arith::SelectOp::create(*b, inBounds, value, zero);
    memref::StoreOp::create(*b, value, buffer, ValueRange{row, column});
  }
}

SmallVector<Value> AttentionKernelBuilder::dotRows(ArrayRef<Value> rowsInBlock,
                                                   Value keyInBlock) {
  // dot(Q[row], K[key]) for all of the warp's rows at once, unrolled
  // kDotUnroll times: each K element read from shared memory serves every
  // row (the Q reads are broadcasts, one address for the whole warp).
  Value zero = constF32(0.0f);
  SmallVector<Value> init(rowsInBlock.size(), zero);
  auto dotLoop = scf::ForOp::create(
      *b, constIndex(0), constIndex(spec.headDim), constIndex(kDotUnroll),
      init, [&](OpBuilder &nested, Location loc, Value d, ValueRange args) {
        ImplicitLocOpBuilder ib(loc, nested);
        SmallVector<Value> acc(args.begin(), args.end());
        for (int64_t u = 0; u < kDotUnroll; ++u) {
          Value column = arith::AddIOp::create(
              ib, d, arith::ConstantIndexOp::create(ib, u));
          Value kv = memref::LoadOp::create(ib, kBuffer,
                                            ValueRange{keyInBlock, column});
          for (auto [row, rowInBlock] : llvm::enumerate(rowsInBlock)) {
            Value qv = memref::LoadOp::create(ib, qBuffer,
                                              ValueRange{rowInBlock, column});
            acc[row] = LLVM::FMAOp::create(ib, qv, kv, acc[row]);
          }
        }
        scf::YieldOp::create(ib, acc);
      });
  return SmallVector<Value>(dotLoop.getResults().begin(),
                            dotLoop.getResults().end());
}

Value AttentionKernelBuilder::finishScore(Value score, Value queryRow,
                                          Value key) {
  const float log2e = 1.4426950408889634f;
  if (spec.softcap) {
    // softcap·tanh(scale·dot / softcap), then into log2 units.
    Value scale = arith::DivFOp::create(*b, scaleLog2, constF32(log2e));
    Value scaled = fmul(score, scale);
    Value capped = tanh(fmul(scaled, constF32(1.0f / *spec.softcap)));
    score = fmul(capped, constF32(*spec.softcap * log2e));
  } else {
    score = fmul(score, scaleLog2);
  }

  // Clamp the indices used for mask and bias loads so that lanes past the end
  // never read outside the tensors; their scores are hidden below anyway.
  Value lastQuery = arith::SubIOp::create(*b, qLen, constIndex(1));
  Value lastKey = arith::SubIOp::create(*b, kvLen, constIndex(1));
  Value safeQuery = toI64(arith::MinSIOp::create(*b, queryRow, lastQuery));
  Value safeKey = toI64(arith::MinSIOp::create(*b, key, lastKey));

  Value visible =
      arith::CmpIOp::create(*b, arith::CmpIPredicate::slt, key, kvLen);
  if (spec.biasType) {
    Value offset = add(biasBase, add(mul(safeQuery, biasStrideQ),
                                     mul(safeKey, biasStrideK)));
    Value bias = loadGlobalAsF32(biasPtr, spec.biasType, offset);
    score = fadd(score, fmul(bias, constF32(log2e)));
  }
  if (spec.maskType) {
    Value offset = add(maskBase, add(mul(safeQuery, maskStrideQ),
                                     mul(safeKey, maskStrideK)));
    Value mask = loadGlobalAsF32(maskPtr, spec.maskType, offset);
    if (spec.maskType.isInteger(1))
      visible = arith::AndIOp::create(*b, visible, mask);
    else
      score = fadd(score, fmul(mask, constF32(log2e)));
  }
  if (spec.causal) {
    // Bottom-right aligned: key <= row + (kvLen - qLen).
    Value diagonal = add(queryRow, kvOffset);
    visible = arith::AndIOp::create(
        *b, visible,
        arith::CmpIOp::create(*b, arith::CmpIPredicate::sle, key, diagonal));
    if (spec.window) {
      Value oldest = arith::SubIOp::create(*b, diagonal,
                                           constIndex(*spec.window));
      visible = arith::AndIOp::create(
          *b, visible,
          arith::CmpIOp::create(*b, arith::CmpIPredicate::sgt, key, oldest));
    }
  }
  Value negInf = constF32(-std::numeric_limits<float>::infinity());
  return arith::SelectOp::create(*b, visible, score, negInf);
}

gpu::GPUFuncOp AttentionKernelBuilder::build(OpBuilder &moduleBuilder,
                                             Location loc) {
  MLIRContext *ctx = moduleBuilder.getContext();
  auto ptrType = LLVM::LLVMPointerType::get(ctx, 1);
  Type i32 = moduleBuilder.getI32Type(), i64 = moduleBuilder.getI64Type(),
       f32 = moduleBuilder.getF32Type();
  SmallVector<Type> argTypes;
  for (const std::string &kind : argumentKinds())
    argTypes.push_back(kind == "pointer" ? ptrType
                       : kind == "i32"   ? i32
                       : kind == "i64"   ? i64
                                         : f32);
  auto workgroup = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  auto qType = MemRefType::get({rowsPerBlock, spec.headDim}, f32, nullptr,
                               workgroup);
  // K rows are padded by one element: lanes read K[lane][d], and the padding
  // spreads those reads over all 32 banks.
  auto kType = MemRefType::get({kvBlockSize, spec.headDim + 1}, f32, nullptr,
                               workgroup);
  auto vType = MemRefType::get({kvBlockSize, spec.headDim}, f32, nullptr,
                               workgroup);

  auto func = gpu::GPUFuncOp::create(
      moduleBuilder, loc, spec.name(),
      moduleBuilder.getFunctionType(argTypes, {}),
      TypeRange{qType, kType, vType}, TypeRange{});
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                moduleBuilder.getUnitAttr());
  func.setKnownBlockSizeAttr(
      moduleBuilder.getDenseI32ArrayAttr({int32_t(kThreadsPerBlock), 1, 1}));

  ImplicitLocOpBuilder builder(loc, ctx);
  builder.setInsertionPointToStart(&func.getBody().front());
  b = &builder;

  // Arguments, by ABI position.
  ValueRange args = func.getArguments();
  unsigned next = 0;
  Value q = args[next++], k = args[next++], v = args[next++],
        out = args[next++];
  maskPtr = spec.maskType ? args[next++] : Value();
  biasPtr = spec.biasType ? args[next++] : Value();
  next++; // batch: only the grid depends on it.
  Value numQueryHeads = toIndex(args[next++]);
  Value numKvHeads = toIndex(args[next++]);
  qLen = toIndex(args[next++]);
  kvLen = toIndex(args[next++]);
  Value scale = args[next++];
  auto strides = [&](int count) {
    SmallVector<Value> values(args.begin() + next,
                              args.begin() + next + count);
    next += count;
    return values;
  };
  SmallVector<Value> qStrides = strides(3), kStrides = strides(3),
                     vStrides = strides(3), outStrides = strides(3);
  SmallVector<Value> maskStrides, biasStrides;
  if (spec.maskType)
    maskStrides = strides(4);
  if (spec.biasType)
    biasStrides = strides(4);
  qBuffer = func.getWorkgroupAttributions()[0];
  kBuffer = func.getWorkgroupAttributions()[1];
  vBuffer = func.getWorkgroupAttributions()[2];

  const float log2e = 1.4426950408889634f;
  scaleLog2 = fmul(scale, constF32(log2e));

  Value queryBlock = gpu::BlockIdOp::create(builder, gpu::Dimension::x);
  Value head = gpu::BlockIdOp::create(builder, gpu::Dimension::y);
  Value batch = gpu::BlockIdOp::create(builder, gpu::Dimension::z);
  Value threadId = gpu::ThreadIdOp::create(builder, gpu::Dimension::x);
  Value warp = arith::DivUIOp::create(builder, threadId, constIndex(kWarpSize));
  Value lane = arith::RemUIOp::create(builder, threadId, constIndex(kWarpSize));
  Value group = arith::DivUIOp::create(builder, numQueryHeads, numKvHeads);
  Value kvHead = arith::DivUIOp::create(builder, head, group);

  auto baseOffset = [&](ArrayRef<Value> tensorStrides, Value headIndex) {
    return add(mul(toI64(batch), tensorStrides[0]),
               mul(toI64(headIndex), tensorStrides[1]));
  };
  Value qBase = baseOffset(qStrides, head);
  Value kBase = baseOffset(kStrides, kvHead);
  Value vBase = baseOffset(vStrides, kvHead);
  Value outBase = baseOffset(outStrides, head);
  if (spec.maskType) {
    maskBase = baseOffset(maskStrides, head);
    maskStrideQ = maskStrides[2];
    maskStrideK = maskStrides[3];
  }
  if (spec.biasType) {
    biasBase = baseOffset(biasStrides, head);
    biasStrideQ = biasStrides[2];
    biasStrideK = biasStrides[3];
  }

  Value firstQuery = mul(queryBlock, constIndex(rowsPerBlock));
  kvOffset = arith::SubIOp::create(builder, kvLen, qLen);

  // Q tile → shared memory (made visible by the first barrier in the loop).
  basePointer = q;
  stageTile(qBuffer, qBase, qStrides[2], firstQuery, qLen, rowsPerBlock);

  // Key range this block can see: blocks past the causal diagonal of the
  // block's last row, and before the window of its first row, are skipped.
  Value kvBegin = constIndex(0);
  Value kvEnd = kvLen;
  if (spec.causal) {
    Value end = add(add(firstQuery, constIndex(rowsPerBlock)), kvOffset);
    end = arith::MaxSIOp::create(builder, end, constIndex(0));
    kvEnd = arith::MinSIOp::create(builder, end, kvLen);
    if (spec.window) {
      Value begin = arith::SubIOp::create(
          builder, add(add(firstQuery, kvOffset), constIndex(1)),
          constIndex(*spec.window));
      kvBegin = arith::MaxSIOp::create(builder, begin, constIndex(0));
    }
  }

  // Per-row running state: max, sum, and dimsPerLane accumulators.
  int64_t stateSize = 2 + dimsPerLane;
  Value negInf = constF32(-std::numeric_limits<float>::infinity());
  Value zero = constF32(0.0f);
  SmallVector<Value> initState;
  for (int64_t row = 0; row < rowsPerWarp; ++row) {
    initState.push_back(negInf);
    initState.push_back(zero);
    initState.append(dimsPerLane, zero);
  }

  auto kvLoop = scf::ForOp::create(
      builder, kvBegin, kvEnd, constIndex(kvBlockSize), initState,
      [&](OpBuilder &nested, Location nestedLoc, Value kvStart,
          ValueRange state) {
        ImplicitLocOpBuilder ib(nestedLoc, nested);
        b = &ib;
        // Everyone is done with the previous tile before it is overwritten.
        gpu::BarrierOp::create(ib);
        basePointer = k;
        stageTile(kBuffer, kBase, kStrides[2], kvStart, kvLen, kvBlockSize);
        basePointer = v;
        stageTile(vBuffer, vBase, vStrides[2], kvStart, kvLen, kvBlockSize);
        gpu::BarrierOp::create(ib);

        SmallVector<Value> rowsInBlock, queryRows;
        for (int64_t row = 0; row < rowsPerWarp; ++row) {
          rowsInBlock.push_back(
              add(mul(warp, constIndex(rowsPerWarp)), constIndex(row)));
          queryRows.push_back(add(firstQuery, rowsInBlock.back()));
        }
        // scores[row][slot]: this lane's keys, every row of the warp.
        SmallVector<SmallVector<Value>> scores(rowsPerWarp);
        for (int64_t slot = 0; slot < keysPerLane; ++slot) {
          Value keyInBlock = add(lane, constIndex(slot * kWarpSize));
          Value key = add(kvStart, keyInBlock);
          SmallVector<Value> dots = dotRows(rowsInBlock, keyInBlock);
          for (int64_t row = 0; row < rowsPerWarp; ++row)
            scores[row].push_back(finishScore(dots[row], queryRows[row], key));
        }

        // Online-softmax update per row; scores become probabilities.
        SmallVector<Value> newState, acc;
        for (int64_t row = 0; row < rowsPerWarp; ++row) {
          ValueRange rowState = state.slice(row * stateSize, stateSize);
          Value tileMax = negInf;
          for (Value score : scores[row])
            tileMax = fmax(tileMax, score);
          tileMax = warpReduce(tileMax, /*isMax=*/true);
          Value oldMax = rowState[0];
          Value newMax = fmax(oldMax, tileMax);
          // A row that has seen only hidden keys keeps max = -inf; use 0 as
          // the offset so that exp2 gives 0 rather than NaN.
          Value isEmpty = arith::CmpFOp::create(ib, arith::CmpFPredicate::OEQ,
                                                newMax, negInf);
          Value safeMax = arith::SelectOp::create(ib, isEmpty, zero, newMax);
          Value alpha = exp2(arith::SubFOp::create(ib, oldMax, safeMax));
          Value tileSum = zero;
          for (Value &score : scores[row]) {
            score = exp2(arith::SubFOp::create(ib, score, safeMax));
            tileSum = fadd(tileSum, score);
          }
          tileSum = warpReduce(tileSum, /*isMax=*/false);
          newState.push_back(newMax);
          newState.push_back(fadd(fmul(rowState[1], alpha), tileSum));
          for (int64_t d = 0; d < dimsPerLane; ++d)
            acc.push_back(fmul(rowState[2 + d], alpha));
        }

        // acc[row][d] += P[row][key] · V[key][lane + 32·d]: each V element
        // read from shared memory serves every row; probabilities are
        // broadcast lane by lane.
        for (int64_t slot = 0; slot < keysPerLane; ++slot) {
          auto pvLoop = scf::ForOp::create(
              ib, constIndex(0), constIndex(kWarpSize), constIndex(1), acc,
              [&](OpBuilder &pvNested, Location pvLoc, Value source,
                  ValueRange accIn) {
                ImplicitLocOpBuilder pb(pvLoc, pvNested);
                Value sourceLane =
                    arith::IndexCastOp::create(pb, pb.getI32Type(), source);
                Value width =
                    arith::ConstantIntOp::create(pb, pb.getI32Type(), kWarpSize);
                SmallVector<Value> probabilities;
                for (int64_t row = 0; row < rowsPerWarp; ++row)
                  probabilities.push_back(
                      gpu::ShuffleOp::create(pb, scores[row][slot], sourceLane,
                                             width, gpu::ShuffleMode::IDX)
                          .getShuffleResult());
                Value keyInBlock = arith::AddIOp::create(
                    pb, source,
                    arith::ConstantIndexOp::create(pb, slot * kWarpSize));
                SmallVector<Value> accOut(accIn.begin(), accIn.end());
                for (int64_t d = 0; d < dimsPerLane; ++d) {
                  Value column = arith::AddIOp::create(
                      pb, lane, arith::ConstantIndexOp::create(pb, d * kWarpSize));
                  Value vv = memref::LoadOp::create(
                      pb, vBuffer, ValueRange{keyInBlock, column});
                  for (int64_t row = 0; row < rowsPerWarp; ++row) {
                    Value &slotAcc = accOut[row * dimsPerLane + d];
                    slotAcc =
                        LLVM::FMAOp::create(pb, probabilities[row], vv, slotAcc);
                  }
                }
                scf::YieldOp::create(pb, accOut);
              });
          acc.assign(pvLoop.getResults().begin(), pvLoop.getResults().end());
        }
        // Back to the loop-carried layout: per row max, sum, accumulators.
        // Inserting from the last row keeps the earlier rows' positions.
        for (int64_t row = rowsPerWarp - 1; row >= 0; --row)
          newState.insert(newState.begin() + 2 * (row + 1),
                          acc.begin() + row * dimsPerLane,
                          acc.begin() + (row + 1) * dimsPerLane);
        scf::YieldOp::create(ib, newState);
      });
  b = &builder;

  // out = acc / sum; rows that saw no key are written as zeros.
  auto ptr = LLVM::LLVMPointerType::get(ctx, 1);
  for (int64_t row = 0; row < rowsPerWarp; ++row) {
    ValueRange rowState = kvLoop.getResults().slice(row * stateSize, stateSize);
    Value rowInBlock = add(mul(warp, constIndex(rowsPerWarp)), constIndex(row));
    Value queryRow = add(firstQuery, rowInBlock);
    Value inBounds =
        arith::CmpIOp::create(builder, arith::CmpIPredicate::slt, queryRow, qLen);
    Value hasKeys = arith::CmpFOp::create(builder, arith::CmpFPredicate::OGT,
                                          rowState[1], zero);
    Value inverse = arith::DivFOp::create(builder, constF32(1.0f), rowState[1]);
    inverse = arith::SelectOp::create(builder, hasKeys, inverse, zero);
    auto ifOp = scf::IfOp::create(builder, inBounds, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(&ifOp.getThenRegion().front());
    Value rowOffset = add(outBase, mul(toI64(queryRow), outStrides[2]));
    for (int64_t d = 0; d < dimsPerLane; ++d) {
      Value result = fmul(rowState[2 + d], inverse);
      if (!spec.elementType.isF32())
        result = arith::TruncFOp::create(builder, spec.elementType, result);
      Value column = toI64(add(lane, constIndex(d * kWarpSize)));
      Value address = LLVM::GEPOp::create(builder, ptr, spec.elementType, out,
                                          ValueRange{add(rowOffset, column)});
      LLVM::StoreOp::create(builder, result, address);
    }
  }
  gpu::ReturnOp::create(builder);
  b = nullptr;
  return func;
}

/// Checks that `op` is something the kernel generator supports.
LogicalResult checkSupported(AttentionOp op) {
  int64_t headDim = op.getHeadDim();
  if (ShapedType::isDynamic(headDim))
    return op.emitOpError("GPU lowering needs a static head dim");
  if (headDim % kWarpSize != 0 || headDim > 128)
    return op.emitOpError("GPU lowering supports head dims that are "
                          "multiples of 32 up to 128, got ")
           << headDim;
  return success();
}

struct ConvertKilnToGPUPass
    : public kiln::impl::ConvertKilnToGPUBase<ConvertKilnToGPUPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (kvBlockSize <= 0 || kvBlockSize % kWarpSize != 0) {
      module.emitError("kv-block-size must be a positive multiple of 32");
      return signalPassFailure();
    }
    if (rowsPerWarp <= 0) {
      module.emitError("rows-per-warp must be positive");
      return signalPassFailure();
    }
    SmallVector<AttentionOp> sites;
    module.walk([&](AttentionOp op) { sites.push_back(op); });
    if (sites.empty())
      return;

    OpBuilder builder(module.getContext());
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    builder.getUnitAttr());
    auto gpuModule = module.lookupSymbol<gpu::GPUModuleOp>(kKernelModuleName);
    if (!gpuModule) {
      builder.setInsertionPointToEnd(module.getBody());
      gpuModule = gpu::GPUModuleOp::create(builder, module.getLoc(),
                                           kKernelModuleName);
    }
    SymbolTable kernels(gpuModule);

    int64_t siteIndex = 0;
    for (AttentionOp op : sites) {
      if (failed(checkSupported(op)))
        return signalPassFailure();
      KernelSpec spec;
      spec.elementType = op.getElementType();
      spec.headDim = op.getHeadDim();
      spec.causal = op.getCausal();
      spec.window = op.getWindow();
      if (std::optional<APFloat> cap = op.getSoftcap())
        spec.softcap = cap->convertToFloat();
      if (Value mask = op.getMask())
        spec.maskType = cast<ShapedType>(mask.getType()).getElementType();
      if (Value bias = op.getBias())
        spec.biasType = cast<ShapedType>(bias.getType()).getElementType();

      std::string name = spec.name();
      if (!kernels.lookup(name)) {
        AttentionKernelBuilder kernel(spec, kvBlockSize, rowsPerWarp);
        if (kernel.sharedBytes() > kStaticSharedLimit) {
          op.emitOpError("kernel needs ")
              << kernel.sharedBytes()
              << " bytes of shared memory; lower kv-block-size or "
                 "rows-per-warp";
          return signalPassFailure();
        }
        OpBuilder kernelBuilder =
            OpBuilder::atBlockEnd(gpuModule.getBody());
        gpu::GPUFuncOp func = kernel.build(kernelBuilder, op.getLoc());
        kernels.insert(func);
        func->setAttr(kKernelInfoAttrName,
                      makeKernelInfo(builder, spec, kernel));
      }
      op->setAttr(kKernelAttrName,
                  SymbolRefAttr::get(
                      builder.getStringAttr(kKernelModuleName),
                      {FlatSymbolRefAttr::get(builder.getStringAttr(name))}));
      if (!op->hasAttr(kSiteAttrName))
        op->setAttr(kSiteAttrName,
                    builder.getStringAttr(
                        llvm::formatv("attention_{0}", siteIndex).str()));
      ++siteIndex;
    }
  }

  DictionaryAttr makeKernelInfo(OpBuilder &builder, const KernelSpec &spec,
                                const AttentionKernelBuilder &kernel) {
    auto strings = [&](ArrayRef<std::string> values) {
      SmallVector<Attribute> attrs;
      for (const std::string &value : values)
        attrs.push_back(builder.getStringAttr(value));
      return builder.getArrayAttr(attrs);
    };
    SmallVector<NamedAttribute> fields = {
        builder.getNamedAttr("rows_per_block",
                             builder.getI64IntegerAttr(rowsPerWarp *
                                                       kWarpsPerBlock)),
        builder.getNamedAttr("threads_per_block",
                             builder.getI64IntegerAttr(kThreadsPerBlock)),
        builder.getNamedAttr("kv_block_size",
                             builder.getI64IntegerAttr(kvBlockSize)),
        builder.getNamedAttr("static_shared_bytes",
                             builder.getI64IntegerAttr(kernel.sharedBytes())),
        builder.getNamedAttr("arg_names", strings(kernel.argumentNames())),
        builder.getNamedAttr("arg_kinds", strings(kernel.argumentKinds()))};
    return builder.getDictionaryAttr(fields);
  }
};

} // namespace
