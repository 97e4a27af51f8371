//===- AttentionKernel.cpp - What every attention kernel shares -*- C++ -*-===//
//
// The specialisation name, the argument ABI, the prologue and the masking of
// scores, shared by the scalar and the tensor-core kernels.
//
//===----------------------------------------------------------------------===//

#include "AttentionKernel.h"

#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include "llvm/ADT/bit.h"
#include "llvm/Support/FormatVariadic.h"

#include <array>
#include <limits>

using namespace mlir;
using namespace mlir::kiln;
using namespace mlir::kiln::detail;

std::string KernelSpec::name() const {
  std::string result = llvm::formatv("kiln_attention_{0}{1}_d{2}",
                                     warpSpecialized ? "ws_"
                                     : tensorCores   ? "mma_"
                                     : tf32 ? (tf32Split ? "3xtf32_" : "tf32_")
                                            : "",
                                     getElementTypeName(elementType), headDim);
  if (paged)
    result = "kiln_paged_attention" +
             result.substr(std::string("kiln_attention").size());
  if (valueHeadDim)
    result += llvm::formatv("_dv{0}", *valueHeadDim).str();
  if (causal)
    result += "_causal";
  if (window)
    result += llvm::formatv("_w{0}", *window).str();
  if (windowRight)
    result += llvm::formatv("_r{0}", *windowRight).str();
  if (softcap)
    result +=
        llvm::formatv("_cap{0:x}", llvm::bit_cast<uint32_t>(*softcap)).str();
  if (maskType)
    result += "_mask" + getElementTypeName(maskType);
  if (biasType)
    result += "_bias" + getElementTypeName(biasType);
  if (maskedScore)
    result +=
        llvm::formatv("_fill{0:x}", llvm::bit_cast<uint32_t>(*maskedScore))
            .str();
  return result;
}

SmallVector<std::string> AttentionKernelBuilder::argumentNames() const {
  if (spec.paged) {
    SmallVector<std::string> names = {
        "q",         "key_cache", "value_cache", "out",      "page_table",
        "kv_lens",   "batch",     "q_heads",     "kv_heads", "q_len",
        "max_pages", "num_pages", "page_size",   "scale"};
    for (const char *tensor : {"q", "key_cache", "value_cache", "out"}) {
      bool cache = tensor[0] == 'k' || tensor[0] == 'v';
      for (const char *axis : cache ? std::array{"page", "slot", "head"}
                                    : std::array{"batch", "head", "seq"})
        names.push_back(llvm::formatv("{0}_stride_{1}", tensor, axis));
    }
    names.push_back("page_table_stride_batch");
    if (spec.splitKV)
      names.append({"num_splits", "workspace"});
    return names;
  }
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
  for (auto [present, tensor] : {std::pair{bool(spec.maskType), "mask"},
                                 std::pair{bool(spec.biasType), "bias"}})
    if (present)
      for (const char *axis : {"batch", "head", "q", "k"})
        names.push_back(llvm::formatv("{0}_stride_{1}", tensor, axis));
  if (spec.splitKV)
    names.append({"num_splits", "workspace"});
  if (spec.warpSpecialized)
    names.append({"q_map", "k_map", "v_map"});
  return names;
}

SmallVector<std::string> AttentionKernelBuilder::argumentKinds() const {
  if (spec.paged) {
    SmallVector<std::string> kinds(6, "pointer");
    kinds.append(7, "i32");
    kinds.push_back("f32");
    kinds.append(13, "i64");
    if (spec.splitKV)
      kinds.append({"i32", "pointer"});
    return kinds;
  }
  int64_t numPointers = 4 + bool(spec.maskType) + bool(spec.biasType);
  SmallVector<std::string> kinds(numPointers, "pointer");
  kinds.append(5, "i32");
  kinds.push_back("f32");
  kinds.append(12 + 4 * (bool(spec.maskType) + bool(spec.biasType)), "i64");
  if (spec.splitKV)
    kinds.append({"i32", "pointer"});
  if (spec.warpSpecialized)
    kinds.append(3, "tensor_map");
  return kinds;
}

