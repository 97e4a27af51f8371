//===- CombineKernel.cpp - The split-KV combine kernel ----------*- C++ -*-===//
//
// When a launch splits each block's keys over several blocks, every split
// writes its rows' normalised partial output O_s and softmax statistics
// (max m_s and sum l_s, log2 units) to a workspace. This kernel reduces them
// per row: with M = max_s m_s and w_s = l_s·2^(m_s - M),
// out = Σ_s w_s·O_s / Σ_s w_s, the decomposition the CPU form uses. Keeping
// the sum beside the max (rather than one log-sum-exp) keeps the weights
// exact when every score is a large finite fill. One block of
// kCombineWarps warps reduces one row: every warp reads all the statistics
// (lane l those of splits l, l + 32, ...), warp w sums the partial outputs
// of splits w, w + kCombineWarps, ... for the contiguous columns each lane
// owns (vector loads), and the warps' sums meet in shared memory. The work
// is a short chain of dependent steps, not bandwidth: the slots a warp walks
// are unrolled with a batch's loads issued together, and one uniform branch
// on the split count picks how many slots, so a launch of at most
// kCombineWarps splits reads its partials in one round of loads and one of
// 128 splits in two.
//
// A ragged launch's combine (its packed rows one sequence of total_q
// queries) writes the rows its sequences own only, [q_offsets[0],
// q_offsets[sequences]) clamped into [0, total_q], as its split kernel does:
// rows past the last sequence are left as they were, not filled from a
// workspace no block wrote.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"

#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <functional>
#include <limits>

using namespace mlir;
using namespace mlir::kiln;
using namespace mlir::kiln::detail;

namespace {

class CombineKernel : public KernelBuilderBase {
public:
  CombineKernel(Type elementType, int64_t valueDim, bool waitForGrid,
                bool ragged)
      : elementType(elementType), valueDim(valueDim), waitForGrid(waitForGrid),
        ragged(ragged) {}

  gpu::GPUFuncOp build(OpBuilder &moduleBuilder, Location loc);

private:
  Type elementType;
  int64_t valueDim;
  bool waitForGrid;
  bool ragged;
};

gpu::GPUFuncOp CombineKernel::build(OpBuilder &moduleBuilder, Location loc) {
  MLIRContext *ctx = moduleBuilder.getContext();
  auto ptrType = LLVM::LLVMPointerType::get(ctx, 1);
  Type i32 = moduleBuilder.getI32Type(), i64 = moduleBuilder.getI64Type();
  SmallVector<Type> argTypes;
  for (const std::string &kind : splitCombineArgumentKinds(ragged))
    argTypes.push_back(kind == "pointer" ? ptrType : kind == "i32" ? i32 : i64);
  // Each warp's column sums, [warp][column], for the block's final sum.
  int64_t columnsPerLane = llvm::divideCeil(valueDim, kWarpSize);
  auto partials = MemRefType::get(
      {kCombineWarps, columnsPerLane * kWarpSize}, moduleBuilder.getF32Type(),
      nullptr,
      gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup));
  auto func = gpu::GPUFuncOp::create(
      moduleBuilder, loc, splitCombineKernelName(elementType, valueDim, ragged),
      moduleBuilder.getFunctionType(argTypes, {}), TypeRange{partials},
      TypeRange{});
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                moduleBuilder.getUnitAttr());
  func.setKnownBlockSizeAttr(
      moduleBuilder.getDenseI32ArrayAttr({int32_t(kCombineThreads), 1, 1}));

  ImplicitLocOpBuilder builder(loc, ctx);
  builder.setInsertionPointToStart(&func.getBody().front());
  b = &builder;
  ValueRange args = func.getArguments();
  Value workspace = args[0], out = args[1];
  Value numSplits = toIndex(args[2]), batch = toIndex(args[3]),
        heads = toIndex(args[4]), qLen = toIndex(args[5]);
  Value outStrides[3] = {args[6], args[7], args[8]};

  // Launched early (programmatic stream serialization), the block may run
  // before the split kernel is done: nothing of the workspace is read
  // before that kernel has finished and its writes are visible.
  if (waitForGrid)
    NVVM::GriddepcontrolOp::create(builder, NVVM::GridDepActionKind::wait);
  Value threadId = gpu::ThreadIdOp::create(builder, gpu::Dimension::x);
  Value warp = arith::DivUIOp::create(builder, threadId, constIndex(kWarpSize));
  Value lane = arith::RemUIOp::create(builder, threadId, constIndex(kWarpSize));
  Value row = gpu::BlockIdOp::create(builder, gpu::Dimension::x);
  Value rows = mul(mul(batch, heads), qLen);
  Value inRows =
      arith::CmpIOp::create(builder, arith::CmpIPredicate::ult, row, rows);
  if (ragged) {
    // The rows the sequences own, as their offsets clamped into [0, q_len].
    Value qOffsets = args[9], sequences = toIndex(args[10]);
    auto offsetAt = [&](Value index) {
      Value address = LLVM::GEPOp::create(builder, ptrType, i32, qOffsets,
                                          ValueRange{toI64(index)});
      Value offset =
          toIndex(LLVM::LoadOp::create(builder, i32, address).getResult());
      return arith::MinSIOp::create(
          builder, arith::MaxSIOp::create(builder, offset, constIndex(0)),
          qLen);
    };
    Value first = offsetAt(constIndex(0));
    Value end = offsetAt(sequences);
    Value query = arith::RemUIOp::create(builder, row, qLen);
    Value owned = arith::AndIOp::create(
        builder,
        arith::CmpIOp::create(builder, arith::CmpIPredicate::sge, query,
                              first),
        arith::CmpIOp::create(builder, arith::CmpIPredicate::slt, query, end));
    inRows = arith::AndIOp::create(builder, inRows, owned);
  }
  auto inRange = scf::IfOp::create(builder, inRows, /*withElse=*/false);
  builder.setInsertionPointToStart(&inRange.getThenRegion().front());

  SplitSums sums =
      sumSplits(workspace, row, rows, numSplits, valueDim, lane, warp,
                kCombineWarps, kMaxSplitsPerLaunch);
  Value zero = constF32(0.0f);
  Value total = sums.total;
  Value dim = constIndex(valueDim);
  Value hasKeys =
      arith::CmpFOp::create(builder, arith::CmpFPredicate::OGT, total, zero);
  Value inverse = arith::SelectOp::create(
      builder, hasKeys, arith::DivFOp::create(builder, constF32(1.0f), total),
      zero);

  // The warps' sums meet in shared memory; thread t then owns columns t,
  // t + kCombineThreads, ... of out[b, h, q, :] in the output's element type.
  Value buffer = func.getWorkgroupAttributions()[0];
  for (int64_t c = 0; c < columnsPerLane; ++c)
    memref::StoreOp::create(
        builder, sums.columns[c], buffer,
        ValueRange{warp, add(sums.firstColumn, constIndex(c))});
  gpu::BarrierOp::create(builder);
  Value query = arith::RemUIOp::create(builder, row, qLen);
  Value sequenceHead = arith::DivUIOp::create(builder, row, qLen);
  Value head = arith::RemUIOp::create(builder, sequenceHead, heads);
  Value sequence = arith::DivUIOp::create(builder, sequenceHead, heads);
  Value rowOffset = add(
      add(mul(toI64(sequence), outStrides[0]), mul(toI64(head), outStrides[1])),
      mul(toI64(query), outStrides[2]));
  for (int64_t first = 0; first < valueDim; first += kCombineThreads) {
    Value column = add(threadId, constIndex(first));
    ifThen(
        arith::CmpIOp::create(builder, arith::CmpIPredicate::ult, column, dim),
        [&] {
          Value sum = zero;
          for (int64_t w = 0; w < kCombineWarps; ++w)
            sum = fadd(
                sum, memref::LoadOp::create(builder, buffer,
                                            ValueRange{constIndex(w), column}));
          Value value = fmul(sum, inverse);
          Value narrow =
              elementType.isF32()
                  ? value
                  : Value(arith::TruncFOp::create(builder, elementType, value));
          Value address =
              LLVM::GEPOp::create(builder, ptrType, elementType, out,
                                  ValueRange{add(rowOffset, toI64(column))});
          LLVM::StoreOp::create(builder, narrow, address);
        });
  }
  builder.setInsertionPointToEnd(&func.getBody().front());
  gpu::ReturnOp::create(builder);
  b = nullptr;
  return func;
}

} // namespace

