//===- Prologue.cpp - Arguments and the block's work item -----------------===//
//
// Every attention kernel starts here: the gpu.func and its arguments (see
// the ABI in Passes.td), the block's work item (query block, head or KV
// head, sequence, split; the causal orders), the tensors' bases and the
// block's queries and key range, before the schedule's buildBody.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <tuple>

using namespace mlir;
using namespace mlir::kiln::detail;

gpu::GPUFuncOp AttentionKernelBuilder::createFunction(OpBuilder &moduleBuilder,
                                                      Location loc) {
  MLIRContext *ctx = moduleBuilder.getContext();
  auto ptrType = LLVM::LLVMPointerType::get(ctx, 1);
  Type i32 = moduleBuilder.getI32Type(), i64 = moduleBuilder.getI64Type(),
       f32 = moduleBuilder.getF32Type();
  SmallVector<Type> argTypes;
  SmallVector<int64_t> tensorMaps;
  for (const std::string &kind : argumentKinds()) {
    if (kind == "tensor_map")
      tensorMaps.push_back(argTypes.size());
    argTypes.push_back(kind == "pointer"      ? ptrType
                       : kind == "tensor_map" ? LLVM::LLVMPointerType::get(ctx)
                       : kind == "i32"        ? i32
                       : kind == "i64"        ? i64
                                              : f32);
  }
  auto func =
      gpu::GPUFuncOp::create(moduleBuilder, loc, spec.name(),
                             moduleBuilder.getFunctionType(argTypes, {}),
                             workgroupBuffers(ctx), TypeRange{});
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                moduleBuilder.getUnitAttr());
  func.setKnownBlockSizeAttr(
      moduleBuilder.getDenseI32ArrayAttr({int32_t(threadsPerBlock()), 1, 1}));
  if (!tensorMaps.empty())
    func->setAttr(kTensorMapArgsAttrName,
                  moduleBuilder.getDenseI64ArrayAttr(tensorMaps));
  if (int64_t blocks = minBlocksPerSM())
    func->setAttr("nvvm.minctasm", moduleBuilder.getI32IntegerAttr(blocks));
  return func;
}

void AttentionKernelBuilder::bindArguments(ValueRange args) {
  ImplicitLocOpBuilder &builder = *b;
  unsigned next = 0;
  q = args[next++];
  k = args[next++];
  v = args[next++];
  out = args[next++];
  if (spec.problem.paged) {
    pageTable = args[next++];
    kvLens = args[next++];
    if (spec.problem.ragged) {
      qOffsets = args[next++];
      plan = args[next++];
    }
  } else if (spec.problem.ragged) {
    kvOffsets = args[next++];
    qOffsets = args[next++];
    plan = args[next++];
  }
  maskPtr = spec.problem.maskType ? args[next++] : Value();
  biasPtr = spec.problem.biasType ? args[next++] : Value();
  batchSize = toIndex(args[next++]);
  numQueryHeads = toIndex(args[next++]);
  numKvHeads = toIndex(args[next++]);
  qLen = toIndex(args[next++]);
  totalQueries = qLen;
  if (spec.problem.paged) {
    maxPages = toIndex(args[next++]);
    numPages = toIndex(args[next++]);
    Value pageSizeArg = args[next++];
    pageSize = toIndex(pageSizeArg);
    // The runtime passes powers of two only.
    Value leadingZeros = LLVM::CountLeadingZerosOp::create(
        builder, builder.getI32Type(), pageSizeArg, /*is_zero_poison=*/false);
    pageShift = toIndex(arith::SubIOp::create(
        builder,
        arith::ConstantIntOp::create(builder, builder.getI32Type(), 31),
        leadingZeros));
    pageMask = sub(pageSize, constIndex(1));
    if (spec.problem.ragged)
      numSequences = toIndex(args[next++]);
  } else {
    kvLen = toIndex(args[next++]);
    totalKeys = kvLen;
    if (spec.problem.ragged)
      numSequences = toIndex(args[next++]);
  }
  Value scale = args[next++];
  auto strides = [&](int count) {
    SmallVector<Value> values(args.begin() + next, args.begin() + next + count);
    next += count;
    return values;
  };
  qStrides = strides(3);
  kStrides = strides(3);
  vStrides = strides(3);
  outStrides = strides(3);
  head = Value();
  if (spec.problem.paged)
    pageTableStride = strides(1).front();
  if (spec.problem.maskType)
    maskStrides = strides(4);
  if (spec.problem.biasType)
    biasStrides = strides(4);
  if (spec.launch.splitKV) {
    numSplits = toIndex(args[next++]);
    workspace = args[next++];
  }
  if (spec.problem.fp8Cache) {
    kScales = args[next++];
    vScales = args[next++];
  }
  if (spec.variant.warpSpecialized) {
    qMap = args[next++];
    kMap = args[next++];
    vMap = args[next++];
  }
  if (spec.variant.stagedTerms) {
    maskMap = spec.problem.maskType ? args[next++] : Value();
    biasMap = spec.problem.biasType ? args[next++] : Value();
  }
  scaleFactorPtr = spec.problem.scaleFactor ? args[next++] : Value();
  lsePtr = spec.problem.lse ? args[next++] : Value();
  scaleNatural = scale;
  if (!scaleFactorPtr)
    bindScale(scale);
}