Value KernelBuilderBase::constIndex(int64_t value) {
  return arith::ConstantIndexOp::create(*b, value);
}
Value KernelBuilderBase::constF32(float value) {
  return arith::ConstantOp::create(*b, b->getF32FloatAttr(value));
}
Value KernelBuilderBase::toIndex(Value v) {
  return arith::IndexCastOp::create(*b, b->getIndexType(), v);
}
Value KernelBuilderBase::toI32(Value v) {
  return arith::IndexCastOp::create(*b, b->getI32Type(), v);
}
Value KernelBuilderBase::toI64(Value v) {
  return arith::IndexCastOp::create(*b, b->getI64Type(), v);
}
Value KernelBuilderBase::divU32(Value x, Value y) {
  return toIndex(arith::DivUIOp::create(*b, toI32(x), toI32(y)));
}
Value KernelBuilderBase::remU32(Value x, Value y) {
  return toIndex(arith::RemUIOp::create(*b, toI32(x), toI32(y)));
}
Value KernelBuilderBase::ceilDivU32(Value x, Value y) {
  return toIndex(arith::CeilDivUIOp::create(*b, toI32(x), toI32(y)));
}
Value KernelBuilderBase::add(Value x, Value y) {
  return arith::AddIOp::create(*b, x, y);
}
Value KernelBuilderBase::sub(Value x, Value y) {
  return arith::SubIOp::create(*b, x, y);
}
Value KernelBuilderBase::mul(Value x, Value y) {
  return arith::MulIOp::create(*b, x, y);
}
Value KernelBuilderBase::fadd(Value x, Value y) {
  return arith::AddFOp::create(*b, x, y);
}
Value KernelBuilderBase::fmul(Value x, Value y) {
  return arith::MulFOp::create(*b, x, y);
}
Value KernelBuilderBase::fmax(Value x, Value y) {
  return arith::MaximumFOp::create(*b, x, y);
}

void KernelBuilderBase::ifBelow(Value index, int64_t bound,
                                llvm::function_ref<void()> body) {
  auto ifOp =
      scf::IfOp::create(*b,
                        arith::CmpIOp::create(*b, arith::CmpIPredicate::ult,
                                              index, constIndex(bound)),
                        /*withElse=*/false);
  OpBuilder::InsertionGuard guard(*b);
  b->setInsertionPointToStart(&ifOp.getThenRegion().front());
  body();
}

SmallVector<Value>
KernelBuilderBase::ifElse(Value condition, TypeRange types,
                          llvm::function_ref<SmallVector<Value>()> thenValues,
                          llvm::function_ref<SmallVector<Value>()> elseValues) {
  assert((elseValues || types.empty()) && "results need an else");
  bool withElse = static_cast<bool>(elseValues);
  auto ifOp = scf::IfOp::create(*b, types, condition, withElse);
  OpBuilder::InsertionGuard guard(*b);
  b->setInsertionPointToStart(&ifOp.getThenRegion().front());
  SmallVector<Value> results = thenValues();
  if (!types.empty())
    scf::YieldOp::create(*b, results);
  if (withElse) {
    b->setInsertionPointToStart(&ifOp.getElseRegion().front());
    results = elseValues();
    if (!types.empty())
      scf::YieldOp::create(*b, results);
  }
  return SmallVector<Value>(ifOp.getResults());
}

Value KernelBuilderBase::exp2(Value x) {
  return LLVM::CallIntrinsicOp::create(
             *b, b->getF32Type(),
             b->getStringAttr("llvm.nvvm.ex2.approx.ftz.f32"), ValueRange{x})
      .getResult(0);
}

Value KernelBuilderBase::log2(Value x) {
  return LLVM::CallIntrinsicOp::create(
             *b, b->getF32Type(), b->getStringAttr("llvm.nvvm.lg2.approx.f32"),
             ValueRange{x})
      .getResult(0);
}

Value KernelBuilderBase::tanh(Value x) {
  Value twoXLog2e = fmul(x, constF32(2.0f * 1.4426950408889634f));
  Value e = exp2(twoXLog2e);
  Value ratio =
      arith::DivFOp::create(*b, constF32(2.0f), fadd(e, constF32(1.0f)));
  return arith::SubFOp::create(*b, constF32(1.0f), ratio);
}