std::string mlir::kiln::detail::splitCombineKernelName(Type elementType,
                                                       int64_t valueDim,
                                                       bool ragged) {
  return llvm::formatv("kiln_split_combine_{0}_dv{1}{2}",
                       getElementTypeName(elementType), valueDim,
                       ragged ? "_ragged" : "")
      .str();
}

SmallVector<std::string>
mlir::kiln::detail::splitCombineArgumentNames(bool ragged) {
  SmallVector<std::string> names = {
      "workspace",        "out",             "num_splits",
      "batch",            "q_heads",         "q_len",
      "out_stride_batch", "out_stride_head", "out_stride_seq"};
  if (ragged)
    names.append({"q_offsets", "sequences"});
  return names;
}

SmallVector<std::string>
mlir::kiln::detail::splitCombineArgumentKinds(bool ragged) {
  SmallVector<std::string> kinds = {"pointer", "pointer", "i32",
                                    "i32",     "i32",     "i32",
                                    "i64",     "i64",     "i64"};
  if (ragged)
    kinds.append({"pointer", "i32"});
  return kinds;
}

gpu::GPUFuncOp mlir::kiln::detail::buildSplitCombineKernel(
    OpBuilder &moduleBuilder, Location loc, Type elementType, int64_t valueDim,
    bool waitForGrid, bool ragged) {
  return CombineKernel(elementType, valueDim, waitForGrid, ragged)
      .build(moduleBuilder, loc);
}

KernelContract mlir::kiln::detail::splitCombineContract(Type elementType,
                                                        int64_t valueDim,
                                                        bool ragged) {
  KernelContract contract;
  contract.kind = KernelKind::SplitCombine;
  contract.threadsPerBlock = kCombineThreads;
  contract.rowsPerBlock = kCombineRowsPerBlock;
  contract.setArguments(splitCombineArgumentNames(ragged),
                        splitCombineArgumentKinds(ragged));
  contract.grid.blocks = GridRule::Blocks::OutputRows;
  contract.ragged = ragged;
  contract.dtype = getElementTypeName(elementType);
  contract.valueHeadDim = valueDim;
  return contract;
}