void AttentionKernelBuilder::bindScaleFactor(Value headIndex) {
  // A run-time factor multiplies the scale once, here: every later use of
  // the scale (scores, exponents, FP8 descales) sees the product. It is
  // global memory, which the grid before may still be writing (a graph
  // computes the factor just before): read after griddepcontrol.wait.
  if (!scaleFactorPtr)
    return;
  Value address = scaleFactorPtr;
  if (spec.problem.perHeadScaleFactor) {
    // The block's head: grid y's query head, or its KV head where that is
    // a group of one query head (the selection sees to it).
    assert(!spec.variant.persistent &&
           "a persistent kernel's items change head after the prologue");
    address = LLVM::GEPOp::create(
        *b, LLVM::LLVMPointerType::get(b->getContext(), 1), b->getF32Type(),
        scaleFactorPtr, ValueRange{toI64(headIndex)});
  }
  bindScale(
      fmul(scaleNatural, LLVM::LoadOp::create(*b, b->getF32Type(), address)));
}

void AttentionKernelBuilder::bindScale(Value scale) {
  const float log2e = 1.4426950408889634f;
  scaleNatural = scale;
  scaleLog2 = fmul(scale, constF32(log2e));
}

// Heaviest first over sections of heads: the hardware starts blocks roughly
// in linear order, so the blocks are renumbered query block (last first),
// then (head, batch), within sections of as many heads as have K and V in
// kSectionBytes (they stay in L2 while the section runs). Each section ends
// on its lightest blocks, and so does the grid. 32-bit arithmetic: a grid's
// blocks fit, and 64-bit divisions cost a few hundred instructions.
void AttentionKernelBuilder::orderHeaviestFirst(Value &queryBlock,
                                                Value &headIndex) {
  ImplicitLocOpBuilder &builder = *b;
  auto i32 = [&](Value x) { return toI32(x); };
  auto mul32 = [&](Value x, Value y) {
    return arith::MulIOp::create(builder, x, y).getResult();
  };
  Value blocks = i32(gpu::GridDimOp::create(builder, gpu::Dimension::x));
  Value heads = i32(gpu::GridDimOp::create(builder, gpu::Dimension::y));
  Value batches = i32(gpu::GridDimOp::create(builder, gpu::Dimension::z));
  Value pairs = mul32(heads, batches);
  Value linear = arith::AddIOp::create(
      builder, i32(queryBlock),
      mul32(blocks, arith::AddIOp::create(builder, i32(headIndex),
                                          mul32(heads, i32(batch)))));
  orderItemHeaviestFirst(linear, blocks, heads, pairs, queryBlock, headIndex);
}