Value KernelBuilderBase::loadGlobalAsF32(Value base, Type elementType,
                                         Value offset) {
  auto ptrType = LLVM::LLVMPointerType::get(b->getContext(), 1);
  Value address =
      LLVM::GEPOp::create(*b, ptrType, elementType, base, ValueRange{offset});
  Value loaded = LLVM::LoadOp::create(*b, elementType, address);
  if (elementType.isF32() || elementType.isInteger(1))
    return loaded;
  return arith::ExtFOp::create(*b, b->getF32Type(), loaded);
}

std::pair<Value, Value> AttentionKernelBuilder::packedRow(Value rowInBlock) {
  // In 32 bits (q_len · group fits, as the grid's x does): a 64-bit
  // division is a branch and twice the instructions, and the kernels take
  // this for every row a thread copies or computes.
  Value pair = add(firstPackedRow, rowInBlock);
  Value query = divU32(pair, group);
  Value head = add(mul(kvHead, group), remU32(pair, group));
  return {query, head};
}

void AttentionKernelBuilder::emitClusterCombine() {
  assert(spec.splitKV && spec.packQueryHeads && "packed split kernels");
  ImplicitLocOpBuilder &builder = *b;
  auto ifClustered = scf::IfOp::create(builder, clustered, /*withElse=*/false);
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(&ifClustered.getThenRegion().front());
  // Every thread of the cluster arrives after its partial results are
  // written (release) and waits for all of them (acquire): the cluster's
  // workspace rows are then visible to every block of it.
  NVVM::ClusterArriveOp::create(builder, UnitAttr());
  NVVM::ClusterWaitOp::create(builder, UnitAttr());
  // The block's rows that exist: (query, head) pairs below q_len · group.
  Value rowsHere = arith::MinSIOp::create(
      builder,
      arith::MaxSIOp::create(builder, sub(mul(qLen, group), firstPackedRow),
                             constIndex(0)),
      constIndex(rowsPerBlock()));
  Value rowsPerSplit = mul(mul(batchSize, numQueryHeads), qLen);
  int64_t warps = threadsPerBlock() / kWarpSize;
  int64_t valueDim = spec.valueDim();
  auto loop = scf::ForOp::create(builder, add(splitIndex, mul(numSplits, warp)),
                                 rowsHere, mul(numSplits, constIndex(warps)));
  builder.setInsertionPointToStart(loop.getBody());
  auto [query, rowHead] = packedRow(loop.getInductionVar());
  Value row = add(mul(add(mul(batch, numQueryHeads), rowHead), qLen), query);
  SplitSums sums =
      sumSplits(workspace, row, rowsPerSplit, numSplits, valueDim, lane,
                constIndex(0), /*stride=*/1, kMaxClusterSplits);
  Value inverse = reciprocalOrZero(sums.total);
  Value rowOffset =
      add(tensorBase(outStrides, rowHead), mul(toI64(query), outStrides[2]));
  for (size_t c = 0; c < sums.columns.size(); ++c) {
    Value column = add(sums.firstColumn, constIndex(c));
    auto store = [&] {
      storeOutput(fmul(sums.columns[c], inverse),
                  add(rowOffset, toI64(column)));
    };
    if (int64_t(sums.columns.size()) * kWarpSize == valueDim) {
      store();
      continue;
    }
    // Lanes past the value head dim hold copies: not stored.
    ifBelow(column, valueDim, store);
  }
}

void AttentionKernelBuilder::storeOutput(Value value, Value offset) {
  if (!spec.elementType.isF32())
    value = arith::TruncFOp::create(*b, spec.elementType, value);
  auto ptrType = LLVM::LLVMPointerType::get(b->getContext(), 1);
  Value address = LLVM::GEPOp::create(*b, ptrType, spec.elementType, out,
                                      ValueRange{offset});
  LLVM::StoreOp::create(*b, value, address);
}

void mlir::kiln::detail::declareDynamicShared(OpBuilder &moduleBuilder,
                                             Location loc) {
  Operation *module = moduleBuilder.getInsertionBlock()->getParentOp();
  if (SymbolTable::lookupSymbolIn(module, kDynamicSharedName))
    return;
  auto arrayType =
      LLVM::LLVMArrayType::get(IntegerType::get(module->getContext(), 8), 0);
  LLVM::GlobalOp::create(moduleBuilder, loc, arrayType, /*isConstant=*/false,
                         LLVM::Linkage::External, kDynamicSharedName,
                         Attribute(), /*alignment=*/1024, /*addrSpace=*/3);
}