void AttentionKernelBuilder::orderItemHeaviestFirst(Value linear, Value blocks,
                                                    Value heads, Value pairs,
                                                    Value &queryBlock,
                                                    Value &headIndex) {
  ImplicitLocOpBuilder &builder = *b;
  auto i32 = [&](Value x) { return toI32(x); };
  auto mul32 = [&](Value x, Value y) {
    return arith::MulIOp::create(builder, x, y).getResult();
  };
  auto div32 = [&](Value x, Value y) {
    return arith::DivUIOp::create(builder, x, y).getResult();
  };
  auto rem32 = [&](Value x, Value y) {
    return arith::RemUIOp::create(builder, x, y).getResult();
  };
  auto const32 = [&](int64_t value) {
    return arith::ConstantIntOp::create(builder, builder.getI32Type(), value)
        .getResult();
  };
  constexpr int64_t kSectionBytes = 16 << 20;
  // K and V bytes of a head in KiB. Any section size from 1 to every head
  // numbers each block once, so an overflow (past 2^25 keys) would only
  // change the order.
  Value headKiB = arith::MaxUIOp::create(
      builder,
      div32(mul32(arith::MaxSIOp::create(builder, i32(kvLen), const32(1)),
                  const32(4 * spec.problem.headDim / 16)),
            const32(64)),
      const32(1));
  Value sectionHeads = arith::MinUIOp::create(
      builder, pairs,
      arith::MaxUIOp::create(
          builder, div32(const32(kSectionBytes / 1024), headKiB), const32(1)));
  Value sectionBlocks = mul32(sectionHeads, blocks);
  Value section = div32(linear, sectionBlocks);
  Value inSection =
      arith::SubIOp::create(builder, linear, mul32(section, sectionBlocks));
  Value firstPair = mul32(section, sectionHeads);
  Value headsHere = arith::MinUIOp::create(
      builder, sectionHeads, arith::SubIOp::create(builder, pairs, firstPair));
  Value order = div32(inSection, headsHere);
  Value pair =
      arith::AddIOp::create(builder, firstPair, rem32(inSection, headsHere));
  queryBlock = sub(sub(toIndex(blocks), constIndex(1)), toIndex(order));
  headIndex = toIndex(rem32(pair, heads));
  batch = toIndex(div32(pair, heads));
}

std::pair<Value, Value> AttentionKernelBuilder::scheduleBlock() {
  ImplicitLocOpBuilder &builder = *b;
  Value queryBlock = gpu::BlockIdOp::create(builder, gpu::Dimension::x);
  Value headIndex = gpu::BlockIdOp::create(builder, gpu::Dimension::y);
  batch = gpu::BlockIdOp::create(builder, gpu::Dimension::z);
  GridRule grid = gridRule();
  if (!grid.zIsBatch()) {
    // The plan orders the items (bindPlanItem); grid z is the splits.
    if (grid.timesSplits)
      splitIndex = batch;
    batch = Value();
    return {queryBlock, headIndex};
  }
  if (spec.problem.causal && spec.variant.warpSpecialized) {
    orderHeaviestFirst(queryBlock, headIndex);
  } else if (spec.problem.causal) {
    // Under a causal mask the last query blocks see the most keys; the
    // hardware starts blocks roughly in x order, so run those first and let
    // the short ones fill the tail of the grid.
    Value blocks = gpu::GridDimOp::create(builder, gpu::Dimension::x);
    queryBlock = sub(sub(blocks, constIndex(1)), queryBlock);
  }
  if (grid.timesSplits) {
    // Grid z is split-major: block z works on split z / batch of sequence
    // z % batch; launched with clusters of the splits along z, split-minor.
    // 32-bit divisions: a grid's z fits, and a 64-bit one is a branch and
    // a slow path in front of the key count's load.
    Value z = batch;
    splitIndex = divU32(z, batchSize);
    batch = remU32(z, batchSize);
    if (spec.launch.clusterSplits) {
      Value clusterBlocks = NVVM::ClusterDim::create(
          builder, builder.getI32Type(), LLVM::ConstantRangeAttr());
      clustered = arith::CmpIOp::create(
          builder, arith::CmpIPredicate::ugt, clusterBlocks,
          arith::ConstantIntOp::create(builder, builder.getI32Type(), 1));
      splitIndex = arith::SelectOp::create(builder, clustered,
                                           remU32(z, numSplits), splitIndex);
      batch = arith::SelectOp::create(builder, clustered, divU32(z, numSplits),
                                      batch);
    }
  }
  return {queryBlock, headIndex};
}

void AttentionKernelBuilder::bindWorkItem(Value item, Value queryBlocks) {
  ImplicitLocOpBuilder &builder = *b;
  // 32-bit divisions, as for a grid: the runtime launches a persistent
  // kernel only when its items fit.
  Value blocks = toI32(queryBlocks);
  Value heads = toI32(numQueryHeads);
  Value linear = toI32(item);
  Value queryBlock = toIndex(arith::RemUIOp::create(builder, linear, blocks));
  Value pair = arith::DivUIOp::create(builder, linear, blocks);
  Value headIndex = toIndex(arith::RemUIOp::create(builder, pair, heads));
  batch = toIndex(arith::DivUIOp::create(builder, pair, heads));
  if (spec.problem.causal)
    orderItemHeaviestFirst(
        linear, blocks, heads,
        arith::MulIOp::create(builder, heads, toI32(batchSize)), queryBlock,
        headIndex);
  bindHeads(headIndex);
  bindQueries(queryBlock);
  kvOffset = sub(kvLen, qLen);
  std::tie(kvBegin, kvEnd) = keyRange(kvLen);
}