SmallVector<Value> KernelBuilderBase::onlineSoftmaxStep(
    ArrayRef<Value> scores, ValueRange state, SmallVector<Value> &newState,
    SmallVector<Value> &acc, SmallVector<Value> *alphas, Value scoreScale) {
  Value negInf = constF32(-std::numeric_limits<float>::infinity());
  Value zero = constF32(0.0f);
  int64_t keyBlocks = scores.size() / 4;
  newState.assign(4, Value());
  Value alpha[2];
  SmallVector<Value> probabilities(scores.size());
  for (int64_t r = 0; r < 2; ++r) {
    Value tileMax = negInf;
    for (int64_t blockIndex = 0; blockIndex < keyBlocks; ++blockIndex)
      for (int64_t e = 2 * r; e < 2 * r + 2; ++e)
        tileMax = fmax(tileMax, scores[4 * blockIndex + e]);
    tileMax = butterfly(tileMax, /*isMax=*/true, 2);
    if (scoreScale)
      tileMax = fmul(tileMax, scoreScale);
    Value newMax = fmax(state[r], tileMax);
    // A row that has seen only hidden keys keeps max = -inf; 0 as the
    // offset makes exp2 give 0 rather than NaN.
    Value isEmpty =
        arith::CmpFOp::create(*b, arith::CmpFPredicate::OEQ, newMax, negInf);
    Value safeMax = arith::SelectOp::create(*b, isEmpty, zero, newMax);
    alpha[r] = exp2(arith::SubFOp::create(*b, state[r], safeMax));
    Value sum = fmul(state[2 + r], alpha[r]);
    Value negMax = scoreScale ? arith::NegFOp::create(*b, safeMax) : Value();
    for (int64_t blockIndex = 0; blockIndex < keyBlocks; ++blockIndex)
      for (int64_t e = 2 * r; e < 2 * r + 2; ++e) {
        int64_t i = 4 * blockIndex + e;
        probabilities[i] = exp2(
            scoreScale
                ? LLVM::FMAOp::create(*b, scores[i], scoreScale, negMax)
                      .getResult()
                : arith::SubFOp::create(*b, scores[i], safeMax).getResult());
        sum = fadd(sum, probabilities[i]);
      }
    newState[r] = newMax;
    newState[2 + r] = sum;
  }
  if (alphas)
    alphas->assign({alpha[0], alpha[1]});
  acc.assign(state.begin() + 4, state.end());
  for (int64_t i = 0; i < (int64_t)acc.size(); ++i)
    acc[i] = fmul(acc[i], alpha[(i % 4) / 2]);
  return probabilities;
}

Value KernelBuilderBase::reciprocalOrZero(Value sum) {
  Value zero = constF32(0.0f);
  Value hasKeys =
      arith::CmpFOp::create(*b, arith::CmpFPredicate::OGT, sum, zero);
  Value inverse = arith::DivFOp::create(*b, constF32(1.0f), sum);
  return arith::SelectOp::create(*b, hasKeys, inverse, zero);
}

Value KernelBuilderBase::packPair(Value low, Value high, Type elementType) {
  Type i32 = b->getI32Type();
  auto pairF32 = VectorType::get({2}, b->getF32Type());
  Value pair = LLVM::PoisonOp::create(*b, pairF32);
  pair = LLVM::InsertElementOp::create(
      *b, pair, low, arith::ConstantIntOp::create(*b, i32, 0));
  pair = LLVM::InsertElementOp::create(
      *b, pair, high, arith::ConstantIntOp::create(*b, i32, 1));
  Value narrow =
      LLVM::FPTruncOp::create(*b, VectorType::get({2}, elementType), pair);
  return LLVM::BitcastOp::create(*b, i32, narrow);
}

Value KernelBuilderBase::inlinePtx(Type resultType, ValueRange operands,
                                   StringRef text, StringRef constraints) {
  MLIRContext *ctx = b->getContext();
  auto asmOp = LLVM::InlineAsmOp::create(
      *b, resultType ? resultType : LLVM::LLVMVoidType::get(ctx), operands,
      text, constraints, /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(ctx, LLVM::AsmDialect::AD_ATT),
      /*operand_attrs=*/ArrayAttr());
  return resultType ? asmOp.getRes() : Value();
}