void AttentionKernelBuilder::bindHeads(Value headIndex) {
  ImplicitLocOpBuilder &builder = *b;
  threadId = gpu::ThreadIdOp::create(builder, gpu::Dimension::x);
  warp = arith::DivUIOp::create(builder, threadId, constIndex(kWarpSize));
  lane = arith::RemUIOp::create(builder, threadId, constIndex(kWarpSize));
  // Head and row divisions in 32 bits (heads and q_len · group fit, as the
  // grid does): a 64-bit one is a branch, which keeps the key count's load
  // behind it.
  group = divU32(numQueryHeads, numKvHeads);
  if (gridRule().headsAreKvHeads()) {
    // Grid y runs over KV heads; the block's rows are (query, head) pairs.
    kvHead = headIndex;
  } else {
    head = headIndex;
    kvHead = divU32(head, group);
  }
  if (spec.problem.paged) {
    // Cache offsets of a KV head; a key's page and slot are added per row.
    kBase = mul(toI64(kvHead), kStrides[2]);
    vBase = mul(toI64(kvHead), vStrides[2]);
  } else if (spec.problem.ragged) {
    // Packed keys: the sequence starts at its first key row.
    kBase = tensorBase(kStrides, kvHead, firstKeyOfSequence);
    vBase = tensorBase(vStrides, kvHead, firstKeyOfSequence);
  } else {
    kBase = tensorBase(kStrides, kvHead);
    vBase = tensorBase(vStrides, kvHead);
  }
  if (spec.problem.maskType) {
    maskStrideQ = maskStrides[2];
    maskStrideK = maskStrides[3];
  }
  if (spec.problem.biasType) {
    biasStrideQ = biasStrides[2];
    biasStrideK = biasStrides[3];
  }
  if (head) {
    qBase = tensorBase(qStrides, head);
    outBase = tensorBase(outStrides, head);
    if (spec.problem.maskType)
      maskBase = tensorBase(maskStrides, head);
    if (spec.problem.biasType)
      biasBase = tensorBase(biasStrides, head);
    // (Kept only where heads are packed, or where staged tiles are copied
    // by (batch, head) coordinates.)
    if (!spec.variant.stagedTerms) {
      maskStrides.clear();
      biasStrides.clear();
    }
  }
}

// The block's queries: rowsPerBlock rows, or rowsPerBlock (query, head)
// pairs, query-major, when heads are packed.
void AttentionKernelBuilder::bindQueries(Value queryBlock) {
  Value firstRow = mul(queryBlock, constIndex(rowsPerBlock()));
  Value endRow = add(firstRow, constIndex(rowsPerBlock()));
  if (spec.launch.packQueryHeads) {
    firstPackedRow = firstRow;
    firstQuery = divU32(firstRow, group);
    endQuery = ceilDivU32(endRow, group);
  } else {
    firstQuery = firstRow;
    endQuery = endRow;
  }
}

Value AttentionKernelBuilder::bindPlanItem(Value &keyCount) {
  ImplicitLocOpBuilder &builder = *b;
  auto ptrType = LLVM::LLVMPointerType::get(builder.getContext(), 1);
  Type i32 = builder.getI32Type();
  auto loadI32 = [&](Value base, Value index) {
    Value address =
        LLVM::GEPOp::create(builder, ptrType, i32, base, ValueRange{index});
    return LLVM::LoadOp::create(builder, i32, address).getResult();
  };
  // Item x of the plan: (sequence, query block), one 8-byte load. A
  // sequence outside [0, sequences) is an empty item (the plan's tail).
  Value item = toI64(gpu::BlockIdOp::create(builder, gpu::Dimension::x));
  Value address = LLVM::GEPOp::create(builder, ptrType, i32, plan,
                                      ValueRange{arith::MulIOp::create(
                                          builder, item,
                                          arith::ConstantIntOp::create(
                                              builder, builder.getI64Type(),
                                              2))});
  Value entry = LLVM::LoadOp::create(builder, VectorType::get({2}, i32),
                                     address, /*alignment=*/8);
  Value sequence = toIndex(LLVM::ExtractElementOp::create(
      builder, entry, arith::ConstantIntOp::create(builder, i32, 0)));
  Value queryBlock = toIndex(LLVM::ExtractElementOp::create(
      builder, entry, arith::ConstantIntOp::create(builder, i32, 1)));
  Value valid = arith::CmpIOp::create(builder, arith::CmpIPredicate::ult,
                                      toI32(sequence), toI32(numSequences));
  batch = arith::SelectOp::create(builder, valid, sequence, constIndex(0));
  // The sequence's rows, clamped into [0, total_q] and ordered, so that
  // bad offsets never address outside q and out; its key count (a packed
  // sequence's key rows, clamped the same way into [0, total_kv]). The
  // loads go first, the clamps after.
  auto rowAt = [&](Value offsets, Value index) {
    return toIndex(loadI32(offsets, toI64(index)));
  };
  Value first = rowAt(qOffsets, batch);
  Value end = rowAt(qOffsets, add(batch, constIndex(1)));
  Value firstKey, endKey;
  if (spec.problem.paged) {
    keyCount = loadI32(kvLens, toI64(batch));
  } else {
    firstKey = rowAt(kvOffsets, batch);
    endKey = rowAt(kvOffsets, add(batch, constIndex(1)));
  }
  auto clampRows = [&](Value &from, Value &to, Value total) {
    from = arith::MinSIOp::create(
        builder, arith::MaxSIOp::create(builder, from, constIndex(0)), total);
    to = arith::MinSIOp::create(
        builder, arith::MaxSIOp::create(builder, to, from), total);
  };
  clampRows(first, end, totalQueries);
  if (!spec.problem.paged) {
    clampRows(firstKey, endKey, totalKeys);
    firstKeyOfSequence = firstKey;
    keyCount = toI32(sub(endKey, firstKey));
  }
  firstRowOfSequence = first;
  qLen = arith::SelectOp::create(builder, valid, sub(end, first),
                                 constIndex(0));
  keyCount = arith::SelectOp::create(
      builder, valid, keyCount, arith::ConstantIntOp::create(builder, i32, 0));
  return arith::MaxSIOp::create(builder, queryBlock, constIndex(0));
}

gpu::GPUFuncOp AttentionKernelBuilder::build(OpBuilder &moduleBuilder,
                                             Location loc) {
  declareGlobals(moduleBuilder, loc);
  gpu::GPUFuncOp func = createFunction(moduleBuilder, loc);
  ImplicitLocOpBuilder builder(loc, moduleBuilder.getContext());
  builder.setInsertionPointToStart(&func.getBody().front());
  b = &builder;

  bindArguments(func.getArguments());
  auto [queryBlock, headIndex] = scheduleBlock();
  // Paged sites: the sequence's key count is read first of all (it gates
  // the block's key range, whose table entries gate the first copies); it
  // is clamped where first used, after the reads that need not wait for it.
  Value keyCount;
  // Nothing above reads global memory (the parameters are constants).
  if (spec.launch.waitForGrid)
    NVVM::GriddepcontrolOp::create(builder, NVVM::GridDepActionKind::wait);
  bindScaleFactor(headIndex);
  if (spec.problem.ragged) {
    queryBlock = bindPlanItem(keyCount);
  } else if (spec.problem.paged) {
    auto ptrType = LLVM::LLVMPointerType::get(builder.getContext(), 1);
    Value address = LLVM::GEPOp::create(builder, ptrType, builder.getI32Type(),
                                        kvLens, ValueRange{toI64(batch)});
    keyCount = LLVM::LoadOp::create(builder, builder.getI32Type(), address);
  }
  bindHeads(headIndex);
  bindQueries(queryBlock);
  if (spec.problem.paged) {
    // The range the block would have if its sequence filled its row of the
    // page table: reads of it (readAhead) go out while the key count is in
    // flight. Then the count, clamped to what the row can address (a bad
    // count never reads past the table).
    Value fullRow = mul(maxPages, pageSize);
    readAhead(keyRange(fullRow).first, fullRow);
    kvLen = arith::MinSIOp::create(
        builder,
        arith::MaxSIOp::create(builder, toIndex(keyCount), constIndex(0)),
        fullRow);
  } else if (spec.problem.ragged) {
    kvLen = toIndex(keyCount);
  }
  kvOffset = sub(kvLen, qLen);
  std::tie(kvBegin, kvEnd) = keyRange(kvLen);

  buildBody(func);
  if (spec.launch.clusterSplits)
    emitClusterCombine();
  if (spec.launch.launchDependents)
    NVVM::GriddepcontrolOp::create(builder,
                                   NVVM::GridDepActionKind::launch_dependents);
  gpu::ReturnOp::create(builder);
  b = nullptr;
  return func;
}