void KernelBuilderBase::mmaSync(ArrayRef<Value> a, ArrayRef<Value> bFragment,
                                MutableArrayRef<Value> acc, int64_t k,
                                NVVM::MMATypes type) {
  Type f32 = b->getF32Type();
  auto structType =
      LLVM::LLVMStructType::getLiteral(b->getContext(), {f32, f32, f32, f32});
  Value result = NVVM::MmaOp::create(
      *b, structType, SmallVector<Value>(a), SmallVector<Value>(bFragment),
      SmallVector<Value>(acc), ArrayRef<int64_t>{16, 8, k}, std::nullopt,
      std::nullopt, std::array<NVVM::MMATypes, 2>{type, type},
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                     NVVM::MMALayout::col});
  for (int64_t i = 0; i < 4; ++i)
    acc[i] = LLVM::ExtractValueOp::create(*b, result, i);
}

Value KernelBuilderBase::butterfly(Value value, bool isMax,
                                   int32_t firstOffset) {
  for (int32_t offset = firstOffset; offset > 0; offset /= 2) {
    Value other = gpu::ShuffleOp::create(*b, value, offset, kWarpSize,
                                         gpu::ShuffleMode::XOR)
                      .getShuffleResult();
    value = isMax ? fmax(value, other) : fadd(value, other);
  }
  return value;
}

Value AttentionKernelBuilder::tensorBase(ArrayRef<Value> tensorStrides,
                                         Value headIndex) {
  return add(mul(toI64(batch), tensorStrides[0]),
             mul(toI64(headIndex), tensorStrides[1]));
}

Value AttentionKernelBuilder::finishScore(Value score, Value queryRow,
                                          Value key, Value rowMaskBase,
                                          Value rowBiasBase, bool raw) {
  const float log2e = 1.4426950408889634f;
  bool additive = spec.addsToScores();
  assert((!raw || (!spec.softcap && !additive && !spec.maskedScore)) &&
         "raw scores take no score function or additive terms");
  if (raw) {
    // Scaled in the softmax step.
  } else if (spec.softcap) {
    // softcap·tanh(scale·dot / softcap), in natural units when additive
    // terms follow, else straight into log2 units.
    Value scaled = fmul(score, scaleNatural);
    Value capped = tanh(fmul(scaled, constF32(1.0f / *spec.softcap)));
    score = fmul(capped, constF32(*spec.softcap * (additive ? 1.0f : log2e)));
  } else if (additive) {
    score = fmul(score, scaleNatural);
  } else {
    score = fmul(score, scaleLog2);
  }

  // Clamp the indices used for mask and bias loads so that lanes past the end
  // never read outside the tensors; their scores are hidden below anyway.
  Value lastQuery = sub(qLen, constIndex(1));
  Value lastKey = sub(kvLen, constIndex(1));
  Value safeQuery = toI64(arith::MinSIOp::create(*b, queryRow, lastQuery));
  Value safeKey = toI64(arith::MinSIOp::create(*b, key, lastKey));

  Value inRange =
      arith::CmpIOp::create(*b, arith::CmpIPredicate::slt, key, kvLen);
  Value visible;
  auto andVisible = [&](Value condition) {
    visible = visible
                  ? arith::AndIOp::create(*b, visible, condition).getResult()
                  : condition;
  };
  if (spec.biasType) {
    Value offset = add(rowBiasBase, add(mul(safeQuery, biasStrideQ),
                                        mul(safeKey, biasStrideK)));
    score = fadd(score, loadGlobalAsF32(biasPtr, spec.biasType, offset));
  }
  if (spec.maskType) {
    Value offset = add(rowMaskBase, add(mul(safeQuery, maskStrideQ),
                                        mul(safeKey, maskStrideK)));
    Value mask = loadGlobalAsF32(maskPtr, spec.maskType, offset);
    if (spec.maskType.isInteger(1))
      andVisible(mask);
    else
      score = fadd(score, mask);
  }
  if (additive)
    score = toLog2Saturated(score);
  if (std::optional<int64_t> right = spec.rightBound()) {
    // Bottom-right aligned: key <= row + (kvLen - qLen) + right.
    Value diagonal = add(queryRow, kvOffset);
    andVisible(arith::CmpIOp::create(*b, arith::CmpIPredicate::sle, key,
                                     add(diagonal, constIndex(*right))));
    if (spec.window) {
      Value oldest = sub(diagonal, constIndex(*spec.window));
      andVisible(
          arith::CmpIOp::create(*b, arith::CmpIPredicate::sgt, key, oldest));
    }
  }
  Value negInf = constF32(-std::numeric_limits<float>::infinity());
  if (visible) {
    // A hidden key scores -inf, or the graph's fill (see masked_score).
    Value hiddenScore =
        spec.maskedScore ? constF32(saturatedLog2(*spec.maskedScore)) : negInf;
    score = arith::SelectOp::create(*b, visible, score, hiddenScore);
  }
  return arith::SelectOp::create(*b, inRange, score, negInf);
}

float AttentionKernelBuilder::saturatedLog2(float value) {
  const double log2e = 1.4426950408889634;
  double scaled = double(value) * log2e;
  double lowest = std::numeric_limits<float>::lowest();
  return float(std::max(scaled, lowest));
}

Value AttentionKernelBuilder::toLog2Saturated(Value score) {
  // A finite fill such as finfo.min overflows to -inf when multiplied by
  // log2(e); it must stay finite, so that a row hidden entirely by finite
  // fills averages its keys as the graph does. A real -inf stays -inf.
  const float log2e = 1.4426950408889634f;
  Value negInf = constF32(-std::numeric_limits<float>::infinity());
  Value scaled =
      arith::MaximumFOp::create(*b, fmul(score, constF32(log2e)),
                                constF32(std::numeric_limits<float>::lowest()));
  Value isNegInf =
      arith::CmpFOp::create(*b, arith::CmpFPredicate::OEQ, score, negInf);
  return arith::SelectOp::create(*b, isNegInf, negInf, scaled);
}

gpu::GPUFuncOp AttentionKernelBuilder::build(OpBuilder &moduleBuilder,
                                             Location loc) {
  MLIRContext *ctx = moduleBuilder.getContext();
  declareGlobals(moduleBuilder, loc);
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

  ImplicitLocOpBuilder builder(loc, ctx);
  builder.setInsertionPointToStart(&func.getBody().front());
  b = &builder;

  // Arguments, by ABI position.
  ValueRange args = func.getArguments();
  unsigned next = 0;
  q = args[next++];
  k = args[next++];
  v = args[next++];
  out = args[next++];
  if (spec.paged) {
    pageTable = args[next++];
    kvLens = args[next++];
  }
  maskPtr = spec.maskType ? args[next++] : Value();
  biasPtr = spec.biasType ? args[next++] : Value();
  batchSize = toIndex(args[next++]);
  numQueryHeads = toIndex(args[next++]);
  numKvHeads = toIndex(args[next++]);
  qLen = toIndex(args[next++]);
  if (spec.paged) {
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
  } else {
    kvLen = toIndex(args[next++]);
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
  SmallVector<Value> maskStrides, biasStrides;
  head = Value();
  if (spec.paged)
    pageTableStride = strides(1).front();
  if (spec.maskType)
    maskStrides = strides(4);
  if (spec.biasType)
    biasStrides = strides(4);
  if (spec.splitKV) {
    numSplits = toIndex(args[next++]);
    workspace = args[next++];
  }
  if (spec.warpSpecialized) {
    qMap = args[next++];
    kMap = args[next++];
    vMap = args[next++];
  }

  const float log2e = 1.4426950408889634f;
  scaleNatural = scale;
  scaleLog2 = fmul(scale, constF32(log2e));

  Value queryBlock = gpu::BlockIdOp::create(builder, gpu::Dimension::x);
  Value headIndex = gpu::BlockIdOp::create(builder, gpu::Dimension::y);
  batch = gpu::BlockIdOp::create(builder, gpu::Dimension::z);
  if (spec.causal && spec.warpSpecialized) {
    // Heaviest first over sections of heads: the hardware starts blocks
    // roughly in linear order, so the blocks are renumbered query block
    // (last first), then (head, batch), within sections of as many heads as
    // have K and V in kSectionBytes (they stay in L2 while the section
    // runs). Each section ends on its lightest blocks, and so does the grid.
    // 32-bit arithmetic: a grid's blocks fit, and 64-bit divisions cost a
    // few hundred instructions.
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
    Value blocks = i32(gpu::GridDimOp::create(builder, gpu::Dimension::x));
    Value heads = i32(gpu::GridDimOp::create(builder, gpu::Dimension::y));
    Value batches = i32(gpu::GridDimOp::create(builder, gpu::Dimension::z));
    Value pairs = mul32(heads, batches);
    Value linear = arith::AddIOp::create(
        builder, i32(queryBlock),
        mul32(blocks, arith::AddIOp::create(builder, i32(headIndex),
                                            mul32(heads, i32(batch)))));
    constexpr int64_t kSectionBytes = 16 << 20;
    // K and V bytes of a head in KiB. Any section size from 1 to every
    // head numbers each block once, so an overflow (past 2^25 keys) would
    // only change the order.
    Value headKiB = arith::MaxUIOp::create(
        builder,
        div32(mul32(arith::MaxSIOp::create(builder, i32(kvLen), const32(1)),
                    const32(4 * spec.headDim / 16)),
              const32(64)),
        const32(1));
    Value sectionHeads = arith::MinUIOp::create(
        builder, pairs,
        arith::MaxUIOp::create(builder,
                               div32(const32(kSectionBytes / 1024), headKiB),
                               const32(1)));
    Value sectionBlocks = mul32(sectionHeads, blocks);
    Value section = div32(linear, sectionBlocks);
    Value inSection =
        arith::SubIOp::create(builder, linear, mul32(section, sectionBlocks));
    Value firstPair = mul32(section, sectionHeads);
    Value headsHere = arith::MinUIOp::create(
        builder, sectionHeads,
        arith::SubIOp::create(builder, pairs, firstPair));
    Value order = div32(inSection, headsHere);
    Value pair =
        arith::AddIOp::create(builder, firstPair, rem32(inSection, headsHere));
    queryBlock = sub(sub(toIndex(blocks), constIndex(1)), toIndex(order));
    headIndex = toIndex(rem32(pair, heads));
    batch = toIndex(div32(pair, heads));
  } else if (spec.causal) {
    // Under a causal mask the last query blocks see the most keys; the
    // hardware starts blocks roughly in x order, so run those first and let
    // the short ones fill the tail of the grid.
    Value blocks = gpu::GridDimOp::create(builder, gpu::Dimension::x);
    queryBlock = sub(sub(blocks, constIndex(1)), queryBlock);
  }
  if (spec.splitKV) {
    // Grid z is split-major: block z works on split z / batch of sequence
    // z % batch; launched with clusters of the splits along z, split-minor.
    // 32-bit divisions: a grid's z fits, and a 64-bit one is a branch and
    // a slow path in front of the key count's load.
    Value z = batch;
    splitIndex = divU32(z, batchSize);
    batch = remU32(z, batchSize);
    if (spec.clusterSplits) {
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
  // Paged sites: the sequence's key count is read first of all (it gates
  // the block's key range, whose table entries gate the first copies); it
  // is clamped where first used, after the reads that need not wait for it.
  Value keyCount;
  // Nothing above reads global memory (the parameters are constants).
  if (spec.waitForGrid)
    NVVM::GriddepcontrolOp::create(builder, NVVM::GridDepActionKind::wait);
  if (spec.paged) {
    auto ptrType = LLVM::LLVMPointerType::get(builder.getContext(), 1);
    Value address = LLVM::GEPOp::create(builder, ptrType, builder.getI32Type(),
                                        kvLens, ValueRange{toI64(batch)});
    keyCount = LLVM::LoadOp::create(builder, builder.getI32Type(), address);
  }
  threadId = gpu::ThreadIdOp::create(builder, gpu::Dimension::x);
  warp = arith::DivUIOp::create(builder, threadId, constIndex(kWarpSize));
  lane = arith::RemUIOp::create(builder, threadId, constIndex(kWarpSize));
  // Head and row divisions in 32 bits (heads and q_len · group fit, as the
  // grid does): a 64-bit one is a branch, which keeps the key count's load
  // behind it.
  group = divU32(numQueryHeads, numKvHeads);
  if (spec.packQueryHeads) {
    // Grid y runs over KV heads; the block's rows are (query, head) pairs.
    kvHead = headIndex;
  } else {
    head = headIndex;
    kvHead = divU32(head, group);
  }
  if (spec.paged) {
    // Cache offsets of a KV head; a key's page and slot are added per row.
    kBase = mul(toI64(kvHead), kStrides[2]);
    vBase = mul(toI64(kvHead), vStrides[2]);
  } else {
    kBase = tensorBase(kStrides, kvHead);
    vBase = tensorBase(vStrides, kvHead);
  }
  if (spec.maskType) {
    maskStrideQ = maskStrides[2];
    maskStrideK = maskStrides[3];
  }
  if (spec.biasType) {
    biasStrideQ = biasStrides[2];
    biasStrideK = biasStrides[3];
  }
  if (head) {
    qBase = tensorBase(qStrides, head);
    outBase = tensorBase(outStrides, head);
    if (spec.maskType)
      maskBase = tensorBase(maskStrides, head);
    if (spec.biasType)
      biasBase = tensorBase(biasStrides, head);
  } else {
    this->maskStrides = maskStrides;
    this->biasStrides = biasStrides;
  }

  // The block's queries: rowsPerBlock rows, or rowsPerBlock (query, head)
  // pairs, query-major, when heads are packed.
  Value firstRow = mul(queryBlock, constIndex(rowsPerBlock()));
  Value endRow = add(firstRow, constIndex(rowsPerBlock()));
  if (spec.packQueryHeads) {
    firstPackedRow = firstRow;
    firstQuery = divU32(firstRow, group);
    endQuery = ceilDivU32(endRow, group);
  } else {
    firstQuery = firstRow;
    endQuery = endRow;
  }
  // The keys the block visits, [begin, end), for a sequence of `keys`
  // keys.
  auto keyRange = [&](Value keys) -> std::pair<Value, Value> {
    Value offset = sub(keys, qLen);
    Value begin = constIndex(0), end = keys;
    // With masked_score, hidden keys still count for a row that sees no
    // key: key blocks are skipped only by kernels that revisit them for
    // such rows.
    if (spec.rightBound() && (!spec.maskedScore || revisitsSkippedKeys())) {
      Value last = add(add(endQuery, offset), constIndex(*spec.rightBound()));
      last = arith::MaxSIOp::create(builder, last, constIndex(0));
      end = arith::MinSIOp::create(builder, last, keys);
      if (spec.window) {
        Value first = sub(add(add(firstQuery, offset), constIndex(1)),
                          constIndex(*spec.window));
        begin = arith::MaxSIOp::create(builder, first, constIndex(0));
        // A kernel that revisits the keys before the band does so in whole
        // blocks from key 0: the band starts on a block boundary.
        if (spec.maskedScore)
          begin = mul(
              arith::DivUIOp::create(builder, begin, constIndex(kvBlockSize())),
              constIndex(kvBlockSize()));
      }
    }
    if (spec.splitKV) {
      // Split s of n takes tiles [s·t, (s + 1)·t) of the block's key range,
      // t = ceil(tiles / n): whole tiles, so only the range's ends are
      // partial. (32 bits: a sequence's keys are an i32.)
      Value span =
          arith::MaxSIOp::create(builder, sub(end, begin), constIndex(0));
      Value tiles = ceilDivU32(span, constIndex(kvBlockSize()));
      Value keysPerSplit =
          mul(ceilDivU32(tiles, numSplits), constIndex(kvBlockSize()));
      Value splitBegin = add(begin, mul(splitIndex, keysPerSplit));
      Value splitEnd =
          arith::MinSIOp::create(builder, end, add(splitBegin, keysPerSplit));
      begin = arith::MinSIOp::create(builder, splitBegin, splitEnd);
      end = splitEnd;
    }
    return {begin, end};
  };
  if (spec.paged) {
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
  }
  kvOffset = sub(kvLen, qLen);
  std::tie(kvBegin, kvEnd) = keyRange(kvLen);

  buildBody(func);
  if (spec.clusterSplits)
    emitClusterCombine();
  if (spec.launchDependents)
    NVVM::GriddepcontrolOp::create(builder,
                                   NVVM::GridDepActionKind::launch_dependents);
  gpu::ReturnOp::create(builder);
  b = nullptr;
  return func;
}
